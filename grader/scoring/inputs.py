"""Trusted scoring: the graded batteries' inputs drawn from a secret seed, and their scores
computed in the grader's own process.

For every question of the course (:func:`grader.scoring.questions.questions`: each declared once, in
its assignment's folder's ``grading.py``; :data:`QUESTIONS` is this repository's):

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
2. After the kernel, the notebook's clean room (:mod:`grader.kernel.cleanroom`: the answer's
   definitions only, the references absent) makes those calls with :mod:`normref.handback`'s
   code, and its outputs (or exceptions) become the test cell's one output of that MIME type.
3. :func:`grader.scoring.scores.score_notebook`, after autograde, reads that output from the autograded
   notebook (nothing pickled: arrays as ``.npy``, tensors with dtype and shape), replays it
   through the same checker on the same cases (:class:`grader.scoring.replay.Replay` stands in for the
   student's function), and :func:`grader.scoring.scores.score_class` writes ``points x score`` into
   nbgrader's gradebook (``Grade`` rows) and the checker's diagnosis into the autograded
   notebook (what the feedback shows), with, in that output's metadata, the record of what the
   outputs computed case by case (the class report groups wrong answers by it,
   :mod:`grader.outputs.groups`, without running any code).

The same holds for classes and short answers. A class question (the block assignment's
``RMSNorm`` module and ``PreNormBlock``) hands back the record of a plan the grader decides
(declared with its question, e.g. ``source/block/grading.py``'s ``module_plan`` and
``block_plan``: construct with given arguments, report the named parameters and submodules,
load given weights, swap in the checker's known submodules, call the student's own submodules
in the reference wiring, call ``forward`` on drawn inputs; :func:`normref.plan.run_plan`
performs it); :class:`grader.scoring.replay.ReplayClass` rebuilds the
modules from that record for the same checker. A short answer (the practice assignment)
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
from collections.abc import Mapping
from pathlib import Path

from normref.handback_files import INPUTS_FILE, SCORING_DIR
from normref.wire import dump_inputs

from .batteries import question_generator
from .questions import Question, questions

__all__ = ["QUESTIONS", "Question", "prepare_inputs", "run_check", "plan_cases", "drawn_cases", "question_inputs",
           "probe_calls", "new_seed", "short_answers", "torch_free_assignments"]


class _RepoQuestions(Mapping):
    """This repository's questions (:func:`grader.scoring.questions.questions` of its ``source/``), read
    when first used: ``{grade_id: Question}``."""

    def __getitem__(self, grade_id: str) -> Question:
        return questions()[grade_id]

    def __iter__(self):
        return iter(questions())

    def __len__(self) -> int:
        return len(questions())


#: Every question of this repository's assignments (a course copied from it has the same ones).
QUESTIONS: Mapping[str, Question] = _RepoQuestions()


def _question(grade_id: str, course_root: Path | None = None) -> Question:
    return questions(course_root)[grade_id]


def plan_cases(grade_id: str, seed: int, course_root: Path | None = None) -> list:
    """A class question's cases: its drawn battery for this seed, or for a visible check the
    first ``head`` cases of the checker's own (public) battery."""
    q = _question(grade_id, course_root)
    if q.draw is not None:
        return drawn_cases(grade_id, seed, course_root)
    return q.public_cases()[:q.head]


def drawn_cases(grade_id: str, seed: int, course_root: Path | None = None) -> list:
    """The battery of ``grade_id`` for this seed (the same every time for one seed, in any thread:
    drawn from :func:`grader.scoring.batteries.question_generator` alone)."""
    return _question(grade_id, course_root).draw(question_generator(seed, grade_id))


def run_check(grade_id: str, seed: int, fn, course_root: Path | None = None):
    """``grade_id``'s checker on its drawn battery (a visible check: on its own public cases),
    with ``fn`` as the student's function: a :class:`normref.checks.CheckResult`. (In grading
    ``fn`` is a :class:`grader.scoring.replay.Replay`.) The battery is the checker's argument: checks in several
    threads at once do not meet."""
    q = _question(grade_id, course_root)
    return q.check(fn, None if q.draw is None else drawn_cases(grade_id, seed, course_root))


# --------------------------------------------------------------------------- the inputs


def probe_calls(grade_id: str, seed: int, course_root: Path | None = None) -> list[tuple[tuple, dict, bool]]:
    """The calls ``grade_id``'s checker makes of the student's function on the drawn battery:
    ``[(args, kwargs, grad enabled)]`` (copies, in order)."""
    from normref.handback import probe

    return probe(lambda fn: run_check(grade_id, seed, fn, course_root))


