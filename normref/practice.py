"""Self-check questions from the seed (Retrieval check, Practice studio, Trace it), with instant feedback.

Each question is answered either in code, ``practice.check("ps_rms_3_4", 3.54)``, or in its
widget, ``practice.quiz("ps_rms_3_4")`` (a box or options, a Check button, feedback, and a
Show-answer button that stays disabled until the first attempt).

The grading and the diagnosis of each mistake are :mod:`normref.answers`' checkers, the same
ones the graded ``practice`` assignment uses, so the lesson and the assignment always agree
(``"that is the L2 norm sqrt(sum of squares): RMS divides the sum of squares by d before taking
the root"``). This module adds what a lesson needs around them: the seed's prompts, the widget,
and answers that stay hidden until the student tries. :func:`reveal` (and the Show-answer
button) only answer once :func:`check` has seen a real attempt for that question in this
kernel; an empty (``...``, ``None``, ``""``) or unreadable answer is not an attempt. The
revealed numbers are computed by ``normref`` from the question's data (e.g.
``layer_norm((2, 2, 4, 4))``), never typed here.

Source: the seed's "Retrieval check", "Practice studio" and "Trace it", and its "Check
solutions".
"""
from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import answers as A
from .checks import CaseResult, CheckResult
from .functional import layer_norm

__all__ = ["Question", "Feedback", "QUESTIONS", "check", "reveal", "quiz", "attempted", "reset"]

_NOT_AN_ATTEMPT = {"not_answered", "bad_format"}


@dataclass(frozen=True)
class Feedback:
    """What :func:`check` says.

    Attributes:
        qid: the question id.
        correct: True for a right answer, False for a wrong or unreadable one, None when
            there was no answer yet.
        message: the sentence the student reads.
        faults: the fault kinds :mod:`normref.answers` diagnosed (``[]`` when correct).
    """

    qid: str
    correct: bool | None
    message: str
    faults: tuple[str, ...] = ()

    def _mark(self) -> str:
        return {True: "✔ correct", False: "✘ not yet", None: "… no answer yet"}[self.correct]

    def __str__(self) -> str:
        return f"[{self.qid}] {self._mark()}: {self.message}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = {True: "#0072B2", False: "#D55E00", None: "#555555"}[self.correct]
        return (f'<div style="border-left:4px solid {colour};padding-left:8px">'
                f"<b>{self._mark()}</b>: {html.escape(self.message)}</div>")


@dataclass(frozen=True)
class Question:
    """One self-check question.

    Attributes:
        qid: stable id, ``<section>_<topic>``.
        section: where the seed puts it ("Retrieval check", "Practice studio", "Trace it").
        prompt: the seed's question.
        kind: ``"text"`` (a box: numbers, a shape or a formula) or ``"choice"`` (options).
        hint: how to type the answer.
        options: the choices, for ``kind == "choice"``; an option's index or text is an answer.
        right: what the feedback adds to a right answer.
    """

    qid: str
    section: str
    prompt: str
    kind: str
    hint: str
    options: tuple[str, ...] = ()
    right: str = ""
    _grade: Callable = field(default=None, repr=False, compare=False)
    _values: tuple = field(default=(), repr=False, compare=False)
    _answer: Callable = field(default=None, repr=False, compare=False)


_ATTEMPTED: set[str] = set()


# --------------------------------------------------------------------------- the questions


def _pair(answer):
    """``(mean, var)`` from a 2-sequence or a string ``"3, 1"``; anything else is passed on
    whole so that answers' parser names the problem."""
    if isinstance(answer, str):
        parts = [p for p in re.split(r"\s*[,;]\s*|\s+", answer.strip().strip("()[]")) if p]
        return tuple(parts) if len(parts) == 2 else (answer, None)
    if hasattr(answer, "detach"):
        answer = answer.detach().cpu().numpy()
    if isinstance(answer, (list, tuple, np.ndarray)) and len(answer) == 2:
        return tuple(answer)
    return (answer, None)


def _grade_mean_var(answer):
    mean, var = _pair(answer)
    if var is None and mean is not None and mean is not Ellipsis:
        return CheckResult("mean_var (2, 2, 4, 4)", [CaseResult(
            "mean_var", False, "give two numbers: the mean, then the variance.", "bad_format")])
    return A.check_mean_var(mean, var)


