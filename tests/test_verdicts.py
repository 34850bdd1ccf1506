"""Issue 30 items 1-2: one verdict (the self-check, Validate and ``make grade`` judge an answer with
the same code), and never a false accusation.

Three ways of judging a notebook, each as it is done for real:

* the self-check and Validate: the notebook's cells run in order as ``nbgrader validate`` runs
  them (tests/notebook_run.py: ``In`` history, linecache, ``NBGRADER_EXECUTION=validate``, the
  notebook named by ``JPY_SESSION_NAME``): what each test cell shows, and which cells fail;
* grading: the demo class graded once for the session by ``grade_class`` with real sandboxed
  kernels (tests/graded_class.py), every answer-bank variant at least once: the gradebook's
  points and the feedback's text; and, for the honest-but-unusual notebooks below, the
  hand-back's own code in this process (tests/notebook_run.py, ``graded_in_process``), with a
  real kernel where the kernel is what is tested (megabytes of output, a plot, progress bars).

Expected points are the answer bank's hand-derived ``EXPECTED`` (grader/demo/answer_bank.py),
never the code under test's.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest

from grader.demo import fill_answers
from grader.demo.answer_bank import ANSWERS, EXPECTED, MANUAL_CELLS
from normref.rules import REVIEW_PREFIX, RULE_PREFIX

sys.path.insert(0, str(Path(__file__).parent))
from notebook_run import graded_in_process, run_cells  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ASSIGNMENTS = sorted(ANSWERS)


def _release(assignment: str) -> Path:
    return REPO / "release" / assignment / f"{assignment}.ipynb"


def _source(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(REPO / "source" / assignment / f"{assignment}.ipynb", as_version=4)


def _points(assignment: str) -> dict[str, float]:
    nb = nbformat.read(_release(assignment), as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"].get("points") or 0)
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}


def _flat(text) -> str:
    return " ".join(str(text).split())


def _self_check_points(gid: str, cell, points: float) -> float:
    """What the notebook's own check gives: all or nothing for a visible check, ``points x score``
    for a battery or a short answer; 0 when the cell made no result (a NameError)."""
    from grader.scoring.inputs import QUESTIONS

    r = cell.result
    if r is None or not hasattr(r, "score"):
        return 0.0
    return points * float(r.passed) if QUESTIONS[gid].all_or_nothing else round(points * r.score, 2)


def _lines(text: str, prefix: str, gid: str) -> list[str]:
    """The lines of ``text`` that start with ``prefix`` (a broken rule's, a review's), unwrapped,
    without grading's ``<gid>: ``."""
    flat = _flat(text).replace(f"{gid}: ", "")
    return [prefix + part.split(RULE_PREFIX)[0].split(REVIEW_PREFIX)[0].strip()
            for part in flat.split(prefix)[1:]]


def _cases_line(text: str) -> str | None:
    """A check's head line, ``"rms_norm: 5/6 cases passed (score 0.83)"``, or None."""
    import re

    m = re.search(r"([\w.\- ]+): (\d+)/(\d+) cases passed \(score [0-9.]+\)", _flat(text))
    return m.group(0).strip() if m else None


# --------------------------------------------------------------------------- lesson 01's cell

NATURAL_LAYER_NORM = ("def my_layer_norm(x, weight, bias, eps=1e-5):\n"
                      "    mean = x.mean(axis=-1, keepdims=True)\n"
                      "    var = x.var(axis=-1, keepdims=True)\n"
                      "    return (x - mean) / np.sqrt(var + eps) * weight + bias\n")


def test_lesson_01_natural_layer_norm_scores_full_with_no_flag():
    """Lesson 01's "Your turn" cell, answered with the most natural numpy LayerNorm, after the
    lesson's cells that set the globals ``var`` (with ``normref.layer_norm`` on the same line's
    cell), ``mu``, ``x``: the function's ``var`` and ``mean`` are its own, ``x.var`` an attribute.
    It was told "0 points: calls normref.layer_norm (line 8 of the cell that sets var)". (A cell
    ``import numpy as np`` is added before it: lesson 01 does not import numpy, which another
    change fixes.)"""
    lesson = nbformat.read(REPO / "notebooks" / "01_layernorm.ipynb", as_version=4)
    code = [c for c in lesson.cells if c.cell_type == "code"]
    imports = next(c for c in code if "import normref" in c.source)
    worked = next(c for c in code if "var = " in c.source and "normref.layer_norm" in c.source)
    turn = next(c for c in code if "def my_layer_norm" in c.source)
    assert "normref.check_layer_norm(my_layer_norm, quick=True)" in turn.source
    answer = NATURAL_LAYER_NORM + "\nresult = " + turn.source.split("\n\n")[-1].strip() + "\n"
    megabytes = "for i in range(2000):\n    print('line', i, 'x' * 1000)\n"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in (
        imports.source, worked.source, megabytes, PLOT_AND_PROGRESS, "import numpy as np", answer)])
    run = run_cells(nb, validate=False)
    assert "var" in run.namespace and "mean" not in run.namespace  # the lesson's global var is there
    result = run.namespace["result"]
    assert result.passed and result.score == 1.0 and result.breaches == [] and result.reviews == [], result.report()
    assert _cases_line(result.report()) == "layer_norm: 2/2 cases passed (score 1.00)"


