"""Export the student-facing tree of the course: lessons, assignments, normref, environment; no solutions.

For instructors who publish a separate student repository (and point its Binder badge at it)::

    make student-repo                                   # -> build/student-repo/
    make student-repo STUDENT_REPO=../lesson16-students BINDER_REPO=my-org/lesson16-students

or ``python tools/student_repo.py DEST [--binder-repo OWNER/NAME] [--replace]``.

What goes in (:data:`STUDENT_PATHS`): the README, ``environment.yml``, ``postBuild``,
``start`` and ``jupyter-student/`` (Binder), ``pyproject.toml`` and ``Makefile`` (``make lab``),
``normref/`` without ``normref/grading/`` (the instructor's grader; its demo class holds correct
answers), ``notebooks/``, ``release/`` and the README's ``docs/screenshots/``. What stays out:
``source/`` (solutions and hidden tests), ``tests/``, ``tools/``, ``nbgrader_config.py`` and
every grading folder. Only files git tracks or would track (``git ls-files --cached --others
--exclude-standard``) are copied, so build output and gradebooks never travel.

After copying, every line of every solution region, hidden-test region and mark scheme in
``source/*/*.ipynb`` is searched for in the exported files (:func:`find_leaks`); the export is
refused if one is found outside ``normref/`` (whose reference implementations the checkers need:
those lines are listed as a note).
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
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
    "docs/screenshots",
)
#: Inside STUDENT_PATHS but instructor-only.
EXCLUDED = ("normref/grading",)
#: Where a solution line may also appear: normref's reference implementations, which the
#: checkers compare a student's function against on the student's own machine (so a student who
#: reads normref's source can see them; a self-checking course cannot hide its reference).
REFERENCE_PATHS = ("normref/",)

#: The Binder badge's repository, as ``mybinder.org/v2/gh/<OWNER>/<NAME>/<REF>``.
BINDER_URL = re.compile(r"(https://mybinder\.org/v2/gh/)([^/\s)]+/[^/\s)]+)(/[^?\s)]+)")

_REGIONS = (
    ("### BEGIN SOLUTION", "### END SOLUTION"),
    ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"),
    ("=== BEGIN MARK SCHEME ===", "=== END MARK SCHEME ==="),
)
#: Secret lines shorter than this (``return y``, ``pass``) are too common to call a leak.
MIN_SECRET_CHARS = 20


class ExportError(RuntimeError):
    """The export was refused: an unsafe destination, or a solution line would leak."""


def student_files(*, repo: Path = REPO) -> list[Path]:
    """The student tree's files, relative to ``repo``, sorted.

    Args:
        repo: the course repository (a git work tree).

    Returns:
        Paths under :data:`STUDENT_PATHS`, minus :data:`EXCLUDED`, that git tracks or would
        track (ignored files such as ``__pycache__`` and ``gradebook.db`` are left out).

    Raises:
        ExportError: ``repo`` is not a git work tree.
    """
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--",
                              *STUDENT_PATHS], cwd=repo, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise ExportError(f"{repo} is not a git work tree (git ls-files failed: {e})") from e
    files = set()
    for name in filter(None, out.split("\0")):
        if any(name == ex or name.startswith(ex + "/") for ex in EXCLUDED):
            continue
        if (repo / name).is_file():  # git still lists files deleted in the work tree
            files.add(Path(name))
    return sorted(files)


def _normalize(line: str) -> str:
    """A code line without its inline comment and outer whitespace."""
    return line.split("  #", 1)[0].strip()


def secret_lines(source: Path) -> dict[str, str]:
    """Lines that only the instructor may see, from every ``source/*/*.ipynb``.

    Args:
        source: the ``source/`` folder of an nbgrader course.

    Returns:
        ``{normalized line: "source/<a>/<nb>.ipynb cell <grade_id>"}`` for each line of a
        solution region, hidden-test region or mark scheme, and each line of a markdown
        solution cell, that has at least :data:`MIN_SECRET_CHARS` characters once stripped of
        its inline comment and does not also appear, so normalized, in the notebook's
        visible (non-secret) lines.
    """
    secrets: dict[str, str] = {}
    for path in sorted(source.glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        hidden, visible = {}, set()
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            where = f"{path.relative_to(source.parent)} cell {meta.get('grade_id', '?')}"
            whole = cell.cell_type == "markdown" and meta.get("solution", False)
            inside = None
            for line in cell.source.splitlines():
                s = line.strip()
                starts = [end for begin, end in _REGIONS if s == begin]
                if starts:
                    inside = starts[0]
                    continue
                if inside and s == inside:
                    inside = None
                    continue
                key = _normalize(line)
                if whole or inside:
                    hidden.setdefault(key, where)
                else:
                    visible.add(key)
        for key, where in hidden.items():
            if len(key) >= MIN_SECRET_CHARS and not key.startswith("#") and key not in visible:
                secrets.setdefault(key, where)
    return secrets


def _text_lines(path: Path) -> list[str]:
    if path.suffix == ".ipynb":
        nb = nbformat.read(path, as_version=4)
        return [line for cell in nb.cells for line in cell.source.splitlines()]
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (UnicodeDecodeError, OSError):
        return []  # binary (screenshots): no source code to leak


def find_leaks(tree: Path, *, source: Path) -> list[str]:
    """Where a secret line of ``source`` appears in a file under ``tree``.

    Args:
        tree: a folder to search (an exported student tree).
        source: the instructor's ``source/`` folder (see :func:`secret_lines`).

    Returns:
        One message per hit, ``"<file>:<line>: <the line> (from <notebook> cell <grade_id>)"``;
        empty when nothing leaks.
    """
    secrets = secret_lines(source)
    leaks = []
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and ".git" not in p.relative_to(tree).parts):
        for i, line in enumerate(_text_lines(path), 1):
            key = _normalize(line)
            if key in secrets:
                leaks.append(f"{path.relative_to(tree)}:{i}: {key}  (from {secrets[key]})")
    return leaks


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
                        replace: bool = False) -> list[Path]:
    """Copy the student tree of ``repo`` into ``dest`` and check that no solution leaked.

    Args:
        dest: the folder to create (or, with ``replace``, a previous export, e.g. a clone of
            the published student repository: its ``.git`` is kept).
        repo: the course repository.
        binder_repo: ``"OWNER/NAME"`` of the student repository on GitHub; the README's Binder
            badge is pointed at it. None keeps the badge as it is.
        replace: allow a non-empty ``dest`` that holds only what an export writes (plus
            ``.git``), and empty it first.

    Returns:
        The exported files, relative to ``dest``.

    Raises:
        ExportError: ``dest`` is inside ``repo``'s student paths or is a non-empty folder
            (without ``replace``, or with files an export does not write), ``binder_repo`` is
            not ``OWNER/NAME``, or a solution line was found in the export outside
            :data:`REFERENCE_PATHS` (the partial export is removed).
    """
    repo, dest = Path(repo).resolve(), Path(dest).resolve()
    if binder_repo is not None and not re.fullmatch(r"[\w.-]+/[\w.-]+", binder_repo):
        raise ExportError(f"--binder-repo must be OWNER/NAME as on GitHub, got {binder_repo!r}")
    if any(dest == repo / p or (repo / p) in dest.parents for p in STUDENT_PATHS) or dest == repo:
        raise ExportError(f"{dest} is inside the course's own student tree; export somewhere else "
                          "(the default is build/student-repo)")
    files = student_files(repo=repo)
    top = {f.parts[0] for f in files}
    if dest.exists() and any(dest.iterdir()):
        if not replace:
            raise ExportError(f"{dest} is not empty: pass --replace to overwrite a previous export")
        _clear_previous_export(dest, top)
    dest.mkdir(parents=True, exist_ok=True)
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / f, dest / f)  # keeps the executable bit of start / postBuild
    if binder_repo is not None and (dest / "README.md").exists():
        readme = dest / "README.md"
        readme.write_text(BINDER_URL.sub(lambda m: m[1] + binder_repo + m[3], readme.read_text()))
    hits = find_leaks(dest, source=repo / "source")
    leaks = [h for h in hits if not h.startswith(REFERENCE_PATHS)]
    if leaks:
        _clear_previous_export(dest, top)
        raise ExportError("solution lines would reach students; nothing exported:\n  " + "\n  ".join(leaks))
    return files


def main(argv: list[str] | None = None) -> int:
    """Command line of :func:`export_student_repo` (``make student-repo``)."""
    p = argparse.ArgumentParser(prog="python tools/student_repo.py", description=__doc__.splitlines()[0])
    p.add_argument("dest", type=Path, help="folder to create, e.g. build/student-repo")
    p.add_argument("--binder-repo", metavar="OWNER/NAME",
                   help="GitHub repository the student tree will be published as (the Binder badge)")
    p.add_argument("--replace", action="store_true",
                   help="overwrite a previous export in DEST (its .git is kept)")
    args = p.parse_args(argv)
    try:
        files = export_student_repo(args.dest, binder_repo=args.binder_repo, replace=args.replace)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"exported {len(files)} files to {args.dest} (no source/, no solutions: checked)")
    same = [h for h in find_leaks(args.dest, source=REPO / "source") if h.startswith(REFERENCE_PATHS)]
    if same:
        print(f"note: {len(same)} solution lines are also lines of normref's reference implementations, "
              "which students can read:\n  " + "\n  ".join(same))
    return 0


if __name__ == "__main__":
    sys.exit(main())