def new_seed() -> int:
    """A secret seed for one grading run."""
    return secrets.randbits(62)


def _probed(grade_id: str, seed: int, course_root: Path | None = None) -> tuple[list, str | None]:
    """``(probe_calls, the checker's name)``: the name (``CheckResult.name``) says which declared
    question the diagnosis traces (:mod:`normref.diagnosis.handing`)."""
    from normref.handback import probe

    results: list = []
    calls = probe(lambda fn: results.append(run_check(grade_id, seed, fn, course_root)))
    return calls, getattr(results[0], "name", None) if results else None


def question_inputs(grade_id: str, seed: int, course_root: Path | None = None) -> str:
    """What the kernel is given for ``grade_id`` (:func:`normref.wire.dump_inputs`): a function's
    calls (``None`` for a visible check: the kernel makes its public cases), a class's plan, or
    nothing to draw for a short answer; a numpy or short-answer question's without torch. A
    code question's ``"trace"`` names its checker: where its calls are made, each is traced as
    the self-check traces it (:func:`normref.diagnosis.handing.trace_record`)."""
    q = _question(grade_id, course_root)
    if q.kind == "values":  # a short answer: nothing to draw, the kernel hands back values
        data = {"kind": "values"}
    else:
        calls, name = _probed(grade_id, seed, course_root)
        if q.kind == "class":  # the plan of calls (a visible check's public cases, too)
            data = {"kind": "class", "plan": q.plan(plan_cases(grade_id, seed, course_root)),
                    "reference": q.reference, "visible": q.all_or_nothing}
        else:  # public cases: the kernel makes them
            data = {"calls": None if q.public else calls, "public": q.public, "reference": q.reference}
        from normref.diagnosis.handing import trace_imports

        imports = trace_imports(name)  # a question the diagnosis does not trace: nothing to trace
        data.update(trace=name if imports else None, trace_imports=imports)
    # a numpy or short-answer question's kernel reads its inputs without importing torch
    return dump_inputs(data, torch_free=q.backend == "numpy" or q.kind == "values")


def prepare_inputs(course_root: Path, *, seed: int | None = None, log=print) -> tuple[int, Path]:
    """Draw this run's graded inputs where the run's autograde finds them.

    Writes ``logs/scoring/handback-inputs.json`` (``{grade_id: text}``, :func:`question_inputs`;
    the grader's alone, mode 0600, outside every sandbox: the autograde preprocessor
    ``HandbackInputs`` of ``nbgrader_config.py`` writes each question's into its hidden test just
    before it runs), appends the seed to ``logs/scoring/seeds.jsonl`` (what reproduces the
    grades). The run's autograde reads it from there (:mod:`grader.autograde.engine`) and hands it
    to nbgrader's autograde as ``--HandbackInputs.inputs_file``; by hand, ``nbgrader autograde``
    takes that option or ``$NORMREF_HANDBACK_INPUTS``. No kernel is given the file or the folder.

    Returns:
        ``(seed, inputs file)``.
    """
    root = Path(course_root)
    seed = new_seed() if seed is None else seed
    folder = root / "logs" / SCORING_DIR
    folder.mkdir(parents=True, exist_ok=True)
    qs = questions(root)
    inputs = {gid: question_inputs(gid, seed, root) for gid in qs}
    path = folder / INPUTS_FILE
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(inputs, f)
    with (folder / "seeds.jsonl").open("a") as f:
        f.write(json.dumps({"time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "seed": seed,
                            "questions": sorted(qs)}) + "\n")
    log(f"scoring: graded inputs drawn for {len(qs)} questions (seed in {folder / 'seeds.jsonl'})")
    return seed, path


def short_answers(course_root: Path | None = None) -> dict[str, tuple[str, dict]]:
    """``{grade_id: (normref.answers checker, its setting)}`` of the course's short answers (as each
    notebook's visible check passes them)."""
    return {gid: q.answer for gid, q in questions(course_root).items() if q.kind == "values"}


def torch_free_assignments(course_root: Path | None = None) -> frozenset[str]:
    """The assignments whose kernel never imports torch (every question numpy or a short answer,
    :attr:`grader.scoring.questions.Assignment.torch_free`): their hand-back is sealed without torch."""
    from .questions import assignments

    return frozenset(a.name for a in assignments(course_root).values() if a.torch_free)
