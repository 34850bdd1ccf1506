"""Checkers that grade a student's implementation and diagnose the mistake.

Each ``check_*`` runs a battery of cases against the ``normref`` reference and returns a
:class:`CheckResult` with ``.passed``, ``.score`` (fraction of cases passed, 0..1) and one
message per failing case saying which case, by how much (max abs and relative error) and
the most likely cause. The cause is found from the *signature* of the wrong output: the
output is compared with what each known fault would produce on that same input (dividing by
n-1, eps outside the square root, the wrong axis, the residual taken from Norm(x), ...), and
the closest one is named; never from the student's source.

A student function that raises, loops, returns the wrong kind/shape/dtype, returns NaN or
modifies its input gets a clear message; the checker itself never raises because of it.
While the student's code runs, warnings and anything written to ``sys.stderr`` are swallowed
(nbgrader scores a test cell 0 if anything reaches stderr) and torch's default dtype is
restored afterwards.

Every message ends with a machine-readable tag such as ``[fault: unbiased_variance]`` that
the class report counts.

The checkers: :func:`check_rms_norm`, :func:`check_layer_norm` (functions),
:func:`check_rms_norm_module` (an ``nn.Module`` class), :func:`check_pre_ln`,
:func:`check_post_ln` (placement), :func:`check_pre_ln_block` (a whole block),
:func:`check_layer_norm_backward` (the analytic gradient).
"""
from __future__ import annotations

import contextlib
import copy
import io
import math
import signal
import threading
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from .backward import layer_norm_backward
from .functional import LAYER_NORM_EPS, RMS_NORM_EPS, layer_norm, rms_norm

__all__ = [
    "CaseResult",
    "CheckResult",
    "FAULT_KINDS",
    "check_rms_norm",
    "check_layer_norm",
    "check_rms_norm_module",
    "check_pre_ln",
    "check_post_ln",
    "check_pre_ln_block",
    "check_layer_norm_backward",
]