def _x2244():
    return np.array([2.0, 2.0, 4.0, 4.0])


def _fmt(v) -> str:
    v = np.asarray(v, dtype=np.float64).ravel()
    s = ", ".join(f"{a:.0f}" if abs(a - round(a)) < 1e-9 else f"{a:.3f}" for a in v)
    return s if v.size == 1 else f"({s})"


def _rms_shape():
    import torch

    x = torch.zeros(2, 3, 8)
    rms = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + 1e-6)  # the seed's line
    return list(rms.shape)


_AXIS_OPTIONS = (
    "the batch axis B: every sequence in the batch together",
    "the sequence axis T: every position of the sequence",
    "the feature axis D: the d features of that one token",
)
_SHAPE_OPTIONS = (
    "No: it transforms the feature values but keeps every axis length, [B, T, D] -> [B, T, D]",
    "Yes: the feature axis shrinks to 1, [B, T, D] -> [B, T, 1]",
    "Yes: the statistics remove the batch axis, [B, T, D] -> [T, D]",
)

QUESTIONS: dict[str, Question] = {}


def _add(q: Question) -> None:
    QUESTIONS[q.qid] = q


_add(Question(
    "retrieval_axis", "Retrieval check", "Which axis supplies the mean and variance for one token?",
    "choice", "pick one option, or name the axis", _AXIS_OPTIONS,
    "the d features of that one token (dim=-1); batch and sequence stay separate.",
    A.check_stats_axis, ("batch", "sequence", "feature"), lambda: _AXIS_OPTIONS[2]))
_add(Question(
    "trace_rms_shape", "Trace it", "For x.shape == [2, 3, 8], what is the shape of rms after keepdim=True?",
    "text", "a shape, e.g. 4, 5, 6", (),
    "mean(dim=-1) reduces only the feature axis; keepdim=True keeps it with length 1.",
    A.check_rms_shape, (), lambda: str(_rms_shape())))
_add(Question(
    "ps_mean_var", "Practice studio", "Compute the mean and variance of (2, 2, 4, 4).",
    "text", "two numbers: mean, variance (2/3 and sqrt(...) are fine)", (),
    "the mean, and the average squared distance from it (divide by d = 4).",
    _grade_mean_var, (), lambda: "mean = {:g}, variance = {:g}".format(_x2244().mean(), _x2244().var())))
_add(Question(
    "ps_layernorm", "Practice studio", "Normalize (2, 2, 4, 4) with LayerNorm, ignoring ε, γ = 1 and β = 0.",
    "text", "four numbers", (), "(x - mean) / sqrt(variance): mean 0, variance 1.",
    A.check_layer_norm_2244, (), lambda: _fmt(layer_norm(_x2244(), eps=0.0))))
_add(Question(
    "ps_rms_3_4", "Practice studio", "Compute the RMS of (3, 4).",
    "text", "one number (3 decimals), or sqrt(...)", (),
    "the root of the mean of the squares, sqrt((9 + 16) / 2).",
    A.check_rms_34, (), lambda: f"sqrt((9 + 16) / 2) = sqrt(12.5) ≈ {math.sqrt(12.5):.3f}"))
_add(Question(
    "ps_rms_subtracts_mean", "Practice studio", "State whether RMSNorm subtracts the mean.",
    "choice", "pick one option", ("Yes", "No"),
    "it only rescales, x / RMS(x), so its output's mean is not forced to zero.",
    A.check_rms_subtracts_mean, ("yes", "no"), lambda: "No"))
_add(Question(
    "ps_pre_ln_formula", "Practice studio", "Rewrite “normalize, attend, add the original” as one Pre-LN formula.",
    "text", "a formula in X, Norm(...), Attention(...) and +", (),
    "normalize X, attend, then add the original X back: the residual carries X untouched.",
    A.check_pre_ln_formula, (), lambda: "Y = X + Attention(Norm(X))"))
_add(Question(
    "ps_shape_change", "Practice studio", "Does normalization change the tensor shape? Explain.",
    "choice", "pick one option", _SHAPE_OPTIONS,
    "the values change, every axis length stays: the residual additions remain valid.",
    A.check_norm_changes_shape, ("no", "yes", "yes"), lambda: _SHAPE_OPTIONS[0]))


