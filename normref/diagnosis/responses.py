"""What the probes show (:mod:`.probes` makes them): for each probe where the answer responds
otherwise than the reference, what the answer does, in the student's words. Each function reads
one :class:`.probes.Probed` (or all of them) and returns a sentence or None.
"""
from __future__ import annotations

import math

import numpy as np

from .spans import f64 as _f64
from .spans import element_words
from .spans import moved as _moved

_AXIS = {3: ("the batch", "the sequence"), 2: ("the tokens",)}


def _element_fact(p, title: str, name: str = "output", real: np.ndarray | None = None) -> str | None:
    """Which outputs moving ``x[0, ..., 0]`` changes, the answer's against the reference's. Where
    the reference's change stays within that token (a per-token norm, or one element), the
    sentences say the answer's statistics against the token's d features; where the reference's
    reach other tokens (statistics across the batch), both moved sets are said in words
    (:func:`.spans.element_words`). ``name``: the probed output's name; ``real``: the base
    case's real tokens (a masked question)."""
    if p.got0 is None or p.got1 is None or p.got0.shape != p.want0.shape:
        return None
    ms, mr = _moved(p.got0, p.got1, p.want0), _moved(p.want0, p.want1, p.want0)
    if np.array_equal(ms, mr):
        return None
    nd = ms.ndim
    where = "x[" + ", ".join(["0"] * nd) + "]"
    ref_other = mr.copy()
    if nd:
        ref_other[(0,) * (nd - 1)] = False
    if nd >= 2 and ref_other.any():  # the reference's statistics reach beyond one token: measured, in words
        return element_words(ms, mr, where, title, name, real)
    own = np.zeros_like(ms)
    own[(0,) * nd] = True
    other_tokens = ms.copy()
    other_tokens[(0,) * (nd - 1)] = False
    if other_tokens.any():
        axes = [a for a in range(nd - 1) if np.any(np.moveaxis(other_tokens, a, 0)[1:])]
        names = _AXIS.get(nd, ())
        said = ", ".join(f"axis {a}" + (f" ({names[a]})" if a < len(names) else "") for a in axes)
        return (f"moving one element, {where}, changes your outputs of other tokens too (along {said}): "
                f"your statistics span {said}, where {title}'s span only the d features of one token")
    if np.array_equal(ms, own) and mr.sum() > 1:
        return (f"moving one element, {where}, changes only that element of your output: nothing else of "
                f"the token depends on it, where {title} takes statistics over the token's d features")
    if mr.sum() == 1 and ms.sum() > 1:
        return (f"moving one element, {where}, changes {int(ms.sum())} of your outputs, where {title}'s "
                "output at each position depends only on that element")
    return None


def _token_factor(a: np.ndarray, b: np.ndarray) -> float | None:
    a, b = a.ravel(), b.ravel()
    bb = float(b @ b)
    if bb < 1e-20:
        return None
    k = float(a @ b) / bb
    return k if np.allclose(a, k * b, rtol=1e-3, atol=1e-6) else None


def _scale_fact(p, title: str, offset: np.ndarray | None) -> str | None:
    if p.got0 is None or p.got1 is None or p.got0.shape != p.want0.shape:
        return None
    t0 = (0,) * (p.got0.ndim - 1)
    off = 0.0 if offset is None else offset
    still_ref = np.allclose(p.want0[t0], p.want1[t0], rtol=1e-3, atol=1e-5)
    still_got = np.allclose(p.got0[t0], p.got1[t0], rtol=1e-3, atol=1e-5)
    if not still_ref or still_got:
        return None
    k = _token_factor(p.got1[t0] - off, p.got0[t0] - off)
    if k is None or k <= 0:
        return (f"multiplying one token by 3 changes your output for it, where {title}'s stays the same "
                "(it divides the token by its own scale)")
    power = math.log(k) / math.log(3)
    why = {1: "nothing divides it by the token's scale", 2: "you multiply by the token's scale instead of dividing",
           -1: "you divide by the square of the scale (a mean square or variance without the square root)"}
    r = round(power)
    words = why.get(r) if abs(power - r) < 0.02 else None
    return (f"multiplying one token by 3 multiplies your output for it by {k:.3g}"
            + (f" = 3^{r}: {words}" if words else "") + f", where {title}'s stays the same")


def _shift_fact(p, title: str, kind: str | None) -> str | None:
    if p.got0 is None or p.got1 is None or p.got0.shape != p.want0.shape:
        return None
    t0 = (0,) * (p.got0.ndim - 1)
    still_ref = np.allclose(p.want0[t0], p.want1[t0], rtol=1e-3, atol=1e-5)
    still_got = np.allclose(p.got0[t0], p.got1[t0], rtol=1e-3, atol=1e-5)
    if still_ref and not still_got:
        return (f"adding 5 to every feature of one token changes your output for it, where {title}'s stays "
                "the same: it subtracts the token's mean")
    if still_got and not still_ref:
        return (f"adding 5 to every feature of one token leaves your output unchanged: you subtract the mean, "
                f"where {title} does not")
    return None


