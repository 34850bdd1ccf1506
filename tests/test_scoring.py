"""Trusted scoring (grader.scoring.inputs, grader.scoring.scores): graded inputs drawn from a secret seed, outputs
handed back by the kernel (normref.handback) and judged by the checker in the grader's own process.

Fast: the kernel's half runs in this process on the answer bank's code, and its record goes
through JSON, as it does through the notebook. The real round trip through ``make grade`` is
in tests/test_hostile.py.
"""
from __future__ import annotations

import json

import nbformat
import numpy as np
import pytest
import torch

from grader.scoring import scores, inputs as scoring
from grader.demo.answer_bank import ANSWERS, EXPECTED
from grader.scoring.replay import Replay
from normref.handback import run_calls
from normref.plan import run_plan
from normref.wire import MIME, decode_answer, encode_answer

REPO = __import__("pathlib").Path(__file__).resolve().parents[1]
#: grade_id -> (assignment, the function the hidden test hands back, points)
def _handed_back() -> dict[str, tuple[str, str, float]]:
    """``{grade_id: (assignment, what its hidden test hands back, points)}`` of every question
    graded by hand-back, read from the source notebooks (the questions' one place, beside their
    folder's ``grading.py``): ``"rms_norm_battery": ("rmsnorm", "rms_norm", 4)``; a short answer
    hands back its variables (``"mean_1357, var_1357"``)."""
    out = {}
    for nb_path in sorted(REPO.glob("source/*/*.ipynb")):
        for c in nbformat.read(nb_path, as_version=4).cells:
            if "hand_back(" in c.source:
                meta = c.metadata["nbgrader"]
                gid, _, args = c.source.split("hand_back(")[1].split(")")[0].partition(", ")
                assert gid == f'"{meta["grade_id"]}"', (nb_path, gid)
                out[meta["grade_id"]] = (nb_path.parent.name, args, meta["points"])
    return out


QUESTION_FN = _handed_back()
DRAWN = sorted(g for g in QUESTION_FN if scoring.QUESTIONS[g].draw is not None)
VISIBLE = sorted(g for g in QUESTION_FN if scoring.QUESTIONS[g].draw is None)


def namespace(assignment: str, variant: str) -> dict:
    """The notebook's globals after its import cells and the variant's answer cells ran."""
    import sys

    nb = nbformat.read(REPO / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    ns: dict = {}
    folder = str(REPO / "release" / assignment)  # a self-check module released beside the notebook
    if folder not in sys.path:
        sys.path.append(folder)
    for c in nb.cells:
        meta = c.metadata.get("nbgrader", {})
        if c.cell_type != "code" or meta.get("grade") or "display(" in c.source:
            continue
        src = ANSWERS[assignment][variant].get(meta.get("grade_id"), c.source) if meta.get("solution") else c.source
        try:
            exec(src, ns)
        except Exception:  # noqa: BLE001 - a blank answer raises NotImplementedError
            pass
    return ns


def handed_back(gid: str, fn, seed: int) -> dict:
    """What the kernel's ``hand_back(gid, fn)`` shows: the record of ``fn`` (a function, a class,
    or a tuple of short answers) on the grader's inputs for this seed."""
    q = scoring.QUESTIONS[gid]
    if q.kind == "values":
        return {"grade_id": gid, "values": [encode_answer(v) for v in fn]}
    if q.kind == "class":
        return {"grade_id": gid, "cases": run_plan(fn, q.plan(scoring.plan_cases(gid, seed)), q.reference)}
    return {"grade_id": gid, "calls": run_calls(fn, scoring.probe_calls(gid, seed), q.reference)}


def graded(gid: str, fn, seed: int) -> scores.Scored:
    """What grading makes of ``fn``: the kernel's record of it on the drawn inputs (with the
    run-time record of reference calls), through JSON in a notebook cell's output, scored here."""
    cell = nbformat.v4.new_code_cell("", metadata={"nbgrader": {"grade_id": gid, "grade": True}})
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        MIME: json.loads(json.dumps(handed_back(gid, fn, seed)))})]
    return scores.score_notebook(nbformat.v4.new_notebook(cells=[cell]), seed)[gid]


def trusted_points(gid: str, fn, seed: int) -> float:
    return round(QUESTION_FN[gid][2] * graded(gid, fn, seed).fraction, 2)


