"""The student experience in a real browser: JupyterLab as Binder serves it, driven by Chromium.

One JupyterLab server for the module, started with ``make lab``'s own command (read from
``make -n lab``: ``./start`` then ``jupyter lab``, as Binder starts it, so with the student
configuration in ``jupyter-student/``), on a free localhost port with a token, serving a
``make student-repo`` export of this working tree (the kernels import that export's
``normref``; nothing here is written back to the repo).
Debian's Chromium, headless, is driven with Playwright; the `chromium` fixture (conftest.py) installs it
with apt when it is missing (CI machines start without it).

What a student would see is asserted, and measured:

- the start page: the server's default URL opens ``notebooks/00_start.ipynb`` with nbgrader's
  instructor panels hidden and its kernel started without a "Select Kernel" dialog; cold
  start-to-page time printed;
- every lesson notebook, followed once, in the course's order, as a student would: Run All,
  kernel idle, no error output, every widget and every figure the kernel sent rendered (counted
  in the saved notebook, found in the page); the kernel's peak memory (``VmHWM``) printed and
  under Binder's 1 GB; what the lesson asks the student to try; then closed and shut down as its
  last paragraph says, and the kernels running at once stay under 1 GB;
- the LayerNorm explorer: arrow keys move a slider; the readout shows the values
  ``torch.nn.functional.layer_norm`` gives for the new token; lesson 02's "add 3 to every
  feature" reaches (4, 5, 6);
- lesson 03's placement explorer: its caption says Post-LN's residual norm "stays at 5.66";
  the lesson prints no source code of ``normref`` and reports this model before Xiong et al.;
- an assignment from ``release/``: a forgotten keepdim stops Run All on the visible check's
  diagnosis (screenshot ``quick-check-diagnosis``), a wrong answer gets its diagnosis, the
  seed's answer passes every case of the self-check (the battery's "all correct") and nbgrader's Validate.
- a practice quiz: each answer typed and checked at once (Check clicked right after the last
  key, or Enter) is the one judged; an empty box is told what to do there.

Screenshots and the server log go to ``build/browser/`` (``make screenshots`` copies the
README's into ``docs/screenshots/``).
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect, sync_playwright

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ARTEFACTS = REPO / "build" / "browser"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1360, "height": 860}
SERVER_START_S = 90  # a cold `jupyter lab` on a loaded 2-core machine takes 5-15 s
PAGE_MS = 60_000  # JupyterLab's first load, a kernel start with `import torch`
RUN_ALL_MS = 150_000  # every cell of one lesson notebook
BINDER_MEMORY_BYTES = 1 << 30  # each lesson's kernel must fit Binder's 1-2 GB with room to spare
KERNEL_GONE_S = 120  # a kernel shut down from the page goes within this (generous: not a speed check)
LESSONS = sorted((REPO / "notebooks").glob("[0-9]*.ipynb"))
# The seed's Build challenge, "Standard answer": what a student who got it right types.
SEED_RMS_NORM = '''def rms_norm(x, weight, eps=1e-6):
    rms = x.float().pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()
    return (x.float() * rms * weight).to(x.dtype)
'''
# Forgetting keepdim: [2, 3] against [2, 3, 8] raises in torch; the visible check must name it.
MISSING_KEEPDIM_RMS_NORM = '''def rms_norm(x, weight, eps=1e-6):
    rms = x.float().pow(2).mean(dim=-1).add(eps).rsqrt()
    return (x.float() * rms * weight).to(x.dtype)
'''
# The mistake the checker must name: centering, as LayerNorm does.
CENTERING_RMS_NORM = '''def rms_norm(x, weight, eps=1e-6):
    h = x.float() - x.float().mean(dim=-1, keepdim=True)
    rms = h.pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()
    return (h * rms * weight).to(x.dtype)
'''


# --------------------------------------------------------------------------- set-up


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _export_student_tree(dest: Path) -> Path:
    spec = importlib.util.spec_from_file_location("student_repo", REPO / "tools" / "student_repo.py")
    mod = sys.modules.setdefault("student_repo", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(mod)
    mod.export_student_repo(dest)
    return dest


def make_lab_command(root: Path) -> list[str]:
    """``make lab``'s command line (``make -n lab``, its last line), run on ``root``.

    It must be the student view: ``./start`` (which puts ``jupyter-student/`` on
    ``JUPYTER_CONFIG_PATH``) running ``jupyter lab``, with no default URL of its own (the
    student configuration's opens ``notebooks/00_start.ipynb``).
    """
    out = subprocess.run(["make", "-n", "-s", "lab"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip().splitlines()[-1].split()
    assert line[:3] == ["./start", ".venv/bin/jupyter", "lab"], f"make lab is not the student view: {line}"
    assert not any("default_url" in a for a in line), line
    rest = [a for a in line[3:] if not a.startswith("--ServerApp.root_dir=")]
    return [str(root / "start"), str(BIN / "jupyter"), "lab", f"--ServerApp.root_dir={root}", *rest]


@dataclass
class Lab:
    """A running JupyterLab: where it is, what it serves, when it was started."""

    url: str
    token: str
    root: Path
    proc: subprocess.Popen
    started: float
    ready_s: float

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(f"{self.url}{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
        return json.loads(body) if body else None

    def status(self, path: str) -> int:
        try:
            return urllib.request.urlopen(f"{self.url}{path}?token={self.token}", timeout=30).status
        except urllib.error.HTTPError as e:
            return e.code


@pytest.fixture(scope="module")
def browser(chromium):
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def lab(browser, tmp_path_factory):
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path_factory.mktemp("lab")
    root = _export_student_tree(tmp / "course")
    # `make lab`'s command, through Binder's `start`; the landing page comes from jupyter-student/.
    with serve(make_lab_command(root), root, tmp, "server.log") as server:
        yield server


@contextlib.contextmanager
def serve(cmd: list[str], root: Path, tmp: Path, log_name: str, config_path: Path | None = None):
    """Run ``cmd`` (a ``jupyter lab`` command line) on a free port with a token; yield a
    :class:`Lab` once it answers; stop it and its kernels afterwards. Its log: build/browser/."""
    port, token = _free_port(), os.urandom(16).hex()
    env = {**os.environ,
           "PYTHONPATH": str(root),  # the kernels import the exported normref, not the repo's
           "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"),  # a first visit: no saved settings
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "runtime")}
    env.pop("JUPYTER_CONFIG_PATH", None)
    if config_path:
        env["JUPYTER_CONFIG_PATH"] = str(config_path)
    cmd = cmd + ["--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
                 "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}"]
    log = open(ARTEFACTS / log_name, "w")
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = Lab(f"http://127.0.0.1:{port}", token, root, proc, started, float("nan"))
    try:
        deadline = started + SERVER_START_S
        while True:
            if proc.poll() is not None:
                tail = (ARTEFACTS / log_name).read_text()[-3000:]
                pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{tail}")
            try:
                server.api("/api/status")
                break
            except (urllib.error.URLError, ConnectionError):
                if time.perf_counter() > deadline:
                    pytest.fail(f"jupyter lab did not answer within {SERVER_START_S} s")
                time.sleep(0.2)
        server.ready_s = time.perf_counter() - started
        yield server
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the server and the kernels it started
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def page(browser, lab):
    context = browser.new_context(viewport=VIEWPORT)
    pg = context.new_page()
    pg.set_default_timeout(PAGE_MS)
    yield pg
    context.close()


@pytest.fixture(autouse=True)
def each_test(request, page, lab):
    """After each test: its kernels shut down (whatever happened); a failure leaves
    build/browser/FAILED-<test>.png, what the student would have seen."""
    failed = request.session.testsfailed
    yield
    shut_down_kernels(lab)
    if request.session.testsfailed > failed:
        name = re.sub(r"[^\w.-]+", "_", request.node.name)
        page.screenshot(path=str(ARTEFACTS / f"FAILED-{name}.png"))


# --------------------------------------------------------------------------- page helpers

# The visible notebook panel (others may exist, hidden).
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden)"
# The code cells' prompts, "[ ]:", "[*]:" or "[7]:" (textContent: cells scrolled out of view
# are not rendered, and their innerText is empty).
_PROMPTS_JS = """sel => Array.from(document.querySelectorAll(`${sel} .jp-CodeCell .jp-InputPrompt`))
                     .map(p => p.textContent.trim())"""
# True when no cell is queued or running, the kernel is idle, and every code cell ran, or an
# error stopped Run All after at least one did.
_RUN_FINISHED_JS = """sel => {
  const panel = document.querySelector(sel);
  const status = panel && panel.querySelector('.jp-Notebook-ExecutionIndicator');
  if (!status || status.getAttribute('data-status') !== 'idle') return false;
  const prompts = Array.from(panel.querySelectorAll('.jp-CodeCell .jp-InputPrompt')).map(p => p.textContent.trim());
  if (prompts.some(p => p.includes('*'))) return false;
  const ran = prompts.filter(p => /\\[\\d+\\]/.test(p)).length;
  const failed = panel.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]').length > 0;
  return ran === prompts.length || (failed && ran > 0);
}"""


def open_notebook(page, lab: Lab, rel: str, *, accept_dialog: bool = True) -> None:
    """Open ``rel`` alone (``?reset``: no earlier tabs) and wait until its kernel is idle.

    On a loaded machine JupyterLab 4.6 can ask "Select Kernel" when the kernel list arrives after
    the notebook (its session context waits for the sessions, not the kernel specs); with
    ``accept_dialog`` the notebook's own kernel, preselected, is accepted, as a student would;
    without, a dialog fails the test.
    """
    page.goto(f"{lab.url}/lab/tree/{rel}?token={lab.token}&reset")
    wait_for_kernel(page, lab, rel, accept_dialog=accept_dialog)


def wait_for_kernel(page, lab: Lab, rel: str, *, accept_dialog: bool = True) -> None:
    """Wait until notebook ``rel`` is shown, has a kernel session and the kernel is idle (see
    :func:`open_notebook` for ``accept_dialog``)."""
    page.wait_for_selector(f"{NOTEBOOK} .jp-Notebook .jp-Cell")
    deadline = time.perf_counter() + PAGE_MS / 1000
    while not any(s["path"] == rel for s in lab.api("/api/sessions")):
        if accept_dialog:
            accept_kernel_dialog(page)
        else:
            assert page.locator(".jp-Dialog").count() == 0, page.locator(".jp-Dialog").first.inner_text()
        assert time.perf_counter() < deadline, f"{rel}: no kernel started within {PAGE_MS / 1000:.0f} s"
        time.sleep(0.25)
    page.wait_for_selector(f"{NOTEBOOK} .jp-Notebook-ExecutionIndicator[data-status='idle']")
    page.wait_for_timeout(500)
    if accept_dialog:
        accept_kernel_dialog(page)
    else:
        assert page.locator(".jp-Dialog").count() == 0, page.locator(".jp-Dialog").first.inner_text()


def accept_kernel_dialog(page) -> None:
    """Accept a "Select Kernel" dialog, if one is open (its preselected kernel is the notebook's)."""
    select = page.locator(".jp-Dialog", has_text="Select Kernel")
    if select.count():
        select.locator(".jp-mod-accept").click()
        page.wait_for_selector(f"{NOTEBOOK} .jp-Notebook-ExecutionIndicator[data-status='idle']")


def menu(page, top: str, item: str) -> None:
    """Click ``top`` in JupyterLab's menu bar, then ``item``."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(top)}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


def restart_and_clear(page) -> None:
    """Kernel ▸ Restart Kernel and Clear Outputs of All Cells…, confirmed; wait for the kernel."""
    menu(page, "Kernel", "Restart Kernel and Clear Outputs of All Cells…")
    page.locator(".jp-Dialog-button.jp-mod-accept").click()
    page.wait_for_function(f"sel => ({_PROMPTS_JS})(sel).every(p => p === '[ ]:')", arg=NOTEBOOK)
    page.wait_for_selector(f"{NOTEBOOK} .jp-Notebook-ExecutionIndicator[data-status='idle']")


def run_all(page) -> float:
    """Run ▸ Run All Cells (after a restart and clear if any cell ran); wait until it finished.

    Returns:
        The seconds from the click to the kernel idle with every cell run.
    """
    if any(p != "[ ]:" for p in page.evaluate(_PROMPTS_JS, NOTEBOOK)):
        restart_and_clear(page)  # so that "finished" means this run's numbers
    t0 = time.perf_counter()
    for attempt in range(2):  # a menu command can be disabled for a moment after a notebook opens
        accept_kernel_dialog(page)
        page.locator(f"{NOTEBOOK} .jp-Cell").first.click()
        menu(page, "Run", "Run All Cells")
        try:
            page.wait_for_function(f"sel => ({_PROMPTS_JS})(sel).some(p => p !== '[ ]:')", arg=NOTEBOOK,
                                   timeout=15_000, polling=100)
            break
        except PlaywrightTimeout:
            assert attempt == 0, "Run ▸ Run All Cells started nothing, twice"
    page.wait_for_function(_RUN_FINISHED_JS, arg=NOTEBOOK, timeout=RUN_ALL_MS, polling=250)
    return time.perf_counter() - t0


def error_outputs(page) -> list[str]:
    """Text of every error or stderr output in the visible notebook."""
    return page.locator(f'{NOTEBOOK} [data-mime-type="application/vnd.jupyter.stderr"]').all_inner_texts()


def save(page, lab: Lab, rel: str) -> nbformat.NotebookNode:
    """Ctrl+S, then the notebook as saved (what the kernel sent, whatever the page rendered)."""
    path = lab.root / rel
    before = path.stat().st_mtime_ns
    page.locator(f"{NOTEBOOK} .jp-Notebook").click(position={"x": 5, "y": 5})
    page.keyboard.press("Control+s")
    deadline = time.perf_counter() + 30
    while path.stat().st_mtime_ns == before:
        assert time.perf_counter() < deadline, f"{rel}: Ctrl+S did not save within 30 s"
        time.sleep(0.2)
    time.sleep(0.3)
    return nbformat.read(path, as_version=4)


def kernel_peak_rss_bytes(lab: Lab, rel: str) -> int:
    """Peak resident memory (``VmHWM``) of the kernel of notebook ``rel``."""
    (session,) = [s for s in lab.api("/api/sessions") if s["path"] == rel]
    kid = session["kernel"]["id"]
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"kernel-{kid}.json" in (proc / "cmdline").read_text():
                (hwm,) = re.findall(r"VmHWM:\s+(\d+) kB", (proc / "status").read_text())
                return int(hwm) * 1024
        except OSError:
            continue
    raise AssertionError(f"no process for the kernel of {rel} ({kid})")


def shut_down_kernels(lab: Lab) -> None:
    for s in lab.api("/api/sessions"):
        lab.api(f"/api/sessions/{s['id']}", method="DELETE")


def shot(page, name: str, locator=None) -> Path:
    """Screenshot of the page (or of ``locator``) into build/browser/<name>.png, once painted."""
    path = ARTEFACTS / f"{name}.png"
    # JupyterLab paints cells scrolled into view a frame or two later (content-visibility).
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    page.wait_for_timeout(300)
    (locator or page).screenshot(path=str(path))
    return path


def set_cell_source(page, cell, code: str) -> None:
    """Replace a code cell's text, as a student typing it (no auto-indent, no auto-brackets)."""
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(code)
    page.keyboard.press("Escape")


def check_widget_views(page, rel: str) -> None:
    """No widget of the visible notebook failed to render ("Click to show javascript error.").

    E.g. ipywidgets 8.1.9 cannot build the view of a widget that has a tooltip but no
    description (jupyter-widgets/ipywidgets#3921): the kernel side works, the page does not.
    """
    errors = page.locator(f"{NOTEBOOK} .jupyter-widgets-error-widget")
    texts = []
    for i in range(errors.count()):
        errors.nth(i).click()  # shows the JavaScript error in place of the widget
        texts.append(errors.nth(i).inner_text().strip())
    assert not texts, f"{rel}: {len(texts)} widget(s) failed to render in the browser:\n" + "\n---\n".join(
        t[:800] for t in texts)


def validate_button(page):
    """nbgrader's Validate button in the visible notebook's toolbar."""
    return page.locator(f"{NOTEBOOK} .jp-NotebookPanel-toolbar").get_by_text("Validate", exact=True)


def _outputs(nb, mime: str):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if mime in o.get("data", {})]


