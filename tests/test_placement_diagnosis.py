"""Diagnoses that know every placement: a pre_ln, post_ln or block answer that implements another
known placement (Pre-LN, Post-LN, Peri-LN, Output-LN, DeepNorm with any alpha) is named as that
placement, on every case it fails, and never by a wrong name; DeepNorm's alpha is fitted and said
as a student would write it."""
from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

import normref
from normref import CausalSelfAttention, FeedForward, check_post_ln, check_pre_ln, check_pre_ln_block
from normref.checks.placement import alpha_words, fit_residual_scale


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def first_name(message: str) -> str:
    """What the message says the answer is: the words after its first "that is"."""
    m = re.search(r"that is (?:an? )?(.+?)(?:[,:;(]| block)", message)
    assert m, message
    return m.group(1).strip()


ALPHA6 = 12 ** 0.25  # DeepNet's (2N)^(1/4) for N = 6
SINGLE = [  # (checker, the student's function, fault kind, the name its message must give)
    (check_pre_ln, lambda x, F, N: N(x + F(x)), "pre_post_swapped", "Post-LN"),
    (check_pre_ln, lambda x, F, N: x + N(F(N(x))), "is_peri_ln", "Peri-LN"),
    (check_pre_ln, lambda x, F, N: x + N(F(x)), "norm_on_sublayer_output", "Output-LN"),
    (check_pre_ln, lambda x, F, N: N(2 * x + F(x)), "residual_scaled", "Post-LN with the residual scaled by 2"),
    (check_post_ln, lambda x, F, N: x + F(N(x)), "pre_post_swapped", "Pre-LN"),
    (check_post_ln, lambda x, F, N: x + N(F(N(x))), "is_peri_ln", "Peri-LN"),
    (check_post_ln, lambda x, F, N: x + N(F(x)), "norm_on_sublayer_output", "Output-LN"),
    (check_post_ln, lambda x, F, N: N(2 * x + F(x)), "residual_scaled", "Post-LN with the residual scaled by 2"),
    (check_post_ln, lambda x, F, N: N(0.5 * x + F(x)), "residual_scaled", "Post-LN with the residual scaled by 0.5"),
    (check_post_ln, lambda x, F, N: N(ALPHA6 * x + F(x)), "residual_scaled",
     "Post-LN with the residual scaled by 1.86"),
]


@pytest.mark.parametrize("check, student, fault, name", SINGLE,
                         ids=[f"{c.__name__}:{n}:{i}" for i, (c, _, _, n) in enumerate(SINGLE)])
def test_a_sublayer_answer_that_is_another_placement_is_named_as_it(check, student, fault, name):
    r = check(student)
    assert not r.passed
    assert [c.fault for c in r.cases] == [fault] * 4, r.report()  # every case, the same kind
    for c in r.cases:
        assert first_name(c.message) == name, c.message
    if fault == "residual_scaled":
        assert "DeepNorm" in r.cases[0].message and "Norm(alpha x + F(x))" in r.cases[0].message


def test_deepnet_alpha_is_said_with_its_depth():
    r = check_post_ln(lambda x, F, N: N(ALPHA6 * x + F(x)))
    assert "DeepNet's (2N)^(1/4) for N = 6 layers" in r.cases[1].message, r.report()


class _RMS(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(x.dtype)


def _block(forward, extra: bool = False):
    class Block(nn.Module):
        def __init__(self, dim, n_heads):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = _RMS(dim), _RMS(dim)
            self.self_attn, self.mlp = CausalSelfAttention(dim, n_heads), FeedForward(dim)
            if extra:  # Peri-LN's output norms, the student's own
                self.attn_norm, self.mlp_norm = _RMS(dim), _RMS(dim)

    Block.forward = forward
    return Block


def _post(s, x):
    h = s.input_layernorm(x + s.self_attn(x))
    return s.post_attention_layernorm(h + s.mlp(h))


def _output(s, x):
    h = x + s.input_layernorm(s.self_attn(x))
    return h + s.post_attention_layernorm(s.mlp(h))


def _peri_shared(s, x):
    h = x + s.input_layernorm(s.self_attn(s.input_layernorm(x)))
    return h + s.post_attention_layernorm(s.mlp(s.post_attention_layernorm(h)))


def _peri_own(s, x):
    h = x + s.attn_norm(s.self_attn(s.input_layernorm(x)))
    return h + s.mlp_norm(s.mlp(s.post_attention_layernorm(h)))


def _peri_gemma_names(s, x):  # Gemma 2's names: post_attention_layernorm on attention's output
    h = x + s.post_attention_layernorm(s.self_attn(s.input_layernorm(x)))
    return h + s.mlp_norm(s.mlp(s.attn_norm(h)))


def _deep(s, x):
    h = s.input_layernorm(2 * x + s.self_attn(x))
    return s.post_attention_layernorm(2 * h + s.mlp(h))


BLOCKS = [
    (_block(_post), "pre_post_swapped", "Post-LN"),
    (_block(_output), "norm_on_sublayer_output", "Output-LN"),
    (_block(_peri_shared), "is_peri_ln", "Peri-LN"),
    (_block(_peri_own, extra=True), "is_peri_ln", "Peri-LN"),
    (_block(_peri_gemma_names, extra=True), "is_peri_ln", "Peri-LN"),
    (_block(_deep), "residual_scaled", "Post-LN with the residual scaled by 2"),
]


@pytest.mark.parametrize("cls, fault, name", BLOCKS, ids=[f"{f}:{i}" for i, (_, f, _) in enumerate(BLOCKS)])
def test_a_block_that_is_another_placement_is_named_as_it(cls, fault, name):
    r = check_pre_ln_block(cls)
    assert r.cases[0].passed, r.report()  # the build: four attributes, norms that normalise
    assert [c.fault for c in r.cases[1:]] == [fault] * 3, r.report()
    for c in r.cases[1:]:
        assert first_name(c.message) == name, c.message
    if fault == "is_peri_ln":
        assert "x + Norm(F(Norm(x)))" in r.cases[1].message


def test_the_references_still_pass_with_nothing_to_diagnose():
    assert check_pre_ln(lambda x, F, N: x + F(N(x))).passed
    assert check_post_ln(lambda x, F, N: N(x + F(x))).passed

    def fwd(s, x):
        h = x + s.self_attn(s.input_layernorm(x))
        return h + s.mlp(s.post_attention_layernorm(h))

    r = check_pre_ln_block(_block(fwd))
    assert r.passed and all(c.fault is None for c in r.cases), r.report()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("alpha", [0.3, 1.7, 2.0, ALPHA6, 9.0])
def test_the_residual_scale_is_fitted_from_the_output(seed, alpha):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 5, 8, generator=g) * 2
    W = torch.randn(8, 8, generator=g) / math.sqrt(8)
    norm = normref.LayerNorm(8)
    Fx = torch.tanh(x @ W)
    got = norm(alpha * x + Fx).detach().double().numpy()
    fitted = fit_residual_scale(lambda a: norm(a * x + Fx).detach(), got)
    assert fitted == pytest.approx(alpha, rel=1e-4)


def test_alpha_is_said_as_a_student_would_write_it():
    assert alpha_words(2.0000004) == "2" and alpha_words(0.5) == "0.5" and alpha_words(3.0) == "3"
    assert alpha_words(math.sqrt(2)) == "1.41 (sqrt 2)"
    assert alpha_words((2 * 100) ** 0.25) == "3.76 (DeepNet's (2N)^(1/4) for N = 100 layers)"
    assert alpha_words(1.234567) == "1.23"