def test_the_scored_questions_are_the_hidden_tests_that_hand_back():
    """The registry (each folder's grading.py) declares exactly the questions whose hidden tests
    hand back, each in the assignment whose notebook holds it, and the ones everyone knows are there."""
    assert set(QUESTION_FN) == set(scoring.QUESTIONS)
    assert {g: scoring.QUESTIONS[g].assignment for g in QUESTION_FN} == {g: a for g, (a, _, _) in QUESTION_FN.items()}
    assert QUESTION_FN["rms_norm_battery"] == ("rmsnorm", "rms_norm", 4)
    assert QUESTION_FN["block_battery"] == ("block", "PreNormBlock", 2)
    assert QUESTION_FN["practice_mean_var"] == ("practice", "mean_1357, var_1357", 1)
    assert QUESTION_FN["batch_norm_quick"] == ("batchnorm", "batch_norm", 1)


@pytest.mark.parametrize("gid, seed", [(g, s) for g in DRAWN for s in (11, 2026)] + [(g, 0) for g in VISIBLE])
def test_every_bank_variant_gets_its_expected_points_on_drawn_inputs(gid, seed):
    """The answer bank's hand-derived points (for the fixed visible battery) hold on batteries
    drawn from other seeds: honest answers written differently keep full marks, each mistake
    costs what it cost."""
    a, name, _ = QUESTION_FN[gid]
    got = {v: bank_points(gid, namespace(a, v), seed) for v in ANSWERS[a]}
    assert got == {v: EXPECTED[a][v][gid] for v in ANSWERS[a]}


def bank_points(gid: str, ns: dict, seed: int) -> float:
    """The trusted points of the answer in ``ns`` (a notebook's globals); a short answer whose
    variable is undefined stops its hidden test before it hands back anything: 0."""
    name = QUESTION_FN[gid][1]
    if scoring.QUESTIONS[gid].kind == "values":
        names = name.split(", ")
        if not all(n in ns for n in names):
            return 0.0
        return trusted_points(gid, tuple(ns[n] for n in names), seed)
    return trusted_points(gid, ns.get(name), seed)


def test_each_run_draws_new_inputs_of_the_same_kinds():
    one, two = scoring.drawn_cases("rms_norm_battery", 1), scoring.drawn_cases("rms_norm_battery", 2)
    again = scoring.drawn_cases("rms_norm_battery", 1)
    assert [c.x.dtype for c in one] == [c.x.dtype for c in two]  # same kinds: float32 x4, float16, bfloat16
    assert [c.x.dtype for c in one][-2:] == [torch.float16, torch.bfloat16]
    assert all(torch.equal(a.x, b.x) for a, b in zip(one, again))  # one seed reproduces its grade
    assert not any(a.x.shape == b.x.shape and torch.equal(a.x, b.x) for a, b in zip(one, two))
    n = one[2].x.shape
    assert n[0] == n[1] == n[2]  # B = T = D
    assert float(one[4].x.float().abs().max()) > 256  # x**2 overflows float16
    assert one[3].eps == 1e-4 and float(one[3].x.abs().max()) < 1e-2


def _ln(x, w, b, eps=1e-5, *, stats=np.float32, one_pass=False):
    h = x.astype(stats)
    m = h.mean(-1, keepdims=True)
    v = (h * h).mean(-1, keepdims=True) - m * m if one_pass else ((h - m) ** 2).mean(-1, keepdims=True)
    return ((h - m) / np.sqrt(v + eps) * w + b).astype(x.dtype)


@pytest.mark.parametrize("seed", [11, 2026, 7])
def test_drawn_layer_norm_batteries_expose_the_one_pass_variance(seed):
    """The drawn float16 case's second row: four float16 integers of mean 1498-2002 with a .25 or
    .75 fraction (float32 spacing of E[x]**2 is 0.25 there: the one-pass variance is off by 1/16).
    The float32 one-pass answer loses that case (0.5 of 3 points) and is named; the one-pass
    variance in float64 and two-pass float32 statistics keep full marks."""
    row = scoring.drawn_cases("layer_norm_battery", seed)[4].x[1].astype(np.float64)
    assert 1498 <= row.mean() <= 2002 and row.mean() % 0.5 in (0.25,) and np.all(row == np.round(row))
    g = graded("layer_norm_battery", lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, one_pass=True), seed)
    assert g.fraction == pytest.approx(5 / 6) and g.variants == ["var_formula=one_pass"], g.text
    assert [c["passed"] for c in g.record["cases"]] == [True, True, True, True, False, True]
    for honest in (lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, stats=np.float64, one_pass=True),
                   lambda x, w, b, eps=1e-5: _ln(x, w, b, eps)):
        assert graded("layer_norm_battery", honest, seed).fraction == 1.0