#: Every fault kind a checker can name, with the sentence a student reads.
FAULT_KINDS: dict[str, str] = {
    "unbiased_variance": "did you divide by n-1 (unbiased variance) instead of n? "
    "Normalization uses the biased statistic: divide by d.",
    "eps_outside_sqrt": "eps belongs inside the square root: sqrt(var + eps), not sqrt(var) + eps.",
    "no_eps": "eps is missing: add it inside the square root, sqrt(var + eps); without it tiny "
    "rows are blown up and a constant row gives 0/0.",
    "wrong_axis": "the statistics were taken over the wrong axis: reduce over the last axis "
    "(dim=-1), the d features of one token.",
    "missing_keepdim": "the statistic lost its last axis and broadcast against the wrong axes: "
    "use keepdim=True so it has shape [..., 1].",
    "low_precision_stats": "the statistics were computed in the input's low precision (x**2 "
    "overflows float16 above 256): compute them in float32 with x.float(), then cast back.",
    "wrong_dtype": "the output dtype must be the input dtype: cast back with .to(x.dtype).",
    "subtracts_mean": "RMSNorm does not subtract the mean: it only rescales by the RMS.",
    "not_centered": "LayerNorm subtracts each token's mean before dividing; without it you "
    "computed RMSNorm.",
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
    # placement (check_pre_ln, check_post_ln, check_pre_ln_block)
    "residual_from_normed": "the residual path must carry x itself: Pre-LN is "
    "x + F(Norm(x)), not Norm(x) + F(Norm(x)).",
    "pre_post_swapped": "that is the other placement: Pre-LN is x + F(Norm(x)) (normalize the "
    "sublayer's input), Post-LN is Norm(x + F(x)) (normalize after the residual add).",
    "missing_residual": "the residual add is missing: add x back.",
    "missing_norm": "the norm was not applied.",
    "norm_on_sublayer_output": "the norm was applied to the sublayer's output F(x) instead of "
    "where the placement puts it.",
    "norms_swapped": "input_layernorm belongs before attention and post_attention_layernorm "
    "before the feed-forward net; yours are swapped.",
    "shared_norm": "the two sublayers need two separate norms (input_layernorm and "
    "post_attention_layernorm), each with its own weight.",
    "mlp_reads_x": "the feed-forward sublayer must read h = x + attention(...), the stream after "
    "the first residual add, not the block's input x.",
    "missing_attribute": "the block needs the attributes input_layernorm, self_attn, "
    "post_attention_layernorm and mlp (MiniMind's names).",
    "module_weight": "the module needs self.weight = nn.Parameter(torch.ones(dim)) (gamma, "
    "initialised to ones) and no other parameter.",
    "wrong_eps": "the default eps is wrong: RMSNorm(dim) uses eps=1e-6 (the seed's MiniMind).",
    # backward (check_layer_norm_backward)
    "bwd_no_mean_term": "dx is missing the gradient through the mean: subtract mean(g) "
    "(g = dy * weight).",
    "bwd_no_variance_term": "dx is missing the gradient through the variance: subtract "
    "xhat * mean(g * xhat).",
    "bwd_constant_stats": "dx treats the mean and the variance as constants: both depend on "
    "x, dx = r * (g - mean(g) - xhat * mean(g * xhat)).",
    "bwd_dweight_dbias_swapped": "dweight and dbias are swapped: dweight = sum(dy * xhat), "
    "dbias = sum(dy).",
    "bwd_not_summed": "dweight and dbias sum over every axis but the last (batch and sequence), "
    "so they have shape [D].",
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


# --------------------------------------------------------------------------- calling student code


def _single_threaded(checker: Callable) -> Callable:
    """Run a checker with one torch thread (restored afterwards): its tensors are tiny, and on
    a loaded machine (parallel autograde, 2 cores) two intra-op threads made a check 10x slower
    (measured: 0.06 s vs 0.8-1.0 s for check_pre_ln_block)."""
    import functools

    @functools.wraps(checker)
    def wrapper(*args, **kwargs):
        import torch

        n = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return checker(*args, **kwargs)
        finally:
            torch.set_num_threads(n)

    return wrapper


class _Timeout(Exception):
    pass


def _call_with_timeout(fn: Callable, args: tuple, kwargs: dict, timeout: float):
    """Call ``fn`` with warnings and stderr swallowed (nbgrader scores a test cell 0 if anything
    reaches stderr) and torch's default dtype restored; on the main thread of a Unix process,
    stop it after ``timeout`` seconds."""
    import torch

    default_dtype = torch.get_default_dtype()
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            return _call_alarm(fn, args, kwargs, timeout)
    finally:
        torch.set_default_dtype(default_dtype)


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


def _fail(case: str, text: str, fault: str, max_abs=float("nan"), max_rel=float("nan")) -> CaseResult:
    return CaseResult(case, False, f"case '{case}': {text} [fault: {fault}]", fault, max_abs, max_rel)


def _raised(case: str, e: BaseException, keepdim_hint: bool = False) -> CaseResult:
    text = f"{type(e).__name__}: {e}".strip()
    hint, fault = FAULT_KINDS["raises"], "raises"
    if isinstance(e, NotImplementedError):
        hint = "not implemented yet: replace `raise NotImplementedError()` with your code."
    elif keepdim_hint and ("size of tensor" in str(e) or "broadcast" in str(e)):
        hint, fault = FAULT_KINDS["missing_keepdim"], "missing_keepdim"
    return _fail(case, f"raised {text[:300]}; {hint}", fault)


def _student_call(case: str, fn: Callable, args: tuple, kwargs: dict | None = None,
                  watch: tuple = (), keepdim_hint: bool = False):
    """Run the student's ``fn``; return ``(output, None)`` or ``(None, failing CaseResult)``.

    ``watch``: inputs that must come back unmodified.
    """
    before = [_copy(a) for a in watch]
    try:
        got = _call_with_timeout(fn, args, kwargs or {}, CALL_TIMEOUT_S)
    except _Timeout:
        return None, _fail(case, f"no result after {CALL_TIMEOUT_S:.0f} s; {FAULT_KINDS['timeout']}",
                           "timeout")
    except Exception as e:  # noqa: BLE001 - the student's error becomes a message
        return None, _raised(case, e, keepdim_hint)
    if any(not _same(a, b) for a, b in zip(watch, before)):
        return None, _fail(case, FAULT_KINDS["mutates_input"], "mutates_input")
    return got, None


# --------------------------------------------------------------------------- comparing arrays


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
    # relative to each reference value, floored at 1e-3 of the largest one (a zero in the
    # reference, like LN(1,2,3)[1], would otherwise report a relative error of 1e12)
    peak = float(np.max(np.abs(want))) if want.size else 0.0
    scale = np.maximum(np.abs(want), max(1e-3 * peak, 1e-12))
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


def _best_model(g: np.ndarray, want: np.ndarray, models, rtol: float, atol: float):
    """The fault model closest to the student's output ``g`` among those that (a) differ from
    the reference on this input and (b) match ``g`` within twice the tolerance; or None.

    ``models`` yields ``(fault, output_f64_or_None, hint_or_None)``.
    """
    best = None
    for fault, out, hint in models:
        if out is None or out.shape != g.shape or _close(out, want, rtol, atol):
            continue
        if not _close(g, out, 2 * rtol, 2 * atol):
            continue
        dist = float(np.max(np.abs(g - out))) if g.size else 0.0
        if best is None or dist < best[0]:
            best = (dist, fault, hint)
    return None if best is None else (best[1], best[2])


def _compare_array(case: str, x, got, want: np.ndarray, diagnose: Callable,
                   check_dtype: bool = True) -> CaseResult:
    """Kind, shape, dtype, then values of a student's array output against ``want``
    (float64); ``diagnose(g, rtol, atol) -> (fault, hint)`` names the cause of wrong values."""
    import torch

    want_kind = torch.Tensor if isinstance(x, torch.Tensor) else np.ndarray
    if not isinstance(got, want_kind):
        return _fail(case, f"returned {type(got).__name__}, expected "
                     f"{want_kind.__module__.split('.')[0]}.{want_kind.__name__}; "
                     f"{FAULT_KINDS['wrong_type']}", "wrong_type")
    if tuple(got.shape) != tuple(want.shape):
        return _fail(case, f"output shape {list(got.shape)}, expected {list(want.shape)}; "
                     f"{FAULT_KINDS['wrong_shape']}", "wrong_shape")
    g = _to_f64(got)
    rtol, atol = _tolerance(_dtype_name(x))
    max_abs, max_rel, idx = _errors(g, want)
    dtype_ok = got.dtype == x.dtype or not check_dtype
    values_ok = _close(g, want, rtol, atol)
    if values_ok and dtype_ok:
        return CaseResult(case, True, f"case '{case}': ok", None, max_abs, max_rel)
    if values_ok:
        return _fail(case, f"values right but dtype {_dtype_name(got)}, expected {_dtype_name(x)}; "
                     f"{FAULT_KINDS['wrong_dtype']}", "wrong_dtype", max_abs, max_rel)
    where = f"max abs error {_fmt(max_abs)} (rel {_fmt(max_rel)}) at index {idx}"
    fault, hint = diagnose(g, rtol, atol)
    return _fail(case, f"{where}; {hint}", fault, max_abs, max_rel)


def _copy(a):
    import torch

    if isinstance(a, torch.Tensor):
        return a.clone()
    if isinstance(a, np.ndarray):
        return np.array(a, copy=True)
    return a


def _same(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor):
        return bool(torch.equal(a, b))
    if isinstance(a, np.ndarray):
        return bool(np.array_equal(a, b, equal_nan=True))
    return True


def _run(name: str, cases: list, run_case: Callable, fn=None, what: str = "a function") -> CheckResult:
    """Run ``run_case(case)`` for every case; a checker bug or an odd student object becomes a
    failing case, never an exception."""
    result = CheckResult(name)
    if fn is not None and not callable(fn):
        result.cases = [CaseResult(c.name, False, f"{name} is not {what} (got "
                                   f"{type(fn).__name__}) [fault: raises]", "raises") for c in cases]
        return result
    for case in cases:
        try:
            result.cases.append(run_case(case))
        except Exception as e:  # noqa: BLE001 - a checker must never crash on student output
            result.cases.append(CaseResult(case.name, False, f"case '{case.name}': could not be "
                                           f"checked ({type(e).__name__}: {e}) [fault: wrong_values]",
                                           "wrong_values"))
    return result


# --------------------------------------------------------------------------- norm fault models
# Each model returns what an implementation with that one fault outputs on this input, or
# None where the fault cannot be expressed (e.g. it would raise).


def _t(a):
    import torch

    return a if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a))


