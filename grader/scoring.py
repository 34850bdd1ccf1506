"""Trusted scoring: the graded batteries' inputs drawn from a secret seed, and their scores
computed in the grader's own process.

For every question in :data:`QUESTIONS` (the code questions' full batteries):

1. :func:`prepare_inputs`, before autograde, draws a new battery from a secret seed (new per
   grading run, written to ``logs/scoring/`` with the run, never where a kernel can read it)
   covering the kinds of case of the visible battery: a small token, ``[B, T, D]`` with a
   trained gamma (and beta), ``B = T = D``, tiny values with eps = 1e-4 (where eps sits), the
   float16 overflow row (for LayerNorm with a row of large mean, where the one-pass variance
   cancels), bfloat16, a constant row (LayerNorm). It runs the course's own checker
   on those cases with a probe in place of the student's function, and saves the calls the
   checker makes (arguments and keyword arguments) to ``<inputs>/<grade_id>.pt``: the kernel's
   only view of the question (``NORMREF_HANDBACK_DIR``, read-only in the sandbox), locked with a
   key of its own (new every run, in ``logs/scoring/handback-keys.json``, outside the sandbox)
   that the autograde preprocessor ``HandbackKeys`` (``nbgrader_config.py``) writes into that
   question's hidden test just before it runs.
2. In the kernel, the hidden test ``hand_back(grade_id, fn)`` (:mod:`normref.handback`) makes
   those calls and shows the outputs (or exceptions) as one output of its MIME type.
3. :func:`score_notebook`, after autograde, reads that output from the autograded notebook
   (nothing pickled: arrays as ``.npy``, tensors with dtype and shape), replays it through
   the same checker on the same cases (:class:`Replay` stands in for the student's function),
   and :func:`score_class` writes ``points x score`` into nbgrader's gradebook (``Grade``
   rows) and the checker's diagnosis into the autograded notebook (what the feedback shows),
   with, in that output's metadata, the record of what the outputs computed case by case (the
   class report groups wrong answers by it, :mod:`grader.groups`, without running any code).

The same holds for classes and short answers. A class question (the block assignment's
``RMSNorm`` module and ``PreNormBlock``) hands back the record of a plan the grader decides
(:func:`module_plan`, :func:`block_plan`: construct with given arguments, report the named
parameters and submodules, load given weights, swap in the checker's known submodules, call
the student's own submodules in the reference wiring, call ``forward`` on drawn inputs;
:func:`normref.handback.run_plan` performs it); :class:`ReplayClass` rebuilds the modules from
that record for the same checker. A short answer (the practice assignment, :data:`PRACTICE`)
hands back its values (:func:`normref.handback.encode_answer`), checked here by its
``normref.answers`` checker with the setting its visible check shows.

A cell that hands back no outputs, or more than one set, scores 0 (flagged when it is more
than one). The student's code never sees a score, a checker or the reference's outputs.
"""
from __future__ import annotations

import base64
import builtins
import io
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat
import numpy as np

from normref._syntax import PARSE_LOCK
from normref.faults import METADATA_KEY, output_metadata
from normref.handback import ENV, MIME, dump_inputs, lock, question_key
from normref.handback_files import KEYS_FILE, SCORING_DIR
# What counts as running a reference: normref.rules' lists, which the student's self-check uses too.
from normref.rules import (BACKWARD_REFERENCE, BLOCK_REFERENCE, DYT_REFERENCE, NORM_REFERENCE, PERI_REFERENCE,
                           PLACEMENT_REFERENCE, QK_REFERENCE)

# Each code question's battery is drawn from the run's seed and handed to its checker as ``cases``.
from .batteries import (draw_backward_battery, draw_block_battery, draw_module_battery, draw_norm_battery,
                        draw_placement_battery, question_generator)
from .modern_batteries import draw_dyt_battery, draw_peri_battery, draw_qk_battery


# The run's question keys (``{grade_id: hex}``, normref.handback_files.KEYS_FILE), beside the seeds
# in ``logs/scoring/`` (outside every sandbox): read by the autograde preprocessor that writes each
# key into its hidden test cell (``HandbackKeys`` in ``nbgrader_config.py``), found from
# ``$NORMREF_HANDBACK_DIR``'s parent folder as ``scoring/handback-keys.json``.


def keys_path(inputs: Path) -> Path:
    """Where the keys of the inputs in ``inputs`` (``logs/handback``) are: ``logs/scoring/handback-keys.json``."""
    return Path(inputs).parent / SCORING_DIR / KEYS_FILE

__all__ = ["QUESTIONS", "PRACTICE", "prepare_inputs", "score_notebook", "score_class", "Replay", "ReplayClass",
           "decode_answer", "module_plan", "block_plan", "Scored", "inputs_id",
           "RECORD_KEY", "annotate_notebook"]


# --------------------------------------------------------------------------- the questions


