"""The nbgrader assignments, graded by real nbgrader: every variant of the answer bank gets
exactly its expected points per cell, a blank notebook scores 0, a correct one writes nothing
to stderr, and the feedback shows the diagnosis but never the hidden tests.

The grades are those of the session's graded demo class (the ``graded_class`` fixture,
tests/graded_class.py: every variant of every assignment, handed in by one or more of its 30
students, graded once through ``grade_class`` with the sandbox); each check below reads every
student who handed in the variant it is about.
"""
from __future__ import annotations

import ast
import html
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader.demo import fill_answers
from grader.demo.answer_bank import ANSWERS, EXPECTED, MANUAL_CELLS
from graded_class import FOREIGN_KERNEL, FOREIGN_STUDENT

REPO = Path(__file__).resolve().parents[1]
SOURCE_NOTEBOOKS = sorted(REPO.glob("source/*/*.ipynb"))
ASSIGNMENTS = sorted(ANSWERS)

# What a failing hidden test must show in the feedback: (assignment, variant, diagnosis texts);
# the fault tags themselves ride in output metadata, never in the student's text.
DIAGNOSES = [
    ("practice", "unbiased_variance", ["20/3", "did you divide by n-1"]),
    ("practice", "pre_post_swapped", ["that is the original Post-LN"]),
    ("layernorm", "unbiased_variance", ["did you divide by n-1"]),  # graded on drawn D: no fixed factor
    ("layernorm", "low_precision_stats", ["x.astype(np.float32)"]),  # numpy words for numpy
    ("rmsnorm", "eps_outside_sqrt", ["eps belongs inside the square root", "drawn for this grading run"]),
    ("block", "residual_from_normed", ["the residual path must carry x itself", "x + F(Norm(x))"]),
    ("block", "mlp_reads_x", ["the feed-forward sublayer must read h = x + attention"]),
    ("layernorm_backward", "bwd_no_mean_term", ["dx is missing the gradient through the mean",
                                                "the mean depends on every x_i"]),
    ("modern", "is_pre_ln", ["that is Pre-LN, x + F(Norm(x))", "Peri-LN is x + out_norm(F(norm(x)))"]),
    ("modern", "qk_no_transpose", ["k was not transposed"]),
]

# nbgrader validate on answers that are partly right: (assignment, variant, what it must say).
VALIDATE_PARTIAL = [
    ("rmsnorm", "eps_outside_sqrt", "rms_norm_battery: 5/6 cases, 3.33 of 4 points: - tiny values 1e-3 with "
                                    "eps=1e-4: eps belongs inside"),
    ("rmsnorm", "low_precision_stats", "rms_norm_battery: 5/6 cases, 3.33 of 4 points: - float16 row [300, -300, "
                                       "300, -300]: the statistics were computed in the input's low precision"),
    # every failing case is named, float16's and bfloat16's (the Validate dialog named only the first)
    ("rmsnorm", "wrong_dtype", "rms_norm_battery: 4/6 cases, 2.67 of 4 points: - float16 row [300, -300, 300, "
                               "-300] and bfloat16 [2, 3, 8]: the output dtype must be the input dtype"),
]


def _grade_ids(nb_path: Path, *, grade: bool) -> list[str]:
    nb = nbformat.read(nb_path, as_version=4)
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade") is grade]