# --------------------------------------------------------------------------- tests


def test_start_page_opens_the_start_notebook_without_instructor_panels(page, lab):
    page.goto(f"{lab.url}/?token={lab.token}")  # what the Binder badge's labpath also opens
    # The kernel starts by itself: no "Select Kernel" dialog, and it is the notebook's python3.
    wait_for_kernel(page, lab, "notebooks/00_start.ipynb", accept_dialog=False)
    to_page = time.perf_counter() - lab.started
    (session,) = [s for s in lab.api("/api/sessions") if s["path"] == "notebooks/00_start.ipynb"]
    assert session["kernel"]["name"] == "python3"
    print(f"\ncold start-to-page: {to_page:.1f} s (server answering after {lab.ready_s:.1f} s; "
          "from `jupyter lab` starting to the start notebook shown with an idle kernel)")
    assert page.url.split("?")[0].endswith("/lab/tree/notebooks/00_start.ipynb"), page.url
    assert page.locator(f"{NOTEBOOK} h1").first.inner_text().startswith("Lesson 16")
    assert page.locator(".jp-DirListing-item").count() > 0, "the file browser is empty"

    config = json.loads(page.locator("#jupyter-config-data").text_content())
    assert "@jupyter-widgets/jupyterlab-manager" in {e["name"] for e in config["federated_extensions"]}
    for plugin in ("formgrader", "create-assignment", "course-list", "assignment-list", "menu"):
        assert f"@jupyter/nbgrader:{plugin}" in config["disabledExtensions"]
    menus = page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
    assert "Nbgrader" not in menus and "Run" in menus, menus
    assert page.locator("#nbgrader-create_assignemnt").count() == 0  # nbgrader's id, sic
    assert validate_button(page).count() == 1  # students keep nbgrader's Validate
    assert lab.status("/formgrader") == 404 and lab.status("/api/status") == 200
    assert page.get_by_text("Would you like to get notified").count() == 0  # no news pop-up
    # The file browser lists the lesson notebooks, not their Markdown sources.
    listed = sorted(c["name"] for c in lab.api("/api/contents/notebooks")["content"])
    assert listed == [p.name for p in LESSONS], listed
    shot(page, "start")