def test_a_function_that_only_knows_the_visible_battery_earns_nothing_hidden():
    """A lookup table of the visible battery's answers, the input itself otherwise."""
    from normref import check_rms_norm, rms_norm
    from normref.checks.norms import battery

    table = [(c.x.clone(), rms_norm(c.x, c.weight, eps=c.eps)) for c in battery("rms", "torch")]

    def lookup(x, weight, eps=1e-6):
        for xv, y in table:
            if xv.shape == x.shape and xv.dtype == x.dtype and torch.equal(xv, x):
                return y.clone()
        return x.clone()

    assert check_rms_norm(lookup).passed  # it fools the visible battery completely
    assert trusted_points("rms_norm_battery", lookup, 7) == 0.0


def test_outputs_travel_without_pickles_and_keep_dtype_and_shape():
    x = torch.randn(2, 3, 4).to(torch.bfloat16)
    rec = json.loads(json.dumps(run_calls(lambda *a: (x, np.arange(3.0), "s"), [((), {}, False)])))
    back = Replay(rec)()
    assert back[0].dtype == torch.bfloat16 and torch.equal(back[0], x)
    assert back[1].dtype == np.float64 and list(back[1]) == [0.0, 1.0, 2.0]
    assert type(back[2]).__name__ == "str"  # other objects travel as their type name only
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "", metadata={"nbgrader": {"grade_id": "rms_norm_battery", "grade": True}})])
    nb.cells[0].outputs = [nbformat.v4.new_output("display_data", data={MIME: {"grade_id": "rms_norm_battery",
                                                                              "calls": []}})] * 2
    scored = scores.score_notebook(nb, 3)["rms_norm_battery"]
    assert scored.fraction == 0.0 and "2 sets of outputs" in scored.flags[0]


RMS_HONEST = "def rms_norm(x, weight, eps=1e-6):\n    h = x.float()\n" \
             "    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)\n"
# the same reference call, spelled eight ways (the last three get past any list of names)
REFERENCE_SPELLINGS = {
    "direct": "def rms_norm(x, weight, eps=1e-6):\n    return F.rms_norm(x, (x.shape[-1],), weight, eps)",
    "alias": "ref = F.rms_norm\ndef rms_norm(x, weight, eps=1e-6):\n    return ref(x, (x.shape[-1],), weight, eps)",
    "getattr": "def rms_norm(x, weight, eps=1e-6):\n"
               "    return getattr(F, 'rms' + '_norm')(x, (x.shape[-1],), weight, eps)",
    "dict": "def rms_norm(x, weight, eps=1e-6):\n    return F.__dict__['rms_norm'](x, (x.shape[-1],), weight, eps)",
    "attrgetter": "import operator\ndef rms_norm(x, weight, eps=1e-6):\n"
                  "    return operator.attrgetter('rms_norm')(torch)(x, (x.shape[-1],), weight, eps)",
    "module": "def rms_norm(x, weight, eps=1e-6):\n    m = torch.nn.RMSNorm(x.shape[-1], eps=eps)\n"
              "    m.weight.data = weight.float()\n    return m(x.float()).to(x.dtype)",
    "aten": "def rms_norm(x, weight, eps=1e-6):\n"
            "    return torch.ops.aten.rms_norm(x.float(), [x.shape[-1]], weight.float(), eps).to(x.dtype)",
    "normref": "import normref\ndef rms_norm(x, weight, eps=1e-6):\n    return normref.rms_norm(x, weight, eps)",
}


@pytest.mark.parametrize("spelling", sorted(REFERENCE_SPELLINGS))
def test_a_reference_call_by_any_spelling_earns_zero_and_says_the_rule(spelling):
    ns = {"torch": torch, "F": torch.nn.functional}
    exec(REFERENCE_SPELLINGS[spelling], ns)
    s = graded("rms_norm_battery", ns["rms_norm"], 5)
    assert s.fraction == 0.0
    # one line, as the self-check says it: no "6/6 cases passed" beside the 0
    assert s.text.startswith("rms_norm_battery: 0 points: calls ") and len(s.text.splitlines()) == 1, s.text
    assert s.text.endswith(" \u2014 implement it with tensor operations"), s.text
    assert s.flags and "rms_norm" in s.flags[0]