def module_plan(cases: list) -> list[dict]:
    """The kernel's plan (:func:`normref.handback.run_plan`) for
    :func:`normref.checks.check_rms_norm_module` on ``cases`` (``_ModuleCase``): construct
    ``cls(dim)`` or ``cls(dim, eps=...)``, report ``weight`` and the parameters, load the
    trained weight, call ``forward(x)``."""
    plan = []
    for c in cases:
        plan.append({"new": [(c.dim,), {} if c.eps is None else {"eps": c.eps}], "attrs": ["weight"],
                     "load": None if c.weight is None else {"weight": c.weight}, "forward": c.x})
    return plan


def block_plan(cases: list) -> list[dict]:
    """The kernel's plan for :func:`normref.checks.check_pre_ln_block` on ``cases``
    (``_BlockCase``): build ``block_cls(8, 2)`` (RNG state kept), report the four attributes;
    on a wiring case swap in the checker's submodules, on the own case call the student's
    submodules in the reference wiring (``h = x + attn(ln1(x))``, then ``mlp(ln2(h))``, as
    :func:`normref.checks.block._block_reference`); on the build case call each freshly built
    norm on the case's large input (``trace``, before ``forward``: the checker's
    :func:`normref.checks.block._norm_case`); then ``forward(x)``."""
    from normref.checks.block import _BLOCK_ATTRS, _BLOCK_DIM, _BLOCK_HEADS, _NORM_ATTRS, _PART_ATTRS

    plan = []
    for c in cases:
        step = {"new": [(_BLOCK_DIM, _BLOCK_HEADS), {}], "seeded": True, "copy_module": True,
                "attrs": list(_BLOCK_ATTRS),
                "forward": c.x}
        if c.parts == "own":
            step["trace"] = {"x": c.x, "calls": [["input_layernorm", "x"], ["self_attn", "r0"],
                                                 ["post_attention_layernorm", ["+", "x", "r1"]], ["mlp", "r2"]]}
        elif c.parts is not None:
            step["swap"] = [[a, p] for a, p in zip(_PART_ATTRS, c.parts)]
        elif getattr(c, "norm_x", None) is not None:  # the build case: each norm, freshly built, on a large input
            step["trace"] = {"x": c.norm_x, "calls": [[a, "x"] for a in _NORM_ATTRS]}
        plan.append(step)
    return plan


@dataclass(frozen=True)
class Question:
    """One question scored outside the kernel: its checker, the battery it runs, what counts as
    calling the reference (:class:`normref.handback.ReferenceRecorder`'s arguments), and whose
    words the rule is stated in.

    ``check(fn, cases)`` runs the checker on ``cases`` (``None``: the checker's own public
    battery); ``draw(g)`` draws the graded battery from a ``torch.Generator``
    (:func:`grader.batteries.question_generator`), ``None`` for a visible check or a short
    answer, which run on the checker's public cases."""

    check: Callable
    draw: Callable | None
    reference: dict = field(default_factory=dict)
    backend: str = "torch"
    #: a visible check: the checker's own (public) cases, all or nothing; ``public`` names
    #: that checker and its arguments, so the kernel makes the public calls itself
    all_or_nothing: bool = False
    public: tuple | None = None
    #: what the kernel hands back: ``"function"`` (outputs of the checker's calls), ``"class"``
    #: (the record of ``plan(cases)``, :func:`normref.handback.run_plan`) or ``"values"`` (a
    #: short answer's values, checked by ``check(values, None)``)
    kind: str = "function"
    plan: Callable | None = None
    #: a class question's visible check: its checker's public battery (``public_cases()``), of
    #: which the first ``head`` cases are run
    public_cases: Callable | None = None
    head: int | None = None


def _checks():
    from normref import checks

    from . import backward  # noqa: F401 - registers the backward's grammar with normref.diagnosis

    return checks


def _backward_check(fn, cases=None):
    """The backward's checker, its expected gradients from the grader's analytic LayerNorm backward
    (``grader/backward.py``, not in the student package)."""
    from .backward import layer_norm_backward

    return _checks().check_layer_norm_backward(fn, reference=layer_norm_backward, cases=cases)


def _checker(name: str, *args, head: int | None = None, **kwargs) -> Callable:
    """``check(fn, cases)``: :mod:`normref.checks`' ``name`` called as ``name(fn, *args,
    cases=cases, **kwargs)`` (the first ``head`` cases of its result, when given)."""
    def check(fn, cases=None):
        result = getattr(_checks(), name)(fn, *args, cases=cases, **kwargs)
        return result if head is None else result.head(head)

    return check


def _public_battery(module: str, name: str) -> Callable:
    """``normref.checks.<module>.<name>``, the public battery of a class question's checker."""
    def battery() -> list:
        import importlib

        return getattr(importlib.import_module(f"normref.checks.{module}"), name)()

    return battery


