"""Checkers: the reference scores 1.0; each purpose-made wrong implementation gets its diagnosis.

The wrong implementations a synthetic student submits come from the answer bank
(``grader/demo/answer_bank.py``, the demo class's submissions), run here as the assignment
notebook runs them, so each lives once; the ones defined in this file are not in the bank
(torch LayerNorm variants, extra RMSNorm modules, the Post-LN ``Norm(x) + F(x)``, a Post-LN
block, the n-1 backward). The expected scores are derived from the battery cases by hand, in
the comments beside them.
"""
import math

import numpy as np
import pytest
import torch

import normref
from grader.scoring.questions import assignment_module
from grader.demo.answer_bank import ANSWERS
from normref import check_layer_norm, check_rms_norm

grader_backward = assignment_module("layernorm_backward", "reference")  # the analytic backward; registers its grammar

# What each answer cell defines: (assignment, grade_id of the answer cell).
_BANK_CELLS = {
    "rms_norm": ("rmsnorm", "rms_norm_impl"),
    "layer_norm": ("layernorm", "layer_norm_impl"),
    "layer_norm_backward": ("layernorm_backward", "layer_norm_backward_impl"),
    "RMSNorm": ("block", "rms_module_impl"),
    "pre_ln": ("block", "pre_ln_impl"),
    "post_ln": ("block", "post_ln_impl"),
    "PreNormBlock": ("block", "block_impl"),
}


def bank(name: str, variant: str):
    """The answer bank's ``variant`` of the student's ``name`` (a function or class), defined by
    running the bank's cells the way the assignment notebook does (its imports first)."""
    assignment, cell = _BANK_CELLS[name]
    answers = ANSWERS[assignment][variant]
    ns = {"np": np, "torch": torch, "nn": torch.nn, "CausalSelfAttention": normref.CausalSelfAttention,
          "FeedForward": normref.FeedForward}
    if name == "PreNormBlock":  # the block builds the notebook's own RMSNorm
        exec(answers["rms_module_impl"], ns)
    exec(answers[cell], ns)
    return ns[name]


def seed_rms_norm(x, weight, eps=1e-6):  # the seed's "standard answer", verbatim
    rms = x.float().pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()
    return (x.float() * rms * weight).to(x.dtype)


def rms_blank(x, weight, eps=1e-6):
    raise NotImplementedError()


def test_reference_and_seed_answer_pass_with_full_score():
    for fn in (seed_rms_norm, bank("rms_norm", "correct")):
        r = check_rms_norm(fn)
        assert r.passed and r.score == 1.0 and r.faults == []
    # normref's own rms_norm handed in is right on every case, and is the reference: grading
    # records it running and gives 0, so the self-check says so
    r = check_rms_norm(normref.rms_norm)
    assert all(c.passed for c in r.cases) and r.score == 0.0 and r.faults == ["reference_call"]
    assert r.breaches == ["0 points: calls normref.functional.rms_norm \u2014 implement it with tensor operations"]


@pytest.mark.parametrize(
    "fn, fault, score",
    [
        # n-1 changes every case (d >= 3 everywhere): 0 of 6.
        (bank("rms_norm", "unbiased_variance"), "unbiased_variance", 0.0),
        # float16 statistics only break the float16 overflow row: 5 of 6.
        (bank("rms_norm", "low_precision_stats"), "low_precision_stats", 5 / 6),
        # dim=0 is the last axis only for the 1-D seed case: 1 of 6.
        (bank("rms_norm", "wrong_axis"), "wrong_axis", 1 / 6),
        # without keepdim, only the 1-D case (a scalar statistic) is right: 1 of 6.
        (bank("rms_norm", "missing_keepdim"), "missing_keepdim", 1 / 6),
        # eps=1e-6 outside the sqrt is invisible except on the tiny-values eps=1e-4 case: 5 of 6.
        (bank("rms_norm", "eps_outside_sqrt"), "eps_outside_sqrt", 5 / 6),
        # subtracting the mean changes every case (no case has a zero-mean row): 0 of 6.
        (bank("rms_norm", "subtracts_mean"), "subtracts_mean", 0.0),
        # float32 out is only wrong for the float16 and bfloat16 inputs: 4 of 6.
        (bank("rms_norm", "wrong_dtype"), "wrong_dtype", 4 / 6),
        (bank("rms_norm", "mutates_input"), "mutates_input", 0.0),
        (rms_blank, "raises", 0.0),
    ],
)
def test_each_rms_fault_is_diagnosed(fn, fault, score):
    r = check_rms_norm(fn)
    assert not r.passed
    assert r.faults[0] == fault
    assert r.score == pytest.approx(score)
    # every failing case names the fault, in metadata only: the text shows no tag
    assert all(c.fault == fault for c in r.cases if not c.passed)
    assert "[fault:" not in r.report() and fault not in r.report()


def test_n_minus_1_message_names_the_factor():
    msg = check_rms_norm(bank("rms_norm", "unbiased_variance")).messages[1]  # the [2, 3, 8] case, d = 8
    assert "0.935 = sqrt(7/8)" in msg and "n-1" in msg and "max abs error" in msg


def test_a_looping_function_times_out_with_a_message(monkeypatch):
    monkeypatch.setattr(normref.checks.core, "CALL_TIMEOUT_S", 0.2)

    def loops(x, weight, eps=1e-6):
        while True:
            pass

    r = check_rms_norm(loops, quick=True)
    assert r.score == 0 and r.faults == ["timeout"]


def test_checker_never_raises_on_garbage():
    assert check_rms_norm(42).score == 0
    assert check_rms_norm(lambda x, w, eps=1e-6: "nope").faults == ["wrong_type"]
    assert check_rms_norm(lambda x, w, eps=1e-6: x[..., :1]).faults[0] == "wrong_shape"
    assert check_rms_norm(lambda x, w, eps=1e-6: x * float("nan")).faults[0] == "returns_nan"


def test_numpy_layer_norm_checker():
    assert check_layer_norm(bank("layer_norm", "correct")).score == 1.0
    assert all(c.passed for c in check_layer_norm(normref.layer_norm, backend="torch").cases)
    r = check_layer_norm(bank("layer_norm", "unbiased_variance"))
    assert r.faults[0] == "unbiased_variance"


