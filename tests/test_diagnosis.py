"""The diagnosis by search (normref.diagnosis): the grammars, the search, and the checkers with
it hooked in.

- The grammars' reference (no choice changed) equals torch's own functions on every battery case.
- The search, on its own inputs (shapes and seeds the checkers never use), names a single or a
  pair only when it reproduces every output, and names nothing otherwise.
- Through the real checkers: every known fault kind of the answer bank still gets its old
  diagnosis; hand-written mistakes that are not in the fault list get the variant's name and
  sentence; variants drawn from the grammar (seeded, not in the fault list) are named; outputs
  no variant produces (noise, a per-token factor) get no name, only what was measured.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import normref
from grader.scoring.questions import assignment_module
from normref import faults
from diagnosis_coverage import (CHECKERS, battery_of, grammar_for, observation_case, run_checker,
                                student_from_variant)
from normref.diagnosis import Observation, norm_case, norm_grammar, reproduces, search, variant_id
from normref.diagnosis.measure import describe
from normref.diagnosis.norms import evaluate_norm, to_bf16

grader_backward = assignment_module("layernorm_backward", "reference")  # the analytic backward; registers its grammar


def _variant_tags(result) -> set[str]:
    """The variant ids the search named (``CaseResult.variant``, or a ``[variant: id]`` tag)."""
    return {c.variant for c in result.cases if getattr(c, "variant", None)} or \
        {m.split("[variant: ")[1].split("]")[0] for m in result.messages if "[variant: " in m}


# ------------------------------------------------------------------ the grammars' reference


def test_norm_grammar_reference_is_torch_layer_norm_and_rms_norm_on_every_battery_case():
    for checker, kind in (("rms_norm", "rms"), ("layer_norm", "layer"), ("RMSNorm module", "rms")):
        for c in battery_of(checker):
            x = torch.from_numpy(c.x.astype(np.float64))
            w = torch.from_numpy(c.weight)
            if kind == "rms":
                want = F.rms_norm(x, (x.shape[-1],), w, eps=c.eps)
            else:
                b = torch.from_numpy(c.bias) if c.bias is not None else None
                want = F.layer_norm(x, (x.shape[-1],), w, b, eps=c.eps)
            got = evaluate_norm(kind, {}, c)
            tol = {"float16": 2e-3, "bfloat16": 1.6e-2}.get(c.dtype, 1e-5)
            np.testing.assert_allclose(got, want.numpy(), rtol=tol, atol=tol, err_msg=f"{checker}: {c.x.shape}")


def test_wiring_and_backward_grammar_references_are_the_seed_formulas():
    with torch.no_grad():
        for c in battery_of("pre_ln"):
            np.testing.assert_allclose(grammar_for("pre_ln").evaluate({}, c), (c.x + c.F(c.N(c.x))).double(),
                                       rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(grammar_for("post_ln").evaluate({}, c), c.N(c.x + c.F(c.x)).double(),
                                       rtol=1e-6, atol=1e-6)
        for c in battery_of("pre-LN block"):
            h = c.x + c.A(c.N1(c.x))
            np.testing.assert_allclose(grammar_for("pre-LN block").evaluate({}, c),
                                       (h + c.M(c.N2(h))).double(), rtol=1e-6, atol=1e-6)
    for c in battery_of("layer_norm_backward"):  # autograd, float64
        x = torch.tensor(c.x, requires_grad=True)
        w = torch.tensor(c.weight, requires_grad=True)
        b = torch.zeros_like(w, requires_grad=True)
        F.layer_norm(x, (x.shape[-1],), w, b, eps=c.eps).backward(torch.tensor(c.dy))
        want = np.concatenate([x.grad.numpy().ravel(), w.grad.numpy(), b.grad.numpy()])
        np.testing.assert_allclose(grammar_for("layer_norm_backward").evaluate({}, c), want,
                                   rtol=1e-7, atol=1e-9)


def test_bfloat16_emulation_matches_torch():
    a = np.random.default_rng(3).normal(size=1000).astype(np.float32) * 50
    want = torch.from_numpy(a).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(to_bf16(a), want)


# ------------------------------------------------------------------ the search on its own inputs
# Shapes [3, 5, 6] and [7, 6], seed 7: none of the checkers' batteries (held out from them).


def _own_cases(kind: str):
    rng = np.random.default_rng(7)
    w = 1 + 0.3 * rng.normal(size=6)
    b = 0.2 * rng.normal(size=6) if kind == "layer" else None
    return [norm_case(rng.normal(size=(3, 5, 6)).astype(np.float32) + 0.3, w, b, 1e-5),
            norm_case(rng.normal(size=(7, 6)).astype(np.float32) * 2, w, b, 1e-3)]


def _observe(kind, cases, student):
    obs = []
    for c in cases:
        want = evaluate_norm(kind, {}, c)
        got = student(c)
        passed = got is not None and np.allclose(got, want, rtol=1e-5, atol=1e-5)
        obs.append(Observation(c, got, want, 1e-5, 1e-5, passed))
    return obs


def _mean_abs_rms(c):  # written out independently of the grammar's evaluator
    x = c.x.astype(np.float32)
    return (x / (np.abs(x).mean(-1, keepdims=True) + c.eps) * c.weight).astype(np.float64)


def test_search_names_a_single_written_independently():
    cases = _own_cases("rms")
    found = search(norm_grammar("rms", "rms_norm"), _observe("rms", cases, _mean_abs_rms))
    assert found is not None and variant_id(found.best) == "stat=mean_abs"
    assert found.sentence().startswith("you divided by the mean of |x| over the token, where RMSNorm")


def test_search_names_a_pair_only_when_no_single_reproduces():
    cases = _own_cases("layer")

    def eps_out_and_n_minus_1(c):
        x = c.x.astype(np.float64)
        xc = x - x.mean(-1, keepdims=True)
        sd = np.sqrt((xc**2).sum(-1, keepdims=True) / (x.shape[-1] - 1))
        return xc / (sd + c.eps) * c.weight + c.bias

    found = search(norm_grammar("layer", "layer_norm"), _observe("layer", cases, eps_out_and_n_minus_1))
    assert found is not None
    assert {c.key for c in found.best} == {"divisor=n-1", "eps_place=outside"}
    assert ", and " in found.sentence()


def test_search_names_nothing_for_outputs_no_variant_produces():
    cases = _own_cases("rms")
    rng = np.random.default_rng(11)

    def noisy(c):
        return evaluate_norm("rms", {}, c) * (1 + 0.05 * rng.normal(size=c.x.shape))

    assert search(norm_grammar("rms", "rms_norm"), _observe("rms", cases, noisy)) is None


def test_a_variant_must_reproduce_the_passing_cases_too():
    """Right on the first case, a different variant's output on the second: no name fits both."""
    cases = _own_cases("rms")

    def half_right(c):
        return evaluate_norm("rms", {} if c.x.ndim == 3 else {"stat": "max_abs"}, c)

    obs = _observe("rms", cases, half_right)
    assert obs[0].passed and not obs[1].passed
    g = norm_grammar("rms", "rms_norm")
    assert not reproduces(g, (next(c for d in g.dims(cases) for c in d if c.key == "stat=max_abs"),), obs)
    found = search(g, obs)
    assert found is None or all(reproduces(g, v, obs) for v in found.variants)


