"""Reference LayerNorm and RMSNorm, functional form (numpy or torch in, the same kind out).

The dtype rule (the seed's MiniMind ``rms_norm``): statistics are computed in float32
(float64 input stays float64), the weight is multiplied in that precision, and the result is
cast back to the input dtype last. Hugging Face's Llama casts *before* the weight multiply,
which can differ by one bf16 ulp; we follow the seed.

Sources: Ba, Kiros and Hinton 2016, "Layer Normalization", eq. (3)-(4);
Zhang and Sennrich 2019, "Root Mean Square Layer Normalization", eq. (4);
Lesson 16 seed text (``shared/seed``).
"""
from __future__ import annotations

import numpy as np

LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default
RMS_NORM_EPS = 1e-6  # the seed's MiniMind RMSNorm default

#: Zhu et al. 2025's default initial alpha of DyT (their non-LLM models; LLaMA needs smaller ones).
DYT_ALPHA_INIT = 0.5

__all__ = ["layer_norm", "rms_norm", "dyt", "LAYER_NORM_EPS", "RMS_NORM_EPS", "DYT_ALPHA_INIT"]


def _is_torch(x) -> bool:
    from ._torch import is_tensor

    return is_tensor(x)


def _check_input(x, weight, bias, eps, name):
    if not (_is_torch(x) or isinstance(x, np.ndarray)):
        raise TypeError(f"{name}: x must be a numpy array or a torch tensor, got {type(x).__name__}")
    floating = x.dtype.is_floating_point if _is_torch(x) else np.issubdtype(x.dtype, np.floating)
    if not floating:
        raise TypeError(f"{name}: x must have a floating dtype (float16, bfloat16, float32, "
                        f"float64), got {str(x.dtype).replace('torch.', '')}: convert it first, "
                        "e.g. x.astype(np.float32) or x.float()")
    if x.ndim == 0:
        raise ValueError(f"{name}: x must have at least one axis (the feature axis), got a scalar")
    d = x.shape[-1]
    if d == 0:
        raise ValueError(f"{name}: the feature axis (last axis) is empty")
    for label, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != (d,):
            raise ValueError(
                f"{name}: {label} must have shape [{d}] (the last axis of x), got {list(p.shape)}"
            )
    if not eps >= 0:
        raise ValueError(f"{name}: eps must be >= 0, got {eps}")


def _as_torch(p, dtype):
    import torch

    return p.to(dtype) if isinstance(p, torch.Tensor) else torch.as_tensor(np.asarray(p), dtype=dtype)


def _compute_dtype_np(dtype):
    return np.float64 if dtype == np.float64 else np.float32


def layer_norm(x, weight=None, bias=None, eps: float = LAYER_NORM_EPS):
    """LayerNorm over the last axis: ``weight * (x - mean) / sqrt(var + eps) + bias``.

    Args:
        x: ``[..., D]`` numpy array or torch tensor (e.g. ``[B, T, D]``), any float dtype.
            Statistics are taken over the last axis only, one token at a time.
        weight: gamma, ``[D]`` or None (ones).
        bias: beta, ``[D]`` or None (zeros).
        eps: added to the variance *inside* the square root.

    Returns:
        Same kind, shape ``[..., D]`` and dtype as ``x``. Mean and biased variance
        (divide by D) are computed in float32 (float64 stays float64), gamma and beta are
        applied in that precision, and the result is cast back to ``x.dtype``. ``x`` is
        never modified.

    Raises:
        TypeError: ``x`` is neither a numpy array nor a torch tensor, or its dtype is not
            floating (an integer array would be silently truncated on the cast back).
        ValueError: ``x`` is a scalar, the last axis is empty, weight/bias are not ``[D]``,
            or ``eps < 0``.

    Source: Ba et al. 2016, eq. (3)-(4); the seed: LN(1,2,3) = (-1.225, 0, 1.225).
    """
    _check_input(x, weight, bias, eps, "layer_norm")
    if _is_torch(x):
        import torch

        cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        h = x.to(cdt)
        mean = h.mean(dim=-1, keepdim=True)  # [..., 1]
        var = (h - mean).pow(2).mean(dim=-1, keepdim=True)  # [..., 1], biased
        y = (h - mean) * torch.rsqrt(var + eps)
        if weight is not None:
            y = y * _as_torch(weight, cdt)
        if bias is not None:
            y = y + _as_torch(bias, cdt)
        return y.to(x.dtype)
    cdt = _compute_dtype_np(x.dtype)
    h = np.asarray(x, dtype=cdt)
    mean = h.mean(axis=-1, keepdims=True)  # [..., 1]
    var = ((h - mean) ** 2).mean(axis=-1, keepdims=True)  # [..., 1], biased
    y = (h - mean) * (1 / np.sqrt(var + cdt(eps)))
    if weight is not None:
        y = y * np.asarray(weight, dtype=cdt)
    if bias is not None:
        y = y + np.asarray(bias, dtype=cdt)
    return y.astype(x.dtype, copy=False)


