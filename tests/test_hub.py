"""A course on a real JupyterHub, end to end: docs/HUB.md, "Deploy on JupyterHub", as a class lives it.

Every command block of docs/HUB.md is run as written (tests/docrun.py: the user each section
names, a login shell's environment, placeholders from one table), in the doc's order, with the
students' and the instructor's browser work between the day's commands. Real processes only
(tests/hubkit.py): three new unix users (an instructor, ada and bob; homes mode 700; removed
afterwards), the course repository (this working tree, committed into a bare repository) that
the instructor clones, the shared student environment built by ``make hub-env`` from that clone,
a ``git daemon`` that takes the instructor's push of ``make student-repo HUB=1`` and serves it to
nbgitpuller, JupyterHub 6.1.1 with configurable-http-proxy serving HTTPS with a self-signed
certificate made here by openssl, PAMAuthenticator and LocalProcessSpawner on 127.0.0.1, the
exchange in a temporary folder, Debian's Chromium through Playwright. The grading part is one
small assignment, ``practice``; the instructor is a normal user, and ``make grade`` runs as that
user (warm kernels, no process left behind).

What the test adds to the docs: the instructor's clone's ``.venv`` is this checkout's, linked
(docrun.link_venv: torch's CUDA build is 5.5 GB to download), the instructor's git identity, and
the hub's internal ports (``--JupyterHub.hub_port``, the proxy's API), free ones, since other
hubs may run on this machine.

Each step's screenshot goes to build/hub/ (numbered in order), with the hub's log.
"""
from __future__ import annotations

import csv
import os
import pwd
import re
import shutil
import sqlite3
import stat
import subprocess
import time
from pathlib import Path

import docrun
import pytest
from hubkit import HUB_ENV, as_user, ensure_chp, git_server, scratch, unix_users, wait_for_hub
from hubkit import stop as hubkit_stop
from playwright.sync_api import sync_playwright
from services import free_port

pytestmark = [pytest.mark.slow, pytest.mark.hub]

REPO = Path(__file__).resolve().parents[1]
ARTEFACTS = REPO / "build" / "hub"
ASSIGNMENT = "practice"
INSTRUCTOR, ADA, BOB = "nrhub-instr", "nrhub-ada", "nrhub-bob"
COURSE = "lesson16-normalization"
NB = ".jp-NotebookPanel:not(.lm-mod-hidden)"
PAGE_MS = 180_000
# The eight short answers, by hand: mean (1+3+5+7)/4 = 4, variance (9+1+1+9)/4 = 5, LayerNorm
# (-3, -1, 1, 3)/sqrt(5), RMS sqrt((25+144)/2) = 9.192, a shift changes RMSNorm, Pre-LN's FFN half
# H + FFN(Norm(H)), Norm keeps [3, 7, 16], rms of [4, 5, 6] is [4, 5, 1], Conv1d's features are axis 1.
RIGHT = ["mean_1357 = 4\nvar_1357 = 5", "ln_1357 = (-1.342, -0.447, 0.447, 1.342)", "rms_5_12 = 9.192",
         "rms_shift_changes = True", 'pre_ln_formula = "Y = H + FFN(Norm(H))"', "norm_keeps_shape = True",
         "rms_shape = (4, 5, 1)", "stats_axis = 1"]
# bob: the unbiased variance 20/3 (the mean right: 0.5 of question 1's point) and the last axis
# (time, not features: 0 of question 8's) -> 6.5 of the 8 automatic points; ada: all 8.
BOB_ANSWERS = ["mean_1357 = 4\nvar_1357 = 6.667", *RIGHT[1:7], "stats_axis = -1"]
WRITTEN = {ADA: "Yes: the per-token statistic has shape [3, 7, 1] and broadcasts back, so Norm(x) is [3, 7, 16].",
           BOB: "Yes, it stays the same."}
AUTO_POINTS = {ADA: 8.0, BOB: 6.5}
HAND_POINTS = {ADA: 1.0}  # typed into formgrader for ada's written answer; bob's stays ungraded (0)
MAX_POINTS = 9.0


class Shots:
    """Numbered screenshots of each step in build/hub/."""

    def __init__(self):
        shutil.rmtree(ARTEFACTS, ignore_errors=True)
        ARTEFACTS.mkdir(parents=True)
        self.n = 0

    def __call__(self, page, name: str) -> None:
        self.n += 1
        page.wait_for_timeout(400)
        page.screenshot(path=str(ARTEFACTS / f"{self.n:02d}-{name}.png"))