# --------------------------------------------------------------------------- the API


def _question(qid: str) -> Question:
    if qid not in QUESTIONS:
        raise KeyError(f"unknown question {qid!r}; the questions are {sorted(QUESTIONS)}")
    return QUESTIONS[qid]


def _choice_value(q: Question, answer):
    """An option's index or text -> the value :mod:`normref.answers` grades; else unchanged."""
    if isinstance(answer, (int, np.integer)) and not isinstance(answer, (bool, np.bool_)) \
            and 0 <= int(answer) < len(q.options):
        return q._values[int(answer)]
    if isinstance(answer, str):
        text = answer.strip().lower()
        for i, o in enumerate(q.options):
            if o.lower() == text:
                return q._values[i]
    return answer


def check(qid: str, answer) -> Feedback:
    """Check an answer to question ``qid`` and say what is right or likely wrong.

    Args:
        qid: a key of :data:`QUESTIONS`, e.g. ``"ps_mean_var"``.
        answer: whatever :mod:`normref.answers` reads for that question: numbers (a number,
            tuple, list, array, tensor, or a string like ``"3, 1"`` or ``"sqrt(12.5)"``), a
            shape (``(2, 3, 1)``, ``torch.Size``, ``"2, 3, 1"``), a formula
            (``"X + Attention(Norm(X))"``), yes/no, an axis; for a choice question also an
            option's index or text. ``...`` or None means "not answered yet".

    Returns:
        :class:`Feedback`: ``correct`` is True, False, or None (no answer yet). A readable
        answer, right or wrong, unlocks :func:`reveal` for that question.

    Raises:
        KeyError: unknown ``qid``. A malformed answer never raises: it gets a message.
    """
    return _check(qid, answer, "code")


def _not_answered(q: Question, view: str) -> str:
    """What an empty answer is told, in the words of where it was given: the code cell
    (``check(qid, ...)``) or the quiz's form (a box or options, Check, Enter)."""
    if view == "widget":
        return ("pick one of the options, then press Check." if q.kind == "choice" else
                f"type your answer in the box ({q.hint}), then press Check or Enter.")
    return f"replace the ... with your answer ({q.hint}), then run the cell again."


def _check(qid: str, answer, view: str) -> Feedback:
    """:func:`check`, its messages in the words of ``view``: ``"code"`` or ``"widget"``."""
    q = _question(qid)
    if q.kind == "choice":
        answer = _choice_value(q, answer)
    if isinstance(answer, str) and not answer.strip():
        answer = None
    result = q._grade(answer)
    faults = tuple(result.faults)
    if faults and set(faults) <= _NOT_AN_ATTEMPT and "not_answered" in faults:
        return Feedback(qid, None, _not_answered(q, view), faults)
    messages = _said(result)
    if faults and set(faults) <= _NOT_AN_ATTEMPT:  # unreadable: not an attempt
        return Feedback(qid, False, " ".join(messages) + f" ({q.hint}).", faults)
    _ATTEMPTED.add(qid)
    if result.passed:
        return Feedback(qid, True, q.right)
    return Feedback(qid, False, " ".join(messages), faults)


#: The label an answers message starts with in the graded assignment, where it names the
#: answer's variable (``pre_ln_formula: did not recognise ...``, ``stats_axis is the float
#: 1.0 ...``, ``ln_2244 entry 0: ...``); a lesson's question has one answer box and no variable.
_LABEL = re.compile(r"^[a-z][a-z0-9]*_[a-z0-9_]*(?: (entry \d+))?(: | (?=is |should ))")


def _said(result: CheckResult) -> list[str]:
    """The failing cases' messages as the lesson says them: without the checker's case name
    when the question has one answer (``"pre_ln formula: "``), nor the assignment's variable
    name (``"pre_ln_formula: "``; ``"stats_axis is ..."`` is ``"your answer is ..."``)."""
    out = []
    for c in result.cases:
        if c.passed:
            continue
        m = c.message
        if len(result.cases) == 1 and m.startswith(f"{c.name}: "):
            m = m[len(c.name) + 2:]
        label = _LABEL.match(m)
        if label:
            rest = m[label.end():]
            m = f"{label.group(1)}: {rest}" if label.group(1) else rest if label.group(2) == ": " \
                else f"your answer {rest}"
        out.append(m)
    return out


