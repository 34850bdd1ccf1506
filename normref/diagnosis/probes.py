"""Diagnostic inputs: cases that expose numerical faults the graded battery does not.

The graded battery of ``check_layer_norm`` has no input where the one-pass variance
``E[x**2] - E[x]**2`` loses the spread to cancellation, so an answer computed that way passes
it. :data:`PROBES` adds such an input for the class report (:func:`run_probes` is called by
:func:`normref.diagnosis.record.record`, in the grading kernel): a float16 row with mean 1000
and spread 1. There, the one-pass variance in float32 is off by about 0.1 (tolerance 2e-3)
while the two-pass float32 variance of the reference and an honest float64 answer are within
1e-4. A probe never changes a score: it only puts the student in a group of the report, with
the search's name for what the probe showed.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["PROBES", "probe_cases", "run_probes"]


def _large_mean_case(backend: str):
    from ..checks.norms import NormCase
    from ..functional import LAYER_NORM_EPS

    rng = np.random.default_rng(1000)
    x = (1000 + rng.normal(size=(2, 8))).astype(np.float16)
    w, b = np.ones(8, np.float16), np.zeros(8, np.float16)
    name = "probe: float16 rows with mean 1000 and spread 1 (E[x**2] - E[x]**2 cancels)"
    if backend == "torch":
        import torch

        return NormCase(name, torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), LAYER_NORM_EPS)
    return NormCase(name, x, w, b, LAYER_NORM_EPS)


#: check function name -> (the grammar's checker name, [case builder(backend)]).
PROBES: dict[str, tuple[str, list[Callable]]] = {
    "check_layer_norm": ("layer_norm", [_large_mean_case]),
}


def _backend(check: str, args: tuple) -> str:
    if check == "check_layer_norm":
        return args[0] if args else "numpy"
    return args[0] if args else "torch"


def probe_cases(check: str, args: tuple = ()) -> list:
    """The diagnostic cases of one checker call (none for checkers without probes)."""
    if check not in PROBES:
        return []
    return [make(_backend(check, args)) for make in PROBES[check][1]]


def run_probes(check: str, fn, args: tuple, result) -> list:
    """Run ``fn`` on the probes of ``check``; return their ``CaseResult`` (the search names what
    a failing probe shows, using the battery's outputs in ``result`` too).

    Args:
        check: the check function's name, e.g. ``"check_layer_norm"``.
        fn: the student's function; args: the check call's extra arguments (the backend).
        result: the ``CheckResult`` of that call on the graded battery.
    """
    from .. import faults
    from ..checks import norms
    from ..checks.compare import compare_array, to_f64
    from ..checks.core import msg, student_call
    from ..functional import layer_norm
    from . import refine

    cases = probe_cases(check, args)
    if not cases or not callable(fn):
        return []
    backend = _backend(check, args)
    out = []
    for c in cases:
        want = to_f64(layer_norm(c.x, c.weight, c.bias, eps=c.eps))
        got, failed = student_call(c.name, fn, (c.x, c.weight, c.bias), {"eps": c.eps}, watch=(c.x,),
                                   keepdim_hint=True, backend=backend)
        out.append(failed or compare_array(c.name, c.x, got, want,
                                           lambda g, rtol, atol: ("wrong_values", msg("wrong_values", backend))))
    battery = norms.battery("layer", backend)[: len(result.cases)]
    graded = [type(r)(**{**r.__dict__}) for r in result.cases]  # copies: refine may rewrite only the probes
    for r in graded:
        if r.fault in ("wrong_values", "returns_nan"):
            r.fault = "graded"  # already diagnosed by the checker: not rewritten here
    refine(PROBES[check][0], battery + cases, graded + out)
    for r in out:
        r.message, _, variants = faults.split_tags(r.message)
        r.variant = getattr(r, "variant", None) or (variants[0] if variants else None)
    return out
