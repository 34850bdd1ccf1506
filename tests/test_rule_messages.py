"""Issue 23 items 5 and 6: what a student reads when an answer breaks a rule, and how an
assignment opens.

A broken rule is one line, ``0 points: calls F.rms_norm — implement it with tensor
operations``: no "6/6 cases passed" header above it, one violation said once (the tamper
scan's finding, the source's spelling and grading's recorder all see one call), nothing false
(a first ``Tensor.backward`` in a fresh process imports sympy: that is not the student
switching the recorder off nor calling torch's reference code), and a cell is named the same
way in JupyterLab and in ``nbgrader validate`` (by what it defines, not by its execution count,
which differs between the two kernels).

The expected lines are written out here from the rule (what the code does, then its remedy),
not produced by the code under test.
"""
import json
import linecache
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from normref import check_rms_norm
from normref.handback import as_graded

REPO = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ("block", "layernorm", "layernorm_backward", "modern", "practice", "rmsnorm")
F_RMS_NORM = "0 points: calls F.rms_norm \u2014 implement it with tensor operations"
AUTOGRAD = ("0 points: uses autograd \u2014 the assignment asks for the backward by hand: write it with "
            "array operations")
THREADING = ("For the instructor's review (no points taken): imports threading (line 1 of the cell that defines "
             "rms_norm)")
HONEST = ("def rms_norm(x, weight, eps=1e-6):\n"
          "    rms = x.float().pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()\n"
          "    return (x.float() * rms * weight).to(x.dtype)\n")
CALLS_F = ("def rms_norm(x, weight, eps=1e-6):\n"
           "    return F.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)\n")


def _cell(ns: dict, n: int, source: str) -> None:
    """Run ``source`` as IPython runs cell ``[n]``: its code in linecache, its text in ``In``."""
    name = f"<ipython-input-{n}-rules>"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    ns.setdefault("In", [""]).extend([""] * (n + 1 - len(ns["In"])))
    ns["In"][n] = source
    exec(compile(source, name, "exec"), ns)


def _flat(text: str) -> str:
    return " ".join(str(text).split())


# ------------------------------------------------------------------------ item 6: one line

def test_a_reference_call_is_one_line_with_no_cases_header(monkeypatch):
    ns = {"__name__": "__main__"}
    _cell(ns, 1, "import torch\nimport torch.nn.functional as F\n")
    _cell(ns, 16, CALLS_F)
    quick, battery = check_rms_norm(ns["rms_norm"], quick=True), check_rms_norm(ns["rms_norm"])
    for r in (quick, battery):
        assert all(c.passed for c in r.cases)  # F.rms_norm's values are right ...
        assert r.score == 0  # ... and the rule costs the question
        # the scan's finding, the source's "calls F.rms_norm" and the recorder's "calls torch's
        # rms_norm" are one violation: one line, and nothing else
        assert r.breaches == [F_RMS_NORM] and r.report() == F_RMS_NORM and str(r) == F_RMS_NORM
    assert _flat(quick.problem) == F_RMS_NORM  # the visible check's assertion: the same line
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    with pytest.raises(AssertionError) as e:
        as_graded(battery, "rms_norm_battery", points=4)
    assert _flat(e.value) == ("rms_norm_battery: 0 of 4 points: calls F.rms_norm \u2014 implement it with "
                              "tensor operations")
    assert all(len("AssertionError: " + line) <= 80 for line in str(e.value).splitlines()[:1])
    assert all(len(line) <= 76 for line in str(e.value).splitlines()[1:])


def test_a_violation_and_a_review_are_two_lines_each_said_once(monkeypatch):
    """The reference seen running takes the points (its line first); the import of threading is
    only for the instructor's review (its line after); Validate fails on the violation alone."""
    ns = {"__name__": "__main__"}
    _cell(ns, 1, "import torch\nimport torch.nn.functional as F\n")
    _cell(ns, 3, "import threading\n\n" + CALLS_F)
    r = check_rms_norm(ns["rms_norm"])
    calls = "0 points: calls F.rms_norm (line 3 of the cell that defines rms_norm)"
    assert r.breaches == [F_RMS_NORM] and r.reviews == [THREADING], (r.breaches, r.reviews)
    # the call in the function's own cell: no location needed (the message names the call)
    assert not r.breaches[0].startswith(calls)
    assert r.report() == F_RMS_NORM + "\n" + THREADING
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    with pytest.raises(AssertionError) as e:
        as_graded(r, "rms_norm_battery", points=4)
    assert _flat(e.value) == "rms_norm_battery: 0 of 4 points: " + F_RMS_NORM.removeprefix("0 points: ")