def test_quick_runs_only_the_seed_cases():
    r = check_rms_norm(seed_rms_norm, quick=True)
    assert [c.name for c in r.cases] == ["seed (1, 2, 3)", "seed shape [2, 3, 8] float32"]


def test_correct_answer_leaves_no_warning(recwarn):
    def noisy_but_right(x, weight, eps=1e-6):
        import warnings
        warnings.warn("student debug warning")
        return seed_rms_norm(x, weight, eps)

    assert check_rms_norm(noisy_but_right).score == 1.0
    assert len(recwarn) == 0
    assert torch.get_default_dtype() == torch.float32


# ----------------------------------------------------------------- every checker, full score

def _case(result, name_start):
    """The one case whose name starts with ``name_start``."""
    (c,) = [c for c in result.cases if c.name.startswith(name_start)]
    return c


def test_every_reference_passes_every_case_of_its_checker_and_breaks_the_rule():
    """The course's references are right on every case; handed in as an answer, each is a
    reference call, which grading records and scores 0: the self-check says the same."""
    results = [
        check_rms_norm(normref.rms_norm, backend="numpy"),
        check_layer_norm(normref.layer_norm, backend="torch"),
        normref.check_rms_norm_module(normref.RMSNorm),
        normref.check_pre_ln(normref.pre_ln),
        normref.check_post_ln(normref.post_ln),
        normref.check_pre_ln_block(normref.TransformerBlock),  # (dim, n_heads), Pre-LN, RMSNorm
        normref.check_pre_ln_block(normref.TransformerBlock(8, 2, norm="layer")),  # a built module
        normref.check_layer_norm_backward(normref.backward.layer_norm_grads),
    ]
    for r in results:
        assert all(c.passed for c in r.cases) and r.score == 0.0 and r.faults == ["reference_call"], r.report()
        assert len(r.breaches) == 1 and r.breaches[0].startswith("0 points: calls "), r.breaches


# ----------------------------------------------------------------- LayerNorm faults, numpy and torch

def _t_ln(x, w, b, eps, *, ddof=0, eps_at="inside", axis=-1, keepdim=True, f32=True, cast=True,
          center=True):
    h = x.float() if f32 else x
    m = h.mean(axis, keepdim=keepdim) if center else 0.0
    v = ((h - m) ** 2).sum(axis, keepdim=keepdim) / (h.shape[axis] - ddof)
    den = {"inside": (v + eps).sqrt(), "outside": v.sqrt() + eps, "none": v.sqrt()}[eps_at]
    y = (h - m) / den * w + b
    return y.to(x.dtype) if cast else y


# (the bank's numpy variant, the same fault as torch options, expected fault, the purpose-made
# case that must show it)
LN_FAULTS = [
    ("unbiased_variance", {"ddof": 1}, "unbiased_variance", "seed (1, 2, 3)"),
    ("eps_outside_sqrt", {"eps_at": "outside"}, "eps_outside_sqrt", "tiny values"),
    ("no_eps", {"eps_at": "none"}, "no_eps", "tiny values"),
    ("no_eps", {"eps_at": "none"}, "nan_on_constant_row", "constant row"),
    ("wrong_axis", {"axis": 0}, "wrong_axis", "B = T = D"),  # [4, 4, 4]: axis 0 broadcasts and runs
    ("not_centered", {"center": False}, "not_centered", "seed shape [2, 3, 8]"),
]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("variant, options, fault, case", LN_FAULTS)
def test_each_layer_norm_fault_is_diagnosed_on_its_case(backend, variant, options, fault, case):
    if backend == "numpy":
        student = bank("layer_norm", variant)
    else:
        def student(x, w, b, eps=1e-5):
            return _t_ln(x, w, b, eps, **options)

    r = check_layer_norm(student, backend=backend)
    c = _case(r, case)
    assert not c.passed and c.fault == fault, r.report()
    assert "[fault:" not in c.message and "max abs error" in c.message


def test_layer_norm_missing_keepdim_on_B_T_D_runs_and_is_named():
    # [4, 4, 4]: mean(-1) has shape [4, 4], which broadcasts against the last two axes.
    for student, backend in [
        (bank("layer_norm", "missing_keepdim"), "numpy"),
        (lambda x, w, b, eps=1e-5: _t_ln(x, w, b, eps, keepdim=False), "torch"),
    ]:
        r = check_layer_norm(student, backend=backend)
        assert _case(r, "B = T = D").fault == "missing_keepdim", r.report()
        assert _case(r, "seed shape [2, 3, 8]").fault == "missing_keepdim"  # raised: [2,3] vs [2,3,8]
        assert r.faults == ["missing_keepdim"]


def test_layer_norm_low_precision_fails_only_the_float16_overflow_row():
    # numpy battery: seed, [2,3,8], [4,4,4], tiny, float16, constant: only float16 differs -> 5/6.
    r = check_layer_norm(bank("layer_norm", "low_precision_stats"))
    assert r.score == pytest.approx(5 / 6) and r.faults == ["low_precision_stats"]
    assert not _case(r, "float16 row").passed
    # torch battery adds bfloat16 (7 cases); bf16 statistics of N(0,1) values stay within tolerance.
    r = check_layer_norm(lambda x, w, b, eps=1e-5: _t_ln(x, w, b, eps, f32=False), backend="torch")
    assert r.faults == ["low_precision_stats"] and not _case(r, "float16 row").passed


def _np_ln(x, w, b, eps=1e-5, *, stats=np.float32, one_pass=False, use_var=False):
    h = x.astype(stats)
    m = h.mean(-1, keepdims=True)
    if one_pass:
        v = (h ** 2).mean(-1, keepdims=True) - m ** 2  # E[x**2] - E[x]**2
    else:
        v = np.var(h, axis=-1, keepdims=True) if use_var else ((h - m) ** 2).mean(-1, keepdims=True)
    return ((h - m) / np.sqrt(v + eps) * w + b).astype(x.dtype)


