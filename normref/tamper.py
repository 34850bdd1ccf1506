"""Static scan of a submission's editable cells for attempts to beat the grader (the grader's
``grader.intake.tamper`` and the student's self-check, :mod:`normref.checks`, run this same code).

Student code runs in the same kernel as the test cells, so an answer cell *could* replace a
checker, a comparison function or IPython's display and traceback machinery. This scan reads
each editable code cell (answer cells and any cell the student inserted) as a Python syntax
tree and reports:

* ``tamper``: rebinding a name the locked cells rely on (``check_rms_norm = ...``,
  ``def check_rms_norm``, ``import numpy as torch``); assigning to or deleting an attribute of a
  module (``torch.allclose = ...``, ``normref.checks.X = ...``, ``sys.displayhook = ...``);
  ``setattr``/``delattr`` on a module; reaching the interpreter's machinery (``get_ipython``,
  ``__builtins__``, ``__import__``, ``exec``/``eval``/``compile``, ``globals()[...] =``,
  ``sys.modules``) or importing ``builtins``, ``ctypes``, ``gc``, ``inspect``, ``importlib``,
  ``IPython.core``, ``ipykernel``, ``nbgrader``; a module this cell imports is a module too
  (``import normref.handback as h; h.run_calls = ...``); reaching ``normref.handback`` (or the
  grader's other kernel modules, :data:`GRADER_MODULES`: ``normref.recorder`` ...); work the
  grader's call recorder cannot see (``threading``, ``concurrent.futures``, ``multiprocessing``,
  TorchScript: ``torch.jit``, ``CompilationUnit``; ``torch.compile``; ``torch._C``);
* ``reference``: calling the reference instead of implementing it (``normref.rms_norm``,
  ``F.layer_norm``, ``torch.rms_norm``, ``nn.LayerNorm`` ...).

Every name is read as Python resolves it (:mod:`normref.scopes`): a parameter, a local variable
or an attribute named ``F``, ``vars`` or ``var`` is not the module, the builtin or another cell's
global of that name.

A finding takes no points: only a reference seen running inside the student's call does
(:func:`normref.rules.observed_reference`). ``make grade`` runs every cell as handed in, scores
each question on its outputs, and flags what this scan finds in the cells the question's code
comes from for the instructor's review (:func:`normref.checks.cells.question_findings`, the
same function the student's self-check runs on the cells its kernel ran), in the words of
:func:`normref.rules.review_message`: ``For the instructor's review (no points taken): imports
threading (line 1 of the cell that defines rms_norm)``, a cell named by what it defines, the
same in JupyterLab, ``nbgrader validate`` and the feedback. Nothing here is secret: the rules
are part of the assignment's instructions.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from . import rules as _rules
from ._syntax import parse

MODULE_NAMES = {"normref", "np", "numpy", "torch", "F", "nn", "math", "sys", "os", "builtins",
                "IPython", "ipykernel", "nbgrader", "unittest", "pytest", "functools", "operator"}
#: The grader's other modules in the kernel besides ``normref.handback`` (the hand-back's plan of a
#: class question, its wire format, the call recorder and the call helpers): reaching one is tamper,
#: as reaching the hand-back is.
GRADER_MODULES = {"plan": "the grader's hand-back", "wire": "the hand-back's wire format",
                  "recorder": "the grader's call recorder", "reference_code": "the grader's call recorder",
                  "calling": "the grader's call helpers", "threads": "the grader's call recorder"}
DENY_IMPORTS = {"builtins", "ctypes", "gc", "inspect", "importlib", "ipykernel", "nbgrader",
                "IPython.core", "IPython.terminal", "traceback", "atexit", "signal", "code", "codeop",
                # the grader's hand-back, and work the grader's call recorder cannot see: other
                # threads and processes (a pool started before the graded call), TorchScript
                "normref.handback", "threading", "_thread", "concurrent", "multiprocessing", "torch.jit",
                "torch._C", "torch.multiprocessing", *(f"normref.{m}" for m in GRADER_MODULES)}
#: What every released notebook imports from the hand-back (its imports and test cells): importing
#: these names changes nothing, so it is no finding (a self-check that cannot find its notebook's
#: locked cells reads that cell too).
PUBLIC_HANDBACK = {"normref.handback": {"as_graded", "hand_back"}}
#: Attributes whose use is tamper: TorchScript (``torch.jit``, ``CompilationUnit``; its ops run
#: outside torch's function mode), ``torch.compile``, torch's C internals, the grader's hand-back.
DENY_ATTRS = {"jit": "TorchScript (torch.jit)", "CompilationUnit": "TorchScript (CompilationUnit)",
              "_C": "torch's C internals (torch._C)", "handback": "the grader's hand-back (normref.handback)"}
DENY_NAMES = {"get_ipython", "__builtins__", "__import__", "exec", "eval", "compile", "globals",
              "locals", "vars", "__loader__", "__spec__", "breakpoint"}
# The rule "implement it, do not call the reference" is normref.rules', shared with the student's
# self-check (normref.checks), so both say the same thing about the same code.
REFERENCE_ATTRS = _rules.REFERENCE_ATTRS


@dataclass(frozen=True)
class Finding:
    """One suspicious construct: ``kind`` is ``"tamper"`` or ``"reference"``."""

    kind: str
    line: int
    what: str


# The name a chain of attributes, subscripts and calls starts from, and its dotted spelling:
# one implementation, the student-side rule's (normref/rules.py).
_root = _rules._root
_dotted = _rules._dotted


def _import_targets(node) -> list[tuple[str, str]]:
    """(bound name, what it is bound to) for an import statement."""
    out = []
    if isinstance(node, ast.Import):
        for a in node.names:
            out.append((a.asname or a.name.split(".")[0], a.name if a.asname else a.name.split(".")[0]))
    elif isinstance(node, ast.ImportFrom):
        for a in node.names:
            out.append((a.asname or a.name, f"{node.module}.{a.name}"))
    return out


def protected_bindings(locked_sources: list[str]) -> dict[str, str | None]:
    """The names the locked cells rely on: ``{name: import target or None}`` for each name a
    locked cell binds at top level (an import, a function or class) that a later locked cell
    reads without binding it itself (:func:`normref.scopes.module_reads`). A test cell that
    imports what it uses (``from normref import check_rms_norm``) relies on nothing an answer
    cell could rebind; an answer cell that rebinds a relied-on name changes what a locked cell
    runs."""
    from .scopes import module_reads

    bound: dict[str, str | None] = {}
    relied: dict[str, str | None] = {}
    for src in locked_sources:
        try:
            tree = parse(src)
        except SyntaxError:
            continue
        now, later = module_reads(tree)
        for name in (now | later) & set(bound):
            relied[name] = bound[name]
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for name, target in _import_targets(node):
                    bound[name] = target
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound[node.name] = None
    return relied


#: ``sys`` attributes whose use is tamper (the interpreter's hooks and module table).
_SYS_ATTRS = ("modules", "displayhook", "excepthook", "stdout", "stderr", "settrace", "setprofile", "meta_path",
              "path_hooks", "_getframe")
#: Attributes of any object whose use is tamper (a function's or a frame's insides).
_INSIDES = ("__globals__", "__code__", "__builtins__", "__dict__", "f_globals", "f_locals", "f_back",
            "__subclasses__", "__closure__", "__defaults__", "__kwdefaults__")


def _root_name(node: ast.AST) -> ast.Name | None:
    """The name a chain of attributes, subscripts and calls starts from (``torch`` of
    ``torch.nn.functional.x``), or None."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node if isinstance(node, ast.Name) else None