def _model_t(kind: str, xt, wt, bt, eps, *, ddof=0, eps_out=False, axis=-1, keepdim=True,
             own_centring=False, low_precision=False, centered=None, use_weight=True,
             use_bias=True):
    """A LayerNorm ("layer") or RMSNorm ("rms") with one fault, in torch.

    ``keepdim=False`` drops the reduced axis everywhere, so the statistics broadcast against
    the trailing axes; with ``own_centring`` the variance is centred correctly first (as
    ``torch.var(dim=-1)`` does) and only the subtraction/division broadcast wrongly.
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


def _model(kind: str, x, weight, bias, eps, **kw):
    import torch

    y = _model_t(kind, _t(x), None if weight is None else _t(weight),
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
    if _dtype_name(x) in ("float16", "bfloat16"):
        yield "low_precision_stats", {"low_precision": True}
    if kind == "rms":
        yield "subtracts_mean", {"centered": True}
    else:
        yield "not_centered", {"centered": False}
    if weight is not None:
        yield "ignores_weight", {"use_weight": False}
    if bias is not None:
        yield "ignores_bias", {"use_bias": False}


def _fault_models(kind: str, x, weight, bias, eps):
    """Yield (fault, output f64, None) for every fault that is expressible on this input."""
    for fault, kw in _fault_kwargs(kind, x, weight, bias):
        kw = dict(kw)
        e = kw.pop("eps", eps)
        yield fault, _model(kind, x, weight, bias, e, **kw), None


def _norm_hint(fault: str, d: int, g=None, want=None, bias=None) -> str:
    """The fault's sentence; for n-1, with the factor when the output shows it (it does
    unless eps dominates the variance)."""
    hint = FAULT_KINDS[fault]
    if fault == "unbiased_variance" and g is not None:
        b = 0.0 if bias is None else _to_f64(bias)
        c, k = _constant_ratio(g - b, want - b), math.sqrt((d - 1) / d)
        if c is not None and abs(c - k) < 1e-2 * k:
            hint = f"your normalised values are the reference's times {k:.3f} = sqrt({d - 1}/{d}): " + hint
    return hint


def _diagnose_norm(kind: str, x, weight, bias, eps, g, want, rtol, atol) -> tuple[str, str]:
    d = x.shape[-1]
    flat_g = g.reshape(-1, d)
    if not np.all(np.isfinite(g)) and np.all(np.isfinite(want)):
        flat_x = _to_f64(x).reshape(-1, d)
        bad_rows = ~np.all(np.isfinite(flat_g), axis=-1)
        constant = np.ptp(flat_x, axis=-1) == 0
        if np.any(bad_rows & constant):
            row = int(np.argmax(bad_rows & constant))
            return "nan_on_constant_row", (f"NaN/inf on the constant row {row}: "
                                           + FAULT_KINDS["nan_on_constant_row"])
    found = _best_model(g, want, _fault_models(kind, x, weight, bias, eps), rtol, atol)
    if found is not None:
        return found[0], _norm_hint(found[0], d, g, want, bias)
    if not np.all(np.isfinite(g)):
        return "returns_nan", FAULT_KINDS["returns_nan"]
    c = _constant_ratio(g, want)
    if c is not None:
        return "wrong_values", f"your output equals the reference times {c:.4g}."
    return "wrong_values", FAULT_KINDS["wrong_values"]


# --------------------------------------------------------------------------- functional norms


@dataclass
class _Case:
    name: str
    x: object
    weight: object = None
    bias: object = None
    eps: float = 1e-6


def _norm_case_runner(kind: str, fn: Callable, call: Callable, reference: Callable):
    def run_case(case: _Case) -> CaseResult:
        args, kwargs = call(case)
        want = _to_f64(reference(case))
        got, failed = _student_call(case.name, fn, args, kwargs, watch=(case.x,), keepdim_hint=True)
        if failed:
            return failed
        return _compare_array(case.name, case.x, got, want, lambda g, rtol, atol: _diagnose_norm(
            kind, case.x, case.weight, case.bias, case.eps, g, want, rtol, atol))

    return run_case


def _battery(kind: str, backend: str) -> list[_Case]:
    """Fixed, seeded cases; each is built to expose particular faults (see the names).

    The rms torch battery's six cases and their order are a contract: the rmsnorm assignment
    and the demo class's expected scores are derived from them.
    """
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


def _check_backend(backend: str) -> None:
    if backend not in ("torch", "numpy"):
        raise ValueError(f"backend must be 'torch' or 'numpy', got {backend!r}")


@_single_threaded
def check_rms_norm(fn: Callable, backend: str = "torch", quick: bool = False) -> CheckResult:
    """Check a student's ``rms_norm(x, weight, eps=1e-6)`` against :func:`normref.rms_norm`.

    Args:
        fn: the student's function, called as ``fn(x, weight, eps=eps)`` with ``x`` of shape
            ``[..., D]`` (1-D, ``[2, 3, 8]``, ``[4, 4, 4]`` ...) and ``weight`` of shape ``[D]``.
        backend: ``"torch"`` (six cases: seed (1, 2, 3), ``[2, 3, 8]``, ``[4, 4, 4]``, tiny values
            with eps=1e-4, the float16 overflow row, bfloat16) or ``"numpy"`` (the same without
            bfloat16).
        quick: run only the seed's two cases, ``(1, 2, 3)`` and ``[2, 3, 8]`` (a fast self-check).

    Returns:
        :class:`CheckResult`; ``.score`` is the fraction of cases passed. Diagnoses
        unbiased_variance, eps_outside_sqrt, no_eps, wrong_axis, missing_keepdim,
        low_precision_stats, wrong_dtype, subtracts_mean, ignores_weight, mutates_input, and
        the generic raises/timeout/wrong_type/wrong_shape/returns_nan. Never raises because of
        what ``fn`` does.

    Raises:
        ValueError: unknown ``backend``.

    Source: the seed's Build challenge; Zhang and Sennrich 2019, eq. (4).
    """
    _check_backend(backend)
    cases = _battery("rms", backend)[: 2 if quick else None]
    return _run("rms_norm", cases, _norm_case_runner(
        "rms", fn, call=lambda c: ((c.x, c.weight), {"eps": c.eps}),
        reference=lambda c: rms_norm(c.x, c.weight, eps=c.eps)), fn)


@_single_threaded
def check_layer_norm(fn: Callable, backend: str = "numpy", quick: bool = False) -> CheckResult:
    """Check a student's ``layer_norm(x, weight, bias, eps=1e-5)`` against :func:`normref.layer_norm`.

    Args:
        fn: the student's function, called as ``fn(x, weight, bias, eps=eps)`` with ``x`` of
            shape ``[..., D]`` and ``weight``/``bias`` of shape ``[D]``.
        backend: ``"numpy"`` (arrays: six cases, the rms battery's without bfloat16 plus a
            constant row) or ``"torch"`` (tensors: seven cases, with bfloat16).
        quick: run only the seed's two cases, ``(1, 2, 3)`` and ``[2, 3, 8]`` (a fast self-check).

    Returns:
        :class:`CheckResult`; ``.score`` is the fraction of cases passed. Diagnoses
        unbiased_variance, eps_outside_sqrt, no_eps, wrong_axis (also on ``[4, 4, 4]`` where it
        broadcasts), missing_keepdim, low_precision_stats, wrong_dtype, not_centered,
        nan_on_constant_row, ignores_weight, ignores_bias, mutates_input and the generic faults.

    Raises:
        ValueError: unknown ``backend``.

    Source: Ba et al. 2016, eq. (3)-(4); the seed's worked example LN(1,2,3).
    """
    _check_backend(backend)
    cases = _battery("layer", backend)[: 2 if quick else None]
    return _run("layer_norm", cases, _norm_case_runner(
        "layer", fn, call=lambda c: ((c.x, c.weight, c.bias), {"eps": c.eps}),
        reference=lambda c: layer_norm(c.x, c.weight, c.bias, eps=c.eps)), fn)


# --------------------------------------------------------------------------- RMSNorm module


@dataclass
class _ModuleCase:
    name: str
    dim: int
    x: object = None
    eps: float | None = None  # None: construct with the default eps
    weight: object = None  # None: keep the module's initial weight


def _module_battery() -> list[_ModuleCase]:
    import torch

    g = torch.Generator().manual_seed(17)

    def rnd(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    w8 = 1 + 0.5 * rnd(8)
    return [
        _ModuleCase("RMSNorm(8): weight is an nn.Parameter of ones, shape [8], the only parameter", 8),
        _ModuleCase("seed shape [2, 3, 8] float32 with a trained weight", 8, rnd(2, 3, 8, shift=0.5),
                    weight=w8),
        _ModuleCase("B = T = D [4, 4, 4] (a wrong axis still broadcasts)", 4,
                    rnd(4, 4, 4, scale=2.0, shift=1.0), weight=1 + 0.5 * rnd(4)),
        _ModuleCase("float16 row [300, -300, 300, -300] (x**2 overflows float16)", 4,
                    torch.tensor([[300.0, -300.0, 300.0, -300.0], [1.0, 2.0, 3.0, 4.0]],
                                 dtype=torch.float16)),
        _ModuleCase("bfloat16 [2, 3, 8] with a trained weight", 8, rnd(2, 3, 8).to(torch.bfloat16),
                    weight=w8),
        _ModuleCase("RMSNorm(5, eps=1e-4) on tiny values 1e-3 (where eps sits matters)", 5,
                    rnd(2, 5, scale=1e-3), eps=1e-4),
        _ModuleCase("default eps: RMSNorm(4) on values 1e-3 (eps=1e-6 is felt)", 4,
                    rnd(2, 4, scale=1e-3)),
    ]


def _build(case: str, cls, args: tuple, kwargs: dict):
    """Construct the student's module; ``(module, None)`` or ``(None, failing CaseResult)``."""
    from torch import nn

    m, failed = _student_call(case, cls, args, kwargs)
    if failed:
        return None, failed
    if not isinstance(m, nn.Module):
        return None, _fail(case, f"{getattr(cls, '__name__', 'cls')}(...) returned "
                           f"{type(m).__name__}, not an nn.Module; subclass torch.nn.Module.", "raises")
    return m, None