def test_layer_norm_one_pass_variance_fails_only_the_large_mean_row_and_is_named():
    """The float16 case's second row [1900, 1900, 1901, 1902]: mean 1900.75, variance 0.6875. In
    float32 every sum of these integers and of their squares is exact (below 2**24), but
    E[x]**2 = 3612850.5625 rounds to 3612850.5 (spacing 0.25), so the one-pass variance is
    3612851.25 - 3612850.5 = 0.75. The last value's output is 1.25 / sqrt(0.75) = 1.4434
    instead of 1.25 / sqrt(0.6875) = 1.5076: off by 0.064, 13 x the float16 tolerance
    (2e-3 + 2e-3 * 1.5)."""
    for backend, student in [
        ("numpy", lambda x, w, b, eps=1e-5: _np_ln(x, w, b, eps, one_pass=True)),
        ("torch", lambda x, w, b, eps=1e-5: (lambda h: ((h - h.mean(-1, keepdim=True)) / (
            (h * h).mean(-1, keepdim=True) - h.mean(-1, keepdim=True).square() + eps).sqrt() * w + b
        ).to(x.dtype))(x.float())),
    ]:
        r = check_layer_norm(student, backend=backend)
        assert [c.name for c in r.cases if not c.passed] == [_case(r, "float16 row").name], r.report()
        c = _case(r, "float16 row")
        want = 1.25 / math.sqrt(0.6875 + 1e-5) - 1.25 / math.sqrt(0.75 + 1e-5)  # 0.0642, by hand
        assert c.max_abs_err == pytest.approx(want, abs=1e-3)  # + float16 rounding of the output
        assert (c.fault, c.variant) == ("found_variant", "var_formula=one_pass")
        assert "E[x**2] - E[x]**2" in c.message and "subtract the mean first" in c.message


@pytest.mark.parametrize("stats, use_var", [(np.float32, False), (np.float32, True), (np.float64, False),
                                            (np.float64, True)])
def test_honest_layer_norms_pass_the_large_mean_row(stats, use_var):
    """Two-pass statistics in float32 (the reference's) or float64, by hand or with np.var; and
    the one-pass variance in float64 (exact on these integers), all score 1."""
    assert check_layer_norm(lambda x, w, b, eps=1e-5: _np_ln(x, w, b, eps, stats=stats, use_var=use_var)).score == 1
    assert check_layer_norm(lambda x, w, b, eps=1e-5: _np_ln(x, w, b, eps, stats=np.float64, one_pass=True)).score == 1
    assert check_layer_norm(lambda x, w, b, eps=1e-5: _t_ln(x, w, b, eps), backend="torch").score == 1


def test_layer_norm_float32_output_is_a_dtype_fault_on_low_precision_inputs_only():
    r = check_layer_norm(lambda x, w, b, eps=1e-5: _t_ln(x, w, b, eps, cast=False), backend="torch")
    assert r.faults == ["wrong_dtype"]
    assert {c.name for c in r.cases if not c.passed} == {
        "float16 rows [300, -300, 300, -300] (x**2 overflows float16) and [1900, 1900, 1901, 1902] "
        "(mean 1900.75: E[x**2] - E[x]**2 cancels)", "bfloat16 [2, 3, 8]"}
    assert "dtype float32, expected float16" in _case(r, "float16 row").message


def test_layer_norm_in_place_is_caught_on_every_case():
    r = check_layer_norm(bank("layer_norm", "mutates_input"))
    assert r.score == 0 and r.faults == ["mutates_input"]


def test_n_minus_1_factor_is_stated_only_where_the_output_shows_it():
    r = check_layer_norm(bank("layer_norm", "unbiased_variance"))
    assert "0.816 = sqrt(2/3)" in _case(r, "seed (1, 2, 3)").message  # d = 3
    # tiny values with eps=1e-4 >> var: the ratio is not sqrt(4/5), so no factor is claimed
    assert "sqrt(4/5)" not in _case(r, "tiny values").message


def test_rms_norm_without_eps_is_named_no_eps():
    r = check_rms_norm(bank("rms_norm", "no_eps"))
    # eps=1e-6 is below tolerance except on the tiny-values case (mean square 1e-6, eps 1e-4): 5 of 6.
    assert r.score == pytest.approx(5 / 6) and r.faults == ["no_eps"]


def test_relative_error_is_not_blown_up_by_a_zero_reference_value():
    # LN(1, 2, 3) = (-1.22, 0, 1.22): the middle zero must not produce "rel 1e12".
    r = check_layer_norm(bank("layer_norm", "unbiased_variance"), quick=True)
    assert r.cases[0].max_rel_err < 1


# ----------------------------------------------------------------- the RMSNorm module

class SeedRMSNorm(torch.nn.Module):  # the seed's MiniMind module, verbatim
    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(width))

    def forward(self, x):
        rms = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x.float() * rms * self.weight).to(dtype=x.dtype)


class HFStyleRMSNorm(SeedRMSNorm):  # Hugging Face Llama: cast back before the weight multiply
    def forward(self, x):
        rms = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return self.weight.to(x.dtype) * (x.float() * rms).to(x.dtype)


class DefaultEps1e5(SeedRMSNorm):
    def __init__(self, width, eps=1e-5):
        super().__init__(width, eps)


class IgnoresEpsArgument(SeedRMSNorm):
    def forward(self, x):
        rms = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + 1e-6)  # not self.eps
        return (x.float() * rms * self.weight).to(dtype=x.dtype)


class WeightIsABuffer(SeedRMSNorm):
    def __init__(self, width, eps=1e-6):
        super().__init__(width, eps)
        del self.weight
        self.register_buffer("weight", torch.ones(width))


class HasABias(SeedRMSNorm):
    def __init__(self, width, eps=1e-6):
        super().__init__(width, eps)
        self.bias = torch.nn.Parameter(torch.zeros(width))


class SubtractsMean(SeedRMSNorm):
    def forward(self, x):
        h = x.float() - x.float().mean(-1, keepdim=True)
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(x.dtype)


def test_rms_norm_module_accepts_the_seed_and_hugging_face_orders():
    for cls in (SeedRMSNorm, HFStyleRMSNorm, bank("RMSNorm", "correct")):
        assert normref.check_rms_norm_module(cls).score == 1.0


