"""The grammar of LayerNorm and RMSNorm implementations.

Dimensions (each a way a student's code can differ from the reference):

* ``axis``: the axis the statistics are taken over (0, 1, or every axis) instead of the last;
* ``keepdim``: which statistic lost its reduced axis (``keepdim=True`` forgotten);
* ``center``: subtracting the mean or not (RMSNorm must not, LayerNorm must);
* ``stat``: what is averaged: the mean of squares (reference), the mean of ``|x|``, the
  largest ``|x|``;
* ``divisor``: ``n`` (reference), ``n - 1`` or 1 (a sum: the L2 norm);
* ``root``: the square root taken or not (dividing by the variance);
* ``eps_place`` and ``eps_value``: inside the root (reference), outside, left out; a fixed
  value instead of the ``eps`` argument;
* ``apply``: dividing by the statistic (reference) or multiplying by it;
* ``weight`` and ``bias``: how gamma and beta enter (multiplied, added, before normalizing,
  left out, beta inside the gamma product, subtracted);
* ``dtype``: the statistics in the input's float16/bfloat16 instead of float32;
* ``var_formula``: the one-pass variance ``E[x**2] - E[x]**2`` instead of the two-pass
  ``E[(x - mean)**2]`` (cancellation when the mean is large against the spread).

Everything is computed in numpy: float32 statistics for float16/bfloat16/float32 input and
float64 for float64 (the seed's rule), the output cast back to the input dtype. bfloat16 (which
numpy lacks) is emulated by rounding float32 to its 8-bit mantissa, nearest-even.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .search import Choice, Grammar

__all__ = ["NormCase", "norm_case", "norm_grammar", "to_bf16"]


@dataclass
class NormCase:
    """One norm case in numpy: ``x [..., D]`` (float16/float32/float64 values; bfloat16 held
    as float32 with ``dtype="bfloat16"``), ``weight [D]``, ``bias [D]`` or None, ``eps``."""

    x: np.ndarray
    dtype: str
    weight: np.ndarray | None
    bias: np.ndarray | None
    eps: float


def to_bf16(a: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest-even), returned as float32."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    out = r.view(np.float32).copy()
    out[np.isnan(a)] = np.nan
    return out


def _np(a) -> tuple[np.ndarray | None, str]:
    if a is None:
        return None, ""
    from .._torch import is_tensor

    if is_tensor(a):
        import torch

        name = str(a.dtype).replace("torch.", "")
        t = a.detach().cpu()
        if t.dtype == torch.bfloat16:
            return t.float().numpy(), "bfloat16"
        return t.numpy().copy(), name
    a = np.asarray(a)
    return a.copy(), str(a.dtype)


def norm_case(x, weight, bias, eps: float) -> NormCase:
    """A :class:`NormCase` from a checker's inputs (torch tensors or numpy arrays)."""
    xa, dt = _np(x)
    w, _ = _np(weight)
    b, _ = _np(bias)
    return NormCase(xa, dt, None if w is None else w.astype(np.float64),
                    None if b is None else b.astype(np.float64), float(eps))


def _round(dtype: str):
    if dtype == "bfloat16":
        return to_bf16
    if dtype == "float16":
        return lambda a: np.asarray(a, dtype=np.float32).astype(np.float16).astype(np.float32)
    return lambda a: a


def evaluate_norm(kind: str, ch: dict, c: NormCase) -> np.ndarray | None:
    """The output of the variant ``ch`` (``{dim: value}``; empty: the reference) of ``kind``
    (``"rms"`` or ``"layer"``) on case ``c``, as float64; None where it would raise."""
    cdt = np.float64 if c.dtype == "float64" else np.float32
    low = ch.get("dtype") == "input" and c.dtype in ("float16", "bfloat16")
    q = _round(c.dtype) if low else (lambda a: a)
    x = c.x.astype(cdt)
    w = None if c.weight is None else c.weight.astype(cdt)
    b = None if c.bias is None else c.bias.astype(cdt)
    weight_mode, bias_mode = ch.get("weight", "mul"), ch.get("bias", "add")
    h = q(x)
    if w is not None and weight_mode == "before":
        h = q(h * w)
    if b is not None and bias_mode == "before":
        h = q(h + b)
    ax = ch.get("axis", -1)
    if ax == "all":
        axis, n = None, h.size
    else:
        if ax != -1 and ax >= x.ndim:
            return None
        axis, n = ax, h.shape[ax]
    div = {"n": n, "n-1": n - 1, "1": 1}[ch.get("divisor", "n")]
    if div <= 0:
        return None
    hc, denom = _centred_and_scale(kind, ch, h, axis, div, c.eps, q)
    y = q(hc * denom) if ch.get("apply") == "multiply" else q(hc / denom)
    y = _affine(y, w, b, weight_mode, bias_mode)
    if y.shape != c.x.shape:
        return None
    y = to_bf16(y) if c.dtype == "bfloat16" else y.astype(c.dtype)
    return y.astype(np.float64)