def _hidden_lines(nb_path: Path) -> list[str]:
    """The lines between ### BEGIN/END HIDDEN TESTS in a source notebook."""
    return _region_lines(nb_path, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def _region_lines(nb_path: Path, begin: str, end: str) -> list[str]:
    """The stripped, non-empty lines between ``begin`` and ``end`` markers in a notebook."""
    out, inside = [], False
    for cell in nbformat.read(nb_path, as_version=4).cells:
        for line in cell.source.splitlines():
            if begin in line:
                inside = True
            elif end in line:
                inside = False
            elif inside and line.strip() and not line.strip().startswith("#"):
                out.append(line.strip())
    return out


def _html_text(path: Path) -> str:
    """What a reader of the feedback page sees: tags stripped, entities decoded."""
    raw = path.read_text()
    raw = re.sub(r"<style.*?</style>|<script.*?</script>", "", raw, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


# ----------------------------------------------------------------- the bank itself (fast)


def test_every_assignment_has_a_bank_with_the_required_variants():
    assert ASSIGNMENTS == sorted(p.parent.name for p in SOURCE_NOTEBOOKS)
    for a in ASSIGNMENTS:
        assert {"correct", "blank", "partial"} <= set(ANSWERS[a]), a
        assert set(EXPECTED[a]) == set(ANSWERS[a]), a


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_bank_names_real_cells_and_every_grade_cell(assignment):
    source = next((REPO / "source" / assignment).glob("*.ipynb"))
    nb = nbformat.read(source, as_version=4)
    solution_ids = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells
                    if c.metadata.get("nbgrader", {}).get("solution")}
    grade_ids = set(_grade_ids(source, grade=True))
    for variant, answers in ANSWERS[assignment].items():
        assert set(answers) <= solution_ids, (variant, set(answers) - solution_ids)
        assert set(EXPECTED[assignment][variant]) == grade_ids, variant
    assert set(MANUAL_CELLS.get(assignment, ())) <= grade_ids


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_shows_no_solution_no_hidden_test_but_a_self_check(assignment):
    source = next((REPO / "source" / assignment).glob("*.ipynb"))
    release = REPO / "release" / assignment / source.name
    text = "\n".join(c.source for c in nbformat.read(release, as_version=4).cells)
    for marker in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "BEGIN MARK SCHEME", "Mark scheme"):
        assert marker not in text, marker
    solution = _region_lines(source, "BEGIN SOLUTION", "END SOLUTION")
    hidden = _hidden_lines(source)
    assert solution and hidden
    assert not [line for line in solution + hidden if line in text]
    # every grade cell that students run prints a normref diagnosis
    graded = [c for c in nbformat.read(release, as_version=4).cells
              if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"]
    assert graded and all(re.search(r"check_\w+\(", c.source) for c in graded)


# Issue 16 item 3: the first visible check of a question goes through the checker, so Run All
# stops on its diagnosis (an AssertionError naming the fault or the rule), never on a raw
# broadcasting error, and a reference call fails it as grading does.
_F_RMS = ("import torch.nn.functional as F\n\n\ndef rms_norm(x, weight, eps=1e-6):\n"
          "    return F.rms_norm(x, (x.shape[-1],), weight, eps)")
_F_MODULE = ("import torch.nn.functional as F\n\n\nclass RMSNorm(nn.Module):\n"
             "    def __init__(self, dim, eps=1e-6):\n        super().__init__()\n        self.eps = eps\n"
             "        self.weight = nn.Parameter(torch.ones(dim))\n\n    def forward(self, x):\n"
             "        return F.rms_norm(x.float(), (x.shape[-1],), self.weight, self.eps).to(x.dtype)")
# the first thing said is what grading gives, in one line (issue 23): its scan removes the cell
# that calls F.rms_norm (normref.tamper, the same scan the self-check runs), so the question gets 0
_RULE = "0 points: calls F.rms_norm — implement it with tensor operations"
FIRST_CHECKS = [  # (assignment, answers, the first visible check, what its error says)
    ("rmsnorm", ANSWERS["rmsnorm"]["missing_keepdim"], "rms_norm_shape", "without keepdim=True the reduced axis"),
    ("layernorm", ANSWERS["layernorm"]["missing_keepdim"], "layer_norm_seed", "without keepdims=True the reduced"),
    ("rmsnorm", {"rms_norm_impl": _F_RMS}, "rms_norm_shape", _RULE),
    ("block", {**ANSWERS["block"]["correct"], "rms_module_impl": _F_MODULE}, "rms_module_quick", _RULE),
    ("block", ANSWERS["block"]["mlp_reads_x"], "block_quick", "the feed-forward sublayer must read h"),
    ("layernorm_backward", ANSWERS["layernorm_backward"]["bwd_no_mean_term"], "layer_norm_backward_seed",
     "dx is missing the gradient through the mean"),
]


def _run_until(nb: nbformat.NotebookNode, grade_id: str, capsys) -> tuple[BaseException | None, str]:
    """Run the notebook's code cells in order, as Run All does, up to and including
    ``grade_id``; each cell's source is registered with linecache under its own name, as
    IPython does, so the checker can read the student's code. Returns (what the cell raised,
    what it printed)."""
    import linecache

    ns: dict = {"__name__": "__main__"}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        name = f"<cell-{i}>"
        linecache.cache[name] = (len(cell.source), None, cell.source.splitlines(True), name)
        capsys.readouterr()
        try:
            exec(compile(cell.source, name, "exec"), ns)
        except Exception as e:  # noqa: BLE001 - what Run All would stop on
            if cell.metadata.get("nbgrader", {}).get("grade_id") != grade_id:
                raise AssertionError(f"Run All stopped before {grade_id}, in cell {i}: {e!r}") from e
            return e, capsys.readouterr().out
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return None, capsys.readouterr().out
    raise AssertionError(f"no cell {grade_id}")


@pytest.mark.parametrize("assignment, answers, grade_id, text", FIRST_CHECKS,
                         ids=[f"{a}-{g}-{i}" for i, (a, _, g, _) in enumerate(FIRST_CHECKS)])
def test_the_first_visible_check_diagnoses_instead_of_raising(assignment, answers, grade_id, text, capsys):
    nb = fill_answers(REPO / "release" / assignment / f"{assignment}.ipynb", answers)
    error, shown = _run_until(nb, grade_id, capsys)
    assert type(error) is AssertionError, repr(error)  # not the RuntimeError/ValueError of a bare call
    assert " ".join(text.split()) in " ".join(str(error).split()), str(error)
    assert text.split()[0] in shown and "[fault:" not in shown, shown  # the diagnosis was shown first
    # the checker is what stopped it: the cell's first statement (after its docstring) calls it
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    first = next(n for n in ast.parse(cell.source).body[1:] if not isinstance(n, (ast.Import, ast.ImportFrom)))
    assert isinstance(first, ast.Assign) and ast.unparse(first.value).startswith("check_"), cell.source


@pytest.mark.parametrize("assignment", ["block", "layernorm", "layernorm_backward", "modern", "rmsnorm"])
def test_the_correct_answers_pass_every_visible_check_in_run_all_order(assignment, capsys):
    release = REPO / "release" / assignment / f"{assignment}.ipynb"
    nb = fill_answers(release, ANSWERS[assignment]["correct"])
    for gid in ("rms_norm_shape", "layer_norm_seed", "layer_norm_backward_seed", "rms_module_quick",
                "pre_ln_quick", "post_ln_quick", "block_quick", "peri_ln_quick", "qk_logits_quick", "dyt_quick"):
        if any(c.metadata.get("nbgrader", {}).get("grade_id") == gid for c in nb.cells):
            error, shown = _run_until(nb, gid, capsys)
            # a quick check that passes says what the full battery still checks, never "all correct"
            assert error is None and "cases passed (score 1.00); still to check" in shown, (gid, error, shown)

# Issue 16 item 5: the seed's one build challenge, "implement RMSNorm", and its "Standard
# answer" (the seed's text, verbatim): shown in the feedback after grading, never released.
SEED_STANDARD_ANSWER = [
    "Standard answer · compare after your attempt",
    "rms = x.float().pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()",
    "return (x.float() * rms * weight).to(x.dtype)",
    "y = rms_norm(torch.randn(2, 3, 8), torch.ones(8))",
    "assert y.shape == (2, 3, 8)",
    "`keepdim=True` preserves `[B, T, 1]`, so the scale broadcasts across features without changing either outer axis.",
]
BUILD_CHALLENGES = {"rmsnorm": "rms_norm_impl"}  # assignment: the answer cell the seed's challenge is


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_standard_answers_are_in_source_and_never_released(assignment):
    source = nbformat.read(next((REPO / "source" / assignment).glob("*.ipynb")), as_version=4)
    release = nbformat.read(REPO / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    tagged = [i for i, c in enumerate(source.cells) if "standard-answer" in c.metadata.get("tags", [])]
    if assignment in BUILD_CHALLENGES:  # right after the answer cell it answers, the seed's text
        (i,) = tagged
        assert source.cells[i - 1].metadata["nbgrader"]["grade_id"] == BUILD_CHALLENGES[assignment]
        assert all(line in source.cells[i].source for line in SEED_STANDARD_ANSWER)
    else:
        assert not tagged
    released = "\n".join(c.source for c in release.cells)
    assert not any("standard-answer" in c.metadata.get("tags", []) for c in release.cells)
    assert SEED_STANDARD_ANSWER[0] not in released and SEED_STANDARD_ANSWER[-1] not in released

# ----------------------------------------------------------------- nbgrader round trips (slow)


@pytest.mark.slow
@pytest.mark.parametrize("path", SOURCE_NOTEBOOKS, ids=lambda p: p.parent.name)
def test_source_notebook_passes_nbgrader_validate(path):
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "validate", str(path)],
                          capture_output=True, text=True, cwd=REPO)
    assert "Success! Your notebook passes all the tests." in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_each_variant_gets_exactly_the_expected_points(graded_class, assignment):
    grades = graded_class.grades(assignment)
    manual = set(MANUAL_CELLS.get(assignment, ()))
    assert {graded_class.variant(assignment, st) for st in grades} == set(ANSWERS[assignment])  # every variant
    for student, got_cells in grades.items():
        variant = graded_class.variant(assignment, student)
        want = EXPECTED[assignment][variant]
        got = {gid: score for gid, (score, _) in got_cells.items()}
        assert got == pytest.approx(want, abs=1e-9), (
            student, variant, graded_class.diagnoses(assignment, student, want, got))
        flagged = {gid for gid, (_, needs) in got_cells.items() if needs}
        # a written answer needs a grader exactly when the variant wrote one
        assert flagged == manual & set(ANSWERS[assignment][variant]), (student, variant)