def test_a_call_in_a_helpers_cell_says_which_cell():
    ns = {"__name__": "__main__"}
    _cell(ns, 1, "import torch\nimport torch.nn.functional as F\n")
    _cell(ns, 4, "def _norm(x, weight, eps):\n    return F.rms_norm(x, (x.shape[-1],), weight, eps)\n")
    _cell(ns, 7, "def rms_norm(x, weight, eps=1e-6):\n"
                 "    return _norm(x.float(), weight.float(), eps).to(x.dtype)\n")
    r = check_rms_norm(ns["rms_norm"], quick=True)
    assert r.breaches == ["0 points: calls F.rms_norm (line 2 of the cell that defines _norm) \u2014 implement it "
                          "with tensor operations"]


def test_a_cell_is_named_by_what_it_defines_whatever_its_execution_count():
    """JupyterLab had said "cell [16]" where Validate's fresh kernel said "cell [2]"."""
    said = {}
    for n in (2, 16):
        ns = {"__name__": "__main__"}
        _cell(ns, 1, "import torch\n")
        _cell(ns, n, "import threading\n\n" + HONEST)
        said[n] = check_rms_norm(ns["rms_norm"], quick=True).reviews
    assert said[2] == said[16] == [THREADING]
    # a module the answer uses, imported in a flagged statement: that cell, by the name it binds
    ns = {"__name__": "__main__"}
    _cell(ns, 1, "import torch\n")
    _cell(ns, 9, "import threading, math\n")
    _cell(ns, 12, "def rms_norm(x, weight, eps=1e-6):\n"
                  "    rms = x.float().pow(2).mean(dim=-1, keepdim=True).add(eps * math.pow(1, 2)).rsqrt()\n"
                  "    return (x.float() * rms * weight).to(x.dtype)\n")
    assert check_rms_norm(ns["rms_norm"], quick=True).reviews == [
        "For the instructor's review (no points taken): imports threading (line 1 of the cell that imports math)"]


# ------------------------------------------------------------------ item 6: nothing false

_FRESH = r"""
import json, sys
{prelude}
from normref import {checker}
{answer}
before = sorted(m for m in {watch} if m in sys.modules)
out = {{"quick": {checker}({fn}, quick=True).breaches, "battery": {checker}({fn}).breaches,
        "passed": {checker}({fn}).passed, "before": before}}
print("RESULT " + json.dumps(out))
"""


def _fresh(checker: str, fn: str, answer: str, prelude: str = "", watch: tuple = ()) -> dict:
    """``checker`` run twice on ``answer`` in a fresh Python (``python -c``: the answer's code is
    ``__main__``'s, as a notebook's is), the first call of anything in that process."""
    code = _FRESH.format(prelude=prelude, checker=checker, answer=answer, fn=fn, watch=list(watch))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(line[0][len("RESULT "):])


AUTOGRAD_BACKWARD = (
    "import numpy as np\nimport torch\n\n"
    "def layer_norm_backward(dy, x, weight, eps=1e-5):\n"
    "    xt = torch.tensor(x, requires_grad=True)\n"
    "    w = torch.tensor(weight, requires_grad=True)\n"
    "    b = torch.zeros_like(w, requires_grad=True)\n"
    "    mu = xt.mean(-1, keepdim=True)\n"
    "    y = (xt - mu) / torch.sqrt(((xt - mu) ** 2).mean(-1, keepdim=True) + eps) * w + b\n"
    "    y.backward(torch.tensor(dy))\n"
    "    return xt.grad.numpy(), w.grad.numpy(), b.grad.numpy()\n")