def test_the_lesson_01_answer_in_the_layernorm_assignment_gets_the_same_points_three_ways():
    """The same natural LayerNorm as the layernorm assignment's answer (statistics in x's dtype,
    weight float32), after a scratch cell setting ``var`` with ``normref.layer_norm``: no rule
    line, no review, and the same points in the self-check, Validate and grading, derived from
    the battery: the seed's two cases pass (the visible point); of the six battery cases only the
    float16 one fails (x.var of [300, -300, ...] overflows float16, and float32's weight makes
    the output float32): 5 of 6, 2.5 of 3 points."""
    answer = NATURAL_LAYER_NORM.replace("my_layer_norm", "layer_norm")
    nb = _with_scratch("layernorm", {"layer_norm_impl": answer},
                       ["import normref\nvar = normref.layer_norm(np.ones(3) * [1, 2, 3])\nprint(var)"])
    run = run_cells(nb, sealed=True)
    want = {"layer_norm_seed": 1.0, "layer_norm_battery": 2.5}
    points = _points("layernorm")
    assert {g: _self_check_points(g, c, points[g]) for g, c in run.cells.items()} == want
    assert {g for g, c in run.cells.items() if c.error is not None} == {"layer_norm_battery"}  # Validate
    assert "2.5 of 3 points" in _flat(run.cells["layer_norm_battery"].error)
    graded = graded_in_process(nb, _source("layernorm"), run)
    assert {g: round(points[g] * s.fraction, 2) for g, s in graded.items()} == want
    for gid, cell in run.cells.items():
        for text in (cell.printed, graded[gid].text):
            assert RULE_PREFIX not in text and REVIEW_PREFIX not in text, text
        assert graded[gid].flags == []