# Found by a red-team student: each earned full battery points before the recorder walked
# through normref's own helpers, saw threads and processes start, and checked its own class.
EVASIONS = {
    "thread": ("import threading\ndef rms_norm(x, weight, eps=1e-6):\n    out = {}\n"
               "    def work():\n        out['y'] = getattr(F, 'rms' + '_norm')(x, (x.shape[-1],), weight, eps)\n"
               "    th = threading.Thread(target=work)\n    th.start()\n    th.join()\n    return out['y']",
               "another thread or process"),
    "launder": ("from normref.checks.core import _call_with_timeout as _c\ndef rms_norm(x, weight, eps=1e-6):\n"
                "    return _c(getattr(F, 'rms' + '_norm'), (x, (x.shape[-1],), weight, eps), {}, 10)",
                "rms_norm"),
    "fork": ("import os\ndef rms_norm(x, weight, eps=1e-6):\n    pid = os.fork()\n"
             "    if pid == 0:\n        os._exit(0)\n    os.waitpid(pid, 0)\n"
             "    return F.__dict__['rms_norm'](x, (x.shape[-1],), weight, eps)",
             "another thread or process"),
}


@pytest.mark.parametrize("evasion", sorted(EVASIONS))
def test_a_reference_call_hidden_in_a_thread_a_process_or_a_course_helper_earns_zero(evasion):
    """The reference is seen running (torch's function mode sees the other thread's call too; the
    fork's parent calls it) and takes the points; the thread or process the notebook's code
    started is flagged for review beside it, never evidence of its own."""
    code, said = EVASIONS[evasion]
    ns = {"torch": torch, "F": torch.nn.functional, "__name__": "__main__"}  # a notebook cell's code
    exec(code, ns)
    s = graded("rms_norm_battery", ns["rms_norm"], 5)
    assert s.fraction == 0.0 and s.flags and "calls torch's rms_norm" in s.flags[0], (s.fraction, s.flags)
    assert any(said in f for f in s.flags), s.flags


def test_a_patched_recorder_class_is_flagged_not_scored_zero(monkeypatch):
    """The recorder's class patched (a tamper construct, not a reference seen running): the
    answer is scored on its outputs and flagged for the instructor's review, in the feedback's
    words (the reference call itself is the isolated grading process's to see)."""
    from normref.recorder import ReferenceRecorder
    from normref.rules import REVIEW_PREFIX

    monkeypatch.setattr(ReferenceRecorder, "__enter__", lambda self: self)
    monkeypatch.setattr(ReferenceRecorder, "__exit__", lambda self, *a: None)
    ns = {"torch": torch, "F": torch.nn.functional}
    exec(REFERENCE_SPELLINGS["getattr"], ns)
    s = graded("rms_norm_battery", ns["rms_norm"], 5)
    assert s.fraction == 1.0 and s.flags == [
        f"rms_norm_battery: {REVIEW_PREFIX}changed the grader's call recorder (its class was patched)"], s.flags
    assert " ".join(s.flags[0].removeprefix("rms_norm_battery: ").split()) in " ".join(s.text.split())


def test_honest_answers_and_a_norm_the_checker_hands_in_are_not_reference_calls():
    ns = {"torch": torch}
    exec(RMS_HONEST, ns)
    s = graded("rms_norm_battery", ns["rms_norm"], 5)
    assert (s.fraction, s.flags) == (1.0, [])
    pre = graded("pre_ln_battery", lambda x, sublayer, norm: x + sublayer(norm(x)), 5)
    assert (pre.fraction, pre.flags) == (1.0, [])  # norm(x) runs normref's LayerNorm: allowed
    from normref.blocks import pre_ln

    cheat = graded("pre_ln_battery", lambda x, sublayer, norm: pre_ln(x, sublayer, norm), 5)
    assert cheat.fraction == 0.0 and "normref.blocks.pre_ln" in cheat.text


# --------------------------------------------------------------------------- classes and short answers


def test_practice_checks_are_scored_with_the_visible_checks_settings():
    """The grader checks each short answer with the checker and setting its visible check shows
    (read from the notebook's own ``display(check_...(...))`` line)."""
    import ast

    nb = nbformat.read(REPO / "source" / "practice" / "practice.ipynb", as_version=4)
    seen = {}
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if gid in scoring.short_answers():
            call = next(n.value for n in ast.parse(c.source).body  # the hidden test is a bare call
                        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call))
            seen[gid] = (call.func.id, {k.arg: ast.literal_eval(k.value) for k in call.keywords},
                         ", ".join(a.id for a in call.args))
    assert seen == {g: (*a, QUESTION_FN[g][1]) for g, a in scoring.short_answers().items()}


