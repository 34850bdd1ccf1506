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


def describe(x: np.ndarray | None, got: np.ndarray, want: np.ndarray, name: str = "output",
             row: str = "token") -> str:
    """One sentence on what the wrong output shows (empty when nothing regular was found).

    Args:
        x: the case's input ``[..., D]`` as float64 (None when the output is not shaped like it).
        got, want: the student's and the reference output, same shape, float64, rows are
            tokens (``[..., D]``).
        name: the output's name (``"output"``: the question's only output; else e.g. ``"dx"``,
            said by name); ``row``: what one of its rows is (``"token"``, ``"query"``).
    """
    if got.shape != want.shape or got.ndim == 0 or not np.all(np.isfinite(got)):
        return ""
    facts: list[str] = []
    err = got - want
    each = "each token's output" if name == "output" and row == "token" else f"each {row}'s row of your {name}"
    if got.ndim >= 1 and want.shape[-1] > 1:
        f = _per_row_factor(got, want)
        if f is not None:
            facts.append(f"{each} is the reference's times its own factor (from {_fmt(f[0])} to {_fmt(f[1])})"
                         + (": the number you divide by is off by a different amount per token"
                            if name == "output" and row == "token" else ""))
        else:
            o = _per_row_offset(got, want)
            if o is not None:
                facts.append(f"{each} is the reference's shifted by its own amount "
                             f"(from {_fmt(o[0])} to {_fmt(o[1])})")
    ax = _axis_followed(err)
    if ax is not None and not facts:
        names = _AXIS_NAMES.get(err.ndim, ())
        axis = f" ({names[ax]})" if ax < len(names) else ""
        where = "" if name == "output" else f"in your {name}, "
        facts.append(f"{where}the error changes only along axis {ax}{axis} and is the same along the others")
    if x is not None and x.shape == got.shape:
        r = _grows_with_mean(x, err)
        if r is not None:
            whose = "" if name == "output" else f" of your {name}"
            facts.append(f"the error{whose} grows with the token's mean (correlation {r:.2f}): tokens whose "
                         "values sit far from 0 are off the most")
    if not facts:
        return ""
    return "measured: " + "; ".join(facts) + "."


# --------------------------------------------------------------------------- constant factors


def factor_words(c: float, sizes: dict) -> str | None:
    """A constant factor as the statistic that gives it: ``"sqrt(2/3) = sqrt((d-1)/d)"``,
    ``"sqrt(8) = sqrt(d)"``, ``"1/6 = 1/(number of tokens)"``, ``"2"``; None when no ratio of the
    case's sizes (``sizes``: ``{"d": 3, "tokens": 6}``) to a power of +-1/2 or +-1 fits within
    1e-3. The simplest fitting one is said."""
    if not np.isfinite(c) or c <= 0:
        return None
    d = sizes.get("d")
    parts: list[tuple[str, str, float]] = [("1", "1", 1.0)]
    if d:
        parts += [("d", f"{d}", float(d))]
        if d > 1:
            parts += [("(d-1)", f"{d - 1}", float(d - 1))]
    for name, words in (("tokens", "number of tokens"), ("T", "T")):
        v = sizes.get(name)
        if v and v > 1:
            parts.append((f"({words})" if " " in words else words, f"{v}", float(v)))
    best = None
    for (na, va_s, va), (nb, vb_s, vb) in ((a, b) for a in parts for b in parts):
        if na == nb or (na == "(d-1)" and nb == "1") or (nb == "(d-1)" and na == "1"):
            continue  # d - 1 alone is a coincidence (2 on d = 3), not a statistic
        for p, pw in ((1.0, "{}"), (0.5, "sqrt({})"), (-1.0, None), (-0.5, None)):
            if p < 0:
                continue  # a/b to a negative power is b/a to a positive one: covered
            v = (va / vb) ** p
            if abs(v - c) <= 1e-3 * c:
                frac_words = na if nb == "1" else f"{na}/{nb}"
                frac_num = va_s if nb == "1" else f"{va_s}/{vb_s}"
                words = pw.format(frac_words.strip("()") if p == 0.5 and nb == "1" else frac_words)
                num = pw.format(frac_num)
                cand = (len(words), f"{num} = {words}" if num != words else words)
                best = cand if best is None or cand[0] < best[0] else best
    if best is not None:
        return best[1]
    for k in (2, 3, 4, 0.5, 0.25):
        if abs(c - k) <= 1e-3 * k:
            return f"{k:g}"
    return None