# --------------------------------------------------------------------------- the answer bank, three ways


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_self_check_validate_and_grading_agree_on_the_answer_bank(assignment, graded_class):
    """Every variant of the answer bank: the self-check's points, Validate's failing cells and
    grading's points are the answer bank's; a broken rule's lines and the review lines are the
    same words in all three; a visible check (public cases in both) shows the same text in the
    notebook and the feedback; a battery (public cases in the notebook, drawn ones in grading)
    names the same mistakes (fault kinds) and passes the same number of cases."""
    from grader.scoring.scores import RECORD_KEY  # noqa: F401 - the metadata the feedback output carries
    from grader.scoring.inputs import QUESTIONS
    from normref.faults import METADATA_KEY

    points = _points(assignment)
    manual = set(MANUAL_CELLS.get(assignment, ()))
    grades = graded_class.grades(assignment)
    bad = []
    for variant, answers in ANSWERS[assignment].items():
        want = {g: p for g, p in EXPECTED[assignment][variant].items() if g not in manual}
        run = run_cells(fill_answers(_release(assignment), answers), beside=_release(assignment).parent)
        student = graded_class.student(assignment, variant)
        autograded = nbformat.read(graded_class.notebook("autograded", assignment, student), as_version=4)
        feedback = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in autograded.cells}
        for gid, expected in want.items():
            cell = run.cells[gid]
            mine = _self_check_points(gid, cell, points[gid])
            graded = grades[student][gid][0]
            failed = cell.error is not None
            where = f"{assignment}/{variant}/{gid}"
            if not (mine == graded == expected):
                bad.append(f"{where}: self-check {mine}, grading {graded}, answer bank {expected}")
            if failed != (expected < points[gid]):
                bad.append(f"{where}: Validate {'failed' if failed else 'passed'} a cell worth {expected} of "
                           f"{points[gid]}: {cell.error!r}"[:400])
            if failed and QUESTIONS[gid].kind == "function" and not QUESTIONS[gid].all_or_nothing and \
                    cell.result is not None and f"{expected:g} of {points[gid]:g} points" not in _flat(cell.error):
                bad.append(f"{where}: Validate says {_flat(cell.error)[:200]!r}, grading gives {expected:g}")
            outputs = feedback[gid].get("outputs", [])
            text = "".join(o.get("data", {}).get("text/plain", "") for o in outputs)
            shown = cell.printed
            for prefix in (RULE_PREFIX, REVIEW_PREFIX):
                if _lines(shown, prefix, gid) != _lines(text, prefix, gid):
                    bad.append(f"{where}: the notebook says {_lines(shown, prefix, gid)}, the feedback "
                               f"{_lines(text, prefix, gid)}")
            if cell.result is None:  # the check never ran (a NameError): grading hands nothing back
                if graded != 0:
                    bad.append(f"{where}: the notebook's check raised {cell.error!r}, grading gave {graded}")
                continue
            q = QUESTIONS[gid]
            if q.all_or_nothing or q.kind == "values":  # the same public cases: the same text
                body = text.split("\n", 1)[1] if text.startswith(("The visible check", "Checked by")) else text
                if _flat(body) != _flat(shown) and not _lines(shown, RULE_PREFIX, gid):
                    bad.append(f"{where}: the notebook shows {_flat(shown)[:300]!r}, the feedback "
                               f"{_flat(body)[:300]!r}")
            else:  # drawn cases: the same number passed, the same mistakes named
                if (_cases_line(shown) or "").split(" (score")[0] != (_cases_line(text) or "").split(" (score")[0]:
                    bad.append(f"{where}: the notebook's {_cases_line(shown)!r}, the feedback's {_cases_line(text)!r}")
                faults = sorted({k for o in outputs for k in o.get("metadata", {}).get(METADATA_KEY, {})
                                 .get("faults", [])})
                if faults != sorted(set(cell.result.faults)):
                    bad.append(f"{where}: the notebook names {sorted(set(cell.result.faults))}, the feedback {faults}")
    assert not bad, "\n".join(bad)


# --------------------------------------------------------------------------- honest but unusual

#: A scratch cell that sets, with references, globals of the names an answer's locals reuse.
SCRATCH_GLOBALS = ("import torch\nimport torch.nn.functional as F\nimport normref\n"
                   "_x = torch.randn(2, 8)\n"
                   "var = normref.layer_norm(_x)\n"
                   "mean = F.layer_norm(_x, (8,))\n"
                   "std = torch.nn.LayerNorm(8)(_x)\n"
                   "weight = normref.rms_norm(_x)\n"
                   "norm = torch.nn.RMSNorm(8)\n"
                   "print(var.shape, mean.shape, std.shape, weight.shape, norm)\n")
HONEST = {
    "rmsnorm": {"rms_norm_impl": (
        "def rms_norm(x, weight, eps=1e-6):\n"
        "    h = x.float()\n"
        "    mean = h.pow(2).mean(dim=-1, keepdim=True)  # the mean square\n"
        "    var = mean + eps\n"
        "    std = var.sqrt()\n"
        "    norm = h / std\n"
        "    return (norm * weight).to(x.dtype)\n")},
    "layernorm": {"layer_norm_impl": (
        "def layer_norm(x, weight, bias, eps=1e-5):\n"
        "    h = x.astype(np.float32)\n"
        "    mean = h.mean(axis=-1, keepdims=True)\n"
        "    var = h.var(axis=-1, keepdims=True)\n"
        "    std = np.sqrt(var + eps)\n"
        "    norm = (h - mean) / std\n"
        "    return (norm * weight + bias).astype(x.dtype)\n")},
    "block": {**ANSWERS["block"]["correct"],
              "rms_module_impl": (
                  "class RMSNorm(nn.Module):\n"
                  "    def __init__(self, dim, eps=1e-6):\n"
                  "        super().__init__()\n"
                  "        self.eps = eps\n"
                  "        self.weight = nn.Parameter(torch.ones(dim))\n\n"
                  "    def forward(self, x):\n"
                  "        var = x.float().pow(2).mean(dim=-1, keepdim=True)\n"
                  "        norm = x.float() * torch.rsqrt(var + self.eps)\n"
                  "        return (norm * self.weight).to(x.dtype)\n"),
              "pre_ln_impl": "def pre_ln(x, sublayer, norm):\n    return x + sublayer(norm(x))",
              "post_ln_impl": "def post_ln(x, sublayer, norm):\n    mean = x + sublayer(x)\n    return norm(mean)"},
}


