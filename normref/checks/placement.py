"""Placement: :func:`check_pre_ln` (``x + F(Norm(x))``) and :func:`check_post_ln`
(``Norm(x + F(x))``), with the misplacements each one names: an answer that implements another
known placement (:data:`normref.placements.PLACEMENTS`: Pre-LN, Post-LN, Peri-LN, Output-LN,
DeepNorm with any residual scale alpha, fitted) is named as that placement."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ..diagnosis.questions import Question, declare
from ..rules import PLACEMENT_REFERENCE
from .compare import compare_array, diagnose_by_models, matching_faults, to_f64
from .core import (CaseResult, CheckResult, quick_cut, run, seeded_module, seeded_randn, single_threaded,
    student_call)


class ToySublayer:
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


class Roll:
    """A fixed linear sublayer that is not a multiple of its input: F(v) = v with its features
    rotated one place, ``(v_D, v_1, ..., v_{D-1})`` (``torch.roll(v, 1, -1)``); on the seed token
    (1, 2, 3) it gives (3, 1, 2). With F(v) = 2v, x + F(x) = 3x, and a scale-invariant norm gives
    Norm(3x) = Norm(x) = Norm(F(x)): a Post-LN that drops the sublayer or the residual looks
    right there; with this F it does not."""

    def __call__(self, v):
        import torch

        return torch.roll(v, 1, dims=-1)

    def __repr__(self) -> str:
        return "F(v) = (v_D, v_1, ..., v_{D-1})"


@dataclass
class _PlacementCase:
    name: str
    x: object
    sublayer: Callable
    norm: Callable
    #: a second sublayer run on the same ``x`` and ``norm`` (the case passes when both outputs
    #: are right), e.g. :class:`Roll` beside the seed's F(v) = 2v
    also: Callable | None = None


def _placement_battery() -> list[_PlacementCase]:
    """The public battery of :func:`check_pre_ln` and :func:`check_post_ln` (fixed seeds: their
    own generators, never the global RNG)."""
    import torch

    from ..blocks import CausalSelfAttention
    from ..modules import LayerNorm, RMSNorm

    rnd = seeded_randn(18)
    rms8 = RMSNorm(8)
    ln4 = LayerNorm(4)
    with torch.no_grad():
        rms8.weight.copy_(1 + 0.5 * rnd(8))
        ln4.weight.copy_(1 + 0.5 * rnd(4))
        ln4.bias.copy_(0.3 * rnd(4))
    attn = seeded_module(torch.Generator().manual_seed(18), CausalSelfAttention, 8, 2)
    rms8b = RMSNorm(8)
    return [
        _PlacementCase("seed token (1, 2, 3), F(v) = 2v, then F(v) = (v3, v1, v2), LayerNorm without eps",
                       torch.tensor([1.0, 2.0, 3.0]), lambda v: 2 * v, LayerNorm(3, eps=0.0), Roll()),
        _PlacementCase("[2, 3, 8], F(v) = tanh(v W + c), RMSNorm with a trained gamma",
                       rnd(2, 3, 8, scale=2.0, shift=0.5), ToySublayer(8, 1), rms8),
        _PlacementCase("B = T = D [4, 4, 4], F(v) = tanh(v W + c), LayerNorm with gamma and beta",
                       rnd(4, 4, 4, scale=3.0, shift=1.0), ToySublayer(4, 2), ln4),
        _PlacementCase("[2, 5, 8], F = causal self-attention, RMSNorm",
                       rnd(2, 5, 8, scale=2.0), attn, rms8b),
    ]


def fit_residual_scale(out_of: Callable, got, lo: float = 1 / 64, hi: float = 64.0) -> float:
    """The residual scale ``alpha`` in ``[lo, hi]`` whose ``out_of(alpha)`` is closest to ``got``
    (max abs difference): a log-spaced grid, then golden-section search around its best point.

    Args:
        out_of: ``alpha -> output`` (any array; e.g. ``alpha -> Norm(alpha x + F(x))``).
        got: the student's output, float64 numpy.

    Returns:
        The best alpha (a float; whether it reproduces ``got`` is for the caller to check).
    """
    def err(a: float) -> float:
        out = to_f64(out_of(a))
        return float(np.max(np.abs(out - got))) if out.shape == got.shape and out.size else math.inf

    grid = np.geomspace(lo, hi, 97)
    errs = [err(float(a)) for a in grid]
    i = int(np.argmin(errs))
    a, b = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, len(grid) - 1)])
    phi = (math.sqrt(5) - 1) / 2
    c, d = b - phi * (b - a), a + phi * (b - a)
    ec, ed = err(c), err(d)
    for _ in range(40):  # the bracket shrinks by 0.618 each step: 40 steps reach ~1e-9 of alpha
        if ec < ed:
            b, d, ed = d, c, ec
            c = b - phi * (b - a)
            ec = err(c)
        else:
            a, c, ec = c, d, ed
            d = a + phi * (b - a)
            ed = err(d)
    return (a + b) / 2


def alpha_words(alpha: float) -> str:
    """``alpha`` as a student would write it: ``"2"``, ``"0.5"``, ``"1.41 (sqrt 2)"``, and DeepNet's
    ``"1.86 (DeepNet's (2N)^(1/4) for N = 6 layers)"``."""
    for k in range(1, 65):  # k/4: 0.25, 0.5, ..., 2, 3, ...
        if abs(alpha - k / 4) < 2e-3 * max(1.0, alpha):
            return f"{k / 4:g}"
    if abs(alpha - math.sqrt(2)) < 2e-3:
        return "1.41 (sqrt 2)"
    for n in range(1, 1001):
        if abs(alpha - (2 * n) ** 0.25) < 1e-3:
            return f"{alpha:.3g} (DeepNet's (2N)^(1/4) for N = {n} layers)"
    return f"{alpha:.3g}"


def deep_models(x, out_of: Callable, got, reference: str, block: bool = False):
    """The DeepNorm model, Post-LN with the residual scaled by a fitted alpha, for a student's
    output ``got`` (none when it is not given, or the fit is alpha ~ 1: that is Post-LN itself).

    Args:
        x: the case's input; out_of: ``alpha -> the DeepNorm output``; reference: the correct
            formula, as the end of the hint; block: word it for a whole block.
    """
    if got is None:
        return
    alpha = fit_residual_scale(out_of, got)
    if abs(alpha - 1) < 1e-3:
        return
    a = alpha_words(alpha)
    what = ("a DeepNorm block, Norm(alpha x + F(x)) for each sublayer" if block
            else "DeepNorm's Norm(alpha x + F(x))")
    yield ("residual_scaled", out_of(alpha), f"that is Post-LN with the residual scaled by {a}, "
           f"{what} with alpha = {a} (Wang et al. 2022); {reference}.")


def pre_models(x, F, N, got=None):
    """``(fault, output, hint)`` for each Pre-LN misplacement on input ``x`` (``got``: the student's
    output, float64, for the fitted DeepNorm model)."""
    yield ("residual_from_normed", N(x) + F(N(x)), None)
    yield ("pre_post_swapped", N(x + F(x)), "that is Post-LN, Norm(x + F(x)); Pre-LN normalizes "
           "the sublayer's input and adds x back: x + F(Norm(x)).")
    yield ("missing_residual", F(N(x)), "the residual add is missing: Pre-LN adds x back, "
           "x + F(Norm(x)).")
    yield ("missing_norm", x + F(x), "the norm was not applied: Pre-LN feeds Norm(x) to the "
           "sublayer, x + F(Norm(x)).")
    yield ("norm_on_sublayer_output", x + N(F(x)), "that is Output-LN (OLMo 2's placement), "
           "x + Norm(F(x)): the norm went after the sublayer; Pre-LN normalizes the sublayer's "
           "input: x + F(Norm(x)).")
    yield ("ignores_sublayer", x + N(x), "that is x + Norm(x): the sublayer was left out; Pre-LN "
           "is x + F(Norm(x)).")
    yield ("is_peri_ln", x + N(F(N(x))), "that is Peri-LN (Gemma 2's placement), x + Norm(F(Norm(x))): "
           "the sublayer's output was normalized too; Pre-LN adds F(Norm(x)) as it is: x + F(Norm(x)).")
    Fx = F(x)
    yield from deep_models(x, lambda a: N(a * x + Fx), got, "Pre-LN is x + F(Norm(x))")


def post_models(x, F, N, got=None):
    """``(fault, output, hint)`` for each Post-LN misplacement on input ``x`` (``got``: the student's
    output, float64, for the fitted DeepNorm model)."""
    yield ("pre_post_swapped", x + F(N(x)), "that is Pre-LN, x + F(Norm(x)); Post-LN normalizes "
           "after the residual add: Norm(x + F(x)).")
    yield ("missing_residual", N(F(x)), "the residual add is missing: Post-LN normalizes the sum "
           "x + F(x).")
    yield ("missing_norm", x + F(x), "the norm was not applied: Post-LN returns Norm(x + F(x)).")
    yield ("norm_on_sublayer_output", x + N(F(x)), "that is Output-LN (OLMo 2's placement), "
           "x + Norm(F(x)): only F(x) was normalized; Post-LN normalizes the whole sum: Norm(x + F(x)).")
    yield ("residual_from_normed", N(x) + F(x), "x was normalized before the add, Norm(x) + F(x); "
           "Post-LN normalizes the sum: Norm(x + F(x)).")
    yield ("ignores_sublayer", N(x), "that is Norm(x): the sublayer was left out; Post-LN "
           "normalizes x + F(x).")
    yield ("is_peri_ln", x + N(F(N(x))), "that is Peri-LN (Gemma 2's placement), x + Norm(F(Norm(x))): "
           "the norm sits on both sides of the sublayer and the residual stream is never normalized; "
           "Post-LN normalizes the sum: Norm(x + F(x)).")
    Fx = F(x)
    yield from deep_models(x, lambda a: N(a * x + Fx), got, "Post-LN adds x itself: Norm(x + F(x))")


def _check_placement(name: str, fn: Callable, reference: Callable, models: Callable,
                     quick: bool, cases: list | None) -> CheckResult:
    import torch

    cases, rest = quick_cut(_placement_battery() if cases is None else cases, quick)

    def run_case(case: _PlacementCase) -> CaseResult:
        sublayers = [case.sublayer] + ([case.also] if case.also is not None else [])
        with torch.no_grad():
            # every call is made before any is judged: grading replays the calls in this order
            calls = []
            for F in sublayers:
                got, failed = student_call(case.name, fn, (case.x, F, case.norm),
                                           watch=(case.x,), handed_in=(F, case.norm))
                calls.append((F, got, failed))
            judged = []  # (result, ambiguous: several known mistakes give this output here)
            for i, (F, got, failed) in enumerate(calls):
                ambiguous = False
                if failed is None:
                    want = to_f64(reference(case.x, F, case.norm))
                    failed = compare_array(case.name, case.x, got, want, lambda g, rtol, atol, F=F, want=want:
                                           diagnose_by_models(g, want, models(case.x, F, case.norm, g), rtol, atol))
                    if failed.observed is not None and not failed.passed:
                        g, _, rtol, atol = failed.observed
                        ambiguous = len(matching_faults(g, want, models(case.x, F, case.norm, g), rtol, atol)) > 1
                if i and not failed.passed:  # the second sublayer: say which, and what was observed on
                    failed.message = failed.message.replace(  # (normref.diagnosis reads observed_case)
                        f"case '{case.name}': ", f"case '{case.name}': with the second sublayer, {F!r}: ", 1)
                    failed.observed_case = replace(case, sublayer=F, also=None)
                judged.append((failed, ambiguous))
            fails = [(r, amb) for r, amb in judged if not r.passed]
            if not fails:
                return judged[0][0]
            # F(v) = 2v cannot tell Post-LN from DeepNorm (Norm(3x) = Norm(alpha x + 2x)): a failure
            # several known mistakes explain is named from the call that tells them apart
            return next((r for r, amb in fails if not amb), fails[0][0])

    return run(name, cases, run_case, fn, reference=PLACEMENT_REFERENCE, unchecked=rest)


@single_threaded
def check_pre_ln(fn: Callable, quick: bool = False, *, cases: list | None = None) -> CheckResult:
    """Check a student's ``pre_ln(x, sublayer, norm)`` = ``x + sublayer(norm(x))``.

    Args:
        fn: called as ``fn(x, sublayer, norm)`` with ``x`` a torch tensor ``[..., D]`` (the
            seed token ``(1, 2, 3)``, ``[2, 3, 8]``, ``[4, 4, 4]``, ``[2, 5, 8]``), ``sublayer`` a
            callable ``[..., D] -> [..., D]`` (``2v`` and then ``(v3, v1, v2)`` on the seed token,
            ``tanh(v W + c)``, causal self-attention)
            and ``norm`` a :class:`normref.RMSNorm` or :class:`normref.LayerNorm` with a trained
            gamma (and beta), so every misplacement gives different numbers.
        quick: run only the first two cases (the seed token, ``[2, 3, 8]``), the assignment's
            visible check.
        cases: the battery (``_PlacementCase``: ``x``, ``sublayer``, ``norm``, ``also``) to run
            instead of the public one (``None``), e.g. the one grading draws for its run.

    Returns:
        :class:`CheckResult` with four cases. Diagnoses residual_from_normed
        (``norm(x) + sublayer(norm(x))``), pre_post_swapped (``norm(x + sublayer(x))``),
        missing_residual, missing_norm, norm_on_sublayer_output (Output-LN, ``x +
        norm(sublayer(x))``), ignores_sublayer (``x + norm(x)``), is_peri_ln (Peri-LN, ``x +
        norm(sublayer(norm(x)))``), residual_scaled (DeepNorm, ``norm(alpha x + sublayer(x))``,
        alpha fitted and named), mutates_input and the generic faults. Never raises because of
        what ``fn`` does.

    Raises:
        Nothing: whatever the student's code does (raising, looping, odd return values)
        becomes a failing case with a message.

    Source: the seed, "Pre-LN, as depicted: Y = X + F(Norm(X))"; Xiong et al. 2020, Fig. 1(b).
    """
    from ..blocks import pre_ln

    return _check_placement("pre_ln", fn, pre_ln, pre_models, quick, cases)


@single_threaded
def check_post_ln(fn: Callable, quick: bool = False, *, cases: list | None = None) -> CheckResult:
    """Check a student's ``post_ln(x, sublayer, norm)`` = ``norm(x + sublayer(x))``.

    Args:
        fn: called as ``fn(x, sublayer, norm)``, on the same four cases as :func:`check_pre_ln`
            (``x``: ``(1, 2, 3)``, ``[2, 3, 8]``, ``[4, 4, 4]``, ``[2, 5, 8]`` float32 tensors).
        quick: run only the first two cases, the assignment's visible check.
        cases: the battery to run instead of the public one (``None``), as for :func:`check_pre_ln`.

    Returns:
        :class:`CheckResult` with four cases. Diagnoses pre_post_swapped
        (``x + sublayer(norm(x))``), missing_residual, missing_norm, norm_on_sublayer_output
        (``x + norm(sublayer(x))``), residual_from_normed (``norm(x) + sublayer(x)``),
        ignores_sublayer (``norm(x)``), is_peri_ln, residual_scaled (Post-LN with the residual
        scaled by a fitted alpha, DeepNorm), mutates_input and the generic faults. On the seed token
        with ``F(v) = 2v`` a missing residual or a left-out sublayer is invisible (LN(2x) =
        LN(3x) = LN(x)), so that case also runs ``F(v) = (v3, v1, v2)`` (:class:`Roll`), where
        neither is.

    Raises:
        Nothing: whatever the student's code does (raising, looping, odd return values)
        becomes a failing case with a message.

    Source: the seed, "Original Post-LN: Y = Norm(X + F(X))"; Vaswani et al. 2017.
    """
    from ..blocks import post_ln

    return _check_placement("post_ln", fn, post_ln, post_models, quick, cases)


# --------------------------------------------------------------------------- the questions, declared
# (normref.diagnosis: the formula an answer computes, traced or identified, said beside the asked one)


def _residual_scaled_form(reference: str):
    """DeepNorm's family, ``Norm(alpha x + F(x))`` for any ``alpha != 1``, which no fixed model
    lists: ``forms(S, R, sizes) -> (fault, hint)`` of :class:`normref.diagnosis.Question`."""
    def forms(S, R, sizes):
        from ..diagnosis import expr as E

        if not isinstance(S, E.Call) or S.fn != "Norm":
            return None
        t = E.terms(S.arg)
        x, fx = E.Atom("x"), E.Call("F", E.Atom("x"))
        if set(t) != {x, fx} or abs(t[fx] - 1) > 1e-9 or t[x] <= 0 or abs(t[x] - 1) < 1e-6:
            return None
        a = alpha_words(t[x])
        return "residual_scaled", (f"that is Post-LN with the residual scaled by {a}, DeepNorm's Norm(alpha x + F(x)) "
                                   f"with alpha = {a} (Wang et al. 2022); {reference}.")

    return forms


def _pre_ln_reference(x, sublayer, norm):
    from ..blocks import pre_ln

    return pre_ln(x, sublayer, norm)


def _post_ln_reference(x, sublayer, norm):
    from ..blocks import post_ln

    return post_ln(x, sublayer, norm)


def _placement_args(case):
    return (case.x, case.sublayer, case.norm), {}


declare(Question("pre_ln", "pre_ln(x, sublayer, norm)", _pre_ln_reference, "Pre-LN", _placement_args,
                 names={"sublayer": "F", "norm": "Norm"}, models=pre_models, probes=(), search=False,
                 forms=_residual_scaled_form("Pre-LN is x + F(Norm(x))")))
declare(Question("post_ln", "post_ln(x, sublayer, norm)", _post_ln_reference, "Post-LN", _placement_args,
                 names={"sublayer": "F", "norm": "Norm"}, models=post_models, probes=(), search=False,
                 forms=_residual_scaled_form("Post-LN adds x itself: Norm(x + F(x))")))
