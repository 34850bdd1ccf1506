"""The course website (``make site``, tools/build_site.py), built once for the session in a
temporary folder and read as a reader would, in Debian's Chromium (Playwright, as
tests/test_browser.py drives JupyterLab):

- every lesson and every assignment's student version is a page, with the lessons' figures
  (alt text that states the takeaway), takeaways and widgets (their static form) as executed now;
- no page, download or search index holds a solution, a hidden test, a hand-back call or a
  standard answer (release/ only, never source/);
- every page loads with no console error and no request that fails or leaves this machine;
  every image loads; every formula is typeset by MathJax (no raw LaTeX left in the text); every
  internal link and anchor resolves; the launch links (Binder, the JupyterHub's nbgitpuller) are
  well formed and open a notebook the student repository has;
- a search box that finds a lesson, previous/next links in course order, the sources on each page;
- axe-core (npm, site/package-lock.json) finds no serious or critical accessibility violation.

Screenshots of every page and axe-core's results go to ``build/site-test/`` (look at them).
"""
from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, unquote, urljoin, urlparse

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import build_site  # noqa: E402  (tools/ is not a package)
from test_notebooks import FIGURES, WIDGETS  # noqa: E402

pytestmark = pytest.mark.slow

ARTEFACTS = REPO / "build" / "site-test"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1360, "height": 860}
STUDENT_REPO = "example-org/lesson16-students"
HUB = "https://hub.example.edu"
LESSONS = [p.stem for p in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))]
ASSIGNMENTS = sorted(p.relative_to(REPO).with_suffix("").as_posix() for p in (REPO / "release").glob("*/*.ipynb"))
CONTENT = ["index", *(f"notebooks/{s}" for s in LESSONS), *ASSIGNMENTS]
PAGES = [*CONTENT, "search", "genindex"]


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> dict:
    """The site, built once: ``{"dir", "seconds", "mib", "pages", "node"}``."""
    tmp = tmp_path_factory.mktemp("site")
    node = REPO / "build" / "site-node"  # npm's packages, kept between sessions (build/ is git-ignored)
    got = build_site.build(tmp / "site", repo=STUDENT_REPO, hub_url=HUB, work=tmp / "src", node=node)
    print(f"\n[site] built in {got['seconds']:.0f} s: {got['pages']} pages, {got['mib']:.1f} MiB")
    return {**got, "dir": tmp / "site", "node": node / "node_modules"}


def test_every_lesson_and_assignment_is_a_page_and_nothing_of_source(site):
    d = site["dir"]
    for page in CONTENT:
        assert (d / f"{page}.html").is_file(), page
    built = {p.relative_to(d).with_suffix("").as_posix() for p in d.rglob("*.html")}
    assert not any(p.startswith("source/") for p in built), built
    assert (d / "searchindex.js").is_file() and (d / "search.html").is_file()


def test_no_page_download_or_index_shows_a_solution_or_a_hidden_test(site):
    """nbgrader's markers, hand-back calls and standard answers, in every file of the site (the
    pages' text, the notebooks offered for download, the search index), and the refusals of
    tools/student_repo.py's secret lines."""
    markers = ["### BEGIN SOLUTION", "BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "hand_back(",
               "Standard answer · compare", "standard-answer", "Mark scheme"]
    hits = []
    for f in site["dir"].rglob("*"):
        if f.is_file() and f.suffix in (".html", ".ipynb", ".js", ".txt", ".md", ".json"):
            raw = f.read_text(encoding="utf-8", errors="replace")
            text = build_site.page_text(f) if f.suffix == ".html" else raw
            hits += [f"{f.relative_to(site['dir'])}: {m}" for m in markers if m in text or m in raw]
    assert not hits, hits
    refused, _ = build_site.leaks(site["dir"])
    assert not refused, refused
    # the check itself: a page with a marker is found
    probe = site["dir"] / "probe.html"
    probe.write_text("<p>x = 1  ### BEGIN SOLUTION</p>")
    try:
        assert any("probe.html" in r for r in build_site.leaks(site["dir"])[0])
    finally:
        probe.unlink()


def test_the_lessons_ran_at_build_time_with_figures_takeaways_and_widgets(site):
    for stem in LESSONS:
        html = (site["dir"] / "notebooks" / f"{stem}.html").read_text()
        name = f"{stem}.ipynb"
        figures = re.findall(r"<figure[^>]*>\s*<img [^>]*alt=\"([^\"]*)\"", html)
        assert len(figures) == FIGURES[name], (name, len(figures))
        for alt in figures:  # the alt text states the takeaway, as the caption does
            assert "Takeaway:" in alt and len(alt) > 80, alt
        assert html.count('class="normref-static"') == WIDGETS[name], name
        assert "widget-view+json" not in html, name
    text = build_site.page_text(site["dir"] / "notebooks" / "04_modern.html")
    assert "at lr 0.1 Peri-LN ends below Pre-LN on every seed (0, 1, 2, 3, 4)" in text  # computed at build time
    assert "Traceback" not in text


# --------------------------------------------------------------------------- in Chromium


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(site):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                             "--directory", str(site["dir"])], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            assert time.monotonic() < deadline, "the static server did not start"
            time.sleep(0.1)
    yield base
    proc.terminate()
    proc.wait(timeout=10)


