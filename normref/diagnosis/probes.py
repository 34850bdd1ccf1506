"""Probing: how an answer's output responds when one thing about its input changes, beside how
the reference's does.

A question declares which probes apply to it (by its signature: :data:`PROBES`), and each is
made on one case of its battery, chosen from the battery alone (never from the answer's
outputs), so the calls are the same whoever answers: grading's hand-back records them as it
records the battery's calls (:func:`normref.handback.probe`), and the grader replays them.

* ``element``: one element of ``x`` moved: which outputs change (the axes the statistics span,
  the answer's against the reference's, :mod:`.spans`);
* ``pad``: the padded tokens' values moved (a question that declares a mask): do the answer's
  outputs at the real tokens follow them (does padding enter its statistics)?
* ``scale``, ``shift``: one token multiplied by 3, or 5 added to each of its features (a norm's
  invariances: RMSNorm's and LayerNorm's outputs do not change when a token is scaled,
  LayerNorm's not when it is shifted);
* ``weight``, ``bias``, ``alpha``, ``eps``: one parameter changed ("changing alpha does not
  change your output"); any other parameter of the signature named as a probe (a running
  average, ``running_mean``) is changed likewise, on the first case where that changes the
  reference's output;
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
and the reference respond differently, what the answer does, in the student's words. An answer
of several outputs is probed on one of them (``pick``: the first declared output whose rows are
tokens), named in the sentences ("your y").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .responses import (_alpha_fact, _element_fact, _eps_fact, _param_fact, _plateau_fact, _saturate_fact,
                        _scale_fact, _shift_fact, _slope_fact, _upcast_fact)
from .spans import f64 as _f64
from .spans import moved as _moved
from .spans import pad_fact, real_tokens, span_words

__all__ = ["PROBES", "Probed", "run_probes", "probe_facts", "probes_for"]

#: Every probe, in the order it is made.
PROBES = ("element", "pad", "scale", "shift", "weight", "bias", "alpha", "double_x", "half_x", "eps", "saturate",
          "zero", "slope", "upcast", "param_dtype")


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


def _base_case(battery: list, args_of: Callable, probe: str, params: tuple = (), mask: str | None = None):
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
    if probe == "pad":  # the first case with padding
        def padded(c):
            real = real_tokens(*args_of(c), params, mask)
            return real is not None and not real.all() and real.any()

        return next((c for c in usable if padded(c)), None)
    if probe == "eps":  # where eps is felt: the smallest mean square against eps
        def felt(c):
            a, kw = args_of(c)
            x = _f64(a[0])
            return float(np.mean(x * x)) / max(float(kw.get("eps", 1e-6)), 1e-30)

        return min(usable, key=felt)
    return usable[0]


def _changed(probe: str, params: tuple, args: tuple, kwargs: dict, mask: str | None = None):
    """The probe's change of one call's ``(args, kwargs)`` (copies), or None."""
    args = [_copy(a) for a in args]
    kwargs = {k: _copy(v) for k, v in kwargs.items()}
    pos = {p: i for i, p in enumerate(params)}
    x = args[0]
    if probe == "pad":
        real = real_tokens(tuple(args), kwargs, params, mask)
        if real is None or real.all():
            return None
        if isinstance(x, np.ndarray):
            x[~real] += 7.0
        else:
            import torch

            x[torch.as_tensor(~real)] += 7.0
    elif probe == "element":
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
    elif probe in PROBES:
        pass
    elif probe in kwargs and hasattr(kwargs[probe], "shape"):  # any other parameter, by keyword
        kwargs[probe] = kwargs[probe] + 0.5
    elif probe in pos and pos[probe] < len(args) and hasattr(args[pos[probe]], "shape"):
        args[pos[probe]] = args[pos[probe]] + 0.5
    else:
        return None
    return tuple(args), kwargs


#: Seconds of probes one check makes; later ones are left out (a slow answer's self-check stays
#: quick; grading replays its outputs, instantly, so it never runs short).
PROBES_BUDGET_S = 10.0


def _responds(reference: Callable, pick: Callable, case, args_of: Callable, probe: str, params: tuple) -> bool:
    """Whether changing the parameter ``probe`` on ``case`` changes the reference's output."""
    args, kwargs = args_of(case)
    changed = _changed(probe, params, args, kwargs)
    if changed is None:
        return False
    try:
        a = pick(reference(*[_copy(v) for v in args], **{k: _copy(v) for k, v in kwargs.items()}))
        b = pick(reference(*changed[0], **changed[1]))
    except Exception:  # noqa: BLE001 - a case the reference cannot take is no base
        return False
    return a is not None and b is not None and a.shape == b.shape and not np.allclose(a, b, rtol=1e-4, atol=1e-6)


