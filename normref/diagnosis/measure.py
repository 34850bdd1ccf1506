"""What was measured, when no variant of the grammar reproduces a student's output.

:func:`describe` looks at one failing case (the student's output ``got`` against the reference
``want``, both ``[..., D]`` float64, and the input ``x``) and says, in one sentence, the
regularities it found: one factor per token (each row of ``got`` is its row of ``want`` times
a number), one offset per token, the axis the error follows, whether the error grows with the
token's mean. These are facts about the numbers, not guesses about the code.
"""
from __future__ import annotations

import numpy as np

__all__ = ["describe"]

_AXIS_NAMES = {3: ("batch", "sequence", "feature"), 2: ("token", "feature"), 1: ("feature",)}


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def _per_row_factor(got: np.ndarray, want: np.ndarray) -> tuple[float, float] | None:
    """(smallest, largest) factor if every row of ``got`` is its row of ``want`` times a number
    (least squares, residual under 1% of the row), with at least two different factors."""
    d = want.shape[-1]
    g, w = got.reshape(-1, d), want.reshape(-1, d)
    ww = (w * w).sum(-1)
    if np.any(ww < 1e-12):
        return None
    k = (g * w).sum(-1) / ww
    resid = np.abs(g - k[:, None] * w).max(-1)
    if np.any(resid > 1e-2 * np.abs(w).max(-1) + 1e-6):
        return None
    if k.max() - k.min() < 1e-3 * max(1.0, abs(k).max()):
        return None
    return float(k.min()), float(k.max())


def _per_row_offset(got: np.ndarray, want: np.ndarray) -> tuple[float, float] | None:
    d = want.shape[-1]
    e = (got - want).reshape(-1, d)
    off = e.mean(-1)
    if np.all(np.abs(off) < 1e-6):
        return None
    if np.all(np.abs(e - off[:, None]).max(-1) <= 1e-2 * np.abs(off).max() + 1e-6):
        return float(off.min()), float(off.max())
    return None


def _axis_followed(err: np.ndarray) -> int | None:
    """The one axis along which the error varies (it is constant along the others), if any."""
    if err.ndim < 2 or not np.any(err):
        return None
    total = float(np.var(err))
    if total <= 0:
        return None
    for ax in range(err.ndim):
        others = tuple(i for i in range(err.ndim) if i != ax)
        explained = float(np.var(err.mean(axis=others)))
        if explained >= 0.95 * total and err.shape[ax] > 1:
            return ax
    return None


def _grows_with_mean(x: np.ndarray, err: np.ndarray) -> float | None:
    """The correlation of each token's largest |error| with its |mean|, when it is above 0.9."""
    d = x.shape[-1]
    m = np.abs(x.reshape(-1, d).mean(-1))
    e = np.abs(err.reshape(-1, d)).max(-1)
    if m.size < 3 or np.ptp(m) < 1e-9 or np.ptp(e) < 1e-12:
        return None
    r = float(np.corrcoef(m, e)[0, 1])
    return r if r > 0.9 else None


def describe(x: np.ndarray | None, got: np.ndarray, want: np.ndarray) -> str:
    """One sentence on what the wrong output shows (empty when nothing regular was found).

    Args:
        x: the case's input ``[..., D]`` as float64 (None when the output is not shaped like it).
        got, want: the student's and the reference output, same shape, float64.
    """
    if got.shape != want.shape or got.ndim == 0 or not np.all(np.isfinite(got)):
        return ""
    facts: list[str] = []
    err = got - want
    if got.ndim >= 1 and want.shape[-1] > 1:
        f = _per_row_factor(got, want)
        if f is not None:
            facts.append(f"each token's output is the reference's times its own factor "
                         f"(from {_fmt(f[0])} to {_fmt(f[1])}): the number you divide by is off "
                         "by a different amount per token")
        else:
            o = _per_row_offset(got, want)
            if o is not None:
                facts.append(f"each token's output is the reference's shifted by its own amount "
                             f"(from {_fmt(o[0])} to {_fmt(o[1])})")
    ax = _axis_followed(err)
    if ax is not None and not facts:
        names = _AXIS_NAMES.get(err.ndim, ())
        name = f" ({names[ax]})" if ax < len(names) else ""
        facts.append(f"the error changes only along axis {ax}{name} and is the same along the others")
    if x is not None and x.shape == got.shape:
        r = _grows_with_mean(x, err)
        if r is not None:
            facts.append(f"the error grows with the token's mean (correlation {r:.2f}): tokens whose "
                         "values sit far from 0 are off the most")
    if not facts:
        return ""
    return "measured: " + "; ".join(facts) + "."