@pytest.mark.parametrize("cls, fault, score", [
    # 7 cases: parameter, [2,3,8] f32, [4,4,4], f16 row, bf16, eps=1e-4 tiny, default eps.
    (DefaultEps1e5, "wrong_eps", 6 / 7),  # only the default-eps case (values 1e-3) feels it
    (IgnoresEpsArgument, "wrong_eps", 6 / 7),  # only RMSNorm(5, eps=1e-4) feels it
    (WeightIsABuffer, "module_weight", 6 / 7),  # forward is right; the parameter case fails
    (HasABias, "module_weight", 6 / 7),
    (bank("RMSNorm", "low_precision_stats"), "low_precision_stats", 6 / 7),  # only the float16 row
    (bank("RMSNorm", "wrong_dtype"), "wrong_dtype", 5 / 7),  # float32 out: the float16 and bf16 cases
    (bank("RMSNorm", "module_weight"), "module_weight", 6 / 7),  # a plain tensor, not a parameter
    (SubtractsMean, "subtracts_mean", 1 / 7),  # every forward case has rows with mean != 0
])
def test_each_rms_norm_module_fault_is_diagnosed(cls, fault, score):
    r = normref.check_rms_norm_module(cls)
    assert r.faults == [fault], r.report()
    assert r.score == pytest.approx(score)


# ----------------------------------------------------------------- placement

@pytest.mark.parametrize("fault", ["residual_from_normed", "pre_post_swapped", "missing_residual",
                                   "missing_norm", "norm_on_sublayer_output"])
def test_each_pre_ln_fault_is_diagnosed_on_every_case(fault):
    student = bank("pre_ln", fault)  # e.g. residual_from_normed: norm(x) + sublayer(norm(x))
    # Every case has x != Norm(x) (trained gamma/beta or a non-unit token) and a sublayer that
    # is not scale-equivariant, so each misplacement changes all four outputs.
    r = normref.check_pre_ln(student)
    assert r.score == 0 and r.faults == [fault], r.report()


def test_pre_ln_seed_token_by_hand():
    # x = (1, 2, 3), F(v) = 2v, LN without eps: x + 2 LN(x) = (1 - 2s, 2, 3 + 2s), s = sqrt(3/2).
    r = normref.check_pre_ln(lambda x, F, N: x + F(N(x)))
    assert r.cases[0].name.startswith("seed token (1, 2, 3)") and r.cases[0].passed
    s = math.sqrt(1.5)
    got = normref.pre_ln(torch.tensor([1.0, 2.0, 3.0]), lambda v: 2 * v, normref.LayerNorm(3, eps=0.0))
    torch.testing.assert_close(got, torch.tensor([1 - 2 * s, 2.0, 3 + 2 * s]))


@pytest.mark.parametrize("student, fault, score", [
    (bank("post_ln", "pre_post_swapped"), "pre_post_swapped", 0.0),  # x + F(N(x))
    # N(F(x)): LN(2x) = LN(3x) on the seed token with F(v) = 2v, but the seed case also runs
    # F(v) = (v3, v1, v2): LN(3, 1, 2) is not LN(x + F(x)) = LN(4, 3, 5): 0 of 4.
    (bank("post_ln", "missing_residual"), "missing_residual", 0.0),
    # N(x), the sublayer left out: right for F(v) = 2v only (LN(3x) = LN(x)): 0 of 4
    (lambda x, F, N: N(x), "ignores_sublayer", 0.0),
    (bank("post_ln", "missing_norm"), "missing_norm", 0.0),  # x + F(x)
    (bank("post_ln", "norm_on_sublayer_output"), "norm_on_sublayer_output", 0.0),  # x + N(F(x))
    (lambda x, F, N: N(x) + F(x), "residual_from_normed", 0.0),
])
def test_each_post_ln_fault_is_diagnosed(student, fault, score):
    r = normref.check_post_ln(student)
    assert r.faults == [fault] and r.score == pytest.approx(score), r.report()


def test_placement_checker_catches_an_in_place_residual():
    def in_place(x, sublayer, norm):
        x += sublayer(norm(x))
        return x

    r = normref.check_pre_ln(in_place)
    assert r.score == 0 and r.faults == ["mutates_input"]


def test_checkers_leave_the_global_rng_alone():
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    normref.check_pre_ln(normref.pre_ln)
    normref.check_pre_ln_block(normref.TransformerBlock)
    assert torch.equal(torch.rand(3), want)


# ----------------------------------------------------------------- one pre-norm block

class Block(torch.nn.Module):
    """A MiniMind-named block whose forward has one chosen wiring."""

    def __init__(self, dim, n_heads, wiring="pre"):
        super().__init__()
        self.input_layernorm = SeedRMSNorm(dim)  # its own norm: normref's would break the rule
        self.self_attn = normref.CausalSelfAttention(dim, n_heads)
        self.post_attention_layernorm = SeedRMSNorm(dim)
        self.mlp = normref.FeedForward(dim)
        self.wiring = wiring

    def forward(self, x):
        A, M = self.self_attn, self.mlp
        N1, N2 = self.input_layernorm, self.post_attention_layernorm
        w = self.wiring
        if w == "pre":
            h = x + A(N1(x))
            return h + M(N2(h))
        if w == "post":  # not in the answer bank
            h = N1(x + A(x))
            return N2(h + M(h))
        raise ValueError(w)


@pytest.mark.parametrize("student, fault, score", [
    # 4 cases: build, wiring with RMSNorms, wiring with LayerNorms, the student's own modules.
    # The student's own two RMSNorms both start at gamma = 1, so a norm swap or reuse is
    # invisible on the last case: build + own pass, 2 of 4.
    (bank("PreNormBlock", "residual_from_normed"), "residual_from_normed", 0.25),
    (lambda dim, n_heads: Block(dim, n_heads, "post"), "pre_post_swapped", 0.25),
    (bank("PreNormBlock", "norms_swapped"), "norms_swapped", 0.5),
    (bank("PreNormBlock", "missing_residual"), "missing_residual", 0.25),  # the first add
    (bank("PreNormBlock", "mlp_reads_x"), "mlp_reads_x", 0.25),
    (bank("PreNormBlock", "shared_norm"), "shared_norm", 0.5),  # input_layernorm twice
])
def test_each_block_wiring_fault_is_diagnosed(student, fault, score):
    r = normref.check_pre_ln_block(student)
    assert r.faults == [fault] and r.score == pytest.approx(score), r.report()


