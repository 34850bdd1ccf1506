"""Python's scopes, resolved on a syntax tree and in code objects: which binding a name refers to.

Every source scan of the course reads names the way Python does (PEP 227, the language
reference's "Resolution of names"): a function's parameter or local variable, or an attribute
(``x.var(...)``, ``self.weight``), is not the module-level (the notebook's global) name of the
same spelling. :func:`resolve` reads a parsed cell once and answers, for each name that is used,
where it is bound: in the cell at module level, in a function (a parameter, a local), in a class
body, or nowhere in the cell (``None``: a global another cell bound, or a builtin).
:func:`global_reads` gives the names a code object reads from its globals (its bytecode's
``LOAD_GLOBAL``/``LOAD_NAME``, nested functions included), the run-time counterpart.

The tamper scan (:mod:`normref.tamper`), the reference rule (:mod:`normref.rules`) and the cells
a check reads (:mod:`normref.checks.cells`) use these, in the self-check and in grading alike.
"""
from __future__ import annotations

import ast
import dis
import types
from dataclasses import dataclass, field

__all__ = ["Binding", "Scopes", "resolve", "global_reads", "module_reads"]

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass(frozen=True)
class Binding:
    """One binding of a name: ``kind`` is ``"import"`` (``target``: what it is bound to,
    ``"torch.nn.functional"``), ``"alias"`` (``value``: a plain name or attribute chain assigned
    to it, ``G = torch.nn.functional``), ``"def"`` (a function or class), ``"param"`` or
    ``"other"`` (any other assignment, loop or ``with`` target ...)."""

    kind: str
    target: str | None = None
    value: ast.AST | None = field(default=None, compare=False, hash=False)


@dataclass
class _Scope:
    kind: str  # "module", "function", "class", "comprehension"
    parent: "_Scope | None"
    bound: dict = field(default_factory=dict)  # name -> [Binding]
    declared_global: set = field(default_factory=set)
    declared_nonlocal: set = field(default_factory=set)

    def bind(self, name: str, binding: Binding) -> None:
        self.bound.setdefault(name, []).append(binding)


class Scopes:
    """A parsed source's scopes (:func:`resolve`): :meth:`lookup` says where a used name is bound.

    Attributes:
        tree: the module's syntax tree.
    """

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self._scope_of: dict[int, _Scope] = {}  # id(Name node) -> the scope it is used in
        self.module = _Scope("module", None)
        _Collector(self).run(tree)

    def scope_of(self, node: ast.AST) -> _Scope | None:
        return self._scope_of.get(id(node))

    def lookup(self, node: ast.Name) -> tuple[str, list[Binding]] | None:
        """Where the name ``node`` (as used there) is bound: ``("module", bindings)`` (the cell's
        top level), ``("function", bindings)`` (a parameter or local of the function it is used
        in, or of an enclosing function), ``("class", bindings)``; ``None`` when nothing in this
        source binds it (a global bound by another cell, or a builtin)."""
        scope = self._scope_of.get(id(node))
        if scope is None:
            return None
        return _lookup(scope, node.id, self.module)

    def is_global(self, node: ast.Name) -> bool:
        """Is ``node`` (as used there) the module-level name: bound at the cell's top level, or
        nowhere in the cell (another cell's global, or a builtin)?"""
        found = self.lookup(node)
        return found is None or found[0] == "module"

    def targets(self, node: ast.Name, depth: int = 0) -> list[str | None]:
        """What ``node`` may stand for, by its bindings in this source: import targets
        (``"torch.nn.functional"``), an alias's dotted value resolved the same way
        (``G = torch.nn.functional``), or ``None`` for any other binding; ``[]`` when nothing in
        this source binds it."""
        found = self.lookup(node)
        if found is None:
            return []
        out: list[str | None] = []
        for b in found[1]:
            if b.kind == "import":
                out.append(b.target)
            elif b.kind == "alias" and depth < 8:
                out.extend(self._dotted_targets(b.value, depth + 1))
            else:
                out.append(None)
        return out

    def module_targets(self, name: str) -> list[str | None]:
        """What the module-level name ``name`` may stand for by its bindings at the top level of
        this source (as :meth:`targets`): ``["normref.RMSNorm"]`` for ``RMSNorm = normref.RMSNorm``
        after ``import normref``; ``[]`` when the top level does not bind it."""
        out: list[str | None] = []
        for b in self.module.bound.get(name, []):
            if b.kind == "import":
                out.append(b.target)
            elif b.kind == "alias":
                out.extend(self._dotted_targets(b.value, 1))
            else:
                out.append(None)
        return out

    def _dotted_targets(self, value: ast.AST, depth: int) -> list[str | None]:
        parts = []
        while isinstance(value, ast.Attribute):
            parts.append(value.attr)
            value = value.value
        if not isinstance(value, ast.Name):
            return [None]
        rest = ".".join(reversed(parts))
        roots = self.targets(value, depth) or [value.id]  # unbound here: its own name (a global)
        return [None if r is None else (f"{r}.{rest}" if rest else r) for r in roots]


