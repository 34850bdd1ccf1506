"""Comparing a student's output with the reference: tolerances by dtype, error sizes, and the
fault model closest to a wrong output."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .._torch import is_tensor, loaded
from ..diagnosis.outputs import observe
from .core import CaseResult, backend_of, fail, msg


def to_f64(a) -> np.ndarray:
    """Any tensor or array as a float64 numpy array."""
    if is_tensor(a):
        import torch

        return a.detach().to("cpu", torch.float64).numpy()
    return np.asarray(a, dtype=np.float64)


def tolerance(dtype_name: str) -> tuple[float, float]:
    """(rtol, atol) by input dtype; loose enough for honest float32-statistics variants."""
    return {
        "float16": (2e-3, 2e-3),
        "bfloat16": (1.6e-2, 1.6e-2),
        "float32": (1e-5, 1e-5),
        "float64": (1e-5, 1e-6),  # the seed's x.float() on float64 input is accepted
    }[dtype_name]


def dtype_name(a) -> str:
    return str(a.dtype).replace("torch.", "")


def close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> bool:
    if got.shape != want.shape:
        return False
    return bool(np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=False))


def errors(got: np.ndarray, want: np.ndarray) -> tuple[float, float, tuple]:
    """(max abs error, max relative error, index of the largest abs error)."""
    diff = np.abs(got - want)
    diff = np.where(np.isnan(diff), np.inf, diff)
    idx = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.size else ()
    max_abs = float(diff.max()) if diff.size else 0.0
    # relative to each reference value, floored at 1e-3 of the largest one (a zero in the
    # reference, like LN(1,2,3)[1], would otherwise report a relative error of 1e12)
    peak = float(np.max(np.abs(want))) if want.size else 0.0
    scale = np.maximum(np.abs(want), max(1e-3 * peak, 1e-12))
    max_rel = float((diff / scale).max()) if diff.size else 0.0
    return max_abs, max_rel, tuple(int(i) for i in idx)


def fmt(v: float) -> str:
    if math.isinf(v) or math.isnan(v):
        return str(v)
    return f"{v:.3g}"


def constant_ratio(got: np.ndarray, want: np.ndarray) -> float | None:
    """If ``got == c * want`` for one constant c (away from 1), return c."""
    mask = np.abs(want) > 1e-3
    if not mask.any() or not np.all(np.isfinite(got)):
        return None
    ratios = got[mask] / want[mask]
    c = float(np.median(ratios))
    if abs(c - 1) < 1e-3 or not np.allclose(ratios, c, rtol=1e-2, atol=1e-3):
        return None
    return c


def best_model(g: np.ndarray, want: np.ndarray, models, rtol: float, atol: float):
    """The fault model closest to the student's output ``g`` among those that (a) differ from
    the reference on this input and (b) match ``g`` within twice the tolerance; or None.

    ``models`` yields ``(fault, output_f64_or_None, hint_or_None)``.
    """
    best = None
    for fault, out, hint in models:
        if out is None or out.shape != g.shape or close(out, want, rtol, atol):
            continue
        if not close(g, out, 2 * rtol, 2 * atol):
            continue
        dist = float(np.max(np.abs(g - out))) if g.size else 0.0
        if best is None or dist < best[0]:
            best = (dist, fault, hint)
    return None if best is None else (best[1], best[2])


def matching_faults(g: np.ndarray, want: np.ndarray, models, rtol: float, atol: float) -> set:
    """Every fault kind whose model reproduces ``g`` here (as :func:`best_model` counts a match):
    more than one means this input cannot tell those mistakes apart."""
    found = set()
    for fault, out, _ in models:
        out = None if out is None else to_f64(out)
        if out is None or out.shape != g.shape or close(out, want, rtol, atol):
            continue
        if close(g, out, 2 * rtol, 2 * atol):
            found.add(fault)
    return found


def diagnose_by_models(g, want, models, rtol, atol, backend: str = "torch") -> tuple[str, str]:
    """The closest fault model (its hint, else the registry's sentence), else NaN, else plain
    wrong values. ``models`` yields ``(fault, output, hint_or_None)``, outputs any array."""
    found = best_model(g, want, ((f, to_f64(out), hint or msg(f, backend)) for f, out, hint in models),
                       rtol, atol)
    if found is not None:
        return found
    if not np.all(np.isfinite(g)):
        return "returns_nan", msg("returns_nan", backend)
    return "wrong_values", msg("wrong_values", backend)


def compare_array(case: str, x, got, want: np.ndarray, diagnose: Callable,
                  check_dtype: bool = True, output: str | None = None) -> CaseResult:
    """Kind, shape, dtype, then values of a student's array output against ``want``
    (float64); ``diagnose(g, rtol, atol) -> (fault, hint)`` names the cause of wrong values.
    Messages use the words of ``x``'s backend. ``output``: which output of an answer of several
    this is (``"new_running_mean"``), the name its record carries
    (:func:`normref.diagnosis.observe`: the diagnosis says it of that output alone)."""
    backend = backend_of(x)
    want_kind = loaded().Tensor if is_tensor(x) else np.ndarray
    if not isinstance(got, want_kind):
        return fail(case, f"returned {type(got).__name__}, expected "
                    f"{want_kind.__module__.split('.')[0]}.{want_kind.__name__}; "
                    f"{msg('wrong_type', backend)}", "wrong_type")
    if tuple(got.shape) != tuple(want.shape):
        return fail(case, f"output shape {list(got.shape)}, expected {list(want.shape)}; "
                    f"{msg('wrong_shape', backend)}", "wrong_shape")
    g = to_f64(got)
    rtol, atol = tolerance(dtype_name(x))
    max_abs, max_rel, idx = errors(g, want)
    dtype_ok = got.dtype == x.dtype or not check_dtype
    values_ok = close(g, want, rtol, atol)
    if values_ok and dtype_ok:
        seen = (g, want, rtol, atol) if output is None else observe({output: (g, want)}, rtol, atol)
        return CaseResult(case, True, f"case '{case}': ok", None, max_abs, max_rel, seen)
    if values_ok:
        return fail(case, f"values right but dtype {dtype_name(got)}, expected {dtype_name(x)}; "
                    f"{msg('wrong_dtype', backend)}", "wrong_dtype", max_abs, max_rel)
    where = f"max abs error {fmt(max_abs)} (rel {fmt(max_rel)}) at index {idx}"
    fault, hint = diagnose(g, rtol, atol)
    failed = fail(case, f"{where}; {hint}", fault, max_abs, max_rel)
    failed.observed = (g, want, rtol, atol) if output is None else observe({output: (g, want)}, rtol, atol)
    return failed