_NORMS = NORM_REFERENCE
QUESTIONS: dict[str, Question] = {
    "rms_norm_battery": Question(_checker("check_rms_norm"), lambda g: draw_norm_battery("rms", "torch", g), _NORMS),
    "layer_norm_battery": Question(_checker("check_layer_norm", "numpy"),
                                   lambda g: draw_norm_battery("layer", "numpy", g), _NORMS, "numpy"),
    "layer_norm_backward_gradcheck": Question(_backward_check, draw_backward_battery, BACKWARD_REFERENCE, "numpy"),
    "pre_ln_battery": Question(_checker("check_pre_ln"), draw_placement_battery, PLACEMENT_REFERENCE),
    "post_ln_battery": Question(_checker("check_post_ln"), draw_placement_battery, PLACEMENT_REFERENCE),
}
# The visible checks are scored outside the kernel too, on their public cases, all or nothing.
_VISIBLE = {  # grade_id: (checker, its arguments after fn, cases counted, the battery's question)
    "rms_norm_shape": ("check_rms_norm", ((), {"quick": True}), None, "rms_norm_battery"),
    "layer_norm_seed": ("check_layer_norm", (("numpy",), {"quick": True}), None, "layer_norm_battery"),
    "layer_norm_backward_seed": ("check_layer_norm_backward", ((), {}), 2, "layer_norm_backward_gradcheck"),
    "pre_ln_quick": ("check_pre_ln", ((), {}), 2, "pre_ln_battery"),
    "post_ln_quick": ("check_post_ln", ((), {}), 2, "post_ln_battery"),
}


def _public_check(name: str, args: tuple, kwargs: dict, head: int | None) -> Callable:
    """A visible check: the checker as the notebook calls it (``name(fn, *args, **kwargs)``), on
    its public cases (the first ``head`` of them, when given)."""
    def check(fn, cases=None):
        result = getattr(_checks(), name)(fn, *args, **kwargs)
        return result if head is None else result.head(head)

    return check


for _gid, (_name, (_args, _kwargs), _head, _battery) in _VISIBLE.items():
    QUESTIONS[_gid] = Question(_public_check(_name, _args, _kwargs, _head), None,
                               QUESTIONS[_battery].reference, QUESTIONS[_battery].backend,
                               all_or_nothing=True, public=(_name, _args, _kwargs))

# The modern assignment (lesson 04): Peri-LN, QK-norm logits and DyT, drawn in grader/modern_batteries.py.
_MODERN = (("peri_ln", "check_peri_ln", draw_peri_battery, PERI_REFERENCE),
           ("qk_logits", "check_qk_norm_logits", draw_qk_battery, QK_REFERENCE),
           ("dyt", "check_dyt", draw_dyt_battery, DYT_REFERENCE))
for _gid, _name, _draw, _ref in _MODERN:
    QUESTIONS[f"{_gid}_battery"] = Question(_checker(_name), _draw, _ref)
    QUESTIONS[f"{_gid}_quick"] = Question(_public_check(_name, (), {"quick": True}, None), None, _ref,
                                          all_or_nothing=True, public=(_name, (), {"quick": True}))

# Classes (the block assignment's RMSNorm module and PreNormBlock): the grader decides every
# call (:func:`module_plan`, :func:`block_plan`), the kernel performs them and records what
# happened (:func:`normref.handback.run_plan`), the checker judges the record (:class:`ReplayClass`).
QUESTIONS.update({
    "rms_module_battery": Question(_checker("check_rms_norm_module"), draw_module_battery, _NORMS, kind="class",
                                   plan=module_plan),
    "rms_module_quick": Question(_checker("check_rms_norm_module", quick=True), None, _NORMS, all_or_nothing=True,
                                 kind="class", plan=module_plan,
                                 public_cases=_public_battery("module", "_module_battery"), head=2),
    "block_battery": Question(_checker("check_pre_ln_block"), draw_block_battery, BLOCK_REFERENCE, kind="class",
                              plan=block_plan),
    "block_quick": Question(_checker("check_pre_ln_block", quick=True), None, BLOCK_REFERENCE, all_or_nothing=True,
                            kind="class", plan=block_plan, public_cases=_public_battery("block", "_block_battery"),
                            head=2),
})

#: The practice assignment's short answers: grade_id -> (normref.answers checker, its setting
#: as the notebook's visible check passes it). The kernel hands back the answers' values.
PRACTICE = {
    "practice_mean_var": ("check_mean_var", {"x": (1, 3, 5, 7)}),
    "practice_layer_norm": ("check_layer_norm_2244", {"x": (1, 3, 5, 7)}),
    "practice_rms": ("check_rms_34", {"x": (5, 12)}),
    "practice_subtracts_mean": ("check_rms_subtracts_mean", {"ask": "shift_changes_output"}),
    "practice_pre_ln_formula": ("check_pre_ln_formula", {"sublayer": "ffn"}),
    "practice_shape": ("check_norm_changes_shape", {"ask": "keeps"}),
    "trace_rms_shape": ("check_rms_shape", {"x_shape": (4, 5, 6)}),
    "retrieval_stats_axis": ("check_stats_axis", {"layout": "BDT"}),
}


def _answer_check(name: str, kwargs: dict) -> Callable:
    """A short answer's check: ``check(values, None)`` is ``normref.answers``' ``name(*values, **kwargs)``."""
    def check(values, cases=None):
        from normref import answers

        return getattr(answers, name)(*values, **kwargs)

    return check


for _gid, (_name, _kwargs) in PRACTICE.items():
    QUESTIONS[_gid] = Question(_answer_check(_name, _kwargs), None, {}, kind="values")


