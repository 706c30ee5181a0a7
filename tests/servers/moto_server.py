"""Run moto's S3 API server single-threaded: ``python tests/servers/moto_server.py --port P``.

moto checks ``If-Match``/``If-None-Match`` and then stores the object without a
lock across the two steps, so under a threaded server two racing conditional
writers can both win.  Real S3 is atomic.  Serving moto's WSGI app from a
non-threaded, single-process werkzeug server makes every request run alone,
which restores the compare-and-set guarantee the contract tests check.  A
non-threaded werkzeug server also speaks HTTP/1.0 and closes each connection,
so one client's idle keep-alive connection never blocks the others.
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType


def _stop(signum: int, frame: FrameType | None) -> None:
    sys.exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="moto_server.py")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)

    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        args.host,
        args.port,
        app,
        threaded=False,
        processes=1,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