@pytest.mark.parametrize("rel", ["notebooks/01_layernorm.ipynb", "release/modern/modern.ipynb"])
def test_a_freshly_opened_notebook_is_not_marked_changed(page, lab, rel):
    """Opening a lesson or an assignment changes nothing: once its kernel is idle (JupyterLab has
    written the kernel's language_info into the notebook's metadata), its tab is not marked
    unsaved, so autosave never rewrites the tracked file (normref.jupyter_contents hands
    JupyterLab the notebook with this Python's language_info)."""
    before = (lab.root / rel).read_bytes()
    open_notebook(page, lab, rel)
    page.wait_for_timeout(1500)  # the kernel_info reply, and any metadata update after it
    tab = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current")
    assert tab.count() == 1
    assert "jp-mod-dirty" not in (tab.get_attribute("class") or ""), f"{rel} is marked unsaved on opening"
    assert page.locator(".lm-TabBar-tab.jp-mod-dirty").count() == 0
    assert (lab.root / rel).read_bytes() == before
    shot(page, f"fresh-{Path(rel).stem}")


#: What each lesson's one Run All in the browser measured: ``{rel: {"held": bytes of every kernel
#: running at once just after it, "peak": its kernel's VmHWM}}`` (filled in course order).
COURSE_RUN: dict[str, dict[str, int]] = {}