def _lookup(scope: _Scope, name: str, module: _Scope) -> tuple[str, list[Binding]] | None:
    """Python's resolution of ``name`` used in ``scope`` (class bodies are skipped by the functions
    nested in them; ``global`` and ``nonlocal`` declarations are honoured)."""
    first = scope
    while scope is not None:
        if scope.kind == "module":
            return ("module", scope.bound[name]) if name in scope.bound else None
        if name in scope.declared_global:
            return ("module", module.bound[name]) if name in module.bound else None
        skip = scope.kind == "class" and scope is not first
        if not skip and name in scope.bound and name not in scope.declared_nonlocal:
            return ("class" if scope.kind == "class" else "function", scope.bound[name])
        scope = scope.parent
    return None


class _Collector(ast.NodeVisitor):
    """Builds the scopes and records, for every :class:`ast.Name`, the scope it is used in."""

    def __init__(self, scopes: Scopes):
        self.s = scopes
        self.scope = scopes.module

    def run(self, tree: ast.Module) -> None:
        for stmt in tree.body:
            self.visit(stmt)

    # --- scopes

    def _enter(self, kind: str):
        new = _Scope(kind, self.scope)
        old, self.scope = self.scope, new
        return old

    def _bind_args(self, args: ast.arguments) -> None:
        for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if a is not None:
                self.scope.bind(a.arg, Binding("param"))

    def _visit_signature(self, node) -> None:
        """Defaults, decorators and annotations: evaluated in the enclosing scope."""
        for d in (*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)):
            self.visit(d)
        for d in getattr(node, "decorator_list", ()):
            self.visit(d)
        if not isinstance(node, ast.Lambda):
            for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg,
                      node.args.kwarg):
                if a is not None and a.annotation is not None:
                    self.visit(a.annotation)
            if node.returns is not None:
                self.visit(node.returns)

    def visit_FunctionDef(self, node) -> None:
        self._visit_signature(node)
        self.scope.bind(node.name, Binding("def"))
        old = self._enter("function")
        self._bind_args(node.args)
        for stmt in node.body:
            self.visit(stmt)
        self.scope = old

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_signature(node)
        old = self._enter("function")
        self._bind_args(node.args)
        self.visit(node.body)
        self.scope = old

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for d in (*node.decorator_list, *node.bases, *node.keywords):
            self.visit(d)
        self.scope.bind(node.name, Binding("def"))
        old = self._enter("class")
        for stmt in node.body:
            self.visit(stmt)
        self.scope = old

    def _comprehension(self, node, parts) -> None:
        gens = node.generators
        self.visit(gens[0].iter)  # the first iterable: evaluated in the enclosing scope
        old = self._enter("comprehension")
        for i, g in enumerate(gens):
            if i:
                self.visit(g.iter)
            self._target(g.target, Binding("other"))
            for cond in g.ifs:
                self.visit(cond)
        for p in parts:
            self.visit(p)
        self.scope = old

    def visit_ListComp(self, node) -> None:
        self._comprehension(node, [node.elt])

    visit_SetComp = visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node) -> None:
        self._comprehension(node, [node.key, node.value])

    # --- bindings

    def _target(self, target: ast.AST, binding: Binding) -> None:
        """Bind every name ``target`` stores to; visit the rest (``a[i] = ...``: ``a`` and ``i`` are used)."""
        if isinstance(target, ast.Name):
            self.scope.bind(target.id, binding)
            self.s._scope_of[id(target)] = self.scope
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._target(t, Binding("other"))
        elif isinstance(target, ast.Starred):
            self._target(target.value, Binding("other"))
        else:
            self.visit(target)

    def _value_binding(self, value: ast.AST | None) -> Binding:
        v = value
        while isinstance(v, ast.Attribute):
            v = v.value
        return Binding("alias", value=value) if isinstance(v, ast.Name) and value is not None else Binding("other")

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for t in node.targets:
            self._target(t, self._value_binding(node.value))

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.annotation)
        self._target(node.target, self._value_binding(node.value) if node.value is not None else Binding("other"))

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        if isinstance(node.target, ast.Name):
            self.s._scope_of[id(node.target)] = self.scope
            self.scope.bind(node.target.id, Binding("other"))
        else:
            self.visit(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        scope = self.scope
        while scope.kind == "comprehension" and scope.parent is not None:  # PEP 572: the enclosing scope
            scope = scope.parent
        scope.bind(node.target.id, Binding("other"))
        self.s._scope_of[id(node.target)] = scope

    def visit_For(self, node) -> None:
        self.visit(node.iter)
        self._target(node.target, Binding("other"))
        for stmt in (*node.body, *node.orelse):
            self.visit(stmt)

    visit_AsyncFor = visit_For

    def visit_With(self, node) -> None:
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self._target(item.optional_vars, Binding("other"))
        for stmt in node.body:
            self.visit(stmt)

    visit_AsyncWith = visit_With

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self.scope.bind(node.name, Binding("other"))
        for stmt in node.body:
            self.visit(stmt)

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.asname:
                self.scope.bind(a.asname, Binding("import", a.name))
            else:
                root = a.name.split(".")[0]
                self.scope.bind(root, Binding("import", root))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for a in node.names:
            if a.name == "*":
                continue
            self.scope.bind(a.asname or a.name, Binding("import", f"{node.module or ''}.{a.name}".lstrip(".")))

    def visit_Global(self, node: ast.Global) -> None:
        self.scope.declared_global.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.scope.declared_nonlocal.update(node.names)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._target(t, Binding("other"))

    def visit_MatchAs(self, node) -> None:
        if node.pattern is not None:
            self.visit(node.pattern)
        if node.name:
            self.scope.bind(node.name, Binding("other"))

    def visit_MatchStar(self, node) -> None:
        if node.name:
            self.scope.bind(node.name, Binding("other"))

    def visit_MatchMapping(self, node) -> None:
        self.generic_visit(node)
        if node.rest:
            self.scope.bind(node.rest, Binding("other"))

    # --- uses

    def visit_Name(self, node: ast.Name) -> None:
        self.s._scope_of[id(node)] = self.scope
        if isinstance(node.ctx, (ast.Store, ast.Del)):  # reached through a target we did not unpack
            self.scope.bind(node.id, Binding("other"))


def resolve(tree: ast.Module) -> Scopes:
    """The scopes of a parsed module (one notebook cell, or a function's source)."""
    return Scopes(tree)


def module_reads(tree: ast.Module, scopes: Scopes | None = None) -> tuple[set[str], set[str]]:
    """The names ``tree`` reads from its module's namespace that it does not bind at top level
    itself: ``(read when the cell runs, read later when a function of it is called)``. A
    function's local, a parameter and an attribute are not among them."""
    scopes = scopes or resolve(tree)
    now, later = set(), set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load):
            continue
        found = scopes.lookup(node)
        if found is not None:
            continue  # bound in this source: a local, or the cell's own top-level name
        scope = scopes.scope_of(node)
        deferred = False
        while scope is not None and scope.kind != "module":
            deferred = deferred or scope.kind == "function"
            scope = scope.parent
        (later if deferred else now).add(node.id)
    return now, later


def global_reads(code: types.CodeType) -> set[str]:
    """The global names ``code`` reads when it runs (``LOAD_GLOBAL``, and ``LOAD_NAME`` in a class
    body or module), its nested functions', lambdas' and classes' included; not its locals, its
    parameters, its closures' cells or any attribute (``x.var`` reads no global ``var``)."""
    out: set[str] = set()
    todo = [code]
    seen = set()
    while todo:
        c = todo.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        for ins in dis.get_instructions(c):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS") and isinstance(ins.argval, str):
                out.add(ins.argval)
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return out