def test_short_answers_travel_with_their_types():
    from fractions import Fraction

    sent = [4, 2 / 3, "sqrt(84.5)", True, None, (1, 2.5), [4, 5, 1], torch.Size([4, 5, 1]), np.float64(2.5),
            np.int64(-2), torch.tensor(9.25), np.array([1.0, -2.0]), ...]
    back = [decode_answer(json.loads(json.dumps(encode_answer(v)))) for v in sent]
    for a, b in zip(sent[:8], back[:8]):
        assert type(a) is type(b) and a == b, (a, b)
    assert back[8] == 2.5 and type(back[8]) is np.float64 and back[9] == -2 and type(back[9]) is np.int64
    assert back[10].dtype == torch.float32 and float(back[10]) == 9.25
    assert back[11].tolist() == [1.0, -2.0] and back[12] is Ellipsis
    # another type: its text and, if it is a number, its value; the checker reads the number
    frac = decode_answer(json.loads(json.dumps(encode_answer(Fraction(169, 2)))))
    assert type(frac).__name__ == "Fraction" and repr(frac) == "Fraction(169, 2)"
    from normref.answers import check_rms_34

    assert check_rms_34(frac, x=(5, 12)).score == check_rms_34(Fraction(169, 2), x=(5, 12)).score == 0.0
    s = graded("practice_rms", (Fraction(169, 2),), 0)
    assert s.fraction == 0.0 and "Fraction(169, 2)" in s.text  # noted in the feedback
    assert graded("practice_rms", ((84.5) ** 0.5,), 0).fraction == 1.0
    odd = decode_answer(json.loads(json.dumps(encode_answer(object()))))
    assert graded("practice_rms", (object(),), 0).fraction == 0.0 and type(odd).__name__ == "object"


def test_a_short_answer_is_judged_by_the_grader_not_the_kernel():
    """Half credit for the n-1 variance, from the values alone: a kernel whose checker said
    1.0 hands back the same values."""
    s = graded("practice_mean_var", (4, 20 / 3), 0)
    assert s.fraction == 0.5 and "unbiased_variance" in s.faults
    assert graded("practice_mean_var", (4, 5), 0).fraction == 1.0


RMS_MODULE = ("class RMSNorm(nn.Module):\n    def __init__(self, dim, eps=1e-6):\n        super().__init__()\n"
              "        self.eps = eps\n        self.weight = nn.Parameter(torch.ones(dim))\n\n"
              "    def forward(self, x):\n{body}")


def _module(body: str, **ns):
    ns = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, **ns}
    exec(RMS_MODULE.format(body=body), ns)
    return ns["RMSNorm"]


def test_a_class_that_only_knows_the_visible_battery_earns_the_visible_point_only():
    from normref.checks.module import _module_battery
    from normref.functional import rms_norm

    table = [(c.x.clone(), rms_norm(c.x, c.weight, eps=1e-6 if c.eps is None else c.eps))
             for c in _module_battery() if c.x is not None]
    cls = _module("        for xv, y in KNOWN:\n"
                  "            if xv.shape == x.shape and xv.dtype == x.dtype and torch.equal(xv, x):\n"
                  "                return y.clone()\n        return x.clone()\n", KNOWN=table)
    assert __import__("normref").check_rms_norm_module(cls).passed  # it fools the public battery
    assert trusted_points("rms_module_quick", cls, 0) == 1.0
    assert trusted_points("rms_module_battery", cls, 7) == 0.5  # the structural case (its weight) only


def test_a_module_that_calls_the_reference_earns_zero_and_says_the_rule():
    cls = _module("        return getattr(F, 'rms' + '_norm')(x.float(), (x.shape[-1],), self.weight, self.eps)"
                  ".to(x.dtype)\n")
    s = graded("rms_module_battery", cls, 3)
    assert s.fraction == 0.0 and s.flags and "calls torch's rms_norm" in s.flags[0], (s.fraction, s.flags)


