"""Where the norm sits in today's LLMs: Peri-LN, Output-LN and DeepNorm beside Pre-LN and Post-LN,
and QK-norm, a norm inside attention.

Each placement wraps one residual sublayer ``F`` (attention or the feed-forward net) of the
residual stream ``x``:

========== ================================ ===========================================
placement  formula                          where (source)
========== ================================ ===========================================
Pre-LN     ``x + F(Norm(x))``               GPT-2, Llama, Qwen (:func:`normref.pre_ln`)
Post-LN    ``Norm(x + F(x))``               Vaswani et al. 2017 (:func:`normref.post_ln`)
Peri-LN    ``x + Norm'(F(Norm(x)))``        Gemma 2 and 3; Kim et al. 2025 (:func:`peri_ln`)
Output-LN  ``x + Norm(F(x))``               OLMo 2 (:func:`output_ln`)
DeepNorm   ``Norm(alpha * x + F(x))``       Wang et al. 2022 (:func:`deep_norm`)
========== ================================ ===========================================

Like :func:`normref.pre_ln` and :func:`normref.post_ln`, the functions take numpy arrays or torch
tensors and whatever callables ``sublayer`` and ``norm`` are; this module imports neither torch
nor numpy, so ``import normref.placements`` stays cheap.

:data:`PLACEMENTS` names every placement once: the key a :class:`normref.TransformerBlock` takes
(``placement="peri"``), the name a diagnosis prints ("Peri-LN") and the formula it quotes.
"""
from __future__ import annotations

import math
from typing import Callable

__all__ = ["PLACEMENTS", "peri_ln", "output_ln", "deep_norm", "deepnorm_constants", "qk_norm_logits"]

#: Every placement the course knows: key -> (name, formula). The keys are
#: :class:`normref.TransformerBlock`'s ``placement`` values.
PLACEMENTS = {
    "pre": ("Pre-LN", "x + F(Norm(x))"),
    "post": ("Post-LN", "Norm(x + F(x))"),
    "peri": ("Peri-LN", "x + Norm(F(Norm(x)))"),
    "output": ("Output-LN", "x + Norm(F(x))"),
    "deep": ("DeepNorm", "Norm(alpha x + F(x))"),
}


def peri_ln(x, sublayer: Callable, norm: Callable, out_norm: Callable | None = None):
    """Peri-LN residual sublayer: ``x + out_norm(sublayer(norm(x)))``, the norm on both sides of F.

    The sublayer reads a normalised input (as in Pre-LN) and its output is normalised again
    before it joins the residual stream, which itself is never normalised. Gemma 2 and 3 call
    the two norms of the attention sublayer ``input_layernorm`` and ``post_attention_layernorm``,
    those of the feed-forward sublayer ``pre_feedforward_layernorm`` and
    ``post_feedforward_layernorm``.

    Args:
        x: the residual stream, ``[B, T, D]`` (any shape ``sublayer`` and the norms accept),
            torch tensor or numpy array, any float dtype.
        sublayer: F, ``[B, T, D] -> [B, T, D]``.
        norm: the input norm, ``[B, T, D] -> [B, T, D]`` (e.g. :class:`normref.RMSNorm`).
        out_norm: the output norm (its own weight in Gemma); None = ``norm`` again.

    Returns:
        ``[B, T, D]``, same kind as ``x``; the dtype is what ``x + out_norm(...)`` gives (normref's
        norms keep ``x.dtype``). ``x`` is not modified.

    Raises:
        Whatever ``sublayer`` or the norms raise.

    Source: Kim et al. 2025, "Peri-LN: Revisiting Normalization Layer in the Transformer
    Architecture" (ICML 2025), the Peri-LN layer ``y = x + Norm(F(Norm(x)))``; Gemma Team 2024,
    "Gemma 2" (the ``post_*`` norms); Hugging Face ``modeling_gemma2.py``' ``Gemma2DecoderLayer``.
    """
    out_norm = norm if out_norm is None else out_norm
    return x + out_norm(sublayer(norm(x)))


def output_ln(x, sublayer: Callable, norm: Callable):
    """Output-LN residual sublayer: ``x + norm(sublayer(x))``, only F's output normalised.

    OLMo 2's reordering: the sublayer reads the raw residual stream and its output is normalised
    before the add (OLMo 2 names the norms ``post_attention_layernorm`` and
    ``post_feedforward_layernorm``, and adds QK-norm so the attention logits stay bounded).

    Args:
        x: the residual stream, ``[B, T, D]``, torch tensor or numpy array, any float dtype.
        sublayer: F, ``[B, T, D] -> [B, T, D]``.
        norm: ``[B, T, D] -> [B, T, D]``.

    Returns:
        ``[B, T, D]``, same kind as ``x``; dtype as ``x + norm(...)``. ``x`` is not modified.

    Raises:
        Whatever ``sublayer`` or ``norm`` raise.

    Source: Team OLMo 2024, "2 OLMo 2 Furious" (the reordered block:
    ``h = x + RMSNorm(Attention(x))``, ``out = h + RMSNorm(MLP(h))``); Hugging Face
    ``modeling_olmo2.py``' ``Olmo2DecoderLayer``.
    """
    return x + norm(sublayer(x))


