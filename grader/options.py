"""The options of one grading run, declared once (:class:`GradeOptions`).

``python -m grader``'s flags (:func:`add_arguments`, :func:`from_args`) and the keyword arguments
of :func:`grader.pipeline.grade_class` both come from the fields below: a field's type, default
and help text are written here and nowhere else (otter-grader's typed configuration; nbgrader's
one traitlet per option). Validation lives here too, so the command line and the Python API
refuse the same values with the same words.

This module imports nothing of the pipeline: ``python -m grader --help`` loads only it.
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
from dataclasses import dataclass, field, fields
from pathlib import Path

#: Where autograde runs without a Dask scheduler: an embedded local Dask cluster or this machine's
#: process pool (:mod:`grader.autograde.engine`).
ENGINES = ("dask", "processes")
DEFAULT_ENGINE = "dask"


def _repo_root() -> Path:
    from .ledger.course import REPO_ROOT

    return REPO_ROOT


def option(default=None, help: str = "", *, flag: str | None = None, metavar: str | None = None,
           cli: str = "value", choices: tuple | None = None, default_factory=None):
    """A field of :class:`GradeOptions` with what its command-line flag needs.

    ``cli`` says how the flag is spelled: ``"value"`` (``--name VALUE``), ``"switch"`` (``--name``
    sets True), ``"negate"`` (``--no-name`` sets False), ``"both"`` (``--name``/``--no-name``),
    ``"append"`` (repeatable ``--name VALUE``, parsed by the field's ``parse`` below) or
    ``"api"`` (no flag: the Python API only)."""
    meta = {"help": help, "flag": flag, "metavar": metavar, "cli": cli, "choices": choices}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def parse_duedates(items) -> dict[str, str]:
    """``--duedate`` values (``"DATE"`` for every assignment, ``"ASSIGNMENT=DATE"`` for one) as
    :attr:`GradeOptions.duedates`: ``{"*" or assignment: date}``.

    Raises:
        ValueError: a date nbgrader cannot read.
    """
    from nbgrader.utils import parse_utc

    out = {}
    for item in items:
        name, sep, date = item.partition("=")
        out[name.strip() if sep else "*"] = date.strip() if sep else item.strip()
    for date in out.values():
        try:
            parse_utc(date)
        except (ValueError, OverflowError):
            raise ValueError(f"cannot read {date!r} as a date (e.g. '2026-11-21 09:00 UTC')") from None
    return out


@dataclass(frozen=True, kw_only=True)
class GradeOptions:
    """What one grading run was asked to do. Frozen: a stage that decides something (whether
    this run starts over, whether it is sandboxed) records it in the run's findings
    (:class:`grader.batch.Findings`), never here.

    Raises:
        ValueError: ``jobs`` below 1, an unknown ``engine``, a due date nbgrader cannot read,
            ``demo_students`` below 1, ``cell_timeout`` below 1.
    """

    submissions: Path | None = option(
        None, "an nbgrader submitted/<student>/<assignment>/ tree, or a folder or .zip of LMS-downloaded "
        "notebooks (Canvas, Moodle, Blackboard names); default: the demo class", metavar="PATH")
    jobs: int | None = option(None, "concurrent autograde processes (default: all cores)", metavar="N")
    fresh: bool | None = option(
        None, "remove earlier grading state (submitted/, autograded/, feedback/, gradebook.db, reports/, ...) "
        "first, after a backup under logs/backups/; with real students there this needs --yes or a yes at the "
        "terminal (default: the demo class starts over, a real class adds a batch)", cli="switch")
    yes: bool = option(False, "consent to --fresh removing real students' state", cli="switch")
    duedates: dict[str, str] = option(
        help="record a due date, e.g. '2026-11-21 09:00 UTC' (every assignment) or "
        "'rmsnorm=2026-11-21 09:00 UTC'; repeatable. A submission whose timestamp "
        "(submitted/.../timestamp.txt, or the LMS file name) is later is marked late",
        flag="--duedate", metavar="[ASSIGNMENT=]DATE", cli="append", default_factory=dict)
    use_sandbox: bool | None = option(
        None, "run student code without the bubblewrap sandbox (not recommended; default: sandboxed when "
        "bwrap works here)", flag="--no-sandbox", cli="negate")
    cell_timeout: int | None = option(
        None, "seconds a cell may run before it is interrupted (default: Execute.timeout in "
        "nbgrader_config.py, 60)", metavar="S")
    course_root: Path = option(help="the nbgrader course root (default: this repository)",
                               default_factory=_repo_root)
    lms_gradebook: Path | None = option(
        None, "the LMS's gradebook export (Canvas) or grading worksheet (Moodle): written back as "
        "lms-import-<lms>.csv with this course's points filled in, to import into the LMS", metavar="CSV")
    groups: bool = option(
        True, "the groups of wrong answers in the class report (default: on; read from the outputs the scoring "
        "recorded, no code runs again); --no-groups leaves them out", cli="both")
    demo_students: int | None = option(
        None, "with no --submissions: grade only the first N demo students (default: all 30)", metavar="N")
    scheduler: str | None = option(
        None, "run the autograde tasks on the Dask cluster of this scheduler, e.g. tcp://HOST:8786, whose "
        "workers were started with `dask worker ADDRESS` (default: $DASK_SCHEDULER_ADDRESS, else an "
        "embedded local Dask cluster of --jobs workers)", metavar="ADDRESS")
    engine: str = option(
        DEFAULT_ENGINE, "without --scheduler, where the autograde tasks (one per submission) run: an embedded "
        "local Dask cluster (dask, the default) or this machine's process pool of --jobs workers (processes)",
        choices=ENGINES)
    db_url: str | None = option(
        None, "the gradebook's database URL, e.g. postgresql://USER@HOST:5432/DBNAME (nbgrader's "
        "CourseDirectory.db_url; the database must exist); default: gradebook.db here (SQLite)",
        flag="--db", metavar="URL")
    progress: bool = option(False, "show a progress bar with an ETA on stderr (the command line: always)",
                            cli="api")
    command: str | None = option(None, "how this run was started, for the lock and the run log (default: "
                                 "this process's command line)", cli="api")

    def __post_init__(self):
        if self.jobs is not None and self.jobs < 1:
            raise ValueError("--jobs must be at least 1")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be 'dask' or 'processes', not {self.engine!r}")
        for name in ("demo_students", "cell_timeout"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        # each due date readable (nbgrader's own parser), before anything is touched
        parse_duedates([f"{k}={v}" for k, v in self.duedates.items()])
        for name in ("submissions", "course_root", "lms_gradebook"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value))

    def replace(self, **changes) -> GradeOptions:
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)


def _flag(f: dataclasses.Field) -> str:
    return f.metadata["flag"] or "--" + f.name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per :class:`GradeOptions` field (none for the API-only ones)."""
    for f in fields(GradeOptions):
        m = f.metadata
        kind, flag = m["cli"], _flag(f)
        if kind == "api":
            continue
        common = {"dest": f.name, "help": m["help"]}
        if kind == "switch":
            parser.add_argument(flag, action="store_true", default=None, **common)
        elif kind == "negate":
            parser.add_argument(flag, action="store_const", const=False, default=None, **common)
        elif kind == "both":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, **common)
        elif kind == "append":
            parser.add_argument(flag, action="append", default=None, metavar=m["metavar"], **common)
        else:
            kind_of = {Path: Path, int: int}.get(_value_type(f), str)
            parser.add_argument(flag, type=kind_of, default=None, metavar=m["metavar"], choices=m["choices"],
                                **common)