def rms_norm(x, weight=None, eps: float = RMS_NORM_EPS):
    """RMSNorm over the last axis: ``weight * x / sqrt(mean(x**2) + eps)``; no centering.

    Args:
        x: ``[..., D]`` numpy array or torch tensor (e.g. ``[B, T, D]``), any float dtype.
        weight: gamma, ``[D]`` or None (ones).
        eps: added to the mean square *inside* the square root.

    Returns:
        Same kind, shape ``[..., D]`` and dtype as ``x``, computed exactly as the seed's
        ``rms_norm``: ``(x.float() * rsqrt(mean(x.float()**2) + eps) * weight).to(x.dtype)``
        (float64 input stays float64). ``x`` is never modified.

    Raises:
        TypeError: ``x`` is neither a numpy array nor a torch tensor, or its dtype is not
            floating.
        ValueError: ``x`` is a scalar, the last axis is empty, weight is not ``[D]``, or
            ``eps < 0``.

    Source: Zhang and Sennrich 2019, eq. (4); the seed: RMSNorm(1,2,3) = (0.463, 0.926, 1.389).
    """
    _check_input(x, weight, None, eps, "rms_norm")
    if _is_torch(x):
        import torch

        cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        h = x.to(cdt)
        rms = h.pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()  # [..., 1] (1 / RMS)
        y = h * rms
        if weight is not None:
            y = y * _as_torch(weight, cdt)
        return y.to(x.dtype)
    cdt = _compute_dtype_np(x.dtype)
    h = np.asarray(x, dtype=cdt)
    rms = 1 / np.sqrt((h**2).mean(axis=-1, keepdims=True) + cdt(eps))  # [..., 1] (1 / RMS)
    y = h * rms
    if weight is not None:
        y = y * np.asarray(weight, dtype=cdt)
    return y.astype(x.dtype, copy=False)


def dyt(x, alpha, weight=None, bias=None):
    """Dynamic Tanh, the norm-free replacement of a norm: ``weight * tanh(alpha * x) + bias``.

    Element-wise: no statistic over any axis, so one token's output does not depend on its other
    features (a norm's does). ``alpha`` (one learnable scalar in Zhu et al.) sets how far the
    linear middle of tanh reaches before it squashes the extremes, the S-shape that LayerNorm's
    input-output map takes in trained transformers.

    Args:
        x: ``[..., D]`` numpy array or torch tensor (e.g. ``[B, T, D]``), any float dtype.
        alpha: a scalar: a float, or a torch tensor / numpy array with one element.
        weight: gamma, ``[D]`` or None (ones).
        bias: beta, ``[D]`` or None (zeros).

    Returns:
        Same kind, shape ``[..., D]`` and dtype as ``x``: the same rule as the norms, computed in
        float32 (float64 stays float64), gamma and beta applied in that precision, cast back to
        ``x.dtype`` last. ``x`` is never modified.

    Raises:
        TypeError: ``x`` is neither a numpy array nor a torch tensor, or not floating.
        ValueError: ``x`` is a scalar, the last axis is empty, weight/bias are not ``[D]``, or
            ``alpha`` has more than one element.

    Source: Zhu, Chen, He, LeCun and Liu 2025, "Transformers without Normalization" (CVPR 2025),
    the DyT layer ``DyT(x) = gamma * tanh(alpha x) + beta``.
    """
    _check_input(x, weight, bias, 0.0, "dyt")
    n = alpha.numel() if _is_torch(alpha) else np.size(alpha)
    if n != 1:
        raise ValueError(f"dyt: alpha must be one number (a scalar), got {n} numbers")
    if _is_torch(x):
        import torch

        cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        a = _as_torch(alpha, cdt).reshape(())
        y = torch.tanh(a * x.to(cdt))
        if weight is not None:
            y = y * _as_torch(weight, cdt)
        if bias is not None:
            y = y + _as_torch(bias, cdt)
        return y.to(x.dtype)
    cdt = _compute_dtype_np(x.dtype)
    a = np.asarray(alpha.detach().cpu() if hasattr(alpha, "detach") else alpha, dtype=cdt).reshape(())
    y = np.tanh(a * np.asarray(x, dtype=cdt))
    if weight is not None:
        y = y * np.asarray(weight, dtype=cdt)
    if bias is not None:
        y = y + np.asarray(bias, dtype=cdt)
    return y.astype(x.dtype, copy=False)
