"""What one output of a failing case shows, measured by what its question declares
(:class:`normref.diagnosis.Question`, :class:`normref.diagnosis.Output`), never by its name:

* a running average (``Output(average_of="running_mean", statistics=...)``): the new value
  fitted as ``a * old + b * statistic`` for the answer and for the reference, and both said
  ("your new_running_mean is 0.1 * running_mean + 0.9 * the batch's mean, where BatchNorm's is
  0.9 * running_mean + 0.1 * the batch's mean: the two weights are swapped");
* a mask (``Question(mask="mask")``): where the outputs differ, when only at the padded
  positions;
* a flag (any bool argument, ``training=False``): the answer's output is the reference's with
  the flag flipped.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .spans import f64, real_tokens

__all__ = ["declared_facts", "average_fact", "mask_fact", "flag_fact", "fit_average"]


def declared_facts(q, out, case_args: tuple, kwargs: dict, got, want, rtol: float,
                    atol: float) -> list[str]:
    """What the question's declarations let one output of one case be measured by: a running
    average fitted, a mask's padded positions, a flag flipped (``q``: the
    :class:`normref.diagnosis.Question`, ``out``: one of its :class:`normref.diagnosis.Output`;
    ``got``, ``want``: that output's values, float64)."""
    facts = []
    index = next((i for i, o in enumerate(q.outputs) if o.name == out.name), None) if len(q.outputs) > 1 else None
    if out.average_of and out.statistics is not None:
        old = f64(q.value(out.average_of, case_args, kwargs))
        try:
            candidates = list(out.statistics(case_args, kwargs))
        except Exception:  # noqa: BLE001 - a declaration that cannot read this call says nothing
            candidates = []
        scalars = {k: float(v) for k, v in zip(q.params, case_args) if isinstance(v, float)}
        scalars.update({k: float(v) for k, v in kwargs.items() if isinstance(v, float)})
        if old is not None and candidates:
            facts.append(average_fact(out, out.average_of, q.title, got, want, old, candidates, scalars))
    if q.mask and out.tokens:
        real = real_tokens(case_args, kwargs, q.params, q.mask)
        if real is not None:
            facts.append(mask_fact(out.name, q.title, got, want, real, rtol, atol))
    facts.append(flag_fact(q, out, index, case_args, kwargs, got, want, rtol, atol))
    return [f for f in facts if f]


def fit_average(new: np.ndarray, old: np.ndarray, candidates: list) -> tuple | None:
    """``(a, b, words, statistic)`` with ``new = a * old + b * statistic`` over the features
    (least squares, residual within 1e-5 of the values' size), for the closest candidate
    ``(words, statistic)`` that fits as a weighted average (``a = 1 - b``, fitted so: a large
    statistic leaves ``a`` alone ill-determined), else the closest that fits; ``(a, c, None,
    None)`` where only ``a * old + c`` fits, one number ``c`` for every feature; None where
    nothing fits or there are too few features (3) to tell."""
    new, old = np.asarray(new, np.float64).ravel(), np.asarray(old, np.float64).ravel()
    if new.size < 3 or old.shape != new.shape or not np.all(np.isfinite(new)):
        return None
    tol = 1e-5 * (float(np.max(np.abs(new))) + 1e-6)
    fits, average = [], []
    for words, s in candidates:
        s = np.asarray(s, np.float64).ravel()
        if s.shape != new.shape or not np.all(np.isfinite(s)):
            continue
        d = s - old  # a weighted average first: new - old = b * (s - old), a = 1 - b
        if float(d @ d) > 0:
            b = float(d @ (new - old)) / float(d @ d)
            r = float(np.max(np.abs(old + b * d - new)))
            if r <= tol:
                average.append((r, (1.0 - b, b, words, s)))
                continue
        a_m = np.stack([old, s], 1)
        (a, b), *_ = np.linalg.lstsq(a_m, new, rcond=None)
        r = float(np.max(np.abs(a_m @ [a, b] - new)))
        if r <= tol:
            fits.append((r, (float(a), float(b), words, s)))
    if average or fits:  # the closest fit (candidates proportional to each other may all fit roughly)
        return min(average or fits, key=lambda f: f[0])[1]
    a_m = np.stack([old, np.ones_like(old)], 1)
    (a, c), *_ = np.linalg.lstsq(a_m, new, rcond=None)
    if np.max(np.abs(a_m @ [a, c] - new)) <= tol:
        return float(a), float(c), None, None
    return None


def _num(v: float) -> str:
    return f"{v:.4g}"


def _said(fit: tuple, old: str) -> str:
    a, b, words, _ = fit
    if words is None:
        return f"{_num(a)} * {old} + {_num(b)} (one number for every feature)"
    if abs(b) < 1e-9:
        return f"{old}, unchanged" if abs(a - 1) < 1e-6 else f"{_num(a)} * {old}"
    return f"{_num(a)} * {old} + {_num(b)} * {words}"


