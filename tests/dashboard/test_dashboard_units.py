"""The dashboard's pure parts: job pages, payload previews, history, the broker log,
sessions and the access rule.  No event loop but the one pytest gives async tests."""

from __future__ import annotations

import json

import pytest

from osqueue.broker.objects.payloads import BadPayload
from osqueue.dashboard.security import (
    Access,
    AllowedHosts,
    Backoff,
    LoginThrottle,
    Refused,
    Sessions,
    access_for,
    safe_next,
)
from osqueue.errors import InvalidInput
from osqueue.inspect.brokerlog import BrokerLog, DocumentMetrics
from osqueue.inspect.history import DocumentHistory, Flow, SampledHistory, flows_of
from osqueue.inspect.jobs import (
    DocumentJobs,
    JobFilter,
    decode_cursor,
    encode_cursor,
    preview,
    sort_key,
)
from osqueue.inspect.snapshot import Snapshot
from osqueue.state import BrokerInfo, ClaimOp, Document, Fail, Push, apply, to_datetime
from osqueue.state.model import BrokerPerf

T0 = 1_800_000_000.0


def build(n_per_queue: int = 7) -> Document:
    """Queues a and b, priorities 0 and 1 mixed; two of a claimed; one of b dead."""
    ops: list[object] = []
    for i in range(n_per_queue):
        ops.append(Push(id=f"a{i:02d}", payload=b"p", queue="a", priority=i % 2))
        ops.append(Push(id=f"b{i:02d}", payload=b"p", queue="b", key=f"key-b{i}"))
    ops.append(Push(id="dead1", payload=b"x", queue="b", max_attempts=1, priority=-1))
    doc, _ = apply(Document.empty(), ops, T0)  # type: ignore[arg-type]
    doc, (_claimed,) = apply(doc, [ClaimOp("w1", ("a",), max_jobs=2)], T0 + 1)
    doc, (dying,) = apply(doc, [ClaimOp("w2", ("b",))], T0 + 2)
    assert dying.jobs[0].id == "dead1"  # type: ignore[attr-defined]
    token = dying.jobs[0].claim.token  # type: ignore[attr-defined]
    doc, _ = apply(doc, [Fail("dead1", token, error="boom")], T0 + 3)
    return doc


def snapshot(doc: Document, t: float) -> Snapshot:
    return Snapshot(
        url="memory://t", doc=doc, etag=str(doc.version), read_at=t, decode_s=0.0, size_bytes=0
    )


async def walk(source: DocumentJobs, where: JobFilter, limit: int) -> list[str]:
    seen: list[str] = []
    after = None
    while True:
        page = await source.page(where, after, limit)
        seen += [j.id for j in page.jobs]
        assert len(page.jobs) <= limit
        if page.next_after is None:
            return seen
        after = decode_cursor(encode_cursor(page.next_after))


async def test_pages_cover_every_job_once_in_claim_order() -> None:
    doc = build()
    source = DocumentJobs(doc)
    expected = [j.id for j in sorted(doc.jobs.values(), key=sort_key)]
    for limit in (1, 3, 5, 100):
        assert await walk(source, JobFilter(), limit) == expected
    page = await source.page(JobFilter(), None, 4)
    assert page.total == len(doc.jobs)


async def test_filters_by_queue_status_id_and_key() -> None:
    doc = build()
    source = DocumentJobs(doc)
    claimed = await source.page(JobFilter(status="claimed"), None, 10)
    assert {j.id for j in claimed.jobs} == {"a00", "a02"}  # priority 0 first, then FIFO
    dead = await source.page(JobFilter(queue="b", status="dead"), None, 10)
    assert [j.id for j in dead.jobs] == ["dead1"]
    assert dead.total == 1
    by_queue = await source.page(JobFilter(queue="a"), None, 100)
    assert by_queue.total == 7
    assert all(j.queue == "a" for j in by_queue.jobs)
    assert [j.id for j in (await source.page(JobFilter(text="b03"), None, 5)).jobs] == ["b03"]
    assert [j.id for j in (await source.page(JobFilter(text="key-b4"), None, 5)).jobs] == ["b04"]
    assert (await source.page(JobFilter(text="nope"), None, 5)).total == 0