def per_token_factors(got: np.ndarray, want: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray | None:
    """Each token's factor ``k`` when every row of ``got - offset`` is ``k`` times its row of
    ``want - offset`` (least squares, residual under 1% of the row), else None."""
    d = want.shape[-1]
    off = 0.0 if offset is None else offset
    g, w = (got - off).reshape(-1, d), (want - off).reshape(-1, d)
    ww = (w * w).sum(-1)
    if np.any(ww < 1e-12) or not np.all(np.isfinite(g)):
        return None
    k = (g * w).sum(-1) / ww
    resid = np.abs(g - k[:, None] * w).max(-1)
    if np.any(resid > 1e-2 * np.abs(w).max(-1) + 1e-6):
        return None
    return k


#: A token's statistics a student may divide by: name -> (words, function of the row ``[D]``).
TOKEN_STATS = {
    "rms": ("its root mean square, sqrt(mean(x**2))", lambda r: np.sqrt(np.mean(r * r))),
    "std": ("its standard deviation, sqrt(mean((x - mean)**2))", lambda r: np.std(r)),
    "std1": ("its standard deviation with n-1, sqrt(sum((x - mean)**2) / (d - 1))",
             lambda r: np.std(r, ddof=1) if r.size > 1 else np.nan),
    "l2": ("its L2 norm, sqrt(sum(x**2)) (no division by d)", lambda r: np.sqrt(np.sum(r * r))),
    "ms": ("its mean square, mean(x**2) (no square root)", lambda r: np.mean(r * r)),
    "var": ("its variance, mean((x - mean)**2) (no square root)", lambda r: np.var(r)),
    "mean_abs": ("the mean of |x|", lambda r: np.mean(np.abs(r))),
    "max_abs": ("the largest |x|", lambda r: np.max(np.abs(r))),
    "rms_c": ("sqrt(mean(x**2)) of x itself, not of x - mean", lambda r: np.sqrt(np.mean(r * r))),
}


def divisor_words(x: np.ndarray, k: np.ndarray, reference_divisor: np.ndarray, stats: tuple,
                  rtol: float = 2e-3, eps: float = 0.0) -> str | None:
    """What a student divided each token by, when the output is the reference's times a factor
    per token (``k``): the divisor ``reference_divisor / k`` matched against the token
    statistics ``stats`` (keys of :data:`TOKEN_STATS`), or each plus ``eps``, within ``rtol``;
    None when none fits."""
    d = x.shape[-1]
    rows = x.reshape(-1, d)
    s = reference_divisor.reshape(-1) / k
    for name in stats:
        words, f = TOKEN_STATS[name]
        with np.errstate(all="ignore"):
            v = np.array([f(r) for r in rows])
        if np.all(np.isfinite(v)) and np.allclose(s, v, rtol=rtol, atol=1e-9):
            return words
        if eps and np.all(np.isfinite(v)) and np.allclose(s, v + eps, rtol=rtol, atol=1e-9):
            return f"{words} plus eps (eps outside the root)"
        # the reciprocal: multiplied by the statistic instead of dividing
        if np.all(np.isfinite(v)) and np.all(v > 0) and np.allclose(s, 1 / v, rtol=rtol, atol=1e-9):
            return f"1 / ({words}): you multiply by it instead of dividing"
    return None


def token_stats_words(got: np.ndarray, want: np.ndarray, title: str, name: str = "output",
                      row: str = "token") -> str | None:
    """The per-row mean and RMS of an output whose rows belong to tokens (``[..., D]``) against
    the reference's, where they differ: ``"your tokens' outputs have RMS 0.31 to 0.52 where
    RMSNorm's have RMS 1 to 1.3"`` (``name="output"``, a question's only output), or ``"your
    dx's rows, one per token, have RMS ... where the reference's have RMS ..."`` (a named output;
    ``row``: what one row is, ``"query"`` for attention logits)."""
    d = want.shape[-1] if want.ndim else 0
    if d < 2 or not np.all(np.isfinite(got)):
        return None
    g, w = got.reshape(-1, d), want.reshape(-1, d)
    own = name == "output" and row == "token"
    theirs = f"{title}'s" if own else "the reference's"
    facts = []
    gr, wr = np.sqrt((g * g).mean(-1)), np.sqrt((w * w).mean(-1))
    if not np.allclose(gr, wr, rtol=2e-2, atol=1e-3):
        facts.append(f"RMS {_span(gr)} where {theirs} have RMS {_span(wr)}")
    gm, wm = g.mean(-1), w.mean(-1)
    if not np.allclose(gm, wm, rtol=2e-2, atol=2e-2 * max(1.0, float(np.abs(wr).max()))):
        facts.append(f"mean {_span(gm)} where {theirs} have mean {_span(wm)}")
    if not facts:
        return None
    whose = f"your {name}'" if name.endswith("s") else f"your {name}'s"
    return ("your tokens' outputs have " if own else f"{whose} rows, one per {row}, have ") + "; and ".join(facts)


def _span(v: np.ndarray) -> str:
    lo, hi = float(np.min(v)), float(np.max(v))
    if abs(hi - lo) <= 1e-3 * max(1.0, abs(hi)):
        return _fmt(lo)
    return f"{_fmt(lo)} to {_fmt(hi)}"
