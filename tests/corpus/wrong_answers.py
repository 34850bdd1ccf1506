"""A held-out corpus of student answers for issue 31's proof: realistic wrong answers and correct
answers written unusually, one entry per answer, for every code question of the course.

Written from the lessons (``notebooks/*.md``), the seed and the papers (Ba et al. 2016; Zhang and
Sennrich 2019; Xiong et al. 2020; Kim et al. 2025 (Peri-LN); Henry et al. 2020 and Dehghani et
al. 2023 (QK-norm); Zhu et al. 2025 (DyT); Wang et al. 2022 (DeepNet)), as mistakes a student
makes there: placements, axes, parameters, dtypes, casts, backward slips and lesson 04's three
questions. It was written and committed before the diagnosis mechanisms of issue 31 were built,
and is not tuned to them: ``tests/test_corpus.py`` runs every entry through its checker and
asserts the figures the closing note reports (every wrong answer fails and every failing case
that returns a value names a measured difference; every correct answer passes).

Each entry is ``Answer(question, name, code, what)``: ``question`` the checker's name
(``CheckResult.name``), ``code`` the function or class the student wrote, ``what`` what the
student did (for people; never read by a check).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class Answer:
    question: str
    name: str
    code: Callable
    what: str


# ============================================================================ rms_norm (torch)


def rms_std(x, weight, eps=1e-6):
    h = x.float()
    return (h / (h.std(dim=-1, keepdim=True) + eps) * weight).to(x.dtype)


def rms_low_precision(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.to(x.dtype)


def rms_l2(x, weight, eps=1e-6):
    h = x.float()
    return (h / torch.sqrt(h.pow(2).sum(-1, keepdim=True) + eps) * weight).to(x.dtype)


def rms_dim0(x, weight, eps=1e-6):
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(0, keepdim=True) + eps) * weight).to(x.dtype)


def rms_no_cast_back(x, weight, eps=1e-6):
    h = x.float()
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight


def rms_whole_tensor(x, weight, eps=1e-6):
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean() + eps) * weight).to(x.dtype)


def rms_gemma_weight(x, weight, eps=1e-6):
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * (1 + weight)).to(x.dtype)


def rms_torch_norm(x, weight, eps=1e-6):
    h = x.float()
    d = h.shape[-1]
    return (h / h.norm(dim=-1, keepdim=True) * math.sqrt(d) * weight).to(x.dtype)


def rms_mean_abs(x, weight, eps=1e-6):
    h = x.float()
    return (h / (h.abs().mean(-1, keepdim=True) + eps) * weight).to(x.dtype)


def rms_eps_outside(x, weight, eps=1e-6):
    h = x.float()
    return (h / (h.pow(2).mean(-1, keepdim=True).sqrt() + eps) * weight).to(x.dtype)


# ============================================================================ layer_norm (numpy)


def ln_eps_added_to_output(x, weight, bias, eps=1e-5):
    h = x.astype(np.float32)
    m = h.mean(-1, keepdims=True)
    v = h.var(-1, keepdims=True)
    return ((h - m) / np.sqrt(v) + eps).astype(x.dtype) * weight + bias


def ln_axis0(x, weight, bias, eps=1e-5):
    h = x.astype(np.float32)
    m = h.mean(0, keepdims=True)
    v = h.var(0, keepdims=True)
    return ((h - m) / np.sqrt(v + eps) * weight + bias).astype(x.dtype)


def ln_no_upcast(x, weight, bias, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * weight.astype(x.dtype) + bias.astype(x.dtype)


def ln_weight_bias_swapped(x, weight, bias, eps=1e-5):
    h = x.astype(np.float32)
    xhat = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + eps)
    return (xhat * bias + weight).astype(x.dtype)


def ln_uncentred_second_moment(x, weight, bias, eps=1e-5):
    h = x.astype(np.float32)
    m = h.mean(-1, keepdims=True)
    return ((h - m) / np.sqrt((h * h).mean(-1, keepdims=True) + eps) * weight + bias).astype(x.dtype)


def ln_ddof1(x, weight, bias, eps=1e-5):
    h = x.astype(np.float32)
    m = h.mean(-1, keepdims=True)
    s = h.std(-1, ddof=1, keepdims=True)
    return ((h - m) / np.sqrt(s**2 + eps) * weight + bias).astype(x.dtype)


def ln_float64_out(x, weight, bias, eps=1e-5):
    h = x.astype(np.float64)
    m = h.mean(-1, keepdims=True)
    return (h - m) / np.sqrt(h.var(-1, keepdims=True) + eps) * weight + bias


def ln_std_plus_eps(x, weight, bias, eps=1e-5):
    h = x.astype(np.float32)
    m = h.mean(-1, keepdims=True)
    return ((h - m) / (h.std(-1, keepdims=True) + eps) * weight + bias).astype(x.dtype)


def ln_bias_before_weight(x, weight, bias, eps=1e-5):
    h = x.astype(np.float32)
    xhat = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + eps)
    return ((xhat + bias) * weight).astype(x.dtype)


# ============================================================================ RMSNorm module


class ModuleEps1e5(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(x.dtype)


class ModuleCentred(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = x.float()
        return (self.weight * (h - h.mean(-1, keepdim=True))
                / torch.sqrt(h.var(-1, keepdim=True, unbiased=False) + self.eps)).to(x.dtype)


class ModuleFloatOut(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = x.float()
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class ModuleIgnoresEps(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight).to(x.dtype)


# ============================================================================ pre_ln / post_ln


def pre_ln_norm_after(x, sublayer, norm):
    return norm(x + sublayer(norm(x)))


def pre_ln_normed_residual(x, sublayer, norm):
    h = norm(x)
    return h + sublayer(h)


def pre_ln_scaled_sum(x, sublayer, norm):
    return (x + sublayer(norm(x))) / math.sqrt(2)


def pre_ln_in_place(x, sublayer, norm):
    x += sublayer(norm(x))
    return x


def post_ln_as_pre(x, sublayer, norm):
    return x + sublayer(norm(x))


def post_ln_norm_branch_too(x, sublayer, norm):
    return norm(x + norm(sublayer(x)))


def post_ln_sublayer_on_sum(x, sublayer, norm):
    return norm(sublayer(x + x))


# ============================================================================ the block


class MyRMSNorm(nn.Module):
    """The student's own RMSNorm (the block assignment's first question)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(x.dtype)


