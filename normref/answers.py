"""Checkers for the lesson's short answers: Practice studio, Trace it, Retrieval check.

Each ``check_*`` takes what a student typed (a number, a tuple, ``True``/``"no"``, a shape, a
formula string), parses it tolerantly, and returns a :class:`normref.checks.CheckResult` whose
``.score`` is the fraction of parts right, exactly like the implementation checkers, so a
grade cell awards ``points * result.score``. A wrong answer gets a message naming the likely
mistake, found from the *value* given (``4/3`` for a variance of (2, 2, 4, 4) means "divided by
n-1"); no message ever contains the expected answer. Each failing case carries its fault kind
(``CaseResult.fault``), from the one registry :mod:`normref.faults`: the implementation
checkers' kind where the mistake is the same one (``missing_keepdim``, ``pre_post_swapped``,
``unbiased_variance`` ...), else an answer-only kind (:data:`ANSWER_FAULTS`).

Accepted forms (anything else gets a message saying what form is expected):

- numbers: ``3``, ``3.0``, ``np.float64(3)``, a 0-d tensor, or a string of arithmetic such as
  ``"2/3"``, ``"sqrt(12.5)"``, ``"12.5**0.5"``, ``"≈ 3.536"``;
- vectors: a tuple, list, numpy array or tensor of numbers, or a string ``"(-1, 0, 1)"``;
- yes/no: ``True``/``False`` or the strings ``"yes"``/``"no"`` (and ``"true"``/``"false"``);
- shapes: a tuple/list of ints, ``torch.Size``, a tensor (its shape is read), or ``"[2, 3, 1]"``;
- axes: an int for a ``[B, T, D]`` tensor (``-1``/``2``, ``1``/``-2``, ``0``/``-3``) or words
  (``"last"``, ``"feature"``, ``"D"``, ``"sequence"``, ``"batch"`` ...);
- formulas: a string with ``X``, a norm (``Norm``, ``LN``, ``RMSNorm`` ...), a sublayer
  (``Attention``, ``Attn``, ``F``, ``MHA`` ...), ``+`` and parentheses; LaTeX is accepted.

Each numeric question takes its numbers as an argument (``x=``, ``x_shape=``) whose default is
the seed's, so a graded assignment can ask the same question about numbers the lesson does not
answer and get the same diagnoses; numbers that are not a flat tuple of at least two raise
ValueError (an author's mistake), while a student's answer never raises. The other questions
take their setting the same way (``ask=``, ``sublayer=``, ``layout=``; default the seed's), so
the graded assignment can ask them in a setting whose answer the lesson does not print: whether
a constant shift changes RMSNorm's output, the Pre-LN formula of the feed-forward half, whether
a norm keeps a given shape, the axis number in a ``[B, D, T]`` layout.

Source: the Lesson 16 seed text (``shared/seed``), Practice studio and its "Check solutions".
"""
from __future__ import annotations

import math
import re

import numpy as np

from . import faults as _faults
from .answer_parsing import (SUBLAYER_KINDS, AnswerFormatError, parse_axis, parse_formula, parse_number,
                             parse_shape, parse_vector, parse_yes_no, refuse_float_axis)
from .checks import FAULT_KINDS, CaseResult, CheckResult  # noqa: F401 - FAULT_KINDS re-exported

__all__ = [
    "ANSWER_FAULTS",
    "AnswerFormatError",
    "parse_number",
    "parse_vector",
    "parse_yes_no",
    "parse_shape",
    "parse_axis",
    "parse_formula",
    "check_mean_var",
    "check_layer_norm_2244",
    "check_rms_34",
    "check_rms_subtracts_mean",
    "check_pre_ln_formula",
    "check_norm_changes_shape",
    "check_rms_shape",
    "check_stats_axis",
]

#: Fault kinds that only the short answers can show, with the sentence a student reads (a
#: view of :mod:`normref.faults`, where every kind, code or answer, is defined once).
ANSWER_FAULTS: dict[str, str] = {k: _faults.FAULTS[k].message for k in _faults.kinds("answer")}



# --------------------------------------------------------------------------- helpers