def _param_fact(p, title: str, weight: np.ndarray | None, output: str = "output") -> str | None:
    if p.got0 is None or p.got1 is None or p.got0.shape != p.want0.shape:
        return None
    ds, dr = p.got1 - p.got0, p.want1 - p.want0
    name = {"weight": "the weight (gamma)", "bias": "the bias (beta)"}.get(p.probe, p.probe)
    tol = 1e-4 * (np.abs(p.want0) + 1.0)
    if np.all(np.abs(dr) <= tol):
        return None
    your = "your output" if output == "output" else f"your {output}"
    if np.all(np.abs(ds) <= tol):
        return f"changing {name} does not change {your}: yours does not use it"
    if np.allclose(ds, dr, rtol=1e-3, atol=1e-5):
        return None
    d = ds.shape[-1] if ds.ndim else 1
    rows_s, rows_r = ds.reshape(-1, d), dr.reshape(-1, d)
    if p.probe == "bias" and np.allclose(rows_s, rows_s[:1], rtol=1e-3, atol=1e-6):
        per = rows_s[0] / 0.5
        if weight is not None and np.allclose(per, weight, rtol=1e-3, atol=1e-6):
            return (f"changing the bias by 0.5 changes {your} by 0.5 * weight: your bias is multiplied by "
                    f"the weight, where {title} adds it after the weight, weight * xhat + bias")
        if np.allclose(per, -1, rtol=1e-3):
            return f"raising the bias by 0.5 lowers {your} by 0.5: you subtract it, where {title} adds it"
    if p.probe == "bias" and not np.allclose(rows_s, rows_s[:1], rtol=1e-2, atol=1e-4):
        return (f"changing the bias changes {your} by a different amount at each token: the bias enters "
                f"before something that depends on x, where {title} adds it last")
    if p.probe == "weight" and np.allclose(rows_s, rows_s[:1], rtol=1e-3, atol=1e-6) and \
            not np.allclose(rows_r, rows_r[:1], rtol=1e-3, atol=1e-6):
        return (f"changing the weight shifts {your} by the same amount at every token: the weight is added, "
                f"where {title} multiplies by it")
    k = _token_factor(ds, dr)
    if k is not None:
        return f"{your} responds to {name} {k:.3g} times as strongly as {title}'s"
    return None


def _alpha_fact(probed: list, title: str) -> str | None:
    """What doubling alpha does, against doubling or halving x (in DyT, tanh(alpha * x):
    doubling alpha is doubling x)."""
    by = {p.probe: p for p in probed}
    a, dx, hx = by.get("alpha"), by.get("double_x"), by.get("half_x")
    if a is None or a.got0 is None or a.got1 is None:
        return None
    if np.allclose(a.got0, a.got1, rtol=1e-4, atol=1e-6) and not np.allclose(a.want0, a.want1, rtol=1e-4, atol=1e-6):
        return "changing alpha does not change your output: yours does not use it"
    if dx is not None and dx.got1 is not None and np.allclose(a.got1, dx.got1, rtol=1e-3, atol=1e-5):
        return None  # alpha multiplies x, as it should
    if hx is not None and hx.got1 is not None and np.allclose(a.got1, hx.got1, rtol=1e-3, atol=1e-5):
        return (f"doubling alpha does to your output what halving x does: your alpha divides x, where {title} "
                "multiplies x by alpha")
    if dx is not None and dx.got1 is not None:
        return (f"doubling alpha changes your output otherwise than doubling x does: in yours alpha is not the factor "
                f"of x, where {title} computes tanh(alpha * x)")
    return None


