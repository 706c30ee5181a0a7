"""A flood of idle connections on every port: the broker keeps its lease and answers.

Each server runs as a real ``osqueue`` process whose open-files limit is
lowered (soft and hard, so raising the soft limit cannot escape it) to
:data:`LIMIT`.  :data:`FLOOD` connections, more than that limit, are then
held open on one port at a time: idle HTTP/2 connections on the gRPC port
(the preface and a SETTINGS frame, no call, no token), and slow requests that
never finish their head on the metrics and the dashboard ports (a few bytes
of a header line at a time).  Throughout, the broker renews its lease (the
document's version and ``lease_until`` move on) and a client connected
before the flood has its pushes answered; connections past a listener's cap
are closed at once, slow heads are cut, and every port answers again after.

Nothing sleeps: the tests wait on sockets, on output lines and on the
document's version, each with a deadline.
"""

from __future__ import annotations

import contextlib
import resource
import selectors
import signal
import socket
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from remote_helpers import fast_config
from test_cli import TIMEOUT_S, Proc, procs, qdir, read_doc, seed, url_of

from osqueue.client.sync import SyncClient, connect_sync

__all__ = ["procs", "qdir"]  # fixtures, imported for their use here

#: The open-files limit (soft and hard) of the flooded processes.
LIMIT = 512
#: Connections held open on each port: more than the process may open files.
FLOOD = LIMIT + 100
#: How long one wait (a connection, a cut connection) may take.
WAIT_S = 20.0
#: The broker's lease: a version at least every third of it while it serves.
LEASE_S = 2.0
#: How long each flood is held while the lease is watched.
HOLD_S = 3 * LEASE_S

#: An idle HTTP/2 connection: the client preface and an empty SETTINGS frame.
H2_IDLE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
#: The start of a request whose head never ends (it grows one byte at a time).
SLOW_HEAD = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "

#: Runs ``osqueue`` with RLIMIT_NOFILE lowered to argv[1] (soft) and argv[2] (hard).
LIMITED = (
    "import resource, runpy, sys\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[2])))\n"
    "sys.argv = ['osqueue', *sys.argv[3:]]\n"
    "runpy.run_module('osqueue.cli', run_name='__main__')\n"
)