def deep_norm(x, sublayer: Callable, norm: Callable, alpha: float):
    """DeepNorm residual sublayer: ``norm(alpha * x + sublayer(x))``, Post-LN with the residual
    scaled up by ``alpha`` (> 1).

    With DeepNet's initialisation (:func:`deepnorm_constants`: ``alpha = (2N)^(1/4)`` and the
    value, output and feed-forward weights scaled by ``beta = (8N)^(-1/4)`` for a decoder of
    ``N`` layers) each update moves the model by a bounded amount, which let Wang et al. train
    Post-LN transformers of 1,000 layers. ``alpha = 1`` is :func:`normref.post_ln`.

    Args:
        x: the residual stream, ``[B, T, D]``, torch tensor or numpy array, any float dtype.
        sublayer: F, ``[B, T, D] -> [B, T, D]``.
        norm: ``[B, T, D] -> [B, T, D]``.
        alpha: the residual's scale, a positive number.

    Returns:
        ``[B, T, D]``, same kind as ``x``; dtype what ``norm`` returns. ``x`` is not modified.

    Raises:
        ValueError: ``alpha`` is not a positive finite number.
        Whatever ``sublayer`` or ``norm`` raise.

    Source: Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers", the DeepNorm
    update ``x_{l+1} = LN(alpha x_l + G_l(x_l, theta_l))``.
    """
    if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"deep_norm: alpha must be a positive number, got {alpha!r}")
    return norm(alpha * x + sublayer(x))


def deepnorm_constants(n_layers: int) -> tuple[float, float]:
    """DeepNet's ``(alpha, beta)`` for a decoder-only stack of ``n_layers`` blocks.

    ``alpha = (2N)^(1/4)`` scales the residual (:func:`deep_norm`); ``beta = (8N)^(-1/4)`` scales
    the initial weights of the value and output projections and of the feed-forward net
    (the query and key projections keep theirs). For N = 6: alpha = 12^(1/4) = 1.861, beta = 48^(-1/4) = 0.380.

    Args:
        n_layers: N >= 1.

    Returns:
        ``(alpha, beta)``, two floats.

    Raises:
        ValueError: ``n_layers < 1``.

    Source: Wang et al. 2022, the table of DeepNorm's alpha and beta (decoder-only row).
    """
    if not isinstance(n_layers, int) or n_layers < 1:
        raise ValueError(f"deepnorm_constants: n_layers must be an int >= 1, got {n_layers!r}")
    return (2 * n_layers) ** 0.25, (8 * n_layers) ** -0.25


def qk_norm_logits(q, k, q_norm: Callable | None = None, k_norm: Callable | None = None,
                   scale: float | None = None):
    """Attention logits with QK-norm: ``q_norm(q) @ k_norm(k)^T * scale``, before any mask or softmax.

    Each query and each key is normalised over its feature axis (the head's width) before the
    dot product, so a logit is bounded by ``|g_q| |g_k| * d * scale`` whatever the size of the
    projections: QK-norm removes the logit growth that makes attention collapse onto one token
    at high learning rates.

    Args:
        q: queries, ``[..., T, d]`` (e.g. ``[B, T, D]`` for one head, ``[B, H, T, d]``),
            torch tensor or numpy array, any float dtype.
        k: keys, the same shape as ``q``.
        q_norm, k_norm: ``[..., T, d] -> [..., T, d]`` (e.g. :class:`normref.RMSNorm` of width
            d); None = no norm on that side (both None: plain scaled dot-product logits).
        scale: the factor on the logits; None = ``1 / sqrt(d)``.

    Returns:
        ``[..., T, T]``: entry ``[..., i, j]`` is query i's logit for key j; same kind as ``q``,
        dtype what the matrix product of the normalised ``q`` and ``k`` gives.

    Raises:
        ValueError: ``q`` and ``k`` differ in shape, or have fewer than two axes.
        Whatever the norms raise.

    Source: Henry et al. 2020, "Query-Key Normalization for Transformers" (L2-normalised
    q and k, logits ``g * q_hat . k_hat`` with a learned scale g); Dehghani et al. 2023,
    "Scaling Vision Transformers to 22 Billion Parameters" (LayerNorm on q and k); RMSNorm on q and k per head in
    Gemma 3 and Qwen 3 (``q_norm``/``k_norm`` of width ``head_dim``), over the whole width in
    OLMo 2.
    """
    if tuple(q.shape) != tuple(k.shape) or len(q.shape) < 2:
        raise ValueError(f"qk_norm_logits: q and k must have the same shape [..., T, d], got "
                         f"{list(q.shape)} and {list(k.shape)}")
    d = q.shape[-1]
    scale = 1 / math.sqrt(d) if scale is None else scale
    qn = q if q_norm is None else q_norm(q)
    kn = k if k_norm is None else k_norm(k)
    kt = kn.swapaxes(-1, -2)  # [..., d, T]
    return (qn @ kt) * scale  # [..., T, T]