def _plateau_fact(p, title: str, weight) -> str | None:
    """Where the output levels off on large inputs, feature by feature, against ``+-weight``."""
    if p.got1 is None or p.got1.shape != p.want1.shape or weight is None or p.got1.ndim < 2:
        return None
    d = p.got1.shape[-1]
    g, r = p.got1.reshape(-1, d), p.want1.reshape(-1, d)
    if np.allclose(g, r, rtol=2e-2, atol=2e-2):
        return None
    half_g, half_r = (g.max(0) - g.min(0)) / 2, (r.max(0) - r.min(0)) / 2
    both = np.isclose(half_r, np.abs(weight), rtol=5e-2)  # features that saturate on both sides
    if both.sum() < max(2, d // 2):
        return None
    half_g, weight = half_g[both], np.abs(weight[both])
    if np.allclose(half_g, 1.0, rtol=2e-2) and not np.allclose(weight, 1.0, rtol=2e-2):
        return (f"where the input is large your output levels off at +-1 around the bias, where {title}'s levels off "
                "at +-weight: the weight does not multiply tanh's output")
    if np.allclose(half_g, np.abs(weight), rtol=2e-2):
        return None
    return None


def _slope_fact(probed: list, title: str) -> str | None:
    """How steeply the output rises near 0, feature by feature: ``(out(x/100) - out(0)) / (x/100)``
    against the reference's (DyT: weight * alpha)."""
    by = {p.probe: p for p in probed}
    z, sl = by.get("zero"), by.get("slope")
    if z is None or sl is None or z.got1 is None or sl.got1 is None or sl.got1.shape != sl.want1.shape:
        return None
    xs = _f64(sl.changed[0][0])
    if xs is None or xs.ndim < 2:
        return None
    d = xs.shape[-1]
    xs = xs.reshape(-1, d)
    ds, dr = (sl.got1 - z.got1).reshape(-1, d), (sl.want1 - z.want1).reshape(-1, d)
    xx = (xs * xs).sum(0)
    if np.any(xx < 1e-12):
        return None
    slope_s, slope_r = (ds * xs).sum(0) / xx, (dr * xs).sum(0) / xx
    if np.allclose(slope_s, slope_r, rtol=2e-2, atol=1e-4):
        return None
    k = slope_s / np.where(np.abs(slope_r) > 1e-12, slope_r, np.nan)
    if np.all(np.isfinite(k)) and np.allclose(k, k[0], rtol=2e-2):
        return (f"near x = 0 your output rises {k[0]:.3g} times as steeply as {title}'s (whose slope there is "
                "weight * alpha)")
    return (f"near x = 0 your output's slope per feature is {float(slope_s.min()):.3g} to {float(slope_s.max()):.3g}, "
            f"where {title}'s is weight * alpha, {float(slope_r.min()):.3g} to {float(slope_r.max()):.3g}")


def _eps_fact(p, title: str) -> str | None:
    if p.got0 is None or p.got1 is None:
        return None
    moved_r = not np.allclose(p.want0, p.want1, rtol=1e-4, atol=1e-6)
    moved_s = not np.allclose(p.got0, p.got1, rtol=1e-4, atol=1e-6)
    if moved_r and not moved_s:
        return "changing eps does not change your output: the eps you are given is not used"
    return None


def _saturate_fact(p, title: str) -> str | None:
    if p.got1 is None or p.got1.shape != p.want1.shape:
        return None
    gs, gr = float(np.max(np.abs(p.got1))), float(np.max(np.abs(p.want1)))
    if not np.isfinite(gs):
        return None
    if gs > 10 * gr:
        return (f"your output does not level off: on the input times 100 it reaches {gs:.3g}, where {title}'s "
                f"stays within {gr:.3g} (tanh bounds it by weight + bias)")
    if np.allclose(p.got1, p.want1, rtol=2e-2, atol=2e-2):
        return None
    return (f"where the input is large your output levels off at up to {gs:.3g}, where {title}'s levels off at "
            f"up to {gr:.3g} (weight + bias)")


def _upcast_fact(p, title: str, x16: np.ndarray, kind: str | None, output: str = "output",
                 span: tuple | None = None) -> str | None:
    """On the float16 case's values in float32 the answer is right: the float16 step that
    overflows, said of the statistics' own axes. ``span``: ``(axes, words)`` of the reference's
    statistics where the ``element`` probe measured them beyond one token (else the last axis)."""
    if p.got1 is None or p.got1.shape != p.want1.shape:
        return None
    if not np.allclose(p.got1, p.want1, rtol=1e-4, atol=1e-4):
        return None
    your = "your output" if output == "output" else f"your {output}"
    if span is not None and kind is None:
        what = _overflow_words(x16, *span)
        return (f"on the same values in float32 {your} is right, so the float16 computation is what fails: {what}; "
                "compute the statistics in float32 and cast back")
    centred = kind == "layer"
    v = x16 - x16.mean(-1, keepdims=True) if centred else x16
    name = "(x - mean)**2" if centred else "x**2"
    sq = float(np.max(v * v))
    d = x16.shape[-1]
    step = None
    if sq > 65504:
        step = f"{name} (up to {sq:.6g}) overflows float16, whose largest number is 65504"
    elif float(np.max((v * v).sum(-1))) > 65504:
        top = float(np.max((v * v).sum(-1)))
        step = f"the sum of {name} over the d = {d} features (up to {top:.6g}) overflows float16"
    what = step or "float16's 11 bits of precision lose the statistics"
    return (f"on the same values in float32 your output is right, so the float16 computation is what fails: {what}; "
            "compute the statistics in float32 and cast back")


def _overflow_words(x16: np.ndarray, axes: tuple, over: str) -> str:
    """What overflows float16 (largest 65504) in statistics over ``axes`` of ``x16`` (said as
    ``over``): the squares, each, or their sum; said of the values, both ways of computing a
    variance (``x**2``, ``(x - mean)**2``), never of which one the code took."""
    c = x16 - x16.mean(axis=axes, keepdims=True)
    sq_x, sq_c = float(np.max(x16 * x16)), float(np.max(c * c))
    if sq_c > 65504:
        return (f"squaring overflows float16, whose largest number is 65504: (x - mean)**2, the mean over {over}, "
                f"reaches {sq_c:.6g}, and x**2 {sq_x:.6g}")
    if sq_x > 65504:
        return f"x**2 (up to {sq_x:.6g}) overflows float16, whose largest number is 65504"
    top = float(np.max((c * c).sum(axis=axes)))
    if top > 65504:
        return f"the sum of (x - mean)**2 over {over} (up to {top:.6g}) overflows float16"
    return "float16's 11 bits of precision lose the statistics"
