"""Tokens, access levels, fingerprints and addresses: the rules both sides share."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from osqueue.address import is_local_address
from osqueue.client.remote import RemoteConfig
from osqueue.client.remote.trust import Trust
from osqueue.errors import InvalidInput, PermissionDenied, Unauthenticated, UntrustedBroker
from osqueue.server.auth import Tokens
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire.auth import (
    METHOD_ACCESS,
    SCHEME,
    Access,
    access_needed,
    methods_allowed,
)
from osqueue.wire.status import from_status, grpc_code, to_status
from osqueue.wire.tls import parse_fingerprints

FP = "ab" * 32


def test_every_rpc_of_the_service_is_classified() -> None:
    service = pb.DESCRIPTOR.services_by_name["Queue"]
    assert set(METHOD_ACCESS) == {method.name for method in service.methods}


def test_access_needed_per_method() -> None:
    assert access_needed("/grpc.health.v1.Health/Check") is None
    assert access_needed("/osqueue.v1.Queue/Stats") is Access.READ
    assert access_needed("/osqueue.v1.Queue/Push") is Access.WRITE
    assert access_needed("/osqueue.v1.Queue/ClaimStream") is Access.WRITE
    assert access_needed("/osqueue.v1.Queue/PurgeDead") is Access.ADMIN
    # Not in the table (a newer RPC, another service): admin only, never open.
    assert access_needed("/osqueue.v1.Queue/SomethingNew") is Access.ADMIN
    assert access_needed("/other.Service/Stats") is Access.ADMIN
    assert methods_allowed(Access.READ) == ["Stats"]
    assert "Cancel" not in methods_allowed(Access.WRITE)
    assert set(methods_allowed(Access.ADMIN)) == set(METHOD_ACCESS)


def test_tokens_map_to_their_levels() -> None:
    tokens = Tokens("admin-t", write="write-t", read="read-t")
    assert tokens.access_of((SCHEME + "admin-t").encode()) is Access.ADMIN
    assert tokens.access_of((SCHEME + "write-t").encode()) is Access.WRITE
    assert tokens.access_of((SCHEME + "read-t").encode()) is Access.READ
    assert tokens.access_of((SCHEME + "read-tt").encode()) is None
    assert tokens.access_of(b"read-t") is None  # without the scheme
    assert Tokens("only").access_of((SCHEME + "only").encode()) is Access.ADMIN


def test_token_settings_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        Tokens.resolve(None, None, read=("read-t", None))
    assert caught.value.field == "read_token"
    assert "admin token" in str(caught.value)
    with pytest.raises(InvalidInput) as caught:
        Tokens.resolve(None, None, write=("write-t", None))
    assert caught.value.field == "write_token"
    with pytest.raises(InvalidInput) as caught:
        Tokens.resolve("same", None, read=("same", None))
    assert caught.value.field == "read_token"
    assert "differ" in str(caught.value)
    with pytest.raises(InvalidInput) as caught:
        Tokens.resolve("admin-t", None, write=("w", "file"))
    assert caught.value.field == "write_token_file"
    with pytest.raises(InvalidInput) as caught:
        Tokens.resolve("admin-t", None, read=("has space", None))
    assert caught.value.field == "read_token"
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(InvalidInput) as caught:
        Tokens.resolve("admin-t", None, read=(None, str(empty)))
    assert caught.value.field == "read_token_file"
    token_file = tmp_path / "read"
    token_file.write_text("read-from-file\n")
    tokens = Tokens.resolve("admin-t", None, read=(None, str(token_file)))
    assert tokens == Tokens("admin-t", read="read-from-file")
    assert Tokens.resolve(None, None) is None


def test_permission_denied_travels_as_its_own_class_and_code() -> None:
    status = to_status(PermissionDenied("Push needs the write token"))
    assert grpc_code(status) == grpc.StatusCode.PERMISSION_DENIED
    assert status.reason == pb.REASON_UNAUTHENTICATED  # older clients: Unauthenticated
    back = from_status(status)
    assert type(back) is PermissionDenied
    assert str(back) == "Push needs the write token"
    plain = to_status(Unauthenticated("no token"))
    assert grpc_code(plain) == grpc.StatusCode.UNAUTHENTICATED
    assert type(from_status(plain)) is Unauthenticated


@pytest.mark.parametrize(
    "text",
    [
        FP,
        FP.upper(),
        ":".join(FP[i : i + 2] for i in range(0, 64, 2)).upper(),
        f"sha256:{FP}",
        "sha256 Fingerprint=" + ":".join(FP[i : i + 2] for i in range(0, 64, 2)).upper(),
    ],
)
def test_fingerprints_are_read_in_the_usual_spellings(text: str) -> None:
    assert parse_fingerprints(text) == {FP}


def test_several_fingerprints_and_bad_ones() -> None:
    assert parse_fingerprints(f"{FP}, {'cd' * 32}") == {FP, "cd" * 32}
    for bad in ("", "abc", "zz" * 32, FP + "00"):
        with pytest.raises(InvalidInput) as caught:
            parse_fingerprints(bad)
        assert caught.value.field == "tls_fingerprint"
    with pytest.raises(InvalidInput) as caught:
        RemoteConfig(tls_fingerprint="not-a-fingerprint")
    assert caught.value.field == "tls_fingerprint"
    assert RemoteConfig(tls_fingerprint=FP).uses_tls


def test_which_addresses_stay_on_this_machine() -> None:
    for local in ("127.0.0.1:7070", "localhost:1", "[::1]:7070", "127.8.9.1:80", "unix:/tmp/s"):
        assert is_local_address(local), local
    for remote in ("10.0.0.42:7070", "0.0.0.0:7070", "broker.example:7070", "[2001:db8::1]:1"):
        assert not is_local_address(remote), remote
    assert not is_local_address("no port here")


async def test_plaintext_rule_without_a_token_or_on_loopback_lets_the_channel_open() -> None:
    assert await Trust(RemoteConfig()).credentials_for("203.0.113.7:7070") is None
    assert await Trust(RemoteConfig(token="t")).credentials_for("127.0.0.1:7070") is None
    with pytest.raises(UntrustedBroker):
        await Trust(RemoteConfig(token="t")).credentials_for("203.0.113.7:7070")
    allowed = Trust(RemoteConfig(token="t", allow_plaintext_token=True))
    assert await allowed.credentials_for("203.0.113.7:7070") is None