def run_probes(probes: tuple, params: tuple, battery: list, args_of: Callable, call: Callable,
               reference: Callable, pick: Callable | None = None, mask: str | None = None) -> list[Probed]:
    """Make each probe: the answer (``call(args, kwargs) -> output or None``, the checker's
    safe call) and the reference on its base case and on the changed case, in this order,
    for at most :data:`PROBES_BUDGET_S` seconds. ``pick(output) -> float64 array or None``: the
    output probed, of an answer of several (default: the output itself); ``mask``: the
    parameter marking real tokens (the ``pad`` probe's). A probe named after a parameter of
    the signature other than ``weight``, ``bias``, ``alpha`` and ``eps`` is made on the first
    case where changing that parameter changes the reference's output (chosen from the battery
    and the reference alone, so grading replays the same calls)."""
    import time

    pick = _f64 if pick is None else pick
    start = time.monotonic()
    out: list[Probed] = []
    bases: dict = {}  # one base call per case, shared by the probes made on it
    for probe in probes:
        if time.monotonic() - start > PROBES_BUDGET_S:
            break
        if probe in PROBES:
            case = _base_case(battery, args_of, probe, params, mask)
        else:  # another parameter of the signature: where the reference's output follows it
            case = next((c for c in battery if getattr(args_of(c)[0][0], "ndim", 0) >= 2 and
                         _dtype(args_of(c)[0][0]) in ("float32", "float64") and
                         _responds(reference, pick, c, args_of, probe, params)), None)
        if case is None:
            continue
        args, kwargs = args_of(case)
        changed = _changed(probe, params, args, kwargs, mask)
        if changed is None:
            continue
        if probe in ("upcast", "param_dtype"):
            base = (tuple(args), dict(kwargs))
            got0 = None  # the battery's own call: its output is the case's
        else:
            base = (tuple(_copy(a) for a in args), dict(kwargs))
            if id(case) not in bases:
                bases[id(case)] = pick(call(*base))
            got0 = bases[id(case)]
        out1 = call(*changed)  # call(args, kwargs)
        got1 = pick(out1)
        try:
            want0, want1 = pick(reference(*base[0], **base[1])), pick(reference(*changed[0], **changed[1]))
        except Exception:  # noqa: BLE001 - a probe the reference cannot take says nothing
            continue
        if want0 is None or want1 is None:
            continue
        out.append(Probed(probe, base, changed, got0, got1, want0, want1, case,
                          _dtype(_first(out1, pick)) if got1 is not None else ""))
    return out


def _first(out, pick: Callable):
    """The probed output itself (for its dtype): the one of a tuple that ``pick`` reads."""
    if isinstance(out, (tuple, list)):
        for o in out:
            v = _f64(o)
            if v is not None and np.array_equal(v, pick(out), equal_nan=True):
                return o
        return None
    return out


def _reference_span(probed: list[Probed], real: np.ndarray | None) -> tuple | None:
    """``(axes, words)`` the reference's statistics span, read from the ``element`` probe where
    they reach beyond one token (None where they stay within it, or nothing was probed)."""
    p = next((p for p in probed if p.probe == "element"), None)
    if p is None or p.want0.ndim < 2:
        return None
    mr = _moved(p.want0, p.want1, p.want0)
    k = mr.any(-1)
    if k.sum() <= 1:
        return None
    words = span_words(mr, real)
    if words is None:
        return None
    axes = tuple(a for a in range(k.ndim) if np.moveaxis(k, a, 0)[1:].any())
    if mr.reshape(-1, mr.shape[-1]).any(0).sum() > 1:
        axes += (mr.ndim - 1,)
    return axes, words


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