def test_block_contract_faults_missing_names_and_one_shared_norm():
    class Renamed(torch.nn.Module):
        def __init__(self, dim, n_heads):
            super().__init__()
            self.ln_1 = SeedRMSNorm(dim)

    r = normref.check_pre_ln_block(Renamed)
    assert r.score == 0 and r.faults == ["missing_attribute"]
    assert "no input_layernorm, self_attn, post_attention_layernorm, mlp" in r.messages[0]

    class OneNorm(Block):
        def __init__(self, dim, n_heads):
            super().__init__(dim, n_heads)
            self.post_attention_layernorm = self.input_layernorm

    r = normref.check_pre_ln_block(OneNorm)
    assert r.faults == ["shared_norm"] and r.score == pytest.approx(3 / 4)


# ----------------------------------------------------------------- LayerNorm backward

def _ln_bwd_unbiased(dy, x, w, eps):
    d = x.shape[-1]
    m = x.mean(-1, keepdims=True)
    r = 1 / np.sqrt(((x - m) ** 2).sum(-1, keepdims=True) / (d - 1) + eps)
    xhat = (x - m) * r
    g = dy * w
    dx = r * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).sum(-1, keepdims=True) / (d - 1))
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xhat).sum(lead), dy.sum(lead)


@pytest.mark.parametrize("student, fault, score", [
    # 4 cases: seed (1,2,3) with gamma = 1, [2,3,8], [4,4,4], tiny values (all with gamma != 1 but the first).
    (bank("layer_norm_backward", "bwd_no_mean_term"), "bwd_no_mean_term", 0.0),
    (bank("layer_norm_backward", "bwd_no_variance_term"), "bwd_no_variance_term", 0.0),
    (bank("layer_norm_backward", "bwd_constant_stats"), "bwd_constant_stats", 0.0),
    (bank("layer_norm_backward", "ignores_weight"), "ignores_weight", 0.25),  # gamma = 1 hides it
    (_ln_bwd_unbiased, "unbiased_variance", 0.0),
    (bank("layer_norm_backward", "bwd_dweight_dbias_swapped"), "bwd_dweight_dbias_swapped", 0.0),
    (bank("layer_norm_backward", "bwd_not_summed"), "bwd_not_summed", 0.25),  # 1-D: nothing to sum
])
def test_each_layer_norm_backward_fault_is_diagnosed(student, fault, score):
    r = normref.check_layer_norm_backward(student)
    assert r.faults == [fault] and r.score == pytest.approx(score), r.report()


def test_backward_message_names_the_wrong_gradient():
    r = normref.check_layer_norm_backward(bank("layer_norm_backward", "bwd_dweight_dbias_swapped"))
    msg = r.messages[0]
    assert "dweight max abs error" in msg and "dbias max abs error" in msg and "dx max abs" not in msg


# ----------------------------------------------------------------- robustness of the new checkers

@pytest.mark.parametrize("checker", [
    normref.check_pre_ln, normref.check_post_ln, normref.check_layer_norm_backward,
    normref.check_rms_norm_module, normref.check_pre_ln_block,
])
def test_new_checkers_never_raise_on_garbage(checker):
    def raises(*args, **kwargs):
        raise NotImplementedError()

    for student in (42, raises, lambda *a, **k: None, lambda *a, **k: "nope"):
        r = checker(student)
        assert r.score == 0 and r.faults and not r.passed
    assert "not implemented yet" in checker(raises).messages[0]
    # an exception without a message is named alone (the release stub's raise NotImplementedError())
    assert "raised NotImplementedError; not implemented yet" in checker(raises).messages[0]


def test_a_correct_answer_that_writes_to_stderr_still_leaves_stderr_empty(capsys):
    import sys

    def chatty(x, sublayer, norm):
        print("debug: shapes", x.shape, file=sys.stderr)
        return x + sublayer(norm(x))

    assert normref.check_pre_ln(chatty).score == 1.0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("options", [{}, {"ddof": 1}, {"eps_out": True}, {"eps": 0.0},
                                     {"centered": False}, {"axis": 0}])
