"""Issue 31 items 1 and 4: placements and wirings are traced, not guessed, through one shared
mechanism every question gets by declaring its signature and reference.

- The formula algebra (normref.diagnosis.expr) is canonical: equal formulas written differently
  compare equal, and render in the lessons' notation (expected strings written by hand here).
- Tracing (normref.diagnosis.trace) records what an answer computes, with the real tensors'
  shapes and errors, and gives up (None) on code it cannot follow.
- Every question whose answer takes callables (pre_ln, post_ln, peri_ln, qk_norm_logits, the
  block) and DyT state the formula the code computes beside the one asked, on every failing case;
  a placement is named only when the formula is that placement.
- Where the code cannot be traced (grading replays outputs), the formula is identified from the
  outputs over a generated space: grading's replay of the hand-back says what the self-check says.
- A question declared in this test, with its own checker, gets all of it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

import normref
from grader.scoring.replay import Replay
from normref import check_dyt, check_peri_ln, check_post_ln, check_pre_ln, check_pre_ln_block, check_qk_norm_logits
from normref.checks.compare import compare_array, diagnose_by_models, to_f64
from normref.checks.core import run, seeded_randn, student_call
from normref.diagnosis import Question, declare, expr as E
from normref.diagnosis.compose import identify
from normref.diagnosis.trace import trace
from normref.handback import probe, run_calls


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


x, q, k = E.Atom("x"), E.Atom("q"), E.Atom("k")


def F(e):
    return E.Call("F", e)


def N(e):
    return E.Call("norm", e)


# ------------------------------------------------------------------ the algebra


def test_formulas_written_differently_are_one_canonical_form():
    assert E.add(x, F(N(x))) == E.add(F(N(x)), x)
    assert E.add(x, x) == E.scale(x, 2.0)
    assert E.add(x, E.scale(x, -1.0)) == E.ZERO
    # (a b^T)^T = b a^T, coefficients pulled out of matrix products
    assert E.transpose(E.matmul(q, E.transpose(k))) == E.matmul(k, E.transpose(q))
    assert E.matmul(E.scale(q, 0.5), E.scale(k, 4.0)) == E.scale(E.matmul(q, k), 2.0)
    # products expanded over sums and sorted: w * (t + b) = b * w + t * w
    w, t, b = E.Atom("w"), E.Atom("t"), E.Atom("b")
    assert E.mul(w, E.add(t, b)) == E.add(E.mul(b, w), E.mul(t, w))
    assert E.power(E.power(x, 2.0), 0.5) == x


def test_formulas_render_in_the_lessons_notation():
    assert E.render(E.add(x, E.Call("out_norm", F(N(x))))) == "x + out_norm(F(norm(x)))"
    logits = E.scale(E.matmul(E.Call("q_norm", q), E.transpose(E.Call("k_norm", k))), 1 / math.sqrt(8))
    assert E.render(logits, {"d": 8, "T": 3}) == "q_norm(q) k_norm(k)^T / sqrt(d)"
    alpha, weight, bias = E.Atom("alpha"), E.Atom("weight"), E.Atom("bias")
    dyt = E.add(E.mul(weight, E.Call("tanh", E.mul(alpha, x))), bias)
    assert E.render(dyt) == "weight * tanh(alpha * x) + bias"
    assert E.render(E.scale(E.add(x, F(N(x))), 1 / math.sqrt(2))) == "(x + F(norm(x))) / sqrt(2)"


def test_tracing_records_the_formula_and_gives_up_on_what_it_cannot_follow():
    xt = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    sub, norm = (lambda v: torch.tanh(v)), normref.RMSNorm(4)

    def traced(fn):
        return trace(lambda s, c: fn(s["x"], c["F"], c["norm"]), {"x": xt}, {"F": sub, "norm": norm})

    t = traced(lambda v, f, n: n(torch.add(v, f(n(v).float()).to(v.dtype))))
    assert t is not None and E.render(t.expr) == "norm(x + F(norm(x)))"
    torch.testing.assert_close(t.value, norm(xt + sub(norm(xt))))  # the real value rides along
    assert traced(lambda v, f, n: v[..., :2].sum()) is None  # indexing: not followed
    assert traced(lambda v, f, n: v + f(n(v)) if v.sum() > 0 else v) is None  # a branch on a value
    assert traced(lambda v, f, n: n(v.reshape(4, 6))) is None  # the norm raises on [4, 6]: as the real one


# ------------------------------------------------------------------ every question with callables

TRACED = [  # (checker, answer, "your <fn> computes ...", "<Title> is ...", words the message must have)
    (check_peri_ln, lambda x, F, N, M: N(x + F(N(x))), "peri_ln computes norm(x + F(norm(x)))",
     "Peri-LN is x + out_norm(F(norm(x)))",
     "out_norm belongs on F's output, F(norm(x)), before the residual add: yours applies norm to the sum"),
    (check_peri_ln, lambda x, F, N, M: x + F(M(N(x))), "peri_ln computes x + F(out_norm(norm(x)))",
     "Peri-LN is x + out_norm(F(norm(x)))", "out_norm is applied to norm(x) where Peri-LN applies it to F(norm(x))"),
    (check_qk_norm_logits, lambda q, k, a, b: a(q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1]),
     "qk_norm_logits computes q_norm(q k^T) / sqrt(d)", "QK-norm is q_norm(q) k_norm(k)^T / sqrt(d)",
     "q_norm is applied to q k^T where QK-norm applies it to q; k_norm is never applied: it belongs on k"),
    (check_qk_norm_logits, lambda q, k, a, b: a(q) @ b(k).transpose(-2, -1) / math.sqrt(q.shape[-2]),
     "qk_norm_logits computes q_norm(q) k_norm(k)^T / sqrt(T)", "QK-norm is q_norm(q) k_norm(k)^T / sqrt(d)",
     "yours is divided by sqrt(T) where QK-norm's is divided by sqrt(d)"),
    (check_dyt, lambda x, a, w, b: (torch.tanh(a * w * x.float()) + b).to(x.dtype),
     "dyt computes tanh(alpha * weight * x) + bias", "DyT is weight * tanh(alpha * x) + bias",
     "weight is a factor inside tanh(...), where DyT's weight multiplies tanh's output"),
    (check_dyt, lambda x, a, w, b: torch.tanh(a * x.float()).to(x.dtype), "dyt computes tanh(alpha * x)",
     "DyT is weight * tanh(alpha * x) + bias", "weight and bias are never used"),
    (check_pre_ln, lambda x, F, N: (x + F(N(x))) / math.sqrt(2), "pre_ln computes (x + F(Norm(x))) / sqrt(2)",
     "Pre-LN is x + F(Norm(x))", "the whole output is divided by sqrt(2)"),
    (check_post_ln, lambda x, F, N: N(x + N(F(x))), "post_ln computes Norm(x + Norm(F(x)))",
     "Post-LN is Norm(x + F(x))", "Norm is applied to x + Norm(F(x)) where Post-LN applies it to x + F(x)"),
]


@pytest.mark.parametrize("check, answer, computes, asked, words", TRACED, ids=[f"{t[0].__name__}:{i}"
                                                                              for i, t in enumerate(TRACED)])
def test_the_formula_the_code_computes_is_said_beside_the_one_asked(check, answer, computes, asked, words):
    r = check(answer)
    failing = [c for c in r.cases if not c.passed]
    assert failing and {c.fault for c in failing} == {"other_formula"}, r.report()
    for c in failing:
        assert f"your {computes}; {asked}: " in c.message and words in c.message, c.message
        assert "the values differ" not in c.message


def test_a_block_is_traced_with_stand_ins_for_its_four_parts():
    from torch import nn

    class FinalNorm(nn.Module):  # a model's final norm put inside every block
        def __init__(self, dim, n_heads):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = _RMS(dim), _RMS(dim)
            self.self_attn, self.mlp = normref.CausalSelfAttention(dim, n_heads), normref.FeedForward(dim)

        def forward(self, x):
            h = x + self.self_attn(self.input_layernorm(x))
            return self.post_attention_layernorm(h + self.mlp(self.post_attention_layernorm(h)))

    r = check_pre_ln_block(FinalNorm)
    wiring = [c for c in r.cases[1:3]]
    for c in wiring:
        assert c.fault == "other_formula", r.report()
        assert ("your block computes post_attention_layernorm(h + mlp(post_attention_layernorm(h))) with "
                "h = x + self_attn(input_layernorm(x)); the pre-norm block is h + mlp(post_attention_layernorm(h))"
                in c.message), c.message
        assert "through post_attention_layernorm once more: the pre-norm block ends with the residual add" in c.message


def test_the_block_on_its_own_submodules_is_traced_and_the_same_every_run():
    """Held-out class 2: a wiring that is no known placement (the feed-forward sublayer first), on
    the student's own submodules: traced with stand-ins wrapping them, as on the checker's; the
    block is built under a fixed seed, so the case's numbers do not depend on the RNG's state
    (which is left as it was)."""
    from torch import nn

    class MlpFirst(nn.Module):
        def __init__(self, dim, n_heads):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = _RMS(dim), _RMS(dim)
            self.self_attn, self.mlp = normref.CausalSelfAttention(dim, n_heads), normref.FeedForward(dim)

        def forward(self, x):
            x = x + self.mlp(self.post_attention_layernorm(x))
            return x + self.self_attn(self.input_layernorm(x))

    said = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        state = torch.random.get_rng_state()
        r = check_pre_ln_block(MlpFirst)
        assert torch.equal(torch.random.get_rng_state(), state)
        said.append(r.cases[-1].message)
    assert said[0] == said[1]
    own = r.cases[-1]
    assert own.name.startswith("your own block") and own.fault == "other_formula", r.report()
    assert ("your block computes g + self_attn(input_layernorm(g)) with g = x + mlp(post_attention_layernorm(x)); "
            "the pre-norm block is h + mlp(post_attention_layernorm(h)) with h = x + self_attn(input_layernorm(x))"
            in own.message), own.message


class _RMS(torch.nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(x.dtype)


@pytest.mark.parametrize("check", [check_pre_ln, check_post_ln])
def test_no_placement_is_named_that_the_code_does_not_compute(check):
    """Norm(x + F(Norm(x))) equals DeepNorm with alpha = sqrt(2/3) on the seed token with
    F(v) = (v3, v1, v2) (LayerNorm without eps: Norm(x + roll((x - 2) / s)) = Norm(s x + roll(x)));
    the formula holds on every case, so that coincidence is never said."""
    r = check(lambda x, F, N: N(x + F(N(x))))
    assert r.faults == ["other_formula"], r.report()
    for c in r.cases:
        assert "your " + check.__name__.removeprefix("check_") + " computes Norm(x + F(Norm(x)))" in c.message
        assert "DeepNorm" not in c.message and "scaled by" not in c.message and "that is" not in c.message


# ------------------------------------------------------------------ one verdict: grading's replay


class Opaque:
    """An answer the stand-ins cannot be given (as grading's replay of the outputs)."""

    def __init__(self, f):
        self.f = f

    def __call__(self, *a, **k):
        return self.f(*a, **k)


@pytest.mark.parametrize("i", range(len(TRACED) - 2), ids=[f"{t[0].__name__}:{i}" for i, t in enumerate(TRACED[:-2])])
def test_grading_replay_says_what_the_self_check_says(i):
    """The kernel makes the calls the checker's probe recorded (the battery's and the diagnosis'
    probes), the grader replays them: the same messages as the same answer unreadable to the
    tracer; for a placement, peri_ln and qk_norm_logits, the formula identified from the outputs
    over the generated space is the traced one."""
    check, answer, computes, asked, words = TRACED[i]
    records = run_calls(answer, probe(check))
    graded, unread = check(Replay(records)), check(Opaque(answer))
    assert [c.message for c in graded.cases] == [c.message for c in unread.cases]
    if check is not check_dyt:  # DyT has no callables: grading measures it (test_measured)
        traced = check(answer)
        assert [c.message for c in graded.cases] == [c.message for c in traced.cases]


def test_numeric_identification_over_the_generated_space():
    """Outputs of x + F(norm(x)) + out_norm(x + F(norm(x))) (12 nodes: a sum of two generated
    expressions) are identified, and nothing matches noise."""
    from normref.checks.modern import _peri_battery

    cases = [c for c in _peri_battery() if c.x.dtype == torch.float32]
    f64 = to_f64
    with torch.no_grad():
        outs = [f64(c.x + c.sublayer(c.norm(c.x)) + c.out_norm(c.x + c.sublayer(c.norm(c.x)))) for c in cases]
        refs = [f64(normref.peri_ln(c.x, c.sublayer, c.norm, c.out_norm)) for c in cases]
    args = ([{"x": c.x} for c in cases], [{"F": c.sublayer, "norm": c.norm, "out_norm": c.out_norm} for c in cases])
    found = identify(*args, outs, [(1e-5, 1e-5)] * 3, refs, [True] * 3)
    assert found is not None and E.render(found.formula(0)) == "x + F(norm(x)) + out_norm(x + F(norm(x)))"
    g = torch.Generator().manual_seed(0)
    noisy = [o * (1 + 0.05 * torch.randn(o.shape, generator=g).double().numpy()) for o in outs]
    assert identify(*args, noisy, [(1e-5, 1e-5)] * 3, refs, [True] * 3) is None


# ------------------------------------------------------------------ a new question, declared


@dataclass
class _Case:
    name: str
    x: object
    sublayer: object
    norm: object


def sandwich(x, sublayer, norm):
    """The toy question's reference: norm(x) + sublayer(norm(x)) (a residual from the normed x)."""
    return norm(x) + sublayer(norm(x))


declare(Question("toy_sandwich", "sandwich(x, sublayer, norm)", sandwich, "the sandwich",
                 lambda c: ((c.x, c.sublayer, c.norm), {}), names={"sublayer": "F", "norm": "Norm"},
                 models=lambda x, F, N: iter(()), probes=()))


def check_sandwich(fn):
    rnd = seeded_randn(3)
    cases = [_Case("[2, 3, 8]", rnd(2, 3, 8), lambda v: torch.tanh(v) * 2, normref.RMSNorm(8)),
             _Case("[4, 4, 4]", rnd(4, 4, 4, scale=2.0), lambda v: v * v, normref.LayerNorm(4))]

    def run_case(c):
        got, failed = student_call(c.name, fn, (c.x, c.sublayer, c.norm))
        if failed:
            return failed
        want = to_f64(sandwich(c.x, c.sublayer, c.norm))
        return compare_array(c.name, c.x, got, want, lambda g, rt, at: diagnose_by_models(g, want, (), rt, at))

    return run("toy_sandwich", cases, run_case, fn)


def test_a_new_question_gets_the_mechanisms_by_declaring_its_signature_and_reference():
    assert check_sandwich(sandwich).passed
    r = check_sandwich(lambda x, F, N: x + F(N(x)))
    assert r.faults == ["other_formula"], r.report()
    for c in r.cases:
        assert ("your sandwich computes x + F(Norm(x)); the sandwich is Norm(x) + F(Norm(x))" in c.message
                and "you add x where the sandwich adds Norm(x)" in c.message), c.message
    graded = check_sandwich(Replay(run_calls(lambda x, F, N: x + F(N(x)), probe(check_sandwich))))
    assert [c.message for c in graded.cases] == [c.message for c in r.cases]  # identified, not traced


def test_the_probes_of_a_slow_answer_are_left_out_of_the_hidden_test_not_its_score(monkeypatch):
    """The kernel makes the battery's calls first and stops after ``CALLS_BUDGET_S`` (a clock that
    ticks once per call here: the six battery calls of check_rms_norm fit, the probes do not):
    the score is the battery's, and the diagnosis says what the outputs alone show."""
    import itertools
    import types

    import normref.handback as hb
    from normref import check_rms_norm

    def gemma(x, w, eps=1e-6):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * (1 + w)).to(x.dtype)

    ticks = itertools.count()
    monkeypatch.setattr(hb, "time", types.SimpleNamespace(monotonic=lambda: float(next(ticks))))
    monkeypatch.setattr(hb, "CALLS_BUDGET_S", 6.0)
    calls = probe(check_rms_norm)
    records = run_calls(gemma, calls)
    assert len(calls) > 6 and all("raised" in r for r in records[6:]) and not any("raised" in r for r in records[:6])
    graded, self_check = check_rms_norm(Replay(records)), check_rms_norm(gemma)
    assert graded.score == self_check.score == 0.0
    assert all("1 + weight" in c.message for c in graded.cases if not c.passed), graded.report()


def test_tracing_prints_nothing_into_the_students_cell(capsys):
    def chatty(x, F, N, M):
        print("hello")
        return N(x + F(N(x)))

    r = check_peri_ln(chatty)
    assert r.faults == ["other_formula"], r.report()
    assert capsys.readouterr().out.count("hello") == len(r.cases)  # the battery's calls, not the traces
