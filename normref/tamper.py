"""Static scan of a submission's editable cells for attempts to beat the grader (the grader's
``grader.tamper`` and the student's self-check, :mod:`normref.checks`, run this same code).

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

``make grade`` neutralises a flagged cell before autograding (its question then earns what a
blank answer earns) and lists the finding in the report. The scan is deliberately strict: a
false alarm costs one question and is visible to the instructor, who can regrade by hand.

The scan is pure (a syntax tree, the rules below; nothing of the grader's): the student's
self-check runs it on the cells that defined the checked code and says what grading will do
(``0 points: imports threading (line 1 of the cell that defines rms_norm) — grading removes a
cell that changes how grading works; remove the import``: a cell named by what it defines, the
same in JupyterLab and in ``nbgrader validate``), so the self-check, Validate and grading agree.
Nothing here is secret: the rules are part of the assignment's instructions.
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
                  "calling": "the grader's call helpers"}
DENY_IMPORTS = {"builtins", "ctypes", "gc", "inspect", "importlib", "ipykernel", "nbgrader",
                "IPython.core", "IPython.terminal", "traceback", "atexit", "signal", "code", "codeop",
                # the grader's hand-back, and work the grader's call recorder cannot see: other
                # threads and processes (a pool started before the graded call), TorchScript
                "normref.handback", "threading", "_thread", "concurrent", "multiprocessing", "torch.jit",
                "torch._C", "torch.multiprocessing", *(f"normref.{m}" for m in GRADER_MODULES)}
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
    """Names the locked cells bind at top level: ``{name: import target or None}``."""
    names: dict[str, str | None] = {}
    for src in locked_sources:
        try:
            tree = parse(src)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for name, target in _import_targets(node):
                    names[name] = target
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[node.name] = None
    return names


#: ``sys`` attributes whose use is tamper (the interpreter's hooks and module table).
_SYS_ATTRS = ("modules", "displayhook", "excepthook", "stdout", "stderr", "settrace", "setprofile", "meta_path",
              "path_hooks", "_getframe")
#: Attributes of any object whose use is tamper (a function's or a frame's insides).
_INSIDES = ("__globals__", "__code__", "__builtins__", "__dict__", "f_globals", "f_locals", "f_back",
            "__subclasses__", "__closure__", "__defaults__", "__kwdefaults__")


def _assignment_to(target, modules: set) -> str | None:
    """What assigning to (or deleting) ``target`` is, when it is tamper: ``"modifies torch.allclose"``
    (an attribute or item of a module, ``modules``), ``"writes into globals()"``; else None."""
    if not isinstance(target, (ast.Attribute, ast.Subscript)):
        return None
    root = _root(target)
    if root in modules:
        return f"modifies {_dotted(target) or root}"
    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Call) and _root(target.value) in DENY_NAMES:
        return f"writes into {_root(target.value)}()"
    return None


def _attribute_use(node: ast.Attribute, modules: set) -> str | None:
    """What using this attribute is, when it is tamper (``"uses sys.modules"``), else None."""
    dotted = _dotted(node)
    if dotted.startswith("sys.") and dotted.split(".")[1] in _SYS_ATTRS:
        return f"uses {dotted}"
    if node.attr in _INSIDES:
        return f"uses {node.attr}"
    if node.attr in DENY_ATTRS or (node.attr == "compile" and _root(node) in ("torch", "_torch")):
        return f"uses {DENY_ATTRS.get(node.attr, 'torch.compile')}"
    if node.attr in GRADER_MODULES and _root(node) in modules:
        return f"uses {GRADER_MODULES[node.attr]} (normref.{node.attr})"
    return None


def _tree_findings(tree: ast.Module, protected: dict[str, str | None]) -> list[Finding]:
    """The tamper findings in a cell's parsed code: denied imports and names, rebound
    protected names, assignments to and denied uses of modules' attributes, ``setattr``."""
    # names this cell binds to a module or a module's attribute by an import (``import
    # normref.handback as h``): assigning to their attributes changes that module
    imported = {name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for name, _ in _import_targets(node)}
    modules = MODULE_NAMES | set(protected) | imported
    findings: list[Finding] = []

    def bind(name: str, line: int, target: str | None = None):
        if name in protected and not (target is not None and protected[name] == target):
            findings.append(Finding("tamper", line, f"rebinds {name!r}, which the test cells use"))

    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for name, target in _import_targets(node):
                mod = target if isinstance(node, ast.Import) else (node.module or "")
                if any(mod == d or mod.startswith(d + ".") for d in DENY_IMPORTS):
                    findings.append(Finding("tamper", line, f"imports {mod}"))
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
                what = _assignment_to(t, modules)
                if what:
                    findings.append(Finding("tamper", line, what))
        elif isinstance(node, ast.Name) and node.id in DENY_NAMES:
            findings.append(Finding("tamper", line, f"uses {node.id}"))
        elif isinstance(node, ast.Attribute):
            what = _attribute_use(node, modules)
            if what:
                findings.append(Finding("tamper", line, what))
        if isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Name) and fn.id in ("setattr", "delattr") and node.args:
                if _root(node.args[0]) in modules:
                    findings.append(Finding("tamper", line, f"{fn.id} on {_dotted(node.args[0])}"))
    return findings


def scan(source: str, protected: dict[str, str | None] | None = None) -> list[Finding]:
    """Findings in one cell's source (IPython magics and shell lines are scanned as tamper).

    Args:
        source: the cell's code.
        protected: names bound by the locked cells (see :func:`protected_bindings`).
    """
    protected = protected or {}
    lines = source.splitlines()
    findings = [Finding("tamper", i, f"IPython magic or shell command {ln.lstrip().split()[0]!r}")
                for i, ln in enumerate(lines, 1) if ln.lstrip().startswith(("%", "!"))]
    code = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in lines)
    try:
        tree = parse(code)
    except SyntaxError:
        return findings  # a syntax error only costs the student the cell; nothing to tamper with
    findings += _tree_findings(tree, protected)
    for line, what in _rules.reference_calls(code, protected):  # imports and calls of a reference
        findings.append(Finding("reference", line, what.replace("calls ", "calls the reference ", 1)))
    # one finding per (kind, line, what)
    return sorted(set(findings), key=lambda f: (f.line, f.kind, f.what))