def test_measured_description_per_token_factor_and_growth_with_the_mean():
    rng = np.random.default_rng(5)
    want = rng.normal(size=(4, 6))
    k = np.array([0.8, 1.1, 1.3, 0.9])[:, None]
    assert "its own factor (from 0.8 to 1.3)" in describe(None, want * k, want)
    x = rng.normal(size=(6, 8)) + np.arange(6)[:, None] * 3.0  # token means 0, 3, ..., 15
    err = 1e-3 * np.abs(x.mean(-1, keepdims=True)) * rng.uniform(0.5, 1.0, size=(6, 8))
    text = describe(x, x * 0 + err, x * 0)
    assert "grows with the token's mean" in text
    assert describe(None, want + 0.05 * rng.normal(size=want.shape), want) == ""


# ------------------------------------------------------------------ through the real checkers


def _exec(source: str, name: str, setup: str = "import numpy as np\nimport torch\nfrom torch import nn\n"):
    ns: dict = {}
    exec(setup + source, ns)  # noqa: S102 - the answer bank's own code
    return ns[name]


_BANK = {  # assignment -> (answer cell, defined name, checker)
    "layernorm": ("layer_norm_impl", "layer_norm", "layer_norm"),
    "rmsnorm": ("rms_norm_impl", "rms_norm", "rms_norm"),
    "layernorm_backward": ("layer_norm_backward_impl", "layer_norm_backward", "layer_norm_backward"),
}