def _centred_and_scale(kind: str, ch: dict, h: np.ndarray, axis, div, eps: float, q) -> tuple:
    """``(h centred or not, the statistic it is divided by)`` for the variant ``ch``: its
    centring, keepdim, statistic, divisor ``div``, root and eps; ``q`` rounds each step."""
    keep = ch.get("keepdim", "")
    mean_keep = keep not in ("both", "mean", "torchvar")
    scale_keep = keep not in ("both", "scale", "torchvar")
    center = ch.get("center", kind == "layer")
    hc = q(h - q(h.mean(axis=axis, keepdims=mean_keep))) if center else h
    hs = q(h - h.mean(axis=axis, keepdims=True)) if keep == "torchvar" and center else hc
    stat = ch.get("stat", "ms")
    eps = ch.get("eps_value", eps)
    place = ch.get("eps_place", "inside")
    if place == "none":
        eps = 0.0
    if stat == "ms":
        if ch.get("var_formula") == "one_pass" and center:
            s = q(q(q(h * h).sum(axis=axis, keepdims=scale_keep) / div)
                  - q(h.mean(axis=axis, keepdims=scale_keep) ** 2))
        else:
            s = q(q(hs * hs).sum(axis=axis, keepdims=scale_keep) / div)
        if ch.get("root") == "none":
            return hc, q(s + eps)
        if place == "outside":
            return hc, q(q(np.sqrt(s)) + eps)
        return hc, q(np.sqrt(q(s + eps)))
    if stat == "mean_abs":
        return hc, q(np.abs(hs).sum(axis=axis, keepdims=scale_keep) / div + eps)
    if stat == "max_abs":
        return hc, q(np.abs(hs).max(axis=axis, keepdims=scale_keep) + eps)
    raise ValueError(stat)  # pragma: no cover - grammar values only


def _affine(y: np.ndarray, w, b, weight_mode: str, bias_mode: str) -> np.ndarray:
    """``y`` with the weight (gamma) and bias (beta) applied as the variant does."""
    if w is not None:
        if bias_mode == "inside" and b is not None:
            y = y + b
        if weight_mode == "mul":
            y = y * w
        elif weight_mode == "add":
            y = y + w
        elif weight_mode == "divide":
            y = y / w
    if b is not None:
        if bias_mode == "add":
            y = y + b
        elif bias_mode == "sub":
            y = y - b
        elif bias_mode == "mul":
            y = y * b
    return y


_NAMES = {"rms": "RMSNorm", "layer": "LayerNorm"}
_REFERENCE = {
    "rms": "RMSNorm divides each token by its root mean square, sqrt(mean(x**2) + eps), then "
           "multiplies by the weight",
    "layer": "LayerNorm subtracts the token's mean, divides by sqrt(var + eps) and then applies "
             "weight and bias",
}


def _dims(kind: str, module: bool = False):
    """The grammar's dimensions for ``kind`` (``"rms"``/``"layer"``), as a function of the
    cases (their rank, weight, bias and dtype say which dimensions can show)."""
    def dims(cases: Sequence[NormCase]) -> list[list[Choice]]:
        nd = max((c.x.ndim for c in cases), default=1)
        has_w = any(c.weight is not None and not np.all(c.weight == 1) for c in cases)
        has_b = any(c.bias is not None and np.any(c.bias != 0) for c in cases)
        low = any(c.dtype in ("float16", "bfloat16") for c in cases)
        stat_word = "root mean square" if kind == "rms" else "standard deviation"
        out = [_axis_choices(nd), _keepdim_choices(kind, stat_word), *_formula_choices(kind, stat_word, module),
               *_affine_choices(has_w, has_b)]
        if low:
            out.append([Choice("dtype", "input", "computed the statistics in the input's "
                               "float16/bfloat16 instead of float32", "low_precision_stats")])
        if kind == "layer":
            out.append([Choice("var_formula", "one_pass", "computed the variance as "
                               "E[x**2] - E[x]**2, which loses the precision of the spread when the "
                               "mean is large (subtract the mean first, then average the squares)")])
        return out

    return dims


def _axis_choices(nd: int) -> list[Choice]:
    axes = [Choice("axis", 0, "took the statistics over axis 0 (across the batch) instead of "
                   "the last axis, the d features of one token", "wrong_axis")]
    if nd >= 3:
        axes.append(Choice("axis", 1, "took the statistics over axis 1 (across the sequence) "
                           "instead of the last axis, the d features of one token", "wrong_axis"))
    axes.append(Choice("axis", "all", "took one statistic over the whole tensor instead of one "
                       "per token (over the last axis)"))
    return axes


