"""The class report in a real browser (Debian's Chromium through Playwright, from file://, no
server): sort the student table, filter it to one group of wrong answers, follow a feedback link.

The course is built on disk without nbgrader (fast): five students' layernorm notebooks, each
with an answer filled in and the outputs its hidden test hands back on one run's drawn inputs,
are put where autograded notebooks live and scored as the scoring stage scores them
(tests/autograded.py); the groups are read from the records that scoring keeps. Two students
wrote the same mistake, which is in no fault list, in different words: (x_hat + beta) * gamma.
Screenshots go to ``build/report-browser/``.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from autograded import write_autograded

from grader.outputs.report import build_report, write_report

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
ARTEFACTS = REPO / "build" / "report-browser"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
HEAD = "def layer_norm(x, weight, bias, eps=1e-5):\n"
ANSWERS = {
    "ann": HEAD + ("    h = x.astype(np.float32)\n    m = h.mean(-1, keepdims=True)\n"
                   "    v = ((h - m) ** 2).mean(-1, keepdims=True)\n"
                   "    return (((h - m) / np.sqrt(v + eps) + bias) * weight).astype(x.dtype)\n"),
    "bob": HEAD + ("    xf = x.astype(np.float32)\n    mu = np.mean(xf, axis=-1, keepdims=True)\n"
                   "    y = (xf - mu) / np.sqrt(np.var(xf, axis=-1, keepdims=True) + eps)\n"
                   "    y = y + bias\n    return (y * weight).astype(x.dtype)\n"),
    "cat": HEAD + ("    h = x.astype(np.float32)\n    m = h.mean(-1, keepdims=True)\n"
                   "    return ((h - m) / (h.var(-1, keepdims=True) + eps) * weight + bias).astype(x.dtype)\n"),
    "dan": HEAD + ("    h = x.astype(np.float32)\n    m = h.mean(-1, keepdims=True)\n"
                   "    return ((h - m) / np.sqrt(h.var(-1, keepdims=True) + eps) * weight + bias).astype(x.dtype)\n"),
}
SCORES = {("layernorm", "ann"): {"layer_norm_seed": 0.0, "layer_norm_battery": 2.0},
          ("layernorm", "bob"): {"layer_norm_seed": 0.0, "layer_norm_battery": 2.0},
          ("layernorm", "cat"): {"layer_norm_seed": 0.0, "layer_norm_battery": 0.0},
          ("layernorm", "dan"): {"layer_norm_seed": 1.0, "layer_norm_battery": 3.0},
          ("layernorm", "eve"): {"layer_norm_seed": 0.0, "layer_norm_battery": 0.0}}
MAX = {"layernorm": {"layer_norm_seed": 1.0, "layer_norm_battery": 3.0}}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("report") / "course"
    for d in ("release", "source"):
        shutil.copytree(REPO / d / "layernorm", root / d / "layernorm")
    for s in ("ann", "bob", "cat", "dan", "eve"):  # eve keeps the release's stub
        write_autograded(root, "layernorm", s, {"layer_norm_impl": ANSWERS[s]} if s in ANSWERS else {}, 2026)
        fb = root / "feedback" / s / "layernorm"
        fb.mkdir(parents=True)
        (fb / "layernorm.html").write_text(f"<html><body><h1>Feedback for {s}</h1></body></html>")
    rep = build_report(root, ["layernorm"], SCORES, MAX)
    return write_report(rep, root / "reports"), rep


def test_groups_put_the_same_unlisted_mistake_together(report):
    _, rep = report
    groups = rep.groups["layernorm"]
    assert [g.students for g in groups] == [["ann", "bob"], ["cat"], ["eve"]]
    assert groups[0].variant == "bias=inside"
    assert groups[0].diagnosis.startswith("you added the bias before multiplying by the weight, (xhat + beta) * gamma")
    assert groups[1].variant == "root=none"
    assert "not implemented yet" in groups[2].diagnosis
    assert not rep.groups_missing


def test_sort_filter_to_a_group_and_follow_a_feedback_link(report, chromium):
    page_path, rep = report
    group_id = rep.groups["layernorm"][0].group_id
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.goto(page_path.as_uri())
            rows = page.locator("#students tbody tr")
            expect(rows).to_have_count(5)
            total = page.locator("#students th", has_text="total")
            total.click()  # ascending
            expect(total).to_have_attribute("aria-sort", "ascending")
            assert rows.first.get_attribute("data-student") in ("cat", "eve")  # 0 points
            total.click()  # descending
            expect(total).to_have_attribute("aria-sort", "descending")
            assert rows.first.get_attribute("data-student") == "dan"  # 4 of 4
            assert [rows.nth(i).get_attribute("data-student") for i in range(5)][1:3] == ["ann", "bob"]
            page.select_option("#group", group_id)
            visible = page.locator("#students tbody tr:visible")
            expect(visible).to_have_count(2)
            assert sorted(visible.nth(i).get_attribute("data-student") for i in range(2)) == ["ann", "bob"]
            expect(page.locator("#shown")).to_have_text("2")
            page.screenshot(path=str(ARTEFACTS / "filtered-to-group.png"))
            page.locator("#clear").click()
            expect(page.locator("#students tbody tr:visible")).to_have_count(5)
            page.locator(f"button[data-show-group='{group_id}']").click()  # from the groups table
            expect(page.locator("#students tbody tr:visible")).to_have_count(2)
            page.locator("#students tr[data-student='bob'] a.feedback").click()
            page.wait_for_load_state()
            assert page.url.endswith("/feedback/bob/layernorm/layernorm.html")
            expect(page.locator("h1")).to_have_text("Feedback for bob")
            page.go_back()
            page.locator("#groups").scroll_into_view_if_needed()
            page.screenshot(path=str(ARTEFACTS / "groups.png"), full_page=False)
        finally:
            browser.close()