def _norms_and_parts(self, dim, n_heads):
    from normref import CausalSelfAttention, FeedForward

    RMSNorm = MyRMSNorm
    self.input_layernorm = RMSNorm(dim)
    self.self_attn = CausalSelfAttention(dim, n_heads)
    self.post_attention_layernorm = RMSNorm(dim)
    self.mlp = FeedForward(dim)


class BlockParallel(nn.Module):
    """GPT-J / PaLM's parallel block: both sublayers read x."""

    def __init__(self, dim, n_heads):
        super().__init__()
        _norms_and_parts(self, dim, n_heads)

    def forward(self, x):
        return x + self.self_attn(self.input_layernorm(x)) + self.mlp(self.post_attention_layernorm(x))


class BlockSecondNormOnX(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        _norms_and_parts(self, dim, n_heads)

    def forward(self, x):
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(x))


class BlockPostLN(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        _norms_and_parts(self, dim, n_heads)

    def forward(self, x):
        h = self.input_layernorm(x + self.self_attn(x))
        return self.post_attention_layernorm(h + self.mlp(h))


class BlockNoSecondResidual(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        _norms_and_parts(self, dim, n_heads)

    def forward(self, x):
        h = x + self.self_attn(self.input_layernorm(x))
        return self.mlp(self.post_attention_layernorm(h))


class BlockFinalNorm(nn.Module):
    """A final norm after the block (as a model's last norm), inside every block."""

    def __init__(self, dim, n_heads):
        super().__init__()
        _norms_and_parts(self, dim, n_heads)

    def forward(self, x):
        h = x + self.self_attn(self.input_layernorm(x))
        h = h + self.mlp(self.post_attention_layernorm(h))
        return self.post_attention_layernorm(h)


# ============================================================================ backward (numpy)


def _stats(x, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    r = 1 / np.sqrt(var + eps)
    return mean, var, r, (x - mean) * r


def bwd_dbias_mean(dy, x, weight, eps=1e-5):
    _, _, r, xhat = _stats(x, eps)
    g = dy * weight
    dx = r * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xhat).sum(lead), dy.mean(lead)


def bwd_sign_flip(dy, x, weight, eps=1e-5):
    _, _, r, xhat = _stats(x, eps)
    g = dy * weight
    dx = r * (g - g.mean(-1, keepdims=True) + xhat * (g * xhat).mean(-1, keepdims=True))
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xhat).sum(lead), dy.sum(lead)


def bwd_only_first_term(dy, x, weight, eps=1e-5):
    _, _, r, xhat = _stats(x, eps)
    lead = tuple(range(x.ndim - 1))
    return dy * weight * r, (dy * xhat).sum(lead), dy.sum(lead)


def bwd_ddof1(dy, x, weight, eps=1e-5):
    n = x.shape[-1]
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).sum(-1, keepdims=True) / (n - 1)
    r = 1 / np.sqrt(var + eps)
    xhat = (x - mean) * r
    g = dy * weight
    dx = r * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xhat).sum(lead), dy.sum(lead)


