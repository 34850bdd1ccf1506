"""The ``batchnorm`` assignment's self-check: :func:`check_batch_norm` (released beside the notebook).

The student writes ``batch_norm(x, weight, bias, running_mean, running_var, mask=None,
training=True, momentum=0.1, eps=1e-5) -> (y, new_running_mean, new_running_var)``: BatchNorm over
``[B, T, D]`` tokens, each feature's statistics taken across every real token of every sequence
(``mask`` ``[B, T]``, True for a real token, False for padding), in training mode (the batch's
statistics, and the running averages updated as ``torch.nn.BatchNorm1d`` updates them) or in
evaluation mode (the running averages). Padded positions come back as 0.

The expected values here are ``torch.nn.functional.batch_norm`` on the real tokens gathered into
``[N, D]`` (the library's BatchNorm, which the assignment forbids the answer to call); grading
runs this same checker on new cases of the same kinds, with the grader's own reference beside it.

Source: Ioffe and Szegedy 2015, "Batch Normalization", Algorithm 1 (training) and section 3.1
(inference with the running averages; the unbiased variance ``m/(m-1)``).
"""
from __future__ import annotations

from dataclasses import dataclass

from normref.checks.compare import compare_array, dtype_name, to_f64, tolerance
from normref.checks.core import CaseResult, CheckResult, fail, msg, run, seeded_randn, single_threaded, student_call
from normref.diagnosis.outputs import observe
from normref.diagnosis.questions import Output, Question, declare
# What counts as calling a reference: torch's and normref's normalizations, as for the other norms.
from normref.rules import NORM_REFERENCE as REFERENCE

__all__ = ["BatchNormCase", "check_batch_norm", "expected", "public_battery"]


@dataclass
class BatchNormCase:
    """One call: ``batch_norm(x, weight, bias, running_mean, running_var, mask=mask,
    training=training, momentum=momentum, eps=eps)``; ``x`` ``[B, T, D]`` (any float dtype),
    ``weight``/``bias``/``running_*`` ``[D]`` float32, ``mask`` ``[B, T]`` bool or None."""

    name: str
    x: object
    weight: object
    bias: object
    running_mean: object
    running_var: object
    mask: object = None
    training: bool = True
    momentum: float = 0.1
    eps: float = 1e-5

    def call(self) -> tuple[tuple, dict]:
        return ((self.x, self.weight, self.bias, self.running_mean.clone(), self.running_var.clone()),
                {"mask": self.mask, "training": self.training, "momentum": self.momentum, "eps": self.eps})


def expected(case: BatchNormCase):
    """``(y, running_mean, running_var)`` by ``torch.nn.functional.batch_norm`` on the real
    tokens (``[N, D]``, float32), ``y`` scattered back to ``[B, T, D]`` (0 at padding) in ``x``'s
    dtype; raises ``ValueError`` as the library does for one real token in training."""
    import torch
    import torch.nn.functional as F

    x = case.x
    real = torch.ones(x.shape[:2], dtype=torch.bool) if case.mask is None else case.mask.bool()  # [B, T]
    rm, rv = case.running_mean.clone().float(), case.running_var.clone().float()
    yr = F.batch_norm(x.float()[real], rm, rv, case.weight.float(), case.bias.float(),  # [N, D]
                      training=case.training, momentum=case.momentum, eps=case.eps)
    y = torch.zeros(x.shape, dtype=torch.float32)
    y[real] = yr
    return y.to(x.dtype), rm, rv