class _Names:
    """The scope-resolved reading of one cell (:mod:`normref.scopes`): whether a name, where it is
    used, stands for a module, and whether it is a builtin."""

    def __init__(self, tree: ast.Module, modules: set):
        from .scopes import resolve

        self.scopes = resolve(tree)
        self.modules = modules

    def is_module(self, node: ast.AST | None) -> bool:
        """Does the chain ``node`` start from a module (or an object imported from one)? A
        parameter, a local or any other assignment is not, whatever its spelling; a name bound
        nowhere in the cell is when it is one of the known modules."""
        root = _root_name(node) if node is not None else None
        if root is None:
            return False
        targets = self.scopes.targets(root)
        if targets:
            return any(t is not None for t in targets)
        return root.id in self.modules

    def is_builtin(self, node: ast.Name) -> bool:
        """Is ``node`` bound nowhere in the cell (so, unless another cell bound it, the builtin)?"""
        return isinstance(node.ctx, ast.Load) and self.scopes.lookup(node) is None


def _assignment_to(target, names: _Names) -> str | None:
    """What assigning to (or deleting) ``target`` is, when it is tamper: ``"modifies torch.allclose"``
    (an attribute or item of a module), ``"writes into globals()"``; else None."""
    if not isinstance(target, (ast.Attribute, ast.Subscript)):
        return None
    if names.is_module(target):
        return f"modifies {_dotted(target) or _root(target)}"
    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Call):
        fn = _root_name(target.value)
        if fn is not None and fn.id in DENY_NAMES and names.is_builtin(fn):
            return f"writes into {fn.id}()"
    return None


