"""docs/architecture.md names every module of the package, so the map a newcomer
reads is the code's (a module added without its line fails here, naming it)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "osqueue"
DOC = ROOT / "docs" / "architecture.md"


def unnamed_modules(package: Path, doc: str) -> list[str]:
    """The modules under ``package`` (``__init__`` and generated code aside) whose
    file name the doc does not write in backticks (alone or at the start of a path)."""
    missing = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "__init__.py" or "_pb" in path.parts:
            continue
        if f"`{path.name}`" not in doc and f"{path.name}`" not in doc:
            missing.append(str(path.relative_to(package)))
    return missing


def test_the_architecture_doc_names_every_module() -> None:
    assert unnamed_modules(PACKAGE, DOC.read_text()) == []


def test_the_check_sees_a_module_the_doc_leaves_out(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    for name in ("state/__init__.py", "state/known.py", "state/new_kind.py"):
        (tmp_path / name).write_text("")
    doc = "| `state/` | `known.py` (what it holds) |"
    assert unnamed_modules(tmp_path, doc) == ["state/new_kind.py"]
