"""Held-out answers to the torch norm questions: `rms_norm` (release/rmsnorm), the `RMSNorm`
module and the `PreNormBlock` class (release/block).

Written from the lesson text and the assignments' instructions only (issue 31 item 5), without
reading the checkers. `wrong_*` / `Wrong*` contain one mistake each; `ok_*` / `Ok*` are correct
but written unusually. `tests/corpus/heldout.py` lists them with one sentence each.
"""
import torch
from torch import nn

from normref import CausalSelfAttention, FeedForward

# ---------------------------------------------------------------- rms_norm, wrong answers


def wrong_rms_subtracts_mean(x, weight, eps=1e-6):
    xf = x.float()
    xf = xf - xf.mean(dim=-1, keepdim=True)
    rms = xf.pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()
    return (xf * rms * weight).to(x.dtype)


def wrong_rms_eps_outside(x, weight, eps=1e-6):
    xf = x.float()
    rms = xf.pow(2).mean(dim=-1, keepdim=True).sqrt()
    return (xf / (rms + eps) * weight).to(x.dtype)


def wrong_rms_fp16_stats(x, weight, eps=1e-6):
    rms = x.pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()
    return (x * rms * weight).to(x.dtype)


def wrong_rms_stays_float32(x, weight, eps=1e-6):
    xf = x.float()
    rms = xf.pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()
    return xf * rms * weight


def wrong_rms_weight_after_cast(x, weight, eps=1e-6):
    xf = x.float()
    rms = xf.pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()
    return weight * (xf * rms).to(x.dtype)


def wrong_rms_sum_squares(x, weight, eps=1e-6):
    xf = x.float()
    rms = xf.pow(2).sum(dim=-1, keepdim=True).add(eps).rsqrt()
    return (xf * rms * weight).to(x.dtype)


def wrong_rms_l2_normalize(x, weight, eps=1e-6):
    xf = x.float()
    return (xf / xf.norm(dim=-1, keepdim=True) * weight).to(x.dtype)


def wrong_rms_dim1(x, weight, eps=1e-6):
    xf = x.float()
    rms = xf.pow(2).mean(dim=1, keepdim=True).add(eps).rsqrt()
    return (xf * rms * weight).to(x.dtype)


def wrong_rms_no_weight(x, weight, eps=1e-6):
    xf = x.float()
    rms = xf.pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()
    return (xf * rms).to(x.dtype)


def wrong_rms_std(x, weight, eps=1e-6):
    xf = x.float()
    return (xf / (xf.std(dim=-1, keepdim=True) + eps) * weight).to(x.dtype)


# ---------------------------------------------------------------- rms_norm, correct answers


def ok_rms_vector_norm(x, weight, eps=1e-6):
    xf = x.float()
    length = torch.linalg.vector_norm(xf, dim=-1, keepdim=True)
    mean_square = length.square() / xf.shape[-1]
    return (weight * xf * torch.rsqrt(mean_square + eps)).to(x.dtype)


def ok_rms_float64(x, weight, eps=1e-6):
    xd = x.double()
    rms = torch.sqrt(torch.mean(xd * xd, dim=-1, keepdim=True) + eps)
    return (xd / rms * weight.double()).to(x.dtype)


def ok_rms_einsum(x, weight, eps=1e-6):
    xf = x.float()
    mean_square = torch.einsum("...d,...d->...", xf, xf).unsqueeze(-1) / xf.shape[-1]
    return (xf / torch.sqrt(mean_square + eps) * weight).type_as(x)


# ---------------------------------------------------------------- RMSNorm module, wrong answers


class WrongModPlainTensor(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.ones(dim)

    def forward(self, x):
        rms = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x.float() * rms * self.weight).to(dtype=x.dtype)


class WrongModEpsHardcoded(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        rms = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + 1e-6)
        return (x.float() * rms * self.weight).to(dtype=x.dtype)


class WrongModGemmaZeros(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        rms = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x.float() * rms * (1 + self.weight)).to(dtype=x.dtype)


