"""Where the norm goes: Pre-LN and Post-LN residual sublayers, and a small MiniMind-shaped block.

Placement is a separate choice from the norm (the seed: "LayerNorm vs RMSNorm asks what
computation? Pre-LN vs Post-LN asks where is it placed?"):

* Pre-LN  (the seed's depicted block, MiniMind, GPT-2): ``Y = X + F(Norm(X))``
* Post-LN (the original Transformer, Vaswani et al. 2017): ``Y = Norm(X + F(X))``

``TransformerBlock`` writes each placement out in two lines, nanoGPT style, so the difference
is visible at a glance. ``TransformerStack`` stacks blocks and, for Pre-LN, adds the final norm
(the residual stream is never normalised otherwise).

What placement does at initialisation (Xiong et al. 2020, "On Layer Normalization in the
Transformer Architecture", Theorem 1 and Fig. 3), as measured in ``tests/test_blocks.py``
(depth 6, D = 32, seeds 0-9; :func:`layer_grad_norms` after one cross-entropy backward):

* Post-LN keeps the residual stream at norm sqrt(D) after every block; Pre-LN's grows block by
  block (5.7 -> 11 over 6 blocks).
* The last block's parameter gradient is 1.7-2.0x larger in Post-LN than in Pre-LN, and it does
  not shrink with depth, while Pre-LN's falls roughly like 1/sqrt(L).
* Per layer, the Post-LN profile leans toward the output relative to Pre-LN's: last/first
  gradient-norm ratio 0.5-1.1 for Post-LN against 0.4-0.6 for Pre-LN (1.2-2.0x larger, every
  seed). In this decoder-only block the Post-LN profile is roughly flat rather than rising as in
  Xiong's encoder-decoder Fig. 3, and Pre-LN's decreases gently.

The block follows MiniMind's names (``input_layernorm``, ``self_attn``,
``post_attention_layernorm``, ``mlp`` with ``gate_proj``/``up_proj``/``down_proj``), without
rotary position embeddings, KV cache or dropout: position does not matter for normalisation.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .modules import LayerNorm, RMSNorm

__all__ = [
    "pre_ln",
    "post_ln",
    "make_norm",
    "CausalSelfAttention",
    "FeedForward",
    "TransformerBlock",
    "TransformerStack",
    "layer_grad_norms",
]

PLACEMENTS = ("pre", "post")


def pre_ln(x, sublayer: Callable, norm: Callable):
    """Pre-LN residual sublayer: ``x + sublayer(norm(x))``.

    The residual path carries ``x`` itself, never the normalised ``x``; only the branch that
    enters the sublayer is normalised.

    Args:
        x: the residual stream, ``[B, T, D]`` (any shape ``sublayer`` and ``norm`` accept),
            torch tensor or numpy array.
        sublayer: F, e.g. attention or the feed-forward net, ``[B, T, D] -> [B, T, D]``.
        norm: e.g. :class:`normref.RMSNorm` or :func:`normref.layer_norm`,
            ``[B, T, D] -> [B, T, D]``.

    Returns:
        ``[B, T, D]``, same kind as ``x``; the dtype is what ``x + sublayer(...)`` gives
        (normref's norms keep ``x.dtype``).

    Raises:
        Whatever ``sublayer`` or ``norm`` raise; ``x`` is not modified.

    Source: the seed, "Pre-LN, as depicted: Y = X + F(Norm(X))"; Xiong et al. 2020, Fig. 1(b).
    """
    return x + sublayer(norm(x))


def post_ln(x, sublayer: Callable, norm: Callable):
    """Post-LN residual sublayer: ``norm(x + sublayer(x))``.

    Args:
        x: the residual stream, ``[B, T, D]``, torch tensor or numpy array.
        sublayer: F, ``[B, T, D] -> [B, T, D]``.
        norm: ``[B, T, D] -> [B, T, D]``.

    Returns:
        ``[B, T, D]``, same kind as ``x`` (dtype: what ``norm`` returns): the normalised sum,
        so every token leaves with
        mean 0 / variance 1 (LayerNorm) or RMS 1 (RMSNorm) before gamma and beta.

    Raises:
        Whatever ``sublayer`` or ``norm`` raise; ``x`` is not modified.

    Source: the seed, "Original Post-LN: Y = Norm(X + F(X))"; Vaswani et al. 2017;
    Xiong et al. 2020, Fig. 1(a).
    """
    return norm(x + sublayer(x))


def make_norm(norm: str, dim: int) -> nn.Module:
    """``"rms"`` -> :class:`normref.RMSNorm` (eps 1e-6), ``"layer"`` -> :class:`normref.LayerNorm`
    (eps 1e-5), each with its one default eps; both map ``[B, T, dim]`` to ``[B, T, dim]``,
    dtype kept.

    Raises:
        ValueError: ``norm`` is not ``"rms"`` or ``"layer"``.

    Source: the seed (MiniMind uses RMSNorm); Ba et al. 2016; Zhang and Sennrich 2019.
    """
    if norm == "rms":
        return RMSNorm(dim)
    if norm == "layer":
        return LayerNorm(dim)
    raise ValueError(f"norm must be 'rms' or 'layer', got {norm!r}")


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention, ``[B, T, D] -> [B, T, D]`` (MiniMind's projection names).

    Args:
        dim: D, the model width; must be divisible by ``n_heads``.
        n_heads: number of heads H; each head has width ``D // H``.

    Raises:
        ValueError: ``dim`` is not divisible by ``n_heads``.

    Source: Vaswani et al. 2017, eq. (1); nanoGPT's ``CausalSelfAttention``.
    """

    def __init__(self, dim: int, n_heads: int):
        super().__init__()
        if n_heads < 1 or dim % n_heads:
            raise ValueError(f"dim ({dim}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        H = self.n_heads

        def heads(t):
            return t.view(B, T, H, D // H).transpose(1, 2)  # [B, H, T, D/H]

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // H)  # [B, H, T, T]
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, D)  # [B, T, D]
        return self.o_proj(y)


class FeedForward(nn.Module):
    """MiniMind's gated feed-forward net (SwiGLU): ``down_proj(silu(gate_proj(x)) * up_proj(x))``.

    Args:
        dim: D, the model width.
        hidden: the inner width; default MiniMind's rule, ``8/3 * D`` rounded up to a
            multiple of 64.

    Shapes: ``[B, T, D] -> [B, T, hidden] -> [B, T, D]``; float32 parameters, so feed it the
    parameters' dtype (or ``.to()`` the module).

    Raises:
        RuntimeError: (from ``nn.Linear``) the input's last axis is not ``D``.

    Source: Shazeer 2020, "GLU Variants Improve Transformer"; MiniMind's ``FeedForward``.
    """

    def __init__(self, dim: int, hidden: int | None = None):
        super().__init__()
        hidden = hidden or 64 * math.ceil(dim * 8 / 3 / 64)
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))  # [B, T, D]