def _with_scratch(assignment: str, answers: dict, scratch: list[str]) -> nbformat.NotebookNode:
    """The released notebook with ``answers``, and ``scratch`` cells inserted right after its
    imports cell (before every answer cell)."""
    nb = fill_answers(_release(assignment), answers)
    at = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code") + 1
    nb.cells[at:at] = [nbformat.v4.new_code_cell(s) for s in scratch]
    return nb


def _assert_full_and_clean(assignment: str, nb, run, graded) -> None:
    """Every automatic question at full points with no rule line and no review line, in the
    self-check's display, Validate (no failing cell) and grading (points, feedback, flags)."""
    points = _points(assignment)
    manual = set(MANUAL_CELLS.get(assignment, ()))
    for gid, cell in run.cells.items():
        if gid in manual:
            continue
        assert cell.error is None, (gid, cell.error)
        assert _self_check_points(gid, cell, points[gid]) == points[gid], (gid, cell.printed)
        assert RULE_PREFIX not in cell.printed and REVIEW_PREFIX not in cell.printed, (gid, cell.printed)
        s = graded[gid]
        assert s.fraction == 1.0 and s.flags == [], (gid, s.text, s.flags)
        assert RULE_PREFIX not in s.text and REVIEW_PREFIX not in s.text, (gid, s.text)


@pytest.mark.parametrize("assignment", sorted(HONEST))
def test_answers_reusing_the_names_of_earlier_globals_get_full_marks_with_no_flag(assignment):
    """Honest answers whose locals, parameters and attributes are named ``var``, ``mean``, ``std``,
    ``weight``, ``norm`` (``self.weight``; Pre-/Post-LN's ``norm`` parameter), after a scratch cell
    that set globals of those names with reference normalizations: full marks and no flag in the
    self-check, Validate and grading."""
    nb = _with_scratch(assignment, HONEST[assignment], [SCRATCH_GLOBALS])
    run = run_cells(nb, sealed=True)
    assert {"var", "mean", "std", "weight", "norm"} <= set(run.namespace)
    _assert_full_and_clean(assignment, nb, run, graded_in_process(nb, _source(assignment), run))


PLOT_AND_PROGRESS = ("import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
                     "from tqdm.auto import tqdm\n"
                     "for _ in tqdm(range(3), desc='warm-up'):\n    pass\n"
                     "fig, ax = plt.subplots()\nax.plot([1, 2, 3], [1, 4, 9])\nplt.show()\n")
RMS_WITH_PROGRESS = ("from tqdm.auto import tqdm\n\n"
                     "def rms_norm(x, weight, eps=1e-6):\n"
                     "    h = x.float()\n"
                     "    for _ in tqdm(range(1), leave=False):  # a progress bar inside the answer\n"
                     "        ms = h.pow(2).mean(dim=-1, keepdim=True)\n"
                     "    return (h * (ms + eps).rsqrt() * weight).to(x.dtype)\n")


def test_an_answer_that_plots_and_shows_progress_bars_gets_full_marks_with_no_flag():
    """matplotlib and tqdm in the notebook and a tqdm bar inside the answer itself: their threads
    (tqdm's monitor, started inside a graded call here) are a library's, not the student's; full
    marks and no flag in the self-check, Validate and grading (the kernel's threads sealed before
    the first cell, as the grading kernel seals them)."""
    import threading

    import tqdm.auto
    import tqdm.std

    nb = _with_scratch("rmsnorm", {"rms_norm_impl": RMS_WITH_PROGRESS}, [PLOT_AND_PROGRESS])
    run = run_cells(nb, sealed=True)
    for cls in {tqdm.std.tqdm, tqdm.auto.tqdm}:  # the monitor thread starts again inside a graded call
        if cls.monitor is not None:
            cls.monitor.exit()
            cls.monitor = None
    graded = graded_in_process(nb, _source("rmsnorm"), run)
    assert any(t.name == "tqdm_monitor" and t.is_alive() for t in threading.enumerate())
    _assert_full_and_clean("rmsnorm", nb, run, graded)