@_single_threaded
def check_rms_norm_module(cls) -> CheckResult:
    """Check a student's MiniMind-style ``RMSNorm(dim, eps=1e-6)`` ``nn.Module`` class.

    The contract (the seed's "Show the RMSNorm module"): ``cls(dim)`` and ``cls(dim, eps=...)``
    build a module whose only parameter is ``.weight``, an ``nn.Parameter`` of ones with shape
    ``[dim]``; ``module(x)`` maps ``[..., dim]`` (e.g. ``[B, T, D]``) to the same shape and dtype,
    statistics in float32, cast back to ``x.dtype``. Casting before or after the weight multiply
    (Hugging Face's Llama vs the seed) is accepted: they differ by at most one bf16 ulp.

    Args:
        cls: the student's class (or any callable returning an ``nn.Module``).

    Returns:
        :class:`CheckResult` with seven cases: the parameter, float32 ``[2, 3, 8]`` with a
        trained weight, ``[4, 4, 4]``, the float16 overflow row, bfloat16, eps=1e-4 on tiny
        values, and the default eps. Diagnoses module_weight, wrong_eps and every
        :func:`check_rms_norm` fault. Never raises because of what ``cls`` does.

    Raises:
        Nothing: whatever the student's code does (raising, looping, odd return values)
        becomes a failing case with a message.

    Source: the seed's MiniMind ``RMSNorm``; Zhang and Sennrich 2019, eq. (4).
    """
    import torch
    from torch import nn

    def run_case(case: _ModuleCase) -> CaseResult:
        kwargs = {} if case.eps is None else {"eps": case.eps}
        m, failed = _build(case.name, cls, (case.dim,), kwargs)
        if failed:
            return failed
        if case.x is None:  # the parameter case
            w = getattr(m, "weight", None)
            names = [n for n, _ in m.named_parameters()]
            if not isinstance(w, nn.Parameter):
                got = "no attribute weight" if w is None else f"weight is a {type(w).__name__}"
                return _fail(case.name, f"{got}; {FAULT_KINDS['module_weight']}", "module_weight")
            if tuple(w.shape) != (case.dim,) or not torch.equal(w.detach().float(), torch.ones(case.dim)):
                return _fail(case.name, f"weight has shape {list(w.shape)} and should start as "
                             f"torch.ones({case.dim}); {FAULT_KINDS['module_weight']}", "module_weight")
            if names != ["weight"]:
                return _fail(case.name, f"parameters {names}, expected ['weight'] (RMSNorm has no "
                             f"bias); {FAULT_KINDS['module_weight']}", "module_weight")
            return CaseResult(case.name, True, f"case '{case.name}': ok")
        eps = RMS_NORM_EPS if case.eps is None else case.eps
        weight = case.weight
        if weight is not None:
            w = getattr(m, "weight", None)
            if not isinstance(w, torch.Tensor) or tuple(w.shape) != (case.dim,):
                return _fail(case.name, f"cannot set a trained weight: {FAULT_KINDS['module_weight']}",
                             "module_weight")
            with torch.no_grad():
                w.copy_(weight)
        want = _to_f64(rms_norm(case.x, weight, eps=eps))
        with torch.no_grad():
            got, failed = _student_call(case.name, m, (case.x,), watch=(case.x,), keepdim_hint=True)
        if failed:
            return failed

        def diagnose(g, rtol, atol):
            if case.eps is None:  # the default eps: did they pick another one?
                for other in (LAYER_NORM_EPS, 1e-8):
                    if _close(g, _to_f64(rms_norm(case.x, weight, eps=other)), rtol, atol):
                        return "wrong_eps", f"your default eps behaves like {other:g}; " + FAULT_KINDS["wrong_eps"]
            elif _close(g, _to_f64(rms_norm(case.x, weight)), rtol, atol):
                return "wrong_eps", (f"built with eps={case.eps:g}, your module still used 1e-6: "
                                     "store the eps argument (self.eps = eps) and use it in forward.")
            return _diagnose_norm("rms", case.x, weight, None, eps, g, want, rtol, atol)

        return _compare_array(case.name, case.x, got, want, diagnose)

    return _run("RMSNorm module", _module_battery(), run_case, cls, "a class")