def test_backward_fault_models_are_the_autograd_gradients_of_the_faulty_forwards(options):
    # The grader's diagnosis trusts grader.backward.bwd_model; check it against torch autograd of
    # the same faulty forward (normref.checks.norms.model_t), float64, on a [3, 4, 5] input.
    _bwd_model = grader_backward.bwd_model
    from normref.checks.norms import model_t as _model_t

    rng = np.random.default_rng(5)
    x, dy, w = rng.normal(size=(3, 4, 5)) + 0.3, rng.normal(size=(3, 4, 5)), 1 + rng.normal(size=5)
    eps = options.pop("eps", 1e-3)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    bt = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    _model_t("layer", xt, wt, bt, eps, **options).backward(torch.tensor(dy))
    for got, want in zip(_bwd_model(dy, x, w, eps, **options), (xt.grad, wt.grad, bt.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)
    if not options:
        for got, want in zip(_bwd_model(dy, x, w, eps), grader_backward.layer_norm_backward(dy, x, w, eps)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


# ----------------------------------------------------------------- what the student reads

# Checker, the answer cells it reads (in order) and the name it checks, per assignment.
_CHECKED = {
    "rmsnorm": [(check_rms_norm, "rms_norm")],
    "layernorm": [(check_layer_norm, "layer_norm")],
    "layernorm_backward": [(normref.check_layer_norm_backward, "layer_norm_backward")],
    "block": [(normref.check_rms_norm_module, "RMSNorm"), (normref.check_pre_ln, "pre_ln"),
              (normref.check_post_ln, "post_ln"), (normref.check_pre_ln_block, "PreNormBlock")],
}
_BANK_RESULTS = [(a, v, checker, name) for a, checks in _CHECKED.items() for v in ANSWERS[a]
                 for checker, name in checks if v != "blank" and _BANK_CELLS[name][1] in ANSWERS[a][v]]
_KINDS_WITH_UNDERSCORE = [k for k in normref.faults.FAULTS if "_" in k]


def _visible_text(result) -> str:
    shown, _ = result._repr_mimebundle_()
    return "\n".join([shown["text/plain"], str(result), *result.messages,
                      *(c.message for c in result.cases)])


def test_no_student_visible_text_carries_a_fault_tag():
    # every wrong answer in the bank, every checker that grades it: the text shown has no
    # tag and no internal kind name; the kinds are in the display's metadata
    import re

    assert len(_BANK_RESULTS) > 40
    for assignment, variant, checker, name in _BANK_RESULTS:
        r = checker(bank(name, variant))
        text = _visible_text(r)
        assert "[fault:" not in text and "[variant:" not in text, (assignment, variant, text)
        leaked = [k for k in _KINDS_WITH_UNDERSCORE if re.search(rf"\b{k}\b", text)]
        assert not leaked, (assignment, variant, leaked, text)
        assert r._repr_mimebundle_()[1]["normref"]["faults"] == r.faults, (assignment, variant)
        if variant != "correct" and not r.passed:
            assert r.faults, (assignment, variant)


#: torch's names, which a numpy answer must not be told
TORCH_WORDS = [r"\btorch\b", r"\btensors?\b", r"\bkeepdim\b", r"\bdim=", r"\.float\(\)", r"\.to\("]
#: every fault a numpy checker (layer_norm numpy, rms_norm numpy, layer_norm_backward) can name
NUMPY_FAULTS = ["unbiased_variance", "eps_outside_sqrt", "no_eps", "wrong_axis", "missing_keepdim",
                "low_precision_stats", "wrong_dtype", "subtracts_mean", "not_centered",
                "nan_on_constant_row", "mutates_input", "wrong_shape", "wrong_type", "returns_nan",
                "raises", "timeout", "ignores_weight", "ignores_bias", "wrong_values",
                "bwd_no_mean_term", "bwd_no_variance_term", "bwd_constant_stats",
                "bwd_dweight_dbias_swapped", "bwd_not_summed", "reference_call"]


def _torch_words(text: str) -> list[str]:
    import re

    return [w for w in TORCH_WORDS if re.search(w, text)]


def test_numpy_feedback_for_every_numpy_fault_has_no_torch_vocabulary():
    for kind in NUMPY_FAULTS:
        assert not _torch_words(normref.faults.message(kind, "numpy")), kind
    # the words that differ, side by side
    assert "keepdims=True" in normref.faults.message("missing_keepdim", "numpy")
    assert "keepdim=True" in normref.faults.message("missing_keepdim", "torch")
    assert "axis=-1" in normref.faults.message("wrong_axis", "numpy")
    assert "x.astype(np.float32)" in normref.faults.message("low_precision_stats", "numpy")
    assert "new array" in normref.faults.message("mutates_input", "numpy")
    # and what the numpy assignments' checkers actually say to every bank answer
    for assignment, variant, checker, name in _BANK_RESULTS:
        if assignment in ("layernorm", "layernorm_backward"):
            text = _visible_text(checker(bank(name, variant)))
            assert not _torch_words(text), (assignment, variant, _torch_words(text), text)


def test_a_missing_keepdim_is_named_by_the_quick_check_not_raised():
    # torch: [2, 3] against [2, 3, 8] raises "The size of tensor a (8) must match ..."; numpy:
    # "operands could not be broadcast together". The quick check catches and names it.
    for fn, check in [(bank("rms_norm", "missing_keepdim"), check_rms_norm),
                      (bank("layer_norm", "missing_keepdim"), check_layer_norm)]:
        r = check(fn, quick=True)
        case = _case(r, "seed shape [2, 3, 8]")
        assert not case.passed and case.fault == "missing_keepdim", r.report()
        assert "raised" in case.message and "keepdim" in case.message


def test_an_axis_that_raises_is_named_wrong_axis():
    # dim=1 / axis=1 of the 1-D seed token raises (torch IndexError, numpy AxisError)
    def rms_dim1(x, weight, eps=1e-6):
        return (x.float() * x.float().pow(2).mean(dim=1, keepdim=True).add(eps).rsqrt() * weight).to(x.dtype)

    def ln_axis1(x, w, b, eps=1e-5):
        m = x.mean(axis=1, keepdims=True)
        return ((x - m) / np.sqrt(((x - m) ** 2).mean(axis=1, keepdims=True) + eps) * w + b).astype(x.dtype)

    for r in (check_rms_norm(rms_dim1, quick=True), check_layer_norm(ln_axis1, quick=True)):
        c = r.cases[0]
        assert not c.passed and c.fault == "wrong_axis" and "raised" in c.message, r.report()


@pytest.mark.slow
def test_in_a_notebook_the_faults_ride_in_output_metadata_not_in_the_text(tmp_path):
    # run a displayed result in a real kernel, then read the notebook as the class report does
    # and as nbconvert's HTML (nbgrader's feedback) shows it
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    from normref.faults import parse_tags

    source = ANSWERS["rmsnorm"]["eps_outside_sqrt"]["rms_norm_impl"]
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import torch\nfrom normref import check_rms_norm\n" + source),
        nbformat.v4.new_code_cell("display(check_rms_norm(rms_norm))\nround(4 * check_rms_norm(rms_norm).score, 2)"),
        nbformat.v4.new_code_cell("check_rms_norm(rms_norm).show()"),
        # the rule: a function typed in a cell is read from the kernel's cell source
        nbformat.v4.new_code_cell("import torch.nn.functional as F\n\n"
                                  "def rms_ref(x, weight, eps=1e-6):\n"
                                  "    return F.rms_norm(x, (x.shape[-1],), weight, eps)\n\n"
                                  "display(check_rms_norm(rms_ref))"),
    ])
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    rule = [o for o in nb.cells[3].outputs if o.output_type == "display_data"][0]
    # one line, the call as the source spells it: no "6/6 cases passed" header, no second
    # wording of the same call (the recorder's "calls torch's rms_norm"), no cell number
    assert rule.data["text/plain"] == "0 points: calls F.rms_norm \u2014 implement it with tensor operations"
    assert parse_tags(nb.cells[3]) == ["reference_call"]
    for cell in nb.cells[1:3]:
        assert parse_tags(cell) == ["eps_outside_sqrt"]
        texts = [o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.outputs]
        assert any("eps belongs inside the square root" in t for t in texts)
        assert not any("[fault:" in t or "eps_outside_sqrt" in t for t in texts)
    # nbgrader reads partial credit from the execute_result: still the bare number
    (result,) = [o for o in nb.cells[1].outputs if o.output_type == "execute_result"]
    assert result.data["text/plain"] == "3.33"
    html, _ = HTMLExporter().from_notebook_node(nb)
    assert "eps belongs inside the square root" in html
    assert "eps_outside_sqrt" not in html and "[fault:" not in html


