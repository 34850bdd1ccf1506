"""The course's questions, each declared once, in its assignment's folder.

An assignment is a folder, ``source/<assignment>/``, that nbgrader already knows: its notebook
(``<assignment>.ipynb``: the task, the answer cells, the visible checks and the hidden tests) and,
beside it, everything the grader knows of its questions:

- ``grading.py``: ``ASSIGNMENT = Assignment(...)``, the questions scored outside the kernel
  (:class:`Question`: the checker that judges the answer, the battery drawn for each grading
  run, what the answer may not call, what the kernel hands back) and the hand-graded cells;
- ``answer_bank.py``: ``ANSWERS`` and ``EXPECTED``, the demo class's answers (one per variant:
  correct, blank, partial, one per diagnosed mistake) and the points each must get, derived by
  hand (``grader/demo`` builds the demo class from them; the tests check every one).

Neither file reaches students: ``nbgrader_config.py`` lists them in ``CourseDirectory.ignore``, so
nbgrader copies neither into ``release/`` nor into a student's autograded folder, and the
student repository has no ``source/``. Other files of the folder (a released self-check module,
say) are copied as nbgrader copies any file of an assignment.

:func:`assignments` reads a course's folders (each ``grading.py`` imported as the module
``<package>.<assignment>.grading`` of a package made for that course root, so it may import its
siblings: ``from .reference import layer_norm_backward``); :func:`questions` is the registry
every stage uses: ``{grade_id: Question}`` of every assignment. Adding a question is one entry
in its assignment's ``grading.py`` and its cells in the notebook; adding an assignment is one
folder (docs/ASSIGNMENTS.md).
"""
from __future__ import annotations

import hashlib
import importlib
import sys
import types
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

__all__ = ["Assignment", "Question", "assignments", "questions", "assignment_module", "checker",
           "battery", "visible", "short_answer", "GRADING", "ANSWER_BANK", "NOT_RELEASED"]  # noqa: E501

#: The assignment folder's files the grader reads and students never get (nbgrader's ignore list).
GRADING = "grading.py"
ANSWER_BANK = "answer_bank.py"
#: ``reference.py``: an answer the lessons do not need, kept on the grader's side (the backward's).
NOT_RELEASED = (GRADING, ANSWER_BANK, "reference.py")


@dataclass(frozen=True)
class Question:
    """One question scored outside the kernel: its checker, the battery it runs, what counts as
    calling the reference (:class:`normref.recorder.ReferenceRecorder`'s arguments), and what
    the kernel hands back.

    Attributes:
        grade_id: the grade cell's nbgrader ``grade_id`` (its points are the cell's, in the
            notebook).
        check: ``check(fn, cases) -> CheckResult``: the same checker the notebook's self-check
            calls, on ``cases`` (``None``: its own public battery).
        draw: ``draw(g) -> cases``, the graded battery drawn from a ``torch.Generator``
            (:func:`grader.scoring.batteries.question_generator`: the run's seed and the grade_id);
            ``None`` for a visible check or a short answer, which run on public cases.
        reference: what the answer may not run (:mod:`normref.rules`' lists, the recorder's
            arguments); ``{}`` for a short answer.
        backend: ``"torch"`` or ``"numpy"`` (a numpy question's kernel reads its inputs without
            torch, and the rule is worded for arrays).
        all_or_nothing: a visible check: its cases all pass or the cell earns 0.
        public: the checker and its arguments as the notebook calls it (``(name, args,
            kwargs)`` of :mod:`normref.checks`): the kernel makes those public calls itself.
        kind: ``"function"`` (the outputs of the checker's calls), ``"class"`` (the record of
            ``plan(cases)``, :func:`normref.plan.run_plan`) or ``"values"`` (a short answer).
        plan: a class question's plan of calls for the kernel.
        public_cases: a class question's visible check: its checker's public battery, of which
            the first ``head`` cases are run.
        assignment: the assignment it belongs to (set by :func:`assignments`).
    """

    grade_id: str
    check: Callable
    draw: Callable | None = None
    reference: dict = field(default_factory=dict)
    backend: str = "torch"
    all_or_nothing: bool = False
    public: tuple | None = None
    kind: str = "function"
    plan: Callable | None = None
    public_cases: Callable | None = None
    head: int | None = None
    assignment: str = ""
    #: a short answer's :mod:`normref.answers` checker and setting: ``(name, setting)``
    answer: tuple | None = None