def plan_cases(grade_id: str, seed: int) -> list:
    """A class question's cases: its drawn battery for this seed, or for a visible check the
    first ``head`` cases of the checker's own (public) battery."""
    q = QUESTIONS[grade_id]
    if q.draw is not None:
        return drawn_cases(grade_id, seed)
    return q.public_cases()[:q.head]


def drawn_cases(grade_id: str, seed: int) -> list:
    """The battery of ``grade_id`` for this seed (the same every time for one seed, in any thread:
    drawn from :func:`grader.batteries.question_generator` alone)."""
    return QUESTIONS[grade_id].draw(question_generator(seed, grade_id))


def run_check(grade_id: str, seed: int, fn):
    """``grade_id``'s checker on its drawn battery (a visible check: on its own public cases),
    with ``fn`` as the student's function: a :class:`normref.checks.CheckResult`. (In grading
    ``fn`` is a :class:`Replay`.) The battery is the checker's argument: checks in several
    threads at once do not meet."""
    q = QUESTIONS[grade_id]
    return q.check(fn, None if q.draw is None else drawn_cases(grade_id, seed))


# --------------------------------------------------------------------------- the inputs


def probe_calls(grade_id: str, seed: int) -> list[tuple[tuple, dict, bool]]:
    """The calls ``grade_id``'s checker makes of the student's function on the drawn battery:
    ``[(args, kwargs, grad enabled)]`` (copies, in order)."""
    from normref.handback import probe

    return probe(lambda fn: run_check(grade_id, seed, fn))


def new_seed() -> int:
    """A secret seed for one grading run."""
    return secrets.randbits(62)