@pytest.mark.slow
def test_the_class_was_graded_with_warm_kernels(graded_class):
    """The points above are warm kernels' (forked from each worker's zygote, grader/kernel/warm.py);
    test_warm grades every variant with fresh kernels to the same points."""
    n = len(graded_class.run.autograde.graded)
    assert n >= sum(len(v) for v in ANSWERS.values())
    assert f"autograde: warm kernels for all {n} notebooks" in graded_class.lines, [
        ln for ln in graded_class.lines if "kernel" in ln]


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_submission_kernel_metadata_is_ignored(graded_class, assignment):
    student = graded_class.student(assignment, "correct")
    assert student == FOREIGN_STUDENT
    submitted = nbformat.read(graded_class.notebook("submitted", assignment, student), as_version=4)
    assert submitted.metadata["kernelspec"]["name"] == FOREIGN_KERNEL["name"]
    graded = nbformat.read(graded_class.notebook("autograded", assignment, student), as_version=4)
    assert graded.metadata["kernelspec"]["name"] == "python3"
    got = {g: score for g, (score, _) in graded_class.grades(assignment)[student].items()}
    assert got == pytest.approx(EXPECTED[assignment]["correct"])
    assert sum(got.values()) > 0


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_unanswered_release_scores_zero_without_crashing(graded_class, assignment):
    grades = graded_class.grades(assignment)
    for student in graded_class.students(assignment, "blank"):
        assert grades[student] and all(score == 0 for score, _ in grades[student].values())
        assert not any(needs for _, needs in grades[student].values())
        graded = nbformat.read(graded_class.notebook("autograded", assignment, student), as_version=4)
        test_cells = [c for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade")
                      and c.cell_type == "code"]
        assert test_cells and all(c.outputs for c in test_cells)  # every test cell ran


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_correct_answer_leaves_stderr_empty(graded_class, assignment):
    for student in graded_class.students(assignment, "correct"):
        graded = nbformat.read(graded_class.notebook("autograded", assignment, student), as_version=4)
        for cell in graded.cells:
            if cell.cell_type != "code":
                continue
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            for out in cell.outputs:
                assert out.output_type != "error", (student, gid, out.get("ename"), out.get("evalue"))
                assert not (out.output_type == "stream" and out.name == "stderr"), (student, gid, out.text)


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_feedback_never_contains_hidden_tests(graded_class, assignment):
    hidden = _hidden_lines(next((REPO / "source" / assignment).glob("*.ipynb")))
    assert hidden, f"{assignment} has no hidden tests"
    for variant in ANSWERS[assignment]:
        student = graded_class.student(assignment, variant)
        # control: the hidden tests did run in the instructor's autograded copy
        autograded = graded_class.notebook("autograded", assignment, student).read_text()
        graded_src = "\n".join(c.source for c in nbformat.reads(autograded, as_version=4).cells)
        assert all(line in graded_src for line in hidden), variant
        page = _html_text(graded_class.feedback(assignment, student))
        assert "HIDDEN TESTS" not in page, variant
        leaked = [line for line in hidden if line in page]
        assert not leaked, (variant, leaked)