class TransformerBlock(nn.Module):
    """One transformer block: causal self-attention and a feed-forward net, each a residual
    sublayer with its own norm, placed before (Pre-LN) or after (Post-LN) the residual add.

    Args:
        dim: D, the model width.
        n_heads: attention heads; ``dim`` must be divisible by it.
        norm: ``"rms"`` (:class:`normref.RMSNorm`, MiniMind) or ``"layer"``
            (:class:`normref.LayerNorm`).
        placement: ``"pre"`` or ``"post"``.
        ffn_hidden: inner width of the feed-forward net (default MiniMind's 8/3 rule).

    Attributes (MiniMind's names):
        input_layernorm: the norm of the attention sublayer (Pre-LN: on its input;
            Post-LN: on ``x + attn(x)``).
        self_attn: :class:`CausalSelfAttention`.
        post_attention_layernorm: the norm of the feed-forward sublayer.
        mlp: :class:`FeedForward`.

    Shapes: ``forward(x)``: ``[B, T, D] -> [B, T, D]``, dtype kept.

    Raises:
        ValueError: unknown ``norm`` or ``placement``, or ``dim % n_heads != 0``.

    Initialisation: every ``nn.Linear`` weight is Xavier-uniform (Glorot), as in Vaswani et al.
    2017 and the setting Xiong et al. 2020 analyse (MiniMind uses normal(0, 0.02), tuned for
    D = 512+; at D = 32 it makes every sublayer almost silent). The norms start at weight 1,
    bias 0. Deterministic under ``torch.manual_seed``.

    Source: the seed's "Engineering bridge" (MiniMind's block); Xiong et al. 2020, Fig. 1.
    """

    def __init__(self, dim: int, n_heads: int, norm: str = "rms", placement: str = "pre",
                 ffn_hidden: int | None = None):
        super().__init__()
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be 'pre' or 'post', got {placement!r}")
        self.placement = placement
        self.input_layernorm = make_norm(norm, dim)
        self.self_attn = CausalSelfAttention(dim, n_heads)
        self.post_attention_layernorm = make_norm(norm, dim)
        self.mlp = FeedForward(dim, ffn_hidden)
        for m in self.modules():  # Vaswani et al. 2017 / Xiong et al. 2020: Xavier (Glorot)
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.placement == "pre":  # Y = X + F(Norm(X))
            x = x + self.self_attn(self.input_layernorm(x))
            x = x + self.mlp(self.post_attention_layernorm(x))
        else:  # Y = Norm(X + F(X))
            x = self.input_layernorm(x + self.self_attn(x))
            x = self.post_attention_layernorm(x + self.mlp(x))
        return x  # [B, T, D]