_RAW_TEX = r"""(() => {
  const main = document.querySelector('main') || document.body;
  const c = main.cloneNode(true);
  c.querySelectorAll('pre, code, mjx-container, script, style, .highlight, .normref-static pre')
   .forEach(e => e.remove());
  const text = c.innerText;
  const raw = text.match(/\\[A-Za-z]{2,}|\\\(|\\\[|\$\$/g) || [];
  const maths = Array.from(document.querySelectorAll('.math'));
  const untypeset = maths.filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 60));
  return {raw: raw.slice(0, 10), maths: maths.length, untypeset};
})()"""

_LINKS = """Array.from(document.querySelectorAll('a[href]')).map(a => [a.getAttribute('href'), a.href,
  (a.innerText || a.getAttribute('aria-label') || a.title || '').trim().slice(0, 60)])"""

_IMAGES = """Array.from(document.images).map(i => [i.currentSrc.slice(0, 80), i.complete, i.naturalWidth,
  i.getAttribute('alt')])"""


@pytest.fixture(scope="module")
def visits(served, site, chromium):
    """Each page of :data:`PAGES` loaded once: console errors, failed or outside requests, images,
    formulas, links, axe-core's violations; a screenshot of each under build/site-test/."""
    from playwright.sync_api import sync_playwright

    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    axe = site["node"] / "axe-core" / "axe.min.js"
    out = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=VIEWPORT)
        outside: list[str] = []

        def route(r):
            if r.request.url.startswith(served):
                r.continue_()
            else:  # nothing may come from elsewhere: the site must work offline
                outside.append(r.request.url)
                r.abort()

        context.route("**/*", route)
        page = context.new_page()
        for name in PAGES:
            errors, failed = [], []
            outside.clear()
            handlers = {"console": lambda m, e=errors: m.type == "error" and e.append(m.text),
                        "pageerror": lambda exc, e=errors: e.append(str(exc)),
                        "response": lambda r, f=failed: r.status >= 400 and f.append(f"{r.status} {r.url}")}
            for event, handler in handlers.items():
                page.on(event, handler)
            page.goto(served + f"{name}.html", wait_until="networkidle")
            if page.evaluate("!!(window.MathJax && MathJax.startup)"):
                page.evaluate("MathJax.startup.promise")
            page.wait_for_timeout(200)
            shot = ARTEFACTS / f"{name.replace('/', '__')}.png"
            page.screenshot(path=str(shot))
            figure = page.locator("main figure img, main .normref-static").first
            if figure.count():
                figure.scroll_into_view_if_needed()
                page.screenshot(path=str(shot.with_name(shot.stem + "--figure.png")))
            page.add_script_tag(path=str(axe))
            result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
            bad = [{"id": v["id"], "impact": v["impact"], "help": v["help"],
                    "nodes": [n["target"] for n in v["nodes"]][:5]}
                   for v in result["violations"] if v["impact"] in ("serious", "critical")]
            (ARTEFACTS / f"{name.replace('/', '__')}.axe.json").write_text(json.dumps(result["violations"], indent=1))
            out[name] = {"errors": list(errors), "failed": list(failed), "outside": list(outside),
                         "tex": page.evaluate(_RAW_TEX), "links": page.evaluate(_LINKS),
                         "images": page.evaluate(_IMAGES), "axe": bad,
                         "axe_all": sorted({(v["id"], v["impact"]) for v in result["violations"]}),
                         "text": page.inner_text("main") if page.locator("main").count() else ""}
            for event, handler in handlers.items():
                page.remove_listener(event, handler)
        browser.close()
    (ARTEFACTS / "axe-summary.json").write_text(json.dumps({k: v["axe_all"] for k, v in out.items()}, indent=1))
    return out


