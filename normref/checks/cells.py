"""The notebook cells a checked answer comes from, and what the tamper scan
(:func:`normref.tamper.scan`) finds in them: one function, :func:`question_findings`, which the
self-check runs on the cells its kernel executed (IPython's ``In``, in the order they ran) and
grading runs on the autograded notebook's cells (``grader.scoring.scores``), so both name the same
cells, lines and findings.

Which cells: the cell that runs the check (when it is not a locked cell), and, walking back
through the cells in the order they ran, the latest cell that binds each module-level name the
check reads (``rms_norm``), then, the same way, each name those cells read from the notebook's
globals, transitively. Names are read as Python resolves them (:mod:`normref.scopes`): a
function's parameter, a local variable or an attribute (``x.var(...)``, ``self.weight``) is not
the global of the same spelling, so a cell that set a global ``var`` is not read for a function
whose ``var`` is its own. Locked cells are never scanned (grading restores them).

A cell is named by what it defines or imports ("the cell that defines rms_norm", "the cell
that imports math"), never by its execution count: a cell that is ``[16]`` in JupyterLab is
``[2]`` in the fresh kernel of ``nbgrader validate``, and its name is the same in both.
"""
from __future__ import annotations

import ast
import functools
import glob
import json
import linecache
import os
import types

from .._syntax import parse
from ..tamper import Finding, protected_bindings, scan

__all__ = ["question_findings", "scan_findings", "top_bindings", "cell_name", "remedy", "locked_cells",
           "notebook_bindings"]


def remedy(what: str) -> str:
    """How to mend a tamper finding (``what``: :class:`normref.tamper.Finding`'s words)."""
    if what.startswith("imports "):
        return "remove the import"
    if what.startswith("IPython magic"):
        return "remove that line"
    return "remove it"


@functools.lru_cache(maxsize=512)
def _reading(source: str) -> tuple[dict, frozenset, frozenset]:
    """``(top_bindings, names read when it runs, names read later by its functions)`` of one cell
    (IPython magics and shell lines read as blank lines)."""
    from ..scopes import module_reads

    code = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines())
    try:
        tree = parse(code)
    except SyntaxError:
        return {}, frozenset(), frozenset()
    now, later = module_reads(tree)
    return _bindings_of(tree), frozenset(now), frozenset(later)


def _bindings_of(tree: ast.Module) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                out.setdefault(a.asname or a.name.split(".")[0], "imports")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.setdefault(node.name, "defines")
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out.setdefault(n.id, "sets")
    return out


def top_bindings(source: str) -> dict[str, str]:
    """``{name: how the cell binds it}`` for the names ``source`` binds at top level:
    ``"imports"``, ``"defines"`` (a function or class) or ``"sets"``."""
    return dict(_reading(source)[0])


def cell_name(source: str, name: str | None = None) -> str:
    """``"the cell that defines rms_norm"``: the cell ``source``, named by ``name`` as the cell
    binds it (else by the first name it binds; ``"a cell with no name"`` when it binds none)."""
    binds = top_bindings(source)
    if name not in binds:
        name = next(iter(binds), None)
    return f"the cell that {binds[name]} {name}" if name else "a cell that binds no name"


@functools.lru_cache(maxsize=512)
def sliced(source: str, names: frozenset) -> str:
    """``source`` with only its top-level statements that bind one of ``names`` (an import, a
    ``def``, a class, an assignment, a loop or ``with`` whose body binds it), every other line
    blank (the line numbers stay the cell's): the part of a cell another cell's code reads it
    for. A scratch cell that imports torch and also compares with ``F.layer_norm`` is read, for
    an answer that uses ``torch``, as its ``import torch`` alone."""
    from ..scopes import resolve

    lines = source.splitlines()
    code = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in lines)
    try:
        tree = parse(code)
    except SyntaxError:
        return ""
    keep = set()
    for stmt in tree.body:
        if names & set(resolve(ast.Module(body=[stmt], type_ignores=[])).module.bound):
            first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", ())])
            keep.update(range(first, (stmt.end_lineno or stmt.lineno) + 1))
    return "\n".join(ln if i in keep else "" for i, ln in enumerate(lines, 1))


