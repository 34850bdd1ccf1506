"""normref.rules: the rule that costs points (implement it, do not call a reference norm) is
found the same way in the student's self-check and in the grader's tamper scan."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

# torch._refs imports sympy on first use (seconds, cut by the checker's 5 s call timeout on a
# loaded machine, which leaves sympy half-imported for the rest of the session): import it here
import torch.fx.experimental.symbolic_shapes  # noqa: F401

import normref
from normref import check_layer_norm, check_rms_norm, check_rms_norm_module
from normref.rules import reference_calls, reference_calls_in

# (source, the lines a reference is called or imported on)
SOURCES = [
    ("def rms_norm(x, w, eps=1e-6):\n    return F.rms_norm(x, (x.shape[-1],), w, eps)\n", [2]),
    ("y = torch.nn.functional.layer_norm(x, (8,))\n", [1]),
    ("y = torch.rms_norm(x, (8,))\n", [1]),
    ("from torch.nn.functional import rms_norm as rn\ny = rn(x, (8,))\n", [1, 2]),
    ("norm = nn.RMSNorm(8)\n", [1]),
    ("y = normref.pre_ln(x, f, n)\n", [1]),
    # implemented by hand: nothing to flag
    ("def rms_norm(x, w, eps=1e-6):\n    rms = x.float().pow(2).mean(dim=-1, keepdim=True)\n"
     "    return (x.float() * (rms + eps).rsqrt() * w).to(x.dtype)\n", []),
    ("import torch.nn.functional as G\ny = G.rms_norm(x, (8,))\n", [2]),  # an alias in the source
    ("y = np.linalg.norm(x, axis=-1)\nz = rms_norm(x, w)\n", []),  # its own rms_norm
    ("def f(:\n", []),  # does not parse
]


@pytest.mark.parametrize("source, lines", SOURCES)
def test_reference_calls_in_source(source, lines):
    assert [line for line, _ in reference_calls(source)] == lines


def test_what_is_named_is_the_call_as_written():
    assert reference_calls("y = F.rms_norm(x, (3,))") == [(1, "calls F.rms_norm")]
    assert reference_calls("from normref import layer_norm") == [
        (1, "imports the reference normref.layer_norm")]


def test_a_bound_alias_is_resolved():
    # the grader passes what the locked cells import; the checker the student's globals
    assert reference_calls("y = ln(x)", {"ln": "normref.functional.layer_norm"}) == [
        (1, "calls ln (normref.functional.layer_norm)")]
    assert reference_calls("y = Fn.rms_norm(x)", {"Fn": "torch.nn.functional"}) == [(1, "calls Fn.rms_norm")]
    assert reference_calls("y = ln(x)", {"ln": "__main__.ln"}) == []
    # an import in the source rebinds what the scope had
    assert reference_calls("import torch.nn.functional as F\ny = F.rms_norm(x)", {"F": "__main__.F"}) == [
        (2, "calls F.rms_norm")]


@pytest.mark.parametrize("source, lines", SOURCES[:-1])
def test_the_grader_tamper_scan_flags_the_same_lines(source, lines):
    from grader.intake.tamper import scan

    flagged = sorted({f.line for f in scan(source) if f.kind == "reference"})
    assert flagged == lines


# ------------------------------------------------------------------ the self-check says the rule

def calls_f_rms_norm(x, weight, eps=1e-6):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def calls_torch_layer_norm(x, weight, bias, eps=1e-5):
    return torch.nn.functional.layer_norm(torch.as_tensor(x), (x.shape[-1],), torch.as_tensor(weight),
                                          torch.as_tensor(bias), eps).numpy()


class ModuleCallingF(torch.nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight, self.eps).to(x.dtype)


def test_a_reference_call_passes_every_case_but_the_self_check_gives_what_grading_gives():
    r = check_rms_norm(calls_f_rms_norm)
    assert all(c.passed for c in r.cases)  # the values are right: F.rms_norm is correct
    assert r.score == 0 and not r.passed and r.faults[0] == "reference_call"
    # one violation, one line: the call as the source spells it (grading's recorder also saw
    # "calls torch's rms_norm": the same call, not said twice); no "6/6 cases passed" header
    assert r.breaches == ["0 points: calls F.rms_norm \u2014 implement it with tensor operations"]
    assert r.report() == r.breaches[0]


def test_the_rule_speaks_numpy_to_a_numpy_answer_and_reads_a_module_class():
    r = check_layer_norm(calls_torch_layer_norm)
    assert r.score == 0 and r.breaches == [
        "0 points: calls torch.nn.functional.layer_norm \u2014 implement it with array operations"]
    r = check_rms_norm_module(ModuleCallingF)
    assert r.score == 0 and r.breaches == ["0 points: calls F.rms_norm \u2014 implement it with tensor operations"]


def test_the_reference_itself_and_an_own_implementation_break_no_rule():
    assert reference_calls_in(normref.rms_norm) == [] and reference_calls_in(normref.RMSNorm) == []

    def own(x, weight, eps=1e-6):
        return (x.float() * x.float().pow(2).mean(-1, keepdim=True).add(eps).rsqrt() * weight).to(x.dtype)

    r = check_rms_norm(own)
    assert r.passed and r.score == 1 and r.breaches == []
    assert reference_calls_in(np.mean) == []  # no readable source: nothing claimed


# --------------------------------------------------------------------------- one rule, two places
# Issue 16: what the student's self-check and Validate say is what grading gives. Each answer
# below is put in the released notebook and run three ways: the self-check (the notebook's
# cells in Run All order, with NBGRADER_EXECUTION=validate as `nbgrader validate` sets it, so
# a battery the answer does not fully pass fails its cell); grading (the kernel's record of the
# answer on the grader's inputs, scored in the grader's process, as `make grade` does); and
# (slow) the real `nbgrader validate`. Points are derived by hand, per case, in EXPECTED_RULE.

import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import nbformat  # noqa: E402

from normref.rules import rule_message  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
POINTS = {"rmsnorm": {"rms_norm_shape": 1.0, "rms_norm_battery": 4.0},
          "layernorm": {"layer_norm_seed": 1.0, "layer_norm_battery": 3.0},
          "layernorm_backward": {"layer_norm_backward_seed": 1.0, "layer_norm_backward_gradcheck": 4.0},
          "block": {"rms_module_quick": 1.0, "rms_module_battery": 3.5, "pre_ln_quick": 1.0, "pre_ln_battery": 2.0,
                    "post_ln_quick": 1.0, "post_ln_battery": 2.0, "block_quick": 1.0, "block_battery": 2.0}}
#: grade_id -> (the name the hidden test hands back, the battery checker's result variable)
HANDED = {"rms_norm_shape": "rms_norm", "rms_norm_battery": "rms_norm", "rms_module_quick": "RMSNorm",
          "rms_module_battery": "RMSNorm", "pre_ln_quick": "pre_ln", "pre_ln_battery": "pre_ln",
          "post_ln_quick": "post_ln", "post_ln_battery": "post_ln", "block_quick": "PreNormBlock",
          "block_battery": "PreNormBlock", "layer_norm_seed": "layer_norm", "layer_norm_battery": "layer_norm",
          "layer_norm_backward_seed": "layer_norm_backward", "layer_norm_backward_gradcheck": "layer_norm_backward"}
#: the assignments answered in numpy: the rule says "array operations"
NUMPY = {"layernorm", "layernorm_backward"}
BATTERIES = {g for pts in POINTS.values() for g in pts if g.endswith("_battery")} | {"layer_norm_backward_gradcheck"}

# Honest answers written differently from the reference: other algebra, float64 statistics,
# other casts (Hugging Face's Llama casts before the weight), another construction order.
HONEST_RMS = ("def rms_norm(x, weight, eps=1e-6):\n"
              "    h = x.double()  # float64 statistics\n"
              "    inv = 1.0 / torch.sqrt(torch.linalg.vector_norm(h, dim=-1, keepdim=True) ** 2 / h.shape[-1] + eps)\n"
              "    return (h * inv * weight.double()).to(x.dtype)\n")
HONEST_BLOCK = {
    "rms_module_impl": (
        "class RMSNorm(nn.Module):\n"
        "    def __init__(self, dim, eps=1e-6):\n"
        "        super().__init__()\n"
        "        self.weight = nn.Parameter(torch.ones(dim))\n"
        "        self.eps = eps\n\n"
        "    def forward(self, x):\n"
        "        h = x.to(torch.float32)\n"
        "        h = h / (h * h).mean(-1, keepdim=True).add(self.eps).sqrt()\n"
        "        return h.to(x.dtype) * self.weight.to(x.dtype)  # cast before the weight, as Llama does\n"),
    "pre_ln_impl": "def pre_ln(x, sublayer, norm):\n    y = sublayer(norm(x))\n    return torch.add(y, x)\n",
    "post_ln_impl": "def post_ln(x, sublayer, norm):\n    s = x.clone()\n    s += sublayer(x)\n    return norm(s)\n",
    "block_impl": (
        "class PreNormBlock(nn.Module):\n"
        "    def __init__(self, dim, n_heads):\n"
        "        super().__init__()\n"
        "        self.mlp = FeedForward(dim)  # another order than the lesson's\n"
        "        self.self_attn = CausalSelfAttention(dim, n_heads)\n"
        "        self.post_attention_layernorm = RMSNorm(dim)\n"
        "        self.input_layernorm = RMSNorm(dim)\n\n"
        "    def forward(self, x):\n"
        "        h = pre_ln(x, self.self_attn, self.input_layernorm)\n"
        "        return pre_ln(h, self.mlp, self.post_attention_layernorm)\n"),
}
FAKE_BLOCK = (
    "class Norm(nn.Module):\n"
    "    def __init__(self, dim):\n"
    "        super().__init__()\n"
    "        self.weight = nn.Parameter(torch.ones(dim))\n\n"
    "    def forward(self, x):\n"
    "        return x\n\n"
    "class Nothing(nn.Module):\n"
    "    def forward(self, x):\n"
    "        return torch.zeros_like(x)\n\n"
    "# class names that look right\n"
    "RMSNormLike = type('RMSNorm', (Norm,), {})\n"
    "AttentionLike = type('CausalSelfAttention', (Nothing,), {})\n"
    "FeedForwardLike = type('FeedForward', (Nothing,), {})\n\n"
    "class PreNormBlock(nn.Module):\n"
    "    def __init__(self, dim, n_heads):\n"
    "        super().__init__()\n"
    "        self.input_layernorm = RMSNormLike(dim)\n"
    "        self.self_attn = AttentionLike()\n"
    "        self.post_attention_layernorm = RMSNormLike(dim)\n"
    "        self.mlp = FeedForwardLike()\n\n"
    "    def forward(self, x):\n"
    "        return x\n")

# case -> (assignment, answer cells, {grade_id: points where not full}, what the rule's line says
# the code does (or {grade_id: that}), or None)
RULE_CASES = {
    "getattr": ("rmsnorm", {"rms_norm_impl": (
        "import torch.nn.functional as F\n\n"
        "def rms_norm(x, weight, eps=1e-6):\n"
        "    return getattr(F, 'rms' + '_norm')(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)\n")},
        {"rms_norm_shape": 0.0, "rms_norm_battery": 0.0}, "calls torch's rms_norm"),
    # a subclass of torch's RMSNorm: the module runs torch's rms_norm, and so does the block built of it
    "nn_rmsnorm_subclass": ("block", {**HONEST_BLOCK, "rms_module_impl": (
        "class RMSNorm(nn.RMSNorm):\n    def __init__(self, dim, eps=1e-6):\n"
        "        super().__init__(dim, eps=eps)\n")},
        {"rms_module_quick": 0.0, "rms_module_battery": 0.0, "block_quick": 0.0, "block_battery": 0.0},
        "calls torch's rms_norm"),
    # normref's own RMSNorm under the student's name: the module and the block built of it
    # (the module: the recorder's words; the block, whose source calls RMSNorm(dim): the call as
    # the source spells it, and what the name is)
    "normref_alias": ("block", {**HONEST_BLOCK, "rms_module_impl": "import normref\n\nRMSNorm = normref.RMSNorm\n"},
                      {"rms_module_quick": 0.0, "rms_module_battery": 0.0, "block_quick": 0.0, "block_battery": 0.0},
                      {"rms_module_quick": "calls normref.modules.RMSNorm.forward",
                       "rms_module_battery": "calls normref.modules.RMSNorm.forward",
                       "block_quick": "calls RMSNorm (normref.RMSNorm)",
                       "block_battery": "calls RMSNorm (normref.RMSNorm)"}),
    # a block whose forward returns its input, with submodules named like the real ones
    "fake_block": ("block", {**HONEST_BLOCK, "block_impl": FAKE_BLOCK},
                   {"block_quick": 0.0, "block_battery": 0.0}, None),
    # Post-LN that leaves the sublayer out: right only where F(v) = 2v (LN(3x) = LN(x))
    "post_ln_norm_x": ("block", {**HONEST_BLOCK,
                                 "post_ln_impl": "def post_ln(x, sublayer, norm):\n    return norm(x)\n"},
                       {"post_ln_quick": 0.0, "post_ln_battery": 0.0}, None),
    # O2: an honest rms_norm whose cell also imports threading (unused): no reference ran, so
    # nothing is taken; the import is flagged for the instructor's review, in the same words in
    # the self-check, Validate (which passes) and the feedback
    "threading_import": ("rmsnorm", {"rms_norm_impl": "import threading\n\n" + HONEST_RMS}, {}, None),
    # F6: the right wiring over two identity "norms" (a weight, forward returns x): the build
    # case finds they do not normalise, and the other cases are not scored
    "no_norm_block": ("block", {**HONEST_BLOCK, "block_impl": (
        "class _NoNorm(nn.Module):\n"
        "    def __init__(self, dim):\n"
        "        super().__init__()\n"
        "        self.weight = nn.Parameter(torch.ones(dim))\n\n"
        "    def forward(self, x):\n"
        "        return x\n\n"
        + HONEST_BLOCK["block_impl"].replace("RMSNorm(dim)", "_NoNorm(dim)"))},
        {"block_quick": 0.0, "block_battery": 0.0}, None),
    "honest_rmsnorm": ("rmsnorm", {"rms_norm_impl": HONEST_RMS}, {}, None),
    "honest_block": ("block", HONEST_BLOCK, {}, None),
    # the course's other code holds full references: a diagnosis helper, a checker's model
    "normref_diagnosis_helper": ("rmsnorm", {"rms_norm_impl": (
        "import torch\nfrom normref.diagnosis.norms import evaluate_norm, norm_case\n\n"
        "def rms_norm(x, weight, eps=1e-6):\n"
        "    return torch.from_numpy(evaluate_norm('rms', {}, norm_case(x, weight, None, eps))).to(x.dtype)\n")},
        {"rms_norm_shape": 0.0, "rms_norm_battery": 0.0},
        "calls the course's own normref.diagnosis.norms.norm_case"),
    "normref_checker_model": ("rmsnorm", {"rms_norm_impl": (
        "from normref.checks.norms import model_t\n\n"
        "def rms_norm(x, weight, eps=1e-6):\n    return model_t('rms', x, weight, None, eps)\n")},
        {"rms_norm_shape": 0.0, "rms_norm_battery": 0.0}, "calls the course's own normref.checks.norms.model_t"),
    # torch's Python reference code never passes through __torch_function__
    "torch_refs": ("layernorm", {"layer_norm_impl": (
        "import torch\nimport torch._refs\n\n"
        "def layer_norm(x, weight, bias, eps=1e-5):\n"
        "    f = getattr(torch._refs, 'native_layer' + '_norm')\n"
        "    t = lambda a: torch.as_tensor(a)\n"
        "    return f(t(x), [x.shape[-1]], t(weight), t(bias), eps)[0].numpy().astype(x.dtype)\n")},
        {"layer_norm_seed": 0.0, "layer_norm_battery": 0.0},
        "calls torch's reference code torch._refs.native_layer_norm"),
    # the recorder's mode taken off the stack while torch's rms_norm runs: the profile hook still
    # sees F.rms_norm run (the mode switched off is flagged beside it)
    "pop_mode": ("rmsnorm", {"rms_norm_impl": (
        "import torch\nimport torch.nn.functional as F\n\n"
        "def rms_norm(x, weight, eps=1e-6):\n"
        "    if torch.overrides._get_current_function_mode_stack():\n"
        "        with torch.overrides._pop_mode_temporarily():\n"
        "            return rms_norm(x, weight, eps)\n"
        "    f = getattr(F, 'rms' + '_norm')\n"
        "    return f(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)\n")},
        {"rms_norm_shape": 0.0, "rms_norm_battery": 0.0}, "calls torch's rms_norm"),
    # a reference's code object cloned under another name (past an identity check)
    "cloned_code": ("rmsnorm", {"rms_norm_impl": (
        "import types\nimport normref.functional as _nf\n\n"
        "_r = _nf.rms_norm\n"
        "_c = getattr(_r, '__co' + 'de__').replace(co_name='mine', co_filename='<mine>')\n"
        "rms_norm = types.FunctionType(_c, getattr(_r, '__glob' + 'als__'), 'mine', (1e-6,))\n")},
        {"rms_norm_shape": 0.0, "rms_norm_battery": 0.0}, "calls a copy of normref.functional.rms_norm"),
    # the backward by autograd over a hand-written forward
    "autograd_backward": ("layernorm_backward", {"layer_norm_backward_impl": (
        "import torch\n\n"
        "def layer_norm_backward(dy, x, weight, eps=1e-5):\n"
        "    xt = torch.tensor(x, requires_grad=True)\n"
        "    w = torch.tensor(weight, requires_grad=True)\n"
        "    b = torch.zeros_like(w, requires_grad=True)\n"
        "    mu = xt.mean(-1, keepdim=True)\n"
        "    var = ((xt - mu) ** 2).mean(-1, keepdim=True)\n"
        "    y = (xt - mu) / torch.sqrt(var + eps) * w + b\n"
        "    dx, dw, db = torch.autograd.grad(y, (xt, w, b), torch.tensor(dy))\n"
        "    return dx.numpy(), dw.numpy(), db.numpy()\n")},
        {"layer_norm_backward_seed": 0.0, "layer_norm_backward_gradcheck": 0.0},
        "uses autograd"),
}

def _notebook(case: str) -> nbformat.NotebookNode:
    from grader.demo import fill_answers

    assignment, answers, *_ = RULE_CASES[case]
    return fill_answers(REPO / "release" / assignment / f"{assignment}.ipynb", answers)


RULE_CASES_ASSIGNMENT = {g: a for a, pts in POINTS.items() for g in pts}


def _expected(case: str) -> dict[str, float]:
    assignment, _, changed, *_ = RULE_CASES[case]
    return {**POINTS[assignment], **changed}


#: What the self-check, Validate and grading flag for review in a case (and nothing else): the
#: same lines in all three.
RULE_REVIEWS = {
    "threading_import": {g: ["imports threading (line 1 of the cell that defines rms_norm)"]
                         for g in ("rms_norm_shape", "rms_norm_battery")},
    "pop_mode": {g: ["switched off the grader's call recorder (torch function mode)"]
                 for g in ("rms_norm_shape", "rms_norm_battery")},
}


def _reviews_in(text: str, gid: str) -> list[str]:
    """The review lines of a displayed text, each unwrapped (``<gid>: `` prefixes dropped)."""
    from normref.rules import REVIEW_PREFIX

    return [part.split(f" {gid}: ")[0].strip()
            for part in " ".join(text.split()).split(REVIEW_PREFIX)[1:]]


@pytest.mark.parametrize("case", sorted(RULE_CASES))
def test_the_self_check_and_validate_say_what_grading_gives(case):
    """Each case three ways, through tests/notebook_run.py: the released notebook's cells run in
    order as nbgrader validate runs them (the self-check's display and Validate's failing cells),
    and grading (the hand-back's own code on the objects the cells left, scored by the grader
    with its static scan of the same cells, nothing removed)."""
    from normref.rules import review_message
    from notebook_run import graded_in_process, run_cells

    assignment, answers, _, rule = RULE_CASES[case]
    want = _expected(case)
    nb = _notebook(case)
    run = run_cells(nb)
    errors = {g: c.error for g, c in run.cells.items() if g in want}
    shown = {g: c.printed for g, c in run.cells.items() if g in want}
    # Validate: exactly the cells that lose points fail, each naming the rule or the diagnosis
    losing = {g for g, p in want.items() if p < POINTS[assignment][g]}
    assert {g for g, e in errors.items() if e is not None} == losing, \
        {g: repr(e)[:300] for g, e in errors.items() if e is not None}
    for gid, err in errors.items():
        if err is not None and gid in BATTERIES:
            assert str(err).startswith(f"{gid}: ") and f"0 of {POINTS[assignment][gid]:g} points" in str(err), str(err)
        if rule is not None and err is not None:  # the rule, worded as grading words it, once
            what = rule[gid] if isinstance(rule, dict) else rule
            line = rule_message(what, "numpy" if assignment in NUMPY else "torch")
            said = " ".join(str(err).split())
            assert shown[gid].strip().splitlines()[0] == line, (shown[gid], err)  # no "n/n cases passed"
            # Validate: the same line, the battery's with the question and its points
            assert said == (f"{gid}: 0 of {POINTS[assignment][gid]:g} points: {line.removeprefix('0 points: ')}"
                            if gid in BATTERIES else line), (said, line)
    # the self-check's points (the results the cells made), and its reviews
    points = {g: round(POINTS[assignment][g] * (float(run.cells[g].result.passed) if g not in BATTERIES
                                                 else run.cells[g].result.score), 2) for g in want}
    assert points == want
    reviews = RULE_REVIEWS.get(case, {})
    for gid in want:
        assert _reviews_in(shown[gid], gid) == reviews.get(gid, []), (gid, shown[gid])
    # grading: the same notebook scored as make grade scores it (nothing removed), the same reviews
    source = nbformat.read(REPO / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    graded = graded_in_process(nb, source, run)
    assert {g: round(POINTS[assignment][g] * graded[g].fraction, 2) for g in want} == want
    for gid in want:
        assert _reviews_in(graded[gid].text, gid) == reviews.get(gid, []), (gid, graded[gid].text)
        assert [f.removeprefix(f"{gid}: ") for f in graded[gid].flags if "review" in f] == \
            [review_message(r) for r in reviews.get(gid, [])]
        if rule is not None and want[gid] == 0:
            what = rule[gid] if isinstance(rule, dict) else rule
            assert graded[gid].text.splitlines()[0] == f"{gid}: " + rule_message(
                what, "numpy" if assignment in NUMPY else "torch"), graded[gid].text


@pytest.mark.slow
def test_real_nbgrader_validate_says_the_rule_in_grading_words(tmp_path):
    """The real ``nbgrader validate`` (two notebooks, run side by side): no "Success!", each
    question that loses points fails with grading's sentence and points."""
    procs = {}
    for case in ("getattr", "nn_rmsnorm_subclass"):
        path = tmp_path / case / f"{RULE_CASES[case][0]}.ipynb"
        path.parent.mkdir()
        nb = _notebook(case)
        for c in nb.cells:  # the written answer too, so that only the code questions fail
            if c.metadata.get("nbgrader", {}).get("grade_id") == "block_warmup_why":
                c.source = ("Post-LN's output-side gradients are large at initialisation; "
                            "warmup keeps early steps small.")
        nbformat.write(nb, path)
        procs[case] = subprocess.Popen([sys.executable, "-m", "nbgrader", "validate", str(path)], cwd=path.parent,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for case, proc in procs.items():
        out = " ".join(proc.communicate(timeout=300)[0].split())
        assignment, _, changed, rule = RULE_CASES[case]
        assert "Success!" not in out and f"VALIDATION FAILED ON {len(changed)} CELL(S)" in out, out[-3000:]
        assert " ".join(rule_message(rule).split()) in out, out[-3000:]
        for gid in changed:
            if gid.endswith("_battery"):
                assert f"{gid}: " in out and f"0 of {POINTS[assignment][gid]:g} points" in out, (gid, out[-3000:])