@pytest.mark.parametrize("assignment", sorted(_BANK))
def test_every_known_fault_of_the_answer_bank_keeps_its_old_diagnosis(assignment):
    from grader.demo.answer_bank import ANSWERS

    cell, name, checker = _BANK[assignment]
    tried = 0
    for variant, answers in ANSWERS[assignment].items():
        if variant not in faults.FAULTS:
            continue
        r = run_checker(checker, _exec(answers[cell], name))
        assert variant in r.faults, (assignment, variant, r.report())
        assert "found_variant" not in r.faults, (assignment, variant, r.report())
        tried += 1
    assert tried >= 6


def test_known_wiring_faults_keep_their_old_diagnosis():
    cases = {
        ("pre_ln", "residual_from_normed"): lambda x, f, n: n(x) + f(n(x)),
        ("pre_ln", "pre_post_swapped"): lambda x, f, n: n(x + f(x)),
        ("pre_ln", "norm_on_sublayer_output"): lambda x, f, n: x + n(f(x)),
        ("post_ln", "pre_post_swapped"): lambda x, f, n: x + f(n(x)),
        ("post_ln", "missing_residual"): lambda x, f, n: n(f(x)),
    }
    for (checker, fault), fn in cases.items():
        r = run_checker(checker, fn)
        assert fault in r.faults and "found_variant" not in r.faults, (checker, fault, r.report())


def rms_max_abs(x, weight, eps=1e-6):
    h = x.float()
    return (h / (h.abs().amax(dim=-1, keepdim=True) + eps) * weight).to(x.dtype)


def rms_multiplies(x, weight, eps=1e-6):
    h = x.float()
    return (h * h.pow(2).mean(dim=-1, keepdim=True).add(eps).sqrt() * weight).to(x.dtype)


def rms_l2_norm(x, weight, eps=1e-6):
    h = x.float()
    return (h / torch.sqrt(h.pow(2).sum(dim=-1, keepdim=True) + eps) * weight).to(x.dtype)


def rms_adds_weight(x, weight, eps=1e-6):
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) + weight).to(x.dtype)


def ln_beta_inside(x, w, b, eps=1e-5):
    h = x.astype(np.float32)
    m = h.mean(-1, keepdims=True)
    return (((h - m) / np.sqrt(((h - m) ** 2).mean(-1, keepdims=True) + eps) + b) * w).astype(x.dtype)


def ln_var_not_std(x, w, b, eps=1e-5):
    h = x.astype(np.float32)
    m = h.mean(-1, keepdims=True)
    return ((h - m) / (h.var(-1, keepdims=True) + eps) * w + b).astype(x.dtype)


def ln_hardcoded_eps(x, w, b, eps=1e-5):
    h = x.astype(np.float32)
    return ((h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5) * w + b).astype(x.dtype)


def pre_ln_normalizes_after(x, sublayer, norm):
    return norm(x + sublayer(norm(x)))


def post_ln_norms_input_too(x, sublayer, norm):
    return norm(x + sublayer(norm(x)))


def bwd_forgot_factor_two(dy, x, weight, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    r = 1 / np.sqrt(var + eps)
    xhat = (x - mean) * r
    g = dy * weight
    dx = r * (g - g.mean(-1, keepdims=True) - 0.5 * xhat * (g * xhat).mean(-1, keepdims=True))
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xhat).sum(lead), dy.sum(lead)


def bwd_dweight_from_x(dy, x, weight, eps=1e-5):
    dx, _, db = grader_backward.layer_norm_backward(dy, x, weight, eps)
    return dx, (dy * x).sum(tuple(range(x.ndim - 1))), db