def question_cells(cells: list[str], locked: set[str] = frozenset(), names=()) -> list[tuple[int, str, bool, str]]:
    """The cells a check reads, from ``cells`` (sources, in the order they ran; the last one runs
    the check): ``[(index, name, own, what of it is read)]``. ``name`` is the binding it is
    reached by (``None`` for the checking cell itself); ``own`` marks the checking cell and the
    cells binding what it reads directly, or ``names`` (the checked object's names): the answer's
    own cells, read whole; another cell is read for the statements that bind the names the
    answer's code reads (:func:`sliced`). Locked cells (``locked``, stripped sources) are not
    returned, and what they read is not followed."""
    if not cells:
        return []
    last = len(cells) - 1
    found: dict[int, dict] = {}  # index -> {"name", "own", "names", "whole"}
    todo: list[tuple[str, int, bool]] = []

    def follow(i: int, source: str, own: bool) -> None:
        _, now, later = _reading(source)
        todo.extend((n, i, own) for n in sorted(now))
        todo.extend((n, last + 1, own) for n in sorted(later))

    if cells[last].strip() not in locked:
        found[last] = {"name": None, "own": True, "names": set(), "whole": True}
    # what a test cell reads directly is the answer's own code; what the answer's own cell reads
    # (a lesson's cell that defines the function and checks it) is not
    follow(last, cells[last], not set(names) & set(_reading(cells[last])[0]))
    todo.extend((n, last + 1, True) for n in names)
    while todo:
        name, before, own = todo.pop(0)
        for j in range(min(before, last + 1) - 1, -1, -1):
            if name not in _reading(cells[j])[0]:
                continue
            if cells[j].strip() in locked:
                break  # the course's cell: grading restores it, nothing of it is the student's
            entry = found.setdefault(j, {"name": name, "own": False, "names": set(), "whole": False})
            entry["name"] = entry["name"] or name
            if own and not entry["whole"]:
                entry["own"] = entry["whole"] = True
                follow(j, cells[j], False)
            elif not entry["whole"] and name not in entry["names"]:
                entry["names"].add(name)
                follow(j, sliced(cells[j], frozenset({name})), False)
            break
    return [(i, e["name"], e["own"], cells[i] if e["whole"] else sliced(cells[i], frozenset(e["names"])))
            for i, e in sorted(found.items())]


def question_findings(cells: list[str], locked_sources: list[str] = (), bindings: dict | None = None,
                      names=()) -> list[tuple[str, bool, Finding]]:
    """The tamper scan's findings in the cells a check reads (:func:`question_cells`):
    ``[(the cell's name, own, finding)]``, e.g. ``[("the cell that defines rms_norm", True,
    Finding("tamper", 1, "imports threading"))]``.

    Args:
        cells: the sources of the code cells, in the order they ran, the checking cell last.
        locked_sources: the notebook's locked cells (what the locked cells rely on is
            :func:`normref.tamper.protected_bindings`; what they import tells the scan which names
            are modules).
        bindings: what names bound outside the scanned cells stand for (a lesson's globals:
            :func:`notebook_bindings`); default: the locked cells' imports.
        names: the checked object's names in the notebook (the self-check knows the object),
            read as the checking cell's own.
    """
    locked = {s.strip() for s in locked_sources}
    protected = protected_bindings(list(locked_sources))
    if bindings is None:
        bindings = _locked_imports(list(locked_sources))
    chosen = question_cells(list(cells), locked, names)
    # a name another chosen cell imports stands for what it imports there (``from normref import
    # layer_norm as ln`` in one cell, ``ln(x)`` in the answer's)
    imported = {}
    for i, name, _, _ in chosen:
        target = _stands_for(cells[i], name) if name is not None else None
        if target is not None:
            imported[name] = target
    scope = {**bindings, **protected, **imported}
    out = []
    for i, name, own, read in chosen:
        where = cell_name(cells[i], name)
        out += [(where, own, f) for f in scan(read, protected, scope)]
    return list(dict.fromkeys(out))


