"""The README and docs/ say what the code does: every relative link resolves, the stage list is
the code's ``STAGES`` wherever it is written, and ARCHITECTURE.md's "where to change what" table
names files that exist.

Pure text checks (no grading run): they read the Markdown files and ``grader.pipeline.STAGES``.
"""
import re
import urllib.parse
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [REPO / "README.md", *DOCS]
#: The README is the first screen of each reader; the reference material is in docs/.
README_MAX_LINES = 200

_LINK = re.compile(r"\]\(([^)\s]+)\)|\bsrc=\"([^\"]+)\"")


def _stage_names() -> list[str]:
    from grader.pipeline import STAGES

    return [name for name, _ in STAGES]


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation but ``-`` and ``_``
    dropped, spaces to ``-``."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m[1]) for m in re.finditer(r"^#+\s+(.*)$", text, flags=re.M)}


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [a or b for a, b in _LINK.findall(text)]


def test_slug_follows_githubs_rule():
    assert _slug("The grader's stages") == "the-graders-stages"
    assert _slug("Warm kernels, and what they share") == "warm-kernels-and-what-they-share"
    assert _slug("Grading at scale: Dask for the work") == "grading-at-scale-dask-for-the-work"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for link in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", link):  # https:, mailto: ...: not ours to check
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / urllib.parse.unquote(path)).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no {target.relative_to(REPO) if target.is_relative_to(REPO) else target}")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{link}: {target.name} has no heading #{anchor}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(REPO / urllib.parse.unquote(link.partition("#")[0])).resolve()
              for link in _links(REPO / "README.md") if link.startswith("docs/")}
    assert [p.name for p in DOCS if p.resolve() not in linked] == []


def test_readme_is_a_first_screen_per_reader():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move reference text to docs/"
    headings = [ln for ln in lines if ln.startswith("## ")]
    for reader in ("## For students", "## For lesson authors", "## For instructors"):
        assert reader in headings, reader


def test_stage_names_are_the_pipelines_own():
    names = _stage_names()
    assert names[0] == "check" and names[-1] == "report" and len(set(names)) == len(names)


def test_readme_lists_the_stages_of_the_code():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    m = re.search(r"\*\*A run's stages\*\*.*?\):\n(.*?)\. ", text, flags=re.S)
    assert m, "README: the line of stages after **A run's stages**"
    listed = [s.strip() for s in m[1].replace("\n", " ").split("→")]
    assert listed == _stage_names()


def test_architecture_lists_the_stages_of_the_code():
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## The grader's stages", 1)[1]
    numbered = re.findall(r"^(\d+)\. \*\*(\w+)\*\*", section, flags=re.M)
    assert [int(n) for n, _ in numbered] == list(range(1, len(numbered) + 1))
    assert [name for _, name in numbered] == _stage_names()


def test_pipeline_docstring_lists_the_stages_of_the_code():
    import grader.pipeline

    doc = grader.pipeline.__doc__
    line = re.search(r"``check``.*?``report``", doc, flags=re.S)
    assert line, "grader/pipeline.py's docstring: the stages, ``check`` -> ... -> ``report``"
    assert re.findall(r"``(\w+)``", line[0]) == _stage_names()


def _where_table() -> list[tuple[str, str]]:
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| to change")]
    return [tuple(c.strip() for c in row.strip("|").split(" | ", 1)) for row in rows]


_PATH = re.compile(r"`((?:grader|normref|notebooks|source|tools|tests|docs)/[^`\s]*|nbgrader_config\.py)`")


def test_architecture_table_names_one_file_per_change_and_every_path_exists():
    rows = _where_table()
    assert len(rows) >= 25, rows
    missing, not_one = [], []
    for change, edit in rows:
        paths = _PATH.findall(edit)
        if not paths or not edit.startswith(f"`{paths[0]}`"):
            not_one.append(change)  # the edit column starts with the one file to edit
        for rel in paths:
            pattern = re.sub(r"<[^>]+>", "*", rel)
            if not any(REPO.glob(pattern)) and not (REPO / rel).exists():
                missing.append(f"{change}: {rel}")
    assert not not_one, f"rows whose edit column does not start with one file: {not_one}"
    assert not missing, missing


def test_architecture_table_names_the_modules_that_do_the_work():
    """The places the issue found wrong: parallelism is one engine (grader/autograde/engine.py) whose default
    executor is Dask (grader/autograde/cluster.py), the tamper scan is normref/tamper.py."""
    edit = {change: e for change, e in _where_table()}
    spread = next(e for c, e in edit.items() if c.startswith("how grading is parallelised"))
    assert spread.startswith("`grader/autograde/engine.py`") and "`grader/autograde/cluster.py`" in spread
    assert "default" in spread
    assert not any("grader/parallel.py" in e for e in edit.values())
    tamper = next(e for c, e in edit.items() if c.startswith("what counts as tampering"))
    assert tamper.startswith("`normref/tamper.py`")
    from grader.pipeline import DEFAULT_ENGINE

    assert DEFAULT_ENGINE == "dask"


# -- every documented command is run as written (tests/docrun.py) -----------------------------------

def test_every_command_block_of_the_docs_has_its_test_or_the_reason_it_cannot_run_here():
    """tests/docrun.py's WHERE names each section of README.md, docs/HUB.md, docs/SCALE.md and
    docs/INSTALL.md that holds a command block, and no other; each with the test that runs its
    commands as written (a test file that reads them from the doc) or why none can here."""
    import docrun

    sections = {(c.doc, c.section) for c in docrun.commands()}
    assert sorted(sections) == sorted(docrun.WHERE), "tests/docrun.py WHERE is out of date"
    for key, where in docrun.WHERE.items():
        assert bool(where.test) != bool(where.skip), key
        if where.test:
            text = (REPO / where.test).read_text(encoding="utf-8")
            assert "docrun.section_commands(" in text, (key, where.test)


def _documented_commands():
    import docrun

    return docrun.commands()


@pytest.mark.parametrize("command", _documented_commands(), ids=lambda c: f"{c.doc}:{c.line}")
def test_documented_command(command):
    """One case per documented command: run by the test WHERE names (a pass here says which), or
    skipped with the reason it cannot run on this machine."""
    import docrun

    where = docrun.WHERE[(command.doc, command.section)]
    if where.skip:
        pytest.skip(f"{command.text.split('#')[0].strip()}: {where.why_not(command)}")
    assert where.test and (REPO / where.test).is_file(), command