class RMSNormMaxAbs(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = x.float()
        return (h / (h.abs().amax(-1, keepdim=True) + self.eps) * self.weight).to(x.dtype)


class BlockMlpWithoutNorm(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.input_layernorm = normref.RMSNorm(dim)
        self.self_attn = normref.CausalSelfAttention(dim, n_heads)
        self.post_attention_layernorm = normref.RMSNorm(dim)
        self.mlp = normref.FeedForward(dim)

    def forward(self, x):
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(h)  # post_attention_layernorm forgotten


UNLISTED = [  # (checker, student, the variant, words the message must contain)
    ("rms_norm", rms_max_abs, "stat=max_abs", "you divided by the largest |x| of the token, where RMSNorm"),
    ("rms_norm", rms_multiplies, "apply=multiply", "multiplied by the root mean square instead of dividing"),
    ("rms_norm", rms_l2_norm, "divisor=1", "that is the L2 norm"),
    ("rms_norm", rms_adds_weight, "weight=add", "added the weight (gamma) instead of multiplying"),
    ("layer_norm", ln_beta_inside, "bias=inside", "(xhat + beta) * gamma"),
    ("layer_norm", ln_var_not_std, "root=none", "divided by the variance itself"),
    ("layer_norm", ln_hardcoded_eps, "eps_value=1e-05", "used eps = 1e-05 instead of the eps you were given"),
    ("layer_norm_backward", bwd_forgot_factor_two, "var_term=halved", "halved the variance term"),
    ("layer_norm_backward", bwd_dweight_from_x, "dweight=x", "summed dy * x for dweight"),
    ("RMSNorm module", RMSNormMaxAbs, "stat=max_abs", "the largest |x| of the token"),
    ("pre-LN block", BlockMlpWithoutNorm, "nm=none", "without post_attention_layernorm"),
]


class _Untraced:
    """A block class the tracer is not given (as grading's replay of the kernel's record)."""

    def __init__(self, cls):
        self.cls = cls

    def __call__(self, *a, **k):
        return self.cls(*a, **k)


@pytest.mark.parametrize("checker, student, variant, words", UNLISTED,
                         ids=[f"{c}:{v}" for c, _, v, _ in UNLISTED])
def test_a_mistake_not_in_the_fault_list_is_named_in_the_students_words(checker, student, variant, words):
    if checker == "pre-LN block":  # as grading replays it: the self-check traces its formula (test_formulas)
        student = _Untraced(student)
    t0 = time.process_time()
    r = run_checker(checker, student)
    cpu = time.process_time() - t0
    assert not r.passed
    generic = [c for c in r.cases if not c.passed and c.fault in ("found_variant", "wrong_values")]
    assert generic and all(c.fault == "found_variant" for c in generic), r.report()
    assert _variant_tags(r) == {variant}, r.report()
    assert all(words in c.message for c in generic), r.report()
    assert cpu < 1.0, f"{checker} took {cpu:.2f} s of CPU"


def _drawn(checker: str, n: int, seed: int):
    """``n`` variants of the grammar that are not a known fault kind, drawn with ``seed``."""
    import random

    g = grammar_for(checker)
    cases = battery_of(checker)
    pool = [v for v in g.singles(cases) + g.pairs(cases) if not any(c.known for c in v)]
    return random.Random(seed).sample(pool, min(n, len(pool)))


@pytest.mark.parametrize("checker", list(CHECKERS))
def test_variants_drawn_from_the_grammar_are_named_by_the_checker(checker):
    """Seeded draws (seed 2026, not the search's own tests' 7): each is played as a student's
    code; every case the checker cannot explain by a known kind gets a name, and the name's
    variant reproduces the student's output (the id itself, or one the battery cannot tell
    from it)."""
    g = grammar_for(checker)
    cases = battery_of(checker)
    by_id = {variant_id(v): v for v in g.singles(cases) + g.pairs(cases)}
    for v in _drawn(checker, 10, seed=2026):
        student = student_from_variant(checker, v)
        r = run_checker(checker, student)
        if r.passed:
            continue  # the battery cannot tell it from the reference
        assert "wrong_values" not in r.faults, (variant_id(v), r.report())
        for tag in _variant_tags(r):
            named = by_id[tag]
            if tag == variant_id(v):
                continue
            for c in cases:  # an equivalent: the named variant computes what the student did
                a, b = g.evaluate({x.dim: x.value for x in named}, c), g.evaluate({x.dim: x.value for x in v}, c)
                assert (a is None) == (b is None)
                if a is not None:
                    np.testing.assert_allclose(a, b, rtol=4e-2, atol=4e-2, err_msg=f"{variant_id(v)} named {tag}")


def _seed_rms(x, weight, eps):  # the seed's RMSNorm written out: calling normref's breaks the rule
    return x.float() * x.float().pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt() * weight


def rms_noisy(x, weight, eps=1e-6):
    y = _seed_rms(x, weight, eps)
    gen = torch.Generator().manual_seed(0)
    return (y * (1 + 0.1 * torch.rand(y.shape, generator=gen))).to(x.dtype)


def rms_per_token_factor(x, weight, eps=1e-6):
    y = _seed_rms(x, weight, eps)
    k = 1 + 0.1 * torch.arange(y.reshape(-1, y.shape[-1]).shape[0]).float()
    return (y.reshape(-1, y.shape[-1]) * k[:, None]).reshape(y.shape).to(x.dtype)


def test_placement_answers_outside_the_fault_list_get_their_traced_formula():
    """pre_ln/post_ln have no grammar search any more: the formula the code computes is traced
    (normref.diagnosis.trace) and said beside the asked one, on every failing case."""
    for checker, student, computes, asked in (
            ("pre_ln", pre_ln_normalizes_after, "Norm(x + F(Norm(x)))", "Pre-LN is x + F(Norm(x))"),
            ("post_ln", post_ln_norms_input_too, "Norm(x + F(Norm(x)))", "Post-LN is Norm(x + F(x))")):
        r = run_checker(checker, student)
        assert r.faults == ["other_formula"] and not _variant_tags(r), r.report()
        for c in r.cases:
            assert f"your {checker} computes {computes}; {asked}" in c.message, c.message
            assert "scaled by" not in c.message and "DeepNorm" not in c.message, c.message


def test_outputs_no_variant_produces_get_no_name_only_what_was_measured():
    r = run_checker("rms_norm", rms_noisy)
    assert r.faults == ["measured"] and not _variant_tags(r), r.report()
    assert not any(m.endswith("the values differ from the reference.") for m in r.messages), r.report()
    r = run_checker("rms_norm", rms_per_token_factor)
    assert "found_variant" not in r.faults and not _variant_tags(r), r.report()
    two_d = [c.message for c in r.cases if not c.passed and "[2, 3, 8]" in c.name]
    assert two_d and "each token's output is the reference's times its own factor" in two_d[0], r.report()


def test_the_correct_answers_still_pass():
    for checker, student in (("rms_norm", normref.rms_norm),
                             ("layer_norm", normref.layer_norm),
                             ("layer_norm_backward", normref.backward.layer_norm_grads)):
        r = run_checker(checker, student)
        # right on every case, with nothing left to diagnose; handed in as an answer, the
        # reference itself breaks the rule (grading records it running), and that alone costs
        assert all(c.passed and c.fault is None for c in r.cases) and r.faults == ["reference_call"], r.report()


def test_observation_cases_of_every_checker():
    for checker in CHECKERS:
        assert battery_of(checker), checker
        assert observation_case("no such checker", object()) is None


def ln_one_pass_variance(x, w, b, eps=1e-5):
    """Var = E[x**2] - E[x]**2 in float32: loses the spread when the mean is large against it."""
    h = x.astype(np.float32)
    m = h.mean(-1, keepdims=True)
    var = (h * h).mean(-1, keepdims=True) - m * m
    return ((h - m) / np.sqrt(var + eps) * w + b).astype(x.dtype)


def test_one_pass_variance_is_named_by_the_battery_and_on_another_input_that_exposes_it():
    """The numerical fault of the grammar (var_formula=one_pass): the layer_norm battery's float16
    case has a row of mean 1900.75 (variance 0.6875) where E[x**2] - E[x]**2 cancels in float32,
    so the checker fails that case only and names it. Held out: a float16 row with mean 1000 and
    spread 1 (eight features, not in the battery) exposes it too (error ~0.1 against the
    tolerance 2e-3, while an honest float64 answer is exact there), and the search names it."""
    r = run_checker("layer_norm", ln_one_pass_variance)
    assert [(c.name.split(" ")[0], c.variant) for c in r.cases if not c.passed] == [("float16", "var_formula=one_pass")]
    rng = np.random.default_rng(0)
    big_mean = (1000 + rng.normal(size=(2, 8))).astype(np.float16)
    # the battery without its float16 case, plus the held-out row: only that row shows it
    cases = [c for c in battery_of("layer_norm") if c.dtype != "float16"] + [
        norm_case(big_mean, np.ones(8), np.zeros(8), 1e-5)]
    obs = []
    for c in cases:
        want = evaluate_norm("layer", {}, c)
        x = c.x.astype(c.dtype if c.dtype != "bfloat16" else np.float32)
        got = ln_one_pass_variance(x, c.weight.astype(np.float32), c.bias.astype(np.float32), eps=c.eps)
        got = got.astype(np.float64)
        rtol = atol = {"float16": 2e-3}.get(c.dtype, 1e-5)
        obs.append(Observation(c, got, want, rtol, atol, bool(np.allclose(got, want, rtol=rtol, atol=atol))))
    assert [o.passed for o in obs] == [True] * (len(cases) - 1) + [False]
    found = search(norm_grammar("layer", "layer_norm"), obs)
    assert found is not None and variant_id(found.best) == "var_formula=one_pass"
    assert "E[x**2] - E[x]**2" in found.sentence()