def _case(name, rnd, b, t, d, *, pad=None, dtype=None, training=True, momentum=0.1, eps=1e-5,
          scale=2.0, shift=1.0, running=None):
    import torch

    x = rnd(b, t, d, scale=scale, shift=shift)  # [B, T, D]
    mask = None
    if pad is not None:  # the last `pad[i]` tokens of sequence i are padding, filled with large values
        mask = torch.ones(b, t, dtype=torch.bool)
        for i, p in enumerate(pad):
            if p:
                mask[i, t - p:] = False
                x[i, t - p:] = 50.0
    if dtype is not None:
        x = x.to(dtype)
    weight, bias = 1 + 0.5 * rnd(d), 0.3 * rnd(d)
    rm, rv = running if running is not None else (0.5 * rnd(d), 1 + rnd(d).abs())
    return BatchNormCase(name, x, weight, bias, rm, rv, mask, training, momentum, eps)


def public_battery() -> list[BatchNormCase]:
    """The self-check's cases: training without and with padding, evaluation, float16, the
    running averages at another momentum, and one real token (which must raise)."""
    import torch

    rnd = seeded_randn(160)
    return [
        _case("[2, 3, 4] training, no padding", rnd, 2, 3, 4),
        _case("[2, 4, 4] training, the last 2 tokens of sequence 1 are padding", rnd, 2, 4, 4, pad=(0, 2)),
        _case("[2, 3, 4] evaluation with running averages", rnd, 2, 3, 4, training=False),
        _case("B = T = D [4, 4, 4] training, padding in two sequences", rnd, 4, 4, 4, pad=(1, 0, 3, 0)),
        _case("float16 [2, 3, 8] training, a spread of 200 (its squares overflow float16): statistics in float32",
              rnd, 2, 3, 8, dtype=torch.float16, scale=200.0, shift=300.0),
        _case("[3, 2, 4] training, momentum 0.3", rnd, 3, 2, 4, momentum=0.3),
        _case("one real token in training: BatchNorm has no spread to divide by", rnd, 1, 2, 4, pad=(1,)),
    ]


#: The outputs, in order, as the diagnosis names them (normref.diagnosis.Output).
OUTPUTS = ("y", "new_running_mean", "new_running_var")


def _compare(case: BatchNormCase, got) -> CaseResult:
    """``got`` against :func:`expected`, output by output (``y``, then the running averages); a
    wrong value is left to the shared diagnosis (:func:`normref.diagnosis.refine`, run by
    :func:`normref.checks.core.run`), which measures what the answer does."""
    name = case.name
    try:
        want = expected(case)
    except ValueError:  # one real token: the answer must refuse too (it returned a value)
        return fail(name, "returned a value for one real token in training; with one value per feature "
                    "there is no variance to divide by: raise ValueError, as torch's BatchNorm does", "wrong_values")
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return fail(name, f"returned {type(got).__name__}; return (y, new_running_mean, new_running_var)",
                    "wrong_type")
    results = []
    for label, g, w, like in zip(OUTPUTS, got, want, (case.x, case.running_mean, case.running_mean)):
        res = compare_array(name, like, g, to_f64(w), lambda g_, rtol, atol: ("wrong_values", msg("wrong_values")),
                            output=label)
        if not res.passed and res.observed is None:  # a type, shape or dtype: said of that output
            res.message = res.message.replace(f"case '{name}': ", f"case '{name}': {label}: ", 1)
            return res
        results.append(res)
    bad = next((r for r in results if not r.passed), None)
    label = None if bad is None else OUTPUTS[results.index(bad)]
    observed = observe({label: (to_f64(g), to_f64(w)) for label, g, w in zip(OUTPUTS, got, want)},
                       *tolerance(dtype_name(case.x)), failed=label)
    if bad is None:
        ok = results[0]
        ok.observed = observed
        return ok
    bad.message = bad.message.replace(f"case '{name}': ", f"case '{name}': {label}: ", 1)
    bad.observed = observed
    return bad