def probe_facts(probed: list[Probed], title: str, kind: str | None = None, params: tuple = (),
                output: str = "output", mask: str | None = None) -> dict[str, tuple]:
    """``{probe: (what the answer does, the case it says it of or None for every case)}`` for
    every probe where the answer responds otherwise than the reference (``kind``:
    ``"rms"``/``"layer"`` for a norm's words; ``weight``/``bias``: the base case's, float64, to
    recognise a bias multiplied by the weight; ``params``: the signature's names, which say where
    the weight and bias are; ``output``: the probed output's name, ``mask``: the parameter
    marking real tokens). The upcast's fact is the float16 case's alone; a parameter probed
    where the reference's output follows it (:func:`run_probes`) is said of that case alone."""
    facts: dict[str, tuple] = {}
    pos = {n: i for i, n in enumerate(params)}
    element = next((p for p in probed if p.probe == "element"), None)
    span = _reference_span(probed, real_tokens(*element.base, params, mask)) if element is not None else None
    for p in probed:
        args = p.base[0]
        given = {n: args[i] for n, i in pos.items() if i < len(args) and args[i] is not None}
        w = _f64(given["weight"]) if "weight" in given else None
        b = None
        if kind == "layer" and "bias" in pos and pos["bias"] < len(args) and args[pos["bias"]] is not None:
            b = _f64(args[pos["bias"]])
        try:
            if p.probe == "element":
                f = _element_fact(p, title, output, real_tokens(*p.base, params, mask))
            elif p.probe == "pad":
                real = real_tokens(*p.base, params, mask)
                f = None if real is None else pad_fact(p.got0, p.got1, p.want0, p.want1, real, title, output)
            elif p.probe == "scale":
                f = _scale_fact(p, title, b)
            elif p.probe == "shift":
                f = _shift_fact(p, title, kind)
            elif p.probe == "alpha":
                f = _alpha_fact(probed, title)
            elif p.probe in ("weight", "bias") or p.probe not in PROBES:
                f = _param_fact(p, title, w, output)
            elif p.probe == "slope":
                f = _slope_fact(probed, title)
            elif p.probe == "eps":
                f = _eps_fact(p, title)
            elif p.probe == "saturate":
                f = _plateau_fact(p, title, w) or _saturate_fact(p, title)
            elif p.probe == "upcast":
                f = _upcast_fact(p, title, _f64(p.base[0][0]), kind, output, span)
            else:
                f = None
        except Exception:  # noqa: BLE001 - a measurement never breaks a check
            f = None
        if f:
            facts[p.probe] = (f, p.case if p.probe == "upcast" or p.probe not in PROBES else None)
    return _unused_together(facts)


def _unused_together(facts: dict[str, tuple]) -> dict[str, tuple]:
    """Parameters probed on one case (not in :data:`PROBES`) that the answer's output does not
    use, said in one sentence: ``changing running_mean or running_var does not change your y:
    yours uses neither``."""
    unused = {k: v for k, v in facts.items() if k not in PROBES and v[0].endswith(": yours does not use it")}
    by_case: dict = {}
    for k, (f, case) in unused.items():
        by_case.setdefault(id(case), []).append((k, f, case))
    out = dict(facts)
    for group in by_case.values():
        if len(group) < 2:
            continue
        names = [k for k, _, _ in group]
        tail = group[0][1].split(" does not change ", 1)[1].split(":", 1)[0]
        for k in names[1:]:
            del out[k]
        both = "neither" if len(names) == 2 else "none of them"
        out[names[0]] = (f"changing {' or '.join(names)} does not change {tail}: yours uses {both}", group[0][2])
    return out
