"""Checkers that grade a student's implementation and diagnose the mistake.

Each ``check_*`` runs a battery of cases against the ``normref`` reference and returns a
:class:`CheckResult` with ``.passed``, ``.score`` (fraction of cases passed, 0..1) and one
message per failing case saying which case, by how much (max abs and relative error) and
the most likely cause. The cause is found from the *signature* of the wrong output: the
output is compared with what each known fault would produce on that same input (dividing by
n-1, eps outside the square root, the wrong axis, ...), never from the student's source.

A student function that raises, loops, returns the wrong kind/shape/dtype, returns NaN or
modifies its input gets a clear message; the checker itself never raises because of it.

Every message ends with a machine-readable tag such as ``[fault: unbiased_variance]`` that
the class report counts.
"""
from __future__ import annotations

import math
import signal
import threading
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .functional import LAYER_NORM_EPS, RMS_NORM_EPS, layer_norm, rms_norm

__all__ = ["CaseResult", "CheckResult", "FAULT_KINDS", "check_rms_norm", "check_layer_norm"]

#: Every fault kind a checker can name, with the sentence a student reads.
FAULT_KINDS: dict[str, str] = {
    "unbiased_variance": "did you divide by n-1 (unbiased variance) instead of n? "
    "Normalization uses the biased statistic: divide by d.",
    "eps_outside_sqrt": "eps belongs inside the square root: sqrt(var + eps), not sqrt(var) + eps.",
    "wrong_axis": "the statistics were taken over the wrong axis: reduce over the last axis "
    "(dim=-1), the d features of one token.",
    "missing_keepdim": "the statistic lost its last axis and broadcast against the wrong axes: "
    "use keepdim=True so it has shape [..., 1].",
    "low_precision_stats": "the statistics were computed in the input's low precision (x**2 "
    "overflows float16 above 256): compute them in float32 with x.float(), then cast back.",
    "wrong_dtype": "the output dtype must be the input dtype: cast back with .to(x.dtype).",
    "subtracts_mean": "RMSNorm does not subtract the mean: it only rescales by the RMS.",
    "nan_on_constant_row": "a constant row has variance 0: keep eps inside the square root so "
    "the output is finite (it must equal beta).",
    "mutates_input": "your function modified its input in place: compute into a new tensor.",
    "wrong_shape": "the output must have the input's shape.",
    "wrong_type": "return the same kind of array you were given (numpy in, numpy out; torch in, "
    "torch out).",
    "returns_nan": "the output contains NaN or inf where the reference is finite.",
    "raises": "your function raised an exception.",
    "timeout": "your function did not return in time (an infinite loop?).",
    "ignores_weight": "the weight (gamma) was not applied.",
    "ignores_bias": "the bias (beta) was not added.",
    "wrong_values": "the values differ from the reference.",
}

CALL_TIMEOUT_S = 5.0


@dataclass
class CaseResult:
    """Outcome of one checker case: ``passed``, the error sizes and, if failed, the fault."""

    name: str
    passed: bool
    message: str = ""
    fault: str | None = None
    max_abs_err: float = float("nan")
    max_rel_err: float = float("nan")