def test_bad_filter_cursor_and_limit_are_named() -> None:
    with pytest.raises(InvalidInput, match="status"):
        JobFilter(status="sleeping")
    with pytest.raises(InvalidInput, match="after"):
        decode_cursor("not-a-cursor")


async def test_limit_out_of_range_is_refused() -> None:
    with pytest.raises(InvalidInput, match="limit"):
        await DocumentJobs(build()).page(JobFilter(), None, 0)


def test_preview_kinds_and_cap() -> None:
    as_json = preview(json.dumps({"b": 1, "a": [1, 2]}).encode())
    assert as_json.kind == "json"
    assert '"a": [' in as_json.text
    assert preview(b"hello").kind == "text"
    binary = preview(bytes(range(256)))
    assert binary.kind == "binary"
    assert binary.text.startswith("00000000  00 01 02")
    big = preview(b"x" * 100, cap=10)
    assert (big.kind, big.text, big.size, big.truncated) == ("text", "x" * 10, 100, True)
    cut = preview("é".encode() * 10, cap=5)  # cut in the middle of a character
    assert cut.kind == "text"
    assert cut.text == "éé"
    assert cut.truncated
    assert preview(b"").kind == "empty"
    gone = BadPayload("j1", "payloads/j1=u", "3 bytes", "no object", missing=True)
    assert preview(gone).kind == "missing"


def test_sampled_history_rates_and_depth() -> None:
    doc = build()
    history = SampledHistory(resolution_s=10, window_s=100)
    history.observe(snapshot(doc, T0))
    history.observe(snapshot(doc, T0 + 5))  # inside the resolution: not kept
    more, _ = apply(doc, [Push(id=f"n{i}", payload=b"p", queue="a") for i in range(20)], T0 + 6)
    history.observe(snapshot(more, T0 + 10))
    series = history.last_hour(T0 + 10)
    assert series.times == [T0, T0 + 10]
    assert series.rates["pushed"] == [0.0, 2.0]  # 20 pushes in 10 s
    assert series.depth["a"] == [5, 25]
    assert series.depth["b"] == [7, 7]
    assert history.last_hour(T0 + 105).times == [T0 + 10]  # the window moves on
    total, per_queue = flows_of(snapshot(more, T0))
    assert total.pushed == 35
    assert per_queue == {  # each known queue's counters: they add up to the totals
        "a": Flow(pushed=27),
        "b": Flow(pushed=8, failed=1, dead=1),
    }
    assert sum(f.pushed for f in per_queue.values()) == total.pushed


def test_document_history_draws_the_brokers_minutes_then_the_live_counters() -> None:
    doc = build()  # written at T0 .. T0 + 3: one sample, for T0's minute
    assert len(doc.history) == 1
    later, _ = apply(doc, [Push(id=f"n{i}", payload=b"p", queue="a") for i in range(30)], T0 + 61)
    assert [h.at.timestamp() for h in later.history] == [T0 - T0 % 60, T0 - T0 % 60 + 60]
    history = DocumentHistory()
    history.observe(snapshot(later, T0 + 90))
    series = history.last_hour(T0 + 90)
    assert series.source.startswith("kept by the brokers in the queue document")
    assert series.times == [T0 - T0 % 60, T0 - T0 % 60 + 60, T0 + 90]
    # 7 pushed to "a" at T0; at T0 + 61 the 2 claimed in build() were reclaimed (no
    # heartbeat for 30 s) and 30 more pushed
    assert series.depth["a"] == [7, 37, 37]
    assert series.rates["pushed"] == [0.0, 30 / 60, 0.0]


def test_document_history_without_samples_falls_back_to_sampling() -> None:
    doc = build()
    doc.set_history(())  # a document written before the history ring
    history = DocumentHistory(SampledHistory(resolution_s=10, window_s=100))
    history.observe(snapshot(doc, T0))
    series = history.last_hour(T0)
    assert series.source.startswith("sampled by this dashboard")
    assert series.times == [T0]


