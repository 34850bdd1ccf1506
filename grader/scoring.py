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
   checker makes (arguments and keyword arguments) to ``logs/scoring/handback-inputs.json``
   (outside every sandbox): the autograde preprocessor ``HandbackInputs`` (``nbgrader_config.py``)
   writes a question's inputs into its hidden test just before it runs, the kernel's only view
   of the question.
2. After the kernel, the notebook's clean room (:mod:`grader.cleanroom`: the answer's
   definitions only, the references absent) makes those calls with :mod:`normref.handback`'s
   code, and its outputs (or exceptions) become the test cell's one output of that MIME type.
3. :func:`grader.scores.score_notebook`, after autograde, reads that output from the autograded
   notebook (nothing pickled: arrays as ``.npy``, tensors with dtype and shape), replays it
   through the same checker on the same cases (:class:`grader.replay.Replay` stands in for the
   student's function), and :func:`grader.scores.score_class` writes ``points x score`` into
   nbgrader's gradebook (``Grade`` rows) and the checker's diagnosis into the autograded
   notebook (what the feedback shows), with, in that output's metadata, the record of what the
   outputs computed case by case (the class report groups wrong answers by it,
   :mod:`grader.groups`, without running any code).

The same holds for classes and short answers. A class question (the block assignment's
``RMSNorm`` module and ``PreNormBlock``) hands back the record of a plan the grader decides
(:func:`module_plan`, :func:`block_plan`: construct with given arguments, report the named
parameters and submodules, load given weights, swap in the checker's known submodules, call
the student's own submodules in the reference wiring, call ``forward`` on drawn inputs;
:func:`normref.plan.run_plan` performs it); :class:`grader.replay.ReplayClass` rebuilds the
modules from that record for the same checker. A short answer (the practice assignment, :data:`PRACTICE`)
hands back its values (:func:`normref.wire.encode_answer`), checked here by its
``normref.answers`` checker with the setting its visible check shows.

A cell that hands back no outputs, or more than one set, scores 0 (flagged when it is more
than one). The student's code never sees a score, a checker or the reference's outputs.
"""
from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


from normref.handback_files import HANDBACK_ENV as ENV
from normref.handback_files import INPUTS_FILE, SCORING_DIR
from normref.wire import dump_inputs
# What counts as running a reference: normref.rules' lists, which the student's self-check uses too.
from normref.rules import (BACKWARD_REFERENCE, BLOCK_REFERENCE, DYT_REFERENCE, NORM_REFERENCE, PERI_REFERENCE,
                           PLACEMENT_REFERENCE, QK_REFERENCE)

# Each code question's battery is drawn from the run's seed and handed to its checker as ``cases``.
from .batteries import (draw_backward_battery, draw_block_battery, draw_module_battery, draw_norm_battery,
                        draw_placement_battery, question_generator)
from .modern_batteries import draw_dyt_battery, draw_peri_battery, draw_qk_battery


__all__ = ["QUESTIONS", "PRACTICE", "prepare_inputs", "module_plan", "block_plan", "run_check", "plan_cases"]


# --------------------------------------------------------------------------- the questions


def module_plan(cases: list) -> list[dict]:
    """The kernel's plan (:func:`normref.plan.run_plan`) for
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
    calling the reference (:class:`normref.recorder.ReferenceRecorder`'s arguments), and whose
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
    #: (the record of ``plan(cases)``, :func:`normref.plan.run_plan`) or ``"values"`` (a
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
# happened (:func:`normref.plan.run_plan`), the checker judges the record (:class:`grader.replay.ReplayClass`).
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
    ``fn`` is a :class:`grader.replay.Replay`.) The battery is the checker's argument: checks in several
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


def question_inputs(grade_id: str, seed: int) -> str:
    """What the kernel is given for ``grade_id`` (:func:`normref.wire.dump_inputs`): a function's
    calls (``None`` for a visible check: the kernel makes its public cases), a class's plan, or
    nothing to draw for a short answer; a numpy or short-answer question's without torch."""
    q = QUESTIONS[grade_id]
    if q.kind == "class":  # the plan of calls (a visible check's public cases, too)
        data = {"kind": "class", "plan": q.plan(plan_cases(grade_id, seed)), "reference": q.reference,
                "visible": q.all_or_nothing}
    elif q.kind == "values":  # a short answer: nothing to draw, the kernel hands back values
        data = {"kind": "values"}
    else:
        calls = None if q.public else probe_calls(grade_id, seed)  # public cases: the kernel makes them
        data = {"calls": calls, "public": q.public, "reference": q.reference}
    # a numpy or short-answer question's kernel reads its inputs without importing torch
    return dump_inputs(data, torch_free=q.backend == "numpy" or q.kind == "values")


def prepare_inputs(course_root: Path, *, seed: int | None = None, log=print,
                   set_env: bool = True) -> tuple[int, Path]:
    """Draw this run's graded inputs and point nbgrader's autograde at them.

    Writes ``logs/scoring/handback-inputs.json`` (``{grade_id: text}``, :func:`question_inputs`;
    the grader's alone, mode 0600, outside every sandbox: the autograde preprocessor
    ``HandbackInputs`` of ``nbgrader_config.py`` writes each question's into its hidden test just
    before it runs), appends the seed to ``logs/scoring/seeds.jsonl`` (what reproduces the
    grades), and sets ``NORMREF_HANDBACK_INPUTS`` to the inputs file in this process's
    environment (unless ``set_env`` is False: then pass it to nbgrader yourself), which
    nbgrader's autograde inherits. No kernel is given the variable or the folder.

    Returns:
        ``(seed, inputs file)``.
    """
    root = Path(course_root)
    seed = new_seed() if seed is None else seed
    folder = root / "logs" / SCORING_DIR
    folder.mkdir(parents=True, exist_ok=True)
    inputs = {gid: question_inputs(gid, seed) for gid in QUESTIONS}
    path = folder / INPUTS_FILE
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(inputs, f)
    with (folder / "seeds.jsonl").open("a") as f:
        f.write(json.dumps({"time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "seed": seed,
                            "questions": sorted(QUESTIONS)}) + "\n")
    if set_env:
        os.environ[ENV] = str(path.resolve())
    log(f"scoring: graded inputs drawn for {len(QUESTIONS)} questions (seed in {folder / 'seeds.jsonl'})")
    return seed, path


def inputs_stage(b) -> None:
    """``grade_class`` stage before autograde: draw this run's graded inputs (a new seed)."""
    b.found.scoring_seed, _ = prepare_inputs(b.services.tree.root, log=b.services.log)