def follow_lesson(page, lab: Lab, lesson: Path) -> None:
    """What a student does with a lesson, once per module: open it, Run All, try what its text
    asks (:data:`LESSON_CHECKS`), then close it as its last paragraph says (File ▸ Close and Shut
    Down Notebook…, confirmed), checking along the way that every widget and figure the kernel
    sent is rendered and that no error shows; what was measured goes to :data:`COURSE_RUN`. The
    lessons before it are followed first, in order (the course's order is part of what is
    measured); a lesson already followed is not followed again."""
    rel = f"notebooks/{lesson.name}"
    if rel in COURSE_RUN:  # followed already (as an earlier lesson of one that was asked for)
        return
    for earlier in LESSONS[:LESSONS.index(lesson)]:
        follow_lesson(page, lab, earlier)
    source = " ".join(lesson.with_suffix(".md").read_text().split())
    assert "**File ▸ Close and Shut Down Notebook…** and confirm, before you open the next one" in source, rel
    open_notebook(page, lab, rel)
    seconds = run_all(page)
    running = kernel_pids(lab)  # every kernel running now: the earlier lessons' must be shut down
    held = sum(_status_kib(pid, "VmHWM") for pid in running.values()) * 1024
    peak = _status_kib(running[rel], "VmHWM") * 1024
    errors = error_outputs(page)
    assert not errors, f"{rel}: error output in the browser:\n" + "\n---\n".join(e[-1500:] for e in errors)
    check_widget_views(page, rel)

    saved = save(page, lab, rel)
    n_widgets = len(_outputs(saved, "application/vnd.jupyter.widget-view+json"))
    n_png = len(_outputs(saved, "image/png"))
    n_html_img = sum(o["data"]["text/html"].count("<img") for o in _outputs(saved, "text/html")
                     if "application/vnd.jupyter.widget-view+json" not in o["data"])  # a widget's static form
    panel = page.locator(NOTEBOOK)
    rendered = panel.locator(".jp-OutputArea-output > .jupyter-widgets")
    assert rendered.count() == n_widgets, (
        f"{rel}: the kernel displayed {n_widgets} widgets, the page rendered {rendered.count()} "
        "(is the @jupyter-widgets/jupyterlab-manager extension missing?)")
    static_imgs = panel.locator(".jp-OutputArea-output img:not(.jupyter-widgets img)")
    assert static_imgs.count() == n_png + n_html_img, f"{rel}: {static_imgs.count()} figures on the page, " \
        f"{n_png + n_html_img} in the outputs"
    sizes = page.evaluate(f"""Array.from(document.querySelectorAll('{NOTEBOOK} .jp-OutputArea-output img'))
                             .map(i => [i.complete, i.naturalWidth])""")
    assert all(done and w > 0 for done, w in sizes), f"{rel}: an image did not load: {sizes}"
    print(f"\n{rel}: Run All {seconds:.1f} s in the browser, {n_widgets} widgets, "
          f"{n_png + n_html_img} figures (+{len(sizes) - n_png - n_html_img} widget images), "
          f"kernel peak memory {peak / 2**20:.0f} MiB")
    assert peak < BINDER_MEMORY_BYTES, f"{rel}: kernel peak memory {peak / 2**20:.0f} MiB, over Binder's 1 GiB"

    first = panel.locator(".jp-OutputArea-output > .jupyter-widgets, .jp-OutputArea-output img").first
    if first.count():  # the screenshot shows the first widget or figure, its cell at the top
        first.evaluate("e => e.closest('.jp-Cell').scrollIntoView({block: 'start'})")
        expect(first).to_be_in_viewport()
    shot(page, f"lesson-{lesson.stem}")
    shot(page, f"course-in-order-{lesson.stem}")
    if lesson.name in LESSON_CHECKS:  # what this lesson's text asks the student to try
        LESSON_CHECKS[lesson.name](page, panel)
    save(page, lab, rel)  # nothing unsaved: closing asks one question, to shut the kernel down
    # what the lesson's last paragraph tells the student to do
    page.locator(f"{NOTEBOOK} .jp-Cell").last.click()
    menu(page, "File", "Close and Shut Down Notebook…")
    page.locator(".jp-Dialog-button.jp-mod-accept").click()
    deadline = time.perf_counter() + KERNEL_GONE_S
    while rel in kernel_pids(lab):
        assert time.perf_counter() < deadline, f"{rel}: its kernel still runs {KERNEL_GONE_S} s after closing it"
        time.sleep(0.3)
    COURSE_RUN[rel] = {"held": held, "peak": peak}


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.name)
def test_lesson_runs_all_in_the_browser_with_widgets_and_figures(page, lab, lesson):
    follow_lesson(page, lab, lesson)


