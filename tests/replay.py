"""An in-process stand-in for the grading kernels, for the tests of a run's bookkeeping.

The course-state tests check what a run records (which submissions are graded, hand grades
kept, LMS names, restores, the run log), not what a kernel computes. They grade with
:func:`grade_class` (or ``python -m grader``'s ``main`` in this process, :func:`run_grader`)
exactly as ``make grade`` does, except for one thing: nbgrader's ``Execute`` preprocessor (the
kernel, in the sandbox) is replaced by :class:`ReplayOutputs`, which gives each code cell the
outputs a real kernel gave the same cell of the same notebook earlier in this test session.
Everything else is the real thing: nbgrader's own autograde converter in this process (the
sanitizing preprocessors, the gradebook's submission and grade rows, the timestamps,
``SaveAutoGrades``), the trusted scoring of the handed-back outputs, hand grades, feedback,
export and report.

Recorded real outputs: :func:`record` grades the notebooks of :data:`RECORDED` (and the
instructor's solutions, which the canary grades) once per session in a real, sandboxed
``grade_class`` run, and keeps each autograded notebook as it was just before the scoring stage.
A run's graded inputs are drawn from a secret seed (:mod:`grader.scoring.inputs`); the recording run
and every replayed run use one seed, drawn afresh for the session, so the handed-back outputs
replayed are the outputs of the inputs the replayed run scores against. A notebook that was not
recorded fails the run with what to add (a replay is never a guess).

The seam is the run's engine (:mod:`grader.autograde.engine`): :func:`stand_in` makes every run's engine a
:class:`ReplayEngine`, which runs each autograde task at once in this process, and gives the
task's nbgrader configuration (:func:`grader.autograde.task.autograde_config`) :class:`ReplayOutputs` for
the kernel. The task is the real :func:`grader.autograde.task.grade_submission` (the payloads, the scratch
course, the sandbox session, nbgrader's autograde converter, the files and grade rows it hands
back); everything above it, the choice of submissions, the one gradebook writer
(:func:`grader.autograde.task.record`), the dead-kernel regrade and the canary included, is the real thing.
No kernel starts.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor

from grader.demo import fill_answers
from grader.demo.answer_bank import ANSWERS

REPO = Path(__file__).resolve().parents[1]
CORRECT_PRACTICE = ANSWERS["practice"]["correct"]

#: The notebooks the replaying tests (test_course_state, test_grading's LMS and batches) hand
#: in: ``{name: (assignment, answers)}`` (the released notebook with these answer cells). The
#: canary's (the instructor's solutions) are recorded too.
RECORDED = {
    **{f"rmsnorm-{v}": ("rmsnorm", ANSWERS["rmsnorm"][v])
       for v in ("correct", "unbiased_variance", "low_precision_stats", "wrong_axis")},
    "rmsnorm-released": ("rmsnorm", {}),  # an unreadable file's stand-in: the released notebook
    "practice-correct": ("practice", CORRECT_PRACTICE),
    "practice-rms-changed": ("practice", {**CORRECT_PRACTICE, "practice_rms_answer": "rms_34 = 5.0"}),
}


def notebook_key(assignment: str, nb) -> str:
    """What a notebook's kernel outputs depend on: the assignment and the code cells' sources,
    in order (written answers, in markdown cells, change no output)."""
    h = hashlib.sha256(assignment.encode())
    for cell in nb.cells:
        if cell.cell_type == "code":
            h.update(b"\0" + cell.source.encode())
    return h.hexdigest()


@dataclass
class Recording:
    """Real outputs, by :func:`notebook_key`: ``[(outputs, execution_count)]`` per code cell."""

    seed: int
    outputs: dict[str, list[tuple[list, int | None]]] = field(default_factory=dict)
    #: what the recording run graded, ``{key: "student (assignment)"}``, for the miss message
    names: dict[str, str] = field(default_factory=dict)
    #: notebooks asked for and not recorded during the run now replaying
    misses: list[str] = field(default_factory=list)


#: The recording :class:`ReplayOutputs` reads (set by :func:`stand_in`).
ACTIVE: Recording | None = None


class ReplayOutputs(NbGraderPreprocessor):
    """In place of nbgrader's ``Execute`` (and the course's ``HandbackInputs`` around it): each
    code cell gets the outputs and execution count a real kernel gave it (:data:`ACTIVE`)."""

    def preprocess(self, nb, resources):
        assignment = resources.get("nbgrader", {}).get("assignment", "")
        recorded = ACTIVE.outputs.get(notebook_key(assignment, nb)) if ACTIVE else None
        if recorded is None:
            what = f"{resources.get('nbgrader', {}).get('student')} ({assignment})"
            if ACTIVE is not None:
                ACTIVE.misses.append(what)
            raise LookupError(f"tests/replay.py: no real kernel outputs recorded for the notebook of {what}")
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert len(code) == len(recorded)  # the key covers every code cell
        for cell, (outputs, count) in zip(code, recorded):
            cell.outputs = copy.deepcopy(outputs)
            cell.execution_count = count
        return nb, resources


def replay_config(real_config):
    """:func:`grader.autograde.task.autograde_config` with :class:`ReplayOutputs` where the kernel was
    (nbgrader's ``Execute`` and the course's ``HandbackInputs`` around it)."""
    def config(root, args):
        cfg = real_config(root, args)
        from nbgrader.preprocessors import Execute

        def kernel(p) -> bool:  # nbgrader's Execute (the course's GradingExecute is one) and the inputs around it
            return p.__name__ in ("HandbackInputs", "HandbackInputsRemoved") or issubclass(p, Execute)

        pre = list(cfg.Autograde.autograde_preprocessors)
        at = [p.__name__ for p in pre].index("HandbackInputs")
        steps = [p for p in pre if not kernel(p)]
        cfg.Autograde.autograde_preprocessors = [*steps[:at], ReplayOutputs, *steps[at:]]
        return cfg

    return config


class ReplayEngine:
    """In place of the run's engine (:mod:`grader.autograde.engine`): each task runs at once, in this process,
    when it is sent (so :class:`ReplayOutputs` reads :data:`ACTIVE`); the task itself is the real
    :func:`grader.autograde.task.grade_submission` (scratch course, sandbox session, nbgrader's autograde
    converter, the rows and files it hands back), with :func:`replay_config` for the kernel.

    Raises (from ``submit``):
        AssertionError: a notebook was not recorded (named, with :data:`RECORDED` to extend).
    """

    name, label, address = "processes", "replayed tasks", None

    def __init__(self, jobs: int = 1, *, log=print):
        self.jobs = jobs
        self._keys: dict = {}

    def executor(self, use_sandbox: bool = True):
        return self

    def submit(self, fn, *args, key: str, workers=None):
        from concurrent.futures import Future

        missed = len(ACTIVE.misses)
        fut = Future()
        try:
            fut.set_result(fn(*args))
        except Exception as e:  # noqa: BLE001 - as a worker's error comes back
            fut.set_exception(e)
        if len(ACTIVE.misses) > missed:
            raise AssertionError(f"tests/replay.py: not recorded: {', '.join(ACTIVE.misses[missed:])}; add their "
                                 f"answers to RECORDED (recorded: {sorted(set(ACTIVE.names.values()))})")
        self._keys[fut] = key
        return fut

    def as_completed(self, futures):
        for fut in futures:
            yield self._keys.pop(fut), fut

    def failure(self, exc: BaseException) -> str:
        return f"{type(exc).__name__}: {str(exc)[:300]}"

    def cancel(self, futures=()) -> None:
        self._keys.clear()

    def describe(self) -> str:
        return "this test process (tests/replay.py)"

    def close(self, timeout=None) -> None:
        self._keys.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _submissions(dest: Path, course_root: Path) -> dict[str, str]:
    """:data:`RECORDED` and the instructor's solutions (as the canary writes them) as an nbgrader
    ``submitted/`` tree under ``dest``; returns ``{student: name}``."""
    from grader.stages import canary
    from grader.ledger.course import CourseTree

    students = {}
    for i, (name, (a, answers)) in enumerate(sorted(RECORDED.items())):
        release = course_root / "release" / a / f"{a}.ipynb"
        (dest / f"s{i:02d}" / a).mkdir(parents=True)
        nbformat.write(fill_answers(release, answers), dest / f"s{i:02d}" / a / release.name)
        students[f"s{i:02d}"] = name
    tree = CourseTree(course_root)
    for a in sorted({a for a, _ in RECORDED.values()}):
        canary.write_submission(tree, a)  # submitted/canary/<a>/ of the recording course: moved
        shutil.copytree(tree.submitted(canary.STUDENT, a), dest / "solutions" / a)
    shutil.rmtree(tree.submitted(), ignore_errors=True)
    students["solutions"] = "the instructor's solutions"
    return students


def record(course_root: Path, work: Path) -> Recording:
    """Grade :data:`RECORDED` and the solutions for real (sandboxed, ``processes`` engine) in the
    course copy ``course_root``, with a seed drawn now; keep each autograded notebook's code
    cells' outputs as they were before scoring."""
    from unittest import mock

    from grader import pipeline
    from grader.scoring import inputs as scoring

    seed = scoring.new_seed()
    rec = Recording(seed)
    names = _submissions(work / "submitted", course_root)
    stages = dict(pipeline.STAGES)

    def keep_then_score(b):
        for a, st in b.run.autograde.graded:
            for path in sorted(b.services.tree.autograded(st, a).glob("*.ipynb")):
                nb = nbformat.read(path, as_version=4)
                key = notebook_key(a, nb)
                rec.outputs[key] = [(copy.deepcopy(c.outputs), c.execution_count) for c in nb.cells
                                    if c.cell_type == "code"]
                rec.names[key] = f"{names.get(st, st)} ({a})"
        stages["scoring"](b)

    with mock.patch.object(scoring, "new_seed", lambda: seed), \
            mock.patch.object(pipeline, "STAGES", tuple((n, keep_then_score if n == "scoring" else f)
                                                        for n, f in pipeline.STAGES)):
        run = pipeline.grade_class(course_root=course_root, submissions=work / "submitted", jobs=2,
                                   engine="processes", use_sandbox=True, log=lambda *_: None)
    handed_in = len(RECORDED) + len({a for a, _ in RECORDED.values()})  # and the solutions
    assert not run.autograde.failed and len(run.autograde.graded) == handed_in, run.autograde.failed
    return rec


