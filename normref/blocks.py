"""Where the norm goes: Pre-LN and Post-LN residual sublayers, and a small MiniMind-shaped block.

Placement is a separate choice from the norm (the seed: "LayerNorm vs RMSNorm asks what
computation? Pre-LN vs Post-LN asks where is it placed?"):

* Pre-LN  (the seed's depicted block, MiniMind, GPT-2): ``Y = X + F(Norm(X))``
* Post-LN (the original Transformer, Vaswani et al. 2017): ``Y = Norm(X + F(X))``

and today's (:mod:`normref.placements`): Peri-LN ``X + Norm(F(Norm(X)))`` (Gemma 2 and 3),
Output-LN ``X + Norm(F(X))`` (OLMo 2) and DeepNorm ``Norm(alpha X + F(X))`` (Wang et al. 2022);
QK-norm is an option of :class:`CausalSelfAttention`, DyT (no norm) an option of the norm.

``TransformerBlock`` writes each placement out in two lines, nanoGPT style, so the difference
is visible at a glance. ``TransformerStack`` stacks blocks and, where the residual stream is
never normalised otherwise (Pre-LN, Peri-LN, Output-LN), adds the final norm.

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

from .modules import DyT, LayerNorm, RMSNorm
from .placements import PLACEMENTS, deepnorm_constants

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
    (eps 1e-5), each with its one default eps, ``"dyt"`` -> :class:`normref.DyT` (alpha 0.5, no
    statistics); each maps ``[B, T, dim]`` to ``[B, T, dim]``, dtype kept.

    Raises:
        ValueError: ``norm`` is not ``"rms"``, ``"layer"`` or ``"dyt"``.

    Source: the seed (MiniMind uses RMSNorm); Ba et al. 2016; Zhang and Sennrich 2019; Zhu et al. 2025.
    """
    if norm == "rms":
        return RMSNorm(dim)
    if norm == "layer":
        return LayerNorm(dim)
    if norm == "dyt":
        return DyT(dim)
    raise ValueError(f"norm must be 'rms', 'layer' or 'dyt', got {norm!r}")


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention, ``[B, T, D] -> [B, T, D]`` (MiniMind's projection names),
    optionally with QK-norm.

    Args:
        dim: D, the model width; must be divisible by ``n_heads``.
        n_heads: number of heads H; each head has width ``D // H``.
        qk_norm: None (plain attention), ``"rms"`` or ``"layer"``: normalise every query and
            every key over its head's width before the dot product, with ``q_norm`` and
            ``k_norm`` (one :class:`normref.RMSNorm` / :class:`normref.LayerNorm` of width
            ``D // H`` each, shared by the heads), as Gemma 3 and Qwen 3 do (OLMo 2 normalises
            over the whole width D before splitting the heads).

    Attributes:
        q_proj, k_proj, v_proj, o_proj: ``nn.Linear(D, D, bias=False)``.
        q_norm, k_norm: the QK-norms, or None.

    ``logits(x)``: the attention logits ``[B, H, T, T]`` before the causal mask and the softmax,
    ``q_norm(q) k_norm(k)^T / sqrt(D // H)`` (:func:`normref.qk_norm_logits` per head).

    Raises:
        ValueError: ``dim`` is not divisible by ``n_heads``, or ``qk_norm`` is unknown.

    Source: Vaswani et al. 2017, eq. (1); nanoGPT's ``CausalSelfAttention``; QK-norm: Henry et
    al. 2020, Dehghani et al. 2023 (LayerNorm on q and k), Hugging Face ``modeling_qwen3.py`` /
    ``modeling_gemma3.py`` (RMSNorm of width ``head_dim``).
    """

    def __init__(self, dim: int, n_heads: int, qk_norm: str | None = None):
        super().__init__()
        if n_heads < 1 or dim % n_heads:
            raise ValueError(f"dim ({dim}) must be divisible by n_heads ({n_heads})")
        if qk_norm not in (None, "rms", "layer"):
            raise ValueError(f"qk_norm must be None, 'rms' or 'layer', got {qk_norm!r}")
        self.n_heads = n_heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.q_norm = make_norm(qk_norm, dim // n_heads) if qk_norm else None
        self.k_norm = make_norm(qk_norm, dim // n_heads) if qk_norm else None

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        B, T, D = t.shape
        return t.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2)  # [B, H, T, D/H]

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        q, k = self._heads(self.q_proj(x)), self._heads(self.k_proj(x))  # [B, H, T, D/H]
        if self.q_norm is not None:  # QK-norm: each query and key normalised over the head width
            q, k = self.q_norm(q), self.k_norm(k)
        return (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # [B, H, T, T]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        att = self.logits(x)  # [B, H, T, T]
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ self._heads(self.v_proj(x))).transpose(1, 2).reshape(B, T, D)  # [B, T, D]
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
    sublayer with its own norm(s), placed where ``placement`` says.

    Args:
        dim: D, the model width.
        n_heads: attention heads; ``dim`` must be divisible by it.
        norm: ``"rms"`` (:class:`normref.RMSNorm`, MiniMind), ``"layer"``
            (:class:`normref.LayerNorm`) or ``"dyt"`` (:class:`normref.DyT`, no norm at all).
        placement: a key of :data:`normref.placements.PLACEMENTS`: ``"pre"`` ``x + F(Norm(x))``,
            ``"post"`` ``Norm(x + F(x))``, ``"peri"`` ``x + Norm(F(Norm(x)))``, ``"output"``
            ``x + Norm(F(x))`` or ``"deep"`` ``Norm(alpha x + F(x))``.
        ffn_hidden: inner width of the feed-forward net (default MiniMind's 8/3 rule).
        qk_norm: passed to :class:`CausalSelfAttention` (None, ``"rms"``, ``"layer"``).
        alpha, beta: DeepNorm's residual scale and init scale (``placement="deep"`` only);
            None = :func:`normref.placements.deepnorm_constants` of one layer
            (:class:`TransformerStack` passes those of its depth).

    Attributes (MiniMind's names):
        input_layernorm: the norm of the attention sublayer (Pre-LN and Peri-LN: on its input;
            Post-LN and DeepNorm: on the sum; Output-LN: on attention's output).
        self_attn: :class:`CausalSelfAttention`.
        post_attention_layernorm: the norm of the feed-forward sublayer, placed the same way.
        mlp: :class:`FeedForward`.
        attn_output_norm, mlp_output_norm: Peri-LN's second norm of each sublayer, on its output
            (Gemma 2's ``post_attention_layernorm`` and ``post_feedforward_layernorm``); None for
            the other placements.
        alpha: the residual scale (1.0 unless ``placement="deep"``).

    Shapes: ``forward(x)``: ``[B, T, D] -> [B, T, D]``, dtype kept.

    Raises:
        ValueError: unknown ``norm``, ``placement`` or ``qk_norm``, ``dim % n_heads != 0``, or
            ``alpha``/``beta`` given for a placement other than ``"deep"``.

    Initialisation: every ``nn.Linear`` weight is Xavier-uniform (Glorot), as in Vaswani et al.
    2017 and the setting Xiong et al. 2020 analyse (MiniMind uses normal(0, 0.02), tuned for
    D = 512+; at D = 32 it makes every sublayer almost silent). DeepNorm then multiplies the
    value, output and feed-forward weights by ``beta`` (Wang et al. 2022, Algorithm 1). The
    norms start at weight 1, bias 0 (DyT: alpha 0.5). Deterministic under ``torch.manual_seed``.

    Source: the seed's "Engineering bridge" (MiniMind's block); Xiong et al. 2020, Fig. 1;
    Kim et al. 2025 (Peri-LN); Team OLMo 2024 (Output-LN); Wang et al. 2022 (DeepNorm).
    """

    def __init__(self, dim: int, n_heads: int, norm: str = "rms", placement: str = "pre",
                 ffn_hidden: int | None = None, *, qk_norm: str | None = None,
                 alpha: float | None = None, beta: float | None = None):
        super().__init__()
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(map(repr, PLACEMENTS))}, got {placement!r}")
        if placement != "deep" and (alpha is not None or beta is not None):
            raise ValueError(f"alpha and beta are DeepNorm's (placement='deep'), not {placement!r}'s")
        self.placement = placement
        self.input_layernorm = make_norm(norm, dim)
        self.self_attn = CausalSelfAttention(dim, n_heads, qk_norm)
        self.post_attention_layernorm = make_norm(norm, dim)
        self.mlp = FeedForward(dim, ffn_hidden)
        peri = placement == "peri"
        self.attn_output_norm = make_norm(norm, dim) if peri else None
        self.mlp_output_norm = make_norm(norm, dim) if peri else None
        a1, b1 = deepnorm_constants(1)
        self.alpha = float(alpha if alpha is not None else a1) if placement == "deep" else 1.0
        for m in self.modules():  # Vaswani et al. 2017 / Xiong et al. 2020: Xavier (Glorot)
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
        if placement == "deep":  # DeepNet: scale v, o and the feed-forward net's init by beta
            with torch.no_grad():
                for lin in (self.self_attn.v_proj, self.self_attn.o_proj, self.mlp.gate_proj,
                            self.mlp.up_proj, self.mlp.down_proj):
                    lin.weight.mul_(beta if beta is not None else b1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        A, M, N1, N2 = self.self_attn, self.mlp, self.input_layernorm, self.post_attention_layernorm
        if self.placement == "pre":  # Y = X + F(Norm(X))
            x = x + A(N1(x))
            x = x + M(N2(x))
        elif self.placement == "post":  # Y = Norm(X + F(X))
            x = N1(x + A(x))
            x = N2(x + M(x))
        elif self.placement == "peri":  # Y = X + Norm'(F(Norm(X)))
            x = x + self.attn_output_norm(A(N1(x)))
            x = x + self.mlp_output_norm(M(N2(x)))
        elif self.placement == "output":  # Y = X + Norm(F(X))
            x = x + N1(A(x))
            x = x + N2(M(x))
        else:  # DeepNorm, Y = Norm(alpha X + F(X))
            x = N1(self.alpha * x + A(x))
            x = N2(self.alpha * x + M(x))
        return x  # [B, T, D]


#: The placements whose residual stream is never normalised inside a block, so the stack ends
#: with a final norm (GPT-2's ``ln_f``, Llama's, Gemma's and OLMo 2's ``norm``).
FINAL_NORM = ("pre", "peri", "output")


class TransformerStack(nn.Module):
    """``depth`` :class:`TransformerBlock`s on the residual stream, plus the final norm where the
    placement leaves the stream un-normalised.

    Pre-LN, Peri-LN and Output-LN never normalise the residual stream inside the blocks, so the
    stack ends with ``self.norm`` (GPT-2's ``ln_f``, MiniMind's, Gemma's and OLMo 2's final
    ``norm``); Post-LN's and DeepNorm's last block already ends with a norm, and ``self.norm``
    is None.

    Args:
        depth: number of blocks L (>= 1).
        dim, n_heads, norm, placement, ffn_hidden, qk_norm: passed to every :class:`TransformerBlock`.
        alpha, beta: DeepNorm's; None = :func:`normref.placements.deepnorm_constants` ``(depth)``.

    Attributes:
        layers: ``nn.ModuleList`` of the blocks, input side first.
        norm: the final norm, or None.

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
                 placement: str = "pre", ffn_hidden: int | None = None, *, qk_norm: str | None = None,
                 alpha: float | None = None, beta: float | None = None):
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        deep = {}
        if placement == "deep":
            a, b = deepnorm_constants(depth)
            deep = {"alpha": a if alpha is None else alpha, "beta": b if beta is None else beta}
        elif alpha is not None or beta is not None:
            raise ValueError(f"alpha and beta are DeepNorm's (placement='deep'), not {placement!r}'s")
        self.layers = nn.ModuleList(
            TransformerBlock(dim, n_heads, norm, placement, ffn_hidden, qk_norm=qk_norm, **deep)
            for _ in range(depth)
        )
        self.norm = make_norm(norm, dim) if placement in FINAL_NORM else None

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