def _explorer_widget(page, panel, has_text: str):
    """The first explorer (a widget with a ``normref-readout``) whose readout contains
    ``has_text`` now, by position (so it stays the same widget when its readout changes)."""
    outputs = panel.locator(".jp-OutputArea-output > .jupyter-widgets")
    for i in range(outputs.count()):
        readout = outputs.nth(i).locator(".normref-readout")
        if readout.count() and has_text in readout.first.text_content():
            outputs.nth(i).scroll_into_view_if_needed()
            return outputs.nth(i)
    raise AssertionError(f"no explorer shows {has_text!r}")


def _add_3_to_every_feature(page, panel) -> None:
    """Lesson 02: "Set x = (1, 2, 3) ... Then add 3 to every feature, x = (4, 5, 6)": the sliders
    get there (30 arrow steps of 0.1 each); by hand, LayerNorm's output stays (-1, 0, 1) /
    sqrt(2/3) and RMSNorm's becomes (4, 5, 6) / sqrt(77/3) = (0.790, 0.987, 1.184)."""
    widget = _explorer_widget(page, panel, "norm = LayerNorm")
    for i in range(3):
        slider = widget.locator(".widget-slider", has=page.locator("label", has_text=re.compile(rf"^x\[{i}\]$")))
        slider.locator(".noUi-handle").focus()
        for _ in range(30):
            page.keyboard.press("ArrowRight")
    readout = widget.locator(".normref-readout")
    expect(readout).to_contain_text("x = [4.000, 5.000, 6.000]", timeout=60_000)
    expect(readout).to_contain_text("y = [-1.225, 0.000, 1.225]")
    widget.locator(".widget-toggle-button", has_text=re.compile("^RMSNorm$")).click()
    expect(readout).to_contain_text("y = [0.790, 0.987, 1.184]", timeout=30_000)
    shot(page, "lesson-02-add-3", widget)


