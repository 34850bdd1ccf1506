"""The LayerNorm backward: its case form for the grammar search, and what a gradient's own
properties show.

The backward's grammar (its variants are analytic gradients, the assignment's answer among them)
is the grader's: ``grader/backward.py`` registers it with :func:`normref.diagnosis.register_grammar`.
In a student's kernel there is none; :func:`backward_facts` says what was measured instead, each
output by its name (``dx``, ``dweight``, ``dbias``, in its own shape), never the reference's
formula (the question's answer):

* ``dx``, read term by term: every LayerNorm gradient of one token is a combination of three
  vectors of that token, ``g = dy * weight``, the constant vector and ``xhat`` (the chain rule
  through the output, the mean and the variance). The student's ``dx`` is fitted on them per token
  (least squares) and each coefficient is compared with the true one: a term missing (factor 0),
  the wrong sign, ``d`` times too large (a sum over the features where a mean belongs), ``1/2``,
  ``2`` ...; and the three scaled together as a different ``1/sqrt(var + eps)`` would scale them,
  whose variance is then read (``d/(d-1)`` times the true one: the n-1 variance). Where the fit
  does not hold (a ``dx`` that is no such combination), the invariants every LayerNorm gradient
  has: ``dx`` sums to 0 over each token's features and is orthogonal to that token's ``xhat``.
* ``dweight``, ``dbias``: a constant factor with the count that gives it, each other's value,
  or a sum over the tokens of ``dy`` (or ``dy * weight``) against the raw input ``x`` or the
  centred ``x - mean``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .measure import factor_words
from .outputs import split

__all__ = ["BackwardCase", "backward_facts", "dx_terms"]


@dataclass
class BackwardCase:
    """``dy, x [..., D]`` float64, ``weight [D]``, ``eps``."""

    dy: np.ndarray
    x: np.ndarray
    weight: np.ndarray
    eps: float


def _forward(x: np.ndarray, eps: float):
    """``(x - mean, var, xhat)`` per token, ``[N, D]`` (``var`` ``[N, 1]``, biased)."""
    d = x.shape[-1]
    rows = x.reshape(-1, d)
    xc = rows - rows.mean(-1, keepdims=True)
    var = (xc * xc).mean(-1, keepdims=True)
    return xc, var, xc / np.sqrt(var + eps)


@dataclass
class DxTerms:
    """The student's ``dx``, read term by term (:func:`dx_terms`), per token ``[N]``.

    Attributes:
        scale: the factor of the ``g`` term against the true ``1/sqrt(var + eps)``.
        mean: the factor of the term through the mean against the true one (relative to the
            student's own ``scale``); NaN where the true term is 0 on a token.
        var: the same for the term through the variance.
        exact: the fit is determined (``d <= 3``: any ``dx`` is some combination), so only a
            factor that a statistic explains is evidence.
    """

    scale: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    exact: bool


def dx_terms(dy: np.ndarray, x: np.ndarray, w: np.ndarray, eps: float, dx: np.ndarray) -> DxTerms | None:
    """``dx`` fitted per token on ``g = dy * weight``, the constant vector and ``xhat``; None when
    some token's ``dx`` is no such combination (residual above 1e-7 of its size) or the three
    are dependent there."""
    d = x.shape[-1]
    xc, var, xhat = _forward(x, eps)
    r = 1 / np.sqrt(var[:, 0] + eps)
    G, D = (dy * w).reshape(-1, d), dx.reshape(-1, d)
    n = G.shape[0]
    scale, km, kv = np.empty(n), np.full(n, np.nan), np.full(n, np.nan)
    for t in range(n):
        B = np.stack([G[t], np.ones(d), xhat[t]], 1)
        coef, _, rank, _ = np.linalg.lstsq(B, D[t], rcond=None)
        size = np.abs(D[t]).max() + np.abs(G[t]).max() * r[t] + 1e-300
        if rank < 3 or np.abs(B @ coef - D[t]).max() > 1e-7 * size:
            return None
        a, b, c = coef
        scale[t] = a / r[t]
        gm, gx = G[t].mean(), (G[t] * xhat[t]).mean()
        ref = np.abs(G[t]).max() + 1e-300
        if a != 0 and abs(gm) > 1e-6 * ref:
            km[t] = b / (-a * gm)
        if a != 0 and abs(gx) > 1e-6 * ref:
            kv[t] = c / (-a * gx)
    return DxTerms(scale, km, kv, exact=d <= 3)


def _one(v: np.ndarray, rtol: float = 1e-6) -> float | None:
    """The one value of ``v`` (its finite entries agree within ``rtol``), else None."""
    v = v[np.isfinite(v)]
    if not v.size or not np.allclose(v, v[0], rtol=rtol, atol=1e-9):
        return None
    return float(v[0])


_TERM_WORDS = {0.0: "is missing", -1.0: "has the wrong sign"}


def _term_words(k: float, sizes: dict) -> str | None:
    """How one term of dx differs, as a predicate: ``"is missing"``, ``"is 3 = d times the true
    one: a sum over the d features where a mean belongs"``; None when no count or simple number
    explains ``k``."""
    for v, words in _TERM_WORDS.items():
        if abs(k - v) < 1e-6:
            return words
    d = sizes.get("d")
    if d and abs(k - d) < 1e-6 * d:
        return f"is {d} = d times the true one: a sum over the d features where a mean belongs"
    if d and d > 1 and abs(k - d / (d - 1)) < 1e-6:
        return f"is {k:.4g} = d/(d-1) times the true one: divided by d - 1 where a mean over the d features belongs"
    words = factor_words(k, sizes) if k > 0 else None
    if words is None:
        return None
    return f"is {k:.4g} = {words} times the true one" if words != f"{k:g}" else f"is {k:g} times the true one"


def _near(a: float | None, b: float) -> bool:
    return a is not None and abs(a - b) <= 1e-6 * max(1.0, abs(b))


def _dx_facts(dy, x, w, eps, dx, sizes: dict, dweight: np.ndarray) -> list[str]:
    """What the terms of the student's ``dx`` show (:func:`dx_terms`), or [] when they show
    nothing a count or a statistic explains."""
    t = dx_terms(dy, x, w, eps, dx)
    if t is None:
        return []
    s, km, kv = _one(t.scale), _one(t.mean), _one(t.var)
    if km is not None and _near(km, 1.0) and np.allclose(t.var[np.isfinite(t.var)],
                                                         (t.scale ** 2)[np.isfinite(t.var)], rtol=1e-6) \
            and not np.allclose(t.scale, 1, rtol=1e-6):
        # the three terms scaled as another 1/sqrt(var + eps) scales them: read that variance
        _, var, xhat = _forward(x, eps)
        used = (var[:, 0] + eps) / t.scale ** 2 - eps  # the variance the student's gradient uses
        k = _one(used / var[:, 0], rtol=1e-5)
        d = sizes["d"]
        lead = tuple(range(x.ndim - 1))
        theirs = (dy * (xhat.reshape(x.shape) * t.scale.reshape(x.shape[:-1] + (1,)))).sum(lead)
        which = "dx and dweight" if np.allclose(dweight, theirs, rtol=1e-6, atol=1e-12) else "dx"
        if k is not None and d > 1 and abs(k - d / (d - 1)) < 1e-5:
            return [f"your {which} are those of a variance {k:.4g} = d/(d-1) times LayerNorm's, as if you divided "
                    "the sum of squares by n-1 (the unbiased variance) instead of n: the forward's variance, "
                    "which the backward recomputes, divides by d"]
        if k is not None:
            words = factor_words(k, sizes)
            if words is None and t.exact:
                return []
            return [f"your {which} are those of a variance {k:.4g}" + (f" = {words}" if words and words != f"{k:g}"
                                                                        else "")
                    + " times LayerNorm's (the forward's biased variance of each token's d features)"]
        return [] if t.exact else [f"your dx's three terms are each scaled by a factor per token ({t.scale.min():.4g} "
                                   f"to {t.scale.max():.4g}), as a different 1/sqrt(var + eps) would scale them"]
    facts = []
    for name, k in (("mean", km), ("variance", kv)):
        if k is None or _near(k, 1.0):
            continue
        words = _term_words(k, sizes)
        if words is None and t.exact:
            continue
        facts.append(f"the gradient through the {name} in your dx " + (words or f"is {k:.4g} times the true one"))
    if s is not None and not _near(s, 1.0) and (km is None or _near(km, 1.0)) and (kv is None or _near(kv, 1.0)):
        words = factor_words(s, sizes) if s > 0 else None
        if words or not t.exact:
            facts.append(f"your dx is the true one times {s:.4g}" + (f" = {words}" if words and words != f"{s:g}"
                                                                      else ""))
    if facts and (km is None or kv is None or s is None):
        return []  # a factor that differs from token to token: not one term's mistake
    return facts


#: what a student may sum ``dy`` (or ``dy * weight``) against for dweight or dbias
_AGAINST = (("x", "x, the raw input (LayerNorm's weight multiplies the normalized input)"),
            ("xc", "x - mean, centred but not divided by sqrt(var + eps)"))


def _param_facts(name: str, g, r, other_true, dy, x, w, sizes: dict, rtol: float, atol: float) -> list[str]:
    """What a wrong ``dweight`` or ``dbias`` (``g``; the true one ``r``, the other one's true
    value ``other_true``) is: a constant factor with its count, the other gradient, or a sum of
    ``dy`` against something else."""
    mask = np.abs(r) > 1e-9 * (np.abs(r).max() + 1e-300)
    k = g[mask] / r[mask] if mask.sum() >= 2 else np.array([])
    if k.size and np.allclose(k, k[0], rtol=1e-4, atol=1e-9):
        words = factor_words(float(k[0]), sizes)
        why = ": you averaged over the tokens where the gradient sums over them" if words and "tokens" in words else ""
        if words or why:
            return [f"your {name} is the true one times {k[0]:.4g}" + (f" = {words}" if words else "") + why]
    d = x.shape[-1]
    rows = x.reshape(-1, d)
    lead = tuple(range(x.ndim - 1))
    against = {"x": x, "xc": (rows - rows.mean(-1, keepdims=True)).reshape(x.shape)}
    for up, up_words in ((dy, "dy"), (dy * w, "dy * weight")):
        for key, words in _AGAINST:
            for how, red in (("sum", np.sum), ("mean", np.mean)):
                v = red(up * against[key], axis=lead)
                if v.shape == g.shape and np.allclose(g, v, rtol=max(rtol, 1e-9), atol=atol):
                    return [f"your {name} is the {how} over the tokens of {up_words} * {words}"]
    other = "dbias" if name == "dweight" else "dweight"
    if np.allclose(g, other_true, rtol=rtol, atol=atol):
        return [f"your {name} is the true {other}"]
    if k.size and np.allclose(k, k[0], rtol=1e-4, atol=1e-9):
        return [f"your {name} is the true one times {k[0]:.4g} at every feature"]
    return []


def backward_facts(args: tuple, kwargs: dict, observed: tuple) -> list[str]:
    """What one backward case's gradients show against the true ones (``observed``: the case's
    record, :func:`normref.diagnosis.observe` of ``dx``, ``dweight``, ``dbias``), each said of
    the output it is about."""
    dy, x, w, eps = (np.asarray(a, np.float64) if i < 3 else float(a) for i, a in enumerate(args[:4]))
    _, _, rtol, atol = observed
    parts = {name: (g, r) for name, g, r in split(observed)}
    if set(parts) != {"dx", "dweight", "dbias"}:
        return []
    (dx, rdx), (dw, rdw), (db, rdb) = parts["dx"], parts["dweight"], parts["dbias"]
    if not all(np.all(np.isfinite(a)) for a in (dx, dw, db)):
        return []
    d = x.shape[-1]
    sizes = {"d": d, "tokens": int(x.size // d)}
    facts: list[str] = []
    dx_wrong = not np.allclose(dx, rdx, rtol=rtol, atol=atol)
    said_dweight = False
    if dx_wrong:
        found = _dx_facts(dy, x, w, eps, dx, sizes, dw)
        said_dweight = any(f.startswith("your dx and dweight") for f in found)
        facts += found or _invariant_facts(x, eps, dx, d)
    for name, g, r, other in (("dweight", dw, rdw, rdb), ("dbias", db, rdb, rdw)):
        if np.allclose(g, r, rtol=rtol, atol=atol) or (name == "dweight" and said_dweight):
            continue
        facts += _param_facts(name, g, r, other, dy, x, w, sizes, rtol, atol)
    if dx_wrong and not facts:
        k = _ratio(dx, rdx)
        if k is not None:
            words = factor_words(k, sizes)
            facts.append(f"your dx is the true one times {k:.4g}" + (f" = {words}" if words else ""))
    return facts


def _invariant_facts(x, eps, dx, d) -> list[str]:
    """The invariants every LayerNorm gradient has, where the student's ``dx`` breaks one."""
    rows = dx.reshape(-1, d)
    _, _, xhat = _forward(x, eps)
    s1, s2 = rows.sum(-1), (rows * xhat).sum(-1)
    scale = np.abs(rows).max() + 1e-12
    if np.max(np.abs(s1)) > 1e-6 * scale * d:
        t = int(np.argmax(np.abs(s1)))
        return [f"your dx sums to {s1[t]:.3g} over token {t}'s features, where the true dx sums to 0 "
                "(adding one number to every feature leaves LayerNorm's output unchanged): the gradient "
                "through the mean is missing or wrong"]
    if np.max(np.abs(s2)) > 1e-6 * scale * d:
        t = int(np.argmax(np.abs(s2)))
        return [f"sum(dx * xhat) over token {t}'s features is {s2[t]:.3g} in yours, 0 in the true dx "
                "(scaling a token leaves LayerNorm's output unchanged): the gradient through the "
                "variance is missing or wrong"]
    return []


def _ratio(a: np.ndarray, b: np.ndarray) -> float | None:
    mask = np.abs(b) > 1e-9 * (np.abs(b).max() + 1e-30)
    if mask.sum() < 2:
        return None
    k = a[mask] / b[mask]
    return float(k[0]) if np.allclose(k, k[0], rtol=1e-4, atol=1e-9) else None