def prepare_inputs(course_root: Path, *, seed: int | None = None, log=print,
                   set_env: bool = True) -> tuple[int, Path]:
    """Draw this run's graded inputs and point the kernels at them.

    Writes ``logs/handback/<grade_id>.pt`` (what the kernels may read, each locked with a key of
    its own, new every run: :func:`normref.handback.lock`; the keys go to
    ``logs/scoring/handback-keys.json``, which no kernel can read) and appends the seed to
    ``logs/scoring/seeds.jsonl`` (what reproduces the grades; no kernel can read ``logs/``), and
    sets ``NORMREF_HANDBACK_DIR`` in this process's environment (unless ``set_env`` is
    False: then pass it to nbgrader yourself), which nbgrader's autograde processes and the
    sandbox inherit.

    Returns:
        ``(seed, inputs folder)``.
    """
    root = Path(course_root)
    seed = new_seed() if seed is None else seed
    inputs = root / "logs" / "handback"
    inputs.mkdir(parents=True, exist_ok=True)
    master, keys = secrets.token_bytes(32), {}
    for gid in QUESTIONS:
        q = QUESTIONS[gid]
        if q.kind == "class":  # the plan of calls (a visible check's public cases, too)
            data = {"kind": "class", "plan": q.plan(plan_cases(gid, seed)), "reference": q.reference,
                    "visible": q.all_or_nothing}
        elif q.kind == "values":  # a short answer: nothing to draw, the kernel hands back values
            data = {"kind": "values"}
        else:
            calls = None if q.public else probe_calls(gid, seed)  # public cases: the kernel makes them
            data = {"calls": calls, "public": q.public, "reference": q.reference}
        # a numpy or short-answer question's kernel reads its inputs without importing torch
        blob = dump_inputs(data, torch_free=q.backend == "numpy" or q.kind == "values")
        key = question_key(master, gid)
        keys[gid] = key.hex()
        (inputs / f"{gid}.pt").write_bytes(lock(key, blob))
    seeds = root / "logs" / SCORING_DIR
    seeds.mkdir(parents=True, exist_ok=True)
    kp = keys_path(inputs)
    kp.unlink(missing_ok=True)
    fd = os.open(kp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(keys, f)
    with (seeds / "seeds.jsonl").open("a") as f:
        f.write(json.dumps({"time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "seed": seed,
                            "questions": sorted(QUESTIONS)}) + "\n")
    if set_env:
        os.environ[ENV] = str(inputs.resolve())
    log(f"scoring: graded inputs drawn for {len(QUESTIONS)} questions (seed in {seeds / 'seeds.jsonl'})")
    return seed, inputs


# --------------------------------------------------------------------------- the outputs


def _npy(s: str) -> np.ndarray:
    with PARSE_LOCK:  # numpy parses the header (ast.literal_eval): one thread at a time
        return np.load(io.BytesIO(base64.b64decode(s)), allow_pickle=False)


def _opaque(type_name: str):
    name = type_name if str(type_name).isidentifier() else "object"
    return type(name, (), {"__repr__": lambda self: f"<{name}>"})()


def decode(d: dict):
    """The inverse of :func:`normref.handback.encode` (no pickles: ``.npy`` and JSON only)."""
    import torch

    t = d.get("t")
    if t == "torch":
        dtype = getattr(torch, str(d.get("dtype")), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown dtype {d.get('dtype')!r}")
        return torch.from_numpy(np.array(_npy(d["npy"]))).to(dtype)
    if t == "numpy":
        return _npy(d["npy"])
    if t == "seq":
        items = [decode(i) for i in d.get("items", [])][:16]
        return list(items) if d.get("type") == "list" else tuple(items)
    if t == "py":
        v = d.get("value")
        return v if v is None or isinstance(v, (bool, int, float)) else _opaque(type(v).__name__)
    return _opaque(d.get("type", "object"))


def _exception(name: str, message: str) -> Exception:
    cls = getattr(builtins, name, None) if str(name).isidentifier() else None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = type(name if str(name).isidentifier() else "Error", (Exception,), {})
    try:
        return cls(message)
    except Exception:  # noqa: BLE001 - an exception class with odd arguments
        return RuntimeError(f"{name}: {message}")


class Replay:
    """Stands in for the student's function while the grader's checker runs: each call gives
    back what the student's function gave back on that call in the kernel (its output, its
    exception, a timeout), and modifies the inputs as the student's call did."""

    __name__ = "replay"

    def __init__(self, records: list[dict]):
        self.records = records
        self.i = 0

    def __call__(self, *args, **kwargs):
        import torch

        from normref.checks.core import _Timeout

        rec = self.records[self.i] if self.i < len(self.records) else {
            "raised": ["RuntimeError", "no output was handed back for this call"]}
        self.i += 1
        for k, enc in (rec.get("after") or {}).items():
            i = int(k)
            try:
                new = decode(enc)
                if isinstance(args[i], torch.Tensor) and args[i].shape == new.shape:
                    args[i].copy_(new)
                elif isinstance(args[i], np.ndarray) and args[i].shape == new.shape:
                    args[i][...] = new
            except (IndexError, ValueError, TypeError, RuntimeError, KeyError):
                pass
        if rec.get("timeout"):
            raise _Timeout()
        if "raised" in rec:
            name, message = (list(rec["raised"]) + ["", ""])[:2]
            raise _exception(str(name), str(message))
        return decode(rec.get("out", {}))


def _raise_recorded(rec: dict, what: str):
    """Raise what the kernel recorded for one call (a timeout, the student's exception)."""
    from normref.checks.core import _Timeout

    if rec.get("timeout"):
        raise _Timeout()
    if "raised" in rec:
        name, message = (list(rec["raised"]) + ["", ""])[:2]
        raise _exception(str(name), str(message))
    if "out" not in rec:
        raise RuntimeError(f"{what}: nothing was handed back for this call")


def _replay_types():
    """The :class:`torch.nn.Module` stand-ins of :class:`ReplayClass` (made once, on first use:
    importing this module does not import torch)."""
    global _REPLAY_TYPES
    if _REPLAY_TYPES is not None:
        return _REPLAY_TYPES
    import torch
    from torch import nn

    class ReplayPart(nn.Module):
        """One of the student's submodules: each call checks that the grader's checker passes
        the input the kernel used (the grader's wiring), then gives back the kernel's output."""

        def __init__(self, name: str):
            super().__init__()
            self.replay_name = name
            self.replay_queue: list[dict] = []

        def forward(self, *args, **kwargs):
            if not self.replay_queue:
                raise RuntimeError(f"{self.replay_name}: this call was not made in the grading kernel")
            rec = self.replay_queue.pop(0)
            try:
                want = decode(rec.get("in", {}))
            except (ValueError, TypeError, KeyError):
                want = None
            got = args[0] if args else None
            if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor) and got.shape == want.shape
                    and got.dtype == want.dtype and torch.equal(got, want)):
                raise RuntimeError(f"{self.replay_name}: the grading kernel called it on other inputs than "
                                   "the grader's wiring")
            _raise_recorded(rec, self.replay_name)
            return decode(rec["out"])

    class ReplayModule(nn.Module):
        """The student's built module as the kernel reported it (its tensors with their values,
        its submodules as :class:`ReplayPart`, which attributes are one object, its parameter
        names); ``forward`` gives back the kernel's output on the grader's input (and modifies
        the input as the student's call did)."""

        def __init__(self, rec: dict, case: dict):
            super().__init__()
            report = rec.get("report") if isinstance(rec.get("report"), dict) else {}
            self.replay_forward = rec.get("forward") if isinstance(rec.get("forward"), dict) else {}
            self.replay_params = report.get("params", [])
            objects: dict = {}
            attrs = report.get("attrs") if isinstance(report.get("attrs"), dict) else {}
            for name in (case.get("attrs") or ()):
                d = attrs.get(name)
                if not isinstance(d, dict) or d.get("kind") in (None, "absent"):
                    continue
                kind = d["kind"]
                if kind == "same":
                    obj = objects.get(str(d.get("as")))
                elif kind == "tensor":
                    try:
                        t = decode(d.get("value", {}))
                    except (ValueError, TypeError, KeyError):
                        t = None
                    if not isinstance(t, torch.Tensor):
                        obj = _opaque("Tensor")
                    elif d.get("param"):
                        obj = nn.Parameter(t, requires_grad=t.is_floating_point())
                    else:
                        obj = t
                elif kind in ("module", "callable"):
                    obj = ReplayPart(name)
                else:
                    obj = _opaque(d.get("type", "object"))
                if obj is None:
                    continue
                objects[name] = obj
                setattr(self, name, obj)
            trace = rec.get("trace") if isinstance(rec.get("trace"), list) else []
            calls = (case.get("trace") or {}).get("calls", [])
            for (name, _), one in zip(calls, trace):  # each traced call to the object it was made on
                part = objects.get(name)
                if isinstance(part, ReplayPart) and isinstance(one, dict):
                    part.replay_queue.append(one)

        def named_parameters(self, *args, **kwargs):
            if isinstance(self.replay_params, dict):
                _raise_recorded(self.replay_params, "named_parameters")
            for name in self.replay_params if isinstance(self.replay_params, list) else []:
                p = getattr(self, str(name), None) if "." not in str(name) else None
                yield str(name), p if isinstance(p, nn.Parameter) else nn.Parameter(torch.zeros(0))

        def forward(self, *args, **kwargs):
            if not self.replay_forward:
                raise RuntimeError("forward: nothing was handed back for this call")
            return Replay([self.replay_forward])(*args, **kwargs)

    _REPLAY_TYPES = (ReplayModule, ReplayPart)
    return _REPLAY_TYPES