def _post_ln_caption_says_the_norm_stays(page, panel) -> None:
    """Lesson 03's placement explorer, switched to Post-LN: the residual stream's norm is
    sqrt(32) = 5.657 after every layer, and the caption says it stays there (it said "grows
    from 5.66 to 5.66")."""
    widget = _explorer_widget(page, panel, "placement = Pre-LN")
    caption = widget.locator(".normref-caption")
    expect(caption).to_contain_text("token norm grows from")
    widget.locator(".widget-toggle-button", has_text=re.compile("^Post-LN$")).click()
    expect(widget.locator(".normref-readout")).to_contain_text("placement = Post-LN", timeout=60_000)
    expect(caption).to_contain_text("token norm stays at 5.66 from layer 1 to layer 8")
    shot(page, "lesson-03-post-ln-explorer", widget)


def _lr_slider_moves_the_curves(page, panel) -> None:
    """Lesson 04's learning-rate explorer: one arrow step left, lr 0.1 -> 0.03, trains both models
    again and the readout and caption follow."""
    widget = _explorer_widget(page, panel, "lr = 0.100")
    widget.locator(".widget-slider .noUi-handle").first.focus()
    page.keyboard.press("ArrowLeft")
    expect(widget.locator(".normref-readout")).to_contain_text("lr = 0.030", timeout=60_000)
    expect(widget.locator(".normref-caption")).to_contain_text("at learning rate 0.03")
    shot(page, "lesson-04-lr-explorer", widget)


LESSON_CHECKS = {"02_rmsnorm.ipynb": _add_3_to_every_feature,
                 "03_placement.ipynb": _post_ln_caption_says_the_norm_stays,
                 "04_modern.ipynb": _lr_slider_moves_the_curves}


def _explorer_notebook() -> str:
    """The first lesson that shows a NormExplorer (the LayerNorm one)."""
    for lesson in LESSONS:
        if "NormExplorer()" in lesson.read_text():
            return f"notebooks/{lesson.name}"
    raise AssertionError("no lesson shows widgets.NormExplorer(): the LayerNorm explorer is part of the lesson")


def _readout(widget) -> dict:
    """The explorer's readout lines ``name = value`` as numbers (the format NormExplorer documents)."""
    out = {}
    for part in re.split(r"\s{3,}|\n", widget.locator(".normref-readout pre").text_content()):
        if " = " in part:
            k, v = (s.strip() for s in part.split(" = ", 1))
            out[k] = [float(a) for a in v.strip("[]").split(",")] if v.startswith("[") else v
    return out


def _want_y(r: dict) -> list[float]:
    """LayerNorm of the readout's x with its gamma, beta, eps, by torch (float64), to 3 decimals."""
    x = torch.tensor(r["x"], dtype=torch.float64)
    d = x.shape[-1]
    w = torch.full((d,), float(r["gamma"]), dtype=torch.float64)
    b = torch.full((d,), float(r["beta"]), dtype=torch.float64)
    return [round(v, 3) + 0.0 for v in F.layer_norm(x, (d,), w, b, eps=float(r["eps"])).tolist()]


def _layernorm_explorer_slider_updates_the_numbers(page, panel) -> None:
    """The LayerNorm explorer (the first lesson that shows a NormExplorer): arrow keys on the last
    feature's slider move x by 0.1 each; the readout's y is what torch's layer_norm gives."""
    rel = _explorer_notebook()
    widget = page.locator(f"{NOTEBOOK} .jp-OutputArea-output > .jupyter-widgets",
                          has=page.locator(".normref-readout")).first
    widget.scroll_into_view_if_needed()
    before = _readout(widget)
    assert before["norm"] == "LayerNorm", (rel, before)
    if before["x"] == [1.0, 2.0, 3.0]:  # the seed's worked example, by hand: (-1, 0, 1) / sqrt(2/3)
        assert before["y"] == [-1.225, 0.0, 1.225]
    assert before["y"] == _want_y(before)

    # Arrow keys on the last feature's slider handle: 5 steps of 0.1.
    last = len(before["x"]) - 1
    slider = widget.locator(".widget-slider", has=page.locator("label", has_text=re.compile(rf"^x\[{last}\]$")))
    slider.locator(".noUi-handle").focus()
    for _ in range(5):
        page.keyboard.press("ArrowRight")
    want_x = before["x"][:-1] + [round(before["x"][-1] + 0.5, 3)]
    expect(widget.locator(".normref-readout")).to_contain_text(
        "x = [" + ", ".join(f"{v:.3f}" for v in want_x) + "]", timeout=30_000)
    after = _readout(widget)
    assert slider.locator(".widget-readout").text_content().strip() == f"{want_x[-1]:.2f}"
    assert after["x"] == want_x
    assert after["y"] == _want_y(after) and after["y"] != before["y"]
    if want_x == [1.0, 2.0, 3.5]:  # by hand: mean 13/6, var 19/18, y = (x - mean) / sqrt(var)
        assert after["y"] == [-1.136, -0.162, 1.298]
    shot(page, "explorer", widget)
    assert widget.locator("img").evaluate("i => i.complete && i.naturalWidth > 0"), "the chart did not render"


