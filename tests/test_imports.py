"""No import circle among the modules of ``grader/`` and ``normref/``.

The graph is read from the source with ``ast`` (nothing is imported). Every import statement
counts, at module level and inside a function alike: a circle closed by an import inside a
function still ties the two modules together (neither can be understood, tested or moved
without the other), and a function-level import written only to dodge the circle hides it.
The shared piece goes to a lower module instead (``grader/ledger/course.py``, ``grader/batch.py``,
``grader/intake/notebooks.py``, ``normref/handback_files.py``...). Only imports
under ``if TYPE_CHECKING:`` are left out: they never run.

An edge goes to the module named (``from .course import X`` -> ``grader.ledger.course``;
``from . import sandbox`` -> ``grader.kernel.sandbox``); importing ``a.b.c`` also runs ``a/__init__``
and ``a/b/__init__``, which is not counted as an edge of the importer (every submodule would
otherwise form a circle with a package ``__init__`` that re-exports it).
"""
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("grader", "normref")

#: Circles known and left for a later change, each with why. The test fails when one grows or
#: shrinks, so that the entry goes as soon as the circle does.
KNOWN: dict[frozenset, str] = {}


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = REPO) -> dict[str, Path]:
    return {module_name(p, root): p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node, but those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (n for child in node.orelse for n in _imports_of(child))
            continue
        yield from _imports_of(node)


def _imports_of(node: ast.AST):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _imports(node)


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(mods: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """``{module: {modules of grader/ and normref/ it imports}}``."""
    mods = modules() if mods is None else mods
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        out = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
                continue
            base = _resolve(name, path.name == "__init__.py", node)
            for a in node.names:
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base)
        graph[name] = {m for m in out if m in mods and m != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def one_loop(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """One circle through the component, as ``[a, b, ..., a]``, to print."""
    members, start = set(comp), comp[0]
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in graph[path[-1]] if w in members)
        back = [w for w in nxt if w == start]
        if back and len(path) > 1:
            return path + [start]
        fresh = [w for w in nxt if w not in seen]
        if not fresh:  # close the loop on the first module seen again
            w = nxt[0]
            return path[path.index(w):] + [w]
        path.append(fresh[0])
        seen.add(fresh[0])


def _describe(graph, comps) -> str:
    return "\n".join(" -> ".join(one_loop(graph, c)) for c in comps)


def test_the_cycle_finder_finds_a_circle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "grader"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import g\n    return g\n")
    (pkg / "c.py").write_text("import grader.a\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n")
    mods = {module_name(p, tmp_path): p for p in sorted(pkg.glob("*.py"))}
    graph = import_graph(mods)
    assert graph["grader.d"] == set()  # TYPE_CHECKING imports never run
    comps = circles(graph)
    assert comps == [["grader.a", "grader.b", "grader.c"]]
    assert one_loop(graph, comps[0]) == ["grader.a", "grader.b", "grader.c", "grader.a"]


def test_the_graph_sees_the_modules_imports():
    graph = import_graph()
    assert "grader.ledger.course" in graph["grader.ledger.state"]  # module level
    assert "grader.ledger.handgrades" in graph["grader.ledger.state"]  # inside a function
    assert "grader.kernel.sandbox" in graph["grader.kernel.zygote"]  # in a try: (run by path, imported as a sibling)
    assert "normref.wire" in graph["normref.handback"]  # the hand-back's wire format
    assert not any(m.startswith("grader") for m in set().union(*(graph[n] for n in graph if n.startswith("normref"))))


def test_no_import_circle_among_grader_and_normref_modules():
    graph = import_graph()
    comps = circles(graph)
    new = [c for c in comps if frozenset(c) not in KNOWN]
    assert not new, "import circles (move the shared piece to a lower module):\n" + _describe(graph, new)
    gone = [sorted(k) for k in KNOWN if sorted(k) not in comps]
    assert not gone, f"these known circles changed or are gone: update KNOWN in tests/test_imports.py: {gone}"