def _fraction(k: float) -> str:
    f = Fraction(k).limit_denominator(1000)
    if f.denominator > 1 and abs(float(f) - k) <= 1e-5 * abs(k):
        return f" = {f.numerator}/{f.denominator}"
    return ""


def _named(value: float, scalars: dict) -> str | None:
    """The argument whose value is ``value`` (``"momentum = 0.1"``)."""
    for name, v in scalars.items():
        if abs(v - value) <= 1e-6 * max(1.0, abs(v)):
            return f"{name} = {v:g}"
    return None


def average_fact(out, old_name: str, title: str, got, want, old, candidates: list, scalars: dict) -> str | None:
    """The running average ``out`` of the parameter ``old_name`` fitted for the answer (``got``)
    and the reference (``want``), said where they differ; ``scalars``: the call's number
    arguments (the weight the reference gives the statistic is named after the one it equals)."""
    fs, fr = fit_average(got, old, candidates), fit_average(want, old, candidates)
    if fs is None or fr is None:
        return None
    same_stat = fs[2] == fr[2]
    if same_stat and np.allclose(fs[:2], fr[:2], rtol=1e-3, atol=1e-6):
        return None
    text = f"your {out.name} is {_said(fs, old_name)}, where {title}'s is {_said(fr, old_name)}"
    a_s, b_s, a_r, b_r = fs[0], fs[1], fr[0], fr[1]
    if same_stat and fr[2] is not None and not np.isclose(a_r, b_r) and \
            np.isclose(a_s, b_r, rtol=1e-3) and np.isclose(b_s, a_r, rtol=1e-3):
        named = _named(b_r, scalars)
        return (f"{text}: the two weights are swapped"
                + (f" ({title} gives the new statistic the weight {named}, {old_name} the rest)" if named else ""))
    if not same_stat and fs[2] is not None and fr[2] is not None and np.allclose(fs[:2], fr[:2], rtol=1e-3):
        with np.errstate(all="ignore"):
            r = fr[3] / fs[3]
        r = r[np.isfinite(r)]
        if r.size and np.allclose(r, r[0], rtol=1e-4):
            k = float(np.median(r))
            return f"{text}: {title}'s statistic is yours times {k:.4g}{_fraction(k)}"
    return text


def mask_fact(name: str, title: str, got: np.ndarray, want: np.ndarray, real: np.ndarray, rtol: float,
              atol: float) -> str | None:
    """Where an output shaped ``[B, T, D]`` differs, when only at the padded positions
    (``real`` ``[B, T]``, False at padding): what the answer and the reference give there."""
    if got.ndim < 2 or got.shape[:-1] != real.shape or real.all():
        return None
    off = ~np.isclose(got, want, rtol=rtol, atol=atol)
    pad = ~real
    if off[real].any() or not off[pad].any():
        return None
    g, w = got[pad], want[pad]
    theirs = "0" if np.all(w == 0) else f"{float(w.min()):.3g} to {float(w.max()):.3g}"
    your = "your output" if name == "output" else f"your {name}"
    return (f"{your} differs from {title}'s only at the padded positions (mask False), where yours is "
            f"{float(g.min()):.3g} to {float(g.max()):.3g} and {title}'s is {theirs}")


def flag_fact(q, out, index: int | None, args: tuple, kwargs: dict, got: np.ndarray, want: np.ndarray,
              rtol: float, atol: float) -> str | None:
    """The answer's output ``out`` is the reference's with one bool argument flipped
    (``training``): ``"your y with training=False is BatchNorm's y with training=True"``.
    ``index``: the output's place in the reference's tuple (None: its only output)."""
    params = q.params
    flags = [(k, v) for k, v in kwargs.items() if isinstance(v, bool)]
    flags += [(p, a) for p, a in zip(params, args) if isinstance(a, bool)]
    for flag, value in flags:
        kw, ar = dict(kwargs), list(args)
        if flag in kw:
            kw[flag] = not value
        else:
            ar[params.index(flag)] = not value
        try:
            flipped = q.reference(*[_clone(a) for a in ar], **{k: _clone(v) for k, v in kw.items()})
        except Exception:  # noqa: BLE001 - a flip the reference refuses says nothing
            continue
        other = f64(flipped if index is None else flipped[index])
        if other is None or other.shape != got.shape or np.allclose(other, want, rtol=rtol, atol=atol):
            continue
        if np.allclose(got, other, rtol=rtol, atol=atol):
            name = "your output" if out.name == "output" else f"your {out.name}"
            theirs = f"{q.title}'s" if out.name == "output" else f"{q.title}'s {out.name}"
            return (f"{name} with {flag}={value} is {theirs} with {flag}={not value}: yours is computed as if "
                    f"{flag} were {not value}")
    return None


def _clone(a):
    return a.clone() if hasattr(a, "clone") else (a.copy() if isinstance(a, np.ndarray) else a)
