"""Encode/decode time of the queue document at 1k, 10k and 100k queued jobs.

Prints one JSON line: for each size, the median of several runs of a full
encode (cold: every job encoded), a commit-time encode (warm: per-job bytes
cached, as the broker encodes after a commit that changed a few jobs), a
decode, and the document's size.

    .venv/bin/python benchmarks/codec.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from osqueue.state import ClaimOp, Document, Push, decode, encode, transition

T0 = 1_800_000_000.0


def build(n: int) -> Document:
    ops = [
        Push(id=f"01JD{i:022d}", payload=b'{"segment": "wal/ns-42/000017.jsonl"}') for i in range(n)
    ]
    return transition(Document.empty(), ops, T0, in_place=True).doc


def measure(n: int, runs: int) -> dict[str, float]:
    cold, warm, dec = [], [], []
    size = 0
    for _ in range(runs):
        doc = build(n)
        t = time.perf_counter()
        data = encode(doc)
        cold.append(time.perf_counter() - t)
        transition(doc, [ClaimOp("w", ("default",), 10)], T0 + 1, in_place=True)
        t = time.perf_counter()
        data = encode(doc)
        warm.append(time.perf_counter() - t)
        t = time.perf_counter()
        decode(data)
        dec.append(time.perf_counter() - t)
        size = len(data)
    return {
        "encode_ms": round(statistics.median(cold) * 1000, 2),
        "commit_encode_ms": round(statistics.median(warm) * 1000, 2),
        "decode_ms": round(statistics.median(dec) * 1000, 2),
        "bytes": size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sizes", default="1000,10000,100000")
    args = parser.parse_args()
    out = {f"{n}": measure(n, args.runs) for n in map(int, args.sizes.split(","))}
    print(json.dumps({"bench": "codec", "runs": args.runs, "jobs": out}))


if __name__ == "__main__":
    main()