@pytest.mark.slow
@pytest.mark.parametrize("assignment, variant, texts", DIAGNOSES,
                         ids=[f"{a}-{v}" for a, v, _ in DIAGNOSES])
def test_feedback_of_a_failing_hidden_test_shows_the_diagnosis(graded_class, assignment, variant, texts):
    student = graded_class.student(assignment, variant)
    got = graded_class.grades(assignment)[student]
    assert any(got[g][0] < EXPECTED[assignment]["correct"][g] for g in got)  # it does fail
    page = " ".join(_html_text(graded_class.feedback(assignment, student)).split())  # lines wrapped at spaces
    for text in texts:
        assert " ".join(text.split()) in page, (assignment, variant, text)
    assert "[fault:" not in page, (assignment, variant)


@pytest.mark.slow
def test_block_warmup_plots_draw_for_students_and_are_skipped_while_grading(monkeypatch):
    """The written answer's plots come from normref (Xiong et al.'s Fig. 2-3, measured); the
    cell draws both in a student's kernel and nothing while nbgrader executes it."""
    from normref.plots import Plot

    release = REPO / "release" / "block" / "block.ipynb"
    cell = next(c for c in nbformat.read(release, as_version=4).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "warmup_plots")
    shown: list = []
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    exec(cell.source, {"display": shown.append})
    assert shown == []
    monkeypatch.delenv("NBGRADER_EXECUTION")
    exec(cell.source, {"display": shown.append})
    assert [type(p) for p in shown] == [Plot, Plot]
    grads, curves = shown[0].data, shown[1].data
    assert grads["post"][-1] > grads["pre"][-1]  # the output side: Post-LN's gradient is larger
    final = curves["final"]
    assert final[("post", False)] > final[("post", True)]  # warmup helps Post-LN


