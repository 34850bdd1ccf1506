"""LayerNorm, RMSNorm and DyT as ``torch.nn.Module``s, numerically identical to :mod:`normref.functional`.

``RMSNorm`` is the seed's MiniMind module: statistics in float32, multiply by the weight in
float32, cast back to the input dtype last (bit for bit on float32, float16 and bfloat16).

Sources: Ba, Kiros and Hinton 2016, "Layer Normalization", eq. (3)-(4);
Zhang and Sennrich 2019, "Root Mean Square Layer Normalization", eq. (4);
Lesson 16 seed text, "Show the RMSNorm module".
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .functional import DYT_ALPHA_INIT, LAYER_NORM_EPS, RMS_NORM_EPS, dyt, layer_norm, rms_norm

__all__ = ["LayerNorm", "RMSNorm", "DyT"]


class LayerNorm(nn.Module):
    """LayerNorm over the last axis, with learnable gamma (``weight``) and beta (``bias``).

    Args:
        dim: D, the size of the feature axis (``normalized_shape = (dim,)``).
        eps: added to the variance inside the square root.
        bias: if False there is no ``bias`` parameter at all (``self.bias is None``).

    Attributes:
        weight: gamma, ``nn.Parameter`` of shape ``[D]``, initialised to ones.
        bias: beta, ``nn.Parameter`` of shape ``[D]``, initialised to zeros, or None.

    Shapes: ``forward(x)``: ``[..., D]`` (e.g. ``[B, T, D]``) -> the same shape and dtype.
    Same numbers as :func:`normref.layer_norm` (float32 statistics, weight and bias applied in
    float32, cast back to ``x.dtype``); on float32 input it agrees with ``torch.nn.LayerNorm``.

    Raises:
        ValueError: ``dim < 1`` or ``eps < 0`` (at construction); ``forward`` raises
            ``ValueError`` when the last axis of ``x`` is not ``dim``.

    Source: Ba et al. 2016, eq. (3)-(4).
    """

    def __init__(self, dim: int, eps: float = LAYER_NORM_EPS, bias: bool = True):
        super().__init__()
        _check_args("LayerNorm", dim, eps)
        self.normalized_shape = (dim,)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_width(self, x)
        return layer_norm(x, self.weight, self.bias, eps=self.eps)  # [..., D]

    def extra_repr(self) -> str:
        return f"{self.normalized_shape[0]}, eps={self.eps}, bias={self.bias is not None}"


class RMSNorm(nn.Module):
    """RMSNorm over the last axis: ``weight * x / sqrt(mean(x**2) + eps)``; no centering, no bias.

    The seed's MiniMind module, verbatim in behaviour::

        rms = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x.float() * rms * self.weight).to(dtype=x.dtype)

    (float64 input is kept in float64 rather than rounded through float32.)

    Args:
        dim: D, the size of the feature axis.
        eps: added to the mean square inside the square root.

    Attributes:
        weight: gamma, ``nn.Parameter`` of shape ``[D]``, initialised to ones.

    Shapes: ``forward(x)``: ``[..., D]`` (e.g. ``[B, T, D]``) -> the same shape and dtype.

    Raises:
        ValueError: ``dim < 1`` or ``eps < 0`` (at construction); ``forward`` raises
            ``ValueError`` when the last axis of ``x`` is not ``dim``.

    Source: Zhang and Sennrich 2019, eq. (4); the seed's MiniMind ``RMSNorm``.
    """

    def __init__(self, dim: int, eps: float = RMS_NORM_EPS):
        super().__init__()
        _check_args("RMSNorm", dim, eps)
        self.normalized_shape = (dim,)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_width(self, x)
        return rms_norm(x, self.weight, eps=self.eps)  # [..., D]

    def extra_repr(self) -> str:
        return f"{self.normalized_shape[0]}, eps={self.eps}"


def _check_args(name: str, dim: int, eps: float) -> None:
    if not isinstance(dim, int) or dim < 1:
        raise ValueError(f"{name}: dim must be a positive int (the feature size D), got {dim!r}")
    if not eps >= 0:
        raise ValueError(f"{name}: eps must be >= 0, got {eps}")


def _check_width(module: nn.Module, x) -> None:
    d = module.normalized_shape[0]
    if x.ndim == 0 or x.shape[-1] != d:
        raise ValueError(f"{type(module).__name__}({d}) normalizes a last axis of size {d}; "
                         f"got x of shape {list(x.shape)}")


class DyT(nn.Module):
    """Dynamic Tanh, a drop-in replacement for a norm: ``weight * tanh(alpha * x) + bias``.

    No statistics at all: each feature of each token is squashed on its own by tanh, with one
    learnable scalar ``alpha`` shared by every feature and LayerNorm's per-feature ``weight``
    (gamma) and ``bias`` (beta).

    Args:
        dim: D, the size of the feature axis.
        alpha_init: the initial alpha (Zhu et al.'s default 0.5, :data:`normref.functional.DYT_ALPHA_INIT`).
        bias: if False there is no ``bias`` parameter at all (``self.bias is None``).

    Attributes:
        alpha: ``nn.Parameter`` of shape ``[1]``, initialised to ``alpha_init``.
        weight: gamma, ``[D]``, ones. bias: beta, ``[D]``, zeros, or None.

    Shapes: ``forward(x)``: ``[..., D]`` (e.g. ``[B, T, D]``) -> the same shape and dtype, the
    numbers of :func:`normref.dyt` (float32 inside, cast back to ``x.dtype``).

    Raises:
        ValueError: ``dim < 1`` or ``alpha_init`` not finite (at construction); ``forward``
            raises ``ValueError`` when the last axis of ``x`` is not ``dim``.

    Source: Zhu, Chen, He, LeCun and Liu 2025, "Transformers without Normalization" (CVPR 2025),
    ``DyT(x) = gamma * tanh(alpha x) + beta`` and their reference module (alpha a one-element
    parameter, weight ones, bias zeros).
    """

    def __init__(self, dim: int, alpha_init: float = DYT_ALPHA_INIT, bias: bool = True):
        super().__init__()
        _check_args("DyT", dim, 0.0)
        if not math.isfinite(alpha_init):
            raise ValueError(f"DyT: alpha_init must be a finite number, got {alpha_init!r}")
        self.normalized_shape = (dim,)
        self.alpha = nn.Parameter(torch.full((1,), float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_width(self, x)
        return dyt(x, self.alpha, self.weight, self.bias)  # [..., D]

    def extra_repr(self) -> str:
        return f"{self.normalized_shape[0]}, alpha={float(self.alpha):.3g}, bias={self.bias is not None}"
