"""Issue 30 item 1: the diagnosis' trace made where the student's code runs and handed back
(normref.diagnosis.handed), so that grading says the self-check's words: the formula travels as
JSON and reads back as the same canonical formula, a record that does not read is no trace,
and a trace never changes points (the full comparison of the three verdicts on the answer bank
is tests/test_verdicts.py's). Fast: the hand-back's own code in this process."""
from __future__ import annotations

import json
import math

import torch

from grader.scoring import inputs as scoring
from grader.scoring import scores
from normref.diagnosis import expr as E
from normref.diagnosis.handed import MAX_NODES, expr_from_json, expr_json, traced_from_record
from normref.diagnosis.handing import trace_record
from normref.wire import load_inputs

SEED = 11
NO_TRANSPOSE = ("import math\ndef qk_norm_logits(q, k, q_norm, k_norm):\n"
                "    return q_norm(q) @ k_norm(k) / math.sqrt(q.shape[-1])\n")


def _answer(source: str, name: str):
    ns: dict = {}
    exec(compile(source, "<the student's cell>", "exec"), ns)  # a function of no module: the student's
    return ns[name]


def test_a_traced_formula_travels_as_json_and_reads_back_the_same():
    """The trace of ``q_norm(q) @ k_norm(k) / sqrt(d)`` on the seed case (d = 3): by hand, the
    matrix product of the two norms' outputs times 1/sqrt(3), k never transposed."""
    from normref.checks.modern import _qk_battery
    from normref.diagnosis import declared

    case = _qk_battery()[0]
    args, kwargs = declared("qk_norm_logits").args(case)
    rec = trace_record("qk_norm_logits", _answer(NO_TRANSPOSE, "qk_norm_logits"), args, kwargs)
    back = traced_from_record(json.loads(json.dumps(rec)))
    want = E.scale(E.matmul(E.Call("q_norm", E.Atom("q")), E.Call("k_norm", E.Atom("k"))), 1 / math.sqrt(3))
    assert back.expr == want and back.expr.key == want.key
    assert expr_from_json(expr_json(want)) == want
    q_norm, k_norm = args[2], args[3]
    assert torch.allclose(back.value, q_norm(args[0]) @ k_norm(args[1]) / math.sqrt(3))
    # not a traced question (a norm's answer is read from its outputs), or not the student's code: nothing
    assert trace_record("rms_norm", _answer("def f(x, w, eps=1e-6):\n    return x\n", "f"), (args[0],), {}) is None
    assert trace_record("qk_norm_logits", math.sqrt, args, kwargs) is None


def test_a_handed_back_trace_that_does_not_read_is_no_trace():
    assert expr_from_json(["atom", "<script>alert(1)</script>"]) is None  # a name that is not a plain one
    assert expr_from_json(["lin", [[["atom", "x"], float("nan")]]]) is None
    assert expr_from_json(["call", "tanh", "dim=-1", ["bogus", "x"]]) is None
    deep = ["atom", "x"]
    for _ in range(MAX_NODES + 1):
        deep = ["call", "F", "", deep]
    assert expr_from_json(deep) is None
    assert traced_from_record({"expr": ["atom", "x"], "value": {"t": "torch", "dtype": "nope", "npy": ""}}) is None
    assert traced_from_record("a string") is None


def _bundle(gid: str, fn) -> dict:
    from normref import handback

    bundle, _ = handback._outputs(gid, load_inputs(scoring.question_inputs(gid, SEED)), fn, (), None)
    return json.loads(json.dumps(bundle))


def _scored(gid: str, bundle: dict) -> scores.Scored:
    return scores._score_bundle(gid, SEED, bundle)


def test_grading_says_the_traced_formula_and_no_points_hang_on_the_trace():
    """A QK-norm answer that never transposes k: its drawn battery's cases with T != d raise,
    the others compute the wrong logits. With the trace handed back, grading names the formula
    and every case by the one mistake (as the self-check, which traces in the kernel), not a
    bare "raised"; the points are the battery's with the trace, without it, or with a forged one."""
    gid = "qk_logits_battery"
    bundle = _bundle(gid, _answer(NO_TRANSPOSE, "qk_norm_logits"))
    assert any("traced" in c for c in bundle["calls"])
    with_trace = _scored(gid, bundle)
    assert "your qk_norm_logits computes q_norm(q) k_norm(k)" in with_trace.text
    assert sorted(set(with_trace.faults)) == ["qk_no_transpose"]
    bare = json.loads(json.dumps(bundle))
    forged = json.loads(json.dumps(bundle))
    for c in bare["calls"]:
        c.pop("traced", None)
    for c in forged["calls"]:
        if "traced" in c:
            c["traced"]["expr"] = ["atom", "q"]
    for other in (_scored(gid, bare), _scored(gid, forged)):
        assert other.fraction == with_trace.fraction == 0.0
    assert "raises" in _scored(gid, bare).faults  # what grading said before: a case that raised, unexplained


def test_a_class_questions_plan_cases_carry_their_trace():
    """The block's plan: each case whose forward returned is traced with the question's
    parameters (forward's input, then the module's parts by name): the wiring cases and the
    student's own submodules' case."""
    from normref.blocks import CausalSelfAttention, FeedForward
    from normref.modules import RMSNorm

    class Block(torch.nn.Module):
        def __init__(self, dim, n_heads):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = RMSNorm(dim), RMSNorm(dim)
            self.self_attn, self.mlp = CausalSelfAttention(dim, n_heads), FeedForward(dim, 4 * dim)

        def forward(self, x):
            h = x + self.self_attn(self.input_layernorm(x))
            return h + self.mlp(self.post_attention_layernorm(h))

    Block.__module__ = "__main__"  # the student's class
    cases = _bundle("block_battery", Block)["cases"]
    traced = [c for c in cases if "traced" in c]
    assert len(traced) >= 2, [sorted(c) for c in cases]
    for c in traced:
        e = traced_from_record(c["traced"]).expr
        assert E.render(e).startswith("x + self_attn(input_layernorm(x))"), E.render(e)


def test_the_clean_rooms_seal_keeps_the_tracing_and_only_it():
    """The clean room makes every normref function absent but those it keeps: the tracing's
    modules are among them (else a trace there would meet an absent function and say nothing),
    and no module that computes a norm or holds a checker's reference is."""
    from grader.kernel.cleanroom_seal import KEPT_NORMREF
    from normref.diagnosis.handing import TRACE_MODULES
    from normref.reference_code import _REFERENCE_MODULES

    assert set(TRACE_MODULES) <= KEPT_NORMREF
    assert not KEPT_NORMREF & {*_REFERENCE_MODULES, "normref.diagnosis.diagnose", "normref.diagnosis.norms",
                               "normref.checks.block", "normref.checks.modern", "normref.checks.core"}
