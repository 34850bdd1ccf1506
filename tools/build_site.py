"""Build the course website: ``make site`` -> ``build/site/`` (open ``build/site/index.html``).

    .venv/bin/python tools/build_site.py [--out build/site] [--repo OWNER/NAME] [--hub-url URL]

1. npm: MathJax and axe-core at the versions ``site/package-lock.json`` pins, installed with
   ``npm ci`` into ``build/site-node/`` (once; again when the lock file changes).
2. Stage the pages in ``build/site-src/``: ``site/`` (``conf.py``, ``index.md``, the CSS), the
   lesson notebooks ``notebooks/NN_*.ipynb`` and the assignments' student versions
   ``release/<a>/<a>.ipynb`` (never ``source/``; each cites its sources in its last cell, written in
   its own folder); MathJax into ``_static/``.
3. Sphinx (MyST-NB and the Sphinx Book Theme, ``site/conf.py``): the lessons are executed now,
   every cell, so each page shows what the lesson computes today; the launch buttons open
   ``--repo`` (the student repository, ``make student-repo``) on Binder and, with ``--hub-url``,
   on that JupyterHub through nbgitpuller.
4. Refuse the result if any page shows a solution, a hidden test, a hand-back call or a standard
   answer (:func:`leaks`): nbgrader's markers, and every secret line of ``source/`` as
   ``tools/student_repo.py`` finds them.

Prints the build time and the site's size. ``tests/test_site.py`` builds it the same way once per
test session and reads it in Chromium.
"""
from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SITE = REPO / "site"
DEFAULT_REPO = "YOUR-ORG/lesson16-normalization"  # as README's Binder badge; make student-repo BINDER_REPO=

#: Text that must never appear on a page: nbgrader's solution and hidden-test markers, the
#: hand-back calls of hidden tests, the standard answers and mark schemes of ``source/``.
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "hand_back(",
           "Standard answer · compare", "Mark scheme")

class BuildError(RuntimeError):
    """The site could not be built, or would show what students must not see."""


def _run(cmd: list[str], cwd: Path, what: str) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{what} failed ({' '.join(cmd)}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")


def install_node(node: Path) -> Path:
    """``npm ci`` of ``site/package-lock.json`` into ``node`` unless it is there already;
    returns ``node/node_modules``."""
    node.mkdir(parents=True, exist_ok=True)
    lock = (SITE / "package-lock.json").read_text()
    modules = node / "node_modules"
    if (node / "package-lock.json").is_file() and (node / "package-lock.json").read_text() == lock \
            and (modules / ".package-lock.json").is_file():
        return modules
    for name in ("package.json", "package-lock.json"):
        shutil.copy2(SITE / name, node / name)
    if not shutil.which("npm"):
        raise BuildError("npm not found: the site needs Node.js and npm (MathJax and axe-core from npm)")
    print("npm ci (MathJax, axe-core) ...", flush=True)
    _run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], node, "npm ci")
    return modules


def stage(work: Path, modules: Path, settings: dict) -> None:
    """The pages Sphinx builds, in ``work`` (emptied first)."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(SITE, work, ignore=shutil.ignore_patterns("package*.json", "node_modules", "__pycache__"))
    (work / "site_settings.json").write_text(json.dumps(settings, indent=1))
    (work / "notebooks").mkdir()
    for nb in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        shutil.copy2(nb, work / "notebooks" / nb.name)
    for path in sorted((REPO / "release").glob("*/*.ipynb")):
        dest = work / "release" / path.relative_to(REPO / "release")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)  # each cites its sources in its own last cell
    mathjax = work / "_static" / "mathjax"
    mathjax.mkdir(parents=True)
    shutil.copy2(modules / "mathjax" / "es5" / "tex-svg.js", mathjax / "tex-svg.js")


class _Text(HTMLParser):
    """A page's text, line by line as a reader sees it (scripts and styles left out)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        elif tag in ("p", "div", "br", "li", "tr", "pre", "h1", "h2", "h3", "h4"):
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip = max(0, self._skip - 1)

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def page_text(path: Path) -> str:
    """The text of one HTML page (tags removed, entities decoded)."""
    p = _Text()
    p.feed(path.read_text(encoding="utf-8"))
    return html.unescape("".join(p.parts))


