"""The package's layout: imports go one way down the layers, with no circles, and no module imports another's
private helpers. The layers, from the bottom: the foundation (errors, output, stats, executor...), the readers
(``sources``), the run store (``store``), the engine and ingest, the analyses, what presents them (``report``,
``sqlcmd``...) and ``collect``, and the command line on top (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "traceql"

# every module of the package is in exactly one layer; a module imports only modules of its layer or below
LAYERS: list[tuple[str, ...]] = [
    ("version", "errors", "output", "stats", "classify", "queries_loader", "executor", "gates", "duck", "stopping",
     "plain", "launch"),
    ("sources",),
    ("store",),
    ("engine", "ingest"),
    ("attribution", "attribute_map", "attribute", "diff_model", "diff_match", "diff", "paper", "overlap", "advise"),
    ("report", "render", "render_diff", "sqlcmd", "collect", "perfetto"),
    ("cli", "__init__", "__main__"),
]


def modules() -> dict[str, Path]:
    """Dotted name below ``traceql`` (``store.schema``, ``report``) of every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()
        found[".".join(parts)] = path
    return found


def layer_of(module: str) -> int:
    top = module.split(".")[0]
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"traceql.{module} is in no layer of tests/test_layout.py: add it to one")


def resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The dotted name (below ``traceql``) that a ``from ... import`` statement of ``module`` reads from."""
    if node.level == 0:
        assert node.module is not None
        return node.module.removeprefix("traceql").lstrip(".")
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if path.name == "__init__.py" and module == "__init__":
        package = []
    base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
    return ".".join(base + ([node.module] if node.module else []))


def imports(known: dict[str, Path]) -> list[tuple[str, str, str, int]]:
    """(importer, imported module, imported name or '', line) for every import of a traceql module, at any depth
    (imports inside functions count: they are the same dependency, taken later)."""
    found = []
    for module, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "traceql" or alias.name.startswith("traceql."):
                        found.append((module, alias.name.removeprefix("traceql").lstrip(".") or "__init__", "",
                                      node.lineno))
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                if node.level == 0 and not (node.module or "").startswith("traceql"):
                    continue
                source = resolve(module, path, node) or "__init__"
                for alias in node.names:
                    sub = f"{source}.{alias.name}" if source != "__init__" else alias.name
                    if sub in known:  # `from . import store`: the module itself
                        found.append((module, sub, "", node.lineno))
                    else:
                        found.append((module, source, alias.name, node.lineno))
    return found


KNOWN = modules()
IMPORTS = imports(KNOWN)


def test_every_module_is_placed():
    for module in KNOWN:
        layer_of(module)


def test_imports_go_down():
    upward = [f"traceql.{a} (layer {layer_of(a)}) imports traceql.{b} (layer {layer_of(b)}), line {line}"
              for a, b, _, line in IMPORTS if layer_of(b) > layer_of(a)]
    assert not upward, "\n".join(upward)


def test_no_private_helper_crosses_modules():
    private = [f"traceql.{a} imports {name} of traceql.{b}, line {line}"
               for a, b, name, line in IMPORTS if name.startswith("_") and name != "__version__" and a != b]
    assert not private, "\n".join(private)


def test_no_circles():
    graph: dict[str, set[str]] = {m: set() for m in KNOWN}
    for a, b, _, _ in IMPORTS:
        # a package's __init__ is its own module; importing a submodule runs the package first, which is not a
        # dependency of the submodule's code
        if a != b and b in KNOWN:
            graph[a].add(b)
    done: set[str] = set()
    stack: list[str] = []

    def visit(m: str) -> None:
        if m in done:
            return
        if m in stack:
            cycle = stack[stack.index(m):] + [m]
            pytest.fail("an import circle: " + " -> ".join(f"traceql.{x}" for x in cycle))
        stack.append(m)
        for n in sorted(graph[m]):
            visit(n)
        stack.pop()
        done.add(m)

    for m in sorted(graph):
        visit(m)


def test_the_checker_sees_a_violation(tmp_path):
    """The checks above are not vacuous: a store module reading the analyses, and a private import, are found."""
    fake = {"store.fake": tmp_path / "fake.py"}
    fake["store.fake"].write_text("from ..attribute import _num\nfrom .. import attribute\n")
    found = imports(fake | {"attribute": PACKAGE / "attribute.py"})
    mine = [(b, name) for a, b, name, _ in found if a == "store.fake"]
    assert ("attribute", "_num") in mine and ("attribute", "") in mine
    assert layer_of("attribute") > layer_of("store.fake")
