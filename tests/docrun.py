"""The docs' commands, run as written: every command block of :data:`DOCS`.

A doc's command block is a fenced ```` ```bash ```` block; each of its lines (a line ending in
``\\`` joined with the next) is one command. :data:`WHERE` says, for each section of each doc
that has a command block, which user runs it, in which folder, and which test does (or why
nothing can run it here: :class:`Where`'s ``skip``). A test runs a section with
:func:`run_section`: every command the doc has there now, in order, as ``bash -c '<the line>'``:

- as that user (``runuser`` for a user other than root) with a login shell's environment and
  nothing else: ``HOME``, ``USER``, ``LOGNAME``, ``SHELL``, ``LANG`` and Debian's default ``PATH``
  for that user (:func:`login_env`), not the test process's;
- in that user's folder for the section (the home, or the course folder);
- with each placeholder of :data:`PLACEHOLDERS` (``<instructor>``, ``/opt/normref-env``, ...)
  replaced by the value the test has for it (a user it made, a folder of its own): one table,
  so a doc's line and what the test runs differ only there. A test adds a variable only where
  the doc's command cannot be run twice on one machine otherwise (said where it does: a hub's
  internal ports) or to read a result back (``NORMREF_RUN_PICKLE``).

``tests/test_docs.py`` checks that :data:`WHERE` names every section with commands and no other;
a test that runs a section runs what the doc says now, so a doc and its test cannot drift.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/HUB.md", "docs/SCALE.md", "docs/INSTALL.md")

#: Each placeholder the docs write, and the name of the value a test fills it with.
PLACEHOLDERS = {
    "<course repository URL>": "course_repo",
    "<student repository URL>": "lessons_repo",
    "<instructor>": "instructor",
    "<students>": "students",
    "hub.example.edu:443": "hub_address",
    "/etc/ssl/hub/cert.pem": "cert",
    "/etc/ssl/hub/key.pem": "key",
    "/opt/normref-env": "hub_env",
    "/srv/nbgrader/exchange": "exchange",
    "/srv/jupyterhub": "hub_dir",
    "path/to/submitted": "submitted",
    "canvas-download.zip": "canvas_zip",
    "canvas-export.csv": "canvas_export",
    "HOST:8786": "scheduler_address",
    "--port 8786": "scheduler_port",
    "USER@HOST:5432/DBNAME": "database",
}

#: Debian's default PATH of a login shell, for root and for everyone else (/etc/login.defs).
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
USER_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class Where:
    """Who runs a doc section's commands, where, and which test; or why none can here."""

    user: str = "instructor"  # "root", "instructor", "student"
    folder: str = "course"    # "home" (the user's), "course" (the instructor's course folder)
    test: str = ""            # the test file that runs it
    skip: str | dict = ""     # why it cannot run here (per command: {its first words: why}); no test runs it

    def why_not(self, cmd: "Command") -> str:
        """Why ``cmd`` cannot run here ("" when a test runs it)."""
        if isinstance(self.skip, dict):
            return next(why for start, why in self.skip.items() if cmd.text.startswith(start))
        return self.skip


#: Every doc section that holds a command block: ``{(doc, section heading): Where}``.
WHERE = {
    ("README.md", "Set up (Python 3.11 and make)"): Where(skip={
        "make lab": "it serves until stopped: tests/test_browser.py starts that server with make lab's own "
                    "command (read from `make -n lab`) and drives it in Chromium",
        "make test": "it is this test suite itself"}),
    ("README.md", "Install: which torch you get"): Where(
        skip="this block installs torch's CPU build from download.pytorch.org, which this machine cannot reach "
             "(PyPI, Debian and npm only)"),
    ("README.md", "For instructors"): Where(user="instructor", folder="course", test="tests/test_docs_grade.py"),
    ("docs/HUB.md", "1. Packages (as root)"): Where("root", "home", "tests/test_hub.py"),
    ("docs/HUB.md", "2. The course folder (as the instructor)"): Where("instructor", "home", "tests/test_hub.py"),
    ("docs/HUB.md", "3. The shared student environment (as root)"): Where("root", "home", "tests/test_hub.py"),
    ("docs/HUB.md", "4. The lessons for nbgitpuller (as the instructor)"): Where("instructor", "home",
                                                                                "tests/test_hub.py"),
    ("docs/HUB.md", "5. Start the hub (as root)"): Where("root", "home", "tests/test_hub.py"),
    ("docs/HUB.md", "6. The day's commands (as the instructor, in the course folder)"): Where(
        "instructor", "course", "tests/test_hub.py"),
    ("docs/SCALE.md", "Dask for the work, PostgreSQL for the gradebook"): Where(
        "instructor", "course", "tests/test_docs_scale.py"),
    ("docs/SCALE.md", "Workers elsewhere"): Where("instructor", "course", "tests/test_docs_scale.py"),
    ("docs/INSTALL.md", "Which torch"): Where(
        skip="this block installs torch's CPU build from download.pytorch.org, which this machine cannot reach "
             "(PyPI, Debian and npm only)"),
}


