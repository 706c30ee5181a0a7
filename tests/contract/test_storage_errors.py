"""Cloud error mapping: obstore's exceptions never escape; StorageError keeps the cause.

The statuses are the servers' own: every error below is what moto or Azurite
answered (412, 404, 409 ``BlobAlreadyExists``), or what the network did to a
real exchange (:class:`~servers.http_faults.FaultyHttpProxy` drops,
holds or replaces the answer after the server applied the write).  Answers the
servers never give (S3's 409 ``ConditionalRequestConflict``, 503 throttling)
are replayed from ``recorded_errors`` with their provenance.  Each test
asserts the category and, where the write may have landed, whether it did.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import obstore.exceptions as oe
import pytest
from recorded_errors import (
    AZURE_503_SERVER_BUSY,
    GCS_503_UNAVAILABLE,
    S3_409_CONDITIONAL_REQUEST_CONFLICT,
    S3_503_SLOW_DOWN,
)
from servers import AzuriteServer, GcsShimServer, MotoS3Server, free_port
from servers.http_faults import Fault, FaultyHttpProxy
from servers.servers import AZURITE_ACCOUNT, AZURITE_KEY

from osqueue.errors import Conflict, NotFound, OutcomeUnknown, StorageError
from osqueue.storage import Storage, from_url

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


# ---------------------------------------------------------------------- errors from the servers


@dataclass
class Proxied:
    """A store that reaches the server through ``proxy``, and one that does not."""

    backend: str
    store: Storage
    #: the same prefix through the same proxy, with obstore's retries on
    retrying: Storage
    direct: Storage
    proxy: FaultyHttpProxy

    @property
    def busy(self) -> bytes:
        return {"s3": S3_503_SLOW_DOWN, "azure": AZURE_503_SERVER_BUSY}.get(
            self.backend, GCS_503_UNAVAILABLE
        )

    def last_status(self) -> int | None:
        """What the server answered to the last request it saw."""
        answered = [e.response for e in self.proxy.exchanges if e.response is not None]
        return answered[-1].status if answered else None


#: the server each backend's errors come from (gcs: the XML-API shim)
SERVERS = {"s3": "moto_server", "azure": "azurite_server", "gcs": "gcs_shim"}
#: what each server answers to a create of an existing object / If-Match on a missing one
CREATE_EXISTING = {"s3": 412, "azure": 409, "gcs": 412}
MATCH_MISSING = {"s3": 404, "azure": 412, "gcs": 412}


@pytest.fixture(params=sorted(SERVERS))
async def proxied(request: pytest.FixtureRequest) -> AsyncIterator[Proxied]:
    server: MotoS3Server | AzuriteServer | GcsShimServer = request.getfixturevalue(
        SERVERS[request.param]
    )
    prefix = f"errors/{uuid.uuid4().hex[:12]}"
    async with FaultyHttpProxy(server.port) as proxy:
        direct_url = server.url(prefix)
        through = direct_url.replace(f"127.0.0.1%3A{server.port}", f"127.0.0.1%3A{proxy.port}")
        assert through != direct_url
        store = from_url(through + "&max_retries=0&timeout_s=1")
        retrying = from_url(through + "&max_retries=2&timeout_s=1")
        yield Proxied(request.param, store, retrying, from_url(direct_url), proxy)


async def test_a_lost_race_is_a_conflict_as_the_server_answers_it(proxied: Proxied) -> None:
    store = proxied.store
    etag = await store.write("k", b"v1", if_match=None)
    with pytest.raises(Conflict) as created:
        await store.write("k", b"v2", if_match=None)
    # moto answers If-None-Match: * with 412, Azurite with 409 BlobAlreadyExists,
    # the GCS shim x-goog-if-generation-match: 0 with 412
    assert proxied.last_status() == CREATE_EXISTING[proxied.backend]
    assert isinstance(created.value.__cause__, oe.AlreadyExistsError)
    newer = await store.write("k", b"v2", if_match=etag)
    with pytest.raises(Conflict) as stale:
        await store.write("k", b"v3", if_match=etag)
    assert proxied.last_status() == 412
    assert isinstance(stale.value.__cause__, oe.PreconditionError)
    assert await proxied.direct.read("k") == (b"v2", newer)


async def test_if_match_on_a_missing_key_is_a_conflict_and_a_read_is_not_found(
    proxied: Proxied,
) -> None:
    store = proxied.store
    etag = await store.write("other", b"x", if_match=None)
    with pytest.raises(Conflict):
        await store.write("missing", b"x", if_match=etag)
    # moto answers 404 NoSuchKey, Azurite 412 ConditionNotMet, the GCS shim 412
    assert proxied.last_status() == MATCH_MISSING[proxied.backend]
    with pytest.raises(NotFound):
        await store.read("missing")
    assert proxied.last_status() == 404
    await store.delete("missing")  # 404 on a delete is success


@pytest.mark.parametrize("proxied", ["s3"], indirect=True)
async def test_a_409_conditional_request_conflict_is_a_conflict(proxied: Proxied) -> None:
    """S3's answer to a race it could not order (a recorded sample: moto never sends it;
    Azure's 409, ``BlobAlreadyExists``, is the server's own in the test above)."""
    store = proxied.store
    etag = await store.write("k", b"v1", if_match=None)
    for if_match in (etag, None):
        proxied.proxy.script.append(Fault("reply", 409, S3_409_CONDITIONAL_REQUEST_CONFLICT))
        with pytest.raises(Conflict) as info:
            await store.write("k", b"v2", if_match=if_match)
        assert "ConditionalRequestConflict" in str(info.value.__cause__)
    assert await proxied.direct.read("k") == (b"v1", etag)  # nothing changed


async def test_a_503_is_an_unknown_outcome_for_writes_and_an_error_for_reads(
    proxied: Proxied,
) -> None:
    store = proxied.store
    etag = await store.write("k", b"v1", if_match=None)
    # refused before the server saw it: nothing landed, and the client cannot know that
    proxied.proxy.script.append(Fault("reply", 503, proxied.busy))
    with pytest.raises(OutcomeUnknown) as before:
        await store.write("k", b"v2", if_match=etag)
    assert_wrapped(before.value)
    assert await proxied.direct.read("k") == (b"v1", etag)
    # the server applied it, then the answer became a 503: it landed
    proxied.proxy.script.append(Fault("apply_then_reply", 503, proxied.busy))
    with pytest.raises(OutcomeUnknown):
        await store.write("k", b"v2", if_match=etag)
    assert proxied.proxy.exchanges[-1].response is not None
    assert proxied.proxy.exchanges[-1].response.status in (200, 201)
    assert (await proxied.direct.read("k")).data == b"v2"
    proxied.proxy.script.append(Fault("reply", 503, proxied.busy, matches=_is_get))
    with pytest.raises(StorageError) as read:
        await store.read("k")
    assert not isinstance(read.value, OutcomeUnknown)  # a read changes nothing


@pytest.mark.parametrize("fault", ["apply_then_hang", "apply_then_reset"])
async def test_a_write_whose_answer_is_lost_landed_and_is_an_unknown_outcome(
    proxied: Proxied, fault: str
) -> None:
    store = proxied.store
    etag = await store.write("k", b"v1", if_match=None)
    proxied.proxy.script.append(Fault(fault))  # type: ignore[arg-type]
    with pytest.raises(OutcomeUnknown) as info:
        await store.write("k", b"v2", if_match=etag)  # times out (hang) or is reset
    assert_wrapped(info.value)
    assert (await proxied.direct.read("k")).data == b"v2"
    proxied.proxy.script.append(Fault(fault))  # type: ignore[arg-type]
    with pytest.raises(OutcomeUnknown):
        await store.put("payloads/p", b"payload")
    assert await proxied.direct.get("payloads/p") == b"payload"


async def test_a_connection_reset_before_sending_is_an_unknown_outcome_that_did_not_land(
    proxied: Proxied,
) -> None:
    store = proxied.store
    etag = await store.write("k", b"v1", if_match=None)
    proxied.proxy.script.append(Fault("reset"))
    with pytest.raises(OutcomeUnknown):
        await store.write("k", b"v2", if_match=etag)
    assert await proxied.direct.read("k") == (b"v1", etag)


async def test_the_client_librarys_retry_turns_our_own_landed_write_into_a_conflict(
    proxied: Proxied,
) -> None:
    """The echo the broker resolves by re-reading: obstore retries a conditional write
    after a 503 that came back from a write which had landed, and the retry gets 412."""
    etag = await proxied.store.write("k", b"v1", if_match=None)
    proxied.proxy.script.append(Fault("apply_then_reply", 503, proxied.busy))
    with pytest.raises(Conflict):
        await proxied.retrying.write("k", b"v2", if_match=etag)
    first, retry = [e for e in proxied.proxy.exchanges if e.request.method == "PUT"][-2:]
    assert first.response is not None
    assert first.response.status in (200, 201)  # it landed
    assert retry.response is not None
    assert retry.response.status == 412  # and the retry lost to it
    assert (await proxied.direct.read("k")).data == b"v2"


def _is_get(request: object) -> bool:
    return getattr(request, "method", None) == "GET"


async def test_missing_gcs_bucket_is_a_storage_error(gcs_shim: GcsShimServer) -> None:
    url = gcs_shim.url("p").replace(f"gs://{gcs_shim.bucket}/", "gs://no-such-bucket/")
    store = from_url(url)
    for call in (lambda: store.read("k"), lambda: store.write("k", b"v", if_match=None)):
        with pytest.raises(StorageError) as info:
            await call()
        assert "bucket or container does not exist" in str(info.value)
        assert_wrapped(info.value)


async def test_a_refused_signature_is_a_definite_storage_error(
    azurite_server: AzuriteServer,
) -> None:
    """Azurite's 403 for a wrong account key: a 4xx changed nothing, so even a write is a
    plain ``StorageError`` (not an unknown outcome), and it names the refusal."""
    wrong_key = AZURITE_KEY[:-8] + "AAAAAAA="
    url = azurite_server.url(f"errors/{uuid.uuid4().hex[:12]}", account_key=wrong_key)
    store = from_url(url + "&max_retries=0")
    for call in (
        lambda: store.read("k"),
        lambda: store.write("k", b"v", if_match=None),
        lambda: store.put("k", b"v"),
    ):
        with pytest.raises(StorageError) as info:
            await call()
        assert type(info.value) is StorageError
        assert "access denied" in str(info.value)
        assert_wrapped(info.value)