class WrongModFloat32Out(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        rms = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x.float() * rms * self.weight


class WrongModLowPrecisionStats(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x * rms * self.weight).to(dtype=x.dtype)


class WrongModNoKeepdim(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        rms = torch.rsqrt(x.float().pow(2).mean(dim=-1) + self.eps)
        return (x.float() * rms * self.weight).to(dtype=x.dtype)


class WrongModWeightFirst(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = x.float() * self.weight
        rms = torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (h * rms).to(dtype=x.dtype)


class WrongModCentres(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = x.float() - x.float().mean(dim=-1, keepdim=True)
        rms = torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (h * rms * self.weight).to(dtype=x.dtype)


# ---------------------------------------------------------------- RMSNorm module, correct answers


class OkModTypeAs(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.full((dim,), 1.0))
        self.eps = float(eps)

    def forward(self, x):
        xf = x.to(torch.float32)
        mean_square = torch.mean(xf * xf, -1, True)
        return (self.weight * (xf / torch.sqrt(mean_square + self.eps))).type_as(x)


class OkModEpsBuffer(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.register_buffer("eps", torch.tensor(eps, dtype=torch.float32), persistent=False)
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        scale = (xf.square().sum(-1, keepdim=True) / x.shape[-1] + self.eps).rsqrt()
        return torch.mul(xf * scale, self.weight).to(x.dtype)


class StudentRMSNorm(nn.Module):
    """A correct RMSNorm as the block questions' students would have it from part 1."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        rms = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x.float() * rms * self.weight).to(dtype=x.dtype)


# ---------------------------------------------------------------- pre-LN block, wrong answers


class _Block(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.input_layernorm = StudentRMSNorm(dim)
        self.self_attn = CausalSelfAttention(dim, n_heads)
        self.post_attention_layernorm = StudentRMSNorm(dim)
        self.mlp = FeedForward(dim)


class WrongBlkSharedNorm(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        norm = StudentRMSNorm(dim)
        self.input_layernorm = norm
        self.self_attn = CausalSelfAttention(dim, n_heads)
        self.post_attention_layernorm = norm
        self.mlp = FeedForward(dim)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class WrongBlkPostLN(_Block):
    def forward(self, x):
        x = self.input_layernorm(x + self.self_attn(x))
        return self.post_attention_layernorm(x + self.mlp(x))


class WrongBlkNormsSwapped(_Block):
    def forward(self, x):
        x = x + self.self_attn(self.post_attention_layernorm(x))
        return x + self.mlp(self.input_layernorm(x))


class WrongBlkResidualNormed(_Block):
    def forward(self, x):
        h = self.input_layernorm(x)
        x = h + self.self_attn(h)
        h = self.post_attention_layernorm(x)
        return h + self.mlp(h)


class WrongBlkParallel(_Block):
    def forward(self, x):
        return x + self.self_attn(self.input_layernorm(x)) + self.mlp(self.post_attention_layernorm(x))


class WrongBlkMlpReadsInput(_Block):
    def forward(self, x):
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(x))


class WrongBlkNoSecondResidual(_Block):
    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return self.mlp(self.post_attention_layernorm(x))


class WrongBlkMlpFirst(_Block):
    def forward(self, x):
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x + self.self_attn(self.input_layernorm(x))


# ---------------------------------------------------------------- pre-LN block, correct answers


class OkBlkLoop(_Block):
    def forward(self, x):
        for norm, sublayer in ((self.input_layernorm, self.self_attn), (self.post_attention_layernorm, self.mlp)):
            x = x + sublayer(norm(x))
        return x


def _my_pre_ln(x, sublayer, norm):
    return torch.add(x, sublayer(norm(x)))


class OkBlkHelper(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.mlp = FeedForward(dim)
        self.self_attn = CausalSelfAttention(dim, n_heads)
        self.post_attention_layernorm = StudentRMSNorm(dim, eps=1e-6)
        self.input_layernorm = StudentRMSNorm(dim, eps=1e-6)

    def forward(self, x):
        hidden = _my_pre_ln(x, self.self_attn, self.input_layernorm)
        return _my_pre_ln(hidden, self.mlp, self.post_attention_layernorm)