def test_a_variant_named_by_the_search_rides_in_metadata_too():
    # dividing by max |x| is no listed fault; normref.diagnosis names it as a variant
    def max_abs(x, w, eps=1e-6):
        return (x.float() / x.float().abs().amax(-1, keepdim=True) * w).to(x.dtype)

    r = check_rms_norm(max_abs)
    assert r.faults == ["found_variant"] and r.variants and r.variants[0].startswith("stat=max_abs")
    assert r._repr_mimebundle_()[1] == {"normref": {"faults": ["found_variant"], "variants": r.variants}}
    assert "[variant:" not in r.report() and "[fault:" not in r.report()


@pytest.mark.parametrize("checker, student", [
    (normref.check_rms_norm_module, normref.RMSNorm), (normref.check_pre_ln, normref.pre_ln),
    (normref.check_post_ln, normref.post_ln), (normref.check_pre_ln_block, normref.TransformerBlock),
    (normref.check_layer_norm_backward, normref.backward.layer_norm_grads),
])
def test_quick_is_the_first_two_cases_of_every_checker(checker, student):
    full, quick = checker(student), checker(student, quick=True)
    assert [c.name for c in quick.cases] == [c.name for c in full.cases[:2]]
    assert [c.name for c in full.head(2).cases] == [c.name for c in quick.cases]
    assert all(c.passed for c in quick.cases) and quick.breaches == full.breaches != []  # the reference


def test_a_quick_check_already_names_a_wiring_fault():
    r = normref.check_pre_ln_block(bank("PreNormBlock", "mlp_reads_x"), quick=True)
    assert r.faults == ["mlp_reads_x"] and r.score == 0.5  # built, miswired


def test_show_outside_ipython_prints_the_report(capsys):
    r = check_rms_norm(seed_rms_norm, quick=True)
    r.show()
    assert capsys.readouterr().out == r.displayed() + "\n"  # the report, wrapped at spaces
    assert " ".join(r.displayed().split()) == " ".join(r.report().split())


def test_problem_is_the_first_breach_or_diagnosis_without_the_raw_error():
    from normref.checks import CaseResult, CheckResult

    raw = ("case 'seed shape [2, 3, 8] float32': raised RuntimeError: The size of tensor a (8) must match "
           "the size of tensor b (3) at non-singleton dimension 2; use keepdim=True")
    r = CheckResult("rms_norm", [CaseResult("a", True), CaseResult("b", False, raw, "missing_keepdim"),
                                 CaseResult("c", False, "case 'c': second", "wrong_values")])
    assert r.problem == "use keepdim=True"  # the hint, not torch's message nor the case name
    r.breaches = ["0 points: calls F.rms_norm and this sentence is long enough to wrap — implement it "
                  "with tensor operations"]
    # the rule first, wrapped for nbgrader validate (it cuts each line of an error at 80; the
    # first line follows "AssertionError: ")
    assert r.problem == ("0 points: calls F.rms_norm and this sentence is long enough\n"
                         "to wrap — implement it with tensor operations")
    assert all(len("AssertionError: " + line) <= 80 for line in r.problem.splitlines())
    assert CheckResult("rms_norm", [CaseResult("a", True)]).problem == ""
    # words are never cut, whatever whitespace the text holds (it read "t\norch.float16")
    spaced = ("values right but dtype float32,  expected   float16;\nthe output dtype must be the input "
              "dtype: cast back with .to(x.dtype), e.g. torch.float16 for torch.float16 input " * 2)
    r = CheckResult("rms_norm", [CaseResult("b", False, f"case 'b': {spaced}", "wrong_dtype")])
    words = spaced.split()
    assert r.problem.split() == words, r.problem  # the same words, none split
    assert all(len("AssertionError: " + line) <= 80 for line in r.problem.splitlines()[:1])
    assert all(len(line) <= 76 for line in r.problem.splitlines()[1:])
    # on a real check: the quick check of a missing keepdim names it, in torch's and numpy's words
    assert check_rms_norm(bank("rms_norm", "missing_keepdim"), quick=True).problem.startswith("without keepdim=True")
    assert check_layer_norm(bank("layer_norm", "missing_keepdim"), quick=True).problem.startswith(
        "without keepdims=True")


def test_the_stored_numpy_batteries_are_torchs_bit_for_bit():
    """check_layer_norm/check_rms_norm's numpy cases come from normref/checks/numpy_batteries.py
    (a numpy check needs no torch); they are the torch-built battery's, bit for bit (after a
    change of the battery: python tools/numpy_batteries.py)."""
    from normref.checks.norms import battery, torch_battery

    for kind in ("rms", "layer"):
        stored, built = battery(kind, "numpy"), torch_battery(kind, "numpy")
        assert [(c.name, c.eps) for c in stored] == [(c.name, c.eps) for c in built]
        for s, b in zip(stored, built):
            for part in ("x", "weight", "bias"):
                got, want = getattr(s, part), getattr(b, part)
                assert (got is None) == (want is None), (kind, s.name, part)
                if want is not None:
                    assert (got.dtype, got.shape, got.tobytes()) == (want.dtype, want.shape, want.tobytes())
        first, again = battery(kind, "numpy")[1].x, battery(kind, "numpy")[1].x
        assert first is not again  # new arrays every call: an answer may write into its input


def test_the_searchs_sentences_use_numpy_words_for_a_numpy_answer(monkeypatch):
    """Issue 23: the numpy LayerNorm checker said "(torch.var(dim=-1) style)". Every sentence
    of the LayerNorm grammar, told to a numpy answer, is in numpy's words; and the checker tells
    a numpy answer the numpy form of what the search found, a torch answer the torch form."""
    import normref.diagnosis as diagnosis
    from normref.checks.norms import battery
    from normref.diagnosis import grammar_for, numpy_words, observation_case

    grammar = grammar_for("layer_norm")
    cases = [observation_case("layer_norm", c) for c in battery("layer", "numpy")]
    phrases = [c.phrase for dim in grammar.dims(cases) for c in dim]
    assert any("torch.var(dim=-1)" in p for p in phrases)  # the torch form exists ...
    for p in phrases:
        assert not _torch_words(numpy_words(p)), (p, numpy_words(p))  # ... and never reaches numpy
    torchvar = next(c for dim in grammar.dims(cases) for c in dim if c.value == "torchvar")

    class Found:
        best = (torchvar,)

        def sentence(self, reference=True):
            return torchvar.phrase

    monkeypatch.setattr(diagnosis, "search", lambda grammar, obs: Found())

    def noisy(x, weight, bias, eps=1e-5):  # generic "values differ": what the search refines
        return normref.layer_norm(x, weight, bias, eps) * 1.01 + 0.003

    # (the diagnoses: the report itself is the rule's one line, noisy calling normref's norm)
    told = "\n".join(normref.check_layer_norm(noisy, backend="numpy").messages)
    assert "np.var(axis=-1) style" in told and not _torch_words(told), told
    import torch

    def noisy_t(x, weight, bias, eps=1e-5):
        return torch.nn.functional.layer_norm(x * 1.0, x.shape[-1:], weight, bias, eps) * 1.01 + 0.003

    assert "torch.var(dim=-1) style" in "\n".join(normref.check_layer_norm(noisy_t, backend="torch").messages)


