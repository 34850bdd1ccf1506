"""The RMSNorm ``nn.Module``: :func:`check_rms_norm_module`."""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnosis.questions import Question, declare
from ..functional import LAYER_NORM_EPS, RMS_NORM_EPS, rms_norm
from ..rules import NORM_REFERENCE
from .compare import close, compare_array, to_f64
from .core import (CaseResult, CheckResult, fail, msg, quick_cut, run, seeded_randn, single_threaded,
    student_call)
from .norms import diagnose_norm


@dataclass
class _ModuleCase:
    name: str
    dim: int
    x: object = None
    eps: float | None = None  # None: construct with the default eps
    weight: object = None  # None: keep the module's initial weight


def _module_battery() -> list[_ModuleCase]:
    import torch

    rnd = seeded_randn(17)
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


def build(case: str, cls, args: tuple, kwargs: dict):
    """Construct the student's module; ``(module, None)`` or ``(None, failing CaseResult)``."""
    from torch import nn

    m, failed = student_call(case, cls, args, kwargs, record=False)  # grading records forward only
    if failed:
        return None, failed
    if not isinstance(m, nn.Module):
        return None, fail(case, f"{getattr(cls, '__name__', 'cls')}(...) returned "
                          f"{type(m).__name__}, not an nn.Module; subclass torch.nn.Module.", "raises")
    return m, None


def _parameter_case(case: _ModuleCase, m) -> CaseResult:
    import torch
    from torch import nn

    w = getattr(m, "weight", None)
    names = [n for n, _ in m.named_parameters()]
    if not isinstance(w, nn.Parameter):
        got = "no attribute weight" if w is None else f"weight is a {type(w).__name__}"
        return fail(case.name, f"{got}; {msg('module_weight')}", "module_weight")
    if tuple(w.shape) != (case.dim,) or not torch.equal(w.detach().float(), torch.ones(case.dim)):
        return fail(case.name, f"weight has shape {list(w.shape)} and should start as "
                    f"torch.ones({case.dim}); {msg('module_weight')}", "module_weight")
    if names != ["weight"]:
        return fail(case.name, f"parameters {names}, expected ['weight'] (RMSNorm has no "
                    f"bias); {msg('module_weight')}", "module_weight")
    return CaseResult(case.name, True, f"case '{case.name}': ok")


def _module_case(case: _ModuleCase, cls) -> CaseResult:
    """One case of :func:`check_rms_norm_module`: ``cls`` built (its parameter alone, or
    with a trained weight set) and called on the case's input, against :func:`rms_norm`."""
    import torch

    kwargs = {} if case.eps is None else {"eps": case.eps}
    m, failed = build(case.name, cls, (case.dim,), kwargs)
    if failed:
        return failed
    if case.x is None:
        return _parameter_case(case, m)
    eps = RMS_NORM_EPS if case.eps is None else case.eps
    weight = case.weight
    if weight is not None:
        w = getattr(m, "weight", None)
        if not isinstance(w, torch.Tensor) or tuple(w.shape) != (case.dim,):
            return fail(case.name, f"cannot set a trained weight: {msg('module_weight')}",
                        "module_weight")
        with torch.no_grad():
            w.copy_(weight)
    want = to_f64(rms_norm(case.x, weight, eps=eps))
    with torch.no_grad():
        got, failed = student_call(case.name, m, (case.x,), watch=(case.x,), keepdim_hint=True)
    if failed:
        return failed

    def diagnose(g, rtol, atol):
        if case.eps is None:  # the default eps: did they pick another one?
            for other in (LAYER_NORM_EPS, 1e-8):
                if close(g, to_f64(rms_norm(case.x, weight, eps=other)), rtol, atol):
                    return "wrong_eps", f"your default eps behaves like {other:g}; " + msg("wrong_eps")
        elif close(g, to_f64(rms_norm(case.x, weight)), rtol, atol):
            return "wrong_eps", (f"built with eps={case.eps:g}, your module still used 1e-6: "
                                 "store the eps argument (self.eps = eps) and use it in forward.")
        return diagnose_norm("rms", case.x, weight, None, eps, g, want, rtol, atol)

    return compare_array(case.name, case.x, got, want, diagnose)


@single_threaded
def check_rms_norm_module(cls, quick: bool = False, *, cases: list[_ModuleCase] | None = None) -> CheckResult:
    """Check a student's MiniMind-style ``RMSNorm(dim, eps=1e-6)`` ``nn.Module`` class.

    The contract (the seed's "Show the RMSNorm module"): ``cls(dim)`` and ``cls(dim, eps=...)``
    build a module whose only parameter is ``.weight``, an ``nn.Parameter`` of ones with shape
    ``[dim]``; ``module(x)`` maps ``[..., dim]`` (e.g. ``[B, T, D]``) to the same shape and dtype,
    statistics in float32, cast back to ``x.dtype``. Casting before or after the weight multiply
    (Hugging Face's Llama vs the seed) is accepted: they differ by at most one bf16 ulp.

    Args:
        cls: the student's class (or any callable returning an ``nn.Module``).
        quick: run only the first two cases (the parameter, ``[2, 3, 8]`` float32), the
            assignment's visible check.
        cases: the battery (``_ModuleCase``: ``dim``, ``x``, ``eps``, ``weight``) to run instead of
            the public one (``None``), e.g. the one grading draws for its run.

    Returns:
        :class:`CheckResult` with seven cases: the parameter, float32 ``[2, 3, 8]`` with a
        trained weight, ``[4, 4, 4]``, the float16 overflow row, bfloat16, eps=1e-4 on tiny
        values, and the default eps. Diagnoses module_weight, wrong_eps and every
        :func:`normref.checks.norms.check_rms_norm` fault. Never raises because of what ``cls`` does.

    Raises:
        Nothing: whatever the student's code does (raising, looping, odd return values)
        becomes a failing case with a message.

    Source: the seed's MiniMind ``RMSNorm``; Zhang and Sennrich 2019, eq. (4).
    """
    cases, rest = quick_cut(_module_battery() if cases is None else cases, quick)
    return run("RMSNorm module", cases, lambda case: _module_case(case, cls), cls, "a class", reference=NORM_REFERENCE,
               unchecked=rest)


def _module_args(case: _ModuleCase):
    """A forward case as the functional norm it computes: ``((x, weight), {"eps": eps})``."""
    if case.x is None:
        return None
    import torch

    weight = case.weight if case.weight is not None else torch.ones(case.dim)
    return (case.x, weight), {"eps": RMS_NORM_EPS if case.eps is None else case.eps}


# the question, declared (normref.diagnosis): measured on its outputs alone (grading's plan of a
# class makes the battery's calls only, so the self-check makes no other)
declare(Question("RMSNorm module", "RMSNorm.forward(x, weight, eps=1e-6)", rms_norm, "RMSNorm", _module_args,
                 norm="rms", traceable=False, probes=()))