@pytest.fixture(autouse=True)
def _room_for_the_flood() -> Iterator[None]:
    """This process holds every flood connection: let it open them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4 * FLOOD
    if soft != resource.RLIM_INFINITY and soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.fail(f"the open-files hard limit ({hard}) is below {want}: raise it")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def spawn_limited(procs: list[Proc], cwd: Path, *args: str, soft: int = LIMIT) -> Proc:
    proc = Proc([sys.executable, "-c", LIMITED, str(soft), str(LIMIT), *args], cwd)
    procs.append(proc)
    return proc


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def open_flood(port: int, opening: bytes) -> list[socket.socket]:
    """:data:`FLOOD` connections to ``port``, each sent ``opening``."""
    socks: list[socket.socket] = []
    for _ in range(FLOOD):
        sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        socks.append(sock)
        with contextlib.suppress(OSError):  # closed at once: what a capped listener does
            sock.sendall(opening)
    return socks


class Flood:
    """Flood connections, watched: which ones the server closed, while the
    slow ones keep sending a byte of their head at every turn."""

    def __init__(self, socks: list[socket.socket], *, dribble: bytes | None) -> None:
        self.socks = socks
        self.dribble = dribble
        self.closed = 0
        self._selector = selectors.DefaultSelector()
        for sock in socks:
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ)

    def turn(self, wait_s: float) -> None:
        """Wait up to ``wait_s`` for the server to write or close; dribble once."""
        for key, _ in self._selector.select(timeout=wait_s):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self._selector.unregister(sock)
                self.closed += 1
        if self.dribble is not None:
            for key in list(self._selector.get_map().values()):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                with contextlib.suppress(OSError):  # noticed as closed on a later turn
                    sock.send(self.dribble)

    def close(self) -> None:
        self._selector.close()
        for sock in self.socks:
            sock.close()


def hold(flood: Flood, qdir: Path, client: SyncClient, what: str) -> None:
    """For :data:`HOLD_S` of ``flood``, the document never goes :data:`LEASE_S`
    without a new version (so no standby could take the queue over), and a push
    from ``client``, connected before the flood, is answered."""
    first = read_doc(qdir)
    assert first.broker is not None
    with ThreadPoolExecutor(1) as pool:
        pushed = pool.submit(client.push, f"during the {what} flood".encode(), queue="flood")
        version = first.version
        start = seen = time.monotonic()
        while (now := time.monotonic()) - start < HOLD_S:
            doc = read_doc(qdir)
            if doc.version != version:
                version, seen = doc.version, now
            elif now - seen >= LEASE_S:
                raise AssertionError(
                    f"the {what} flood stopped the lease: no new version for {now - seen:.1f} s "
                    f"(version {version}, lease {LEASE_S:g} s)"
                )
            flood.turn(0.1)
        assert pushed.result(timeout=0) in read_doc(qdir).jobs
    assert version >= first.version + 3  # renewed again and again
    assert doc.broker is not None
    assert doc.broker.lease_until > first.broker.lease_until
    assert doc.broker.epoch == first.broker.epoch  # by the same broker throughout


def wait_all_closed(flood: Flood, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while flood.closed < len(flood.socks):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what}: {len(flood.socks) - flood.closed} of {len(flood.socks)} slow "
                f"connections still open after {WAIT_S:g} s"
            )
        flood.turn(0.25)


@pytest.mark.slow
def test_a_flood_on_the_grpc_and_metrics_ports_leaves_the_lease_and_pushes_alone(
    qdir: Path, procs: list[Proc]
) -> None:
    url = url_of(qdir)
    broker = spawn_limited(
        procs,
        qdir,
        "broker",
        url,
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--lease-s",
        str(LEASE_S),
    )
    address = broker.expect(broker.err, r"serving \S+ at (127\.0\.0\.1:\d+)").group(1)
    metrics = broker.expect(broker.err, r"metrics at (http://127\.0\.0\.1:(\d+)/metrics)")
    client = connect_sync(url, config=fast_config())
    try:
        client.push(b"before the flood", queue="flood")

        grpc_flood = Flood(open_flood(port_of(address), H2_IDLE), dribble=None)
        try:
            hold(grpc_flood, qdir, client, "gRPC")
            assert grpc_flood.closed > 0  # past the cap, closed at once
        finally:
            grpc_flood.close()

        metrics_flood = Flood(open_flood(int(metrics.group(2)), SLOW_HEAD), dribble=b"a")
        try:
            hold(metrics_flood, qdir, client, "metrics")
            assert metrics_flood.closed > 0
        finally:
            metrics_flood.close()
    finally:
        client.close()

    # Both ports answer again: a new connection's push, a scrape.
    with connect_sync(url, config=fast_config()) as fresh:
        assert fresh.push(b"after the flood", queue="flood") in read_doc(qdir).jobs
    with urllib.request.urlopen(metrics.group(1), timeout=TIMEOUT_S) as answer:
        assert answer.status == 200
    broker.popen.send_signal(signal.SIGTERM)
    assert broker.wait() == 0


@pytest.mark.slow
def test_a_slow_flood_on_the_dashboard_is_cut_and_the_dashboard_answers_after(
    qdir: Path, procs: list[Proc], monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(qdir)
    monkeypatch.setenv("OSQUEUE_DASHBOARD_HEADER_TIMEOUT_S", "1")
    dashboard = spawn_limited(
        procs,
        qdir,
        "dashboard",
        url_of(qdir),
        "--listen",
        "127.0.0.1:0",
        "--refresh-s",
        "0.5",
    )
    found = dashboard.expect(dashboard.err, r"dashboard for \S+ at (http://127\.0\.0\.1:(\d+))")
    flood = Flood(open_flood(int(found.group(2)), SLOW_HEAD), dribble=b"a")
    try:
        # Past the cap at once, the rest after the head timeout, though every
        # one of them keeps sending.
        wait_all_closed(flood, "dashboard")
    finally:
        flood.close()
    with urllib.request.urlopen(f"{found.group(1)}/api/overview", timeout=TIMEOUT_S) as answer:
        assert answer.status == 200
    dashboard.popen.send_signal(signal.SIGTERM)
    assert dashboard.wait() == 0


@pytest.mark.slow
def test_the_broker_raises_its_open_files_limit_and_caps_connections_by_it(
    qdir: Path, procs: list[Proc]
) -> None:
    broker = spawn_limited(
        procs,
        qdir,
        "--log-level",
        "info",
        "broker",
        url_of(qdir),
        "--listen",
        "127.0.0.1:0",
        soft=LIMIT // 4,
    )
    broker.expect(broker.err, r"serving \S+ at 127\.0\.0\.1:\d+")
    said = " ".join(" ".join(broker.err_lines).split())  # the log handler wraps lines
    assert f"open-files limit raised from {LIMIT // 4} to {LIMIT}" in said
    assert f"gRPC connections capped at {LIMIT - 256} by the open-files limit {LIMIT}" in said
    broker.popen.send_signal(signal.SIGTERM)
    assert broker.wait() == 0
