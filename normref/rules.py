"""Rules that cost points, in the code both the student's self-check and the grader run.

One rule today: **implement it, do not call it.** An answer in which a library or reference
normalization (``F.rms_norm``, ``torch.nn.functional.layer_norm``, ``torch.rms_norm``,
``nn.LayerNorm``, ``normref.rms_norm``, ``normref.pre_ln`` ...) is *seen running inside the
student's call* earns 0 for that question: the one unambiguous evidence
(:func:`observed_reference`). Every call of the student's code runs under
:class:`normref.recorder.ReferenceRecorder` with this module's lists of names
(:data:`NORM_REFERENCE`, :data:`BACKWARD_REFERENCE`, :data:`PLACEMENT_REFERENCE`,
:data:`BLOCK_REFERENCE`), in grading and in the self-check alike, which sees a reference run
however it was spelled (``getattr(F, "rms" + "_norm")``, a subclass of ``nn.RMSNorm``,
``RMSNorm = normref.RMSNorm``), any other normref code the answer runs (a course helper holding a
reference), except the parts the assignment hands out and the grader's own objects; a copy of a
reference's code; torch's Python reference code of a normalization; and, for the backward
(``"autograd": True``), autograd.

Anything less takes nothing: the answer is scored on its outputs and the evidence is flagged
for the instructor's review (:func:`review_message`), in the class report and in the student's
self-check and feedback: a reference the source spells but no checked call ran (the source scan,
:func:`reference_calls`, with Python's scopes resolved), a tamper construct
(:mod:`normref.tamper`), a thread or process the student's code started, the recorder switched
off or patched.

The student reads, in the notebook and in the feedback, :func:`rule_message`'s one line for a
broken rule: "0 points: calls F.rms_norm — implement it with tensor operations" (one line per
violation: the source's spelling and the recorder's words for one call are said once), and
:func:`review_message`'s for what is only flagged.

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
           "PLACEMENT_REFERENCE", "QK_REFERENCE", "REFERENCE_ATTRS", "REFERENCE_ROOTS", "REVIEW_PREFIX",
           "RULE_PREFIX", "TORCH_NORMS", "observed_reference", "reference_calls", "reference_calls_in",
           "review_message", "rule_message"]

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
# self-check (normref.checks) and in grading (grader.scoring.inputs.QUESTIONS' ``reference``).
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
#: How a line about what is only flagged starts: evidence that is not a reference seen running
#: (a spelling the source scan found, a tamper construct, a thread of the student's, the recorder
#: switched off) costs nothing; the instructor reads it in the class report, the student in the
#: self-check and the feedback, in these words.
REVIEW_PREFIX = "For the instructor's review (no points taken): "


def observed_reference(what: str) -> bool:
    """Does the recorder's record ``what`` (:class:`normref.recorder.ReferenceRecorder`'s words,
    handed back in a call's ``"references"``) say that a reference *ran inside the student's
    call*, the one evidence that takes a question's points? Yes for a reference normalization
    executed (``"calls torch's rms_norm"``, ``"calls normref.functional.rms_norm"``, ``"calls a
    copy of ..."``, ``"calls the course's own normref..."``, torch's Python reference code of a
    normalization, ``"calls torch's reference code torch._refs.native_layer_norm"``) and, for the
    backward, autograd (``"uses autograd"``); no for anything else (another thread or process,
    the recorder switched off or patched, torch's tracers and compilers), which is flagged for
    the instructor's review."""
    if what.startswith("calls torch's reference code "):
        return what.rsplit(".", 1)[-1] in TORCH_NORMS + ("native_layer_norm_backward",)
    return what.startswith(("calls ", "uses autograd"))


def review_message(what: str) -> str:
    """The one line for evidence that takes no points: ``"For the instructor's review (no points
    taken): imports threading (line 1 of the cell that defines rms_norm)"``, in the self-check,
    the feedback and the class report alike."""
    return f"{REVIEW_PREFIX}{what}"


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


def reference_calls(source: str, bindings: Mapping[str, str | None] | None = None) -> list[tuple[int, str]]:
    """Where ``source`` imports or calls a reference normalization, with Python's scopes resolved
    (:mod:`normref.scopes`): a parameter, a local variable or an attribute is not the module's
    name of the same spelling (``def f(x, F): F.layer_norm(x)`` calls no reference; nor does a
    local ``var = x.var()`` stand for a global ``var``).

    Args:
        source: Python code (one cell, or a function's source).
        bindings: what names bound outside ``source`` are bound to, ``{name:
            "torch.nn.functional" or "normref.functional.rms_norm" or None}`` (the grader: the
            locked cells' imports; a checker: the student's globals). A name ``source`` binds
            itself is resolved to that binding: an import (``import torch.nn.functional as G``;
            ``G.rms_norm(x)``), or a plain alias (``G = torch.nn.functional``); a name it does not
            bind is looked up in ``bindings``. An attribute call is flagged when its root stands
            for ``torch``/``normref`` (or, bound nowhere, is one of :data:`REFERENCE_ROOTS`); a
            bare call when its name stands for a reference in ``torch``/``normref``, under any
            alias (``from torch.nn.functional import rms_norm as rn``; ``rn(x)``).

    Returns:
        ``[(line, what)]`` sorted by line, e.g. ``[(3, "calls F.rms_norm")]``, ``[(2, "calls rn
        (torch.nn.functional.rms_norm)")]`` for a name bound to a reference; ``[]`` for code
        that does not parse (a syntax error costs the student the cell anyway).
    """
    from .scopes import resolve

    try:
        tree = parse(textwrap.dedent(source))
    except SyntaxError:
        return []
    bindings = dict(bindings or {})
    scopes = resolve(tree)

    def stands_for(name_node: ast.Name) -> list[str | None]:
        """What a name may stand for where it is used: its bindings in the source, else the scope's."""
        found = scopes.targets(name_node)
        if found:
            return found
        if name_node.id in bindings:
            return [bindings[name_node.id]]
        return [name_node.id] if name_node.id in REFERENCE_ROOTS else [None]

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
            root = fn
            while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
                root = root.func if isinstance(root, ast.Call) else root.value
            if isinstance(root, ast.Name) and any(_is_reference_package(t) or t in REFERENCE_ROOTS
                                                  for t in stands_for(root) if t):
                found.add((line, f"calls {_dotted(fn) or fn.attr}"))
        elif isinstance(fn, ast.Name):
            for target in stands_for(fn):
                if _is_reference_package(target) and target.rsplit(".", 1)[-1] in REFERENCE_ATTRS:
                    found.add((line, f"calls {fn.id} ({target})"))  # an alias: what it is
                    break
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