@dataclass(frozen=True)
class Assignment:
    """One assignment's grading knowledge (its folder's ``grading.py`` and ``answer_bank.py``).

    Attributes:
        name: the folder's name (nbgrader's assignment id).
        questions: its automatically scored questions.
        manual: its hand-graded cells' grade_ids (nbgrader's "manually graded answer" cells).
        torch_free: its kernel never imports torch (every question numpy or a short answer).
        answers: the answer bank, ``{variant: {answer cell grade_id: source}}``.
        expected: ``{variant: {grade cell grade_id: points}}``, derived by hand.
        module: the imported ``grading.py``.
    """

    name: str
    questions: tuple[Question, ...]
    manual: tuple[str, ...] = ()
    answers: dict = field(default_factory=dict)
    expected: dict = field(default_factory=dict)
    module: types.ModuleType | None = field(default=None, repr=False, compare=False)

    @property
    def torch_free(self) -> bool:
        return all(q.backend == "numpy" or q.kind == "values" for q in self.questions)


# --------------------------------------------------------------------------- declaring


def _resolve(name: str | Callable) -> Callable:
    """A checker given by name (one of :mod:`normref.checks`, the course's) or as the function
    itself (e.g. a self-check module released beside the assignment's notebook, which its
    ``grading.py`` imports from the folder: ``from .batchnorm_check import check_batch_norm``)."""
    if callable(name):
        return name
    from normref import checks

    return getattr(checks, name)


def checker(name: str | Callable, *args, head: int | None = None, **kwargs) -> Callable:
    """``check(fn, cases)``: the checker ``name`` called as ``name(fn, *args, cases=cases,
    **kwargs)`` (the first ``head`` cases of its result, when given)."""
    def check(fn, cases=None):
        result = _resolve(name)(fn, *args, cases=cases, **kwargs)
        return result if head is None else result.head(head)

    return check


def battery(grade_id: str, check: Callable, draw: Callable, reference: dict, *, backend: str = "torch",
            kind: str = "function", plan: Callable | None = None) -> Question:
    """A battery question: ``check`` on the cases ``draw`` draws for each grading run."""
    return Question(grade_id, check, draw, dict(reference), backend, kind=kind, plan=plan)


def visible(grade_id: str, of: Question, name: str | Callable, *args, head: int | None = None,
            public_cases: Callable | None = None, **kwargs) -> Question:
    """A visible check of the battery question ``of``: the notebook's own call ``name(fn, *args,
    **kwargs)`` on its public cases (the first ``head``), all or nothing.

    For a function, a checker of :mod:`normref.checks` named by name makes its public calls in the
    kernel (``public``); one given as a function has the grader make them (the calls its public
    cases make are handed to the kernel). For a class, the kernel runs the plan of
    ``public_cases()[:head]`` and the checker judges that record."""
    if of.kind == "class":
        return Question(grade_id, checker(name, *args, **kwargs), None, of.reference, of.backend,
                        all_or_nothing=True, kind="class", plan=of.plan, public_cases=public_cases, head=head)

    def check(fn, cases=None):
        result = _resolve(name)(fn, *args, **kwargs)
        return result if head is None else result.head(head)

    public = None if callable(name) else (name, args, kwargs)
    return Question(grade_id, check, None, of.reference, of.backend, all_or_nothing=True, public=public)


