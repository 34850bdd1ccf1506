"""The LayerNorm backward pass: :func:`check_layer_norm_backward` (numpy, float64), with the
gradients of each forward fault and of each dropped term as its fault models.

Everything expected here is measured through a forward pass (:mod:`normref.backward`, the
complex step): the analytic backward is the assignment's answer and lives with the grader
(``grader/backward.py``), which hands it in as ``reference`` when it scores."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..backward import layer_norm_grads, vjp
from ..diagnosis.gradients import backward_facts
from ..diagnosis.outputs import observe
from ..diagnosis.questions import Output, Question, declare
from ..functional import LAYER_NORM_EPS
from ..rules import BACKWARD_REFERENCE
from .compare import close, diagnose_by_models, errors, fmt, tolerance
from .core import CaseResult, CheckResult, fail, msg, quick_cut, run, single_threaded, student_call


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


#: forward fault -> the forward variant (normref.backward.forward_variant) whose gradient it is
_BWD_FORWARD_FAULTS = {"unbiased_variance": {"ddof": 1}, "eps_outside_sqrt": {"eps_out": True},
                       "no_eps": {"eps": 0.0}, "not_centered": {"centered": False}}


def _backward_models(case: _BackwardCase, want=None):
    """(fault, (dx, dweight, dbias), hint) of each fault model: the gradient of a faulty forward,
    or of the forward with a statistic held constant (the term the gradient forgot), measured
    by the complex step (:func:`normref.backward.vjp`)."""
    dy, x, w, eps = case.dy, case.x, case.weight, case.eps

    def model(**kw):
        return vjp(dy, x, w, kw.pop("eps", eps), **kw)

    for fault, kw in _BWD_FORWARD_FAULTS.items():
        yield fault, model(**kw), None
    for ax in range(x.ndim - 1):
        yield "wrong_axis", model(axis=ax), None
    yield "ignores_weight", model(plain_weight=True), "dx must use g = dy * weight (the chain rule through gamma)."
    yield "bwd_no_mean_term", model(hold_mean=True), None
    yield "bwd_no_variance_term", model(hold_scale=True), None
    yield "bwd_constant_stats", model(hold_mean=True, hold_scale=True), None
    dx, dw, db = want if want is not None else layer_norm_grads(dy, x, w, eps)
    yield "bwd_dweight_dbias_swapped", (dx, db, dw), None


_BWD_NAMES = ("dx", "dweight", "dbias")


def _shape_fault(case: _BackwardCase, got, want) -> CaseResult | None:
    """A failing case if ``got`` is not three numpy arrays of ``want``'s shapes, else None."""
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        size = f" of length {len(got)}" if isinstance(got, (tuple, list)) else ""
        return fail(case.name, f"returned a {type(got).__name__}{size}; return the tuple "
                    "(dx, dweight, dbias).", "wrong_type")
    for label, a, w in zip(_BWD_NAMES, got, want):
        if label != "dx" and isinstance(a, (np.generic, float, int)) and not isinstance(a, bool):
            # dy.sum(-1) of a 1-D token is one number: an axis mistake, not a type mistake
            return fail(case.name, f"{label} is a single number; it has one entry per feature, shape "
                        f"{list(w.shape)}: {msg('bwd_not_summed', 'numpy')}", "bwd_not_summed")
        if not isinstance(a, np.ndarray):
            return fail(case.name, f"{label} is a {type(a).__name__}; return numpy arrays. "
                        f"{msg('wrong_type', 'numpy')}", "wrong_type")
        if a.shape != w.shape:
            fault = "wrong_shape" if label == "dx" else "bwd_not_summed"
            return fail(case.name, f"{label} has shape {list(a.shape)}, expected "
                        f"{list(w.shape)}; {msg(fault, 'numpy')}", fault)
    return None