# --------------------------------------------------------------------------- placement


class _ToySublayer:
    """A fixed nonlinear sublayer F(v) = tanh(v W + c) (not scale-equivariant, so every
    placement fault gives a different output); dtype in, dtype out."""

    def __init__(self, d: int, seed: int):
        import torch

        g = torch.Generator().manual_seed(seed)
        self.W = torch.randn(d, d, generator=g) / math.sqrt(d) * 2
        self.c = 0.5 * torch.randn(d, generator=g)

    def __call__(self, v):
        import torch

        return torch.tanh(v.float() @ self.W + self.c).to(v.dtype)

    def __repr__(self) -> str:
        return "F(v) = tanh(v W + c)"


@dataclass
class _PlacementCase:
    name: str
    x: object
    sublayer: Callable
    norm: Callable


def _placement_battery() -> list[_PlacementCase]:
    import torch

    from .blocks import CausalSelfAttention
    from .modules import LayerNorm, RMSNorm

    g = torch.Generator().manual_seed(18)

    def rnd(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    rms8 = RMSNorm(8)
    ln4 = LayerNorm(4)
    with torch.no_grad():
        rms8.weight.copy_(1 + 0.5 * rnd(8))
        ln4.weight.copy_(1 + 0.5 * rnd(4))
        ln4.bias.copy_(0.3 * rnd(4))
    torch.manual_seed(18)  # the attention's init; the caller's RNG state is restored by _seeded
    attn = CausalSelfAttention(8, 2)
    rms8b = RMSNorm(8)
    return [
        _PlacementCase("seed token (1, 2, 3), F(v) = 2v, LayerNorm without eps",
                       torch.tensor([1.0, 2.0, 3.0]), lambda v: 2 * v, LayerNorm(3, eps=0.0)),
        _PlacementCase("[2, 3, 8], F(v) = tanh(v W + c), RMSNorm with a trained gamma",
                       rnd(2, 3, 8, scale=2.0, shift=0.5), _ToySublayer(8, 1), rms8),
        _PlacementCase("B = T = D [4, 4, 4], F(v) = tanh(v W + c), LayerNorm with gamma and beta",
                       rnd(4, 4, 4, scale=3.0, shift=1.0), _ToySublayer(4, 2), ln4),
        _PlacementCase("[2, 5, 8], F = causal self-attention, RMSNorm",
                       rnd(2, 5, 8, scale=2.0), attn, rms8b),
    ]


@contextlib.contextmanager
def _seeded():
    """Keep the caller's global torch RNG state untouched by the checker's own seeding."""
    import torch

    state = torch.random.get_rng_state()
    try:
        yield
    finally:
        torch.random.set_rng_state(state)


def _pre_models(x, F, N):
    yield ("residual_from_normed", N(x) + F(N(x)), None)
    yield ("pre_post_swapped", N(x + F(x)), "that is Post-LN, Norm(x + F(x)); Pre-LN normalizes "
           "the sublayer's input and adds x back: x + F(Norm(x)).")
    yield ("missing_residual", F(N(x)), "the residual add is missing: Pre-LN adds x back, "
           "x + F(Norm(x)).")
    yield ("missing_norm", x + F(x), "the norm was not applied: Pre-LN feeds Norm(x) to the "
           "sublayer, x + F(Norm(x)).")
    yield ("norm_on_sublayer_output", x + N(F(x)), "the norm went after the sublayer, "
           "x + Norm(F(x)); Pre-LN normalizes the sublayer's input: x + F(Norm(x)).")


def _post_models(x, F, N):
    yield ("pre_post_swapped", x + F(N(x)), "that is Pre-LN, x + F(Norm(x)); Post-LN normalizes "
           "after the residual add: Norm(x + F(x)).")
    yield ("missing_residual", N(F(x)), "the residual add is missing: Post-LN normalizes the sum "
           "x + F(x).")
    yield ("missing_norm", x + F(x), "the norm was not applied: Post-LN returns Norm(x + F(x)).")
    yield ("norm_on_sublayer_output", x + N(F(x)), "only F(x) was normalized, x + Norm(F(x)); "
           "Post-LN normalizes the whole sum: Norm(x + F(x)).")
    yield ("residual_from_normed", N(x) + F(x), "x was normalized before the add, Norm(x) + F(x); "
           "Post-LN normalizes the sum: Norm(x + F(x)).")


def _models_f64(models):
    for fault, out, hint in models:
        yield fault, _to_f64(out), hint or FAULT_KINDS[fault]


def _diagnose_by_models(g, want, models, rtol, atol) -> tuple[str, str]:
    """The closest fault model, else NaN, else plain wrong values."""
    found = _best_model(g, want, _models_f64(models), rtol, atol)
    if found is not None:
        return found
    if not np.all(np.isfinite(g)):
        return "returns_nan", FAULT_KINDS["returns_nan"]
    return "wrong_values", FAULT_KINDS["wrong_values"]


def _check_placement(name: str, fn: Callable, reference: Callable, models: Callable) -> CheckResult:
    import torch

    with _seeded():
        cases = _placement_battery()

    def run_case(case: _PlacementCase) -> CaseResult:
        with torch.no_grad():
            want = _to_f64(reference(case.x, case.sublayer, case.norm))
            got, failed = _student_call(case.name, fn, (case.x, case.sublayer, case.norm),
                                        watch=(case.x,))
            if failed:
                return failed

            return _compare_array(case.name, case.x, got, want, lambda g, rtol, atol: _diagnose_by_models(
                g, want, models(case.x, case.sublayer, case.norm), rtol, atol))

    return _run(name, cases, run_case, fn)


@_single_threaded
def check_pre_ln(fn: Callable) -> CheckResult:
    """Check a student's ``pre_ln(x, sublayer, norm)`` = ``x + sublayer(norm(x))``.

    Args:
        fn: called as ``fn(x, sublayer, norm)`` with ``x`` a torch tensor ``[..., D]`` (the
            seed token ``(1, 2, 3)``, ``[2, 3, 8]``, ``[4, 4, 4]``, ``[2, 5, 8]``), ``sublayer`` a
            callable ``[..., D] -> [..., D]`` (``2v``, ``tanh(v W + c)``, causal self-attention)
            and ``norm`` a :class:`normref.RMSNorm` or :class:`normref.LayerNorm` with a trained
            gamma (and beta), so every misplacement gives different numbers.

    Returns:
        :class:`CheckResult` with four cases. Diagnoses residual_from_normed
        (``norm(x) + sublayer(norm(x))``), pre_post_swapped (``norm(x + sublayer(x))``),
        missing_residual, missing_norm, norm_on_sublayer_output, mutates_input and the generic
        faults. Never raises because of what ``fn`` does.

    Raises:
        Nothing: whatever the student's code does (raising, looping, odd return values)
        becomes a failing case with a message.

    Source: the seed, "Pre-LN, as depicted: Y = X + F(Norm(X))"; Xiong et al. 2020, Fig. 1(b).
    """
    from .blocks import pre_ln

    return _check_placement("pre_ln", fn, pre_ln, _pre_models)


@_single_threaded
def check_post_ln(fn: Callable) -> CheckResult:
    """Check a student's ``post_ln(x, sublayer, norm)`` = ``norm(x + sublayer(x))``.

    Args:
        fn: called as ``fn(x, sublayer, norm)``, on the same four cases as :func:`check_pre_ln`
            (``x``: ``(1, 2, 3)``, ``[2, 3, 8]``, ``[4, 4, 4]``, ``[2, 5, 8]`` float32 tensors).

    Returns:
        :class:`CheckResult` with four cases. Diagnoses pre_post_swapped
        (``x + sublayer(norm(x))``), missing_residual, missing_norm, norm_on_sublayer_output
        (``x + norm(sublayer(x))``), residual_from_normed (``norm(x) + sublayer(x)``),
        mutates_input and the generic faults. On the seed token with ``F(v) = 2v`` a missing
        residual is invisible (LN(2x) = LN(3x)); the other cases catch it.

    Raises:
        Nothing: whatever the student's code does (raising, looping, odd return values)
        becomes a failing case with a message.

    Source: the seed, "Original Post-LN: Y = Norm(X + F(X))"; Vaswani et al. 2017.
    """
    from .blocks import post_ln

    return _check_placement("post_ln", fn, post_ln, _post_models)


# --------------------------------------------------------------------------- a pre-norm block

_BLOCK_ATTRS = ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")


def _block_reference(x, A, M, N1, N2):
    h = x + A(N1(x))  # [B, T, D]
    return h + M(N2(h))


def _block_models(x, A, M, N1, N2):
    h = N1(x) + A(N1(x))
    yield "residual_from_normed", N2(h) + M(N2(h)), None
    h = N1(x + A(x))
    yield "pre_post_swapped", N2(h + M(h)), ("that is a Post-LN block, Norm(x + F(x)) twice; "
                                             "a Pre-LN block adds F(Norm(x)) to x.")
    h = x + A(N2(x))
    yield "norms_swapped", h + M(N1(h)), None
    h = A(N1(x))
    yield "missing_residual", M(N2(h)), "both residual adds are missing: h = x + attn(...), out = h + mlp(...)."
    yield "missing_residual", h + M(N2(h)), ("the first residual add is missing: "
                                             "h = x + self_attn(input_layernorm(x)).")
    h = x + A(N1(x))
    yield "missing_residual", M(N2(h)), ("the second residual add is missing: "
                                         "out = h + mlp(post_attention_layernorm(h)).")
    yield "mlp_reads_x", h + M(N2(x)), None
    yield "shared_norm", h + M(N1(h)), ("input_layernorm was used twice: the feed-forward "
                                        "sublayer has its own post_attention_layernorm.")


@dataclass
class _BlockCase:
    name: str
    x: object = None  # None: the build case
    parts: object = None  # (attention, feed-forward, norm 1, norm 2), or "own"


_BLOCK_DIM, _BLOCK_HEADS = 8, 2


def _block_battery() -> list[_BlockCase]:
    import torch

    from .blocks import CausalSelfAttention, FeedForward
    from .modules import LayerNorm, RMSNorm

    g = torch.Generator().manual_seed(19)
    torch.manual_seed(19)  # the sublayers' init (inside _seeded)

    def rnd(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    def norms(cls):  # two norms with different, trained gammas (and betas)
        n1, n2 = cls(8), cls(8)
        with torch.no_grad():
            for n in (n1, n2):
                n.weight.copy_(1 + 0.5 * rnd(8))
                if getattr(n, "bias", None) is not None:
                    n.bias.copy_(0.3 * rnd(8))
        return n1, n2

    return [
        _BlockCase("build: block_cls(8, 2) has input_layernorm, self_attn, post_attention_layernorm, mlp"),
        _BlockCase("wiring [2, 3, 8]: known attention, feed-forward and two RMSNorms with different gammas",
                   rnd(2, 3, 8, scale=2.0), (CausalSelfAttention(8, 2), FeedForward(8, 16), *norms(RMSNorm))),
        _BlockCase("wiring [4, 5, 8]: two LayerNorms with different gammas and betas",
                   rnd(4, 5, 8, scale=2.0, shift=0.5),
                   (CausalSelfAttention(8, 2), FeedForward(8, 16), *norms(LayerNorm))),
        _BlockCase("your own block on [2, 3, 8]: shape kept, and out = h + mlp(ln2(h)) with your modules",
                   rnd(2, 3, 8), "own"),
    ]


@_single_threaded
def check_pre_ln_block(block_cls) -> CheckResult:
    """Check a student's pre-norm transformer block: one block with its two norms, wired as in
    the seed's MiniMind block.

    The contract: ``block_cls(dim, n_heads)``, called as ``block_cls(8, 2)`` (a class or any
    factory; an already built ``nn.Module`` of width 8 is accepted too and copied, never
    modified) gives an ``nn.Module`` with four attributes, MiniMind's names,

    * ``input_layernorm`` and ``post_attention_layernorm``: two separate norms
      (e.g. :class:`normref.RMSNorm`),
    * ``self_attn``: ``[B, T, D] -> [B, T, D]`` (e.g. :class:`normref.CausalSelfAttention`),
    * ``mlp``: ``[B, T, D] -> [B, T, D]`` (e.g. :class:`normref.FeedForward`),

    and ``forward(x)`` for ``x`` of shape ``[B, T, D]``::

        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))

    The checker builds the block, then on two cases replaces the four submodules with its own
    (known weights, two norms with different gammas) so the wiring alone is graded, and on the
    last case runs the student's own submodules.

    Args:
        block_cls: the student's class, factory or module.

    Returns:
        :class:`CheckResult` with four cases. Diagnoses missing_attribute, shared_norm (one norm
        object used twice), residual_from_normed, pre_post_swapped, norms_swapped,
        missing_residual, mlp_reads_x, mutates_input and the generic faults. Never raises
        because of what the student's code does.

    Raises:
        Nothing: whatever the student's code does (raising, looping, odd return values)
        becomes a failing case with a message.

    Source: the seed's "Engineering bridge · two norms, one block width" (MiniMind's block);
    Xiong et al. 2020, Fig. 1(b).
    """
    import torch
    from torch import nn

    with _seeded():
        cases = _block_battery()

    def build(case: str):
        if isinstance(block_cls, nn.Module):  # a built block: work on a copy, never on theirs
            m, failed = _student_call(case, copy.deepcopy, (block_cls,))
        else:
            with _seeded():
                m, failed = _build(case, block_cls, (_BLOCK_DIM, _BLOCK_HEADS), {})
        if failed:
            return None, failed
        missing = [a for a in _BLOCK_ATTRS if not callable(getattr(m, a, None))]
        if missing:
            return None, _fail(case, f"no {', '.join(missing)}; {FAULT_KINDS['missing_attribute']}",
                               "missing_attribute")
        return m, None

    def run_case(case: _BlockCase) -> CaseResult:
        m, failed = build(case.name)
        if failed:
            return failed
        if case.x is None:
            if m.input_layernorm is m.post_attention_layernorm:
                return _fail(case.name, "input_layernorm and post_attention_layernorm are the same "
                             f"object; {FAULT_KINDS['shared_norm']}", "shared_norm")
            return CaseResult(case.name, True, f"case '{case.name}': ok")
        if case.parts == "own":
            parts = tuple(getattr(m, a) for a in ("self_attn", "mlp", "input_layernorm",
                                                  "post_attention_layernorm"))
        else:
            parts = case.parts  # the checker's known submodules replace the student's
            for attr, part in zip(("self_attn", "mlp", "input_layernorm", "post_attention_layernorm"),
                                  parts):
                setattr(m, attr, part)
        with torch.no_grad():
            if case.parts == "own":
                want_t, failed = _student_call(case.name, _block_reference, (case.x, *parts))
                if failed:  # their own submodules, called one by one, already fail
                    failed.message = failed.message.replace(
                        f"case '{case.name}': ", f"case '{case.name}': your submodules alone: ", 1)
                    return failed
                if not hasattr(want_t, "shape") or tuple(want_t.shape) != tuple(case.x.shape):
                    return _fail(case.name, "your submodules do not map [B, T, D] to [B, T, D] "
                                 f"(got {getattr(want_t, 'shape', type(want_t).__name__)}); "
                                 f"{FAULT_KINDS['wrong_shape']}", "wrong_shape")
                want = _to_f64(want_t)
            else:
                want = _to_f64(_block_reference(case.x, *parts))
            got, failed = _student_call(case.name, m, (case.x,), watch=(case.x,))
            if failed:
                return failed

            return _compare_array(case.name, case.x, got, want, lambda g, rtol, atol: _diagnose_by_models(
                g, want, _block_models(case.x, *parts), rtol, atol))

    return _run("pre-LN block", cases, run_case, block_cls, "a class or module")


# --------------------------------------------------------------------------- LayerNorm backward


@dataclass
class _BackwardCase:
    name: str
    dy: np.ndarray
    x: np.ndarray
    weight: np.ndarray
    eps: float


def _backward_battery() -> list[_BackwardCase]:
    rng = np.random.default_rng(20)
    return [
        _BackwardCase("seed (1, 2, 3) with dy = (1, 0, 0)", np.array([1.0, 0.0, 0.0]),
                      np.array([1.0, 2.0, 3.0]), np.ones(3), LAYER_NORM_EPS),
        _BackwardCase("[2, 3, 8] with a trained gamma", rng.normal(size=(2, 3, 8)),
                      rng.normal(size=(2, 3, 8)) + 0.5, 1 + 0.5 * rng.normal(size=8), LAYER_NORM_EPS),
        _BackwardCase("B = T = D [4, 4, 4] (a wrong axis still broadcasts)", rng.normal(size=(4, 4, 4)),
                      2 * rng.normal(size=(4, 4, 4)) + 1, 1 + 0.5 * rng.normal(size=4), LAYER_NORM_EPS),
        _BackwardCase("tiny values 1e-3 with eps=1e-4 (where eps sits matters)", rng.normal(size=(2, 5)),
                      1e-3 * rng.normal(size=(2, 5)), 1 + 0.5 * rng.normal(size=5), 1e-4),
    ]


def _bwd_model(dy, x, w, eps, *, axis=-1, ddof=0, eps_out=False, centered=True,
               mean_term=True, var_term=True, use_weight=True):
    """(dx, dweight, dbias) of ``y = w * xc * f(ms) + b`` with one fault, in numpy float64.

    ``xc = x - mean(x)`` (if ``centered``) and ``ms = sum(xc**2) / (n - ddof)`` along ``axis``;
    ``f(ms) = 1/sqrt(ms + eps)``, or ``1/(sqrt(ms) + eps)`` with ``eps_out``. By the chain rule
    ``dxc = g f + (sum(g xc) f'(ms)) 2 xc / (n - ddof)`` with ``g = dy * w``, and
    ``dx = dxc - mean(dxc)`` when centred. ``mean_term``/``var_term``/``use_weight`` drop the
    corresponding piece, as a student might. The defaults give :func:`normref.layer_norm_backward`.
    """
    n = x.shape[axis]
    if n - ddof <= 0:
        return None
    xc = x - x.mean(axis, keepdims=True) if centered else x
    ms = (xc**2).sum(axis, keepdims=True) / (n - ddof)
    with np.errstate(all="ignore"):
        if eps_out:
            f = 1 / (np.sqrt(ms) + eps)
            df = -(f**2) / (2 * np.sqrt(ms))
        else:
            f = 1 / np.sqrt(ms + eps)
            df = -0.5 * f**3
        g = dy * w if use_weight else dy
        dxc = g * f
        if var_term:
            dxc = dxc + (g * xc).sum(axis, keepdims=True) * df * 2 * xc / (n - ddof)
    dx = dxc - dxc.mean(axis, keepdims=True) if centered and mean_term else dxc
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xc * f).sum(lead), dy.sum(lead)


#: forward fault -> the _bwd_model options that differentiate it
_BWD_FORWARD_FAULTS = {"unbiased_variance": {"ddof": 1}, "eps_outside_sqrt": {"eps_out": True},
                       "no_eps": {"eps": 0.0}, "not_centered": {"centered": False}}


def _backward_models(case: _BackwardCase):
    dy, x, w, eps = case.dy, case.x, case.weight, case.eps

    def model(**kw):
        return _bwd_model(dy, x, w, kw.pop("eps", eps), **kw)

    for fault, kw in _BWD_FORWARD_FAULTS.items():
        yield fault, model(**kw), None
    for ax in range(x.ndim - 1):
        yield "wrong_axis", model(axis=ax), None
    yield "ignores_weight", model(use_weight=False), "dx must use g = dy * weight (the chain rule through gamma)."
    yield "bwd_no_mean_term", model(mean_term=False), None
    yield "bwd_no_variance_term", model(var_term=False), None
    yield "bwd_constant_stats", model(mean_term=False, var_term=False), None
    dx, dw, db = layer_norm_backward(dy, x, w, eps)
    yield "bwd_dweight_dbias_swapped", (dx, db, dw), None


_BWD_NAMES = ("dx", "dweight", "dbias")


@_single_threaded
def check_layer_norm_backward(fn: Callable) -> CheckResult:
    """Check a student's ``layer_norm_backward(dy, x, weight, eps)`` -> ``(dx, dweight, dbias)``.

    Args:
        fn: called as ``fn(dy, x, weight, eps)`` with float64 numpy arrays ``dy`` and ``x`` of
            shape ``[..., D]`` (1-D, ``[2, 3, 8]``, ``[4, 4, 4]``, ``[2, 5]``) and ``weight`` of
            shape ``[D]``; must return numpy ``(dx [..., D], dweight [D], dbias [D])``.

    Returns:
        :class:`CheckResult` with four cases, each passed when all three gradients agree with
        :func:`normref.layer_norm_backward` (rtol 1e-5). Diagnoses bwd_no_mean_term,
        bwd_no_variance_term, bwd_constant_stats, bwd_dweight_dbias_swapped, bwd_not_summed,
        ignores_weight, and the gradients of the forward faults (unbiased_variance,
        eps_outside_sqrt, no_eps, wrong_axis, not_centered), plus mutates_input and the generic
        faults. Never raises because of what ``fn`` does.

    Raises:
        Nothing: whatever the student's code does (raising, looping, odd return values)
        becomes a failing case with a message.

    Source: Ba et al. 2016, eq. (3)-(4) differentiated; :mod:`normref.backward`.
    """

    def run_case(case: _BackwardCase) -> CaseResult:
        want = layer_norm_backward(case.dy, case.x, case.weight, case.eps)
        got, failed = _student_call(case.name, fn, (case.dy, case.x, case.weight, case.eps),
                                    watch=(case.dy, case.x, case.weight))
        if failed:
            return failed
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            size = f" of length {len(got)}" if isinstance(got, (tuple, list)) else ""
            return _fail(case.name, f"returned a {type(got).__name__}{size}; return the tuple "
                         "(dx, dweight, dbias).", "wrong_type")
        for label, a, w in zip(_BWD_NAMES, got, want):
            if not isinstance(a, np.ndarray):
                return _fail(case.name, f"{label} is a {type(a).__name__}; return numpy arrays. "
                             f"{FAULT_KINDS['wrong_type']}", "wrong_type")
            if a.shape != w.shape:
                fault = "wrong_shape" if label == "dx" else "bwd_not_summed"
                return _fail(case.name, f"{label} has shape {list(a.shape)}, expected "
                             f"{list(w.shape)}; {FAULT_KINDS[fault]}", fault)
        g = tuple(np.asarray(a, dtype=np.float64) for a in got)
        rtol, atol = _tolerance("float64")
        errs = {label: _errors(a, w) for label, a, w in zip(_BWD_NAMES, g, want)}
        max_abs = max(e[0] for e in errs.values())
        max_rel = max(e[1] for e in errs.values())
        bad = [label for label, a, w in zip(_BWD_NAMES, g, want) if not _close(a, w, rtol, atol)]
        if not bad:
            return CaseResult(case.name, True, f"case '{case.name}': ok", None, max_abs, max_rel)
        where = "; ".join(f"{label} max abs error {_fmt(errs[label][0])} (rel {_fmt(errs[label][1])})"
                          for label in bad)

        def flat(triple):  # the three gradients as one vector, so one model explains them all
            return np.concatenate([np.ravel(a) for a in triple])

        models = ((fault, flat(out), hint) for fault, out, hint in _backward_models(case)
                  if out is not None and all(o.shape == w.shape for o, w in zip(out, want)))
        fault, hint = _diagnose_by_models(flat(g), flat(want), models, rtol, atol)
        return _fail(case.name, f"{where}; {hint}", fault, max_abs, max_rel)

    return _run("layer_norm_backward", _backward_battery(), run_case, fn)