def test_broker_log_records_each_tenure_and_the_write_rate() -> None:
    doc = build()
    log = BrokerLog(rate_window_s=60)
    for i, (epoch, address) in enumerate([(1, "h:1"), (1, "h:1"), (2, "h:2"), (2, None)]):
        doc.broker = BrokerInfo(
            id=f"b{epoch}",
            address=address,
            epoch=epoch,
            lease_until=to_datetime(T0 + 100),
            lease_s=10.0,
        )
        doc.version = 100 + 10 * i
        log.observe(snapshot(doc, T0 + i))
    assert [(t.epoch, t.address, t.seen_at) for t in log.tenures()] == [
        (2, None, T0 + 3),
        (2, "h:2", T0 + 2),
        (1, "h:1", T0),
    ]
    assert log.commit_rate() == pytest.approx(10.0)


def test_sessions_expire_and_stay_bounded() -> None:
    now = [0.0]
    sessions = Sessions(max_sessions=3, ttl_s=10, clock=lambda: now[0])
    first = sessions.login()
    assert sessions.get(first.id) is first
    for _ in range(3):
        sessions.login()
    assert len(sessions) == 3
    assert sessions.get(first.id) is None  # the oldest login, at the cap
    last = sessions.login()
    now[0] = 11.0
    assert sessions.get(last.id) is None
    assert sessions.get(None) is None
    assert sessions.get("made-up") is None
    sessions.login()
    assert len(sessions) == 1  # the expired ones went first


def test_visitors_are_never_stored_and_their_csrf_is_bound_to_their_cookie() -> None:
    sessions = Sessions(max_sessions=2)
    admin = sessions.login()
    for _ in range(10):
        visitor = sessions.visitor()
        assert not visitor.admin
    assert len(sessions) == 1
    assert sessions.get(admin.id) is admin
    again = sessions.visitor(visitor.id)
    assert (again.id, again.csrf) == (visitor.id, visitor.csrf)
    assert sessions.visitor().csrf != visitor.csrf
    assert Sessions().visitor(visitor.id).csrf != visitor.csrf  # another process's key
    assert sessions.visitor("not\nan id").id != "not\nan id"


def test_actions_need_csrf_then_a_token_then_the_login() -> None:
    sessions = Sessions()
    anonymous, admin = sessions.visitor(), sessions.login()
    access = Access(token="s3cret", open_reads=True)
    with pytest.raises(Refused, match="CSRF"):
        access.check_action(admin, "forged")
    with pytest.raises(Refused, match="CSRF"):
        access.check_action(admin, None)
    with pytest.raises(Refused, match="needs the admin token") as refused:
        access.check_action(anonymous, anonymous.csrf)
    assert refused.value.login
    assert refused.value.status == 403
    access.check_action(admin, admin.csrf)
    with pytest.raises(Refused, match="without an admin token"):
        Access(token=None, open_reads=True).check_action(admin, admin.csrf)
    assert access.token_matches("s3cret")
    assert not access.token_matches("s3cret ")
    assert not access.token_matches("")
    assert not Access(None, True).token_matches("x")


def test_listening_beyond_loopback_needs_a_token_or_insecure() -> None:
    assert access_for("127.0.0.1:0", None, insecure=False).open_reads
    assert access_for("localhost:8080", None, insecure=False).open_reads
    with pytest.raises(InvalidInput, match="not a loopback address"):
        access_for("0.0.0.0:8080", None, insecure=False)
    guarded = access_for("0.0.0.0:8080", "t", insecure=False)
    assert not guarded.open_reads
    with pytest.raises(Refused, match="log in") as refused:
        guarded.check_read(None)
    assert refused.value.status == 401
    assert access_for("0.0.0.0:8080", None, insecure=True).open_reads
    with pytest.raises(InvalidInput, match="listen"):
        access_for("nonsense", None, insecure=False)


