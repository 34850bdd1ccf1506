"""Export the student-facing tree of the course: lessons, assignments, normref, environment; no solutions.

For instructors who publish a separate student repository (and point its Binder badge at it)::

    make student-repo                                   # -> build/student-repo/
    make student-repo STUDENT_REPO=../lesson16-students BINDER_REPO=my-org/lesson16-students
    make student-repo HUB=1                             # for a JupyterHub's nbgitpuller: no release/

or ``python tools/student_repo.py DEST [--binder-repo OWNER/NAME] [--replace] [--hub]``.
``--hub`` leaves ``release/`` out: on a JupyterHub students fetch each assignment from nbgrader's
exchange (the Assignment List) and submit that copy; a ``release/`` beside the lessons invited
work there, after which Submit sent the empty fetched copy (docs/HUB.md).

What goes in (:data:`STUDENT_PATHS`): the README, ``environment.yml``, ``postBuild``,
``start`` and ``jupyter-student/`` (Binder), ``pyproject.toml`` and ``Makefile`` (``make lab``),
``normref/`` (the maths, lesson helpers and student-side checkers; the instructor's grader
and its demo class of correct answers live in ``grader/``, which is not on this list),
``notebooks/``, ``release/`` and ``docs/`` (the pages and screenshots the README links to;
what the README said before they moved there). What stays out:
``source/`` (solutions and hidden tests), ``tests/``, ``tools/``, ``nbgrader_config.py`` and
every grading folder. Only files git tracks or would track (``git ls-files --cached --others
--exclude-standard``) are copied, so build output and gradebooks never travel.

After copying, the exported files are searched for every line of every solution region,
hidden-test region and mark scheme in ``source/*/*.ipynb`` (:func:`find_leaks`). A hidden test or
mark-scheme line anywhere refuses the export. A solution line that the course shows elsewhere (a
lesson printing the seed's code, a ``normref`` reference implementation the self-checks compare
against) is listed as a note: an answer students can read, for the instructor to judge.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]

#: Top-level files and folders of the student tree (those that exist are exported).
STUDENT_PATHS = (
    "README.md",
    ".gitignore",
    "environment.yml",
    "postBuild",
    "start",
    "jupyter-student",
    "pyproject.toml",
    "Makefile",
    "normref",
    "notebooks",
    "release",
    "docs",
)

#: The Binder badge's repository, as ``mybinder.org/v2/gh/<OWNER>/<NAME>/<REF>``.
BINDER_URL = re.compile(r"(https://mybinder\.org/v2/gh/)([^/\s)]+/[^/\s)]+)(/[^?\s)]+)")

#: nbgrader's region markers, and what the lines between them are.
_REGIONS = (
    ("### BEGIN SOLUTION", "### END SOLUTION", "answer"),
    ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS", "hidden"),
    ("=== BEGIN MARK SCHEME ===", "=== END MARK SCHEME ===", "hidden"),
)
#: Secret lines shorter than this (``return y``, ``pass``) are too common to call a leak.
MIN_SECRET_CHARS = 20


class ExportError(RuntimeError):
    """The export was refused: an unsafe destination, or a hidden test would reach students."""


@dataclass(frozen=True)
class Leak:
    """A secret line of ``source/`` found in a file.

    Attributes:
        path: the file, relative to the searched tree.
        line_no: 1-based line (for a notebook: counted over its cells' sources).
        text: the line, normalized (no inline comment, no outer whitespace).
        origin: ``"source/<a>/<nb>.ipynb cell <grade_id>"``.
        kind: ``"hidden"`` (hidden test, mark scheme) or ``"answer"`` (a solution).
    """

    path: str
    line_no: int
    text: str
    origin: str
    kind: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line_no}: {self.text}  ({self.kind}, from {self.origin})"


@dataclass
class Export:
    """What :func:`export_student_repo` wrote: ``files`` (relative to ``dest``) and ``notes``,
    the solution lines students can read elsewhere in the course (see the module docstring)."""

    dest: Path
    files: list[Path]
    notes: list[Leak] = field(default_factory=list)


def student_files(*, repo: Path = REPO, hub: bool = False) -> list[Path]:
    """The student tree's files, relative to ``repo``, sorted.

    Args:
        repo: the course repository (a git work tree).
        hub: for a JupyterHub (nbgitpuller): without ``release/`` (assignments come from the exchange).

    Returns:
        Paths under :data:`STUDENT_PATHS` that git tracks or would
        track (ignored files such as ``__pycache__`` and ``gradebook.db`` are left out).

    Raises:
        ExportError: ``repo`` is not a git work tree.
    """
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--",
                              *[p for p in STUDENT_PATHS if not (hub and p == "release")]], cwd=repo, check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise ExportError(f"{repo} is not a git work tree (git ls-files failed: {e})") from e
    files = set()
    for name in filter(None, out.split("\0")):
        if (repo / name).is_file():  # git still lists files deleted in the work tree
            files.add(Path(name))
    return sorted(files)


def _normalize(line: str) -> str:
    """A code line without its inline comment and outer whitespace."""
    return line.split("  #", 1)[0].strip()


def secret_lines(source: Path) -> dict[str, tuple[str, str]]:
    """Lines that only the instructor may see, from every ``source/*/*.ipynb``.

    Args:
        source: the ``source/`` folder of an nbgrader course.

    Returns:
        ``{normalized line: ("source/<a>/<nb>.ipynb cell <grade_id>", kind)}``, kind
        ``"hidden"`` for each line of a hidden-test region or mark scheme and ``"answer"`` for
        each line of a solution region, of a markdown solution cell without regions (nbgrader
        replaces all of it) or of a standard answer (a cell tagged ``standard-answer``, shown
        only in the feedback); only lines that have at least
        :data:`MIN_SECRET_CHARS` characters once stripped of its inline comment and does not
        also appear, so normalized, among the notebook's visible lines or in its released
        version ``release/<a>/<nb>.ipynb``, which students get anyway.
    """
    secrets: dict[str, tuple[str, str]] = {}
    for path in sorted(source.glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        hidden, visible = {}, set()
        released = source.parent / "release" / path.relative_to(source)
        if released.exists():
            visible.update(_normalize(line) for line in _text_lines(released))
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            where = f"{path.relative_to(source.parent)} cell {meta.get('grade_id', '?')}"
            marked = any(begin in cell.source for begin, _, _ in _REGIONS)
            # a markdown solution cell without regions (nbgrader replaces all of it), or a
            # standard answer (nbgrader_config.STANDARD_ANSWER_TAG: feedback only, never released)
            whole = ((cell.cell_type == "markdown" and meta.get("solution", False) and not marked)
                     or "standard-answer" in cell.metadata.get("tags", []))
            inside = None  # (end marker, kind) while in a region
            for line in cell.source.splitlines():
                s = line.strip()
                starts = [(end, kind) for begin, end, kind in _REGIONS if s == begin]
                if starts:
                    inside = starts[0]
                    continue
                if inside and s == inside[0]:
                    inside = None
                    continue
                key = _normalize(line)
                if whole or inside:
                    hidden.setdefault(key, (where, inside[1] if inside else "answer"))
                else:
                    visible.add(key)
        for key, origin in hidden.items():
            if len(key) >= MIN_SECRET_CHARS and not key.startswith("#") and key not in visible:
                secrets.setdefault(key, origin)
    return secrets


def _text_lines(path: Path) -> list[str]:
    if path.suffix == ".ipynb":
        nb = nbformat.read(path, as_version=4)
        return [line for cell in nb.cells for line in cell.source.splitlines()]
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (UnicodeDecodeError, OSError):
        return []  # binary (screenshots): no source code to leak


def find_leaks(tree: Path, *, source: Path) -> list[Leak]:
    """Where a secret line of ``source`` appears in a file under ``tree``.

    Args:
        tree: a folder to search (an exported student tree).
        source: the instructor's ``source/`` folder (see :func:`secret_lines`).

    Returns:
        One :class:`Leak` per hit, sorted by file and line; empty when nothing leaks.
    """
    secrets = secret_lines(source)
    leaks = []
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and ".git" not in p.relative_to(tree).parts):
        for i, line in enumerate(_text_lines(path), 1):
            key = _normalize(line)
            if key in secrets:
                leaks.append(Leak(path.relative_to(tree).as_posix(), i, key, *secrets[key]))
    return leaks


def _refuse_written_release(release: Path, source: Path, why: str, todo: str) -> None:
    """Raise :class:`ExportError` when a ``release/<assignment>/`` under ``release`` holds work
    written in it (:func:`grader.ledger.release.written_work`: answer cells that are not nbgrader's
    stubs, cells or files added): ``why`` it matters, ``todo`` what to do."""
    if str(REPO) not in sys.path:  # run as a script (make student-repo): the course's grader package
        sys.path.insert(0, str(REPO))
    from grader.ledger.release import written_work

    found = [f"{release.name}/{a.name}/{line}" for a in sorted(release.iterdir()) if a.is_dir()
             for line in written_work(a, source / a.name)] if release.is_dir() else []
    if found:
        shown = "\n  ".join(found[:8]) + (f"\n  ... and {len(found) - 8} more" if len(found) > 8 else "")
        raise ExportError(f"{release} holds work written in it ({why}):\n  {shown}\nNothing was exported. {todo}")


def _clear_previous_export(dest: Path, names: set[str]) -> None:
    """Empty ``dest`` except ``.git``, if it holds only what an export writes."""
    extra = sorted(p.name for p in dest.iterdir() if p.name not in names | {".git"})
    if extra:
        raise ExportError(f"{dest} holds files an export does not write ({', '.join(extra[:5])}): "
                          "refusing to replace it; choose an empty or new folder")
    for p in dest.iterdir():
        if p.name != ".git":
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


def export_student_repo(dest: Path, *, repo: Path = REPO, binder_repo: str | None = None,
                        replace: bool = False, hub: bool = False) -> Export:
    """Copy the student tree of ``repo`` into ``dest`` and check that no solution leaked.

    Args:
        dest: the folder to create (or, with ``replace``, a previous export, e.g. a clone of
            the published student repository: its ``.git`` is kept).
        repo: the course repository.
        binder_repo: ``"OWNER/NAME"`` of the student repository on GitHub; the README's Binder
            badge is pointed at it. None keeps the badge as it is.
        replace: allow a non-empty ``dest`` that holds only what an export writes (plus
            ``.git``), and empty it first.
        hub: leave ``release/`` out (a JupyterHub's students fetch assignments from the exchange).

    Returns:
        An :class:`Export`: the files written and, as ``notes``, the solution lines that the
        exported course also shows (in a lesson, in ``normref``), for the instructor to judge.

    Raises:
        ExportError: ``dest`` is inside ``repo``'s student paths or is a non-empty folder
            (without ``replace``, or with files an export does not write), ``binder_repo`` is
            not ``OWNER/NAME``, a hidden-test or mark-scheme line of ``source/`` is in the
            export (which is then removed), or a ``release/<assignment>/`` of ``repo`` or of the
            export to replace holds work written in it (answers that are not nbgrader's stubs:
            :mod:`grader.ledger.release`); nothing is written then.
    """
    repo, dest = Path(repo).resolve(), Path(dest).resolve()
    if binder_repo is not None and not re.fullmatch(r"[\w.-]+/[\w.-]+", binder_repo):
        raise ExportError(f"--binder-repo must be OWNER/NAME as on GitHub, got {binder_repo!r}")
    if any(dest == repo / p or (repo / p) in dest.parents for p in STUDENT_PATHS) or dest == repo:
        raise ExportError(f"{dest} is inside the course's own student tree; export somewhere else "
                          "(the default is build/student-repo)")
    files = student_files(repo=repo, hub=hub)
    top = {f.parts[0] for f in files} | ({"release"} if hub else set())
    _refuse_written_release(repo / "release", repo / "source", "exporting it would hand that work to every student",
                            "Run `make release` (it refuses too, or keeps a copy with KEEP=1) so that release/ is "
                            "what nbgrader generates, then export again.")
    if dest.exists() and any(dest.iterdir()):
        if not replace:
            raise ExportError(f"{dest} is not empty: pass --replace to overwrite a previous export")
        _refuse_written_release(dest / "release", repo / "source", "replacing this export would delete it",
                                f"Move that work out of {dest}, then export again.")
        _clear_previous_export(dest, top)
    dest.mkdir(parents=True, exist_ok=True)
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / f, dest / f)  # keeps the executable bit of start / postBuild
    if binder_repo is not None and (dest / "README.md").exists():
        readme = dest / "README.md"
        readme.write_text(BINDER_URL.sub(lambda m: m[1] + binder_repo + m[3], readme.read_text()))
    hits = find_leaks(dest, source=repo / "source")
    hidden = [h for h in hits if h.kind == "hidden"]
    if hidden:
        _clear_previous_export(dest, top)
        raise ExportError("hidden tests would reach students; nothing exported:\n  " + "\n  ".join(map(str, hidden)))
    return Export(dest, files, [h for h in hits if h.kind == "answer"])


def main(argv: list[str] | None = None) -> int:
    """Command line of :func:`export_student_repo` (``make student-repo``)."""
    p = argparse.ArgumentParser(prog="python tools/student_repo.py", description=__doc__.splitlines()[0])
    p.add_argument("dest", type=Path, help="folder to create, e.g. build/student-repo")
    p.add_argument("--binder-repo", metavar="OWNER/NAME",
                   help="GitHub repository the student tree will be published as (the Binder badge)")
    p.add_argument("--replace", action="store_true",
                   help="overwrite a previous export in DEST (its .git is kept)")
    p.add_argument("--hub", action="store_true",
                   help="for a JupyterHub's nbgitpuller: no release/ (students fetch assignments from the exchange)")
    args = p.parse_args(argv)
    try:
        export = export_student_repo(args.dest, binder_repo=args.binder_repo, replace=args.replace, hub=args.hub)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"exported {len(export.files)} files to {args.dest}: no source/, no hidden tests (checked)"
          + ("; no release/ (for a JupyterHub: assignments come from the Assignment List)" if args.hub else ""))
    if export.notes:
        print(f"note: students can read {len(export.notes)} lines of the solutions in source/ elsewhere "
              "in the course (the seed's code in a lesson, normref's reference):\n  "
              + "\n  ".join(map(str, export.notes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