def _value_type(f: dataclasses.Field):
    text = str(f.type)
    return Path if "Path" in text else int if "int" in text else str


def from_args(ns: argparse.Namespace, **api) -> GradeOptions:
    """The options a parsed command line asked for (flags not given keep their defaults), with
    ``api`` (the API-only fields, e.g. ``progress``) added.

    Raises:
        ValueError: a value :class:`GradeOptions` refuses (the CLI shows it as a usage error).
    """
    given = {}
    for f in fields(GradeOptions):
        if f.metadata["cli"] == "api":
            continue
        value = getattr(ns, f.name, None)
        if value is None:
            continue
        if f.metadata["cli"] == "append":
            try:
                value = parse_duedates(value)
            except ValueError as e:
                raise ValueError(f"{_flag(f)}: {e}") from None
        given[f.name] = value
    return GradeOptions(**given, **api)


def signature_of(fn):
    """``fn``'s signature with :class:`GradeOptions`' fields as keyword-only parameters (for
    ``help(grade_class)`` and editors), between ``fn``'s own positional-only and keyword-only ones."""
    params = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                                default=(f.default if f.default is not dataclasses.MISSING else None),
                                annotation=f.type)
              for f in fields(GradeOptions)]
    own = inspect.signature(fn).parameters.values()
    first = [p for p in own if p.kind is inspect.Parameter.POSITIONAL_ONLY]
    last = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
    return inspect.Signature(first + params + last)


def args_doc() -> str:
    """The ``Args:`` lines of every option, for ``grade_class``'s docstring (written once, here)."""
    return "\n".join(f"        {f.name}: {f.metadata['help']}." for f in fields(GradeOptions))


__all__ = ["DEFAULT_ENGINE", "ENGINES", "GradeOptions", "add_arguments", "args_doc", "from_args", "option",
           "parse_duedates", "signature_of"]