def login(browser, hub, user: str, password: str):
    """A new browser context logged in as ``user`` through the hub's login form; returns its page
    once the user's server has opened its landing page."""
    ctx = browser.new_context(viewport={"width": 1360, "height": 860}, ignore_https_errors=True)  # the test's own CA
    page = ctx.new_page()
    page.set_default_timeout(PAGE_MS)
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", password)
    page.click("#login_submit")
    page.wait_for_url(re.compile(rf".*/user/{user}/lab.*"), timeout=PAGE_MS)
    return page


def open_assignment_list(page):
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Nbgrader$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Assignment List$")).click()
    listing = page.locator("#nbgrader-assignment-list")
    listing.wait_for()
    return listing


def set_code(page, cell, code: str) -> None:
    cell.scroll_into_view_if_needed()
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(code)
    page.keyboard.press("Escape")


def student_works(page, user: str, answers: list[str], shot) -> str:
    """Fetch, answer, save, Validate and submit, all in the browser; returns Validate's text."""
    shot(page, f"{user}-lessons-pulled")
    listing = open_assignment_list(page)
    listing.get_by_role("button", name="Fetch").click()
    listing.locator("#fetched_assignments_list .assignment-notebooks-link").wait_for()
    shot(page, f"{user}-fetched")
    listing.locator("#fetched_assignments_list .assignment-notebooks-link").click()
    listing.locator("#fetched_assignments_list .nested_list_item a").first.click()
    page.wait_for_selector(f"{NB} .jp-Cell")
    page.wait_for_selector(f"{NB} .jp-Notebook-ExecutionIndicator[data-status='idle']")
    for code in answers:
        set_code(page, page.locator(f"{NB} .jp-CodeCell", has_text="YOUR CODE HERE").first, code)
    written = page.locator(f"{NB} .jp-MarkdownCell", has_text="YOUR ANSWER HERE")
    written.scroll_into_view_if_needed()
    written.dblclick()
    written.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(WRITTEN[user])
    page.keyboard.press("Shift+Enter")
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    page.wait_for_function("() => !document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) "
                           ".jp-mod-dirty') && !document.title.startsWith('●')", timeout=30_000)
    page.wait_for_timeout(1000)
    shot(page, f"{user}-answered")
    page.locator(f"{NB} .jp-NotebookPanel-toolbar").get_by_text("Validate", exact=True).click()
    dialog = page.locator(".jp-Dialog-content")
    dialog.wait_for()
    page.wait_for_function("el => !/Validating/.test(el.innerText)", arg=dialog.element_handle(), timeout=PAGE_MS)
    text = dialog.inner_text()
    shot(page, f"{user}-validated")
    page.locator(".jp-Dialog-button").last.click()
    page.locator(".lm-TabBar-tabLabel", has_text="Assignments").click()
    listing.get_by_role("button", name="Submit").click()
    listing.get_by_role("button", name="Fetch Feedback").wait_for()
    shot(page, f"{user}-submitted")
    return text


HUB = "docs/HUB.md"
SECTIONS = [section for doc, section in docrun.WHERE if doc == HUB]


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (openssl, valid 2 days), readable by root only."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=120)
    key.chmod(0o600)
    return cert, key


def _owners(root: Path) -> set[str]:
    return {pwd.getpwuid(os.lstat(os.path.join(d, n)).st_uid).pw_name
            for d, dirs, files in os.walk(root) for n in dirs + files}


#: A terminal of the user's server (jupyter_server's REST API and its websocket, as JupyterLab's
#: Terminal uses them): the command typed, then a marker whose echo differs from its output.
_TERMINAL_JS = """async ([user, cmd]) => {
  const xsrf = (document.cookie.split('; ').find(c => c.startsWith('_xsrf=')) || '=').split('=')[1];
  const r = await fetch(`/user/${user}/api/terminals`, {method: 'POST', headers: {'X-XSRFToken': xsrf}});
  const t = await r.json();
  return await new Promise((resolve) => {
    const ws = new WebSocket(`wss://${location.host}/user/${user}/terminals/websocket/${t.name}`);
    let out = '';
    ws.onmessage = (e) => { const m = JSON.parse(e.data);
      if (m[0] === 'stdout') { out += m[1]; if (/__DONE__/.test(out)) { ws.close(); resolve(out); } } };
    ws.onopen = () => ws.send(JSON.stringify(['stdin', cmd + '; echo __DO""NE__\\r']));
    setTimeout(() => resolve(out + ' [no answer in 300 s]'), 300000);
  });
}"""