def test_a_block_record_that_does_not_follow_the_graders_wiring_fails_that_case():
    """The own-submodules case replays each submodule's recorded output only for the input the
    grader's wiring passes it; a record made on other inputs (a patched wiring in the kernel)
    fails the case, and a missing case fails too."""
    ns = namespace("block", "correct")
    rec = handed_back("block_battery", ns["PreNormBlock"], 4)
    own = rec["cases"][3]["trace"]
    own[2]["in"] = own[0]["in"]  # post_attention_layernorm "called" on x instead of h
    cell = nbformat.v4.new_code_cell("", metadata={"nbgrader": {"grade_id": "block_battery", "grade": True}})
    cell.outputs = [nbformat.v4.new_output("display_data", data={MIME: json.loads(json.dumps(rec))})]
    s = scores.score_notebook(nbformat.v4.new_notebook(cells=[cell]), 4)["block_battery"]
    assert s.fraction == 0.75 and "other inputs than the grader's wiring" in " ".join(s.text.split())
    rec["cases"] = rec["cases"][:2]
    cell.outputs = [nbformat.v4.new_output("display_data", data={MIME: json.loads(json.dumps(rec))})]
    assert scores.score_notebook(nbformat.v4.new_notebook(cells=[cell]), 4)["block_battery"].fraction == 0.5


# ----------------------------------------------------------- the inputs in the hidden test, the sealed hand-back

def _scored_bundle(gid: str, bundle: dict, seed: int) -> scores.Scored:
    cell = nbformat.v4.new_code_cell("", metadata={"nbgrader": {"grade_id": gid, "grade": True}})
    cell.outputs = [nbformat.v4.new_output("display_data", data={MIME: json.loads(json.dumps(bundle))})]
    return scores.score_notebook(nbformat.v4.new_notebook(cells=[cell]), seed)[gid]


def _config_namespace() -> dict:
    from traitlets.config import Config

    ns = {"get_config": Config, "__file__": str(REPO / "nbgrader_config.py")}
    exec(compile((REPO / "nbgrader_config.py").read_text(), str(REPO / "nbgrader_config.py"), "exec"), ns)
    return ns


