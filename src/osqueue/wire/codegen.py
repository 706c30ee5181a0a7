"""Generate the gRPC code from ``proto/osqueue/v1/queue.proto``.

``python -m osqueue.wire.codegen`` writes the Python modules and their
``.pyi`` stubs (grpcio-tools, with mypy-protobuf's ``--mypy_out`` and
``--mypy_grpc_out``) into ``src/osqueue/wire/_pb/``, with imports rewritten
to be package-relative.  The output is checked in.

``python -m osqueue.wire.codegen --check`` regenerates into a temporary
directory and exits non-zero, naming the files, if the checked-in code differs.
"""

from __future__ import annotations

import argparse
import importlib.resources
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
PROTO_ROOT = REPO_ROOT / "proto"
PROTO_FILES = ("osqueue/v1/queue.proto",)
OUT_DIR = Path(__file__).resolve().parent / "_pb"

_INIT = (
    '"""Code generated from proto/osqueue/v1/queue.proto by osqueue.wire.codegen; do not edit."""\n'
)
#: Absolute imports protoc writes, and the package-relative ones we want.
_IMPORT_FIXES = (
    ("from osqueue.v1 import queue_pb2", "from . import queue_pb2"),
    ("import osqueue.v1.queue_pb2", "from . import queue_pb2"),
)


class CodegenError(Exception):
    """Code generation failed."""


def _plugin(name: str) -> str:
    beside_python = Path(sys.executable).parent / name
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which(name)
    if found is None:
        raise CodegenError(f"{name} not found; install it with: pip install mypy-protobuf")
    return found


def _run_protoc(proto_root: Path, work: Path) -> None:
    try:
        from grpc_tools import protoc  # type: ignore[import-untyped]
    except ImportError as exc:
        raise CodegenError("grpcio-tools is missing; install: pip install grpcio-tools") from exc
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"-I{well_known}",
        f"--python_out={work}",
        f"--grpc_python_out={work}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--mypy_out={work}",
        f"--mypy_grpc_out={work}",
        *(str(proto_root / name) for name in PROTO_FILES),
    ]
    # protoc and its plugins chatter on file descriptor 2 ("Writing mypy to ..."):
    # keep it, and show it only when generation fails.
    with tempfile.TemporaryFile() as chatter:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(chatter.fileno(), 2)
        try:
            code = protoc.main(args)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        chatter.seek(0)
        output = chatter.read().decode(errors="replace").strip()
    if code != 0:
        raise CodegenError(f"protoc failed with exit code {code}: {output}")


def generate(proto_root: Path = PROTO_ROOT) -> dict[str, str]:
    """Return the generated files as ``{file name: text}`` (flat, for ``_pb/``)."""
    with tempfile.TemporaryDirectory(prefix="osqueue-codegen-") as tmp:
        work = Path(tmp)
        _run_protoc(proto_root, work)
        files = {"__init__.py": _INIT}
        for path in sorted(work.rglob("*")):
            if path.suffix not in (".py", ".pyi"):
                continue
            text = path.read_text(encoding="utf-8")
            for old, new in _IMPORT_FIXES:
                text = text.replace(old, new)
            if path.name in files:
                raise CodegenError(f"two generated files are named {path.name}")
            files[path.name] = text
    return files


def _existing(out_dir: Path) -> dict[str, str]:
    if not out_dir.is_dir():
        return {}
    return {
        p.name: p.read_text(encoding="utf-8")
        for p in sorted(out_dir.iterdir())
        if p.is_file() and p.suffix in (".py", ".pyi")
    }


def write(files: dict[str, str], out_dir: Path = OUT_DIR) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in set(_existing(out_dir)) - set(files):
        (out_dir / stale).unlink()
    for name, text in files.items():
        (out_dir / name).write_text(text, encoding="utf-8")


def differences(files: dict[str, str], out_dir: Path = OUT_DIR) -> list[str]:
    """Describe how ``out_dir`` differs from ``files`` (empty when current)."""
    have = _existing(out_dir)
    problems = [f"missing: {name}" for name in sorted(set(files) - set(have))]
    problems += [f"not generated (stale): {name}" for name in sorted(set(have) - set(files))]
    problems += [
        f"out of date: {name}"
        for name in sorted(set(files) & set(have))
        if files[name] != have[name]
    ]
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m osqueue.wire.codegen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the checked-in code differs")
    parser.add_argument("--proto-root", type=Path, default=PROTO_ROOT)
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    try:
        files = generate(args.proto_root)
    except CodegenError as exc:
        print(f"codegen: {exc}", file=sys.stderr)
        return 2
    if not args.check:
        write(files, args.out)
        print(f"codegen: wrote {len(files)} files to {args.out}", file=sys.stderr)
        return 0
    problems = differences(files, args.out)
    if problems:
        print(
            f"codegen: the generated gRPC code in {args.out} is not current with "
            f"{args.proto_root}; run `python -m osqueue.wire.codegen` (or `make proto`) "
            "and commit the result:",
            file=sys.stderr,
        )
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