def bwd_sum_over_n_not_mean(dy, x, weight, eps=1e-5):
    _, _, r, xhat = _stats(x, eps)
    g = dy * weight
    dx = r * (g - g.sum(-1, keepdims=True) - xhat * (g * xhat).sum(-1, keepdims=True))
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xhat).sum(lead), dy.sum(lead)


def bwd_dweight_times_weight(dy, x, weight, eps=1e-5):
    _, _, r, xhat = _stats(x, eps)
    g = dy * weight
    dx = r * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    lead = tuple(range(x.ndim - 1))
    return dx, (g * xhat).sum(lead), dy.sum(lead)


# ============================================================================ peri_ln


def peri_norm_on_sum(x, sublayer, norm, out_norm):
    return norm(x + sublayer(norm(x)))


def peri_out_norm_on_sum(x, sublayer, norm, out_norm):
    return out_norm(x + sublayer(norm(x)))


def peri_residual_normed(x, sublayer, norm, out_norm):
    h = norm(x)
    return h + out_norm(sublayer(h))


def peri_out_norm_before_f(x, sublayer, norm, out_norm):
    return x + sublayer(out_norm(norm(x)))


def peri_only_out_norm(x, sublayer, norm, out_norm):
    return x + out_norm(sublayer(x))


def peri_double_residual(x, sublayer, norm, out_norm):
    y = x + sublayer(norm(x))
    return y + out_norm(y)


def peri_float_out(x, sublayer, norm, out_norm):
    return x.float() + out_norm(sublayer(norm(x))).float()


# ============================================================================ qk_norm_logits


def qk_norm_after_product(q, k, q_norm, k_norm):
    return q_norm(q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])


def qk_same_norm_twice(q, k, q_norm, k_norm):
    return q_norm(q) @ q_norm(k).transpose(-2, -1) / math.sqrt(q.shape[-1])


def qk_sqrt_of_t(q, k, q_norm, k_norm):
    return q_norm(q) @ k_norm(k).transpose(-2, -1) / math.sqrt(q.shape[-2])


def qk_dot_T(q, k, q_norm, k_norm):
    return q_norm(q) @ k_norm(k).T / math.sqrt(q.shape[-1])


def qk_float32_out(q, k, q_norm, k_norm):
    return q_norm(q).float() @ k_norm(k).float().transpose(-2, -1) / math.sqrt(q.shape[-1])


def qk_scale_before_norm(q, k, q_norm, k_norm):
    s = q.shape[-1] ** -0.25
    return q_norm(q * s) @ k_norm(k * s).transpose(-2, -1)


