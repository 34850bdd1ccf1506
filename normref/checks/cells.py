"""The notebook cells a checked answer comes from, and what grading's tamper scan
(:func:`normref.tamper.scan`, the grader's own code) finds in them: the self-check reads the
cells as grading will, so that it says what grading will do.

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


def code_names(code) -> set[str]:
    """The global and attribute names a code object reads, its nested functions' included."""
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= code_names(c)
    return out


def remedy(what: str) -> str:
    """How to mend a tamper finding (``what``: :class:`normref.tamper.Finding`'s words)."""
    if what.startswith("imports "):
        return "remove the import"
    if what.startswith("IPython magic"):
        return "remove that line"
    return "remove it"


def _functions(o) -> list:
    """The notebook's plain functions ``o`` is made of: itself, or its class's methods (an
    instance: its class's), properties' getters included."""
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


def user_code(obj, limit: int = 40) -> list:
    """The notebook's own functions (``__main__``'s) that ``obj`` is made of or uses by name:
    itself or its class's methods, then the functions and classes of the notebook that those
    name (a block's ``RMSNorm``, ``pre_ln``), transitively (at most ``limit``)."""
    seen, todo, out = set(), [obj], []
    while todo and len(out) < limit:
        o = todo.pop(0)
        if id(o) in seen:
            continue
        seen.add(id(o))
        for fn in _functions(o):
            if fn.__globals__.get("__name__") != "__main__" or fn in out:
                continue
            out.append(fn)
            for n in sorted(code_names(fn.__code__)):
                v = fn.__globals__.get(n)
                if isinstance(v, (types.FunctionType, type)) and getattr(v, "__module__", None) == "__main__":
                    todo.append(v)
    return out


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


def protected_from(globals_: dict) -> dict:
    """What the locked cells bind, read from the notebook's names when the notebook file is not
    at hand: its modules (``torch``, ``nn``, ``F``) and what it imported from ``normref``."""
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


def top_bindings(source: str) -> dict[str, str]:
    """``{name: how the cell binds it}`` for the names ``source`` binds at top level:
    ``"imports"``, ``"defines"`` (a function or class) or ``"sets"``."""
    try:
        tree = parse(source)
    except SyntaxError:
        return {}
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


def cell_name(source: str, fn) -> str:
    """``"the cell that defines rms_norm"``: the cell ``source``, named by the top-level name
    of ``fn`` (a method: its class) as the cell binds it."""
    binds = top_bindings(source)
    root = fn.__qualname__.split(".")[0]
    if root not in binds:  # a lambda, or code made another way: the first name the cell binds
        root = next((n for n, v in binds.items() if fn.__globals__.get(n) is fn), next(iter(binds), ""))
    return f"the cell that {binds[root]} {root}" if root else "an answer cell"


def _binding_cells(fns: list, locked: set, always: set) -> list[tuple[str, str]]:
    """``[(name, source)]`` of the cells in IPython's ``In`` that last bound a name the
    functions ``fns`` read from the notebook's globals (a module, a constant), other than the
    functions' own cells (a name one of them binds comes from it, whatever older cells bound),
    the locked cells and the names in ``always`` (the locked cells'): each named by one such
    name (``"the cell that imports math"``)."""
    hist = fns[0].__globals__.get("In")
    if not isinstance(hist, list):
        return []
    own = {"".join(linecache.getlines(f.__code__.co_filename, f.__globals__)).strip() for f in fns}
    wanted = set()
    for f in fns:
        wanted |= {n for n in code_names(f.__code__) if n in f.__globals__ and n not in always}
    out = []
    for i in range(len(hist) - 1, 0, -1):
        if not wanted:
            break
        src = hist[i] if isinstance(hist[i], str) else ""
        if not src.strip():
            continue
        binds = top_bindings(src)
        bound = wanted & set(binds)
        if bound:
            wanted -= bound  # the latest cell that binds a name is where it comes from
            if src.strip() not in locked and src.strip() not in own:  # (the own cells are scanned already)
                name = sorted(bound)[0]
                out.append((f"the cell that {binds[name]} {name}", src))
    return out


def scan_findings(obj) -> list[tuple[str, bool, Finding]]:
    """Grading's tamper scan on the cells that defined ``obj`` and the notebook code it uses,
    as the kernel executed them (each function's cell, read from ``linecache``, where IPython
    keeps it), and on the cells that bound the names that code reads (``import math``).

    Grading removes a flagged cell before it runs the notebook, so a question that needs it
    earns 0. Locked cells are not scanned (as in grading).

    Returns:
        ``[(the cell's name, whether it is a cell that defines obj itself, finding)]``, e.g.
        ``[("the cell that defines rms_norm", True, Finding("tamper", 1, "imports
        threading"))]``; ``[]`` when nothing is flagged or nothing can be read (code outside a
        notebook).
    """
    fns = user_code(obj)
    if not fns:
        return []
    own = {f.__code__.co_filename for f in _functions(obj)}
    globals_ = fns[0].__globals__
    locked = locked_cells("".join(linecache.getlines(f.__code__.co_filename, f.__globals__))
                          for f in fns)
    locked_set = {s.strip() for s in locked}
    protected = protected_bindings(locked) if locked else protected_from(globals_)
    out, done = [], set()
    for fn in fns:
        fname = fn.__code__.co_filename
        if fname in done or (os.path.isfile(fname) and "ipykernel_" not in fname):
            continue  # a script or a module file, not a notebook cell: grading scans cells only
        done.add(fname)
        source = "".join(linecache.getlines(fname, fn.__globals__))
        if not source.strip() or source.strip() in locked_set:
            continue
        where = cell_name(source, fn)
        out += [(where, fname in own, f) for f in scan(source, protected)]
    # the names these functions use that another cell bound (not the names the locked cells
    # bind: grading has those whatever the student's cells do)
    always = set(protected) if locked else {k for k, v in protected.items()
                                            if k in ("torch", "nn", "F", "np") or str(v).startswith("normref")}
    for where, source in _binding_cells(fns, locked_set, always):
        out += [(where, False, f) for f in scan(source, protected)]
    return list(dict.fromkeys(out))