def _keepdim_choices(kind: str, stat_word: str) -> list[Choice]:
    keep = [Choice("keepdim", "scale", f"dropped keepdim=True on the {stat_word}, so it "
                   "broadcast against the wrong axes", "missing_keepdim")]
    if kind == "layer":
        keep += [Choice("keepdim", "mean", "dropped keepdim=True on the mean, so x - mean "
                        "broadcast against the wrong axes", "missing_keepdim"),
                 Choice("keepdim", "both", "dropped keepdim=True on both the mean and the "
                        "variance", "missing_keepdim"),
                 Choice("keepdim", "torchvar", "took the variance with keepdim lost on both "
                        "statistics (torch.var(dim=-1) style)", "missing_keepdim")]
    return keep


def _formula_choices(kind: str, stat_word: str, module: bool) -> list[list[Choice]]:
    """The statistic's dimensions: centring, what is averaged, divisor, root, eps, apply."""
    out: list[list[Choice]] = []
    if kind == "rms":
        out.append([Choice("center", True, "subtracted the mean before dividing", "subtracts_mean")])
    else:
        out.append([Choice("center", False, "did not subtract the mean", "not_centered")])
    out.append([Choice("stat", "mean_abs", "divided by the mean of |x| over the token"),
                Choice("stat", "max_abs", "divided by the largest |x| of the token")])
    out.append([Choice("divisor", "n-1", "divided the sum of squares by n-1 instead of n",
                       "unbiased_variance"),
                Choice("divisor", "1", "did not divide the sum of squares by n (that is the "
                       "L2 norm, not the " + stat_word + ")")])
    out.append([Choice("root", "none", "divided by the " + ("mean square" if kind == "rms"
                                                             else "variance")
                       + " itself, without the square root")])
    out.append([Choice("eps_place", "outside", "added eps outside the square root, sqrt(.) + eps",
                       "eps_outside_sqrt"),
                Choice("eps_place", "none", "left eps out", "no_eps")])
    known_eps = "wrong_eps" if module else None
    out.append([Choice("eps_value", v, f"used eps = {v:g} instead of the eps you were given",
                       known_eps) for v in (1e-5, 1e-6, 1e-8, 1e-3)])
    out.append([Choice("apply", "multiply", f"multiplied by the {stat_word} instead of "
                       "dividing by it")])
    return out


def _affine_choices(has_w: bool, has_b: bool) -> list[list[Choice]]:
    """The weight's and the bias's dimensions, where the cases have a weight or bias."""
    out: list[list[Choice]] = []
    if has_w:
        out.append([Choice("weight", "none", "did not apply the weight (gamma)", "ignores_weight"),
                    Choice("weight", "add", "added the weight (gamma) instead of multiplying by it"),
                    Choice("weight", "before", "multiplied x by the weight before normalizing "
                           "instead of after"),
                    Choice("weight", "divide", "divided by the weight (gamma) instead of "
                           "multiplying")])
    if has_b:
        out.append([Choice("bias", "none", "did not add the bias (beta)", "ignores_bias"),
                    Choice("bias", "sub", "subtracted the bias (beta) instead of adding it"),
                    Choice("bias", "inside", "added the bias before multiplying by the weight, "
                           "(xhat + beta) * gamma"),
                    Choice("bias", "before", "added the bias to x before normalizing"),
                    Choice("bias", "mul", "multiplied by the bias (beta) instead of adding it")])
    return out


def _compatible(a: Choice, b: Choice) -> bool:
    pair = {a.dim: a.value, b.dim: b.value}
    if "eps_value" in pair and pair.get("eps_place") == "none":
        return False
    if pair.get("stat") in ("mean_abs", "max_abs") and ({"root", "eps_place", "var_formula"} & set(pair)):
        return False
    if pair.get("stat") == "max_abs" and "divisor" in pair:
        return False
    if "var_formula" in pair and ("center" in pair or "stat" in pair or "keepdim" in pair):
        return False
    return True


def norm_grammar(kind: str, checker: str, module: bool = False) -> Grammar:
    """The grammar of ``kind`` (``"rms"`` or ``"layer"``) for the checker named ``checker``.

    Args:
        module: the RMSNorm module checker (an eps value other than the argument is the known
            fault ``wrong_eps`` there).
    """
    return Grammar(checker, _REFERENCE[kind], _dims(kind, module),
                   lambda ch, c: evaluate_norm(kind, ch, c), _compatible)