def leaks(site: Path) -> tuple[list[str], list[str]]:
    """What a page of ``site`` shows that only the instructor may see, as ``tools/student_repo.py``
    judges an exported student tree: ``(refused, notes)``, each ``["page: what"]``.

    Refused: a marker of :data:`MARKERS`, or a line of a hidden test or mark scheme of ``source/``
    (:func:`secret_lines`). Notes: a line of a solution that a lesson also shows (the seed's code,
    MiniMind's module), which the student repository holds as well, for the instructor to judge.
    """
    sys.path.insert(0, str(REPO / "tools"))
    from student_repo import _normalize, secret_lines

    secrets = secret_lines(REPO / "source")
    refused, notes = [], []
    for page in sorted(site.rglob("*.html")):
        text = page_text(page)
        rel = page.relative_to(site).as_posix()
        refused += [f"{rel}: {m!r}" for m in MARKERS if m in text]
        for k in sorted({_normalize(line) for line in text.splitlines()} & secrets.keys()):
            where, kind = secrets[k]
            (refused if kind == "hidden" else notes).append(f"{rel}: {kind} line of {where}: {k!r}")
    return refused, notes


def size_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def build(out: Path, *, repo: str = DEFAULT_REPO, hub_url: str = "", branch: str = "main",
          work: Path | None = None, node: Path | None = None) -> dict:
    """Build the site into ``out`` (replaced); returns ``{"seconds", "mib", "pages"}``.

    Raises:
        BuildError: npm or Sphinx failed (a lesson cell raised, say), or a page leaks (:func:`leaks`).
    """
    t0 = time.perf_counter()
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
        raise BuildError(f"--repo must be OWNER/NAME (the student repository on GitHub), got {repo!r}")
    if hub_url and not re.fullmatch(r"https?://[^\s?#]+", hub_url):
        raise BuildError(f"--hub-url must be the hub's http(s) address, got {hub_url!r}")
    work = work or out.parent / "site-src"
    modules = install_node(node or out.parent / "site-node")
    stage(work, modules, {"repo": repo, "hub_url": hub_url.rstrip("/"), "branch": branch})
    if out.exists():
        shutil.rmtree(out)
    print(f"sphinx-build: executing the lessons and writing {out} ...", flush=True)
    _run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-d", str(work / "_doctrees"), str(work), str(out)],
         REPO, "sphinx-build")
    shutil.rmtree(out / ".doctrees", ignore_errors=True)
    refused, notes = leaks(out)
    if refused:
        shutil.rmtree(out)
        raise BuildError("the site would show what students must not see (removed):\n  " + "\n  ".join(refused[:20]))
    for note in notes:
        print(f"note: a solution line a lesson shows as well (the student repository has it too): {note}")
    pages = len([p for p in out.rglob("*.html") if "_static" not in p.relative_to(out).parts])
    return {"seconds": time.perf_counter() - t0, "mib": size_mib(out), "pages": pages, "notes": notes}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "build" / "site")
    ap.add_argument("--repo", default=DEFAULT_REPO, help="the student repository the launch buttons open, OWNER/NAME")
    ap.add_argument("--hub-url", default="", help="the course's JupyterHub (launch button through nbgitpuller)")
    ap.add_argument("--branch", default="main")
    args = ap.parse_args(argv)
    try:
        got = build(args.out.resolve(), repo=args.repo, hub_url=args.hub_url, branch=args.branch)
    except BuildError as e:
        print(f"make site: {e}", file=sys.stderr)
        return 1
    print(f"site: {args.out} ({got['pages']} pages, {got['mib']:.1f} MiB) in {got['seconds']:.0f} s; "
          f"open {args.out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