class TransformerStack(nn.Module):
    """``depth`` :class:`TransformerBlock`s on the residual stream, plus the final norm for Pre-LN.

    A Pre-LN stack never normalises its residual stream inside the blocks, so it ends with
    ``self.norm`` (as GPT-2's ``ln_f`` and MiniMind's final ``norm``); a Post-LN stack's last
    block already ends with a norm, and ``self.norm`` is None.

    Args:
        depth: number of blocks L (>= 1).
        dim, n_heads, norm, placement, ffn_hidden: passed to every :class:`TransformerBlock`.

    Attributes:
        layers: ``nn.ModuleList`` of the blocks, input side first.
        norm: the final norm (Pre-LN) or None (Post-LN).

    ``forward(x, return_hidden=False)``:
        x: ``[B, T, D]`` hidden states (no embedding layer: feed it vectors).
        Returns ``y`` ``[B, T, D]``; with ``return_hidden=True`` returns ``(y, hidden)`` where
        ``hidden`` is a list of ``depth + 1`` tensors ``[B, T, D]``: the residual stream entering
        block 1 (``x``), then the output of each block (before the final norm). Use it to plot
        the residual norm per layer.

    Raises:
        ValueError: ``depth < 1``, or what :class:`TransformerBlock` raises.

    Deterministic under ``torch.manual_seed`` (Xavier init as in :class:`TransformerBlock`, no dropout).

    Source: Xiong et al. 2020, Fig. 1 and Fig. 3; the seed's "two norms, one block width".
    """

    def __init__(self, depth: int, dim: int, n_heads: int, norm: str = "rms",
                 placement: str = "pre", ffn_hidden: int | None = None):
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.layers = nn.ModuleList(
            TransformerBlock(dim, n_heads, norm, placement, ffn_hidden) for _ in range(depth)
        )
        self.norm = make_norm(norm, dim) if placement == "pre" else None

    def forward(self, x: torch.Tensor, return_hidden: bool = False):
        hidden = [x]
        for block in self.layers:
            x = block(x)  # [B, T, D]
            hidden.append(x)
        y = self.norm(x) if self.norm is not None else x
        return (y, hidden) if return_hidden else y


def layer_grad_norms(stack: TransformerStack, param: str | None = None) -> list[float]:
    """Per-block L2 norm of the parameter gradients, input side first (call after ``backward``).

    Args:
        stack: a :class:`TransformerStack` whose ``.grad`` fields are filled.
        param: one parameter name inside a block, e.g. ``"mlp.down_proj.weight"`` (Xiong et
            al. plot the feed-forward output matrix W2); None = all the block's parameters.

    Returns:
        ``depth`` floats, ``[||grad of block 1||, ..., ||grad of block L||]``.

    Raises:
        ValueError: no gradient yet (run ``loss.backward()`` first) or unknown ``param``.

    Source: Xiong et al. 2020, Fig. 3 (gradient norm per layer at initialisation).
    """
    out = []
    for i, block in enumerate(stack.layers):
        named = dict(block.named_parameters())
        if param is not None and param not in named:
            raise ValueError(f"block has no parameter {param!r}; it has {sorted(named)}")
        params = [named[param]] if param is not None else list(named.values())
        if any(p.grad is None for p in params):
            raise ValueError(f"block {i} has no gradient: call loss.backward() first")
        out.append(math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in params)))
    return out