@single_threaded
def check_batch_norm(fn, quick: bool = False, *, cases: list[BatchNormCase] | None = None) -> CheckResult:
    """Check a student's masked BatchNorm over ``[B, T, D]`` tokens (the module docstring).

    Args:
        fn: the student's ``batch_norm``.
        quick: the first two cases only (the visible check).
        cases: the battery to run instead of :func:`public_battery` (grading draws its own).

    Returns:
        :class:`normref.checks.CheckResult`; ``.score`` is the fraction of cases passed. Never
        raises because of what ``fn`` does.
    """
    cases = (public_battery() if cases is None else list(cases))[: 2 if quick else None]

    def run_case(case: BatchNormCase) -> CaseResult:
        try:
            expected(case)
            refused, twin = False, None
        except ValueError:  # a case to refuse: first the same input with every token real, which must not be
            refused = True  # (made whatever the answer does: grading plans the same calls)
            targs, tkwargs = case.call()
            _, twin = student_call(case.name, fn, targs, {**tkwargs, "mask": None}, watch=(case.x,))
        args, kwargs = case.call()
        got, failed = student_call(case.name, fn, args, kwargs, watch=(case.x,))
        if failed is not None:
            if refused and "ValueError" in failed.message:
                if twin is not None and "ValueError" in twin.message:
                    return fail(case.name, "raised ValueError here, and also with every token real "
                                f"({case.x.shape[0] * case.x.shape[1]} of them): raise it only when fewer than "
                                "two tokens are real", "raises")
                return CaseResult(case.name, True, f"case '{case.name}': ok")
            return failed
        return _compare(case, got)

    return run("batch_norm", cases, run_case, fn, backend="torch", reference=REFERENCE)


# the question, declared (normref.diagnosis): what an answer's outputs and probes measure, said of
# the output they are about (y per token; the running averages per feature)
def _reference(x, weight, bias, running_mean, running_var, mask=None, training=True, momentum=0.1, eps=1e-5):
    return expected(BatchNormCase("", x, weight, bias, running_mean, running_var, mask, training, momentum, eps))


def _statistics(args: tuple, kwargs: dict) -> dict:
    """The per-feature statistics ``[D]`` (float64) of one call's batch that a running average may
    take in, by the words that name them: over the real tokens (the reference's), and, where the
    call has padding, over every token with the padding included."""
    import numpy as np

    x = to_f64(args[0])  # [B, T, D]
    mask = kwargs.get("mask")
    real = np.ones(x.shape[:2], bool) if mask is None else to_f64(mask) != 0  # [B, T]
    out = {}
    for rows, padded in ((x[real], False), (x.reshape(-1, x.shape[-1]), True)):  # [N, D]
        n = rows.shape[0]
        if n < 2 or (padded and real.all()):
            continue
        mean, var = (f"the mean over all {n} tokens, padding included", f"the variance over all {n} tokens, "
                     "padding included,") if padded else ("the batch's mean", "the batch's variance")
        c = rows - rows.mean(0)
        out[mean] = rows.mean(0)
        out[f"{var} divided by n = {n} (biased)"] = (c * c).sum(0) / n
        out[f"{var} divided by n - 1 = {n - 1} (unbiased)"] = (c * c).sum(0) / (n - 1)
    return out


def _means(args: tuple, kwargs: dict) -> list:
    return [(w, v) for w, v in _statistics(args, kwargs).items() if "mean" in w]


def _variances(args: tuple, kwargs: dict) -> list:
    return [(w, v) for w, v in _statistics(args, kwargs).items() if "variance" in w]


# the probes: one element moved (which axes the statistics span), the padded tokens moved (does
# padding enter the statistics), each parameter and running average changed, float16 in float32
declare(Question("batch_norm", "batch_norm(x, weight, bias, running_mean, running_var, mask=None, training=True, "
                 "momentum=0.1, eps=1e-5)", _reference, "BatchNorm", lambda c: c.call(), traceable=False,
                 identify=False, mask="mask",
                 probes=("element", "pad", "weight", "bias", "eps", "running_mean", "running_var", "upcast"),
                 outputs=(Output("y"),
                          Output("new_running_mean", tokens=False, average_of="running_mean", statistics=_means),
                          Output("new_running_var", tokens=False, average_of="running_var",
                                 statistics=_variances))))