@dataclass(frozen=True)
class Command:
    """One documented command: its doc, the section heading above it, its line, its text."""

    doc: str
    section: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def commands(doc: str | None = None, section: str | None = None) -> list[Command]:
    """The commands of :data:`DOCS` (or of one doc, one section), in the order written."""
    out = []
    for name in DOCS if doc is None else (doc,):
        heading, fence, pending, start = "", None, "", 0
        for n, line in enumerate((REPO / name).read_text(encoding="utf-8").splitlines(), 1):
            if fence is None:
                m = re.match(r"^\s*```(\w*)", line)
                if m:
                    fence = m[1]
                    continue
                h = re.match(r"^#+\s+(.*)$", line) or re.match(r"^\*\*([^*]+)\*\*", line)
                if h:
                    heading = h[1].strip().rstrip(".")
                continue
            if re.match(r"^\s*```\s*$", line):
                fence = None
                continue
            if fence != "bash":
                continue
            text = line.strip()
            if pending:
                text, pending = pending + " " + text, ""
            elif text:
                start = n
            if text.endswith("\\"):
                pending = text[:-1].rstrip()
                continue
            if text and not text.startswith("#"):
                out.append(Command(name, heading, start, text))
    return [c for c in out if section is None or c.section == section]


def fill(text: str, values: dict[str, str]) -> str:
    """``text`` with each placeholder of :data:`PLACEHOLDERS` replaced by its value.

    Raises:
        KeyError: ``text`` holds a placeholder the test has no value for."""
    for literal, name in PLACEHOLDERS.items():
        if literal in text:
            text = text.replace(literal, values[name])
    return text


def login_env(user: str) -> dict[str, str]:
    """What a login shell of ``user`` has: home, names, shell, locale and Debian's default PATH."""
    pw = pwd.getpwnam(user)
    return {"HOME": pw.pw_dir, "USER": user, "LOGNAME": user, "SHELL": "/bin/bash", "LANG": "C.UTF-8",
            "PATH": ROOT_PATH if pw.pw_uid == 0 else USER_PATH}


def argv(user: str, text: str, cwd: Path, extra_env: dict[str, str] | None = None) -> list[str]:
    """``bash -c text`` as ``user`` in ``cwd`` with :func:`login_env` (and ``extra_env``)."""
    env = [f"{k}={v}" for k, v in {**login_env(user), **(extra_env or {})}.items()]
    cmd = ["env", "-i", "-C", str(cwd), *env, "bash", "-c", text]
    return cmd if user == "root" else ["runuser", "-u", user, "--", *cmd]


#: Every documented command this process ran: ``[(Command, the text run, exit status, seconds)]``.
RAN: list[tuple[Command, str, int, float]] = []


def run(cmd: Command, user: str, cwd: Path, values: dict[str, str], *, extra_env: dict[str, str] | None = None,
        timeout: float = 900, check: bool = True, typed: str | None = None) -> subprocess.CompletedProcess:
    """Run one documented command (:func:`fill`, :func:`argv`); a non-zero exit fails the test
    with the doc's line and its output, unless ``check`` is false. ``typed``: what the user types
    at the terminal (its standard input is then a terminal, as a question needs); else none."""
    import pytest

    text = fill(cmd.text, values)
    t0 = time.monotonic()
    master = slave = None
    if typed is not None:
        master, slave = os.openpty()
        os.write(master, typed.encode())
    try:
        out = subprocess.run(argv(user, text, cwd, extra_env), capture_output=True, text=True, timeout=timeout,
                             stdin=slave if slave is not None else subprocess.DEVNULL)
    finally:
        for fd in (master, slave):
            if fd is not None:
                os.close(fd)
    RAN.append((cmd, text, out.returncode, time.monotonic() - t0))
    if check and out.returncode != 0:
        pytest.fail(f"{cmd} (run as {user} in {cwd} as `{text}`) exited {out.returncode}:\n"
                    f"{out.stdout[-4000:]}\n{out.stderr[-4000:]}", pytrace=False)
    return out


