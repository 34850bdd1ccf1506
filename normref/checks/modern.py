"""Lesson 04's assignment: :func:`check_peri_ln` (``x + out_norm(F(norm(x)))``),
:func:`check_qk_norm_logits` (``q_norm(q) k_norm(k)^T / sqrt(d)``) and :func:`check_dyt`
(``weight * tanh(alpha x) + bias``), each with the mistakes it names.

Every battery holds the seed token, a ``[B, T, D]`` case, a ``B = T = D`` case (where a wrong
axis or a missing transpose keeps the shape and changes the values) and float16 and bfloat16
cases (the dtype must come back). Each case's objects are the course's own picklable classes, so
grading can draw new batteries of the same kinds (``grader/modern_batteries.py``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ..diagnosis.questions import Output, Question, declare
from ..rules import DYT_REFERENCE, PERI_REFERENCE, QK_REFERENCE
from .compare import compare_array, diagnose_by_models, to_f64
from .core import CaseResult, CheckResult, quick_cut, run, seeded_randn, single_threaded, student_call
from .placement import ToySublayer

__all__ = ["check_peri_ln", "check_qk_norm_logits", "check_dyt", "Square", "peri_models", "qk_models",
           "dyt_models"]


class Square:
    """A fixed nonlinear sublayer, F(v) = v * v feature by feature (dtype kept): on the seed token
    (1, 2, 3) every placement gives different numbers."""

    def __call__(self, v):
        return v * v

    def __repr__(self) -> str:
        return "F(v) = v^2"


@dataclass
class _PeriCase:
    name: str
    x: object
    sublayer: Callable
    norm: Callable
    out_norm: Callable


@dataclass
class _QKCase:
    name: str
    q: object
    k: object
    q_norm: Callable
    k_norm: Callable

    @property
    def x(self):  # what compare_array reads the dtype and backend from
        return self.q


@dataclass
class _DyTCase:
    name: str
    x: object
    alpha: object
    weight: object
    bias: object


def _trained(norm, rnd, scale=0.5, shift=0.3):
    """``norm`` with gamma ``1 + scale * randn`` (and beta ``shift * randn`` if it has one)."""
    import torch

    d = norm.normalized_shape[0]
    with torch.no_grad():
        norm.weight.copy_(1 + scale * rnd(d))
        if getattr(norm, "bias", None) is not None:
            norm.bias.copy_(shift * rnd(d))
    return norm


def _peri_battery() -> list[_PeriCase]:
    from ..modules import LayerNorm, RMSNorm

    rnd = seeded_randn(40)
    import torch

    seed_out = LayerNorm(3, eps=0.0)
    with torch.no_grad():
        seed_out.weight.copy_(torch.tensor([2.0, 1.0, 0.5]))  # different from the input norm's
    return [
        _PeriCase("seed token (1, 2, 3), F(v) = v^2, LayerNorm without eps, then a LayerNorm with gamma (2, 1, 0.5)",
                  torch.tensor([1.0, 2.0, 3.0]), Square(), LayerNorm(3, eps=0.0), seed_out),
        _PeriCase("[2, 3, 8], F(v) = tanh(v W + c), two RMSNorms with different gammas",
                  rnd(2, 3, 8, scale=2.0, shift=0.5), ToySublayer(8, 41), _trained(RMSNorm(8), rnd),
                  _trained(RMSNorm(8), rnd)),
        _PeriCase("B = T = D [4, 4, 4], two LayerNorms with gammas and betas",
                  rnd(4, 4, 4, scale=3.0, shift=1.0), ToySublayer(4, 42), _trained(LayerNorm(4), rnd),
                  _trained(LayerNorm(4), rnd)),
        _PeriCase("float16 [2, 3, 8], two RMSNorms", rnd(2, 3, 8, scale=4.0).half(), ToySublayer(8, 43),
                  _trained(RMSNorm(8), rnd), _trained(RMSNorm(8), rnd)),
        _PeriCase("bfloat16 B = T = D [4, 4, 4], two RMSNorms", rnd(4, 4, 4, scale=2.0).bfloat16(),
                  ToySublayer(4, 44), _trained(RMSNorm(4), rnd), _trained(RMSNorm(4), rnd)),
    ]


def peri_models(x, F, N, M):
    """``(fault, output, hint)`` for each Peri-LN mistake on input ``x`` (``N``: the input norm,
    ``M``: the output norm)."""
    peri = "Peri-LN is x + out_norm(F(norm(x)))"
    yield ("is_pre_ln", x + F(N(x)), f"that is Pre-LN, x + F(Norm(x)): the sublayer's output was not "
           f"normalized; {peri}.")
    yield ("is_output_ln", x + M(F(x)), f"that is Output-LN (OLMo 2's placement), x + Norm(F(x)): the "
           f"sublayer's input was not normalized; {peri}.")
    yield ("is_post_ln", M(x + F(x)), f"that is Post-LN, Norm(x + F(x)); {peri}.")
    yield ("is_post_ln", N(x + F(x)), f"that is Post-LN, Norm(x + F(x)); {peri}.")
    yield ("out_norm_on_sum", M(x + F(N(x))), "out_norm was applied to the sum x + F(norm(x)); Peri-LN "
           f"normalizes the sublayer's output before the residual add: {peri}.")
    yield ("two_norms_swapped", x + N(F(M(x))), f"the two norms are swapped: norm goes on the sublayer's "
           f"input, out_norm on its output; {peri}.")
    yield ("one_norm_twice", x + N(F(N(x))), f"norm was used on both sides and out_norm not at all; {peri}.")
    yield ("one_norm_twice", x + M(F(M(x))), f"out_norm was used on both sides and norm not at all; {peri}.")
    yield ("missing_residual", M(F(N(x))), f"the residual add is missing: {peri}.")
    yield ("residual_from_normed", N(x) + M(F(N(x))), f"the residual path must carry x itself, not "
           f"norm(x); {peri}.")
    yield ("missing_norm", x + F(x), f"no norm was applied; {peri}.")


def _qk_battery() -> list[_QKCase]:
    import torch

    from ..modules import LayerNorm, RMSNorm

    rnd = seeded_randn(50)
    seed_q = torch.tensor([[[1.0, 2.0, 3.0], [3.0, 1.0, 2.0], [2.0, 3.0, 1.0]]])  # [1, 3, 3]: the seed token, rotated
    seed_k = torch.tensor([[[1.0, 2.0, 3.0], [1.0, 1.0, 1.0], [3.0, 2.0, 1.0]]])
    return [
        _QKCase("the seed token: q = ((1, 2, 3), (3, 1, 2), (2, 3, 1)), k = ((1, 2, 3), (1, 1, 1), (3, 2, 1)), "
                "RMSNorms of weight 1 without eps", seed_q, seed_k, RMSNorm(3, eps=0.0), RMSNorm(3, eps=0.0)),
        _QKCase("[2, 3, 8], RMSNorms with different gammas", rnd(2, 3, 8, scale=3.0), rnd(2, 3, 8, scale=3.0),
                _trained(RMSNorm(8), rnd), _trained(RMSNorm(8), rnd)),
        _QKCase("B = T = D [4, 4, 4], LayerNorms with gammas and betas", rnd(4, 4, 4, scale=2.0, shift=1.0),
                rnd(4, 4, 4, scale=2.0, shift=-0.5), _trained(LayerNorm(4), rnd), _trained(LayerNorm(4), rnd)),
        _QKCase("float16 [2, 5, 8] of RMS 30 (plain logits reach thousands), RMSNorms",
                rnd(2, 5, 8, scale=30.0).half(), rnd(2, 5, 8, scale=30.0).half(), _trained(RMSNorm(8), rnd),
                _trained(RMSNorm(8), rnd)),
        _QKCase("bfloat16 B = T = D [4, 4, 4], RMSNorms", rnd(4, 4, 4, scale=2.0).bfloat16(),
                rnd(4, 4, 4, scale=2.0).bfloat16(), _trained(RMSNorm(4), rnd), _trained(RMSNorm(4), rnd)),
    ]


def qk_models(q, k, Nq, Nk):
    """``(fault, output, hint)`` for each QK-norm-logits mistake."""
    import torch

    d = q.shape[-1]
    s = 1 / math.sqrt(d)
    qn, kn = Nq(q), Nk(k)
    t = lambda a: a.transpose(-2, -1)  # noqa: E731
    ref = "the logits are q_norm(q) @ k_norm(k)^T / sqrt(d), [..., T, T]"
    logits = (qn @ t(kn)) * s
    yield ("missing_norm", (q @ t(k)) * s, f"q and k were not normalized (plain attention logits); {ref}.")
    yield ("qk_one_side", (qn @ t(k)) * s, f"only q was normalized; {ref}.")
    yield ("qk_one_side", (q @ t(kn)) * s, f"only k was normalized; {ref}.")
    yield ("two_norms_swapped", (Nk(q) @ t(Nq(k))) * s, f"k_norm was applied to q and q_norm to k; {ref}.")
    yield ("qk_no_scale", qn @ t(kn), f"the logits were not divided by sqrt(d); {ref}.")
    yield ("qk_wrong_scale", (qn @ t(kn)) / d, f"that divides by d: divide by sqrt(d); {ref}.")
    yield ("qk_wrong_scale", (qn @ t(kn)) * math.sqrt(d), f"that multiplies by sqrt(d): divide by it; {ref}.")
    if q.shape[-2] == d:  # T = d: a missing transpose keeps the shape
        yield ("qk_no_transpose", (qn @ kn) * s, f"k was not transposed (with T = d the shapes still "
               f"match); {ref}.")
    yield ("qk_transposed", t(logits), "that is k q^T, the transpose: entry [..., i, j] is query i's "
           f"logit for key j; {ref}.")
    yield ("qk_returned_softmax", logits.float().softmax(-1).to(logits.dtype), "that is the softmax of "
           f"the logits (the attention weights): return the logits themselves; {ref}.")
    T = q.shape[-2]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    yield ("qk_masked", logits.masked_fill(~causal, float("-inf")), "the causal mask was applied: "
           f"return the logits before any mask; {ref}.")


def _dyt_battery() -> list[_DyTCase]:
    import torch

    rnd = seeded_randn(60)
    return [
        _DyTCase("seed token (1, 2, 3), alpha 0.5, weight 1, bias 0", torch.tensor([1.0, 2.0, 3.0]),
                 torch.tensor([0.5]), torch.ones(3), torch.zeros(3)),
        _DyTCase("[2, 3, 8], alpha 0.8, trained weight and bias", rnd(2, 3, 8, scale=2.0), torch.tensor([0.8]),
                 1 + 0.5 * rnd(8), 0.3 * rnd(8)),
        _DyTCase("B = T = D [4, 4, 4], alpha 1.5 (tanh saturates)", rnd(4, 4, 4, scale=3.0, shift=1.0),
                 torch.tensor([1.5]), 1 + 0.5 * rnd(4), 0.3 * rnd(4)),
        _DyTCase("float16 [2, 3, 8] of size ~300, alpha 0.01", rnd(2, 3, 8, scale=300.0).half(),
                 torch.tensor([0.01]), 1 + 0.5 * rnd(8), 0.3 * rnd(8)),
        _DyTCase("bfloat16 B = T = D [4, 4, 4], alpha 0.7", rnd(4, 4, 4, scale=2.0).bfloat16(),
                 torch.tensor([0.7]), 1 + 0.5 * rnd(4), 0.3 * rnd(4)),
    ]


def dyt_models(x, a, w, b):
    """``(fault, output, hint)`` for each DyT mistake (computed in float32, cast back as the
    reference is, so only the mistake differs)."""
    import torch

    from ..functional import layer_norm

    h = x.float()
    ref = "DyT is weight * tanh(alpha * x) + bias"

    def back(v):
        return v.to(x.dtype)

    yield ("dyt_no_alpha", back(w * torch.tanh(h) + b), f"alpha was not applied; {ref}.")
    yield ("dyt_alpha_outside", back(w * a * torch.tanh(h) + b), f"alpha multiplies tanh's output, "
           f"not its input; {ref}.")
    yield ("dyt_bias_inside", back(w * torch.tanh(a * h + b)), f"the bias was added inside tanh; {ref}.")
    yield ("dyt_bias_inside", back(torch.tanh(a * h + b) * w + b), f"the bias was added inside tanh; {ref}.")
    yield ("ignores_weight", back(torch.tanh(a * h) + b), f"the weight (gamma) was not applied; {ref}.")
    yield ("ignores_bias", back(w * torch.tanh(a * h)), f"the bias (beta) was not added; {ref}.")
    yield ("dyt_weight_bias_swapped", back(b * torch.tanh(a * h) + w), f"weight and bias are swapped; {ref}.")
    yield ("dyt_normalized", back(w * torch.tanh(a * layer_norm(h)) + b), "x was normalized first: DyT "
           f"replaces the norm, it uses no statistics at all; {ref}.")
    yield ("dyt_not_tanh", back(w * torch.clamp(a * h, -1, 1) + b), f"that clips alpha x to [-1, 1]; tanh "
           f"bends smoothly; {ref}.")
    yield ("dyt_not_tanh", back(w * torch.sigmoid(a * h) + b), f"that is the sigmoid, not tanh; {ref}.")


def _check(name: str, fn: Callable, cases: list, rest: list, args_of: Callable, reference: Callable, models: Callable,
           rule: dict) -> CheckResult:
    import torch

    def run_case(case) -> CaseResult:
        args = args_of(case)
        tensors = tuple(a for a in args if isinstance(a, torch.Tensor))
        handed = tuple(a for a in args if not isinstance(a, torch.Tensor))
        with torch.no_grad():
            got, failed = student_call(case.name, fn, args, watch=tensors, handed_in=handed)
            if failed is not None:
                return failed
            want = to_f64(reference(*args))
            return compare_array(case.name, case.x, got, want, lambda g, rtol, atol: diagnose_by_models(
                g, want, models(*args), rtol, atol))

    return run(name, cases, run_case, fn, reference=rule, unchecked=rest)


@single_threaded
def check_peri_ln(fn: Callable, quick: bool = False, *, cases: list | None = None) -> CheckResult:
    """Check a student's ``peri_ln(x, sublayer, norm, out_norm)`` = ``x + out_norm(sublayer(norm(x)))``.

    Args:
        fn: called as ``fn(x, sublayer, norm, out_norm)``: ``x`` a torch tensor (the seed token
            ``(1, 2, 3)``, ``[2, 3, 8]``, ``B = T = D [4, 4, 4]``, float16 ``[2, 3, 8]``, bfloat16
            ``[4, 4, 4]``), ``sublayer`` a callable ``[..., D] -> [..., D]`` (``v^2``, ``tanh(v W +
            c)``), ``norm`` and ``out_norm`` two different norms (:class:`normref.LayerNorm` /
            :class:`normref.RMSNorm` with trained gammas), so swapping them shows.
        quick: run only the first two cases (the seed token, ``[2, 3, 8]``), the visible check.
        cases: the battery (``_PeriCase``) to run instead of the public one (``None``), e.g. the
            one grading draws for its run (``grader/modern_batteries.py``).

    Returns:
        :class:`CheckResult` with five cases; the output must have ``x``'s dtype. Diagnoses
        is_pre_ln, is_output_ln, is_post_ln, out_norm_on_sum, two_norms_swapped, one_norm_twice,
        missing_residual, residual_from_normed, missing_norm, wrong_dtype, mutates_input and
        the generic faults.

    Raises:
        Nothing: whatever the student's code does becomes a failing case with a message.

    Source: Kim et al. 2025 (Peri-LN), ``y = x + Norm(F(Norm(x)))``; Gemma 2's decoder layer.
    """
    from ..placements import peri_ln

    cases, rest = quick_cut(_peri_battery() if cases is None else cases, quick)
    return _check("peri_ln", fn, cases, rest, lambda c: (c.x, c.sublayer, c.norm, c.out_norm), peri_ln, peri_models,
                  PERI_REFERENCE)


@single_threaded
def check_qk_norm_logits(fn: Callable, quick: bool = False, *, cases: list | None = None) -> CheckResult:
    """Check a student's ``qk_norm_logits(q, k, q_norm, k_norm)`` =
    ``q_norm(q) @ k_norm(k)^T / sqrt(d)``: ``[..., T, d]`` twice -> ``[..., T, T]``.

    Args:
        fn: called as ``fn(q, k, q_norm, k_norm)`` on five cases: the seed token's rows
            (``[1, 3, 3]``, RMSNorms of weight 1), ``[2, 3, 8]`` with two trained RMSNorms,
            ``B = T = D [4, 4, 4]`` with LayerNorms (a missing transpose keeps the shape),
            float16 ``[2, 5, 8]`` of RMS 30, bfloat16 ``[4, 4, 4]``.
        quick: run only the first two cases, the visible check.
        cases: the battery (``_QKCase``) to run instead of the public one (``None``).

    Returns:
        :class:`CheckResult` with five cases; the logits must have ``q``'s dtype. Diagnoses
        missing_norm (plain logits), qk_one_side, two_norms_swapped, qk_no_scale, qk_wrong_scale,
        qk_no_transpose, qk_transposed, qk_returned_softmax, qk_masked, wrong_dtype,
        wrong_shape, mutates_input and the generic faults.

    Raises:
        Nothing: whatever the student's code does becomes a failing case with a message.

    Source: Henry et al. 2020; Dehghani et al. 2023; Gemma 3 / Qwen 3's ``q_norm``/``k_norm``.
    """
    from ..placements import qk_norm_logits

    cases, rest = quick_cut(_qk_battery() if cases is None else cases, quick)
    return _check("qk_norm_logits", fn, cases, rest, lambda c: (c.q, c.k, c.q_norm, c.k_norm), qk_norm_logits,
                  qk_models, QK_REFERENCE)


@single_threaded
def check_dyt(fn: Callable, quick: bool = False, *, cases: list | None = None) -> CheckResult:
    """Check a student's ``dyt(x, alpha, weight, bias)`` = ``weight * tanh(alpha * x) + bias``,
    computed in float32 and cast back to ``x.dtype``.

    Args:
        fn: called as ``fn(x, alpha, weight, bias)``: ``alpha`` a one-element float32 tensor,
            ``weight`` and ``bias`` float32 ``[D]``; ``x`` the seed token (alpha 0.5, weight 1,
            bias 0), ``[2, 3, 8]``, ``B = T = D [4, 4, 4]`` (alpha 1.5: tanh saturates), float16
            ``[2, 3, 8]`` of size ~300 (alpha 0.01), bfloat16 ``[4, 4, 4]``.
        quick: run only the first two cases, the visible check.
        cases: the battery (``_DyTCase``) to run instead of the public one (``None``).

    Returns:
        :class:`CheckResult` with five cases. Diagnoses dyt_no_alpha, dyt_alpha_outside,
        dyt_bias_inside, ignores_weight, ignores_bias, dyt_weight_bias_swapped, dyt_normalized,
        dyt_not_tanh, wrong_dtype (a float16 input must give float16 back), mutates_input and
        the generic faults.

    Raises:
        Nothing: whatever the student's code does becomes a failing case with a message.

    Source: Zhu, Chen, He, LeCun and Liu 2025, ``DyT(x) = gamma * tanh(alpha x) + beta``.
    """
    from ..functional import dyt

    cases, rest = quick_cut(_dyt_battery() if cases is None else cases, quick)
    return _check("dyt", fn, cases, rest, lambda c: (c.x, c.alpha, c.weight, c.bias), dyt, dyt_models, DYT_REFERENCE)


# --------------------------------------------------------------------------- the questions, declared
# (normref.diagnosis: the formula an answer computes, traced or identified, said beside the asked one;
# DyT's response to alpha, weight and bias, where it levels off, measured)


def _peri_reference(x, sublayer, norm, out_norm):
    from ..placements import peri_ln

    return peri_ln(x, sublayer, norm, out_norm)


def _qk_reference(q, k, q_norm, k_norm):
    from ..placements import qk_norm_logits

    return qk_norm_logits(q, k, q_norm, k_norm)


def _dyt_reference(x, alpha, weight, bias):
    from ..functional import dyt

    return dyt(x, alpha, weight, bias)


def _dyt_formula(x, alpha, weight, bias):
    """DyT as a plain composition (traced for its formula; the numbers are :func:`_dyt_reference`'s)."""
    import torch

    return weight * torch.tanh(alpha * x) + bias


declare(Question("peri_ln", "peri_ln(x, sublayer, norm, out_norm)", _peri_reference, "Peri-LN",
                 lambda c: ((c.x, c.sublayer, c.norm, c.out_norm), {}), names={"sublayer": "F"},
                 models=peri_models, probes=()))
declare(Question("qk_norm_logits", "qk_norm_logits(q, k, q_norm, k_norm)", _qk_reference, "QK-norm",
                 lambda c: ((c.q, c.k, c.q_norm, c.k_norm), {}), products=("matmul_t",), models=qk_models,
                 probes=(), outputs=(Output("logits", rows="query", plural=True),)))
declare(Question("dyt", "dyt(x, alpha, weight, bias)", _dyt_reference, "DyT",
                 lambda c: ((c.x, c.alpha, c.weight, c.bias), {}), formula=_dyt_formula, models=dyt_models,
                 identify=False))