def _backward_case(case: _BackwardCase, fn, reference) -> CaseResult:
    """One case of :func:`check_layer_norm_backward`: ``fn``'s three gradients against
    ``reference``'s (default :func:`layer_norm_grads`), a failure diagnosed by the known faults."""
    want = tuple(np.asarray(a, np.float64) for a in
                 (reference or layer_norm_grads)(case.dy, case.x, case.weight, case.eps))
    got, failed = student_call(case.name, fn, (case.dy, case.x, case.weight, case.eps),
                               watch=(case.dy, case.x, case.weight), keepdim_hint=True,
                               backend="numpy")
    if failed:
        return failed
    wrong = _shape_fault(case, got, want)
    if wrong:
        return wrong
    g = tuple(np.asarray(a, dtype=np.float64) for a in got)
    rtol, atol = tolerance("float64")
    errs = {label: errors(a, w) for label, a, w in zip(_BWD_NAMES, g, want)}
    max_abs = max(e[0] for e in errs.values())
    max_rel = max(e[1] for e in errs.values())
    bad = [label for label, a, w in zip(_BWD_NAMES, g, want) if not close(a, w, rtol, atol)]

    def flat(triple):  # the three gradients as one vector, so one model explains them all
        return np.concatenate([np.ravel(a) for a in triple])

    # for normref.diagnosis.refine: the three joined, each by its name and shape
    observed = observe({label: (a, w) for label, a, w in zip(_BWD_NAMES, g, want)}, rtol, atol)
    if not bad:
        return CaseResult(case.name, True, f"case '{case.name}': ok", None, max_abs, max_rel, observed)
    where = "; ".join(f"{label} max abs error {fmt(errs[label][0])} (rel {fmt(errs[label][1])})"
                      for label in bad)

    models = ((fault, flat(out), hint) for fault, out, hint in _backward_models(case, want)
              if out is not None and all(o.shape == w.shape for o, w in zip(out, want)))
    fault, hint = diagnose_by_models(flat(g), flat(want), models, rtol, atol, backend="numpy")
    failed = fail(case.name, f"{where}; {hint}", fault, max_abs, max_rel)
    failed.observed = observed
    return failed


@single_threaded
def check_layer_norm_backward(fn: Callable, quick: bool = False, *, reference: Callable | None = None,
                              cases: list[_BackwardCase] | None = None) -> CheckResult:
    """Check a student's ``layer_norm_backward(dy, x, weight, eps)`` -> ``(dx, dweight, dbias)``.

    Args:
        fn: called as ``fn(dy, x, weight, eps)`` with float64 numpy arrays ``dy`` and ``x`` of
            shape ``[..., D]`` (1-D, ``[2, 3, 8]``, ``[4, 4, 4]``, ``[2, 5]``) and ``weight`` of
            shape ``[D]``; must return numpy ``(dx [..., D], dweight [D], dbias [D])``.
        quick: run only the first two cases (the seed token, ``[2, 3, 8]``), the assignment's
            visible check.
        reference: ``reference(dy, x, weight, eps) -> (dx, dweight, dbias)``, the expected
            gradients (the grader passes its analytic backward); default
            :func:`normref.backward.layer_norm_grads`, measured through the forward.
        cases: the battery (``_BackwardCase``: ``dy``, ``x``, ``weight``, ``eps``, float64) to run
            instead of the public one (``None``), e.g. the one grading draws for its run.

    Returns:
        :class:`CheckResult` with four cases, each passed when all three gradients agree with
        the expected ones (rtol 1e-5). Diagnoses bwd_no_mean_term,
        bwd_no_variance_term, bwd_constant_stats, bwd_dweight_dbias_swapped, bwd_not_summed,
        ignores_weight, and the gradients of the forward faults (unbiased_variance,
        eps_outside_sqrt, no_eps, wrong_axis, not_centered), plus mutates_input and the generic
        faults. Messages use numpy's words. Never raises because of what ``fn`` does.

    Raises:
        Nothing: whatever the student's code does (raising, looping, odd return values)
        becomes a failing case with a message.

    Source: Ba et al. 2016, eq. (3)-(4); :mod:`normref.backward` (the complex step).
    """

    cases, rest = quick_cut(_backward_battery() if cases is None else cases, quick)
    return run("layer_norm_backward", cases, lambda case: _backward_case(case, fn, reference), fn,
               backend="numpy", reference=BACKWARD_REFERENCE, unchecked=rest)


# the question, declared (normref.diagnosis): a gradient's own properties measured (backward_facts),
# each of its three outputs by its name; its formula is the assignment's answer, never said
def _backward_reference(dy, x, weight, eps):
    return np.concatenate([np.ravel(a) for a in layer_norm_grads(dy, x, weight, eps)])


declare(Question("layer_norm_backward", "layer_norm_backward(dy, x, weight, eps=1e-5)", _backward_reference,
                 "the LayerNorm backward", lambda c: ((c.dy, c.x, c.weight, c.eps), {}), traceable=False, probes=(),
                 facts=backward_facts, outputs=(Output("dx"), Output("dweight", tokens=False),
                                                Output("dbias", tokens=False)), formula_is_answer=True))
