"""``osqueue broker URL``: serve a queue over gRPC (or stand by to take it over).

The broker writes its address into the queue document, so clients need only
the storage URL.  It prints one line on stderr once it serves
(``serving URL at HOST:PORT (epoch N)``, then ``metrics at
http://HOST:PORT/metrics`` with ``--metrics-listen``); SIGTERM/Ctrl-C drains
it: stop taking ops, flush, clear the address, exit.
"""

from __future__ import annotations

from typing import Annotated

import typer

from osqueue import runtime
from osqueue.cli import exits
from osqueue.cli.options import MetricsListen, Token, TokenFile, Url

_BROKER = "Broker"
_TLS = "TLS"
_AUTH = "Connection"


def broker(
    url: Url,
    listen: Annotated[
        str,
        typer.Option(
            "--listen",
            envvar="OSQUEUE_LISTEN",
            help="host:port to listen on (port 0: any free port).",
        ),
    ] = "127.0.0.1:7070",
    advertise: Annotated[
        str | None,
        typer.Option(
            "--advertise",
            envvar="OSQUEUE_ADVERTISE",
            help="host:port written into the document for clients (default: the listen address).",
        ),
    ] = None,
    standby: Annotated[
        bool,
        typer.Option(
            "--standby",
            envvar="OSQUEUE_STANDBY",
            help="Watch the document (reads only) and take over when the lease runs out.",
        ),
    ] = False,
    token: Token = None,
    token_file: TokenFile = None,
    write_token: Annotated[
        str | None,
        typer.Option(
            "--write-token",
            envvar="OSQUEUE_WRITE_TOKEN",
            help="A token for producers and workers: every call but cancel and dead-letter "
            "retry/purge (the --token may do everything).",
            rich_help_panel=_AUTH,
        ),
    ] = None,
    write_token_file: Annotated[
        str | None,
        typer.Option(
            "--write-token-file",
            envvar="OSQUEUE_WRITE_TOKEN_FILE",
            help="File holding the write token.",
            rich_help_panel=_AUTH,
        ),
    ] = None,
    read_token: Annotated[
        str | None,
        typer.Option(
            "--read-token",
            envvar="OSQUEUE_READ_TOKEN",
            help="A read-only token: Stats only (status, metrics, dashboards).",
            rich_help_panel=_AUTH,
        ),
    ] = None,
    read_token_file: Annotated[
        str | None,
        typer.Option(
            "--read-token-file",
            envvar="OSQUEUE_READ_TOKEN_FILE",
            help="File holding the read-only token.",
            rich_help_panel=_AUTH,
        ),
    ] = None,
    tls_cert: Annotated[
        str | None,
        typer.Option(
            "--tls-cert",
            envvar="OSQUEUE_TLS_CERT",
            help="PEM certificate chain.",
            rich_help_panel=_TLS,
        ),
    ] = None,
    tls_key: Annotated[
        str | None,
        typer.Option(
            "--tls-key", envvar="OSQUEUE_TLS_KEY", help="PEM private key.", rich_help_panel=_TLS
        ),
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            envvar="OSQUEUE_INSECURE",
            help="Allow a non-loopback listen address without a token.",
        ),
    ] = False,
    max_connections: Annotated[
        int,
        typer.Option(
            "--max-connections",
            envvar="OSQUEUE_MAX_CONNECTIONS",
            min=1,
            help="gRPC connections held at once; more are closed as they arrive (never more "
            f"than the open-files limit leaves beside {runtime.FD_RESERVE} files for storage).",
            rich_help_panel=_AUTH,
        ),
    ] = 10_000,
    lease_s: Annotated[
        float,
        typer.Option(
            "--lease-s",
            envvar="OSQUEUE_LEASE_S",
            min=0.1,
            help="Lease on the document; a standby takes over once it has seen no new version"
            " for this long (plus 1 s) on its own monotonic clock.",
            rich_help_panel=_BROKER,
        ),
    ] = 10.0,
    heartbeat_timeout_s: Annotated[
        float,
        typer.Option(
            "--heartbeat-timeout-s",
            envvar="OSQUEUE_HEARTBEAT_TIMEOUT_S",
            min=0.1,
            help="A claimed job without a heartbeat for this long is handed to another worker.",
            rich_help_panel=_BROKER,
        ),
    ] = 30.0,
    drain_timeout_s: Annotated[
        float,
        typer.Option(
            "--drain-timeout-s",
            envvar="OSQUEUE_DRAIN_TIMEOUT_S",
            min=0.1,
            help="On SIGTERM, flush within this long, then stop hard.",
            rich_help_panel=_BROKER,
        ),
    ] = 10.0,
    payload_sweep_s: Annotated[
        float,
        typer.Option(
            "--payload-sweep-s",
            envvar="OSQUEUE_PAYLOAD_SWEEP_S",
            min=0.0,
            help="Delete payloads/ objects no job uses once two sweeps this far apart"
            " found them (0: never).",
            rich_help_panel=_BROKER,
        ),
    ] = 3600.0,
    result_ttl_s: Annotated[
        float | None,
        typer.Option(
            "--result-ttl-s",
            envvar="OSQUEUE_RESULT_TTL_S",
            min=0.0,
            help="Keep every finished job's answer (and its result) this long, unless its"
            " push or queue says (0: keep none). Unset: a result given is kept 3600 s,"
            " a job finishing without one keeps nothing.",
            show_default=False,
            rich_help_panel=_BROKER,
        ),
    ] = None,
    metrics_listen: MetricsListen = None,
) -> None:
    """Serve the queue at URL over gRPC until SIGTERM (drains: flush, clear address, exit)."""
    from osqueue.broker import BrokerConfig
    from osqueue.server.limits import Limits
    from osqueue.server.runner import BrokerServer, run_broker
    from osqueue.server.server import ServerConfig

    server_config = ServerConfig(
        listen=listen,
        advertise=advertise,
        token=token,
        token_file=token_file,
        write_token=write_token,
        write_token_file=write_token_file,
        read_token=read_token,
        read_token_file=read_token_file,
        tls_cert=tls_cert,
        tls_key=tls_key,
        insecure=insecure,
        limits=Limits(max_connections=max_connections),
    )
    broker_config = BrokerConfig(
        lease_s=lease_s,
        heartbeat_timeout_s=heartbeat_timeout_s,
        drain_timeout_s=drain_timeout_s,
        payload_sweep_interval_s=payload_sweep_s or None,
        result_ttl_s=result_ttl_s,
        metrics_listen=metrics_listen,
    )

    def announce(server: BrokerServer) -> None:
        # From the broker itself: no storage read that a flaky network could lose.
        epoch = server.broker.epoch if server.broker is not None else 0
        exits.info(f"serving {url} at {server.address} (epoch {epoch})")
        metrics = server.broker.metrics_address if server.broker is not None else None
        if metrics is not None:
            exits.info(f"metrics at http://{metrics}/metrics")

    async def main() -> None:
        if standby:
            exits.info(f"standing by for {url}")
        await run_broker(url, server_config, broker_config, standby=standby, announce=announce)
        exits.info(f"broker stopped: {url}")

    runtime.raise_open_files_limit()  # before any listener sizes its cap by it
    runtime.tune_gc()
    runtime.run(main())