def attempted(qid: str) -> bool:
    """Whether :func:`check` has seen a real answer to ``qid`` in this kernel."""
    _question(qid)
    return qid in _ATTEMPTED


def reveal(qid: str) -> str:
    """The standard answer, once the student has tried (the seed's "Check solutions").

    Args:
        qid: a key of :data:`QUESTIONS`.

    Returns:
        The answer as text if :func:`attempted`; otherwise a reminder to answer first (the
        answer itself is not in the returned text).

    Raises:
        KeyError: unknown ``qid``.
    """
    return _reveal(qid, "code")


def _reveal(qid: str, view: str) -> str:
    """:func:`reveal`, in the words of ``view`` (``"code"`` or ``"widget"``)."""
    q = _question(qid)
    if qid not in _ATTEMPTED:
        how = "press Check with your answer" if view == "widget" else f"run check({qid!r}, your_answer)"
        return f"Answer first: {how}; the standard answer appears after one attempt."
    return f"Standard answer: {q._answer()}"


def reset() -> None:
    """Forget every attempt (locks the answers again)."""
    _ATTEMPTED.clear()


class _Quiz:
    """The widget form of one question; see :func:`quiz`."""

    def __init__(self, qid: str):
        import ipywidgets as W

        from .answer_form import answer_form

        q = _question(qid)
        self.qid = qid
        self.prompt = W.HTML(f"<b>{html.escape(q.section)}.</b> {html.escape(q.prompt)}")
        self.answer = answer_form(kind=q.kind, options=list(q.options), hint=q.hint,
                                  value=None if q.kind == "choice" else "")
        self.feedback = W.HTML()
        self.feedback.add_class("normref-feedback")
        self.answer.on_check(self._on_check)
        self.answer.on_reveal(self._on_reveal)
        self.widget = W.VBox([self.prompt, self.answer, self.feedback])

    def _on_check(self, value) -> Feedback:
        """Judge ``value``, the answer the form sent with the request (its box's text, or the
        option picked), never an older one the kernel still had."""
        self.feedback.value = ""  # no earlier verdict stays up while this answer is judged
        shown = value
        if self.answer.kind == "choice" and value is not None:
            value = list(_question(self.qid).options).index(value)
        fb = _check(self.qid, value, "widget")
        judged = html.escape(str(shown)) if shown not in (None, "") else "(no answer)"
        # the answer judged, as the kernel received it, above its verdict
        self.feedback.value = (f'<div class="normref-judged" style="color:#555555">your answer: '
                               f"<code>{judged}</code></div>" + fb._repr_html_())
        self.answer.revealable = attempted(self.qid)
        return fb

    def _on_reveal(self) -> str:
        text = _reveal(self.qid, "widget")
        self.feedback.value += f"<div><i>{html.escape(text)}</i></div>"
        return text

    def _repr_mimebundle_(self, **kwargs):  # the widget, and its static form (normref.static_widgets)
        from .static_widgets import mimebundle

        return mimebundle(self.widget, title="Practice question", **kwargs)


def quiz(qid: str) -> _Quiz:
    """The question as a widget: its prompt, an answer form (a box or options, Check, Show
    answer: :mod:`normref.answer_form`), and the feedback.

    Check, or Enter in the box, sends the answer the form shows with the request, and judges
    that (:func:`check`'s verdict, its messages in the form's words: "type your answer in the
    box"), shown in an ``HTML`` widget (CSS class ``normref-feedback``) under the answer it
    judged; Show answer stays disabled until the first real attempt, then appends
    :func:`reveal`'s text. Builds with no browser attached.

    Args:
        qid: a key of :data:`QUESTIONS`.

    Returns:
        An object with ``.widget`` (an ``ipywidgets.VBox``; a cell ending in it shows it),
        ``.answer`` (the form: ``.value``, ``.check()`` as Check does, ``.reveal()``,
        ``.revealable``) and ``.feedback``.

    Raises:
        KeyError: unknown ``qid``.
    """
    return _Quiz(qid)
