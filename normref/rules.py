"""Rules that cost points, in the code both the student's self-check and the grader run.

One rule today: **implement it, do not call it.** An answer that calls a library or reference
normalization (``F.rms_norm``, ``torch.nn.functional.layer_norm``, ``torch.rms_norm``,
``nn.LayerNorm``, ``normref.rms_norm``, ``normref.pre_ln`` ...) instead of implementing it earns
0 for that question. It is applied twice, the same way in grading and in the student's
self-check (:mod:`normref.checks`):

* at run time: every call of the student's code runs under
  :class:`normref.recorder.ReferenceRecorder` with this module's lists of names
  (:data:`NORM_REFERENCE`, :data:`BACKWARD_REFERENCE`, :data:`PLACEMENT_REFERENCE`,
  :data:`BLOCK_REFERENCE`), which sees a reference run however it was spelled
  (``getattr(F, "rms" + "_norm")``, a subclass of ``nn.RMSNorm``, ``RMSNorm = normref.RMSNorm``),
  and also counts any other normref code the answer runs (a course helper holding a reference),
  except the parts the assignment hands out (``CausalSelfAttention``, ``FeedForward``) and the
  grader's own objects; a copy of a reference's code; torch's ``_refs``/``_decomp``/compiler
  code (questions with ``torch_names``); the recorder switched off; and, for the backward
  (``"autograd": True``), autograd;
* on the source: the tamper scan (``normref/tamper.py``, which ``grader/tamper.py`` runs and
  the self-check runs too) reads each answer cell with
  :func:`reference_calls`, a checker the student's function or class with
  :func:`reference_calls_in`.

Either way the student reads, in the notebook and in the feedback, :func:`rule_message`'s
one line: "0 points: calls F.rms_norm — implement it with tensor operations" (one line per
violation: the source's spelling and the recorder's words for one call are said once).

Nothing here is secret: the rule is part of the assignment's instructions.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import types
from typing import Mapping

from ._syntax import parse

__all__ = ["BACKWARD_REFERENCE", "BLOCK_REFERENCE", "DYT_REFERENCE", "NORM_REFERENCE", "NORMREF_BACKWARD",
           "NORMREF_DYT", "NORMREF_MODERN", "NORMREF_NORMS", "NORMREF_PLACEMENT", "NORMREF_QK", "PERI_REFERENCE",
           "PLACEMENT_REFERENCE", "QK_REFERENCE", "REFERENCE_ATTRS", "REFERENCE_ROOTS", "RULE_PREFIX",
           "TORCH_NORMS", "reference_calls", "reference_calls_in", "rule_message"]

# What counts as running a reference, at run time (the arguments of
# :class:`normref.recorder.ReferenceRecorder`, used by grading and by the self-checks alike).

#: torch functions and ops that compute a normalization (names as a TorchFunctionMode sees them).
TORCH_NORMS = ("layer_norm", "rms_norm", "group_norm", "instance_norm", "batch_norm", "native_layer_norm",
               "_fused_rms_norm", "native_batch_norm", "native_group_norm", "local_response_norm")
#: normref's reference normalizations, as ``module.qualname``.
NORMREF_NORMS = ("normref.functional.layer_norm", "normref.functional.rms_norm", "normref.modules.LayerNorm.forward",
                 "normref.modules.RMSNorm.forward", "normref.blocks.TransformerBlock.forward")
#: normref's reference placements (Pre-LN, Post-LN, the block).
NORMREF_PLACEMENT = ("normref.blocks.pre_ln", "normref.blocks.post_ln", "normref.blocks.TransformerBlock.forward")
#: normref's reference placements of lesson 04, and its QK-norm logits and DyT.
NORMREF_MODERN = ("normref.placements.peri_ln", "normref.placements.output_ln", "normref.placements.deep_norm")
NORMREF_QK = ("normref.placements.qk_norm_logits", "normref.blocks.CausalSelfAttention.logits",
              "normref.blocks.CausalSelfAttention.forward")
NORMREF_DYT = ("normref.functional.dyt", "normref.modules.DyT.forward")
#: normref's measured LayerNorm gradients (the complex step; the analytic backward is the grader's).
NORMREF_BACKWARD = ("normref.backward.layer_norm_grads", "normref.backward.vjp", "normref.backward._jvp_rows",
                    "normref.backward.forward_variant")

# Per question, what the recorder counts (``ReferenceRecorder(**X)``): the same in the
# self-check (normref.checks) and in grading (grader.scoring.QUESTIONS' ``reference``).
#: rms_norm, layer_norm and the RMSNorm module.
NORM_REFERENCE = {"torch_names": TORCH_NORMS, "normref_names": NORMREF_NORMS}
#: the LayerNorm backward pass, by hand: no reference, and no autograd (``torch.autograd.grad``,
#: ``Tensor.backward``, ``torch.func``) while the answer runs.
BACKWARD_REFERENCE = {"torch_names": TORCH_NORMS + ("native_layer_norm_backward",),
                      "normref_names": NORMREF_NORMS + NORMREF_BACKWARD, "autograd": True}
#: Pre-LN and Post-LN: the norm is handed in (normref's own may run), a placement may not.
PLACEMENT_REFERENCE = {"normref_names": NORMREF_PLACEMENT}
#: Peri-LN (the norms are handed in: normref's own may run), QK-norm logits (the q/k norms are
#: handed in), DyT (no reference DyT; torch's tanh is what it is made of).
PERI_REFERENCE = {"normref_names": NORMREF_PLACEMENT + NORMREF_MODERN}
QK_REFERENCE = {"normref_names": NORMREF_QK}
DYT_REFERENCE = {"normref_names": NORMREF_DYT}
#: the pre-norm block: no torch norm, no normref placement, and no normref norm of the student's
#: own (``RMSNorm = normref.RMSNorm``); the norms the checker swaps in are handed in
#: (``ReferenceRecorder(handed_in=...)``) and may run theirs.
BLOCK_REFERENCE = {"torch_names": TORCH_NORMS, "normref_names": NORMREF_PLACEMENT + NORMREF_NORMS}

#: Names of reference normalizations (and the course's reference placements and backward).
REFERENCE_ATTRS = frozenset({
    "layer_norm", "rms_norm", "LayerNorm", "RMSNorm", "group_norm", "GroupNorm", "pre_ln",
    "post_ln", "TransformerBlock", "TransformerStack", "layer_norm_backward", "rms_norm_backward",
    "native_layer_norm", "peri_ln", "output_ln", "deep_norm", "qk_norm_logits", "dyt", "DyT"})

#: Packages whose normalizations count as the reference, and the usual aliases of their modules.
REFERENCE_PACKAGES = ("normref", "torch")
REFERENCE_ROOTS = frozenset({"normref", "torch", "F", "nn"})

#: How a line about a broken rule starts: what grading gives the question.
RULE_PREFIX = "0 points: "


def rule_message(what: str, backend: str = "torch", remedy: str | None = None) -> str:
    """The one line a student reads for a broken rule, in the self-check, Validate and the
    feedback alike: ``"0 points: calls F.rms_norm — implement it with tensor operations"``.

    Args:
        what: what the code does, as the source spells it or grading's recorder words it
            (``"calls torch's rms_norm"``, ``"uses autograd"``, ``"switched off the grader's
            call recorder (torch function mode)"``).
        backend: ``"numpy"``: the remedy says array operations.
        remedy: what to do instead; by default the remedy for ``what`` (implement it, write
            the backward by hand, remove the code that does it).
    """
    ops = "array operations" if backend == "numpy" else "tensor operations"
    if remedy is None:
        if what.startswith("uses autograd"):
            remedy = f"the assignment asks for the backward by hand: write it with {ops}"
        elif what.startswith(("switched off", "changed the grader", "runs code in another")):
            remedy = "remove the code that does it"
        else:
            remedy = f"implement it with {ops}"
    return f"{RULE_PREFIX}{what} \u2014 {remedy}"


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_reference_package(target: str | None) -> bool:
    return bool(target) and target.split(".")[0] in REFERENCE_PACKAGES


def _imports(tree: ast.AST) -> dict[str, str]:
    """``{bound name: what it is bound to}`` for every import in ``tree``
    (``import torch.nn.functional as G`` binds G to ``torch.nn.functional``)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def reference_calls(source: str, bindings: Mapping[str, str | None] | None = None) -> list[tuple[int, str]]:
    """Where ``source`` imports or calls a reference normalization.

    Args:
        source: Python code (one cell, or a function's source).
        bindings: what names in scope are bound to, ``{name: "torch.nn.functional" or
            "normref.functional.rms_norm" or None}`` (the grader: the locked cells' imports;
            a checker: the student's globals). An attribute call is flagged when its root is
            bound to ``torch``/``normref`` (or, unbound, is one of :data:`REFERENCE_ROOTS`); a
            bare call when its name is bound to a reference in ``torch``/``normref``, under any
            alias (``from torch.nn.functional import rms_norm as rn``; ``rn(x)``). The source's
            own imports are read too (``import torch.nn.functional as G``; ``G.rms_norm(x)``).

    Returns:
        ``[(line, what)]`` sorted by line, e.g. ``[(3, "calls F.rms_norm")]``, ``[(2, "calls rn
        (torch.nn.functional.rms_norm)")]`` for a name bound to a reference; ``[]`` for code
        that does not parse (a syntax error costs the student the cell anyway).
    """
    try:
        tree = parse(textwrap.dedent(source))
    except SyntaxError:
        return []
    bindings = {**(bindings or {}), **_imports(tree)}  # the scope, then what the source imports
    found: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.split(".")[0] in REFERENCE_PACKAGES:
            for a in node.names:
                if a.name in REFERENCE_ATTRS:
                    found.add((line, f"imports the reference {node.module}.{a.name}"))
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if isinstance(fn, ast.Attribute) and fn.attr in REFERENCE_ATTRS:
            root = _root(fn)
            bound = bindings.get(root) if root else None
            if _is_reference_package(bound) or (root not in bindings and root in REFERENCE_ROOTS):
                found.add((line, f"calls {_dotted(fn) or fn.attr}"))
        elif isinstance(fn, ast.Name):
            target = bindings.get(fn.id)
            if _is_reference_package(target) and target.rsplit(".", 1)[-1] in REFERENCE_ATTRS:
                found.add((line, f"calls {fn.id} ({target})"))  # an alias: what it is
    return sorted(found)


def _origin(value) -> str | None:
    """``"torch.nn.functional"`` for a module, ``"torch.nn.functional.rms_norm"`` for a function
    or class, else None."""
    if isinstance(value, types.ModuleType):
        return value.__name__
    module, name = getattr(value, "__module__", None), getattr(value, "__name__", None)
    if isinstance(module, str) and isinstance(name, str):
        return f"{module}.{name}"
    return None


def _functions_of(obj) -> list:
    """The plain functions whose source makes up ``obj``: itself, or a class's methods (an
    instance: its class's)."""
    if isinstance(obj, (types.FunctionType, types.MethodType)):
        return [getattr(obj, "__func__", obj)]
    cls = obj if isinstance(obj, type) else type(obj)
    out = []
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] in ("torch", "builtins", "normref"):
            continue
        for v in vars(klass).values():
            v = getattr(v, "__func__", v)  # staticmethod/classmethod
            if isinstance(v, types.FunctionType):
                out.append(v)
    return out


def reference_calls_in(obj) -> list[tuple[int, str]]:
    """:func:`reference_calls` on the source of a student's function, class or module.

    The names in the source are resolved against the globals the student's code runs in (the
    notebook's). Objects defined in ``normref`` are the reference itself and are not scanned;
    source that cannot be read (a builtin, a lambda typed at a console) gives ``[]``. Only the
    object's own code is read, not helpers it calls.

    Returns:
        ``[(line within that source, what)]``, e.g. ``[(2, "calls F.rms_norm")]``.
    """
    module = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", "")
    if str(module).split(".")[0] == "normref":
        return []
    found: list[tuple[int, str]] = []
    for fn in _functions_of(obj):
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            continue
        bindings = {k: _origin(v) for k, v in getattr(fn, "__globals__", {}).items()}
        for hit in reference_calls(source, bindings):
            if hit not in found:
                found.append(hit)
    return found