_REPLAY_TYPES = None


class ReplayClass:
    """Stands in for the student's class while the grader's checker runs: the i-th
    construction gives back the module the kernel built for the plan's i-th case (or raises
    what its constructor raised), rebuilt from the kernel's record (:func:`_replay_types`).

    Args:
        records: the kernel's records (:func:`normref.handback.run_plan`), one per case.
        plan: the plan those records answer (the grader's own, recomputed from the seed).
    """

    __name__ = "replay"

    def __init__(self, records: list[dict], plan: list[dict]):
        self.records, self.plan, self.i = records, plan, 0

    def __call__(self, *args, **kwargs):
        i, self.i = self.i, self.i + 1
        rec = self.records[i] if i < len(self.records) and isinstance(self.records[i], dict) else {}
        new = rec.get("new") if isinstance(rec.get("new"), dict) else {
            "raised": ["RuntimeError", "nothing was handed back for this case"]}
        if not new.get("module"):
            if "raised" in new or new.get("timeout"):
                _raise_recorded(new, "the class")
            return _opaque(new.get("type", "object"))
        return _replay_types()[0](rec, self.plan[i] if i < len(self.plan) else {})


class _Shown:
    """A short answer of a type the kernel hands back only as text (and a number, if it is one)."""

    def __init__(self, text: str, number: float | None):
        self.text, self.number = text, number

    def __repr__(self) -> str:
        return self.text

    def __array__(self, dtype=None, copy=None):
        if self.number is None:
            raise TypeError(f"{self.text} is not a number")
        return np.asarray(self.number, dtype=dtype)


def decode_answer(d: dict, depth: int = 0):
    """The inverse of :func:`normref.handback.encode_answer` (JSON and ``.npy`` only): the
    answer as the checker would have seen it in the kernel; an object of another type comes
    back as its text (and number), under its type's name."""
    import torch

    t = d.get("t") if isinstance(d, dict) else None
    if t == "py":
        v = d.get("value")
        return v if v is None or isinstance(v, (bool, int, float)) else _opaque(type(v).__name__)
    if t == "float":
        return float(str(d.get("repr"))) if str(d.get("repr")) in ("nan", "inf", "-inf") else float("nan")
    if t == "str":
        return str(d.get("value", ""))
    if t == "ellipsis":
        return Ellipsis
    if t == "seq" and depth < 3:
        items = [decode_answer(i, depth + 1) for i in list(d.get("items", []))[:64]]
        if d.get("type") == "Size":
            try:
                return torch.Size(items)
            except (TypeError, ValueError):
                return tuple(items)
        return items if d.get("type") == "list" else tuple(items)
    if t == "npscalar":
        return _npy(d["npy"])[()]
    if t in ("torch", "numpy"):
        return decode(d)
    if t == "repr":
        name = d.get("type") if str(d.get("type")).isidentifier() else "object"
        number = d.get("number") if isinstance(d.get("number"), (int, float)) else None
        return type(name, (_Shown,), {})(str(d.get("repr", ""))[:500], number)
    return _opaque(d.get("type", "object") if isinstance(d, dict) else "object")


@dataclass
class Scored:
    """One question of one notebook, scored outside the kernel.

    Attributes:
        grade_id: the hidden test's cell.
        fraction: the checker's score on the drawn battery, 0..1.
        text: the diagnosis the feedback shows.
        flags: what the report should say (several hand-backs in one cell, a reference call).
        faults, variants: the diagnosed fault kinds, for the class report (output metadata).
        record: what the handed-back outputs computed, case by case
            (:func:`normref.diagnosis.record.result_record`), for the class report's groups of
            wrong answers; None for a visible check or a cell scored 0 without replaying it.
    """

    grade_id: str
    fraction: float
    text: str
    flags: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    record: dict | None = None


#: Where :func:`score_class` keeps a question's record in its test cell's output metadata
#: (under :data:`normref.faults.METADATA_KEY`), read by :mod:`grader.groups`.
RECORD_KEY = "record"


def inputs_id(seed: int) -> str:
    """An id of one run's drawn inputs (the same for every student of the run), not the seed."""
    import hashlib

    return hashlib.sha256(f"normref-inputs:{seed}".encode()).hexdigest()[:16]