def test_every_page_loads_without_console_errors_or_outside_requests(visits):
    for name, v in visits.items():
        assert not v["errors"], (name, v["errors"])
        assert not v["failed"], (name, v["failed"])
        assert not v["outside"], (name, v["outside"])


def test_every_image_loads_and_says_what_it_shows(visits):
    for name, v in visits.items():
        for src, complete, width, alt in v["images"]:
            assert complete and width > 0, (name, src)
            assert alt is not None, (name, src)


def test_every_formula_is_typeset_and_no_raw_latex_is_left(visits):
    for name in CONTENT:
        tex = visits[name]["tex"]
        assert not tex["untypeset"], (name, tex["untypeset"])
        assert not tex["raw"], (name, tex["raw"])
    assert visits["notebooks/04_modern"]["tex"]["maths"] > 10  # the lessons have formulas


def test_every_internal_link_and_anchor_resolves(visits, served, site):
    ids: dict[Path, set] = {}
    for name, v in visits.items():
        for raw, absolute, _ in v["links"]:
            if not absolute.startswith(served) or raw.startswith("javascript:"):
                continue
            url = urlparse(absolute)
            target = site["dir"] / unquote(url.path[1:])
            if url.path.endswith("/"):
                target = target / "index.html"
            assert target.is_file(), (name, raw)
            if url.fragment and target.suffix == ".html":
                if target not in ids:
                    ids[target] = set(re.findall(r'\sid="([^"]+)"', target.read_text()))
                assert unquote(url.fragment) in ids[target], (name, raw)


def _launch_links(v) -> dict:
    return {kind: [h for _, h, _ in v["links"] if h.startswith(prefix)]
            for kind, prefix in (("binder", "https://mybinder.org/"), ("hub", HUB + "/"))}


def test_the_launch_links_open_the_pages_notebook_on_binder_and_the_hub(visits):
    owner, name = STUDENT_REPO.split("/")
    for page in [f"notebooks/{s}" for s in LESSONS] + ASSIGNMENTS:
        links = _launch_links(visits[page])
        assert len(links["binder"]) == 1 and len(links["hub"]) == 1, (page, links)
        notebook = f"{page}.ipynb"
        assert (REPO / notebook).is_file()
        b = urlparse(links["binder"][0])
        assert b.path == f"/v2/gh/{owner}/{name}/main", b
        assert parse_qs(b.query) == {"urlpath": [f"lab/tree/{notebook}"]}, b
        h = urlparse(links["hub"][0])
        assert h.path == "/hub/user-redirect/git-pull", h  # nbgitpuller's endpoint
        q = parse_qs(h.query)
        assert q == {"repo": [f"https://github.com/{STUDENT_REPO}"], "branch": ["main"],
                     "urlpath": [f"lab/tree/{name}/{notebook}"]}, q


def test_search_finds_a_lesson(served, chromium):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(served + "index.html", wait_until="networkidle")
        assert page.locator("form[action*='search'] input[name='q']").count() >= 1  # the search box
        page.goto(served + "search.html?q=DeepNorm", wait_until="networkidle")
        page.wait_for_selector("#search-results li", timeout=30_000)
        hits = page.locator("#search-results li a").evaluate_all("as => as.map(a => a.getAttribute('href'))")
        summaries = page.locator("#search-results").inner_text()
        page.screenshot(path=str(ARTEFACTS / "search-DeepNorm.png"))
        browser.close()
    assert any("04_modern" in h for h in hits), hits
    assert not re.search(r"\\[A-Za-z]{2,}|\\\(", summaries), summaries  # no formula's LaTeX source


def test_previous_and_next_follow_the_course_order(visits, served):
    order = [f"notebooks/{s}" for s in LESSONS]
    for i, name in enumerate(order):
        hrefs = [urljoin(served + name + ".html", raw) for raw, _, _ in visits[name]["links"]]
        if i > 0:
            assert served + order[i - 1] + ".html" in hrefs, name
        if i + 1 < len(order):
            assert served + order[i + 1] + ".html" in hrefs, name


def test_every_content_page_cites_its_sources(visits):
    for name in CONTENT:
        text = visits[name]["text"]
        assert re.search(r"Primary sources?:|Sources", text), name
        assert "arxiv.org" in " ".join(h for _, h, _ in visits[name]["links"]), name


def test_axe_core_finds_no_serious_or_critical_violation(visits):
    bad = {name: v["axe"] for name, v in visits.items() if v["axe"]}
    assert not bad, json.dumps(bad, indent=1)