def _one_run_id_per_second(run_id):
    """``grader.ledger.state.run_id`` (the time to the second and the process id), waiting for the next
    second when this process already had that id: replayed runs, all in this process, can start
    within one second of each other, which runs in processes of their own never share an id."""
    seen: set[str] = set()

    def unique() -> str:
        rid = run_id()
        while rid in seen:
            time.sleep(0.05)
            rid = run_id()
        seen.add(rid)
        return rid

    return unique


@contextlib.contextmanager
def stand_in(recording: Recording, monkeypatch, canary_cache: Path):
    """Replay for the ``with`` block: every run's engine is a :class:`ReplayEngine` and its tasks'
    nbgrader configuration has :class:`ReplayOutputs` for the kernel; the seed is the
    recording's, the canary's passes go to ``canary_cache`` (a replayed pass is never a real
    run's cache hit), two runs never share a run id (:func:`_one_run_id_per_second`), and
    ``NORMREF_HANDBACK_INPUTS`` (which a run sets in this process) is put back afterwards."""
    global ACTIVE
    from grader import pipeline
    from grader.scoring import inputs as scoring
    from grader.ledger import state
    from grader.autograde import task
    from normref.handback_files import HANDBACK_ENV

    monkeypatch.setattr(scoring, "new_seed", lambda: recording.seed)
    monkeypatch.setattr(task, "autograde_config", replay_config(task.autograde_config))
    monkeypatch.setattr(pipeline, "_engine", lambda scheduler, engine, jobs, log: ReplayEngine(jobs, log=log))
    monkeypatch.setattr(state, "run_id", _one_run_id_per_second(state.run_id))
    monkeypatch.setenv("NORMREF_CANARY_CACHE", str(canary_cache))
    monkeypatch.delenv(HANDBACK_ENV, raising=False)
    ACTIVE = recording
    try:
        yield recording
    finally:
        ACTIVE = None


def run_grader(*args, course: Path) -> subprocess.CompletedProcess:
    """``python -m grader ARGS --course-root COURSE`` run by its ``main`` in this process (no
    terminal: standard input is empty), as a :class:`subprocess.CompletedProcess` with its exit
    status and what it printed; the signal handlers it installs are put back after."""
    from grader.__main__ import main

    argv = [*map(str, args), "--course-root", str(course)]
    out, err = io.StringIO(), io.StringIO()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    stdin = sys.stdin
    try:
        sys.stdin = io.StringIO("")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:  # argparse: --help, a usage error
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.stdin = stdin
        for s, h in handlers.items():
            signal.signal(s, h)
    return subprocess.CompletedProcess(["python", "-m", "grader", *argv], code, out.getvalue(), err.getvalue())
