"""The layers of docs/architecture.md, checked on the code: no module imports from a
layer above it, and no modules import each other in a circle.

Every ``import`` and ``from ... import`` under ``src/osqueue`` counts, also
the ones inside functions and under ``TYPE_CHECKING`` (a type-only import is
still a dependency a reader has to follow).  The generated gRPC code is left
out.  A failure names the importing file, its line, and both layers.

The circle check reads the same imports as edges between modules, with one rule:
an import names one module, the one written.  ``import a.b.c`` and
``from a.b.c import x`` are an edge to ``a.b.c`` (its file, or its
``__init__.py`` if it is a package); ``from a.b import c`` is an edge to
``a.b.c`` when ``c`` is a module, else to ``a.b``'s ``__init__.py``.  So a
package's ``__init__`` is a module like any other: its re-exports are its edges,
and a module that imports a name from its own package's ``__init__`` while
that ``__init__`` imports it back closes a circle.  The parent packages Python
runs on the way in (``a`` and ``a.b`` for ``import a.b.c``) are not edges.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "osqueue"

#: Bottom to top.  A module may import from its own floor and the floors below.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("api, errors", ("api", "errors", "ids", "clock", "backoff", "runtime", "address", "metrics")),
    ("storage", ("storage",)),
    ("state", ("state",)),
    ("broker", ("broker",)),
    ("wire", ("wire",)),
    ("server", ("server",)),
    ("client / worker", ("client", "sync", "")),  # "": the package's root
    ("spark, pipeline", ("spark", "pipeline")),
    ("inspect", ("inspect",)),
    ("cli", ("cli", "bench", "dashboard")),
)
FLOOR_OF = {top: i for i, (_, tops) in enumerate(FLOORS) for top in tops}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _top(module: str) -> str | None:
    """``osqueue.broker.inproc.client`` -> ``broker``; ``osqueue`` -> ``""``; foreign -> None."""
    if module == "osqueue":
        return ""
    if not module.startswith("osqueue."):
        return None
    return module.split(".")[1]


def _imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, module) for every osqueue module ``path`` imports; ``package`` is the
    package its relative imports start from."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base == "osqueue":  # ``from osqueue import runtime``: the module, if it is one
                for alias in node.names:
                    is_module = (PACKAGE / f"{alias.name}.py").exists() or (
                        PACKAGE / alias.name
                    ).is_dir()
                    out.append((node.lineno, f"osqueue.{alias.name}" if is_module else base))
            else:
                out.append((node.lineno, base))
    return [(line, module) for line, module in out if _top(module) is not None]


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_pb" not in p.parts)


def violations(path: Path, own: str, package: str) -> list[str]:
    """What ``path`` (a module of top-level package ``own``) imports from above."""
    shown = path.relative_to(PACKAGE.parent) if path.is_relative_to(PACKAGE) else path
    if own not in FLOOR_OF:
        return [f"{shown}: module osqueue.{own} is on no floor; add it to FLOORS"]
    problems: list[str] = []
    for line, module in _imports(path, package):
        target = _top(module)
        assert target is not None
        if target not in FLOOR_OF:
            problems.append(f"{shown}:{line}: imports {module}, which is on no floor")
        elif FLOOR_OF[target] > FLOOR_OF[own]:
            problems.append(
                f"{shown}:{line}: imports {module} ({FLOORS[FLOOR_OF[target]][0]}) "
                f"from the floor below it ({FLOORS[FLOOR_OF[own]][0]})"
            )
    return problems


def upward_imports() -> list[str]:
    problems: list[str] = []
    for path in _sources():
        name = _module_name(path)
        own = _top(name)
        assert own is not None
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        problems += violations(path, own, package)
    return problems


def test_no_module_imports_from_a_layer_above_it() -> None:
    problems = upward_imports()
    assert problems == [], "imports that point up:\n" + "\n".join(problems)


def test_every_top_level_module_has_a_floor() -> None:
    tops = {_top(_module_name(p)) for p in _sources()}
    assert tops <= set(FLOOR_OF), sorted(t for t in tops if t not in FLOOR_OF)  # type: ignore[type-var]


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from osqueue.client.remote import connect\n", "(client / worker) from the floor below"),
        ("def f():\n    from ..broker import Broker\n", "(broker) from the floor below"),
        ("from osqueue import runtime\nfrom osqueue.storage import from_url\n", None),
    ],
)
def test_the_check_sees_an_upward_import(tmp_path: Path, source: str, found: str | None) -> None:
    """The checker itself, on a module of ``state``: an import from a floor above is
    reported (also a relative one inside a function), imports from below are not."""
    probe = tmp_path / "probe.py"
    probe.write_text(source, encoding="utf-8")
    problems = violations(probe, "state", "osqueue.state")
    if found is None:
        assert problems == []
    else:
        assert len(problems) == 1, problems
        assert found in problems[0]


#: The sizes the architecture issue set: past them a module or a class holds
#: more than one concern, and a reader loses its thread.
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 350


def oversized(path: Path) -> list[str]:
    """The module at ``path`` and its classes that pass the limits, one line each."""
    text = path.read_text(encoding="utf-8")
    found: list[str] = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines (> {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
            size = node.end_lineno - node.lineno + 1
            if size > MAX_CLASS_LINES:
                found.append(
                    f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: class {node.name} "
                    f"is {size} lines (> {MAX_CLASS_LINES})"
                )
    return found


def test_no_module_or_class_is_past_its_size() -> None:
    problems = [line for path in _sources() for line in oversized(path)]
    assert problems == [], "too large:\n" + "\n".join(problems)


def test_the_size_check_sees_a_large_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(f"{__name__}.PACKAGE", tmp_path / "osqueue")
    (tmp_path / "osqueue").mkdir()
    big = tmp_path / "osqueue" / "big.py"
    big.write_text("class Big:\n" + "    x = 1\n" * MAX_CLASS_LINES, encoding="utf-8")
    assert oversized(big) == [f"osqueue/big.py:1: class Big is {MAX_CLASS_LINES + 1} lines (> 350)"]
    big.write_text("class Small:\n    x = 1\n", encoding="utf-8")
    assert oversized(big) == []


def _resolve(module: str, root: Path) -> str | None:
    """The module ``module`` names under ``root`` (the directory holding the
    ``osqueue`` package): itself if it is a file or a package, else None."""
    path = root.joinpath(*module.split("."))
    if path.with_suffix(".py").exists() or (path / "__init__.py").exists():
        return module
    return None


def _edges(path: Path, package: str, root: Path) -> list[tuple[int, str]]:
    """(line, module) for every osqueue module ``path`` imports, by the rule of the
    docstring: ``from a.b import c`` is ``a.b.c`` when that is a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = _resolve(f"{base}.{alias.name}", root)
                out.append((node.lineno, sub or base))
    return [(line, module) for line, module in out if _top(module) is not None]


