"""The functional norms: :func:`check_rms_norm` and :func:`check_layer_norm`, their seeded
battery, and the fault models that name a wrong output's cause (dividing by n-1, eps outside
the square root, the wrong axis, a dropped keepdim, float16 statistics, ...)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from ..diagnosis.questions import Question, declare
from ..functional import LAYER_NORM_EPS, RMS_NORM_EPS, layer_norm, rms_norm
from ..rules import NORM_REFERENCE
from .compare import best_model, compare_array, constant_ratio, dtype_name, to_f64
from .core import (CaseResult, CheckResult, backend_of, msg, quick_cut, run, seeded_randn, single_threaded,
    student_call)

# --------------------------------------------------------------------------- fault models
# Each model returns what an implementation with that one fault outputs on this input, or
# None where the fault cannot be expressed (e.g. it would raise).


def _t(a):
    import torch

    return a if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a))


def model_t(kind: str, xt, wt, bt, eps, *, ddof=0, eps_out=False, axis=-1, keepdim=True,
            own_centring=False, low_precision=False, centered=None, use_weight=True,
            use_bias=True):
    """A LayerNorm (``kind="layer"``) or RMSNorm (``"rms"``) with one fault, in torch.

    ``keepdim=False`` drops the reduced axis everywhere, so the statistics broadcast against
    the trailing axes; with ``own_centring`` the variance is centred correctly first (as
    ``torch.var(dim=-1)`` does) and only the subtraction/division broadcast wrongly.
    Returns a tensor of ``xt``'s shape and dtype, or None where the fault raises.
    """
    import torch

    cdt = xt.dtype if low_precision else (torch.float64 if xt.dtype == torch.float64 else torch.float32)
    h = xt.to(cdt)
    c = centered if centered is not None else (kind == "layer")
    d = h.shape[axis]
    try:
        hc = h - h.mean(dim=axis, keepdim=keepdim) if c else h
        hs = (h - h.mean(dim=axis, keepdim=True) if c else h) if own_centring else hc
        ms = hs.pow(2).sum(dim=axis, keepdim=keepdim) / (d - ddof)
        scale = 1.0 / (ms.sqrt() + eps) if eps_out else (ms + eps).rsqrt()
        y = hc * scale
    except (RuntimeError, ZeroDivisionError):
        return None
    if wt is not None and use_weight:
        y = y * wt.to(cdt)
    if bt is not None and use_bias:
        y = y + bt.to(cdt)
    if tuple(y.shape) != tuple(xt.shape):
        return None
    return y.to(xt.dtype)


def model(kind: str, x, weight, bias, eps, **kw):
    """:func:`model_t` on any arrays; the output as float64 numpy, or None."""
    import torch

    y = model_t(kind, _t(x), None if weight is None else _t(weight),
                None if bias is None else _t(bias), eps, **kw)
    return None if y is None else y.detach().to(torch.float64).numpy()


def _fault_kwargs(kind: str, x, weight, bias) -> Iterator[tuple[str, dict]]:
    """(fault, model keyword arguments) for every fault expressible on this input."""
    nd = x.ndim
    yield "unbiased_variance", {"ddof": 1}
    yield "eps_outside_sqrt", {"eps_out": True}
    yield "no_eps", {"eps": 0.0}
    for ax in range(nd - 1):
        yield "wrong_axis", {"axis": ax}
    if nd >= 2:
        yield "missing_keepdim", {"keepdim": False}
        if kind == "layer":
            yield "missing_keepdim", {"keepdim": False, "own_centring": True}
    if dtype_name(x) in ("float16", "bfloat16"):
        yield "low_precision_stats", {"low_precision": True}
    if kind == "rms":
        yield "subtracts_mean", {"centered": True}
    else:
        yield "not_centered", {"centered": False}
    if weight is not None:
        yield "ignores_weight", {"use_weight": False}
    if bias is not None:
        yield "ignores_bias", {"use_bias": False}


def fault_models(kind: str, x, weight, bias, eps):
    """Yield ``(fault, output f64, None)`` for every fault that is expressible on this input
    (``kind``: ``"layer"`` or ``"rms"``; ``x`` ``[..., D]``, numpy or torch)."""
    for fault, kw in _fault_kwargs(kind, x, weight, bias):
        kw = dict(kw)
        e = kw.pop("eps", eps)
        yield fault, model(kind, x, weight, bias, e, **kw), None


def _norm_hint(fault: str, d: int, backend: str, g=None, want=None, bias=None, kind: str = "layer") -> str:
    """The fault's sentence (in ``kind``'s words: RMSNorm has no variance); for n-1, with the
    factor when the output shows it (it does unless eps dominates the variance)."""
    hint = msg(fault, backend, kind)
    if fault == "unbiased_variance" and g is not None:
        b = 0.0 if bias is None else to_f64(bias)
        c, k = constant_ratio(g - b, want - b), math.sqrt((d - 1) / d)
        if c is not None and abs(c - k) < 1e-2 * k:
            hint = f"your normalised values are the reference's times {k:.3f} = sqrt({d - 1}/{d}): " + hint
    return hint


def _overflowing_row(x, g, want, rtol, atol, bias=None) -> str | None:
    """``"row r (x**2 up to 90000, above float16's largest 65504) is wrong: "`` when a wrong
    row of a float16 input is one whose squares overflow float16 and whose output shows the
    overflow: an infinite statistic, so every output is ``bias`` (x / inf = 0) or not finite
    (torch's ``x.var`` of a float16 tensor and ``(x**2).mean()`` both give inf there); else None."""
    if dtype_name(x) != "float16":
        return None
    x64 = to_f64(x).reshape(-1, x.shape[-1])
    rows_g, rows_w = g.reshape(x64.shape), want.reshape(x64.shape)
    b = np.zeros(x64.shape[-1]) if bias is None else np.broadcast_to(to_f64(bias), x64.shape[-1:])
    for r, (xr, gr, wr) in enumerate(zip(x64, rows_g, rows_w)):
        sq = float(np.max(xr**2))
        shows = bool(np.all(~np.isfinite(gr)) or np.allclose(gr, b, rtol=rtol, atol=atol))
        if sq > 65504.0 and shows and not np.allclose(gr, wr, rtol=rtol, atol=atol):
            return f"row {r} (x**2 up to {sq:g}, above float16's largest {65504}) is wrong: "
    return None


def diagnose_norm(kind: str, x, weight, bias, eps, g, want, rtol, atol) -> tuple[str, str]:
    """(fault, hint) for a wrong norm output ``g`` (float64) against ``want``."""
    backend = backend_of(x)
    d = x.shape[-1]
    flat_g = g.reshape(-1, d)
    if not np.all(np.isfinite(g)) and np.all(np.isfinite(want)):
        flat_x = to_f64(x).reshape(-1, d)
        bad_rows = ~np.all(np.isfinite(flat_g), axis=-1)
        constant = np.ptp(flat_x, axis=-1) == 0
        if np.any(bad_rows & constant):
            row = int(np.argmax(bad_rows & constant))
            return "nan_on_constant_row", (f"NaN/inf on the constant row {row}: "
                                           + msg("nan_on_constant_row", backend, kind))
    found = best_model(g, want, fault_models(kind, x, weight, bias, eps), rtol, atol)
    if found is not None:
        return found[0], _norm_hint(found[0], d, backend, g, want, bias, kind)
    overflow = _overflowing_row(x, g, want, rtol, atol, bias)
    if overflow is not None:
        return "low_precision_stats", overflow + msg("low_precision_stats", backend)
    if not np.all(np.isfinite(g)):
        return "returns_nan", msg("returns_nan", backend)
    c = constant_ratio(g, want)
    if c is not None:
        return "wrong_values", f"your output equals the reference times {c:.4g}."
    return "wrong_values", msg("wrong_values", backend)


# --------------------------------------------------------------------------- the battery


@dataclass
class NormCase:
    name: str
    x: object
    weight: object = None
    bias: object = None
    eps: float = 1e-6


#: LayerNorm's float16 case's second row: mean 1900.75, variance 0.6875. Every sum of these
#: integers and of their squares is exact in float32 (all below 2**24), and so is the mean;
#: only E[x]**2 = 3612850.5625 is not: float32 spacing there is 0.25, so it rounds to
#: 3612850.5 and the one-pass variance E[x**2] - E[x]**2 comes out 0.75 instead of 0.6875
#: (+9%): an output off by up to 0.064 (13 x the float16 tolerance, in every float32
#: one-pass implementation alike), where the two-pass float32 variance is exact.
LARGE_MEAN_ROW = [1900.0, 1900.0, 1901.0, 1902.0]


def float16_case(kind: str, big: float, row: list[float], eps: float) -> NormCase:
    """The float16 case: ``[big, -big, big, -big]`` (x**2 overflows float16 above 256) and
    ``row``; for LayerNorm ``row`` has a large mean against its spread (the one-pass variance
    cancels: :data:`LARGE_MEAN_ROW`). Weight ones and bias zeros (``[4]``), x ``[2, 4]`` float16."""
    import torch

    name = f"float16 row [{big:g}, -{big:g}, {big:g}, -{big:g}] (x**2 overflows float16)"
    if kind == "layer":
        name = (f"float16 rows [{big:g}, -{big:g}, {big:g}, -{big:g}] (x**2 overflows float16) and "
                f"[{', '.join(f'{v:g}' for v in row)}] (mean {sum(row) / len(row):g}: "
                "E[x**2] - E[x]**2 cancels)")
    x = torch.tensor([[big, -big, big, -big], row], dtype=torch.float16)
    return NormCase(name, x, torch.ones(4), torch.zeros(4) if kind == "layer" else None, eps)


def _norm_case_runner(kind: str, fn: Callable, call: Callable, reference: Callable):
    def run_case(case: NormCase) -> CaseResult:
        args, kwargs = call(case)
        want = to_f64(reference(case))
        got, failed = student_call(case.name, fn, args, kwargs, watch=(case.x,), keepdim_hint=True,
                                   backend=backend_of(case.x))
        if failed:
            return failed
        return compare_array(case.name, case.x, got, want, lambda g, rtol, atol: diagnose_norm(
            kind, case.x, case.weight, case.bias, case.eps, g, want, rtol, atol))

    return run_case


def battery(kind: str, backend: str) -> list[NormCase]:
    """Fixed, seeded cases; each is built to expose particular faults (see the names).

    The rms torch battery's six cases and their order are a contract: the rmsnorm assignment
    and the demo class's expected scores are derived from them. The numpy batteries are the
    torch battery's cases without bfloat16, as numpy arrays: stored in
    :mod:`normref.checks.numpy_batteries` (made by :func:`torch_battery`, checked equal by the
    tests), so that a numpy check needs no torch.
    """
    if backend == "numpy":
        from .numpy_batteries import cases

        return [NormCase(*c) for c in cases(kind)]
    return torch_battery(kind, backend)


def torch_battery(kind: str, backend: str) -> list[NormCase]:
    """:func:`battery` as torch builds it (seeded ``torch.Generator``); ``backend="numpy"``: the
    same cases as numpy arrays, which :mod:`normref.checks.numpy_batteries` stores."""
    import torch

    rnd = seeded_randn(16)
    eps = RMS_NORM_EPS if kind == "rms" else LAYER_NORM_EPS
    d8 = 8
    w8 = 1 + 0.5 * rnd(d8)
    b8 = 0.1 * rnd(d8)
    bias = (lambda b: b) if kind == "layer" else (lambda b: None)
    cases = [
        NormCase("seed (1, 2, 3)", torch.tensor([1.0, 2.0, 3.0]), torch.ones(3), bias(torch.zeros(3)), eps),
        NormCase("seed shape [2, 3, 8] float32", rnd(2, 3, d8, shift=0.5), w8, bias(b8), eps),
        NormCase("B = T = D [4, 4, 4] (a wrong axis still broadcasts)", rnd(4, 4, 4, scale=2.0, shift=1.0),
                 1 + 0.5 * rnd(4), bias(0.1 * rnd(4)), eps),
        NormCase("tiny values 1e-3 with eps=1e-4 (where eps sits matters)", rnd(2, 5, scale=1e-3),
                 torch.ones(5), bias(torch.zeros(5)), 1e-4),
        float16_case(kind, 300.0, [1.0, 2.0, 3.0, 4.0] if kind == "rms" else LARGE_MEAN_ROW, eps),
        NormCase("bfloat16 [2, 3, 8]", rnd(2, 3, d8).to(torch.bfloat16), w8, bias(b8), eps),
    ]
    if kind == "layer":
        cases.append(NormCase("constant row [5, 5, 5, 5] (variance 0: output must be beta)",
                              torch.tensor([[5.0, 5.0, 5.0, 5.0], [1.0, 0.0, -1.0, 2.0]]),
                              torch.ones(4), torch.tensor([0.5, -0.5, 0.0, 1.0]), eps))
    if backend == "numpy":

        def conv(t):
            return None if t is None else t.numpy()

        cases = [NormCase(c.name, conv(c.x), conv(c.weight), conv(c.bias), c.eps)
                 for c in cases if c.x.dtype != torch.bfloat16]  # numpy has no bfloat16
    return cases


def _check_backend(backend: str) -> None:
    if backend not in ("torch", "numpy"):
        raise ValueError(f"backend must be 'torch' or 'numpy', got {backend!r}")


@single_threaded
def check_rms_norm(fn: Callable, backend: str = "torch", quick: bool = False, *,
                   cases: list[NormCase] | None = None) -> CheckResult:
    """Check a student's ``rms_norm(x, weight, eps=1e-6)`` against :func:`normref.rms_norm`.

    Args:
        fn: the student's function, called as ``fn(x, weight, eps=eps)`` with ``x`` of shape
            ``[..., D]`` (1-D, ``[2, 3, 8]``, ``[4, 4, 4]`` ...) and ``weight`` of shape ``[D]``.
        backend: ``"torch"`` (six cases: seed (1, 2, 3), ``[2, 3, 8]``, ``[4, 4, 4]``, tiny values
            with eps=1e-4, the float16 overflow row, bfloat16) or ``"numpy"`` (the same without
            bfloat16). Messages use that backend's words.
        quick: run only the seed's two cases, ``(1, 2, 3)`` and ``[2, 3, 8]`` (a fast self-check).
        cases: the :class:`NormCase` battery to run instead of the public one (``None``), e.g. the
            one grading draws for its run (``grader/scoring/batteries.py``), arrays of ``backend``'s kind.

    Returns:
        :class:`CheckResult`; ``.score`` is the fraction of cases passed. Diagnoses
        unbiased_variance, eps_outside_sqrt, no_eps, wrong_axis, missing_keepdim (also when
        the statistic does not broadcast and the call raises), low_precision_stats,
        wrong_dtype, subtracts_mean, ignores_weight, mutates_input, and the generic
        raises/timeout/wrong_type/wrong_shape/returns_nan. Never raises because of what ``fn``
        does.

    Raises:
        ValueError: unknown ``backend``.

    Source: the seed's Build challenge; Zhang and Sennrich 2019, eq. (4).
    """
    _check_backend(backend)
    cases, rest = quick_cut(battery("rms", backend) if cases is None else cases, quick)
    return run("rms_norm", cases, _norm_case_runner(
        "rms", fn, call=lambda c: ((c.x, c.weight), {"eps": c.eps}),
        reference=lambda c: rms_norm(c.x, c.weight, eps=c.eps)), fn, backend=backend,
        reference=NORM_REFERENCE, unchecked=rest)


@single_threaded
def check_layer_norm(fn: Callable, backend: str = "numpy", quick: bool = False, *,
                     cases: list[NormCase] | None = None) -> CheckResult:
    """Check a student's ``layer_norm(x, weight, bias, eps=1e-5)`` against :func:`normref.layer_norm`.

    Args:
        fn: the student's function, called as ``fn(x, weight, bias, eps=eps)`` with ``x`` of
            shape ``[..., D]`` and ``weight``/``bias`` of shape ``[D]``.
        backend: ``"numpy"`` (arrays: six cases, the rms battery's without bfloat16 plus a
            constant row; the float16 case's second row has mean 1900.75 against a variance of
            0.6875, where the one-pass variance E[x**2] - E[x]**2 cancels in float32) or
            ``"torch"`` (tensors: seven cases, with bfloat16). Messages use that backend's words.
        quick: run only the seed's two cases, ``(1, 2, 3)`` and ``[2, 3, 8]`` (a fast self-check).
        cases: the :class:`NormCase` battery to run instead of the public one (``None``), as for
            :func:`check_rms_norm`.

    Returns:
        :class:`CheckResult`; ``.score`` is the fraction of cases passed. Diagnoses
        unbiased_variance, eps_outside_sqrt, no_eps, wrong_axis (also on ``[4, 4, 4]`` where it
        broadcasts), missing_keepdim, low_precision_stats, wrong_dtype, not_centered,
        nan_on_constant_row, ignores_weight, ignores_bias, mutates_input and the generic faults;
        the search (:mod:`normref.diagnosis`) names the rest, the one-pass variance included.

    Raises:
        ValueError: unknown ``backend``.

    Source: Ba et al. 2016, eq. (3)-(4); the seed's worked example LN(1,2,3).
    """
    _check_backend(backend)
    cases, rest = quick_cut(battery("layer", backend) if cases is None else cases, quick)
    return run("layer_norm", cases, _norm_case_runner(
        "layer", fn, call=lambda c: ((c.x, c.weight, c.bias), {"eps": c.eps}),
        reference=lambda c: layer_norm(c.x, c.weight, c.bias, eps=c.eps)), fn, backend=backend,
        reference=NORM_REFERENCE, unchecked=rest)


# --------------------------------------------------------------------------- the questions, declared
# (normref.diagnosis: what an answer's outputs and probes measure: the axes its statistics span,
# its invariances, its response to each parameter, the divisor per token, a factor explained)
declare(Question("rms_norm", "rms_norm(x, weight, eps=1e-6)", rms_norm, "RMSNorm",
                 lambda c: ((c.x, c.weight), {"eps": c.eps}), norm="rms", traceable=False))
declare(Question("layer_norm", "layer_norm(x, weight, bias, eps=1e-5)", layer_norm, "LayerNorm",
                 lambda c: ((c.x, c.weight, c.bias), {"eps": c.eps}), norm="layer", traceable=False))