def qk_divide_by_d(q, k, q_norm, k_norm):
    return q_norm(q) @ k_norm(k).transpose(-2, -1) / q.shape[-1]


# ============================================================================ dyt


def dyt_no_affine(x, alpha, weight, bias):
    return torch.tanh(alpha * x.float()).to(x.dtype)


def dyt_weight_inside(x, alpha, weight, bias):
    return (torch.tanh(alpha * weight * x.float()) + bias).to(x.dtype)


def dyt_divides_by_alpha(x, alpha, weight, bias):
    return (weight * torch.tanh(x.float() / alpha) + bias).to(x.dtype)


def dyt_promoted(x, alpha, weight, bias):
    return weight * torch.tanh(alpha * x) + bias


def dyt_bias_multiplies(x, alpha, weight, bias):
    return (weight * torch.tanh(alpha * x.float()) * bias).to(x.dtype)


def dyt_no_bias(x, alpha, weight, bias):
    return (weight * torch.tanh(alpha * x.float())).to(x.dtype)


def dyt_layernormed(x, alpha, weight, bias):
    h = x.float()
    h = (h - h.mean(-1, keepdim=True)) / h.std(-1, keepdim=True)
    return (weight * torch.tanh(alpha * h) + bias).to(x.dtype)


WRONG = [
    Answer("rms_norm", "rms_std", rms_std, "divides by x.std (centred, n-1) instead of the RMS"),
    Answer("rms_norm", "rms_low_precision", rms_low_precision, "statistics in the input dtype"),
    Answer("rms_norm", "rms_l2", rms_l2, "sum of squares, not the mean (the L2 norm)"),
    Answer("rms_norm", "rms_dim0", rms_dim0, "mean over dim 0"),
    Answer("rms_norm", "rms_no_cast_back", rms_no_cast_back, "returns float32 for float16 input"),
    Answer("rms_norm", "rms_whole_tensor", rms_whole_tensor, "one mean square over the whole tensor"),
    Answer("rms_norm", "rms_gemma_weight", rms_gemma_weight, "Gemma's (1 + weight)"),
    Answer("rms_norm", "rms_torch_norm", rms_torch_norm, "x / ||x|| * sqrt(d): eps left out"),
    Answer("rms_norm", "rms_mean_abs", rms_mean_abs, "mean |x| instead of the root mean square"),
    Answer("rms_norm", "rms_eps_outside", rms_eps_outside, "sqrt(ms) + eps"),
    Answer("layer_norm", "ln_eps_added_to_output", ln_eps_added_to_output, "+ eps outside the fraction"),
    Answer("layer_norm", "ln_axis0", ln_axis0, "statistics over axis 0"),
    Answer("layer_norm", "ln_no_upcast", ln_no_upcast, "float16 statistics"),
    Answer("layer_norm", "ln_weight_bias_swapped", ln_weight_bias_swapped, "xhat * beta + gamma"),
    Answer("layer_norm", "ln_uncentred_second_moment", ln_uncentred_second_moment, "E[x^2] as the variance"),
    Answer("layer_norm", "ln_ddof1", ln_ddof1, "std with ddof=1"),
    Answer("layer_norm", "ln_float64_out", ln_float64_out, "float64 out for float32/16 input"),
    Answer("layer_norm", "ln_std_plus_eps", ln_std_plus_eps, "std + eps"),
    Answer("layer_norm", "ln_bias_before_weight", ln_bias_before_weight, "(xhat + beta) * gamma"),
    Answer("RMSNorm module", "ModuleEps1e5", ModuleEps1e5, "default eps 1e-5"),
    Answer("RMSNorm module", "ModuleCentred", ModuleCentred, "a LayerNorm without bias"),
    Answer("RMSNorm module", "ModuleFloatOut", ModuleFloatOut, "no cast back"),
    Answer("RMSNorm module", "ModuleIgnoresEps", ModuleIgnoresEps, "eps argument never stored"),
    Answer("pre_ln", "pre_ln_norm_after", pre_ln_norm_after, "normalizes again after the add"),
    Answer("pre_ln", "pre_ln_normed_residual", pre_ln_normed_residual, "residual carries Norm(x)"),
    Answer("pre_ln", "pre_ln_scaled_sum", pre_ln_scaled_sum, "divides the sum by sqrt 2"),
    Answer("pre_ln", "pre_ln_in_place", pre_ln_in_place, "x += ..."),
    Answer("post_ln", "post_ln_as_pre", post_ln_as_pre, "the Pre-LN formula"),
    Answer("post_ln", "post_ln_norm_branch_too", post_ln_norm_branch_too, "normalizes F(x) and the sum"),
    Answer("post_ln", "post_ln_sublayer_on_sum", post_ln_sublayer_on_sum, "F applied to x + x"),
    Answer("pre-LN block", "BlockParallel", BlockParallel, "GPT-J's parallel block"),
    Answer("pre-LN block", "BlockSecondNormOnX", BlockSecondNormOnX, "mlp reads post_attention_layernorm(x)"),
    Answer("pre-LN block", "BlockPostLN", BlockPostLN, "Post-LN block"),
    Answer("pre-LN block", "BlockNoSecondResidual", BlockNoSecondResidual, "second residual missing"),
    Answer("pre-LN block", "BlockFinalNorm", BlockFinalNorm, "a final norm in the block"),
    Answer("layer_norm_backward", "bwd_dbias_mean", bwd_dbias_mean, "dbias averaged"),
    Answer("layer_norm_backward", "bwd_sign_flip", bwd_sign_flip, "+ xhat * mean(g xhat)"),
    Answer("layer_norm_backward", "bwd_only_first_term", bwd_only_first_term, "dx = dy * weight / std"),
    Answer("layer_norm_backward", "bwd_ddof1", bwd_ddof1, "n-1 variance in the forward"),
    Answer("layer_norm_backward", "bwd_sum_over_n_not_mean", bwd_sum_over_n_not_mean, "sums where means belong"),
    Answer("layer_norm_backward", "bwd_dweight_times_weight", bwd_dweight_times_weight, "dweight uses g"),
    Answer("peri_ln", "peri_norm_on_sum", peri_norm_on_sum, "norm(x + F(norm(x)))"),
    Answer("peri_ln", "peri_out_norm_on_sum", peri_out_norm_on_sum, "out_norm on the sum"),
    Answer("peri_ln", "peri_residual_normed", peri_residual_normed, "residual from norm(x)"),
    Answer("peri_ln", "peri_out_norm_before_f", peri_out_norm_before_f, "both norms before F"),
    Answer("peri_ln", "peri_only_out_norm", peri_only_out_norm, "Output-LN"),
    Answer("peri_ln", "peri_double_residual", peri_double_residual, "y + out_norm(y)"),
    Answer("peri_ln", "peri_float_out", peri_float_out, "float32 out"),
    Answer("qk_norm_logits", "qk_norm_after_product", qk_norm_after_product, "norm after the dot product"),
    Answer("qk_norm_logits", "qk_same_norm_twice", qk_same_norm_twice, "q_norm on k"),
    Answer("qk_norm_logits", "qk_sqrt_of_t", qk_sqrt_of_t, "sqrt(T) for sqrt(d)"),
    Answer("qk_norm_logits", "qk_dot_T", qk_dot_T, "k.T on a 3-D tensor"),
    Answer("qk_norm_logits", "qk_float32_out", qk_float32_out, "float32 logits"),
    Answer("qk_norm_logits", "qk_scale_before_norm", qk_scale_before_norm, "scale q and k before the norms"),
    Answer("qk_norm_logits", "qk_divide_by_d", qk_divide_by_d, "/ d"),
    Answer("dyt", "dyt_no_affine", dyt_no_affine, "no weight, no bias"),
    Answer("dyt", "dyt_weight_inside", dyt_weight_inside, "weight inside tanh"),
    Answer("dyt", "dyt_divides_by_alpha", dyt_divides_by_alpha, "x / alpha"),
    Answer("dyt", "dyt_promoted", dyt_promoted, "float32 alpha promotes the output"),
    Answer("dyt", "dyt_bias_multiplies", dyt_bias_multiplies, "* bias"),
    Answer("dyt", "dyt_no_bias", dyt_no_bias, "bias left out"),
    Answer("dyt", "dyt_layernormed", dyt_layernormed, "normalizes x first"),
]