LESSON_CHECKS[Path(_explorer_notebook()).name] = _layernorm_explorer_slider_updates_the_numbers


def test_assignment_self_check_names_the_mistake_then_passes(page, lab):
    rel = "release/rmsnorm/rmsnorm.ipynb"
    open_notebook(page, lab, rel)
    answer = page.locator(f"{NOTEBOOK} .jp-CodeCell", has_text="YOUR CODE HERE")
    assert answer.count() == 1, "the released notebook should have one answer cell"

    # A forgotten keepdim: Run All stops on the visible check's diagnosis (an AssertionError
    # naming keepdim), not on torch's broadcasting RuntimeError (issue 16, item 3).
    set_cell_source(page, answer, MISSING_KEEPDIM_RMS_NORM)
    run_all(page)
    errors = error_outputs(page)
    assert len(errors) == 1 and "AssertionError: without keepdim=True" in errors[0], errors
    quick = page.locator(f"{NOTEBOOK} .jp-CodeCell").filter(
        has=page.locator(".jp-InputArea", has_text="Visible check"))
    assert "keepdim=True keeps it with length 1" in quick.locator(".jp-OutputArea").inner_text()
    quick.scroll_into_view_if_needed()
    shot(page, "quick-check-diagnosis")

    answer = page.locator(f"{NOTEBOOK} .jp-CodeCell", has_text="def rms_norm").first
    set_cell_source(page, answer, CENTERING_RMS_NORM)
    run_all(page)
    shown = page.locator(NOTEBOOK).inner_text()
    assert "RMSNorm does not subtract the mean" in shown, shown[-2000:]

    answer = page.locator(f"{NOTEBOOK} .jp-CodeCell", has_text="def rms_norm").first
    set_cell_source(page, answer, SEED_RMS_NORM)
    run_all(page)
    assert error_outputs(page) == []
    outputs = page.locator(f"{NOTEBOOK} .jp-OutputArea-output").all_inner_texts()
    passed = [o for o in outputs if re.search(r"rms_norm: (\d+)/\1 cases passed \(score 1\.00\)", o)]
    assert len(passed) >= 2, outputs  # the visible quick check and the full battery
    # by its source: has_text ignores case, and the visible check's output names "the full battery"
    passed_cell = page.locator(f"{NOTEBOOK} .jp-CodeCell").filter(
        has=page.locator(".jp-InputArea", has_text="Full battery"))
    passed_cell.scroll_into_view_if_needed()
    shot(page, "self-check")

    # nbgrader's Validate button (the student's whole-notebook check) agrees.
    save(page, lab, rel)
    validate_button(page).click()
    dialog = page.locator(".jp-Dialog-content")
    dialog.wait_for(timeout=RUN_ALL_MS)
    page.wait_for_function("el => !/Validating/.test(el.innerText)", arg=dialog.element_handle(), timeout=RUN_ALL_MS)
    text = dialog.inner_text()
    assert "Success! Your notebook passes all the tests." in text, text[-1500:]
    shot(page, "validate")
    page.locator(".jp-Dialog-button").last.click()


# (answer, right?) for "Compute the RMS of (3, 4)": sqrt(12.5) = 3.5355...
QUIZ_ANSWERS = [("5", False), ("3.536", True), ("3.5", False), ("sqrt(12.5)", True), ("12.5", False),
                ("3.54", True), ("7", False), ("3.535", True)]


