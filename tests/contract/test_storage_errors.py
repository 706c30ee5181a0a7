"""Cloud error mapping: obstore's exceptions never escape; StorageError keeps the cause."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import obstore.exceptions as oe
import pytest

from osqueue.errors import Conflict, NotFound, OutcomeUnknown, StorageError
from osqueue.storage import from_url
from osqueue.storage.cloud import translate
from osqueue.testing import AzuriteServer, MotoS3Server, free_port
from osqueue.testing.servers import AZURITE_ACCOUNT, AZURITE_KEY

FAST = "max_retries=0&timeout_s=0.5&connect_timeout_s=0.5"


def s3_url(port: int, bucket: str = "bucket") -> str:
    return (
        f"s3://{bucket}/p?endpoint=http://127.0.0.1:{port}&access_key_id=a"
        f"&secret_access_key=b&region=us-east-1&{FAST}"
    )


def az_url(port: int) -> str:
    return (
        f"az://container/p?account_name={AZURITE_ACCOUNT}"
        f"&account_key={AZURITE_KEY.replace('+', '%2B')}"
        f"&endpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT}&{FAST}"
    )


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (kernel backlog) but never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


def assert_wrapped(error: BaseException) -> None:
    """An osqueue error whose cause is the exception obstore raised (its own, or an OSError)."""
    assert isinstance(error, StorageError)
    assert isinstance(error.cause, oe.BaseError | OSError)
    assert error.__cause__ is error.cause


@pytest.mark.parametrize("make_url", [s3_url, az_url], ids=["s3", "azure"])
async def test_dead_endpoint_is_a_storage_error_with_cause(make_url: object) -> None:
    assert callable(make_url)
    store = from_url(make_url(free_port()))
    for call in (lambda: store.read("k"), store.list):
        with pytest.raises(StorageError) as info:
            await call()
        assert not isinstance(info.value, OutcomeUnknown)
        assert_wrapped(info.value)
    # never connected, so nothing was sent: a definite failure, not an unknown outcome
    with pytest.raises(StorageError) as info:
        await store.write("k", b"v", if_match=None)
    assert not isinstance(info.value, OutcomeUnknown)
    assert_wrapped(info.value)


@pytest.mark.parametrize("make_url", [s3_url, az_url], ids=["s3", "azure"])
async def test_a_write_without_answer_has_an_unknown_outcome(
    make_url: object, silent_port: int
) -> None:
    assert callable(make_url)
    store = from_url(make_url(silent_port))
    with pytest.raises(OutcomeUnknown) as info:
        await store.write("k", b"v", if_match="etag")
    assert_wrapped(info.value)
    with pytest.raises(OutcomeUnknown):
        await store.put("k", b"v")
    with pytest.raises(StorageError) as read_info:
        await store.read("k")
    assert not isinstance(read_info.value, OutcomeUnknown)  # a read changes nothing


async def test_missing_bucket_is_a_storage_error_not_not_found(
    moto_server: MotoS3Server,
) -> None:
    url = moto_server.url("p").replace(f"s3://{moto_server.bucket}/", "s3://no-such-bucket/")
    store = from_url(url)
    for call in (lambda: store.read("k"), lambda: store.write("k", b"v", if_match=None)):
        with pytest.raises(StorageError) as info:
            await call()
        assert "bucket or container does not exist" in str(info.value)
        assert_wrapped(info.value)


async def test_missing_container_is_a_storage_error(azurite_server: AzuriteServer) -> None:
    url = azurite_server.url("p").replace(
        f"az://{azurite_server.container}/", f"az://missing-{uuid.uuid4().hex[:8]}/"
    )
    store = from_url(url)
    with pytest.raises(StorageError) as info:
        await store.put("k", b"v")
    assert "does not exist" in str(info.value)
    assert_wrapped(info.value)


def test_translate_maps_statuses() -> None:
    def mapped(text: str, *, op: str = "write", mutating: bool = True) -> Exception:
        return translate(oe.GenericError(text), op=op, key="k", url="s3://b", mutating=mutating)

    conflict = mapped(
        "Error performing PUT - inner: Status { status: 409, ConditionalRequestConflict"
    )
    assert isinstance(conflict, Conflict)
    assert isinstance(mapped("inner: Status { status: 503, SlowDown }"), OutcomeUnknown)
    assert isinstance(mapped("HttpError { kind: Timeout, source: TimedOut }"), OutcomeUnknown)
    forbidden = mapped("inner: Status { status: 403, AccessDenied }")
    assert type(forbidden) is StorageError
    refused = mapped("HttpError { kind: Connect, ConnectionRefused }")
    assert type(refused) is StorageError
    read_timeout = mapped("kind: Timeout", op="read", mutating=False)
    assert type(read_timeout) is StorageError
    precondition = translate(
        oe.PreconditionError("412"), op="write", key="k", url="s3://b", mutating=True
    )
    assert isinstance(precondition, Conflict)
    exists = translate(oe.AlreadyExistsError("412"), op="write", key="k", url="u", mutating=True)
    assert isinstance(exists, Conflict)
    missing = FileNotFoundError("Object at location k not found")
    assert isinstance(translate(missing, op="read", key="k", url="u", mutating=False), NotFound)
    assert isinstance(translate(missing, op="write", key="k", url="u", mutating=True), Conflict)
