"""The README's Python snippets are whole programs: each compiles as a file, the
names it takes from ``osqueue`` exist, and the quickstart runs as written."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import osqueue

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def snippets() -> list[str]:
    found = _BLOCK.findall(README.read_text())
    assert len(found) >= 2, "the README has a quickstart and a worker snippet"
    return found


@pytest.mark.parametrize("index", range(len(snippets())))
def test_each_snippet_compiles_as_a_file_and_names_real_osqueue_names(index: int) -> None:
    source = snippets()[index]
    tree = ast.parse(source, filename=f"README.md snippet {index}")
    compile(tree, f"README.md snippet {index}", "exec")  # a top-level await fails here
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "osqueue"
    }
    assert used, "a snippet that uses osqueue"
    assert {name for name in used if not hasattr(osqueue, name)} == set()


def test_the_quickstart_runs_as_written(tmp_path: Path) -> None:
    (quickstart,) = [s for s in snippets() if "osqueue.Broker(" in s]
    assert "file:///tmp/myqueue" in quickstart
    script = tmp_path / "quickstart.py"
    script.write_text(quickstart.replace("file:///tmp/myqueue", (tmp_path / "q").as_uri()))
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(osqueue.__file__).parents[1])},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Stats(" in done.stdout
    assert "'images': QueueStats(" in done.stdout