def start(cmd: Command, user: str, cwd: Path, values: dict[str, str], log: Path, *, append: str = "",
          extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    """A documented command that runs until stopped (a hub, a scheduler), started in its own
    session with its output in ``log``; ``append``: arguments the test adds (said by the caller)."""
    text = fill(cmd.text, values) + (f" {append}" if append else "")
    RAN.append((cmd, text, 0, 0.0))
    with open(log, "w") as out:
        return subprocess.Popen(argv(user, text, cwd, extra_env), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def section_commands(doc: str, section: str) -> list[Command]:
    """The commands of one section, which :data:`WHERE` must name (else the test is out of date)."""
    assert (doc, section) in WHERE, f"tests/docrun.py WHERE has no entry for {doc}, {section!r}"
    found = commands(doc, section)
    assert found, f"{doc} has no command block under {section!r} any more: update tests/docrun.py WHERE"
    return found


# -- what a run as another user needs ---------------------------------------------------------------

def _closed_folders(path: Path) -> list[Path]:
    """The folders above ``path`` (its real path's and its own) that other users cannot enter."""
    path = Path(os.path.abspath(path))
    folders = {*Path(os.path.realpath(path)).parents, *path.parents}
    return sorted(p for p in folders if not os.stat(p).st_mode & 0o001)


@contextlib.contextmanager
def reachable(user: str, paths: list[Path]):
    """Let ``user`` enter every folder above ``paths`` that is closed to other users (an ACL entry
    ``u:<user>:x`` each, removed afterwards): this checkout's ``.venv`` may be made from a Python
    under ``/root`` (pyenv), or the checkout may be in a private folder."""
    from conftest import ensure_debian_package

    closed = sorted({p for path in paths for p in _closed_folders(path)})
    if closed:
        ensure_debian_package("acl", "/usr/bin/setfacl")
    done = []
    try:
        for p in closed:
            subprocess.run(["setfacl", "-m", f"u:{user}:x", str(p)], check=True, capture_output=True)
            done.append(p)
        yield closed
    finally:
        for p in done:
            subprocess.run(["setfacl", "-x", f"u:{user}", str(p)], capture_output=True)


def course_repository(dest: Path) -> Path:
    """A bare git repository ``dest`` of this working tree's files (tracked and untracked, not
    ignored: what `git clone` of the course would give once committed), one commit on ``main``."""
    tree = Path(tempfile.mkdtemp(prefix="normref-course-tree-"))
    try:
        files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                               capture_output=True, check=True).stdout.decode().split("\0")
        for rel in filter(None, files):
            if (REPO / rel).is_file():
                (tree / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / rel, tree / rel)
        env = {**os.environ, "GIT_AUTHOR_NAME": "course", "GIT_AUTHOR_EMAIL": "course@localhost",
               "GIT_COMMITTER_NAME": "course", "GIT_COMMITTER_EMAIL": "course@localhost"}
        for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "course"]):
            subprocess.run(cmd, cwd=tree, env=env, check=True, capture_output=True)
        subprocess.run(["git", "clone", "-q", "--bare", str(tree), str(dest)], check=True, capture_output=True)
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    return dest


def link_venv(course: Path) -> None:
    """The course folder's ``.venv``: this checkout's, linked (torch's CUDA build from PyPI is
    5.5 GB: a clone's own ``make install`` is not run here), and the files ``make install``
    depends on dated before its stamp, so ``make install`` there finds it installed. Owned by
    the course folder's owner, as the clone is."""
    venv = REPO / ".venv"
    link = course / ".venv"
    link.symlink_to(venv)
    os.lchown(link, course.stat().st_uid, course.stat().st_gid)
    stamp = (venv / ".installed").stat().st_mtime
    for p in [course / "pyproject.toml", *(course / "tools" / "grading-kernels").glob("*")]:
        if p.is_file():
            os.utime(p, (stamp - 60, stamp - 60))


def processes_of(user: str) -> list[str]:
    """``pid command`` of every process ``user`` runs now (zombies left out)."""
    uid = pwd.getpwnam(user).pw_uid
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if p.stat().st_uid != uid:
                continue
            state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        if state != "Z":
            out.append(f"{p.name} {cmdline[:160]}")
    return out