# ============================================================================ correct, written unusually


def ok_rms_float64(x, weight, eps=1e-6):
    h = x.double()
    return (h * (h.square().mean(-1, keepdim=True) + eps) ** -0.5 * weight.double()).to(x.dtype)


def ok_ln_einsum(x, weight, bias, eps=1e-5):
    h = x.astype(np.float64)
    d = h.shape[-1]
    m = np.einsum("...d->...", h)[..., None] / d
    c = h - m
    v = np.einsum("...d,...d->...", c, c)[..., None] / d
    return (c / np.sqrt(v + eps) * weight + bias).astype(x.dtype)


def ok_pre_ln_add(x, sublayer, norm):
    return torch.add(x, sublayer(norm(x)))


def ok_post_ln_steps(x, sublayer, norm):
    y = x.clone()
    y = y + sublayer(x)
    return norm(y)


def ok_peri_float32(x, sublayer, norm, out_norm):
    h = norm(x)
    y = x.float() + out_norm(sublayer(h)).float()
    return y.to(x.dtype)


def ok_qk_einsum(q, k, q_norm, k_norm):
    return torch.einsum("...td,...sd->...ts", q_norm(q), k_norm(k)) * q.shape[-1] ** -0.5


def ok_dyt_sigmoid(x, alpha, weight, bias):
    z = alpha * x.float()
    return (weight * (2 * torch.sigmoid(2 * z) - 1) + bias).to(x.dtype)


