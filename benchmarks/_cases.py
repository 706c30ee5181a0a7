"""Command-line handling shared by the benchmark programs that run named cases."""

from __future__ import annotations

import argparse
from collections.abc import Mapping


def parse_cases(
    doc: str | None, cases: Mapping[str, object], argv: list[str], *, backend: bool = False
) -> argparse.Namespace:
    """``--cases a,b`` (validated against ``cases``), ``--runs N``, ``--quick``,
    and with ``backend``, ``--backend memory|file``.

    The chosen names, in order, are ``args.names``.
    """
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cases", default=",".join(cases), help="comma-separated case names")
    p.add_argument("--runs", type=int, default=3, help="runs per case; the median is reported")
    p.add_argument("--quick", action="store_true", help="smaller job counts (smoke run)")
    if backend:
        p.add_argument(
            "--backend",
            choices=("memory", "file"),
            default="memory",
            help="the storage under the injected latency: memory, or file (a fresh temporary "
            "directory per run)",
        )
    args = p.parse_args(argv)
    names = [name.strip() for name in args.cases.split(",") if name.strip()]
    unknown = [name for name in names if name not in cases]
    if unknown or not names:
        p.error(f"--cases: unknown case(s) {unknown}; choose from {', '.join(cases)}")
    if args.runs < 1:
        p.error("--runs must be at least 1")
    args.names = names
    return args
