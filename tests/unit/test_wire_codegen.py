"""The checked-in gRPC code is current, and ``--check`` notices when it is not."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from osqueue.wire import codegen


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return codegen.generate()


def test_checked_in_code_is_current(generated: dict[str, str]) -> None:
    assert codegen.differences(generated) == []
    assert codegen.main(["--check"]) == 0


def test_generation_is_deterministic_and_package_relative(generated: dict[str, str]) -> None:
    assert codegen.generate() == generated
    grpc_module = generated["queue_pb2_grpc.py"]
    assert "from . import queue_pb2" in grpc_module
    assert "osqueue.v1 import" not in grpc_module
    assert set(generated) == {
        "__init__.py",
        "queue_pb2.py",
        "queue_pb2.pyi",
        "queue_pb2_grpc.py",
        "queue_pb2_grpc.pyi",
    }


def test_check_names_stale_missing_and_changed_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "_pb"
    shutil.copytree(codegen.OUT_DIR, out, ignore=shutil.ignore_patterns("__pycache__"))
    assert codegen.main(["--check", "--out", str(out)]) == 0
    (out / "queue_pb2.pyi").write_text("# edited by hand\n")
    (out / "queue_pb2_grpc.py").unlink()
    (out / "leftover_pb2.py").write_text("")
    assert codegen.main(["--check", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "out of date: queue_pb2.pyi" in err
    assert "missing: queue_pb2_grpc.py" in err
    assert "not generated (stale): leftover_pb2.py" in err
    assert "python -m osqueue.wire.codegen" in err
    assert codegen.main(["--out", str(out)]) == 0
    assert codegen.main(["--check", "--out", str(out)]) == 0
    assert not (out / "leftover_pb2.py").exists()


def test_a_broken_proto_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proto = tmp_path / "osqueue" / "v1" / "queue.proto"
    proto.parent.mkdir(parents=True)
    proto.write_text('syntax = "proto3";\nmessage X { strin a = 1; }\n')
    assert codegen.main(["--check", "--proto-root", str(tmp_path)]) == 2
    assert '"strin" is not defined' in capsys.readouterr().err