def _handbacks(cell) -> list[dict]:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") in ("display_data", "execute_result") and MIME in o.get("data", {}):
            out.append(o["data"][MIME])
    return out


def score_notebook(nb, seed: int) -> dict[str, Scored]:
    """Score every :data:`QUESTIONS` cell of an autograded notebook from its handed-back
    outputs: ``{grade_id: Scored}``. A cell with no hand-back (the student's code never got
    there, e.g. the function is undefined) or several scores 0."""
    out = {}
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cell.cell_type != "code" or gid not in QUESTIONS:
            continue
        found = [h for h in _handbacks(cell) if isinstance(h, dict)]
        if len(found) != 1 or found[0].get("grade_id") != gid:
            flags = ([f"{gid}: {len(found)} sets of outputs in one test cell (one is handed back): scored 0"]
                     if len(found) > 1 else [])
            removed = _removed_answer(nb, cell)
            if removed:
                # the scan's reference-call removal is the reference_call fault the report counts
                kinds = ["reference_call"] if _REFERENCE_REASON in removed else []
                out[gid] = Scored(gid, 0.0, f"{gid}: 0 points: {removed}", flags, kinds)
                continue
            errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in cell.get("outputs", [])
                      if o.get("output_type") == "error"]
            why = errors[-1] if errors else "no outputs were handed back"
            out[gid] = Scored(gid, 0.0, f"{gid}: not graded ({why}): 0 points", flags)
            continue
        changed = found[0].get("changed")
        if changed:
            names = ", ".join(str(c)[:120] for c in list(changed)[:8]) if isinstance(changed, list) else "?"
            out[gid] = Scored(gid, 0.0, f"{gid}: 0 points: the grader's hand-back code was changed in the kernel "
                              f"before it ran ({names}); a hand-back that may not be the grader's is not scored",
                              [f"{gid}: changed the grader's hand-back in the kernel ({names}): scored 0"],
                              [])
            continue
        q = QUESTIONS[gid]
        if q.kind == "values":
            out[gid] = _score_values(gid, seed, found[0])
            continue
        calls = found[0].get("cases" if q.kind == "class" else "calls")
        if isinstance(calls, dict) and "not_callable" in calls:
            result = run_check(gid, seed, _opaque(calls["not_callable"]))
            calls = []
        elif q.kind == "class":
            records = [r if isinstance(r, dict) else {} for r in calls] if isinstance(calls, list) else []
            result = run_check(gid, seed, ReplayClass(records, q.plan(plan_cases(gid, seed))))
            # every recorded call of the student's code: forward, and the own submodules' calls
            calls = [c for r in records for c in [r.get("forward")] + list(r.get("trace") or [])]
        else:
            calls = calls if isinstance(calls, list) else []
            result = run_check(gid, seed, Replay(calls))
        refs = list(dict.fromkeys(str(w) for c in calls if isinstance(c, dict) for w in c.get("references", [])))
        text = ("The visible check, scored by the grader:\n" if QUESTIONS[gid].all_or_nothing
                else "Graded on new inputs drawn for this grading run:\n") + result.report()
        if refs:
            from normref.checks.core import rule_lines
            from normref.rules import rule_message

            # the student reads what the self-check said: one line per violation ("0 points:
            # calls torch's rms_norm — implement it with tensor operations"), not the cases'
            # "6/6 passed" beside it; the instructor's flags keep every record
            said = rule_lines(None, refs, QUESTIONS[gid].backend)
            out[gid] = Scored(gid, 0.0, "\n".join(f"{gid}: {r}" for r in said),
                              [f"{gid}: {rule_message(w, QUESTIONS[gid].backend)} (seen while it ran): scored 0"
                               for w in refs], ["reference_call"])
            continue
        fraction = float(result.passed) if QUESTIONS[gid].all_or_nothing else float(result.score)
        record = None
        if QUESTIONS[gid].draw is not None:
            from normref.diagnosis.record import result_record

            record = result_record(result, inputs_id(seed))
        out[gid] = Scored(gid, fraction, text, [], result.faults, result.variants, record)
    return out


#: How the grader's repair stage (grader/repair.py) replaces an answer cell it removed.
_REMOVED = "# The grader removed this cell: "
from .repair import REFERENCE_REASON as _REFERENCE_REASON  # noqa: E402 - beside the table it keys
_RULES = {"it tried to change how grading works":
          "code that changes how grading works (the grader's checkers, hand-back or recorder, the "
          "interpreter's or IPython's machinery, threads, TorchScript) is not allowed: the cell is "
          "removed and its question earns what a blank answer earns",
          _REFERENCE_REASON:
          "calling the reference normalization instead of implementing it earns what a blank answer "
          "earns: implement it with tensor operations"}