async def test_snapshot_source_decodes_only_when_the_etag_changes() -> None:
    from osqueue.inspect.snapshot import SnapshotSource, spacing_s
    from osqueue.state import encode
    from osqueue.storage import MemoryStorage

    name = f"snap-{T0}"
    storage = MemoryStorage(name)
    try:
        doc = build()
        await storage.write("queue.json", encode(doc), if_match=None)
        seen: list[int] = []
        source = SnapshotSource(f"memory://{name}", storage=storage, refresh_s=1.0)
        source.observe(lambda s: seen.append(s.version))
        first = await source.refresh()
        again = await source.refresh()
        assert again.doc is first.doc  # the same ETag: not decoded again
        assert again.decode_s == 0.0
        assert again.read_at >= first.read_at
        changed, _ = apply(doc, [Push(id="new", payload=b"p", queue="a")], T0 + 9)
        await storage.write("queue.json", encode(changed), if_match=first.etag)
        third = await source.refresh()
        assert third.doc is not first.doc
        assert "new" in third.doc.jobs
        assert seen == [doc.version, doc.version, changed.version]  # every read is observed
        assert source.next_delay_s() == 1.0  # a fast decode: every refresh_s
        holders = third.holders(T0 + 11)
        assert [(h.worker, h.jobs, h.queues) for h in holders] == [("w1", 2, ("a",))]
        assert holders[0].oldest_heartbeat_age_s == pytest.approx(10.0)
    finally:
        MemoryStorage.drop(name)
    assert spacing_s(2.0, 3.0, 0.25) == 12.0  # a slow decode spaces the reads out


async def test_document_metrics_turn_the_brokers_summary_into_figures() -> None:
    doc = build()
    metrics = DocumentMetrics()
    assert await metrics.figures() is None  # nothing read yet
    metrics.observe(snapshot(doc, T0))
    assert await metrics.figures() is None  # no summary in this document
    doc.broker = BrokerInfo(
        id="b1",
        address="h:1",
        epoch=1,
        lease_until=to_datetime(T0 + 10),
        lease_s=10.0,
        perf=BrokerPerf(window_s=60.0, commits=120, ops=2400, p50_ms=4.0, p99_ms=9.5),
    )
    metrics.observe(snapshot(doc, T0 + 1))
    figures = await metrics.figures()
    assert figures is not None
    assert figures.commits_per_s == pytest.approx(2.0)
    assert figures.ops_per_commit == pytest.approx(20.0)
    assert figures.p99_commit_s == pytest.approx(0.0095)


# --------------------------------------------------------------------------- issue 23

OUTSIDE = [
    "",
    "//evil.example",
    "///evil.example",
    "////evil.example/x",
    "/\\evil.example",
    "\\\\evil.example",
    "\\/evil.example",
    "/\t/evil.example/phish",
    "/\n/evil.example",
    "/\r\n/evil.example",
    "\t//evil.example",
    " //evil.example",
    "/ /evil.example",
    "\x00//evil.example",
    "/%09/evil.example/phish",
    "/%0a/evil.example",
    "/%0D%0A/evil.example",
    "/%2F/evil.example",
    "/%2f%2fevil.example",
    "%2F%2Fevil.example",
    "%2F%09%2Fevil.example%2Fphish",
    "/%5Cevil.example",
    "/%5c/evil.example",
    "/%252F%252Fevil.example",
    "/%25252F%25252Fevil.example",
    "/%2525252F%2525252Fevil.example",
    "https://evil.example",
    "http:evil.example",
    "http:/evil.example",
    "//evil.example@dash",
    "javascript:alert(1)",
    "JaVaScRiPt:alert(1)",
    "data:text/html,hi",
    "evil.example",
    "jobs",
    "?next=//evil",
    "#frag",
    "/\u3000/evil.example",
    "/\u2028/evil.example",
    "/" + "a" * 2000,
]
INSIDE = [
    "/",
    "/dead",
    "/jobs?queue=emails&status=dead",
    "/jobs/j-1",
    "/jobs?q=a%20b",
    "/queues/..%2Fqueues%2Fvictim/pause",
    "/archive?day=2026-11-25&hour=3",
    "/%E3%80%80/x",
]


@pytest.mark.parametrize("target", OUTSIDE)
def test_next_that_leaves_the_site_falls_back_to_the_overview(target: str) -> None:
    assert safe_next(target) == "/"


@pytest.mark.parametrize("target", INSIDE)
def test_next_on_this_site_is_followed(target: str) -> None:
    assert safe_next(target) == target


def test_next_none_is_the_overview() -> None:
    assert safe_next(None) == "/"


