"""Probing: how an answer's output responds when one thing about its input changes, beside how
the reference's does.

A question declares which probes apply to it (by its signature: :data:`PROBES`), and each is
made on one case of its battery, chosen from the battery alone (never from the answer's
outputs), so the calls are the same whoever answers: grading's hand-back records them as it
records the battery's calls (:func:`normref.handback.probe`), and the grader replays them.

* ``element``: one element of ``x`` moved: which outputs change (the axes the statistics span);
* ``scale``, ``shift``: one token multiplied by 3, or 5 added to each of its features (a norm's
  invariances: RMSNorm's and LayerNorm's outputs do not change when a token is scaled,
  LayerNorm's not when it is shifted);
* ``weight``, ``bias``, ``alpha``, ``eps``: one parameter changed ("changing alpha does not
  change your output");
* ``double_x``, ``half_x``: the input doubled or halved (against doubling ``alpha``: does alpha
  multiply x?);
* ``saturate``: the input scaled up 100 times (where the output levels off);
* ``zero``, ``slope``: the input set to 0 and scaled down 100 times (how steeply the output rises
  near 0);
* ``upcast``: the float16 case's values in float32 (is the answer right there, so that the
  low precision is what fails?);
* ``param_dtype``: the first low-precision case with its weight and bias (float32 there) given
  in ``x``'s dtype: an answer whose output then comes back in ``x``'s dtype had its result in
  ``x``'s dtype before the float32 parameters entered it (a cast back undone by multiplying by
  the weight after it), so "cast back" is not the advice it needs.

:func:`run_probes` makes the calls; :func:`probe_facts` says, for each probe where the answer
and the reference respond differently, what the answer does, in the student's words.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["PROBES", "Probed", "run_probes", "probe_facts", "probes_for"]

#: Every probe, in the order it is made.
PROBES = ("element", "scale", "shift", "weight", "bias", "alpha", "double_x", "half_x", "eps", "saturate", "zero",
          "slope", "upcast", "param_dtype")


def probes_for(params: tuple, norm: bool) -> tuple:
    """The probes a signature gets: a norm's ``x`` its invariances, each parameter its change,
    ``alpha`` (a squashing function's) the saturation and slope, and every question with
    low-precision cases the upcast (and, with a weight or bias, those given in x's dtype)."""
    out = []
    if norm:
        out += ["element", "scale", "shift"]
    for p in ("weight", "bias", "alpha", "eps"):
        if p in params:
            out.append(p)
    if "alpha" in params:
        out += ["element", "double_x", "half_x", "saturate", "zero", "slope"]
    out.append("upcast")
    if "weight" in params or "bias" in params:
        out.append("param_dtype")
    return tuple(dict.fromkeys(o for o in PROBES if o in out))


def _f64(a) -> np.ndarray | None:
    from .._torch import is_tensor

    try:
        if is_tensor(a):
            import torch

            return a.detach().to("cpu", torch.float64).numpy()
        if isinstance(a, np.ndarray):
            return a.astype(np.float64)
    except Exception:  # noqa: BLE001 - an odd output is no measurement
        return None
    return None


def _copy(a):
    from .._torch import is_tensor

    return a.clone() if is_tensor(a) else (a.copy() if isinstance(a, np.ndarray) else a)


def _dtype(a) -> str:
    return str(getattr(a, "dtype", "")).replace("torch.", "")


@dataclass
class Probed:
    """One probe made: its base call and its changed call, the answer's and the reference's
    outputs on each (float64, or None where the answer raised or returned something else)."""

    probe: str
    base: tuple  # (args, kwargs)
    changed: tuple
    got0: np.ndarray | None
    got1: np.ndarray | None
    want0: np.ndarray
    want1: np.ndarray
    #: the battery case it was made on
    case: object = None
    #: the dtype of the answer's output on the changed call ("float16"; "" where it gave none)
    dtype1: str = ""


def _params_in_other_dtype(args: tuple, params: tuple) -> list[str]:
    """The weight and bias of one call (by the signature's names) whose dtype is not ``x``'s."""
    pos = {p: i for i, p in enumerate(params)}
    x = args[0]
    return [p for p in ("weight", "bias") if p in pos and pos[p] < len(args) and args[pos[p]] is not None
            and hasattr(args[pos[p]], "dtype") and _dtype(args[pos[p]]) != _dtype(x)]


def _base_case(battery: list, args_of: Callable, probe: str, params: tuple = ()):
    """The battery case a probe is made on (from the battery alone)."""
    def x_of(case):
        a, _ = args_of(case)
        return a[0]

    usable = [c for c in battery if getattr(x_of(c), "ndim", 0) >= 2]
    if probe == "upcast":
        return next((c for c in battery if _dtype(x_of(c)) == "float16"), None)
    if probe == "param_dtype":
        return next((c for c in battery if _dtype(x_of(c)) in ("float16", "bfloat16")
                     and _params_in_other_dtype(args_of(c)[0], params)), None)
    usable = [c for c in usable if _dtype(x_of(c)) in ("float32", "float64")]
    if not usable:
        return None
    if probe == "eps":  # where eps is felt: the smallest mean square against eps
        def felt(c):
            a, kw = args_of(c)
            x = _f64(a[0])
            return float(np.mean(x * x)) / max(float(kw.get("eps", 1e-6)), 1e-30)

        return min(usable, key=felt)
    return usable[0]


def _changed(probe: str, params: tuple, args: tuple, kwargs: dict):
    """The probe's change of one call's ``(args, kwargs)`` (copies), or None."""
    args = [_copy(a) for a in args]
    kwargs = dict(kwargs)
    pos = {p: i for i, p in enumerate(params)}
    x = args[0]
    if probe == "element":
        x[(0,) * x.ndim] += 1.0 + abs(float(x[(0,) * x.ndim]))
    elif probe == "scale":
        x[(0,) * (x.ndim - 1)] *= 3
    elif probe == "shift":
        x[(0,) * (x.ndim - 1)] += 5.0
    elif probe in ("weight", "bias", "alpha"):
        if probe not in pos or pos[probe] >= len(args) or args[pos[probe]] is None:
            return None
        p = args[pos[probe]]
        args[pos[probe]] = p * 2 if probe == "alpha" else p + 0.5
    elif probe == "eps":
        if "eps" not in kwargs:
            return None
        kwargs["eps"] = kwargs["eps"] * 100
    elif probe == "saturate":
        args[0] = x * 100
    elif probe == "zero":
        args[0] = x * 0
    elif probe == "slope":
        args[0] = x * 1e-2
    elif probe == "double_x":
        args[0] = x * 2
    elif probe == "half_x":
        args[0] = x * 0.5
    elif probe == "upcast":
        args[0] = x.float() if hasattr(x, "float") and not isinstance(x, np.ndarray) else x.astype(np.float32)
    elif probe == "param_dtype":
        names = _params_in_other_dtype(tuple(args), params)
        if not names:
            return None
        for p in names:
            a = args[pos[p]]
            args[pos[p]] = a.astype(x.dtype) if isinstance(a, np.ndarray) else a.to(x.dtype)
    return tuple(args), kwargs


#: Seconds of probes one check makes; later ones are left out (a slow answer's self-check stays
#: quick; grading replays its outputs, instantly, so it never runs short).
PROBES_BUDGET_S = 10.0


def run_probes(probes: tuple, params: tuple, battery: list, args_of: Callable, call: Callable,
               reference: Callable) -> list[Probed]:
    """Make each probe: the answer (``call(args, kwargs) -> output or None``, the checker's
    safe call) and the reference on its base case and on the changed case, in this order,
    for at most :data:`PROBES_BUDGET_S` seconds."""
    import time

    start = time.monotonic()
    out: list[Probed] = []
    bases: dict = {}  # one base call per case, shared by the probes made on it
    for probe in probes:
        if time.monotonic() - start > PROBES_BUDGET_S:
            break
        case = _base_case(battery, args_of, probe, params)
        if case is None:
            continue
        args, kwargs = args_of(case)
        changed = _changed(probe, params, args, kwargs)
        if changed is None:
            continue
        if probe in ("upcast", "param_dtype"):
            base = (tuple(args), dict(kwargs))
            got0 = None  # the battery's own call: its output is the case's
        else:
            base = (tuple(_copy(a) for a in args), dict(kwargs))
            if id(case) not in bases:
                bases[id(case)] = _f64(call(*base))
            got0 = bases[id(case)]
        out1 = call(*changed)  # call(args, kwargs)
        got1 = _f64(out1)
        try:
            want0, want1 = _f64(reference(*base[0], **base[1])), _f64(reference(*changed[0], **changed[1]))
        except Exception:  # noqa: BLE001 - a probe the reference cannot take says nothing
            continue
        out.append(Probed(probe, base, changed, got0, got1, want0, want1, case,
                          _dtype(out1) if got1 is not None else ""))
    return out


# --------------------------------------------------------------------------- what they show


def _moved(a: np.ndarray, b: np.ndarray, ref: np.ndarray) -> np.ndarray:
    tol = 1e-4 * (np.abs(ref) + 1.0)
    return np.abs(a - b) > tol


_AXIS = {3: ("the batch", "the sequence"), 2: ("the tokens",)}


def _element_fact(p: Probed, title: str) -> str | None:
    if p.got0 is None or p.got1 is None or p.got0.shape != p.want0.shape:
        return None
    ms, mr = _moved(p.got0, p.got1, p.want0), _moved(p.want0, p.want1, p.want0)
    if np.array_equal(ms, mr):
        return None
    nd = ms.ndim
    where = f"x[{', '.join('0' * nd).replace('00', '0, 0')}]" if nd else "x[0]"
    where = "x[" + ", ".join(["0"] * nd) + "]"
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


def _scale_fact(p: Probed, title: str, offset: np.ndarray | None) -> str | None:
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


def _shift_fact(p: Probed, title: str, kind: str | None) -> str | None:
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


def _param_fact(p: Probed, title: str, weight: np.ndarray | None) -> str | None:
    if p.got0 is None or p.got1 is None or p.got0.shape != p.want0.shape:
        return None
    ds, dr = p.got1 - p.got0, p.want1 - p.want0
    name = {"weight": "the weight (gamma)", "bias": "the bias (beta)"}.get(p.probe, p.probe)
    tol = 1e-4 * (np.abs(p.want0) + 1.0)
    if np.all(np.abs(dr) <= tol):
        return None
    if np.all(np.abs(ds) <= tol):
        return f"changing {name} does not change your output: yours does not use it"
    if np.allclose(ds, dr, rtol=1e-3, atol=1e-5):
        return None
    d = ds.shape[-1] if ds.ndim else 1
    rows_s, rows_r = ds.reshape(-1, d), dr.reshape(-1, d)
    if p.probe == "bias" and np.allclose(rows_s, rows_s[:1], rtol=1e-3, atol=1e-6):
        per = rows_s[0] / 0.5
        if weight is not None and np.allclose(per, weight, rtol=1e-3, atol=1e-6):
            return ("changing the bias by 0.5 changes your output by 0.5 * weight: your bias is multiplied by "
                    f"the weight, where {title} adds it after the weight, weight * xhat + bias")
        if np.allclose(per, -1, rtol=1e-3):
            return f"raising the bias by 0.5 lowers your output by 0.5: you subtract it, where {title} adds it"
    if p.probe == "bias" and not np.allclose(rows_s, rows_s[:1], rtol=1e-2, atol=1e-4):
        return (f"changing the bias changes your output by a different amount at each token: the bias enters "
                f"before something that depends on x, where {title} adds it last")
    if p.probe == "weight" and np.allclose(rows_s, rows_s[:1], rtol=1e-3, atol=1e-6) and \
            not np.allclose(rows_r, rows_r[:1], rtol=1e-3, atol=1e-6):
        return (f"changing the weight shifts your output by the same amount at every token: the weight is added, "
                f"where {title} multiplies by it")
    k = _token_factor(ds, dr)
    if k is not None:
        return f"your output responds to {name} {k:.3g} times as strongly as {title}'s"
    return None


def _alpha_fact(probed: list[Probed], title: str) -> str | None:
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


def _plateau_fact(p: Probed, title: str, weight) -> str | None:
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


def _slope_fact(probed: list[Probed], title: str) -> str | None:
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


def _eps_fact(p: Probed, title: str) -> str | None:
    if p.got0 is None or p.got1 is None:
        return None
    moved_r = not np.allclose(p.want0, p.want1, rtol=1e-4, atol=1e-6)
    moved_s = not np.allclose(p.got0, p.got1, rtol=1e-4, atol=1e-6)
    if moved_r and not moved_s:
        return "changing eps does not change your output: the eps you are given is not used"
    return None


def _saturate_fact(p: Probed, title: str) -> str | None:
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


def _upcast_fact(p: Probed, title: str, x16: np.ndarray, kind: str | None) -> str | None:
    if p.got1 is None or p.got1.shape != p.want1.shape:
        return None
    if not np.allclose(p.got1, p.want1, rtol=1e-4, atol=1e-4):
        return None
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


def dtype_advice(probed: list[Probed], params: tuple, backend: str = "torch") -> str | None:
    """The advice for an output of the wrong dtype where the ``param_dtype`` probe shows where
    that dtype comes from: given its weight and bias in ``x``'s dtype, the answer's output comes
    back in ``x``'s dtype, so the result was in ``x``'s dtype (cast back, or never upcast) before
    the parameters entered it; None otherwise (the registry's "cast back" stands)."""
    p = next((p for p in probed if p.probe == "param_dtype"), None)
    if p is None or not p.dtype1:
        return None
    x = p.base[0][0]
    xd = _dtype(x)
    if p.dtype1 != xd:
        return None
    names = _params_in_other_dtype(p.base[0], params)
    if not names:
        return None
    pos = {n: i for i, n in enumerate(params)}
    theirs = _dtype(p.base[0][pos[names[0]]])
    steps = " and ".join({"weight": f"multiplying by the {theirs} weight",
                          "bias": f"adding the {theirs} bias"}[n] for n in names)
    what = " and ".join(names)
    cast = ".astype(x.dtype)" if backend == "numpy" else ".to(x.dtype)"
    x64 = _f64(x)
    # on values whose squares overflow x's dtype, right values mean the statistics were computed in
    # float32 and the result cast back: the cast is there, and the step after it undoes it
    cast_back = (x64 is not None and xd == "float16" and float(np.max(x64 * x64)) > 65504 and p.got1 is not None
                 and p.got1.shape == p.want1.shape and np.allclose(p.got1, p.want1, rtol=2e-3, atol=2e-3))
    head = f"with the {what} given in x's dtype on the {xd} case, your output comes back {xd}: "
    also = f" (or cast {'them' if len(names) > 1 else 'it'} with " + " and ".join(f"{n}{cast}" for n in names) + ")"
    if cast_back:
        return (f"{head}your result is in x's dtype after your cast back to it, and {steps} makes it {theirs} "
                f"again: apply the {what} before casting back with {cast}{also}")
    return (f"{head}{steps} {'make' if len(names) > 1 else 'makes'} your result {theirs}: cast the result back "
            f"with {cast} after applying the {what}{also}")


def upcast_contradicts(probed: list[Probed]) -> object | None:
    """The float16 case where the answer is wrong on the same values in float32 too (so its
    low precision is not what fails there), or None."""
    for p in probed:
        if p.probe == "upcast" and p.got1 is not None and p.got1.shape == p.want1.shape \
                and not np.allclose(p.got1, p.want1, rtol=1e-3, atol=1e-3):
            return p.case
    return None


def probe_facts(probed: list[Probed], title: str, kind: str | None = None, params: tuple = ()) -> dict[str, tuple]:
    """``{probe: (what the answer does, the case it says it of or None for every case)}`` for
    every probe where the answer responds otherwise than the reference (``kind``:
    ``"rms"``/``"layer"`` for a norm's words; ``weight``/``bias``: the base case's, float64, to
    recognise a bias multiplied by the weight; ``params``: the signature's names, which say where
    the weight and bias are). The upcast's fact is the float16 case's alone."""
    facts: dict[str, tuple] = {}
    pos = {n: i for i, n in enumerate(params)}
    for p in probed:
        args = p.base[0]
        given = {n: args[i] for n, i in pos.items() if i < len(args) and args[i] is not None}
        w = _f64(given["weight"]) if "weight" in given else None
        b = None
        if kind == "layer" and "bias" in pos and pos["bias"] < len(args) and args[pos["bias"]] is not None:
            b = _f64(args[pos["bias"]])
        try:
            if p.probe == "element":
                f = _element_fact(p, title)
            elif p.probe == "scale":
                f = _scale_fact(p, title, b)
            elif p.probe == "shift":
                f = _shift_fact(p, title, kind)
            elif p.probe == "alpha":
                f = _alpha_fact(probed, title)
            elif p.probe in ("weight", "bias"):
                f = _param_fact(p, title, w)
            elif p.probe == "slope":
                f = _slope_fact(probed, title)
            elif p.probe == "eps":
                f = _eps_fact(p, title)
            elif p.probe == "saturate":
                f = _plateau_fact(p, title, w) or _saturate_fact(p, title)
            elif p.probe == "upcast":
                f = _upcast_fact(p, title, _f64(p.base[0][0]), kind)
            else:
                f = None
        except Exception:  # noqa: BLE001 - a measurement never breaks a check
            f = None
        if f:
            facts[p.probe] = (f, p.case if p.probe == "upcast" else None)
    return facts
