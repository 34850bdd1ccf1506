"""The LayerNorm backward: its case form for the grammar search, and what a gradient's own
properties show.

The backward's grammar (its variants are analytic gradients, the assignment's answer among them)
is the grader's: ``grader/backward.py`` registers it with :func:`normref.diagnosis.register_grammar`.
In a student's kernel there is none; :func:`backward_facts` says what was measured instead: the
properties every LayerNorm gradient has (``dx`` sums to 0 over each token's features, and is
orthogonal to that token's ``xhat``: LayerNorm's output does not change when a token is shifted
or scaled), and a constant factor of ``dweight`` or ``dbias`` with the count that gives it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .measure import factor_words

__all__ = ["BackwardCase", "backward_facts"]


@dataclass
class BackwardCase:
    """``dy, x [..., D]`` float64, ``weight [D]``, ``eps``."""

    dy: np.ndarray
    x: np.ndarray
    weight: np.ndarray
    eps: float


def _split(flat: np.ndarray, x: np.ndarray, d: int) -> tuple:
    n = x.size
    return flat[:n].reshape(x.shape), flat[n:n + d], flat[n + d:n + 2 * d]


def backward_facts(args: tuple, kwargs: dict, observed: tuple) -> list[str]:
    """What one backward case's gradients show against the true ones (``observed``: the three
    gradients flattened into one vector, the student's and the expected, with the tolerance)."""
    dy, x, w, eps = (np.asarray(a, np.float64) if i < 3 else float(a) for i, a in enumerate(args[:4]))
    got, want, rtol, atol = observed
    d = x.shape[-1]
    if got.shape != want.shape or not np.all(np.isfinite(got)):
        return []
    dx, dw, db = _split(got, x, d)
    rdx, rdw, rdb = _split(want, x, d)
    sizes = {"d": d, "tokens": int(x.size // d)}
    facts: list[str] = []
    for name, g, r in (("dweight", dw, rdw), ("dbias", db, rdb)):
        if np.allclose(g, r, rtol=rtol, atol=atol):
            continue
        mask = np.abs(r) > 1e-9
        k = g[mask] / r[mask] if mask.any() else np.array([])
        if k.size and np.allclose(k, k[0], rtol=1e-4, atol=1e-9):
            words = factor_words(float(k[0]), sizes)
            why = ""
            if words and "tokens" in words:
                why = ": you averaged over the tokens where the gradient sums over them"
            facts.append(f"your {name} is the true one times {k[0]:.4g}" + (f" = {words}" if words else "") + why)
        elif np.allclose(g, rdb if name == "dweight" else rdw, rtol=rtol, atol=atol):
            facts.append(f"your {name} is the true {'dbias' if name == 'dweight' else 'dweight'}")
    if not np.allclose(dx, rdx, rtol=rtol, atol=atol):
        rows = dx.reshape(-1, d)
        xc = x.reshape(-1, d) - x.reshape(-1, d).mean(-1, keepdims=True)
        xhat = xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
        s1, s2 = rows.sum(-1), (rows * xhat).sum(-1)
        scale = np.abs(rows).max() + 1e-12
        if np.max(np.abs(s1)) > 1e-6 * scale * d:
            t = int(np.argmax(np.abs(s1)))
            facts.append(f"your dx sums to {s1[t]:.3g} over token {t}'s features, where the true dx sums to 0 "
                         "(adding one number to every feature leaves LayerNorm's output unchanged): the gradient "
                         "through the mean is missing or wrong")
        elif np.max(np.abs(s2)) > 1e-6 * scale * d:
            t = int(np.argmax(np.abs(s2)))
            facts.append(f"sum(dx * xhat) over token {t}'s features is {s2[t]:.3g} in yours, 0 in the true dx "
                         "(scaling a token leaves LayerNorm's output unchanged): the gradient through the "
                         "variance is missing or wrong")
        else:
            k = _ratio(dx, rdx)
            if k is not None:
                words = factor_words(k, sizes)
                facts.append(f"your dx is the true one times {k:.4g}" + (f" = {words}" if words else ""))
    return facts


def _ratio(a: np.ndarray, b: np.ndarray) -> float | None:
    mask = np.abs(b) > 1e-9 * (np.abs(b).max() + 1e-30)
    if not mask.any():
        return None
    k = a[mask] / b[mask]
    return float(k[0]) if np.allclose(k, k[0], rtol=1e-4, atol=1e-9) else None