def test_host_header_names_the_listen_address_or_an_allowed_name() -> None:
    rule = AllowedHosts(["dash.example", "[2001:db8::1]:443", "Proxy.Example.:8443"])
    loopback = ("127.0.0.1", 8080)
    for header in ("127.0.0.1:8080", "localhost:8080", "[::1]:8080", "[0:0::1]:8080"):
        assert rule.allows(header, loopback), header
        assert rule.allows(header, ("::1", 8080)), header
    for header in ("evil.example:8080", "127.0.0.1:8081", "localhost", "127.0.0.1:80"):
        assert not rule.allows(header, loopback), header
    for header in ("dash.example", "dash.example:1", "[2001:db8::1]:443", "proxy.example:8443"):
        assert rule.allows(header, loopback), header
    for header in ("[2001:db8::1]", "proxy.example", "a.dash.example", "dash.example:x", "a b"):
        assert not rule.allows(header, loopback), header
    public = ("10.0.0.5", 8080)
    assert rule.allows("10.0.0.5:8080", public)
    assert rule.allows("10.0.0.5:8080", ("::ffff:10.0.0.5", 8080))  # a dual-stack socket
    assert rule.allows("localhost:8080", ("::ffff:127.0.0.1", 8080))
    assert not rule.allows("localhost:8080", public)  # not where this request arrived
    assert AllowedHosts(["*"]).allows("anything.example", public)
    with pytest.raises(Refused, match="--allowed-host") as refused:
        rule.check("evil.example:8080", loopback)
    assert refused.value.status == 421
    with pytest.raises(Refused, match="none"):
        rule.check(None, loopback)
    with pytest.raises(InvalidInput, match="allowed_hosts"):
        AllowedHosts(["http://dash.example/"])
    with pytest.raises(InvalidInput, match="allowed_hosts"):
        AllowedHosts(["dash.example:99999"])


def test_failed_logins_back_off_per_client_and_overall() -> None:
    now = [0.0]
    throttle = LoginThrottle(
        per_client=Backoff(free=3, first_s=1.0, max_s=8.0, forget_s=100.0),
        overall=Backoff(free=10, first_s=2.0, max_s=4.0, forget_s=100.0),
        max_clients=50,
        clock=lambda: now[0],
    )
    for _ in range(3):
        throttle.check("a")
        throttle.failed("a")
    throttle.check("a")
    throttle.failed("a")  # the 4th: held 1 s
    with pytest.raises(Refused, match="try again in 1 s") as refused:
        throttle.check("a")
    assert (refused.value.status, refused.value.retry_after_s) == (429, 1)
    throttle.check("b")  # another client is not held back
    holds = []
    for _ in range(5):
        now[0] += 10.0
        throttle.check("a")
        throttle.failed("a")
        with pytest.raises(Refused) as refused:
            throttle.check("a")
        holds.append(refused.value.retry_after_s)
    assert holds == [2, 4, 8, 8, 8]  # doubling, capped
    throttle.succeeded("a")
    throttle.check("a")
    # many clients, one failure each: everyone is held back after 10 in all
    now[0] += 1000.0
    for i in range(11):
        throttle.failed(f"10.0.0.{i}")
    with pytest.raises(Refused, match="too many failed logins"):
        throttle.check("192.168.1.1")
    now[0] += 2.0
    throttle.check("192.168.1.1")
    for i in range(100):
        throttle.failed(f"172.16.0.{i}")
    assert len(throttle._clients) == 50  # bounded: the oldest records go
    # a quiet client is forgiven
    now[0] += 1000.0
    for _ in range(3):
        throttle.failed("c")
    now[0] += 101.0
    throttle.failed("c")
    throttle.check("c")


def test_a_name_is_one_path_segment() -> None:
    from urllib.parse import urljoin

    from osqueue.dashboard.render import segment

    for name in ("../queues/victim", "a/b", "q?x=1#f", "50%", "a b", "..\\x"):
        resolved = urljoin("http://dash/", f"/queues/{segment(name)}/pause")
        assert resolved.count("/") == 5, resolved
        assert resolved.startswith("http://dash/queues/"), resolved