def _stands_for(source: str, name: str) -> str | None:
    """What the cell ``source`` binds ``name`` to at its top level, when it is an import or a plain
    alias of one (``from normref import layer_norm as ln``; ``RMSNorm = normref.RMSNorm``), else None."""
    from ..scopes import resolve

    try:
        tree = parse("\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines()))
    except SyntaxError:
        return None
    return next((t for t in resolve(tree).module_targets(name) if t is not None), None)


def _locked_imports(locked_sources: list[str]) -> dict[str, str]:
    """``{name: target}`` of every import at the top level of the locked cells."""
    out: dict[str, str] = {}
    for src in locked_sources:
        try:
            tree = parse(src)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


# --------------------------------------------------------------------------- the kernel's view


def _read_locked(path: str) -> tuple[list[str], set[str]] | None:
    """The locked code cells' sources of notebook ``path`` and all its code cells' (stripped),
    or None when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            nb = json.load(f)
        locked, code = [], set()
        for c in nb.get("cells", []):
            if c.get("cell_type") != "code":
                continue
            src = c.get("source", "")
            src = "".join(src) if isinstance(src, list) else src
            code.add(src.strip())
            if c.get("metadata", {}).get("nbgrader", {}).get("locked"):
                locked.append(src)
        return locked, code
    except (OSError, ValueError, AttributeError):
        return None


def locked_cells(sources=()) -> list[str]:
    """The notebook's locked cells' sources, as grading reads them (``[]`` when the notebook
    file is not found): the kernel's notebook (JupyterLab's ``JPY_SESSION_NAME``), else the
    ``.ipynb`` in the working folder (``nbgrader validate`` runs there). With several there
    (a student's "modern-Copy1.ipynb" beside "modern.ipynb"), the one that holds the checked
    code's cells (``sources``, as the kernel ran them), or the locked cells they all share."""
    path = os.environ.get("JPY_SESSION_NAME", "")
    if path.endswith(".ipynb") and not os.path.isfile(path):
        path = os.path.basename(path)  # relative to the server's root; the kernel runs in its folder
    paths = [path] if path.endswith(".ipynb") and os.path.isfile(path) else sorted(glob.glob("*.ipynb"))
    read = [r for r in map(_read_locked, paths) if r is not None]
    if len(read) > 1:
        want = {s.strip() for s in sources if s.strip()}
        holding = [r for r in read if want and want <= r[1]]
        read = holding or read
        if len({tuple(s.strip() for s in r[0]) for r in read}) > 1:
            return []  # different notebooks, none known for this code: grading's view is unknown
    return read[0][0] if read else []


def notebook_bindings(globals_: dict) -> dict:
    """What the notebook's names stand for when no locked cells say it (a lesson): its modules
    (``torch``, ``nn``, ``F``) and what it imported from ``normref``."""
    out: dict = {}
    for k, v in list(globals_.items()):
        if k.startswith("_"):
            continue
        if isinstance(v, types.ModuleType):
            out[k] = v.__name__
        elif str(getattr(v, "__module__", "")).split(".")[0] == "normref" and callable(v):
            import normref

            # normref's own names (``from normref import rms_norm``), else where the object is
            # defined (``from normref.handback import hand_back``: normref.handback.hand_back)
            out[k] = f"normref.{k}" if getattr(normref, k, None) is v else f"{v.__module__}.{k}"
    return out


def _functions(o) -> list:
    """The plain functions ``o`` is made of: itself, or its class's methods (an instance: its
    class's), properties' getters included."""
    if isinstance(o, (types.FunctionType, types.MethodType)):
        return [getattr(o, "__func__", o)]
    if isinstance(o, functools.partial):
        return _functions(o.func)
    cls = o if isinstance(o, type) else type(o)
    out = []
    for klass in getattr(cls, "__mro__", ()):
        if getattr(klass, "__module__", None) != "__main__":
            continue
        for v in vars(klass).values():
            v = getattr(v, "__func__", v)
            v = getattr(v, "fget", v)  # a property's getter
            if isinstance(v, types.FunctionType):
                out.append(v)
    return out


def _history(obj) -> tuple[list[str], dict] | None:
    """The code cells the notebook's kernel ran, in order, ending with the cell running the check
    (IPython's ``In``), and the notebook's globals; None outside a notebook kernel."""
    fns = _functions(obj)
    globals_ = fns[0].__globals__ if fns else None
    if globals_ is None or globals_.get("__name__") != "__main__":
        return None
    hist = globals_.get("In")
    if not isinstance(hist, list) or len(hist) < 2:
        return None
    cells = [h for h in hist[1:] if isinstance(h, str)]
    # the functions' own cells, as the kernel ran them, when the history lacks them (a cell run
    # by a front end that records no input): they are the answer's
    have = {c.strip() for c in cells}
    for f in fns:
        src = "".join(linecache.getlines(f.__code__.co_filename, f.__globals__))
        if src.strip() and src.strip() not in have and not os.path.isfile(f.__code__.co_filename):
            cells.insert(len(cells) - 1, src)
            have.add(src.strip())
    return cells, globals_


def scan_findings(obj) -> list[tuple[str, bool, Finding]]:
    """:func:`question_findings` for the self-check of ``obj`` (the student's function or class)
    in a notebook kernel: the cells IPython ran, the notebook's locked cells (read from its file,
    :func:`locked_cells`) or, in a lesson, what its globals stand for.

    Returns:
        ``[(the cell's name, own, finding)]``; ``[]`` outside a notebook kernel or when nothing is
        flagged.
    """
    got = _history(obj)
    if got is None:
        return []
    cells, globals_ = got
    locked = locked_cells(cells)
    bindings = None if locked else notebook_bindings(globals_)
    names = sorted(k for k, v in list(globals_.items()) if v is obj and not k.startswith("_"))
    _, now, later = _reading(cells[-1])
    if set(names) & (now | later):
        names = []  # the checking cell names the answer (a test cell): read from it alone, as grading does
    return question_findings(cells, locked, bindings, names)