def test_each_question_s_inputs_are_written_into_its_hidden_test_just_before_it_runs_and_taken_out_after(
        tmp_path, monkeypatch):
    import re

    from normref.handback_files import HANDBACK_ENV
    from normref.wire import load_inputs

    seed, path = scoring.prepare_inputs(tmp_path, seed=5, log=lambda *_: None)
    inputs = json.loads(path.read_text())
    # one text per question; a drawn battery's its own
    drawn = [g for g in scoring.QUESTIONS if scoring.QUESTIONS[g].draw is not None]
    assert set(inputs) == set(scoring.QUESTIONS) and len({inputs[g] for g in drawn}) == len(drawn) >= 10
    assert path.stat().st_mode & 0o077 == 0  # the grader's alone
    # in logs/scoring/ (outside every sandbox), and nowhere else: no kernel is given a file
    assert path.parent == tmp_path / "logs" / "scoring" and sorted(p.name for p in (tmp_path / "logs").iterdir()) == [
        "scoring"]
    calls = load_inputs(inputs["rms_norm_battery"])["calls"]
    want = scoring.probe_calls("rms_norm_battery", seed)
    assert len(calls) == len(want) and all(torch.equal(a[0][0], b[0][0]) for a, b in zip(calls, want))

    ns = _config_namespace()
    monkeypatch.setenv(HANDBACK_ENV, str(path))
    # a code question's calls are the grader's clean room's (grader/kernel/cleanroom.py): its kernel gets
    # none of its inputs, its hand-back line is a no-op, and no sealing cell is added for it
    source = nbformat.read(REPO / "source" / "rmsnorm" / "rmsnorm.ipynb", as_version=4)
    nb = nbformat.reads(nbformat.writes(source), as_version=4)
    resources: dict = {}
    nb, resources = ns["HandbackInputs"]().preprocess(nb, resources)
    assert len(nb.cells) == len(source.cells) and not any(t in nbformat.writes(nb) for t in inputs.values())
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") in ("rms_norm_shape", "rms_norm_battery"):
            assert "hand_back(" not in c.source and "pass  # graded apart, in the grader's clean room" in c.source
    nb, resources = ns["HandbackInputsRemoved"]().preprocess(nb, resources)
    assert nbformat.writes(nb) == nbformat.writes(source)
    # a short answer's values are the kernel's to hand back: its inputs and the sealed hand-back
    source = nbformat.read(REPO / "source" / "practice" / "practice.ipynb", as_version=4)
    nb = nbformat.reads(nbformat.writes(source), as_version=4)
    resources = {"nbgrader": {"assignment": "practice"}}
    nb, resources = ns["HandbackInputs"]().preprocess(nb, resources)
    name = re.fullmatch(r"(_[A-Za-z]{16}) = __import__\('normref.handback', fromlist=\['seal'\]\)\.seal\(torch=False\)",
                        nb.cells[0].source).group(1)
    hidden = {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade_id") in ("practice_rms", "trace_rms_shape")}
    for gid, src in hidden.items():
        given = f'{name}.inputs("{gid}", "{inputs[gid]}")\n{name}("{gid}", '
        assert given in src and "hand_back(" not in src
        # the call's own line holds no inputs: a traceback of it (a timeout's) shows none
        assert inputs[gid] not in src.split(given.split("\n")[0], 1)[1]
    nb, resources = ns["HandbackInputsRemoved"]().preprocess(nb, resources)
    assert nbformat.writes(nb) == nbformat.writes(source)  # no inputs, no sealing cell left behind
    monkeypatch.delenv(HANDBACK_ENV)
    assert ns["HandbackInputs"]().preprocess(nb, {})[0].cells[0].source == source.cells[0].source  # no inputs: as it is
    autograde = [p.__name__ for p in ns["c"].Autograde.autograde_preprocessors]
    at = autograde.index("GradingExecute")  # nbgrader's Execute, where a kernel that stops answering is killed
    assert autograde[at - 1:at + 2] == ["HandbackInputs", "GradingExecute", "HandbackInputsRemoved"]


def test_the_sealed_hand_back_reports_a_patched_module_and_a_thread_started_before_the_call(tmp_path, monkeypatch):
    import sys
    from concurrent.futures import ThreadPoolExecutor

    import normref.handback as handback

    seed, path = scoring.prepare_inputs(tmp_path, seed=5, log=lambda *_: None)
    inputs = json.loads(path.read_text())
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, raw=False: shown.append(obj[MIME]))
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    sealed = handback.seal()  # what the first cell of a graded notebook does
    gid = "rms_norm_battery"
    sealed.inputs(gid, inputs[gid])  # what the hidden test's first line does
    ns = {"torch": torch}
    exec(RMS_HONEST, ns)
    assert sealed(gid, ns["rms_norm"]) == 0.0 and "changed" not in shown[-1]
    s = _scored_bundle(gid, shown[-1], seed)
    assert (s.fraction, s.flags) == (1.0, [])
    with pytest.raises(RuntimeError, match=r"ran without its inputs: it is graded by `make grade`"):
        handback.hand_back(gid, ns["rms_norm"])  # as written: no inputs, the cell fails
    assert len(shown) == 1  # and nothing was handed back

    cheat = f"def rms_norm(x, weight, eps=1e-6):\n    return {REFERENCE_SPELLINGS['getattr'].split('return ')[1]}"
    ns = {"torch": torch, "F": torch.nn.functional}
    exec(cheat, ns)
    # the red team's patch: the hand-back given no reference names, through an alias of its module
    alias, orig = sys.modules["normref.handback"], handback.run_calls
    monkeypatch.setattr(alias, "run_calls",
                        lambda fn, calls, reference=None, sealed=None, trace=None: orig(fn, calls, None))
    sealed(gid, ns["rms_norm"])
    assert shown[-1]["changed"] == ["normref.handback.run_calls"]
    s = _scored_bundle(gid, shown[-1], seed)
    assert s.fraction == 0.0 and "changed the grader's hand-back" in s.flags[0] and "run_calls" in s.flags[0]
    monkeypatch.setattr(alias, "run_calls", orig)
    monkeypatch.setattr(orig, "__code__", (lambda fn, calls, reference=None, sealed=None, trace=None: []).__code__)
    sealed(gid, ns["rms_norm"])
    assert shown[-1]["changed"] == ["normref.handback.run_calls (its code)"]
    monkeypatch.undo()
    monkeypatch.setattr("IPython.display.display", lambda obj, raw=False: shown.append(obj[MIME]))
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")

    # a pool whose thread was started after the kernel was sealed, before the call
    pool = ThreadPoolExecutor(1)
    try:
        pool.submit(int).result()
        ref = getattr(torch.nn.functional, "rms" + "_norm")
        sealed(gid, lambda x, w, eps=1e-6: pool.submit(ref, x.float(), (x.shape[-1],), w.float(), eps)
               .result().to(x.dtype))
    finally:
        pool.shutdown()
    s = _scored_bundle(gid, shown[-1], seed)
    # the pool's thread, started by this (notebook) code after the kernel was sealed, is flagged;
    # the reference ran in it, where the recorder does not look: scored on the outputs
    assert s.fraction == 1.0 and len(s.flags) == 1 and "another thread or process" in s.flags[0], s.flags