def _msg(fault: str) -> str:
    return _faults.message(fault)


def _case(name: str, passed: bool, message: str = "", fault: str | None = None) -> CaseResult:
    if passed:
        return CaseResult(name, True, f"{name}: ok")
    return CaseResult(name, False, f"{name}: {message}", fault)


def _fault_case(name: str, fault: str, got_text: str = "", hint: str | None = None) -> CaseResult:
    """A failing case naming ``fault``: ``got_text`` (what was given) then ``hint``, or the
    registry's sentence."""
    return _case(name, False, (got_text + (hint or _msg(fault))).strip(), fault)


def _format_case(name: str, err: AnswerFormatError) -> CaseResult:
    """An answer that could not be read: the parser's message alone, which names the answer
    (``"pre_ln_formula: did not recognise ..."``; the case's name before it said it twice)."""
    fault = "not_answered" if "not answered" in str(err) else "bad_format"
    return CaseResult(name, False, str(err), fault)


def _near(a: float, b: float, tol: float) -> bool:
    return abs(a - b) <= tol


def _result(name: str, *cases: CaseResult) -> CheckResult:
    return CheckResult(name, list(cases))


# --------------------------------------------------------------------------- Practice studio

_X2244 = (2.0, 2.0, 4.0, 4.0)  # the seed's Practice studio numbers
_NUM_TOL = 5e-3  # answers rounded to 2-3 decimals pass; 1-decimal roundings of 1/sqrt do not