@dataclass
class CheckResult:
    """Outcome of a ``check_*`` call.

    Attributes:
        name: what was checked, e.g. ``"rms_norm"``.
        cases: one :class:`CaseResult` per case, in order.
        passed: True when every case passed.
        score: fraction of cases passed, 0..1 (nbgrader partial credit is ``points * score``).
        faults: the distinct fault kinds diagnosed, in order of first appearance.
        messages: one line per failing case.
    """

    name: str
    cases: list[CaseResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def score(self) -> float:
        if not self.cases:
            return 0.0
        return sum(c.passed for c in self.cases) / len(self.cases)

    @property
    def faults(self) -> list[str]:
        out: list[str] = []
        for c in self.cases:
            if c.fault and c.fault not in out:
                out.append(c.fault)
        return out

    @property
    def messages(self) -> list[str]:
        return [c.message for c in self.cases if not c.passed]

    def report(self) -> str:
        """The human summary printed in self-check and grader cells."""
        n_ok = sum(c.passed for c in self.cases)
        head = f"{self.name}: {n_ok}/{len(self.cases)} cases passed (score {self.score:.2f})"
        if self.passed:
            return head + " - all correct."
        return "\n".join([head] + ["  x " + m for m in self.messages])

    __str__ = report

    def __repr__(self) -> str:  # what a notebook shows for a bare `check_...(fn)`
        return self.report()


# --------------------------------------------------------------------------- helpers


class _Timeout(Exception):
    pass


def _call_with_timeout(fn: Callable, args: tuple, kwargs: dict, timeout: float):
    """Call ``fn`` with warnings silenced (nbgrader scores a test cell 0 if anything reaches
    stderr); on the main thread of a Unix process, stop it after ``timeout`` seconds."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return _call_alarm(fn, args, kwargs, timeout)


def _call_alarm(fn: Callable, args: tuple, kwargs: dict, timeout: float):
    use_alarm = (
        hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    )
    if not use_alarm:
        return fn(*args, **kwargs)

    def _handler(signum, frame):
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, _handler)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return fn(*args, **kwargs)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _to_f64(a) -> np.ndarray:
    import torch

    if isinstance(a, torch.Tensor):
        return a.detach().to("cpu", torch.float64).numpy()
    return np.asarray(a, dtype=np.float64)


def _tolerance(dtype_name: str) -> tuple[float, float]:
    """(rtol, atol) by input dtype; loose enough for honest float32-statistics variants."""
    return {
        "float16": (2e-3, 2e-3),
        "bfloat16": (1.6e-2, 1.6e-2),
        "float32": (1e-5, 1e-5),
        "float64": (1e-5, 1e-6),  # the seed's x.float() on float64 input is accepted
    }[dtype_name]


def _dtype_name(a) -> str:
    return str(a.dtype).replace("torch.", "")


def _close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> bool:
    if got.shape != want.shape:
        return False
    return bool(np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=False))


def _errors(got: np.ndarray, want: np.ndarray) -> tuple[float, float, tuple]:
    diff = np.abs(got - want)
    diff = np.where(np.isnan(diff), np.inf, diff)
    idx = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.size else ()
    max_abs = float(diff.max()) if diff.size else 0.0
    scale = np.maximum(np.abs(want), 1e-12)
    max_rel = float((diff / scale).max()) if diff.size else 0.0
    return max_abs, max_rel, tuple(int(i) for i in idx)


def _fmt(v: float) -> str:
    if math.isinf(v) or math.isnan(v):
        return str(v)
    return f"{v:.3g}"


def _constant_ratio(got: np.ndarray, want: np.ndarray) -> float | None:
    """If ``got == c * want`` for one constant c (away from 1), return c."""
    mask = np.abs(want) > 1e-3
    if not mask.any() or not np.all(np.isfinite(got)):
        return None
    ratios = got[mask] / want[mask]
    c = float(np.median(ratios))
    if abs(c - 1) < 1e-3 or not np.allclose(ratios, c, rtol=1e-2, atol=1e-3):
        return None
    return c


# --------------------------------------------------------------------------- fault models
# Each model returns what an implementation with that one fault outputs on this input
# (float64 numpy), or None where the fault cannot be expressed (e.g. it would raise).


def _t(a):
    import torch

    return a if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a))


def _stats_fn(kind: str, unbiased=False, eps_out=False, centered=None):
    """Build f(h, eps, dim, keepdim) -> per-token scale factor (1/std or 1/rms) in torch."""

    def f(h, eps, dim=-1, keepdim=True):
        d = h.shape[dim]
        denom = (d - 1) if unbiased else d
        c = centered if centered is not None else (kind == "layer")
        hc = h - h.mean(dim=dim, keepdim=True) if c else h
        ms = hc.pow(2).sum(dim=dim, keepdim=keepdim) / denom
        if eps_out:
            return 1.0 / (ms.sqrt() + eps)
        return (ms + eps).rsqrt()

    return f


def _model(kind: str, x, weight, bias, eps, *, unbiased=False, eps_out=False, axis=-1,
           keepdim=True, low_precision=False, centered=None, use_weight=True, use_bias=True):
    import torch

    xt = _t(x)
    cdt = xt.dtype if low_precision else (torch.float64 if xt.dtype == torch.float64 else torch.float32)
    h = xt.to(cdt)
    c = centered if centered is not None else (kind == "layer")
    try:
        scale = _stats_fn(kind, unbiased, eps_out, centered)(h, eps, dim=axis, keepdim=keepdim)
        center = h.mean(dim=axis, keepdim=keepdim) if c else 0.0
        y = (h - center) * scale
    except RuntimeError:
        return None
    if weight is not None and use_weight:
        y = y * _t(weight).to(cdt)
    if bias is not None and use_bias:
        y = y + _t(bias).to(cdt)
    if tuple(y.shape) != tuple(xt.shape):
        return None
    return y.to(xt.dtype).to(torch.float64).numpy()


def _fault_models(kind: str, x, weight, bias, eps):
    """Yield (fault, output) for every fault that is expressible on this input."""
    nd = x.ndim
    yield "unbiased_variance", _model(kind, x, weight, bias, eps, unbiased=True)
    yield "eps_outside_sqrt", _model(kind, x, weight, bias, eps, eps_out=True)
    for ax in range(nd - 1):
        yield "wrong_axis", _model(kind, x, weight, bias, eps, axis=ax)
    if nd >= 2:
        yield "missing_keepdim", _model(kind, x, weight, bias, eps, keepdim=False)
    if _dtype_name(x) in ("float16", "bfloat16"):
        yield "low_precision_stats", _model(kind, x, weight, bias, eps, low_precision=True)
    if kind == "rms":
        yield "subtracts_mean", _model(kind, x, weight, bias, eps, centered=True)
    if weight is not None:
        yield "ignores_weight", _model(kind, x, weight, bias, eps, use_weight=False)
    if bias is not None:
        yield "ignores_bias", _model(kind, x, weight, bias, eps, use_bias=False)


# --------------------------------------------------------------------------- the case runner


@dataclass
class _Case:
    name: str
    x: object
    weight: object = None
    bias: object = None
    eps: float = 1e-6


def _copy(a):
    import torch

    return a.clone() if isinstance(a, torch.Tensor) else np.array(a, copy=True)


def _same(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor):
        return bool(torch.equal(a, b))
    return bool(np.array_equal(a, b, equal_nan=True))


def _run_case(kind: str, fn: Callable, case: _Case, call: Callable, reference: Callable) -> CaseResult:
    import torch

    x = case.x
    x_before = _copy(x)
    args = call(case)
    want = _to_f64(reference(case))
    pre = f"case '{case.name}'"
    try:
        got = _call_with_timeout(fn, *args, timeout=CALL_TIMEOUT_S)
    except _Timeout:
        return CaseResult(case.name, False, f"{pre}: no result after {CALL_TIMEOUT_S:.0f} s; "
                          f"{FAULT_KINDS['timeout']} [fault: timeout]", "timeout")
    except Exception as e:  # noqa: BLE001 - the student's error becomes a message
        text = f"{type(e).__name__}: {e}".strip()
        hint = FAULT_KINDS["raises"]
        fault = "raises"
        if isinstance(e, NotImplementedError):
            hint = "not implemented yet: replace `raise NotImplementedError()` with your code."
        elif "size of tensor" in str(e) or "broadcast" in str(e):
            hint = FAULT_KINDS["missing_keepdim"]
            fault = "missing_keepdim"
        return CaseResult(case.name, False, f"{pre}: raised {text[:300]}; {hint} [fault: {fault}]", fault)

    if not _same(x, x_before):
        return CaseResult(case.name, False, f"{pre}: {FAULT_KINDS['mutates_input']} "
                          "[fault: mutates_input]", "mutates_input")
    want_kind = torch.Tensor if isinstance(x, torch.Tensor) else np.ndarray
    if not isinstance(got, want_kind):
        return CaseResult(case.name, False, f"{pre}: returned {type(got).__name__}, expected "
                          f"{want_kind.__module__.split('.')[0]}.{want_kind.__name__}; "
                          f"{FAULT_KINDS['wrong_type']} [fault: wrong_type]", "wrong_type")
    if tuple(got.shape) != tuple(x.shape):
        return CaseResult(case.name, False, f"{pre}: output shape {list(got.shape)}, expected "
                          f"{list(x.shape)}; {FAULT_KINDS['wrong_shape']} [fault: wrong_shape]",
                          "wrong_shape")
    g = _to_f64(got)
    rtol, atol = _tolerance(_dtype_name(x))
    max_abs, max_rel, idx = _errors(g, want)
    dtype_ok = got.dtype == x.dtype
    values_ok = _close(g, want, rtol, atol)
    if values_ok and dtype_ok:
        return CaseResult(case.name, True, f"{pre}: ok", None, max_abs, max_rel)
    if values_ok and not dtype_ok:
        return CaseResult(case.name, False, f"{pre}: values right but dtype {_dtype_name(got)}, "
                          f"expected {_dtype_name(x)}; {FAULT_KINDS['wrong_dtype']} "
                          "[fault: wrong_dtype]", "wrong_dtype", max_abs, max_rel)

    where = f"max abs error {_fmt(max_abs)} (rel {_fmt(max_rel)}) at index {idx}"
    fault, hint = _diagnose(kind, case, g, want, rtol, atol)
    return CaseResult(case.name, False, f"{pre}: {where}; {hint} [fault: {fault}]", fault,
                      max_abs, max_rel)


def _diagnose(kind, case, g, want, rtol, atol) -> tuple[str, str]:
    x = case.x
    if not np.all(np.isfinite(g)) and np.all(np.isfinite(want)):
        flat = _to_f64(x).reshape(-1, x.shape[-1])
        if kind == "layer" and np.any(np.ptp(flat, axis=-1) == 0):
            return "nan_on_constant_row", "NaN/inf on a constant row: " + FAULT_KINDS["nan_on_constant_row"]
    for fault, out in _fault_models(kind, x, case.weight, case.bias, case.eps):
        if out is not None and not _close(out, want, rtol, atol) and _close(g, out, 2 * rtol, 2 * atol):
            hint = FAULT_KINDS[fault]
            if fault == "unbiased_variance":
                d = x.shape[-1]
                hint = (f"your output equals the reference times {math.sqrt((d - 1) / d):.3f} = "
                        f"sqrt({d - 1}/{d}): " + hint)
            return fault, hint
    if not np.all(np.isfinite(g)):
        return "returns_nan", FAULT_KINDS["returns_nan"]
    c = _constant_ratio(g, want)
    if c is not None:
        return "wrong_values", f"your output equals the reference times {c:.4g}."
    return "wrong_values", FAULT_KINDS["wrong_values"]


def _run(name: str, kind: str, fn: Callable, cases: list[_Case], call, reference) -> CheckResult:
    result = CheckResult(name)
    if not callable(fn):
        result.cases = [CaseResult(c.name, False, f"{name} is not a function (got "
                                   f"{type(fn).__name__}) [fault: raises]", "raises") for c in cases]
        return result
    for case in cases:
        try:
            result.cases.append(_run_case(kind, fn, case, call, reference))
        except Exception as e:  # noqa: BLE001 - a checker must never crash on student output
            result.cases.append(CaseResult(case.name, False, f"case '{case.name}': could not be "
                                           f"checked ({type(e).__name__}: {e}) [fault: wrong_values]",
                                           "wrong_values"))
    return result


# --------------------------------------------------------------------------- batteries


def _battery(kind: str, backend: str) -> list[_Case]:
    """Fixed, seeded cases; each is built to expose particular faults (see the names)."""
    import torch

    g = torch.Generator().manual_seed(16)
    eps = RMS_NORM_EPS if kind == "rms" else LAYER_NORM_EPS

    def rnd(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    d8 = 8
    w8 = 1 + 0.5 * rnd(d8)
    b8 = 0.1 * rnd(d8)
    bias = (lambda b: b) if kind == "layer" else (lambda b: None)
    cases = [
        _Case("seed (1, 2, 3)", torch.tensor([1.0, 2.0, 3.0]), torch.ones(3), bias(torch.zeros(3)), eps),
        _Case("seed shape [2, 3, 8] float32", rnd(2, 3, d8, shift=0.5), w8, bias(b8), eps),
        _Case("B = T = D [4, 4, 4] (a wrong axis still broadcasts)", rnd(4, 4, 4, scale=2.0, shift=1.0),
              1 + 0.5 * rnd(4), bias(0.1 * rnd(4)), eps),
        _Case("tiny values 1e-3 with eps=1e-4 (where eps sits matters)", rnd(2, 5, scale=1e-3),
              torch.ones(5), bias(torch.zeros(5)), 1e-4),
        _Case("float16 row [300, -300, 300, -300] (x**2 overflows float16)",
              torch.tensor([[300.0, -300.0, 300.0, -300.0], [1.0, 2.0, 3.0, 4.0]], dtype=torch.float16),
              torch.ones(4), bias(torch.zeros(4)), eps),
        _Case("bfloat16 [2, 3, 8]", rnd(2, 3, d8).to(torch.bfloat16), w8, bias(b8), eps),
    ]
    if kind == "layer":
        cases.append(_Case("constant row [5, 5, 5, 5] (variance 0: output must be beta)",
                           torch.tensor([[5.0, 5.0, 5.0, 5.0], [1.0, 0.0, -1.0, 2.0]]),
                           torch.ones(4), torch.tensor([0.5, -0.5, 0.0, 1.0]), eps))
    if backend == "numpy":
        out = []
        for c in cases:
            if c.x.dtype == torch.bfloat16:  # numpy has no bfloat16
                continue
            conv = (lambda t: None if t is None else t.numpy())
            out.append(_Case(c.name, conv(c.x), conv(c.weight),
                             conv(c.bias), c.eps))
        cases = out
    return cases


def check_rms_norm(fn: Callable, backend: str = "torch", quick: bool = False) -> CheckResult:
    """Check a student's ``rms_norm(x, weight, eps=1e-6)`` against :func:`normref.rms_norm`.

    Args:
        fn: the student's function, called as ``fn(x, weight, eps=eps)`` with ``x`` of shape
            ``[..., D]`` (1-D, ``[2, 3, 8]``, ``[4, 4, 4]`` ...) and ``weight`` of shape ``[D]``.
        backend: ``"torch"`` (tensors, including float16 and bfloat16 cases) or ``"numpy"``.
        quick: run only the seed's two cases, ``(1, 2, 3)`` and ``[2, 3, 8]`` (a fast self-check).

    Returns:
        :class:`CheckResult`; ``.score`` is the fraction of cases passed. Never raises because
        of what ``fn`` does.

    Raises:
        ValueError: unknown ``backend``.

    Source: the seed's Build challenge; Zhang and Sennrich 2019, eq. (4).
    """
    if backend not in ("torch", "numpy"):
        raise ValueError(f"backend must be 'torch' or 'numpy', got {backend!r}")
    cases = _battery("rms", backend)[: 2 if quick else None]
    return _run("rms_norm", "rms", fn, cases,
                call=lambda c: ((c.x, c.weight), {"eps": c.eps}),
                reference=lambda c: rms_norm(c.x, c.weight, eps=c.eps))


def check_layer_norm(fn: Callable, backend: str = "numpy", quick: bool = False) -> CheckResult:
    """Check a student's ``layer_norm(x, weight, bias, eps=1e-5)`` against :func:`normref.layer_norm`.

    Args:
        fn: the student's function, called as ``fn(x, weight, bias, eps=eps)`` with ``x`` of
            shape ``[..., D]`` and ``weight``/``bias`` of shape ``[D]``.
        backend: ``"numpy"`` (arrays) or ``"torch"`` (tensors, with float16/bfloat16 cases).
        quick: run only the seed's two cases, ``(1, 2, 3)`` and ``[2, 3, 8]`` (a fast self-check).

    Returns:
        :class:`CheckResult`; ``.score`` is the fraction of cases passed.

    Raises:
        ValueError: unknown ``backend``.

    Source: Ba et al. 2016, eq. (3)-(4); the seed's worked example LN(1,2,3).
    """
    if backend not in ("torch", "numpy"):
        raise ValueError(f"backend must be 'torch' or 'numpy', got {backend!r}")
    cases = _battery("layer", backend)[: 2 if quick else None]
    return _run("layer_norm", "layer", fn, cases,
                call=lambda c: ((c.x, c.weight, c.bias), {"eps": c.eps}),
                reference=lambda c: layer_norm(c.x, c.weight, c.bias, eps=c.eps))