def test_a_reference_laundered_through_a_course_helper_is_the_students_call():
    from functools import partial

    import normref.blocks

    ref = getattr(torch.nn.functional, "rms" + "_norm")

    def rms_norm(x, weight, eps=1e-6):
        norm = partial(ref, normalized_shape=(x.shape[-1],), weight=weight.float(), eps=eps)
        return normref.blocks.post_ln(x.float(), lambda t: t * 0, norm).to(x.dtype)

    s = graded("rms_norm_battery", rms_norm, 5)
    assert s.fraction == 0.0 and "calls torch's rms_norm" in s.flags[0], s.flags
    # the same Post-LN, for the block question, with the checker's own norm: allowed
    post = graded("post_ln_battery", lambda x, sublayer, norm: norm(x + sublayer(x)), 5)
    assert (post.fraction, post.flags) == (1.0, [])


@pytest.mark.parametrize("reason, said", [
    ("the grading kernel died or hung while running this question's code.",
     "the grading kernel died or hung while running this question's code."),
])
def test_a_question_whose_answer_cell_the_grader_removed_says_why_not_a_name_error(reason, said):
    from grader.autograde.engine import STUB

    assert STUB.startswith(f"# The grader removed this cell: {reason}")  # the dead-kernel regrade's stub
    stub = f"# The grader removed this cell: {reason}\nraise RuntimeError('removed by the grader')"
    answer = nbformat.v4.new_code_cell(stub, metadata={"nbgrader": {"grade_id": "rms_norm_impl", "solution": True}})
    tests = []
    for gid in ("rms_norm_shape", "rms_norm_battery"):
        cell = nbformat.v4.new_code_cell("", metadata={"nbgrader": {"grade_id": gid, "grade": True}})
        cell.outputs = [nbformat.v4.new_output("error", ename="NameError", evalue="name 'rms_norm' is not defined",
                                               traceback=[])]
        tests.append(cell)
    scored = scores.score_notebook(nbformat.v4.new_notebook(cells=[answer, *tests]), 3)
    for gid, s in scored.items():
        assert s.fraction == 0.0 and "removed your answer cell 'rms_norm_impl'" in s.text and said in s.text, s.text
        assert "NameError" not in s.text


def test_two_threads_scoring_at_once_score_as_one_does():
    """Two scorings in one process at once (test_assignments grades two assignments in threads),
    with nothing taking turns but the parsing of Python syntax (normref._syntax). When a drawn
    battery was patched into its checker's module and sublayers were built under torch's global
    RNG, they swapped batteries or reseeded a draw half-way: a correct Post-LN once scored 0 of 4
    in CI, a correct block 2 of 4 in a fresh-clone run (its wiring cases' attention redrawn while
    the other thread built the block's public battery under torch.manual_seed). Now each checker
    is handed its battery and every battery draws from its own generator; without the parse lock
    CPython 3.11's ast.parse raises "AST constructor recursion depth mismatch" here."""
    from concurrent.futures import ThreadPoolExecutor

    ns = namespace("block", "correct")
    seed = scoring.new_seed()
    cells = {}
    for gid in ("pre_ln_battery", "post_ln_battery", "block_battery", "rms_module_battery"):
        cell = nbformat.v4.new_code_cell("", metadata={"nbgrader": {"grade_id": gid, "grade": True}})
        cell.outputs = [nbformat.v4.new_output("display_data", data={
            MIME: json.loads(json.dumps(handed_back(gid, ns[QUESTION_FN[gid][1]], seed)))})]
        cells[gid] = nbformat.v4.new_notebook(cells=[cell])

    def score(gid: str) -> float:
        if gid == "plan":  # what another course's prepare_inputs does: the block's public battery,
            scoring.plan_cases("block_quick", seed)  # built under torch.manual_seed
            return 1.0
        return scores.score_notebook(cells[gid], seed)[gid].fraction

    order = [g for _ in range(12) for g in [*cells, "plan", "plan"]]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(score, order))
    assert got == [1.0] * len(order), [(g, f) for g, f in zip(order, got) if f != 1.0]