def short_answer(grade_id: str, name: str, **setting) -> Question:
    """A short answer: the kernel hands back its values, checked by :mod:`normref.answers`'
    ``name(*values, **setting)`` (the setting the notebook's visible check passes)."""
    def check(values, cases=None):
        from normref import answers

        return getattr(answers, name)(*values, **setting)

    return Question(grade_id, check, kind="values", answer=(name, dict(setting)))


# --------------------------------------------------------------------------- reading a course


#: ``{course root: (its folders' stamp, its assignments)}``
_CACHE: dict[Path, tuple[tuple, dict[str, Assignment]]] = {}


def _package(root: Path) -> str:
    """The name of the package a course root's assignment folders are imported under."""
    return "_course_" + hashlib.sha1(str(root).encode()).hexdigest()[:10]


def _folders(root: Path) -> list[Path]:
    source = root / "source"
    return sorted(p for p in source.iterdir() if (p / GRADING).is_file()) if source.is_dir() else []


def _stamp(root: Path) -> tuple:
    return tuple((p.name, f.stat().st_mtime_ns) for p in _folders(root) for f in sorted(p.glob("*.py")))


def _load(root: Path, folder: Path) -> Assignment:
    pkg = _package(root)
    if pkg not in sys.modules:
        top = types.ModuleType(pkg)
        top.__path__ = []
        sys.modules[pkg] = top
    name = f"{pkg}.{folder.name}"
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]  # a changed folder is read again
    sub = types.ModuleType(name)
    sub.__path__ = [str(folder)]
    sys.modules[name] = sub
    module = importlib.import_module(f"{name}.grading")
    declared: Assignment = module.ASSIGNMENT
    bank = importlib.import_module(f"{name}.answer_bank") if (folder / ANSWER_BANK).is_file() else None
    qs = tuple(replace(q, assignment=folder.name) for q in declared.questions)
    return replace(declared, name=folder.name, questions=qs, module=module,
                   answers=dict(getattr(bank, "ANSWERS", declared.answers)),
                   expected=dict(getattr(bank, "EXPECTED", declared.expected)))


def assignments(course_root: Path | None = None) -> dict[str, Assignment]:
    """``{name: Assignment}`` of every folder of ``course_root``'s ``source/`` with a
    ``grading.py`` (default, and for a course root that has none, such as a folder holding only
    autograded notebooks: this repository), read once and again when a file there changes.

    Raises:
        ValueError: two assignments declare the same grade_id, or a folder's ``ASSIGNMENT``
            names another folder.
    """
    from ..ledger.course import REPO_ROOT

    root = Path(course_root or REPO_ROOT).resolve()
    if not _folders(root):  # no assignment folders here (a folder of autograded notebooks only): the repository's
        root = REPO_ROOT.resolve()
    stamp = _stamp(root)
    if root not in _CACHE or _CACHE[root][0] != stamp:
        found = {f.name: _load(root, f) for f in _folders(root)}
        seen: dict[str, str] = {}
        for a in found.values():
            for q in a.questions:
                if q.grade_id in seen:
                    raise ValueError(f"grade_id {q.grade_id!r} is declared by both {seen[q.grade_id]} and {a.name}")
                seen[q.grade_id] = a.name
        _CACHE[root] = (stamp, found)
    return _CACHE[root][1]


def questions(course_root: Path | None = None) -> dict[str, Question]:
    """``{grade_id: Question}`` of every assignment of the course (the registry)."""
    return {q.grade_id: q for a in assignments(course_root).values() for q in a.questions}


def assignment_module(name: str, module: str = "grading", course_root: Path | None = None) -> types.ModuleType:
    """A module of one assignment's folder, imported as the registry imports it: its
    ``grading.py`` (default), or another, e.g. ``assignment_module("layernorm_backward",
    "reference")``, the backward's analytic reference.

    Raises:
        KeyError: no such assignment (a folder of ``source/`` with a ``grading.py``).
        ModuleNotFoundError: no such module in its folder."""
    found = assignments(course_root)[name]
    if module == "grading":
        return found.module
    return importlib.import_module(f"{found.module.__name__.rsplit('.', 1)[0]}.{module}")
