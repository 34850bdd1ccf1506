"""The clean room's definitions (:mod:`grader.kernel.cleanroom`): which statements of a notebook's
cells it executes before a question's calls, what a hidden test hands back, how far a cell ran in
the kernel, and what to import before the seal. Pure functions of the cells' sources (Python's
``ast`` and ``symtable``): nothing here runs the student's code.
"""
from __future__ import annotations

import ast
import re
import symtable

_KINDS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
          ast.AnnAssign, ast.AugAssign)

#: Cell magics that run their cell as Python: their cell counts as if the magic were not there.
_PYTHON_CELL_MAGICS = ("%%time", "%%timeit", "%%capture", "%%prun")


def _source(cell_source: str) -> ast.Module | None:
    """A cell as Python (IPython's magics and shell escapes turned into calls, as the kernel
    does; a ``%%time`` or ``%%capture`` line dropped: the cell is Python), or None when it does
    not parse (the kernel could not run it either)."""
    from IPython.core.inputtransformer2 import TransformerManager

    from normref._syntax import parse

    first, _, rest = cell_source.lstrip("\n").partition("\n")
    if first.split(" ")[0].strip() in _PYTHON_CELL_MAGICS:
        cell_source = "\n" * (len(cell_source) - len(cell_source.lstrip("\n")) + 1) + rest  # same line numbers
    try:
        return parse(TransformerManager().transform_cell(cell_source))
    except (SyntaxError, ValueError):
        return None


def _target_names(target) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(t) for t in target.elts)) if target.elts else set()
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    while isinstance(target, (ast.Attribute, ast.Subscript)):  # a change made to a needed object
        target = target.value
    return {target.id} if isinstance(target, ast.Name) else set()


def _binds(node) -> set[str]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {"*"} if any(a.name == "*" for a in node.names) else \
            {a.asname or a.name.split(".")[0] for a in node.names}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return set().union(*(_target_names(t) for t in targets))


def _module_level(node):
    """The nodes of statement ``node`` that run at module level: not inside a function, lambda,
    class body or comprehension (whose names are their own)."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
                              ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            todo.extend(ast.iter_child_nodes(n))


def _root(node) -> str | None:
    """``X`` of ``X``, ``X.a.b``, ``X[k]``, ``X.a[k].b``; None when it is not a name's."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _changes(node) -> tuple[set[str], set[str]]:
    """What a module-level statement that is not a definition (a loop, an ``if``, ``with``, ``try``,
    an expression) does to globals: ``(names it binds, names whose object it changes through a
    method call, an item or an attribute: ``TABLE.update(...)``, ``TABLE[k] = v``)``."""
    binds, changed = set(), set()
    for n in [node, *_module_level(node)]:
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            binds.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)) \
                and n is not node:
            binds |= _binds(n)
        elif isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, (ast.Store, ast.Del)):
            changed.add(_root(n))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            changed.add(_root(n.func.value))
    return binds, changed - {None}


def _uses(source: str) -> set[str]:
    """The global names a statement reads (when it runs, or when its functions and methods run):
    Python's own symbol tables, so a local, a parameter or an attribute is not a global."""
    out: set[str] = set()

    def walk(table, top: bool) -> None:
        for sym in table.get_symbols():
            if not sym.is_referenced():
                continue
            if top or sym.is_global() or (table.get_type() == "class" and not sym.is_assigned()
                                          and not sym.is_imported()):
                out.add(sym.get_name())
        for child in table.get_children():
            walk(child, False)

    walk(symtable.symtable(source, "<definition>", "exec"), True)
    return out


def _narrowed(node, needed: set[str]):
    """An import statement with only the names that are needed (a locked cell imports checkers
    too: those are not the answer's)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)) and not any(a.name == "*" for a in node.names):
        keep = [a for a in node.names if (a.asname or a.name.split(".")[0]) in needed]
        node = type(node)(**{**{f: getattr(node, f) for f in node._fields}, "names": keep})
    return node


def hidden_test_targets(cell_source: str, grade_id: str) -> list[str] | None:
    """The expressions a hidden test hands back for ``grade_id`` (``["rms_norm"]``), or None."""
    tree = _source(cell_source)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "hand_back" \
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == grade_id:
            return [ast.unparse(a) for a in node.args[1:]]
    return None


def _imports_own(node, own: frozenset[str]) -> bool:
    """Whether ``node`` imports one of the student's own modules (``own``: top-level names)."""
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] in own for a in node.names)
    return isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in own