def _removed_answer(nb, test_cell) -> str | None:
    """Why this test cell's question has no hand-back, when the answer cell above it was removed by
    the grader's scan (the rule it broke, stated as the report states it), else None."""
    answer = None
    for cell in nb.cells:
        if cell is test_cell:
            break
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution") and cell.cell_type == "code":
            answer = cell
    if answer is None or not answer.source.startswith(_REMOVED):
        return None
    reason = answer.source[len(_REMOVED):].split("\n", 1)[0].strip().rstrip(".")
    aid = answer.metadata.get("nbgrader", {}).get("grade_id", "?")
    if reason not in _RULES:  # not the scan (e.g. the kernel died in this question's code)
        return f"the grader removed your answer cell {aid!r}: {reason}."
    return (f"the grader removed your answer cell {aid!r} before grading: {reason}. The rule: "
            f"{_RULES[reason]}. (The report names the line it found.)")


def _score_values(gid: str, seed: int, bundle: dict) -> Scored:
    """A short answer's handed-back values, checked here by its ``normref.answers`` checker."""
    values = bundle.get("values")
    values = [decode_answer(v) for v in values[:8]] if isinstance(values, list) else []
    try:
        result = run_check(gid, seed, tuple(values))
    except Exception as e:  # noqa: BLE001 - a hand-back of the wrong arity (a changed hidden test)
        return Scored(gid, 0.0, f"{gid}: not graded (the answers handed back could not be checked: "
                      f"{type(e).__name__}): 0 points")
    shown = [f"{type(v).__name__} {v!r}" for v in values if isinstance(v, _Shown)]
    note = (f"\n(handed to the grader as text, its type not being a number, tuple, string or bool: "
            f"{'; '.join(shown)})" if shown else "")
    return Scored(gid, float(result.score), "Checked by the grader:\n" + result.report() + note, [],
                  result.faults, result.variants)


def annotate_notebook(nb, seed: int) -> dict[str, Scored]:
    """:func:`score_notebook`, then each scored test cell's outputs replaced by one display of
    its diagnosis (what the feedback shows), whose metadata carries the fault kinds and the
    record of the outputs (``metadata["normref"]["record"]``, read by :mod:`grader.groups`).
    Changes ``nb`` in place; returns ``{grade_id: Scored}``."""
    scored = score_notebook(nb, seed)
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in scored:
            sc = scored[gid]
            meta = output_metadata(sc.faults, sc.variants)
            if sc.record is not None:
                meta[METADATA_KEY][RECORD_KEY] = sc.record
            cell.outputs = [nbformat.v4.new_output("display_data", data={"text/plain": sc.text}, metadata=meta)]
    return scored


def score_class(course_root: Path, pairs, seed: int, *, db_url: str | None = None,
                log=print) -> dict[tuple[str, str], list[str]]:
    """Score every autograded notebook of ``pairs`` (``[(assignment, student)]``): write
    ``points x fraction`` into the gradebook's ``Grade`` rows (``auto_score``) and the
    diagnosis into the notebook's test cell (the feedback shows it).

    Returns:
        ``{(assignment, student): [flags]}`` for the report.
    """
    from nbgrader.api import Gradebook

    root = Path(course_root)
    url = db_url or f"sqlite:///{root / 'gradebook.db'}"
    flags: dict[tuple[str, str], list[str]] = {}
    with Gradebook(url) as gb:
        for a, st in pairs:
            for path in sorted((root / "autograded" / st / a).glob("*.ipynb")):
                nb = nbformat.read(path, as_version=4)
                scored = annotate_notebook(nb, seed)
                if not scored:
                    continue
                for gid, s in scored.items():
                    try:
                        grade = gb.find_grade(gid, path.stem, a, st)
                    except Exception:  # noqa: BLE001 - nbgrader raises MissingEntry
                        continue
                    in_kernel = grade.auto_score
                    grade.auto_score = round(float(grade.max_score) * s.fraction, 2)
                    if (QUESTIONS[gid].all_or_nothing and in_kernel is not None and s.fraction == 0
                            and float(in_kernel) >= float(grade.max_score) > 0):
                        # same checker, same public inputs, same function: only a change made
                        # inside the kernel (or a function that is not deterministic) does this
                        s.flags.append(f"{gid}: the notebook's own check passed in its kernel, the grader's "
                                       "scoring of the same outputs did not (checkers changed at run time?): "
                                       "scored 0")
                    if s.flags:
                        flags.setdefault((a, st), []).extend(s.flags)
                gb.db.commit()
                nbformat.write(nb, path)
    return flags


# --------------------------------------------------------------------------- pipeline stages


def inputs_stage(b) -> None:
    """``grade_class`` stage before autograde: draw this run's graded inputs (a new seed)."""
    b.scoring_seed, _ = prepare_inputs(b.tree.root, log=b.log)


def scoring_stage(b) -> None:
    """``grade_class`` stage after autograde: score every graded notebook's handed-back
    outputs in this process and write the points into the gradebook; flags go to the report."""
    from .repair import Repair

    run = b.run
    pairs = list(run.autograde.graded) if run.autograde else []
    flags = score_class(b.tree.root, pairs, b.scoring_seed, db_url=b.tree.gradebook_url, log=b.log)
    for (a, st), notes in flags.items():
        run.repairs.setdefault((a, st), Repair(st, a)).flags.extend(notes)
    b.log(f"scoring: {len(pairs)} notebooks scored outside the kernels")