def _in_a_terminal(page, user: str, cmd: str) -> str:
    """What ``cmd`` prints in a new terminal of ``user``'s server (the page is logged in as them)."""
    return page.evaluate(_TERMINAL_JS, [user, cmd])


def test_a_class_on_a_real_jupyterhub(chromium, bubblewrap):
    started, cpu0 = time.monotonic(), _children_cpu()
    shot = Shots()
    assert SECTIONS == [section for section in SECTIONS if docrun.WHERE[(HUB, section)].test == "tests/test_hub.py"]
    with scratch("normref-hub-") as tmp, unix_users([INSTRUCTOR, ADA, BOB]) as passwords, \
            docrun.reachable(INSTRUCTOR, [REPO / ".venv" / "bin" / "python"]):
        home = Path(f"/home/{INSTRUCTOR}")
        course = home / COURSE
        (tmp / "git").mkdir()
        docrun.course_repository(tmp / "git" / "course.git")
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(tmp / "git" / "lessons.git")], check=True)
        (tmp / "tls").mkdir(mode=0o700)
        cert, key = _self_signed(tmp / "tls")
        (tmp / "exchange").mkdir()
        (tmp / "exchange").chmod(0o777)
        for k, v in (("user.name", "Course Instructor"), ("user.email", f"{INSTRUCTOR}@localhost")):
            as_user(INSTRUCTOR, ["git", "config", "--global", k, v], home)
        ensure_chp()  # npm, which the doc's apt-get line installs, and the proxy: made once per machine
        with git_server(tmp / "git", ARTEFACTS / "git-daemon.log") as git_url, sync_playwright() as pw:
            port = free_port()
            values = {"course_repo": f"{git_url}/course.git", "lessons_repo": f"{git_url}/lessons.git",
                      "instructor": INSTRUCTOR, "students": f"{ADA},{BOB}", "hub_address": f"127.0.0.1:{port}",
                      "cert": str(cert), "key": str(key), "hub_env": str(HUB_ENV), "exchange": str(tmp / "exchange"),
                      "hub_dir": str(tmp / "hub")}
            folder = {"home": lambda user: Path(pwd.getpwnam(user).pw_dir), "course": lambda user: course}

            def run_section(section: str, **kw) -> dict[str, subprocess.CompletedProcess]:
                where = docrun.WHERE[(HUB, section)]
                user = {"instructor": INSTRUCTOR}.get(where.user, where.user)
                out = {}
                for cmd in docrun.section_commands(HUB, section):
                    out[cmd.text] = docrun.run(cmd, user, folder[where.folder](user), values, timeout=1800, **kw)
                    if cmd.text.startswith("git clone"):
                        docrun.link_venv(course)
                return out

            # 1. the packages (installed already, or by the fixtures' apt-get: this line finds them)
            run_section(SECTIONS[0])
            # 2. the course folder, the instructor's clone, private to them
            run_section(SECTIONS[1])
            assert (course / "source").is_dir() and stat.S_IMODE(course.stat().st_mode) == 0o700
            for user in (ADA, BOB):  # students cannot read the solutions (or anything of the course)
                out = as_user(user, ["cat", course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"], tmp, check=False)
                assert out.returncode != 0 and "Permission denied" in out.stderr, out
            # 3. the shared environment, built by root from that clone, which stays the instructor's
            run_section(SECTIONS[2])
            assert _owners(course) == {INSTRUCTOR}, sorted(_owners(course))
            # 4. the lessons, published by the instructor
            run_section(SECTIONS[3])
            # 5. the hub, as root, HTTPS with the test's certificate
            (hub_cmd,) = docrun.section_commands(HUB, SECTIONS[4])
            extra = (f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{free_port()} "
                     f"--JupyterHub.hub_port={free_port()}")
            proc = docrun.start(hub_cmd, "root", Path("/root"), values, ARTEFACTS / "jupyterhub.log", append=extra)
            try:
                hub = wait_for_hub(proc, f"https://127.0.0.1:{port}", ARTEFACTS / "jupyterhub.log", cafile=cert)
                for name in ("jupyterhub.sqlite", "jupyterhub_cookie_secret"):
                    assert stat.S_IMODE((tmp / "hub" / name).stat().st_mode) == 0o600, name
                plain = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                        f"http://127.0.0.1:{port}/hub/login"], capture_output=True, text=True)
                assert plain.stdout in ("000", "400"), plain  # TLS only: no login page over plain HTTP
                browser = pw.chromium.launch(executable_path=str(chromium), headless=True,
                                             args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
                try:
                    _the_day(browser, hub, passwords, course, values, shot)
                finally:
                    browser.close()
            finally:
                hubkit_stop(proc, grace_s=60)
        left = docrun.processes_of(INSTRUCTOR)
        assert not left, f"the instructor's runs left processes: {left}"
    ran = [c for c, *_ in docrun.RAN if c.doc == HUB]
    assert sorted(set(map(str, ran))) == sorted(map(str, docrun.commands(HUB))), "every command of docs/HUB.md ran"
    wall, cpu = time.monotonic() - started, _children_cpu() - cpu0
    print(f"\nhub test: {wall:.0f} s wall, {cpu:.0f} CPU-s of the processes it waited for "
          f"(hub, servers and kernels not included); load {open('/proc/loadavg').read().split()[:3]}")


def _the_day(browser, hub, passwords, course: Path, values: dict, shot) -> None:
    """docs/HUB.md section 6, each command as written by the instructor, and what the students
    and the instructor do in their browsers between them."""
    day = docrun.section_commands(HUB, SECTIONS[5])
    release, collect, grade, grade_again, feedback = day

    def instructor(cmd) -> subprocess.CompletedProcess:
        return docrun.run(cmd, INSTRUCTOR, course, values, timeout=1800)

    instructor(release)
    pages, validated = {}, {}
    for user, answers in ((ADA, RIGHT), (BOB, BOB_ANSWERS)):
        page = pages[user] = login(browser, hub, user, passwords[user])
        # The landing page: nbgitpuller pulled the lessons, 00_start opened, hub student view.
        page.wait_for_url(re.compile(rf".*/lab/tree/{COURSE}/notebooks/00_start\.ipynb"))
        page.wait_for_selector(f"{NB} .jp-Cell")
        lessons = Path(f"/home/{user}") / COURSE
        assert (lessons / "notebooks" / "00_start.ipynb").is_file() and not (lessons / "release").exists()
        assert "Nbgrader" in page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
        validated[user] = student_works(page, user, answers, shot)
        assert page.request.get(f"{hub.url}/user/{user}/formgrader").status == 404
    # Validate: ada's right answers pass; bob's two wrong ones fail it, each named with the
    # points grading gives (question 1: the mean right, 0.5 of 1; question 8: 0 of 1).
    assert "Success! Your notebook passes all the tests." in validated[ADA], validated[ADA]
    assert "Success!" not in validated[BOB], validated[BOB]
    assert "practice_mean_var: 1/2 cases, 0.5 of 1 points" in validated[BOB], validated[BOB]
    assert "retrieval_stats_axis: 0/1 cases, 0 of 1 points" in validated[BOB], validated[BOB]
    assert validated[BOB].count("The following cell failed") == 2, validated[BOB]
    # lesson 00's terminal command, typed into a terminal of ada's own server (its shell, its PATH)
    out = _in_a_terminal(pages[ADA], ADA, f"python -m nbgrader validate {ASSIGNMENT}/{ASSIGNMENT}.ipynb")
    assert "Success! Your notebook passes all the tests." in out, out[-2000:]
    # bob cannot read ada's work, neither on disk nor through the hub.
    out = as_user(BOB, ["cat", f"/home/{ADA}/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"], Path("/tmp"), check=False)
    assert out.returncode != 0, out
    assert pages[BOB].request.get(f"{hub.url}/user/{ADA}/api/contents/{ASSIGNMENT}").status in (403, 404)

    # The instructor: collect, grade, hand-grade in formgrader.
    instructor(collect)
    assert sorted(p.name for p in (course / "submitted").iterdir()) == [ADA, BOB]
    first = instructor(grade)
    assert _totals(course) == AUTO_POINTS, first.stdout[-3000:]
    assert "warm kernels for all 2 notebooks" in first.stdout, first.stdout[-3000:]
    page = login(browser, hub, INSTRUCTOR, passwords[INSTRUCTOR])
    # Nbgrader > Formgrader inside the instructor's JupyterLab: framed, not blank
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Nbgrader$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Formgrader$")).click()
    page.frame_locator("iframe").locator("text=Manage Assignments").first.wait_for()
    shot(page, "formgrader-in-jupyterlab")
    page.goto(f"{hub.url}/user/{INSTRUCTOR}/formgrader/gradebook/{ASSIGNMENT}/{ASSIGNMENT}")
    page.wait_for_selector("#main-table tr td.name")
    page.click("#toggle_names")
    page.locator("a.name-shown", has_text=ADA).wait_for(state="attached")
    shot(page, "formgrader-manual-grading")
    page.goto(hub.url + page.locator("a.name-shown", has_text=ADA).get_attribute("href"))
    page.wait_for_load_state("networkidle")  # formgrader renders the score fields once its grades are in
    score = page.locator("#practice_shape_why")
    score.fill(str(HAND_POINTS[ADA]))
    score.press("Tab")
    deadline = time.monotonic() + 30
    while _hand_grade(course, ADA) != HAND_POINTS[ADA]:  # saved by formgrader's request on change
        assert time.monotonic() < deadline, "formgrader did not save the hand grade"
        page.wait_for_timeout(500)
    shot(page, "formgrader-hand-grade")
    second = instructor(grade_again)
    want = {u: AUTO_POINTS[u] + HAND_POINTS.get(u, 0.0) for u in AUTO_POINTS}
    assert _totals(course) == want, second.stdout[-3000:]
    released = instructor(feedback)
    # bob's written answer waits for its hand grade: release_feedback says so, his feedback too
    assert f"{BOB} (practice_shape_why)" in released.stderr and "wait for a hand grade" in released.stderr, released

    # Each student fetches their own feedback and sees their own score.
    for user in (ADA, BOB):
        page = pages[user]
        listing = open_assignment_list(page)
        listing.get_by_role("button", name="Fetch Feedback").click()
        deadline = time.monotonic() + 120
        while not list(Path(f"/home/{user}/{ASSIGNMENT}/feedback").glob("*/*.html")):
            assert time.monotonic() < deadline, f"{user}: no feedback fetched"
            time.sleep(1)
        (html,) = Path(f"/home/{user}/{ASSIGNMENT}/feedback").glob("*/*.html")
        text = html.read_text()
        got = re.findall(r"Score:\s*([\d.]+)\s*/\s*([\d.]+)", text)
        assert got and float(got[0][0]) == want[user] and float(got[0][1]) == MAX_POINTS, got
        assert WRITTEN[user] in text and all(WRITTEN[o] not in text for o in WRITTEN if o != user)
        assert ("Not graded yet" in text) == (user == BOB), user
        assert "<math" in text and "$\\mu$" not in text  # the lessons' LaTeX drawn as MathML, no script
        rel = html.relative_to(f"/home/{user}")
        page.goto(f"{hub.url}/user/{user}/files/{rel}")
        shot(page, f"{user}-feedback")
        other = ADA if user == BOB else BOB
        assert page.request.get(f"{hub.url}/user/{other}/files/{rel}").status in (403, 404)


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _totals(course: Path) -> dict[str, float]:
    """Each student's points for the assignment, from grades.csv (nbgrader export)."""
    with open(course / "grades.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["assignment"] == ASSIGNMENT]
    return {r["student_id"]: float(r["score"]) for r in rows}


def _hand_grade(course: Path, student: str) -> float | None:
    """The manual score of the written answer in the gradebook (as formgrader saved it)."""
    with sqlite3.connect(course / "gradebook.db") as db:
        row = db.execute(
            "SELECT g.manual_score FROM grade g JOIN base_cell bc ON g.cell_id = bc.id "
            "JOIN submitted_notebook sn ON g.notebook_id = sn.id JOIN submitted_assignment sa ON "
            "sn.assignment_id = sa.id WHERE bc.name = 'practice_shape_why' AND sa.student_id = ?",
            (student,)).fetchone()
    return row and row[0]
