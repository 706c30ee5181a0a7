"""The bounds on connections: gRPC core's options, the settings that feed them,
and the cap a server takes from the open-files limit."""

from __future__ import annotations

import logging
import math

import pytest

from osqueue import runtime
from osqueue.broker import BrokerConfig
from osqueue.errors import InvalidInput
from osqueue.server.limits import Limits
from osqueue.server.server import ServerConfig, serve, server_options


def test_the_options_bound_connections_handshakes_and_idle_time() -> None:
    options = dict(server_options(Limits(), max_connections=768))
    assert options["grpc.max_allowed_incoming_connections"] == 768
    assert options["grpc.server_handshake_timeout_ms"] == 10_000
    assert options["grpc.max_connection_idle_ms"] == 300_000
    # The server keeps pinging a quiet connection, and ends it when a ping
    # goes unanswered, so a dead (or mute) peer is noticed.
    assert options["grpc.http2.max_pings_without_data"] == 0
    assert options["grpc.http2.ping_timeout_ms"] == 10_000
    assert "grpc.max_connection_age_ms" not in options


def test_an_aged_connection_leaves_a_long_poll_time_to_finish() -> None:
    limits = Limits(max_connection_age_s=3600.0, max_connection_idle_s=None, max_wait_s=60.0)
    options = dict(server_options(limits, max_connections=10))
    assert options["grpc.max_connection_age_ms"] == 3_600_000
    assert options["grpc.max_connection_age_grace_ms"] == 90_000
    assert "grpc.max_connection_idle_ms" not in options


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"max_connections": 0}, "max_connections"),
        ({"handshake_timeout_s": 0.0}, "handshake_timeout_s"),
        ({"max_connection_idle_s": -1.0}, "max_connection_idle_s"),
        ({"max_connection_age_s": math.inf}, "max_connection_age_s"),
    ],
)
def test_bad_connection_limits_are_refused_naming_the_field(
    kw: dict[str, float], field: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        Limits(**kw)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_bad_reserves_and_caps_are_refused_naming_the_field() -> None:
    with pytest.raises(InvalidInput) as caught:
        ServerConfig(fd_reserve=-1)
    assert caught.value.field == "fd_reserve"
    with pytest.raises(InvalidInput) as caught:
        BrokerConfig(metrics_max_connections=0)
    assert caught.value.field == "metrics_max_connections"


async def test_the_server_caps_its_connections_by_what_the_limit_leaves(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(runtime, "open_files_limit", lambda: 1024)
    config = ServerConfig(listen="127.0.0.1:0", fd_reserve=300)
    with caplog.at_level(logging.INFO, logger="osqueue"):
        async with await serve(None, config):
            pass
    (listening,) = [r for r in caplog.records if getattr(r, "action", None) == "listen"]
    assert listening.max_connections == 724
    assert "gRPC connections capped at 724 by the open-files limit 1024" in caplog.text