def test_quiz_judges_the_text_in_the_box_on_check_and_on_enter(page, lab):
    """A practice quiz in the browser (normref/answer_form.py): each answer typed and checked at
    once, by clicking Check right after the last key or by pressing Enter, is the answer judged
    (the feedback shows it, and its verdict), never the one before; an empty box is told to type
    in the box and press Check or Enter; Show answer opens after an attempt; a choice question
    judges the option picked."""
    rel = "quiz-check.ipynb"
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from normref import practice\npractice.quiz('ps_rms_3_4')"),
        nbformat.v4.new_code_cell("practice.quiz('retrieval_axis')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, lab.root / rel)
    open_notebook(page, lab, rel)
    run_all(page)
    check_widget_views(page, rel)
    panel = page.locator(NOTEBOOK)
    form, feedback = panel.locator(".normref-answer-form").first, panel.locator(".normref-feedback").first
    box, check = form.locator("input[type=text]"), form.get_by_role("button", name="Check")
    reveal = form.get_by_role("button", name="Show answer")
    expect(reveal).to_be_disabled()
    check.click()  # an empty box
    expect(feedback).to_contain_text("no answer yet: type your answer in the box", timeout=PAGE_MS)
    assert "..." not in feedback.inner_text().replace("sqrt(...)", ""), feedback.inner_text()
    for i, (answer, right) in enumerate(QUIZ_ANSWERS * 2):
        box.fill("")
        box.press_sequentially(answer)  # typed, and at once:
        box.press("Enter") if i % 2 else check.click()
        expect(feedback.locator(".normref-judged code")).to_have_text(answer, timeout=PAGE_MS)
        expect(feedback).to_contain_text("✔ correct" if right else "✘ not yet", timeout=PAGE_MS)
    shot(page, "quiz", panel.locator(".jp-Cell").first)
    expect(reveal).to_be_enabled()
    reveal.click()
    expect(feedback).to_contain_text("Standard answer: sqrt((9 + 16) / 2)", timeout=PAGE_MS)
    choice = panel.locator(".normref-answer-form").nth(1)
    choice_feedback = panel.locator(".normref-feedback").nth(1)
    choice.get_by_role("button", name="Check").click()
    expect(choice_feedback).to_contain_text("pick one of the options, then press Check.", timeout=PAGE_MS)
    for option, right in (("the batch axis B", False), ("the feature axis D", True)):
        choice.get_by_role("radio", name=re.compile(re.escape(option))).check()
        choice.get_by_role("button", name="Check").click()
        expect(choice_feedback.locator(".normref-judged code")).to_contain_text(option, timeout=PAGE_MS)
        expect(choice_feedback).to_contain_text("✔ correct" if right else "✘ not yet", timeout=PAGE_MS)
    shot(page, "quiz-choice", panel.locator(".jp-Cell").nth(1))


def test_instructor_view_opens_a_lesson_source_as_a_notebook_that_runs(browser, lab, tmp_path_factory):
    """`make lab-instructor` (jupyter-instructor/ on JUPYTER_CONFIG_PATH): a lesson's MyST
    source opens as a notebook (jupytext) that runs, as the README's "For lesson authors" says,
    and nbgrader's instructor menu is there."""
    tmp = tmp_path_factory.mktemp("instructor")
    cmd = [str(BIN / "jupyter"), "lab", f"--ServerApp.root_dir={lab.root}",
           "--LabApp.default_url=/lab/tree/notebooks/00_start.ipynb"] + (["--allow-root"] if os.geteuid() == 0 else [])
    rel = "notebooks/01_layernorm.md"
    with serve(cmd, lab.root, tmp, "server-instructor.log", config_path=REPO / "jupyter-instructor") as author:
        context = browser.new_context(viewport=VIEWPORT)
        pg = context.new_page()
        pg.set_default_timeout(PAGE_MS)
        try:
            before = (lab.root / rel).read_bytes()
            open_notebook(pg, author, rel, accept_dialog=False)  # a notebook panel, its kernel idle
            assert pg.locator(f"{NOTEBOOK} h1").first.inner_text().startswith("01 · LayerNorm")
            run_all(pg)
            assert error_outputs(pg) == []
            outputs = " ".join(pg.locator(f"{NOTEBOOK} .jp-OutputArea-output").all_text_contents())
            assert "normref.layer_norm LN(1, 2, 3) ~ [-1.225, 0.0, 1.225]" in outputs, outputs[:2000]
            assert "Nbgrader" in pg.locator(".lm-MenuBar-itemLabel").all_inner_texts()
            shot(pg, "instructor-lesson-source")
            assert (lab.root / rel).read_bytes() == before  # running is not saving
        finally:
            shut_down_kernels(author)
            context.close()


def kernel_pids(lab: Lab) -> dict[str, int]:
    """``{notebook path: pid}`` of every running kernel of the server."""
    out = {}
    for s in lab.api("/api/sessions"):
        kid = s["kernel"]["id"]
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and f"kernel-{kid}.json" in (proc / "cmdline").read_text():
                    out[s["path"]] = int(proc.name)
            except OSError:
                continue
    return out


def _status_kib(pid: int, field: str) -> int:
    (kib,) = re.findall(rf"{field}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(kib)


def test_following_the_course_in_order_keeps_the_kernels_within_binders_memory(page, lab):
    """Issue 23: a student who followed the course ended with every kernel open (~2.7 GB, over
    Binder's 1-2 GB). Each lesson now ends by telling the student to close and shut down its
    notebook; done as it says (File ▸ Close and Shut Down Notebook…, confirmed), in order, the
    sum of the peak memory (VmHWM) of the kernels running at once stays under 1 GiB. Also
    printed: what the same kernels would hold together, left open. (Each lesson is followed once,
    by :func:`follow_lesson`: here, those the tests above did not follow.)"""
    follow_lesson(page, lab, LESSONS[-1])
    assert list(COURSE_RUN) == [f"notebooks/{lesson.name}" for lesson in LESSONS]  # in the course's order
    held_at_once = [r["held"] for r in COURSE_RUN.values()]
    peaks = {rel: r["peak"] for rel, r in COURSE_RUN.items()}
    worst = max(held_at_once)
    print(f"\ncourse in order, each lesson closed as it says: at most {worst / 2**20:.0f} MiB of kernels at once "
          f"(per lesson: {', '.join(f'{p / 2**20:.0f}' for p in peaks.values())} MiB); left open, the same "
          f"kernels would hold {sum(peaks.values()) / 2**20:.0f} MiB together")
    assert worst < BINDER_MEMORY_BYTES, f"{worst / 2**20:.0f} MiB of kernels at once, over Binder's 1 GiB"
    assert not kernel_pids(lab)
