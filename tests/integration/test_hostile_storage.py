"""Hostile storage content: what the broker does when the bucket holds bytes it did
not write.

* A payload object that is missing, truncated, or replaced by other bytes of the
  same size never reaches a handler: its job is failed alone (retries and the
  dead-letter apply), with an error naming the object, and the rest of the
  claim is returned.  In process and over gRPC, on every backend.
* A queue document replaced while a broker serves (garbage, or an older
  version) stops the broker at its next write, which answers with the error,
  and the stored bytes are never overwritten.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import pytest
from corrupt_archive import write_corrupt_archive
from remote_helpers import fast_config, quiet_broker_config
from typer.testing import CliRunner

import osqueue
from osqueue.broker.core.broker import State
from osqueue.broker.inproc.claimed import ClaimedJobs
from osqueue.broker.objects.payloads import BadPayload, Payloads
from osqueue.cli.app import app
from osqueue.client.remote import RemoteClient, connect
from osqueue.errors import CorruptDocument, DocumentGone
from osqueue.server.runner import BrokerServer
from osqueue.server.server import ServerConfig
from osqueue.state import DOCUMENT_KEY, ClaimOp, StoredJob
from osqueue.state.model import to_datetime
from osqueue.storage import MemoryStorage, from_url
from osqueue.storage.port import Storage

#: Payloads above this go to objects under payloads/.
INLINE_MAX = 1024
SIZE = 100_000


def payload(tag: bytes) -> bytes:
    return (tag * SIZE)[:SIZE]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(params=["memory", "file", "s3", "azure"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh queue prefix on each backend (moto S3 and Azurite are the session servers)."""
    unique = uuid.uuid4().hex[:12]
    if request.param == "memory":
        yield f"memory://hostile-{unique}"
        MemoryStorage.drop(f"hostile-{unique}")
    elif request.param == "file":
        directory = tmp_path / "queue"
        directory.mkdir()
        yield directory.as_uri()
    else:
        server = request.getfixturevalue(
            "moto_server" if request.param == "s3" else "azurite_server"
        )
        yield server.url(f"hostile/{unique}")


@pytest.fixture
async def storage(store_url: str) -> AsyncIterator[Storage]:
    """A second handle on the queue's storage: the hostile writer."""
    store = from_url(store_url)
    try:
        yield store
    finally:
        await store.close()


async def damage(storage: Storage, key: str, how: str, original: bytes) -> str:
    """Make the object at ``key`` hostile; returns what a reader finds now."""
    if how == "missing":
        await storage.delete(key)
        return "no object"
    # truncated to 1,000 bytes, or replaced by other bytes of the same size
    flipped = original[:-1] + bytes([original[-1] ^ 0xFF])
    data = original[:1000] if how == "truncated" else flipped
    await storage.put(key, data)
    return f"{len(data)} bytes with sha256 {sha(data)}"


def assert_failed_for(job: StoredJob, key: str, original: bytes, found: str) -> None:
    error = job.last_error or ""
    assert key in error
    assert f"expected {len(original)} bytes with sha256 {sha(original)}" in error
    if found == "no object":
        assert "is missing" in error
    else:
        assert f"found {found}" in error


# --------------------------------------------------------------------------- payload objects