def import_graph(root: Path) -> dict[str, list[tuple[int, str]]]:
    """Module -> its (line, imported module) edges, for every module of the
    ``osqueue`` package under ``root`` (generated code aside)."""
    graph: dict[str, list[tuple[int, str]]] = {}
    for path in sorted(p for p in (root / "osqueue").rglob("*.py") if "_pb" not in p.parts):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        name = ".".join(parts)
        package = name if is_package else name.rpartition(".")[0]
        graph[name] = sorted(
            {
                (line, module)
                for line, module in _edges(path, package, root)
                if _resolve(module, root) is not None
            }
        )
    return graph


def _reach(graph: dict[str, list[tuple[int, str]]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [module for _, module in graph.get(start, [])]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += [target for _, target in graph.get(module, [])]
    return seen


def circles(graph: dict[str, list[tuple[int, str]]]) -> list[list[str]]:
    """The strongly connected components that are circles (modules that reach each
    other through imports, or one module importing itself), each sorted."""
    reach = {module: _reach(graph, module) for module in graph}
    found = {
        tuple(sorted(other for other in reach[module] if module in reach.get(other, ())))
        for module in graph
        if module in reach[module]
    }
    return sorted(list(component) for component in found)


def describe_circles(graph: dict[str, list[tuple[int, str]]]) -> list[str]:
    """One block per circle: its modules, then every import between them with its line."""
    blocks: list[str] = []
    for component in circles(graph):
        members = set(component)
        lines = [
            f"  {name}:{line} imports {module}"
            for name in component
            for line, module in graph[name]
            if module in members
        ]
        blocks.append("circle of " + ", ".join(component) + ":\n" + "\n".join(lines))
    return blocks


def test_no_modules_import_each_other_in_a_circle() -> None:
    problems = describe_circles(import_graph(PACKAGE.parent))
    assert problems == [], "import circles:\n" + "\n".join(problems)


def _plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_circle_check_sees_a_planted_circle(tmp_path: Path) -> None:
    """Three modules in a ring (one edge inside a function, one under
    ``TYPE_CHECKING``, one relative), and a package ``__init__`` re-exporting a
    module that imports the package back: two circles, named with their lines;
    a module that only imports down is in neither."""
    _plant(
        tmp_path,
        {
            "osqueue/__init__.py": "",
            "osqueue/ring/__init__.py": "",
            "osqueue/ring/a.py": "from osqueue.ring.b import B\n",
            "osqueue/ring/b.py": "def f() -> None:\n    from . import c\n",
            "osqueue/ring/c.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import osqueue.ring.a\n"
            ),
            "osqueue/pkg/__init__.py": '"""Re-exports."""\n\nfrom osqueue.pkg.inner import Inner\n',
            "osqueue/pkg/inner.py": "import osqueue.pkg.leaf\nfrom osqueue.pkg import Other\n",
            "osqueue/pkg/leaf.py": "import json\n",
        },
    )
    assert describe_circles(import_graph(tmp_path)) == [
        "circle of osqueue.pkg, osqueue.pkg.inner:\n"
        "  osqueue.pkg:3 imports osqueue.pkg.inner\n"
        "  osqueue.pkg.inner:2 imports osqueue.pkg",
        "circle of osqueue.ring.a, osqueue.ring.b, osqueue.ring.c:\n"
        "  osqueue.ring.a:1 imports osqueue.ring.b\n"
        "  osqueue.ring.b:2 imports osqueue.ring.c\n"
        "  osqueue.ring.c:3 imports osqueue.ring.a",
    ]
    (tmp_path / "osqueue/ring/c.py").write_text("import osqueue.pkg.leaf\n", encoding="utf-8")
    (tmp_path / "osqueue/pkg/inner.py").write_text("import osqueue.pkg.leaf\n", encoding="utf-8")
    assert describe_circles(import_graph(tmp_path)) == []


# ---------------------------------------------------------------- cli and dashboard apart

#: The one module of either that may import the other: the command that starts
#: the dashboard imports its server.  Everything else both need is ``inspect``.
SIBLING_LAUNCHERS = {("cli", "dashboard"): ("osqueue.cli.dashboard",)}


def sibling_imports(path: Path, module: str) -> list[str]:
    """What ``path`` (the module named ``module``) imports from its sibling on the
    top floor: ``cli`` from ``dashboard`` or back, the launcher aside."""
    own = _top(module)
    sibling = {"cli": "dashboard", "dashboard": "cli"}.get(own or "")
    if sibling is None or module in SIBLING_LAUNCHERS.get((own or "", sibling), ()):
        return []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    shown = path.relative_to(PACKAGE.parent) if path.is_relative_to(PACKAGE) else path
    return [
        f"{shown}:{line}: {own} imports {target} (shared code goes in osqueue.inspect)"
        for line, target in _imports(path, package)
        if _top(target) == sibling
    ]


def test_cli_and_dashboard_do_not_import_each_other() -> None:
    problems = [line for path in _sources() for line in sibling_imports(path, _module_name(path))]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "source", "found"),
    [
        ("osqueue.dashboard.pages", "from osqueue.cli.jobs import job_dict\n", True),
        ("osqueue.cli.top", "def f():\n    from ..dashboard import snapshot\n", True),
        ("osqueue.cli.dashboard", "from osqueue.dashboard import web\n", False),
        ("osqueue.dashboard.pages", "from osqueue.inspect.jobs import job_dict\n", False),
    ],
)
def test_the_sibling_check_sees_a_crossing(
    tmp_path: Path, module: str, source: str, found: bool
) -> None:
    """A planted import from the dashboard into the CLI (or back, relative, in a
    function) is reported; the launcher's and an import of ``inspect`` are not."""
    probe = tmp_path / "probe.py"
    probe.write_text(source, encoding="utf-8")
    problems = sibling_imports(probe, module)
    assert len(problems) == int(found), problems


@pytest.mark.parametrize(
    ("own", "source", "found"),
    [
        ("inspect", "from osqueue.dashboard.web import Dashboard\n", "(cli) from the floor below"),
        ("inspect", "from osqueue.cli.options import Url\n", "(cli) from the floor below"),
        ("spark", "from osqueue.inspect.jobs import job_dict\n", "(inspect) from the floor"),
        ("inspect", "from osqueue.broker.cold.read import list_jobs\n", None),
        ("dashboard", "from osqueue.inspect.snapshot import Snapshot\n", None),
    ],
)
def test_inspect_sits_between_spark_and_the_cli(
    tmp_path: Path, own: str, source: str, found: str | None
) -> None:
    """The read side imports neither the CLI nor the dashboard, and nothing below
    it imports the read side (Spark reads segments through the broker)."""
    probe = tmp_path / "probe.py"
    probe.write_text(source, encoding="utf-8")
    problems = violations(probe, own, f"osqueue.{own}")
    if found is None:
        assert problems == []
    else:
        assert len(problems) == 1, problems
        assert found in problems[0]