def _values(x) -> np.ndarray:
    """The question's numbers as a flat float64 array (raises ValueError if not 1-D, >= 2)."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(f"a question's numbers are a flat tuple of at least 2, got {x!r}")
    return arr


def _show(x: np.ndarray) -> str:
    """``(2, 2, 4, 4)``: the numbers as the question states them."""
    return "(" + ", ".join(f"{v:g}" for v in x) + ")"


def _label(prefix: str, x: np.ndarray) -> str:
    """The answer's variable name for these numbers: ``ln_2244``, ``rms_34``, ``rms_5_12``
    (an underscore between the numbers once one has two digits)."""
    parts = [f"{v:g}" for v in x]
    return f"{prefix}_" + ("_" if any(len(p) > 1 for p in parts) else "").join(parts)


def check_mean_var(mean, var, x=_X2244) -> CheckResult:
    """Practice studio 1: the mean and (biased) variance of (2, 2, 4, 4).

    Args:
        mean, var: the student's numbers (see :func:`parse_number` for accepted forms).
        x: the question's numbers (default the seed's (2, 2, 4, 4); a graded assignment may
            ask about others, with the same diagnoses).

    Returns:
        :class:`CheckResult` with two cases, ``mean`` and ``variance``; score 0, 0.5 or 1.
        Never raises.

    Source: the seed, Practice studio item 1; LayerNorm's statistics (Ba et al. 2016, eq. 4).
    """
    x = _values(x)
    mu, d = float(x.mean()), x.size
    ss = float(((x - mu) ** 2).sum())
    try:
        m = parse_number(mean, what="mean")
        if _near(m, mu, _NUM_TOL):
            c1 = _case("mean", True)
        elif _near(m, float(x.sum()), _NUM_TOL):
            c1 = _fault_case("mean", "sum_not_mean", f"you gave {m:g}: ")
        else:
            c1 = _case("mean", False, f"you gave {m:g}: add the {d} values and divide by "
                       "how many there are.", "wrong_values")
    except AnswerFormatError as e:
        c1 = _format_case("mean", e)
    try:
        v = parse_number(var, what="variance")
        if _near(v, ss / d, _NUM_TOL):
            c2 = _case("variance", True)
        elif _near(v, ss / (d - 1), _NUM_TOL):
            c2 = _fault_case("variance", "unbiased_variance", f"you gave {v:.4g} = {ss:g}/{d - 1}: ")
        elif _near(v, ss, _NUM_TOL):
            c2 = _fault_case("variance", "sum_of_squares", f"you gave {v:g}: ")
        elif _near(v, float((x**2).mean()), _NUM_TOL):
            c2 = _fault_case("variance", "uncentered_variance", f"you gave {v:g}: ")
        else:
            c2 = _case("variance", False, f"you gave {v:g}: average the squared deviations "
                       f"(x_r - mean)^2 over the d = {d} features.", "wrong_values")
    except AnswerFormatError as e:
        c2 = _format_case("variance", e)
    return _result(f"mean_var {_show(x)}", c1, c2)


def _layer_norm_models(x: np.ndarray):
    """``(fault, output, hint or None)`` for LayerNorm of the 1-D ``x`` without eps: the code
    checkers' fault models (:func:`normref.checks.norms.fault_models`) where they apply to a
    hand computation, then the mistakes only a hand computation makes."""
    from .checks.norms import fault_models

    d = x.size
    mu = x.mean()
    var = ((x - mu) ** 2).mean()
    code = {fault: out for fault, out, _ in fault_models("layer", x, None, None, 0.0)}
    yield ("unbiased_variance", code["unbiased_variance"],
           f"your values are the right ones times {math.sqrt((d - 1) / d):.3f} = "
           f"sqrt({d - 1}/{d}): " + _msg("unbiased_variance"))
    yield "not_centered", x / math.sqrt(var), None  # divided by the std, not centered
    yield "not_scaled", x - mu, None
    yield ("not_centered", code["not_centered"],  # RMSNorm: no centering at all
           "this is RMSNorm's answer (divide by the RMS, no centering): " + _msg("not_centered"))
    yield "divided_by_variance", (x - mu) / (var * d / (d - 1)), None


def check_layer_norm_2244(y, x=_X2244) -> CheckResult:
    """Practice studio 2: LayerNorm of (2, 2, 4, 4), ignoring eps, with gamma = 1, beta = 0.

    Args:
        y: the student's numbers, one per value of ``x`` (see :func:`parse_vector`).
        x: the question's numbers (default the seed's (2, 2, 4, 4)).

    Returns:
        :class:`CheckResult` with one case; an answer off by a known mistake (n-1, no
        centering, no scaling, dividing by the variance, RMSNorm instead) names it. Never raises.

    Source: the seed, Practice studio item 2; Ba et al. 2016, eq. (3)-(4).
    """
    x = _values(x)
    name = f"layer_norm {_show(x)}"
    mu = x.mean()
    var = ((x - mu) ** 2).mean()
    want = (x - mu) / math.sqrt(var)
    try:
        g = parse_vector(y, what=_label("ln", x))
    except AnswerFormatError as e:
        return _result(name, _format_case(name, e))
    if g.shape != want.shape:
        return _result(name, _fault_case(name, "wrong_shape", f"you gave {g.size} numbers; ",
                                         _msg("wrong_shape") + f" ({x.size} features in, {x.size} out)"))
    if np.allclose(g, want, atol=_NUM_TOL):
        return _result(name, _case(name, True))
    for fault, out, hint in _layer_norm_models(x):
        if out is not None and np.allclose(g, out, atol=_NUM_TOL):
            return _result(name, _fault_case(name, fault, hint=hint))
    if abs(g.mean()) > _NUM_TOL:
        return _result(name, _case(name, False, f"your values average {g.mean():.3g}; "
                                   "LayerNorm's output (gamma = 1, beta = 0) averages 0.",
                                   "not_centered"))
    return _result(name, _case(name, False, "the values differ: subtract the mean, then divide "
                               "by sqrt(variance).", "wrong_values"))


#: RMS answers within this pass: 3.54, 3.536 and the truncations 3.53, 3.535 of 3.5355.
_RMS_TOL = 1e-2


def check_rms_34(rms, x=(3.0, 4.0)) -> CheckResult:
    """Practice studio 3: the RMS of (3, 4) (a number; eps ignored).

    Args:
        rms: the student's number (see :func:`parse_number`).
        x: the question's numbers (default the seed's (3, 4)).

    Returns:
        :class:`CheckResult` with one case; answers within 0.01 of sqrt(12.5) = 3.5355 pass
        (2 or 3 decimals, rounded or truncated: 3.54, 3.53, 3.536, 3.535). The L2 norm, the
        mean square, the plain mean (3.5), dividing outside the root and the sum of squares
        are named. Never raises.

    Source: the seed, Practice studio item 3; Zhang and Sennrich 2019, eq. (4).
    """
    x = _values(x)
    name = f"rms {_show(x)}"
    try:
        r = parse_number(rms, what=_label("rms", x))
    except AnswerFormatError as e:
        return _result(name, _format_case(name, e))
    ms = float((x**2).mean())
    if _near(r, math.sqrt(ms), _RMS_TOL):
        return _result(name, _case(name, True))
    given = f"you gave {r:.6g}: "
    for fault, val, hint in (
            ("l2_norm_not_rms", math.sqrt((x**2).sum()), None),
            ("missing_sqrt", ms, None),
            ("mean_abs_not_rms", float(np.abs(x).mean()),
             f"that is the mean of the values, ({' + '.join(f'{v:g}' for v in x)}) / {x.size}: "
             "RMS is the root of the mean of the squares."),
            ("divided_outside_sqrt", math.sqrt((x**2).sum()) / x.size, None),
            ("sum_of_squares", float((x**2).sum()),
             "that is the sum of the squares; RMS = sqrt(their mean).")):
        if _near(r, val, _NUM_TOL):
            return _result(name, _fault_case(name, fault, given, hint))
    return _result(name, _case(name, False, given + "square each value, average the squares, "
                               "take the square root.", "wrong_values"))


_CENTERING_ASKS = ("subtracts_mean", "shift_changes_output")


def check_rms_subtracts_mean(answer, ask: str = "subtracts_mean") -> CheckResult:
    """Practice studio 4: does RMSNorm subtract the mean? (a yes/no answer).

    Args:
        answer: the student's yes/no (see :func:`parse_yes_no`).
        ask: which question about centering: ``"subtracts_mean"`` (the seed's: does RMSNorm
            subtract the mean? right answer no) or ``"shift_changes_output"`` (does adding
            the same constant to every feature change RMSNorm's output? right answer yes,
            because RMSNorm does not subtract the mean). Either wrong answer is the fault
            ``subtracts_mean``.

    Returns:
        :class:`CheckResult` with one case. Never raises on a student's answer.

    Raises:
        ValueError: an unknown ``ask`` (an author's mistake).

    Source: the seed ("RMSNorm: scale without centering"); Zhang and Sennrich 2019, section 3.
    """
    if ask not in _CENTERING_ASKS:
        raise ValueError(f"ask is one of {_CENTERING_ASKS}, got {ask!r}")
    if ask == "shift_changes_output":
        name = "rms_shift_changes"
        try:
            says = parse_yes_no(answer, what=name)
        except AnswerFormatError as e:
            return _result(name, _format_case(name, e))
        if says:
            return _result(name, _case(name, True))
        return _result(name, _fault_case(name, "subtracts_mean", hint=_SHIFT_HINT))
    name = "rms_subtracts_mean"
    try:
        says = parse_yes_no(answer, what=name)
    except AnswerFormatError as e:
        return _result(name, _format_case(name, e))
    if says:
        return _result(name, _fault_case(name, "subtracts_mean", hint=_CENTER_HINT))
    return _result(name, _case(name, True))


#: What a wrong yes/no about centering is told: the principle to reason from, never the
#: verdict (tests/test_practice.py checks every wrong answer's message for the right one).
_SHIFT_HINT = ("reason from what RMSNorm computes, weight * x / RMS(x) with RMS(x) = "
               "sqrt(mean(x^2)): work it out for x and for x + 5 and compare the two outputs "
               "entry by entry. A norm's output ignores a constant shift only if one of its "
               "steps removes the shift.")
_CENTER_HINT = ("reason from RMSNorm's formula, weight * x / RMS(x) with RMS(x) = "
                "sqrt(mean(x^2) + eps): go through it step by step and look for a step that "
                "subtracts a mean from x (LayerNorm's first step, x - mean, is one such step).")


#: the wiring a formula computes (normref.formula_forms.classify) -> fault; the kinds are the
#: placement and block checkers' (normref.checks.placement, normref.checks.block)
_FORMULA_FAULTS = {
    "pre_post_swapped": "pre_post_swapped", "norm_on_sublayer_output": "norm_on_sublayer_output",
    "is_peri_ln": "is_peri_ln", "residual_from_normed": "residual_from_normed",
    "missing_norm": "missing_norm", "missing_residual": "missing_residual",
    "missing_residual_post": "missing_residual",
    "pre_ln_block": "whole_block", "post_ln_block": "whole_block", "two_sublayers": "whole_block",
    "parallel_block": "mlp_reads_x",
}
#: what a formula answer is told: the principle, never the formula asked for (the code
#: checkers' sentences quote the Pre-LN formula, which is this question's answer)
_FORMULA_HINTS = {
    "pre_post_swapped": "that is the original Post-LN, Norm applied after the residual "
    "addition; Pre-LN normalizes the sublayer's input and adds the original {x}.",
    "norm_on_sublayer_output": "the norm is applied to the sublayer's output (Output-LN); "
    "Pre-LN normalizes before the sublayer.",
    "is_peri_ln": "that is Peri-LN, a norm on both sides of the sublayer; Pre-LN normalizes "
    "only the sublayer's input.",
    "missing_residual": "the original {x} is not added back: the residual path is missing.",
    "missing_residual_post": "the original {x} is not added back: the residual path is missing.",
    "residual_from_normed": "the residual adds Norm({x}); Pre-LN adds the original {x}, "
    "unnormalized (\"add the original\").",
    "missing_norm": "there is no normalization in the formula.",
    "pre_ln_block": "that is the whole Pre-LN block, both residual sublayers: attention, then "
    "the feed-forward network on the stream that attention's residual add produced. {one}",
    "post_ln_block": "that is a whole Post-LN block, both residual sublayers, each normalized "
    "after its residual add. {one}",
    "two_sublayers": "that formula has both of the block's residual sublayers, attention and "
    "the feed-forward network. {one}",
    "parallel_block": "that is a parallel block (GPT-J's and PaLM's wiring): the feed-forward "
    "network reads Norm({x}) of the block's input, beside attention, not the stream after "
    "attention's residual add as in the course's Pre-LN block. It has two sublayers. {one}",
}
_ONE_SUBLAYER = {"attention": "The question asks for one sublayer, attention alone: one norm, "
                 "one sublayer, one residual add.",
                 "ffn": "The question asks for one sublayer, the feed-forward half alone: one "
                 "norm, one sublayer, one residual add."}


_SUBLAYER_WORDS = {"attention": "attention", "ffn": "the feed-forward network (FFN, the MLP)"}


def _formula_hint(kind: str, sublayer: str) -> str:
    x = "X" if sublayer == "attention" else "H"
    return _FORMULA_HINTS[kind].format(x=x, one=_ONE_SUBLAYER[sublayer])


def check_pre_ln_formula(formula, sublayer: str = "attention") -> CheckResult:
    """Practice studio 5: "normalize, attend, add the original" as one Pre-LN formula.

    Args:
        formula: a string, e.g. ``"Y = X + Attention(Norm(X))"``; any of the names listed in
            :func:`parse_formula` and LaTeX are accepted, as is the residual written second.
        sublayer: the block's sublayer, ``"attention"`` (the seed's) or ``"ffn"`` (the
            feed-forward half: ``"Y = H + FFN(Norm(H))"``). Naming only the other sublayer is
            wrong (``wrong_values``), whatever the placement.

    Returns:
        :class:`CheckResult` with one case. What the formula computes decides
        (:func:`normref.formula_forms.classify`: any order of the sums): Post-LN
        (pre_post_swapped), the norm after the sublayer (norm_on_sublayer_output), Peri-LN, a
        missing residual, a residual from Norm(X) and a missing norm are each named, with the
        placement checkers' fault kinds; a formula with both of the block's sublayers is told
        it answers for the whole block (whole_block) or that it is the parallel block
        (mlp_reads_x, the block checker's kind for that wiring). No message states the
        answer. Never raises on a student's answer.

    Raises:
        ValueError: an unknown ``sublayer`` (an author's mistake).

    Source: the seed, "Placement is a separate choice"; Xiong et al. 2020, Figure 1.
    """
    from .formula_forms import classify

    name = "pre_ln formula"
    if sublayer not in SUBLAYER_KINDS:
        raise ValueError(f"sublayer is 'attention' or 'ffn', got {sublayer!r}")
    try:
        canon = parse_formula(formula, what="pre_ln_formula", sublayer=sublayer)
    except AnswerFormatError as e:
        return _result(name, _format_case(name, e))
    if canon.count("(") != canon.count(")"):
        return _result(name, _case(name, False, "the parentheses do not balance.", "bad_format"))
    kind = classify(canon, sublayer)
    if "W" in canon and "A" not in canon:
        other = "ffn" if sublayer == "attention" else "attention"
        placed = classify(canon.replace("W", "A"), sublayer)
        also = ""
        if placed in _FORMULA_FAULTS:
            also = " The placement is off too: " + _formula_hint(placed, sublayer)
        return _result(name, _case(name, False, f"this question's sublayer is "
                                   f"{_SUBLAYER_WORDS[sublayer]}, not {_SUBLAYER_WORDS[other]}: "
                                   "name the sublayer the question describes." + also,
                                   "wrong_values"))
    if kind == "pre_ln":
        return _result(name, _case(name, True))
    if kind in _FORMULA_FAULTS:
        return _result(name, _fault_case(name, _FORMULA_FAULTS[kind],
                                         hint=_formula_hint(kind, sublayer)))
    return _result(name, _case(name, False, "this is not a Pre-LN sublayer: the sublayer should "
                               "see the normalized input, and the output should be the "
                               "original input plus the sublayer's output.", "wrong_values"))


def check_norm_changes_shape(answer, ask: str = "changes") -> CheckResult:
    """Practice studio 6 (the yes/no half): does normalization change the tensor shape?

    The one-line explanation is graded by hand (see the assignment's mark scheme).

    Args:
        answer: the student's yes/no (see :func:`parse_yes_no`).
        ask: ``"changes"`` (the seed's: does it change the shape? right answer no) or
            ``"keeps"`` (does the norm's output keep its input's shape? right answer yes).
            Either wrong answer is the fault ``says_shape_changes``.

    Returns:
        :class:`CheckResult` with one case. Never raises on a student's answer.

    Raises:
        ValueError: an unknown ``ask`` (an author's mistake).

    Source: the seed, Practice studio item 6 and the Shape check.
    """
    if ask not in ("changes", "keeps"):
        raise ValueError(f"ask is 'changes' or 'keeps', got {ask!r}")
    name = "norm_changes_shape" if ask == "changes" else "norm_keeps_shape"
    try:
        says = parse_yes_no(answer, what=name)
    except AnswerFormatError as e:
        return _result(name, _format_case(name, e))
    if says is (ask == "changes"):
        return _result(name, _fault_case(name, "says_shape_changes"))
    return _result(name, _case(name, True))


def check_rms_shape(shape, x_shape=(2, 3, 8)) -> CheckResult:
    """Trace it: for ``x.shape == [2, 3, 8]``, the shape of ``rms`` after ``keepdim=True``.

    Args:
        shape: the student's shape (see :func:`parse_shape`).
        x_shape: the question's ``x.shape`` (default the seed's ``[2, 3, 8]``; at least 2 axes).

    Returns:
        :class:`CheckResult` with one case; dropping keepdim (missing_keepdim), giving x's own
        shape and reducing another axis are named. Never raises.

    Source: the seed, "Code checkpoint · RMSNorm over the last axis", Trace it.
    """
    name = "rms shape"
    try:
        s = parse_shape(shape, what="rms_shape")
    except AnswerFormatError as e:
        return _result(name, _format_case(name, e))
    x_shape = tuple(int(n) for n in x_shape)
    want = x_shape[:-1] + (1,)
    if s == want:
        return _result(name, _case(name, True))
    given = f"you gave {s}: "
    if s == x_shape[:-1]:
        return _result(name, _fault_case(name, "missing_keepdim", given, "without keepdim the "
                                         "reduced axis disappears; keepdim=True keeps it with "
                                         "length 1."))
    if s == x_shape:
        return _result(name, _fault_case(name, "output_shape_not_statistic", given))
    if len(s) == len(x_shape) and s.count(1) == 1 and sorted(s) != sorted(want):
        return _result(name, _fault_case(name, "wrong_axis", given))
    return _result(name, _case(name, False, given + "mean(dim=-1, keepdim=True) reduces "
                               f"one axis of {list(x_shape)} and keeps it with length 1.",
                               "wrong_values"))


_AXIS_NAMES = {"B": "batch", "T": "sequence", "D": "feature"}


def _axis_number(value) -> int | None:
    """An axis given by position: an int, ``"1"``, ``"dim=1"``, ``"axis -2"``, ``"the last
    axis"`` (-1), ``"the first axis"`` (0); None for anything else (a name such as "feature")."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, str):
        s = value.strip().lower().strip(" .")
        m = re.fullmatch(r"(?:the\s+)?(?:axis|dim|dimension)?\s*[=:]?\s*(-?\d+)", s)
        if m:
            return int(m.group(1))
        if re.search(r"\blast\b", s):
            return -1
        if re.search(r"\bfirst\b", s):
            return 0
    return None


def check_stats_axis(axis, layout: str = "BTD") -> CheckResult:
    """Retrieval check: which axis supplies the mean and variance for one token?

    Args:
        axis: for the seed's ``layout="BTD"``, an int axis of ``[B, T, D]`` or words (see
            :func:`parse_axis`). For any other layout (e.g. ``"BDT"``, the ``[B, D, T]`` of
            ``torch.nn.Conv1d``) the question asks for the axis *number*: an int, ``"dim=1"``
            or "the last axis"; a name ("feature") is answered with a request for the number.
        layout: the tensor's axes in order, a permutation of ``"BTD"``.

    Returns:
        :class:`CheckResult` with one case; the batch axis (BatchNorm) and the sequence axis
        are named (in another layout, ``-1`` is often the sequence axis: said so). Never
        raises on a student's answer.

    Raises:
        ValueError: ``layout`` is not a permutation of ``"BTD"`` (an author's mistake).

    Source: the seed, Retrieval check ("calculate statistics across its d features").
    """
    name = "statistics axis"
    if sorted(layout) != sorted("BTD"):
        raise ValueError(f"layout is a permutation of 'BTD', got {layout!r}")
    if layout != "BTD":
        shape = "[" + ", ".join(layout) + "]"
        if axis is None or axis is Ellipsis:
            return _result(name, _case(name, False, "stats_axis is not answered yet: set it to "
                                       f"an axis number of {shape}", "not_answered"))
        try:
            refuse_float_axis(axis, "stats_axis")
        except AnswerFormatError as e:
            return _result(name, _format_case(name, e))
        n = _axis_number(axis)
        if n is None:
            return _result(name, _case(name, False, f"this question asks for the axis number "
                                       f"of a {shape} tensor (an int such as 0 or -1), not the "
                                       f"axis's name; got {axis!r}", "bad_format"))
        if not -3 <= n <= 2:
            return _result(name, _case(name, False, f"a {shape} tensor has axes 0, 1, 2 (or -3, "
                                       f"-2, -1), got {n}", "bad_format"))
        letter = layout[n]
        if letter == "D":
            return _result(name, _case(name, True))
        return _result(name, _fault_case(name, f"{_AXIS_NAMES[letter]}_axis",
                                         f"axis {n} of {shape} is the {_AXIS_NAMES[letter]} "
                                         f"axis {letter}: "))
    try:
        ax = parse_axis(axis, what="stats_axis")
    except AnswerFormatError as e:
        return _result(name, _format_case(name, e))
    if ax == "feature":
        return _result(name, _case(name, True))
    return _result(name, _fault_case(name, f"{ax}_axis"))