@pytest.mark.slow
def test_an_autograd_backward_is_told_autograd_alone_on_the_first_call_in_a_fresh_process():
    """Its first ``backward(gradient)`` imports torch's symbolic shapes and sympy: it had also
    been told "switched off the grader's call recorder" and "calls torch's reference code
    torch.fx.experimental.symbolic_shapes.<module>" (and sym_eq), both false."""
    out = _fresh("check_layer_norm_backward", "layer_norm_backward", AUTOGRAD_BACKWARD,
                 watch=("sympy", "torch.fx.experimental.symbolic_shapes"))
    assert out["before"] == []  # nothing imported it before the check: the import is the check's first call
    assert out["quick"] == out["battery"] == [AUTOGRAD]


@pytest.mark.slow
def test_an_import_inside_an_honest_answer_runs_no_reference():
    """A module torch has not imported yet, imported by the answer's first call: its body (and
    the functions it calls as it loads, torch's decomposition registry here) is the import's,
    not a reference the answer calls."""
    answer = ("import torch\n\n"
              "def rms_norm(x, weight, eps=1e-6):\n"
              "    import torch._decomp.decompositions_for_rng  # noqa: an odd but honest import\n"
              "    rms = x.float().pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()\n"
              "    return (x.float() * rms * weight).to(x.dtype)\n")
    out = _fresh("check_rms_norm", "rms_norm", answer, watch=("torch._decomp.decompositions_for_rng",))
    assert out["before"] == []
    assert out["quick"] == out["battery"] == [] and out["passed"]


@pytest.mark.slow
def test_an_honest_answer_that_runs_a_backward_breaks_no_rule():
    """A forward answer may use autograd (only the backward question forbids it): its first
    ``backward(gradient)`` runs torch's symbolic-shape check (``sym_eq``, in ``torch/fx``) from
    torch's own autograd code, which is not the answer calling torch's reference code."""
    answer = ("import torch\n\n"
              "def rms_norm(x, weight, eps=1e-6):\n"
              "    h = x.float().detach().requires_grad_(True)\n"
              "    ms = h.pow(2).mean(dim=-1, keepdim=True)  # [..., 1]\n"
              "    ms.backward(torch.ones_like(ms))  # d ms / d h = 2 h / D: unused, but autograd ran\n"
              "    return (h.detach() * (ms.detach() + eps).rsqrt() * weight).to(x.dtype)\n")
    # sympy first (its import takes a second, more on a loaded machine: not inside the 5 s call)
    out = _fresh("check_rms_norm", "rms_norm", answer, prelude="import sympy",
                 watch=("torch.fx.experimental.symbolic_shapes",))
    assert out["before"] == []
    assert out["quick"] == out["battery"] == [] and out["passed"]