def _attribute_use(node: ast.Attribute, names: _Names) -> str | None:
    """What using this attribute is, when it is tamper (``"uses sys.modules"``), else None."""
    dotted = _dotted(node)
    if dotted.startswith("sys.") and dotted.split(".")[1] in _SYS_ATTRS and names.is_module(node):
        return f"uses {dotted}"
    if node.attr in _INSIDES:
        return f"uses {node.attr}"
    if node.attr in DENY_ATTRS or (node.attr == "compile" and _root(node) in ("torch", "_torch")
                                   and names.is_module(node)):
        return f"uses {DENY_ATTRS.get(node.attr, 'torch.compile')}"
    if node.attr in GRADER_MODULES and names.is_module(node):
        return f"uses {GRADER_MODULES[node.attr]} (normref.{node.attr})"
    return None


def _tree_findings(tree: ast.Module, protected: dict[str, str | None], modules: set = frozenset()) -> list[Finding]:
    """The tamper findings in a cell's parsed code: denied imports and builtins, rebound
    protected names, assignments to and denied uses of modules' attributes, ``setattr``; every
    name read as Python resolves it (a parameter or local named ``vars`` or ``F`` is neither the
    builtin nor the module)."""
    names = _Names(tree, MODULE_NAMES | set(protected) | set(modules))
    findings: list[Finding] = []

    def bind(name: str, line: int, target: str | None = None):
        if name in protected and not (target is not None and protected[name] == target):
            findings.append(Finding("tamper", line, f"rebinds {name!r}, which the test cells use"))

    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for name, target in _import_targets(node):
                mod = target if isinstance(node, ast.Import) else (node.module or "")
                public = isinstance(node, ast.ImportFrom) and \
                    {a.name for a in node.names} <= PUBLIC_HANDBACK.get(mod, set())
                if any(mod == d or mod.startswith(d + ".") for d in DENY_IMPORTS) and not public:
                    findings.append(Finding("tamper", line, f"imports {mod}"))
                if node in tree.body:
                    bind(name, line, target)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node in tree.body:
                bind(node.name, line)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)) and node in tree.body:
                        bind(sub.id, line)
                what = _assignment_to(t, names)
                if what:
                    findings.append(Finding("tamper", line, what))
        elif isinstance(node, ast.Name) and node.id in DENY_NAMES and names.is_builtin(node):
            findings.append(Finding("tamper", line, f"uses {node.id}"))
        elif isinstance(node, ast.Attribute):
            what = _attribute_use(node, names)
            if what:
                findings.append(Finding("tamper", line, what))
        if isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Name) and fn.id in ("setattr", "delattr") and node.args and names.is_builtin(fn):
                if names.is_module(node.args[0]):
                    findings.append(Finding("tamper", line, f"{fn.id} on {_dotted(node.args[0])}"))
    return findings


#: IPython magics that change nothing grading relies on (a plot's backend, a timing, a display
#: precision): not findings.
HARMLESS_MAGICS = frozenset({"%matplotlib", "%time", "%timeit", "%%time", "%%timeit", "%precision", "%who",
                             "%whos"})


def _magic(line: str) -> str | None:
    """The magic or shell command a line starts with (``"%timeit"``, ``"!"``...), or None."""
    stripped = line.lstrip()
    if not stripped.startswith(("%", "!")):
        return None
    return stripped.split()[0] if stripped.split() else stripped


def scan(source: str, protected: dict[str, str | None] | None = None,
         bindings: dict[str, str | None] | None = None) -> list[Finding]:
    """Findings in one cell's source (IPython magics and shell lines are scanned as tamper, but
    for :data:`HARMLESS_MAGICS`).

    Args:
        source: the cell's code.
        protected: the names the locked cells rely on (:func:`protected_bindings`): rebinding one
            is a finding.
        bindings: what names bound outside the cell stand for (``{"F": "torch.nn.functional"}``:
            the locked cells' imports, or a lesson's globals); default ``protected``.
    """
    protected = protected or {}
    bindings = dict(protected if bindings is None else bindings)
    lines = source.splitlines()
    findings = [Finding("tamper", i, f"IPython magic or shell command {_magic(ln)!r}")
                for i, ln in enumerate(lines, 1) if _magic(ln) and _magic(ln) not in HARMLESS_MAGICS]
    code = "\n".join("" if _magic(ln) else ln for ln in lines)
    try:
        tree = parse(code)
    except SyntaxError:
        return findings  # a syntax error only costs the student the cell; nothing to tamper with
    modules = {k for k, v in bindings.items() if v is not None}
    findings += _tree_findings(tree, protected, modules)
    for line, what in _rules.reference_calls(code, bindings):  # imports and calls of a reference
        findings.append(Finding("reference", line, what.replace("calls ", "calls the reference ", 1)))
    # one finding per (kind, line, what)
    return sorted(set(findings), key=lambda f: (f.line, f.kind, f.what))