@pytest.mark.parametrize("how", ["truncated", "replaced", "missing"])
async def test_a_bad_payload_object_fails_its_job_and_the_rest_of_the_claim_is_served(
    store_url: str, storage: Storage, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = quiet_broker_config(inline_payload_max_bytes=INLINE_MAX)
    async with osqueue.Broker(store_url, config) as broker:
        q = broker.client()
        first = await q.push(payload(b"a"))
        bad = await q.push(payload(b"b"), max_attempts=1)
        inline = await q.push(b"small")
        last = await q.push(payload(b"c"))
        stored = broker.document.jobs[bad]
        key = str(stored.payload_ref)
        assert stored.payload_ref_bytes == SIZE
        assert stored.payload_ref_sha256 == sha(payload(b"b"))
        found = await damage(storage, key, how, payload(b"b"))

        with caplog.at_level(logging.ERROR, logger="osqueue.broker"):
            jobs = await q.claim("w", max_jobs=4)

        assert {j.id: j.payload for j in jobs} == {
            first: payload(b"a"),
            inline: b"small",
            last: payload(b"c"),
        }
        failed = broker.document.jobs[bad]
        assert failed.status == "dead"  # failed at once, through Fail: its one attempt is spent
        assert failed.attempts == 1
        assert_failed_for(failed, key, payload(b"b"), found)
        (record,) = [r for r in caplog.records if r.__dict__.get("action") == "payload-check"]
        assert record.levelno == logging.ERROR
        assert record.__dict__["key"] == key
        assert record.__dict__["job"] == bad
        # the good jobs are held as usual
        for job in jobs:
            await q.complete(job)
        assert (await q.stats()).dead == 1


async def test_a_bad_payload_object_is_retried_then_dead_lettered() -> None:
    store = MemoryStorage()
    config = osqueue.BrokerConfig(
        inline_payload_max_bytes=INLINE_MAX, backoff_base_s=0.0, heartbeat_timeout_s=600.0
    )
    async with osqueue.Broker(store, config) as broker:
        q = broker.client()
        bad = await q.push(payload(b"b"), max_attempts=2)
        key = str(broker.document.jobs[bad].payload_ref)
        await store.put(key, payload(b"b")[:1000])
        assert await q.claim("w") == []
        job = broker.document.jobs[bad]
        assert (job.status, job.attempts) == ("queued", 1)  # back in the queue for a retry
        assert key in (job.last_error or "")
        assert await q.claim("w") == []
        job = broker.document.jobs[bad]
        assert (job.status, job.attempts) == ("dead", 2)
        # a repaired object is served once the dead job is retried
        await store.put(key, payload(b"b"))
        assert await q.retry_dead([bad]) == 1
        (served,) = await q.claim("w")
        assert served.payload == payload(b"b")


async def test_a_long_poll_and_complete_and_claim_check_payload_objects_too() -> None:
    store = MemoryStorage()
    config = osqueue.BrokerConfig(inline_payload_max_bytes=INLINE_MAX, heartbeat_timeout_s=600.0)
    async with osqueue.Broker(store, config) as broker:
        q = broker.client()
        held = await q.push(b"small")
        (job,) = await q.claim("w")
        assert job.id == held
        bad = await q.push(payload(b"b"), max_attempts=1)
        good = await q.push(payload(b"g"))
        await store.put(str(broker.document.jobs[bad].payload_ref), payload(b"x"))
        errors, jobs = await q.complete_and_claim([job], "w", max_jobs=2)
        assert errors == [None]
        assert [j.id for j in jobs] == [good]
        assert broker.document.jobs[bad].status == "dead"
        bad2 = await q.push(payload(b"d"), max_attempts=1)
        await store.delete(str(broker.document.jobs[bad2].payload_ref))
        assert await q.claim("w", wait_s=5.0) == []
        assert "is missing" in (broker.document.jobs[bad2].last_error or "")


async def test_a_job_cancelled_before_its_object_was_read_is_left_out_and_not_failed() -> None:
    store = MemoryStorage()
    config = osqueue.BrokerConfig(inline_payload_max_bytes=INLINE_MAX, heartbeat_timeout_s=600.0)
    async with osqueue.Broker(store, config) as broker:
        q = broker.client()
        gone = await q.push(payload(b"g"))
        kept = await q.push(payload(b"k"))
        key = str(broker.document.jobs[gone].payload_ref)
        claimed = await broker.submit(ClaimOp("w", max_jobs=2))  # committed, not read yet
        await q.cancel(gone)  # the job leaves; its object is deleted after the commit
        await store.delete(key)  # (that delete runs in the background: done here at once)
        jobs = await ClaimedJobs(broker).jobs(claimed)
        assert [j.id for j in jobs] == [kept]
        assert broker.counters.ops == 4  # two pushes, the claim, the cancel: no Fail was sent
        assert (await q.stats()).dead == 0


async def test_a_job_pushed_before_digests_were_recorded_is_read_unchecked() -> None:
    store = MemoryStorage()
    await store.put("payloads/old=u", b"whatever the object holds")
    old = StoredJob("old", "default", 1, "queued", to_datetime(0.0), payload_ref="payloads/old=u")
    assert await Payloads(store).read(old) == b"whatever the object holds"
    sized = msgspec.structs.replace(old, payload_ref_bytes=3)
    with pytest.raises(BadPayload, match="expected 3 bytes, found 25 bytes"):
        await Payloads(store).read(sized)


async def test_over_grpc_a_bad_payload_object_fails_its_job_alone(
    queue_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = quiet_broker_config(inline_payload_max_bytes=INLINE_MAX)
    async with BrokerServer(queue_url, ServerConfig(listen="127.0.0.1:0"), config) as server:
        client = await connect(queue_url, config=fast_config())
        assert isinstance(client, RemoteClient)
        store = from_url(queue_url)
        try:
            good = await client.push(payload(b"a"))
            bad = await client.push(payload(b"b"), max_attempts=1)
            assert server.broker is not None
            key = str(server.broker.document.jobs[bad].payload_ref)
            found = await damage(store, key, "truncated", payload(b"b"))
            with caplog.at_level(logging.ERROR, logger="osqueue.broker"):
                jobs = await client.claim("w", max_jobs=2)
            assert [(j.id, j.payload) for j in jobs] == [(good, payload(b"a"))]
            dead = server.broker.document.jobs[bad]
            assert dead.status == "dead"
            assert_failed_for(dead, key, payload(b"b"), found)
            assert any(r.__dict__.get("key") == key for r in caplog.records)
        finally:
            await store.close()
            await client.close()


# --------------------------------------------------------------------------- the document


@pytest.fixture(params=["memory", "file"])
def local_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    unique = uuid.uuid4().hex[:12]
    if request.param == "memory":
        yield f"memory://hostile-doc-{unique}"
        MemoryStorage.drop(f"hostile-doc-{unique}")
    else:
        directory = tmp_path / "queue"
        directory.mkdir()
        yield directory.as_uri()


@pytest.mark.parametrize("replacement", ["garbage", "older version"])
async def test_a_document_replaced_while_serving_stops_the_broker_without_overwriting_it(
    local_url: str, replacement: str
) -> None:
    outsider = from_url(local_url)
    broker = osqueue.Broker(local_url, quiet_broker_config())
    await broker.start()
    try:
        q = broker.client()
        await q.push(b"first")
        older = (await outsider.read(DOCUMENT_KEY)).data
        await q.push(b"second")
        hostile = b'{"format": 4, "version": \x00garbage' if replacement == "garbage" else older
        await outsider.put(DOCUMENT_KEY, hostile)

        expected = CorruptDocument if replacement == "garbage" else DocumentGone
        with pytest.raises(expected):  # the push that makes the broker write is answered so
            await q.push(b"third")
        assert broker.state is State.FAILED
        assert isinstance(broker.failure, expected)
        with pytest.raises(expected):  # and so is every op after it
            await q.push(b"fourth")
        assert (await outsider.read(DOCUMENT_KEY)).data == hostile
    finally:
        await broker.stop()
        await outsider.close()
    assert (await from_url(local_url).read(DOCUMENT_KEY)).data == hostile  # stop wrote nothing


# --------------------------------------------------------------------------- the archive


def test_archive_verify_reports_every_corrupt_line_with_its_key_and_line(tmp_path: Path) -> None:
    directory = tmp_path / "queue"
    directory.mkdir()
    good, bad = write_corrupt_archive(directory)
    url = directory.as_uri()

    result = CliRunner().invoke(app, ["archive", url, "--verify"])
    assert result.exit_code == 6, (result.stdout, result.stderr)
    listed = [row.strip() for row in result.stdout.splitlines() if " line " in row]
    assert [
        (row.split(" line ")[0], int(row.split(" line ")[1].split()[0])) for row in listed
    ] == bad
    assert f"verified 3 objects, {good + len(bad)} lines: 4 corrupt lines" in result.stdout
    (error,) = result.stderr.strip().splitlines()
    assert error.startswith("error: CorruptDocument: 4 corrupt archive lines in 2 objects")
    assert f"{bad[0][0]} line 2 (byte " in error

    as_json = CliRunner().invoke(app, ["archive", url, "--verify", "--json"])
    assert as_json.exit_code == 6
    report = json.loads(as_json.stdout)["verify"]
    assert report["objects"] == 3
    assert [(c["key"], c["line"]) for c in report["corrupt"]] == bad
    assert "blank line" in report["corrupt"][1]["reason"]
    assert "version 7 in the object of version 2" in report["corrupt"][2]["reason"]
    assert "truncated" in report["corrupt"][3]["reason"]  # the record was cut mid-line

    listing = CliRunner().invoke(app, ["archive", url])  # without --verify: a listing only
    assert listing.exit_code == 0


def test_archive_verify_passes_an_archive_the_broker_wrote(tmp_path: Path) -> None:
    directory = tmp_path / "queue"
    directory.mkdir()

    async def complete_five() -> None:
        async with osqueue.Broker(directory.as_uri(), quiet_broker_config()) as broker:
            q = broker.client()
            await q.push_many([osqueue.NewJob(b"%d" % i) for i in range(5)])
            for job in await q.claim("w", max_jobs=5):
                await q.complete(job)

    asyncio.run(complete_five())
    result = CliRunner().invoke(app, ["archive", directory.as_uri(), "--verify"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "verified 5 objects, 5 lines: 0 corrupt lines" in result.stdout