@pytest.mark.slow
def test_real_nbgrader_validate_says_success_to_an_honest_unusual_notebook(tmp_path):
    """``nbgrader validate`` itself (a real kernel) on an honest rmsnorm answer whose locals reuse
    the names of globals a scratch cell set with references, in a notebook that plots, shows
    progress bars and prints megabytes: "Success!"."""
    import subprocess

    nb = _with_scratch("rmsnorm", HONEST["rmsnorm"], [SCRATCH_GLOBALS, PLOT_AND_PROGRESS,
                                                      "for i in range(3000):\n    print('line', i, 'x' * 1000)"])
    path = tmp_path / "rmsnorm.ipynb"
    nbformat.write(nb, path)
    out = subprocess.run([sys.executable, "-m", "nbgrader", "validate", str(path)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    said = out.stdout + out.stderr
    assert "Success! Your notebook passes all the tests." in said, said[-3000:]


def test_validate_runs_the_course_checker_whatever_an_answer_cell_redefines():
    """Why item 3: an answer cell that also redefines the checker (and ``as_graded``) used to make
    Validate say "Success!" where grading gave 0. Each test cell imports what it uses, so the
    self-check and Validate run the course's checker: the n-1 answer fails there as in grading,
    and a correct answer with the same redefinitions keeps full marks, unflagged."""
    fake = ("\n\nclass _R:\n    passed, score, cases, breaches = True, 1.0, [], []\n"
            "    def show(self):\n        print('all correct')\n"
            "def check_rms_norm(fn, **kw):\n    return _R()\n"
            "def as_graded(*a, **k):\n    return None\n")
    wrong = {"rms_norm_impl": ANSWERS["rmsnorm"]["unbiased_variance"]["rms_norm_impl"] + fake}
    nb = fill_answers(_release("rmsnorm"), wrong)
    run = run_cells(nb)
    assert {g for g, c in run.cells.items() if c.error is not None} == {"rms_norm_shape", "rms_norm_battery"}
    assert "0 of 4 points" in _flat(run.cells["rms_norm_battery"].error)
    graded = graded_in_process(nb, _source("rmsnorm"), run)
    assert {g: s.fraction for g, s in graded.items()} == {"rms_norm_shape": 0.0, "rms_norm_battery": 0.0}
    right = {"rms_norm_impl": ANSWERS["rmsnorm"]["correct"]["rms_norm_impl"] + fake}
    nb = fill_answers(_release("rmsnorm"), right)
    run = run_cells(nb, sealed=True)
    _assert_full_and_clean("rmsnorm", nb, run, graded_in_process(nb, _source("rmsnorm"), run))


@pytest.mark.slow
def test_megabytes_of_output_a_plot_and_progress_bars_in_a_real_kernel_are_not_the_students():
    """Why item 2: a correct answer in a notebook that prints megabytes and draws a plot scored
    0/5 ("1 thread(s) started before the grader's call were still running": pyzmq's, for large
    output messages). In a real kernel (nbclient), sealed as the grading kernel is, then 5 MB
    printed, a matplotlib plot and a tqdm bar: the hand-back's record is scored full, unflagged."""
    from nbclient import NotebookClient

    from grader.scoring import scores, inputs as scoring

    seed, gid = 11, "rms_norm_battery"
    locked = {"nbgrader": {"locked": True}}
    cells = [
        nbformat.v4.new_code_cell("import normref.handback\n_h = normref.handback.seal()", metadata=locked),
        nbformat.v4.new_code_cell("import torch\nfrom normref import check_rms_norm", metadata=locked),
        nbformat.v4.new_code_cell("for i in range(5000):\n    print('line', i, 'x' * 1000)"),
        nbformat.v4.new_code_cell(PLOT_AND_PROGRESS),
        nbformat.v4.new_code_cell(ANSWERS["rmsnorm"]["correct"]["rms_norm_impl"]),
        nbformat.v4.new_code_cell(f"_h.inputs({gid!r}, {scoring.question_inputs(gid, seed)!r})\n_h({gid!r}, rms_norm)\n"
                                  "import threading\nprint(sorted(t.name for t in threading.enumerate()))",
                                  metadata={"nbgrader": {"grade_id": gid, "grade": True, "locked": True}}),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    printed = sum(len(o.get("text", "")) for o in nb.cells[2].outputs)
    assert printed > 5_000_000
    threads = json.loads(nb.cells[5].outputs[-1]["text"].replace("'", '"'))
    assert "tqdm_monitor" in threads  # a thread started after the kernel was sealed ...
    s = scores.score_notebook(nb, seed)[gid]
    assert (s.fraction, s.flags) == (1.0, []), s.flags  # ... and not the student's


# --------------------------------------------------------------------------- the public cases cover the drawn


def _signature(case) -> tuple:
    """A battery case's kind: for each field, a tensor's or array's dtype, shape family (a token,
    rows, ``[B, T, D]``, ``B = T = D``), whether a float16 square overflows, a constant row, all
    ones or zeros; another object's type; a number's value (eps); never the numbers drawn."""
    import dataclasses

    import numpy as np

    out = []
    fields = [f.name for f in dataclasses.fields(case)] if dataclasses.is_dataclass(case) else sorted(vars(case))
    for name in fields:
        if name == "name":
            continue
        v = getattr(case, name)
        if hasattr(v, "detach") or isinstance(v, np.ndarray):
            a = v.detach().float().numpy() if hasattr(v, "detach") else np.asarray(v, dtype=np.float64)
            dtype = str(getattr(v, "dtype", "")).replace("torch.", "")
            if a.ndim == 0 or a.size == 1:
                out.append((name, dtype, "scalar"))
                continue
            family = {1: "token", 2: "rows"}.get(a.ndim, "BTD")
            if a.ndim == 3 and len(set(a.shape)) == 1:
                family = "B=T=D"
            flags = (dtype == "float16" and bool((a.astype(np.float64) ** 2 > 65504).any()),
                     a.ndim >= 2 and bool((np.ptp(a.reshape(-1, a.shape[-1]), axis=-1) == 0).any()),
                     bool((a == 1).all()), bool((a == 0).all()))
            out.append((name, dtype, family, flags))
        elif isinstance(v, bool) or v is None or isinstance(v, str):
            out.append((name, v))
        elif isinstance(v, int):  # a drawn size
            out.append((name, "int"))
        elif isinstance(v, float):  # eps
            out.append((name, v))
        elif isinstance(v, tuple):
            out.append((name, tuple(_kind(p) for p in v)))
        else:
            out.append((name, _kind(v)))
    return tuple(out)


def _kind(obj) -> str:
    """A norm by its class (``LayerNorm``, ``RMSNorm``: which one matters); any other callable
    (a sublayer: ``F(v) = 2v`` as a function or a linear map, ``tanh(v W + c)``) as one kind."""
    module = str(getattr(type(obj), "__module__", ""))
    return type(obj).__name__ if module.startswith("normref.modules") else "callable"


def _public_cases(gid: str) -> list:
    from grader.scoring import inputs as scoring
    from normref.checks import backward, block, modern, module, norms, placement

    return {"rms_norm_battery": lambda: norms.battery("rms", "torch"),
            "layer_norm_battery": lambda: norms.battery("layer", "numpy"),
            "layer_norm_backward_gradcheck": backward._backward_battery,
            "pre_ln_battery": placement._placement_battery, "post_ln_battery": placement._placement_battery,
            "rms_module_battery": module._module_battery, "block_battery": block._block_battery,
            "peri_ln_battery": modern._peri_battery, "qk_logits_battery": modern._qk_battery,
            "dyt_battery": modern._dyt_battery}[gid]() if gid in scoring.QUESTIONS else []


@pytest.mark.parametrize("gid", ["rms_norm_battery", "layer_norm_battery", "layer_norm_backward_gradcheck",
                                 "pre_ln_battery", "post_ln_battery", "rms_module_battery", "block_battery",
                                 "peri_ln_battery", "qk_logits_battery", "dyt_battery"])
def test_the_public_battery_holds_every_kind_of_case_grading_draws(gid):
    """So that "all correct" in the notebook means the drawn battery passes too: every drawn case
    (10 seeds) is of a kind the public battery has, case by case in order (dtype, shape family,
    float16 overflow, constant row, eps, the norms' classes); and no drawn float16 overflow row
    ``[v, -v, v, -v]`` is larger than the public one (grader.scoring.batteries.FLOAT16_OVERFLOW_VALUES)."""
    import numpy as np

    from grader.scoring import inputs as scoring

    public = [_signature(c) for c in _public_cases(gid)]
    for seed in range(10):
        drawn = [_signature(c) for c in scoring.drawn_cases(gid, seed)]
        assert drawn == public, (seed, [(i, d, p) for i, (d, p) in enumerate(zip(drawn, public)) if d != p])
    if gid in ("rms_norm_battery", "layer_norm_battery", "rms_module_battery"):
        def biggest(cases):  # the overflow row [v, -v, v, -v], each float16 case's first
            return max(float(np.abs(np.asarray(c.x, dtype=np.float64)[0]).max()) for c in cases
                       if str(getattr(c.x, "dtype", "")).removeprefix("torch.") == "float16")

        top = biggest(_public_cases(gid))
        assert all(biggest(scoring.drawn_cases(gid, s)) <= top for s in range(10))