@pytest.mark.slow
@pytest.mark.parametrize("assignment, variant, text", VALIDATE_PARTIAL, ids=[v for _, v, _ in VALIDATE_PARTIAL])
def test_validate_fails_a_partly_right_answer_naming_the_question(tmp_path, assignment, variant, text):
    """Issue 16 item 2: Validate no longer says "Success!" to an answer grading gives 3.33 of 4."""
    release = REPO / "release" / assignment / f"{assignment}.ipynb"
    nb = fill_answers(release, ANSWERS[assignment][variant])
    path = tmp_path / release.name
    nbformat.write(nb, path)
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "validate", str(path)],
                          capture_output=True, text=True, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert "Success!" not in out and " ".join(text.split()) in " ".join(out.split()), out
    # the error is the message alone: no traceback frame of the course's code (issue 23)
    assert "handback.py" not in out and "in as_graded" not in out and "Traceback" not in out, out


@pytest.mark.slow
@pytest.mark.parametrize("assignment", sorted(BUILD_CHALLENGES))
def test_feedback_shows_the_seeds_standard_answer_after_the_answer_cell(graded_class, assignment):
    for variant in ("blank", "eps_outside_sqrt"):
        student = graded_class.student(assignment, variant)
        page = " ".join(_html_text(graded_class.feedback(assignment, student)).split())
        for line in SEED_STANDARD_ANSWER:
            assert " ".join(line.replace("`", "").split()) in page, (variant, line)
        # after the student's own answer, before the checks that follow it
        mine = "raise NotImplementedError()" if variant == "blank" else "sqrt() + eps"
        assert page.index(mine) < page.index(SEED_STANDARD_ANSWER[0]) < page.index("Visible check (1 point)")
    # the autograded notebook itself (what formgrader shows, what is scored) is left as it was
    blank = graded_class.student(assignment, "blank")
    graded = nbformat.read(graded_class.notebook("autograded", assignment, blank), as_version=4)
    assert not any(SEED_STANDARD_ANSWER[0] in c.source for c in graded.cells)