def test_rmsnorm_is_told_in_rmsnorm_words():
    """RMSNorm has no variance: its eps faults speak of sqrt(mean(x**2) + eps) and a row of
    zeros, LayerNorm's of sqrt(var + eps) and a constant row (issue 23)."""
    import torch

    def no_eps(x, weight=None, eps=1e-6):
        h = x.float()
        return (h / torch.sqrt((h ** 2).mean(-1, keepdim=True))).to(x.dtype)

    def eps_out(x, weight=None, eps=1e-6):
        h = x.float()
        return (h / (torch.sqrt((h ** 2).mean(-1, keepdim=True)) + eps)).to(x.dtype)

    for student, fault in ((no_eps, "no_eps"), (eps_out, "eps_outside_sqrt")):
        r = normref.check_rms_norm(student)
        assert fault in r.faults, r.report()
        text = r.report()
        assert "sqrt(mean(x**2) + eps)" in text and "var" not in text and "constant row" not in text, text
    for kind in ("no_eps", "eps_outside_sqrt", "unbiased_variance", "nan_on_constant_row"):
        rms, layer = normref.faults.message(kind, norm="rms"), normref.faults.message(kind)
        assert "var" not in rms.replace("variance)", "") or kind == "unbiased_variance", rms
        assert "sqrt(var" not in rms and "constant row" not in rms and rms != layer, (kind, rms)


def test_lesson_00s_fix_is_told_the_float16_overflow_in_torch_as_in_numpy():
    """Lesson 00's unbiased=False LayerNorm, on the full torch battery: its float16 case names
    the overflow (x**2 = 90000 above float16's 65504), as the numpy checker does."""
    import torch

    def lesson_00(x, weight, bias, eps=1e-5):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(var + eps) * weight + bias

    r = check_layer_norm(lesson_00, backend="torch")
    f16 = _case(r, "float16 rows")
    assert not f16.passed and f16.fault == "low_precision_stats", r.report()
    assert "x**2 up to 90000, above float16's largest 65504" in f16.message
    assert "the values differ from the reference" not in f16.message


def test_a_summed_away_dbias_on_a_1d_token_is_told_its_axis():
    """dbias = dy.sum(-1) on the 1-D seed token is one number: an axis mistake (bwd_not_summed),
    not "dbias is a float64; return numpy arrays"."""
    def student(dy, x, w, eps=1e-5):
        dx, dw, _ = normref.backward.layer_norm_grads(dy, x, w, eps)
        return dx, dw, dy.sum(-1)

    r = normref.check_layer_norm_backward(student, quick=True)
    seed = r.cases[0]
    assert not seed.passed and seed.fault == "bwd_not_summed", r.report()
    assert "single number" in seed.message and "float64" not in seed.message and "[3]" in seed.message


def test_validates_message_names_the_question_cases_points_and_every_cause(monkeypatch):
    """The Validate dialog's first lines (issue 23): the question, the cases, the points, then
    every failing cause, each naming its cases (float16's overflow and bfloat16's dtype, not
    only the first), and IPython shows it with no traceback frame of the course's code."""
    import torch

    from normref.handback import PointsLost, as_graded

    def lesson_00(x, weight, bias, eps=1e-5):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(var + eps) * weight + bias

    r = check_layer_norm(lesson_00, backend="torch")
    as_graded(r, "layer_norm_battery", points=4)  # outside validate: nothing
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    with pytest.raises(AssertionError) as e:
        as_graded(r, "layer_norm_battery", points=4)
    assert isinstance(e.value, PointsLost)
    lines = str(e.value).splitlines()
    n_failed = sum(not c.passed for c in r.cases)
    assert lines[0] == f"layer_norm_battery: {len(r.cases) - n_failed}/{len(r.cases)} cases, " \
                       f"{round(4 * r.score, 2):g} of 4 points:"
    causes = [line for line in lines[1:] if line.startswith("- ")]
    assert len(causes) == n_failed == 2, lines
    assert causes[0].startswith("- float16 rows [300, -300, 300, -300]: row 0") and "overflow" in str(e.value)
    # lesson 00's code casts nothing: the float32 weight and bias make the result float32 (probed)
    assert causes[1].startswith("- bfloat16 [2, 3, 8]: with the weight and bias given in x's dtype")
    assert all(len(line) <= 76 for line in lines[1:])
    assert e.value._render_traceback_() == [f"AssertionError: {e.value}"]  # IPython: the message alone


def test_a_long_diagnosis_is_displayed_wrapped_at_spaces_with_its_words_in_order():
    """JupyterLab breaks a long output line anywhere ("it only r" / "escales by the RMS", seen by
    the red team): what a check displays is wrapped at spaces, under 89 columns, the same words."""
    import torch

    def rms_norm(x, weight, eps=1e-6):  # subtracts the mean: LayerNorm's centring, a known slip
        x = x - x.mean(-1, keepdim=True)
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight

    result = normref.checks.check_rms_norm(rms_norm, quick=True)
    shown = result._repr_mimebundle_()[0]["text/plain"]
    assert max(len(line) for line in result.report().splitlines()) > 88  # there is something to wrap
    assert max(len(line) for line in shown.splitlines()) <= 88, shown
    assert shown.split() == result.report().split()  # the same words, in order
    assert len(shown.splitlines()) > len(result.report().splitlines())  # wrapped, not cut
    for line in shown.splitlines()[1:]:
        assert line.startswith("  x ") or line.startswith("    "), shown  # a case's continuation sits under it