def definitions(cells: list, roots: set[str], own: frozenset[str] = frozenset()) -> list[list[tuple[str, str]]]:
    """Per cell of ``cells`` (``[(label, source or None for a hidden test, ran to)]``), the
    statements the clean room executes there, ``[(label, source)]``: the module-level imports,
    functions, classes and assignments that bind a name of ``roots`` or one a kept statement
    reads, and the other statements (a loop, an ``if``, an expression) that bind such a name or
    change an object the student's code made under it (``TABLE.update(...)``, ``TABLE[k] = v`` in
    a loop), in order (imports narrowed to the names needed), and every import of one of the
    student's own modules handed in beside the notebook (``own``, top-level names: importing one
    runs the student's code, which may define what the answer needs, as in the kernel). ``ran
    to``: None for a cell that ran to its end in the kernel, else the line where it stopped
    (:func:`ran_to`): only statements that end before it count, as in the kernel."""
    stmts = []  # (cell index, label, node, binds, uses)
    others = []  # (its index in stmts, the names whose objects it changes): loops, ifs, expressions
    for i, (label, source, stop) in enumerate(cells):
        tree = _source(source) if source is not None else None
        for node in tree.body if tree is not None else ():
            if stop is not None and (node.end_lineno or node.lineno) >= stop:
                break
            if isinstance(node, ast.AnnAssign) and node.value is None:
                continue
            try:
                if isinstance(node, _KINDS):
                    stmts.append((i, label, node, _binds(node), _uses(ast.unparse(node))))
                else:
                    binds, changed = _changes(node)
                    others.append((len(stmts), changed))
                    stmts.append((i, label, node, binds, _uses(ast.unparse(node))))
            except (SyntaxError, ValueError):
                continue
    # a statement that changes an object the student's own code made (not a module it imported:
    # ``torch.manual_seed(0)`` or ``plt.plot(...)`` is not a definition) binds it anew
    made = set().union(*(b for _, _, n, b, _ in stmts if not isinstance(n, (ast.Import, ast.ImportFrom))))
    for j, changed in others:
        stmts[j] = (*stmts[j][:3], stmts[j][3] | (changed & made), stmts[j][4])
    needed = set(roots)
    chosen = {j for j, (_, _, node, _, _) in enumerate(stmts) if _imports_own(node, own)}
    for j in chosen:
        needed |= stmts[j][4]
    changed = True
    while changed:
        changed = False
        for j, (_, _, _, binds, uses) in enumerate(stmts):
            if j not in chosen and (binds & needed or "*" in binds):
                chosen.add(j)
                needed |= uses
                changed = True
    out: list[list[tuple[str, str]]] = [[] for _ in cells]
    for j, (i, label, node, _, _) in enumerate(stmts):
        if j in chosen:
            out[i].append((label, ast.unparse(node if _imports_own(node, own) else _narrowed(node, needed))))
    return out


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TOP_LINE = re.compile(r"Cell In\[\d+\], line (\d+)")


def ran_to(cell) -> int | None:
    """How far a code cell ran in the kernel: None when it ran to its end, else the line of its own
    where it stopped (an error, nbgrader's time limit's interrupt, the guard's refusal: the first
    frame of its traceback), 0 when that cannot be told (nothing of it counts)."""
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if not errors:
        return None
    m = _TOP_LINE.search(_ANSI.sub("", "".join(errors[0].get("traceback") or [])))
    return int(m.group(1)) if m else 0


def preimports(statements: list[tuple[str, str]]) -> tuple[list[str], list[list[str]]]:
    """What the clean room imports before it seals (no file can be read after): the modules the
    statements import anywhere, and ``[module, name]`` of their ``from module import name``."""
    modules, names = [], []
    for _, src in statements:
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Import):
                modules += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.append(node.module)
                names += [[node.module, a.name] for a in node.names if a.name != "*"]
    return list(dict.fromkeys(modules)), names