def ok_bwd_sums(dy, x, weight, eps=1e-5):
    n = x.shape[-1]
    mean = x.sum(-1, keepdims=True) / n
    xc = x - mean
    inv = (np.sum(xc * xc, -1, keepdims=True) / n + eps) ** -0.5
    xhat = xc * inv
    g = dy * weight
    dx = inv / n * (n * g - g.sum(-1, keepdims=True) - xhat * (g * xhat).sum(-1, keepdims=True))
    lead = tuple(range(x.ndim - 1))
    return dx, np.sum(dy * xhat, axis=lead), np.sum(dy, axis=lead)


class OkBlockLoop(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        _norms_and_parts(self, dim, n_heads)

    def forward(self, x):
        for norm, sub in ((self.input_layernorm, self.self_attn), (self.post_attention_layernorm, self.mlp)):
            x = x + sub(norm(x))
        return x


class OkModuleRsqrt(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = x.to(torch.float32)
        out = h.mul(torch.rsqrt(h.mul(h).mean(dim=-1, keepdim=True).add(self.eps)))
        return out.mul(self.weight).type_as(x)


CORRECT = [
    Answer("rms_norm", "ok_rms_float64", ok_rms_float64, "float64 statistics, ** -0.5"),
    Answer("layer_norm", "ok_ln_einsum", ok_ln_einsum, "einsum sums"),
    Answer("pre_ln", "ok_pre_ln_add", ok_pre_ln_add, "torch.add"),
    Answer("post_ln", "ok_post_ln_steps", ok_post_ln_steps, "clone, then add, then norm"),
    Answer("peri_ln", "ok_peri_float32", ok_peri_float32, "sum in float32, cast back"),
    Answer("qk_norm_logits", "ok_qk_einsum", ok_qk_einsum, "einsum, ** -0.5"),
    Answer("dyt", "ok_dyt_sigmoid", ok_dyt_sigmoid, "tanh as 2 sigmoid(2z) - 1"),
    Answer("layer_norm_backward", "ok_bwd_sums", ok_bwd_sums, "sums over n"),
    Answer("pre-LN block", "OkBlockLoop", OkBlockLoop, "a loop over (norm, sublayer)"),
    Answer("RMSNorm module", "OkModuleRsqrt", OkModuleRsqrt, "mul/rsqrt chain, type_as"),
]