def test_code_a_library_makes_with_exec_is_the_librarys_and_the_notebooks_is_the_students():
    """Half of the false "switched off the grader's call recorder": a library's ``exec``'d code
    (``<string>``: mpmath's operators, ``collections.namedtuple``'s ``__new__``) ran while torch's
    function mode was legitimately off and was taken for the student's."""
    from normref.recorder import ReferenceRecorder

    frames = []

    def watch(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith("<") and \
                not frame.f_code.co_filename.startswith("<frozen"):
            frames.append(frame)

    import collections

    notebook = {"__name__": "__main__"}
    sys.setprofile(watch)
    try:
        collections.namedtuple("Pair", "a b")  # exec's its __new__ as <string>, called by collections
        exec(compile("def f():\n    return 1\nf()\n", "<cell-3>", "exec"), notebook)
    finally:
        sys.setprofile(None)
    rec = ReferenceRecorder()
    by_file = {(f.f_code.co_filename, f.f_code.co_name): rec._is_library(f.f_code, f) for f in frames}
    assert by_file[("<string>", "<module>")] is True  # namedtuple's, run by collections
    assert by_file[("<cell-3>", "<module>")] is False and by_file[("<cell-3>", "f")] is False  # the notebook's


# ------------------------------------------------------------------ item 5: how it opens

def _markdown(assignment: str) -> list[str]:
    nb = nbformat.read(REPO / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "markdown"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_an_assignment_opens_with_the_task_and_the_rule_in_one_sentence(assignment):
    cells = _markdown(assignment)
    text = "\n".join(cells)
    # the grader's defences are not the student's reading: no section on them, no list of modules
    for defence in ("**The rule.**", "**The scan.**", "**How it is graded.**", "threading", "multiprocessing",
                    "importlib", "ctypes", "torch.jit", "torch._C", "normref.handback"):
        assert defence not in text, (assignment, defence)
    if assignment == "practice":  # short answers: there is no norm to call
        return
    intro = cells[0]
    rule = [p for p in intro.split("\n\n") if "ready-made norm" in p]
    assert len(rule) == 1, intro
    sentence = _flat(rule[0])
    assert sentence.count(". ") == 0 and sentence.endswith("."), sentence  # one sentence
    assert "earns 0" in sentence and "the self-check tells you" in sentence, sentence
    # after the task: the first paragraph after the title is the task, not the rule
    assert intro.index(rule[0]) > intro.index("\n\n"), intro
    assert not intro.split("\n\n")[1].startswith(("**", "*Optional")) or assignment == "layernorm_backward"


def test_the_backward_assignment_names_no_reference_in_the_students_package():
    """The analytic backward moved to the grader (grader/backward.py); ``normref`` has none."""
    text = "\n".join(_markdown("layernorm_backward"))
    assert "normref.layer_norm_backward" not in text and "layer_norm_backward`" not in text.replace(
        "`layer_norm_backward(dy", "")
    import normref

    assert not hasattr(normref, "layer_norm_backward")


# ------------------------------------------------------------------ the leftover slips

def test_an_unreadable_short_answer_is_named_once_in_the_lesson_the_self_check_and_validate(monkeypatch):
    """It read "pre_ln formula: pre_ln_formula: did not recognise ..." (the case's name, then the
    variable's), and Validate cut it at its first "; " to "pre_ln formula: use X, Norm(...)"."""
    from normref import practice
    from normref.answers import check_mean_var, check_pre_ln_formula

    wrong = ("did not recognise 'gibberish' in 'Y = gibberish'; use X, Norm(...), FFN(...) (or F(...)), + and "
             "parentheses")
    r = check_pre_ln_formula("Y = gibberish", sublayer="ffn")
    assert r.messages == ["pre_ln_formula: " + wrong]  # the assignment's variable, once
    # the lesson's box has no variable: no label at all
    assert practice.check("ps_pre_ln_formula", "Y = gibberish").message.startswith(
        "did not recognise 'gibberish' in 'Y = gibberish'; use X, Norm(...), Attention(...)")
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    with pytest.raises(AssertionError) as e:
        as_graded(r, "practice_pre_ln_formula", points=1)
    assert _flat(e.value) == f"practice_pre_ln_formula: 0/1 cases, 0 of 1 points: - pre_ln_formula: {wrong}"
    with pytest.raises(AssertionError) as e:  # two answers: each labelled once
        as_graded(check_mean_var(4, 3, x=(1, 3, 5, 7)), "practice_mean_var", points=1)
    assert _flat(e.value) == ("practice_mean_var: 1/2 cases, 0.5 of 1 points: - variance: you gave 3: average "
                              "the squared deviations (x_r - mean)^2 over the d = 4 features.")


@pytest.mark.parametrize("given", [1.0, 2.0, -2.0])
def test_an_axis_given_as_a_float_is_told_it_is_an_int_by_the_self_check_and_by_grading(given):
    """``stats_axis = 1.0`` had been told "not the axis's name". An axis number is an int
    (``x.mean(dim=1.0)`` raises): grading gives 0, and both say why in the same words."""
    from grader.scoring import scores
    from normref.answers import check_stats_axis
    from normref.wire import decode_answer, encode_answer

    said = (f"stats_axis is the float {given!r}: an axis number is an int, as dim= takes it "
            f"({int(given)}, not {given!r})")
    r = check_stats_axis(given, layout="BDT")
    assert r.messages == [said] and r.faults == ["bad_format"] and r.score == 0
    # grading: the kernel's hand-back of the value, through JSON, checked in the grader's process
    back = decode_answer(json.loads(json.dumps(encode_answer(given))))
    graded = scores._score_values("retrieval_stats_axis", 0, {"values": [encode_answer(given)]})
    # the same words (the feedback wraps long lines at spaces: CheckResult.displayed)
    assert back == given and graded.fraction == 0.0 and said in " ".join(graded.text.split()), graded.text
    # an int is read as the axis it is: 1 is [B, D, T]'s feature axis
    assert check_stats_axis(int(given), layout="BDT").passed is (int(given) in (1, -2))


def test_a_name_the_answers_own_cell_binds_comes_from_that_cell_not_from_an_older_one(tmp_path, monkeypatch):
    """Found playing the student (modern): the QK-norm answer's cell imports normref itself, yet
    its self-check blamed an earlier cell that also imported normref (and called normref.peri_ln)."""
    import shutil

    from normref import check_qk_norm_logits

    # the notebook beside the kernel, as in JupyterLab and Validate: its locked cells bind no normref
    shutil.copy(REPO / "release" / "modern" / "modern.ipynb", tmp_path)
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "__main__"}
    _cell(ns, 1, "import math\nimport torch\n")
    _cell(ns, 5, "import normref\n\ndef peri_ln(x, sublayer, norm, out_norm):\n"
                 "    return normref.peri_ln(x, sublayer, norm, out_norm)\n")
    _cell(ns, 8, "import normref\n\ndef qk_norm_logits(q, k, q_norm, k_norm):\n"
                 "    return normref.qk_norm_logits(q, k, q_norm, k_norm)\n")
    assert check_qk_norm_logits(ns["qk_norm_logits"], quick=True).breaches == [
        "0 points: calls normref.qk_norm_logits \u2014 implement it with tensor operations"]


def test_a_copy_of_the_notebook_beside_it_does_not_turn_the_imports_cell_into_tamper(tmp_path, monkeypatch):
    """Found playing the student (red team, modern): with File > Duplicate's "modern-Copy1.ipynb"
    beside "modern.ipynb", Validate (a kernel without JPY_SESSION_NAME) could not tell which
    notebook's locked cells to trust, scanned the locked imports cell for the correct answer's
    ``math.sqrt`` and said "0 points: imports normref.handback (line 6 of the cell that imports
    math) ... remove the import" about a cell the student cannot edit; grading gives full marks."""
    import shutil

    from normref import check_qk_norm_logits

    answer = ("def qk_norm_logits(q, k, q_norm, k_norm):\n"
              "    return q_norm(q) @ k_norm(k).transpose(-2, -1) / math.sqrt(q.shape[-1])\n")
    release = REPO / "release" / "modern" / "modern.ipynb"
    nb = nbformat.read(release, as_version=4)
    cell = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    imports = cell["modern_imports"].source
    assert "import math" in imports and "normref.handback" in imports  # the case this test is about
    shutil.copy(release, tmp_path / "modern-Copy1.ipynb")  # an earlier copy: the stubs
    cell["qk_logits_impl"].source = answer
    nbformat.write(nb, tmp_path / "modern.ipynb")  # the saved notebook Validate runs
    (tmp_path / "notes.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4,
                                                      "nbformat_minor": 5}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    ns = {"__name__": "__main__"}
    _cell(ns, 1, imports)
    _cell(ns, 2, answer)
    result = check_qk_norm_logits(ns["qk_norm_logits"], quick=True)
    assert result.breaches == [] and result.passed, result.report()


def test_the_start_lessons_example_diagnosis_is_what_the_checker_says():
    """Found playing the student (red team): lesson 00 quoted the unbiased-variance diagnosis as
    "your output equals the reference times 0.935 ...", which no checker prints; its own cell
    above prints the real one. The quote must be the checker's words for that lesson cell's slip."""
    import re

    import torch

    from normref import check_layer_norm

    text = " ".join((REPO / "notebooks" / "00_start.md").read_text(encoding="utf-8").split())
    (quote,) = re.findall(r'for example \*"(.+?)"\*', text)

    def my_layer_norm(x, weight, bias, eps=1e-5):  # the lesson's cell: unbiased=True divides by d - 1
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, unbiased=True, keepdim=True)
        return (x - mean) / torch.sqrt(var + eps) * weight + bias

    said = _flat(check_layer_norm(my_layer_norm, backend="torch", quick=True).report())
    assert "0.935 = sqrt(7/8)" in quote and quote in said, (quote, said)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_an_assignments_title_names_the_course_lesson(assignment):
    """Found playing the student (red team): modern's title said "(Lesson 04)" where every other
    assignment says "(Lesson 16 ...)"; 04 is the notebook of lesson 16, not a lesson."""
    title = _markdown(assignment)[0].splitlines()[0]
    assert title.startswith("# ") and "(Lesson 16" in title, title
