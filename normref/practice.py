"""Self-check questions from the seed (Retrieval check, Practice studio, Trace it), with instant feedback.

Each question is answered either in code, ``practice.check("ps_rms_3_4", 3.54)``, or in its
widget, ``practice.quiz("ps_rms_3_4")`` (a box, a Check button, feedback, and a Show-answer
button that stays disabled until the first attempt). The feedback names the likely mistake
(``"that is sqrt(9 + 16) = 5, the length of the vector: divide the sum of squares by d = 2
before the square root"``), found by comparing the answer with what each known mistake gives.

Answers stay hidden until the student tries: :func:`reveal` (and the Show-answer button) only
answer once :func:`check` has seen a real attempt for that question in this kernel; an empty
answer (``...`` or ``None``) is not an attempt. Numeric answers are computed by ``normref``
from the question's data (e.g. ``layer_norm((2, 2, 4, 4))``), never typed here.

Source: the seed's "Retrieval check", "Practice studio" and "Trace it", and its "Check
solutions".
"""
from __future__ import annotations

import ast
import html
import math
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .functional import layer_norm, rms_norm

__all__ = ["Question", "Feedback", "QUESTIONS", "check", "reveal", "quiz", "attempted", "reset"]


@dataclass(frozen=True)
class Feedback:
    """What :func:`check` says.

    Attributes:
        qid: the question id.
        correct: True for a right answer; None when there was no answer yet.
        message: the sentence the student reads.
    """

    qid: str
    correct: bool | None
    message: str

    def __str__(self) -> str:
        mark = {True: "✔ correct", False: "✘ not yet", None: "… no answer yet"}[self.correct]
        return f"[{self.qid}] {mark}: {self.message}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = {True: "#0072B2", False: "#D55E00", None: "#555555"}[self.correct]
        mark = {True: "✔ correct", False: "✘ not yet", None: "… no answer yet"}[self.correct]
        return (f'<div style="border-left:4px solid {colour};padding-left:8px">'
                f"<b>{mark}</b>: {html.escape(self.message)}</div>")


@dataclass(frozen=True)
class Question:
    """One self-check question.

    Attributes:
        qid: stable id, ``<section>_<topic>``.
        section: where the seed puts it ("Retrieval check", "Practice studio", "Trace it").
        prompt: the seed's question, verbatim.
        kind: ``"numbers"`` (one or more numbers), ``"choice"`` (one of ``options``),
            ``"formula"`` (a formula in X, Norm(...), Attention(...) and +) or ``"shape"``.
        hint: how to type the answer.
        options: the choices, for ``kind == "choice"``.
    """

    qid: str
    section: str
    prompt: str
    kind: str
    hint: str
    options: tuple[str, ...] = ()
    _grade: Callable = field(default=None, repr=False, compare=False)
    _answer: Callable = field(default=None, repr=False, compare=False)


_ATTEMPTED: set[str] = set()


# --------------------------------------------------------------------------- parsing


class _Unanswered(Exception):
    pass


def _numbers(answer) -> np.ndarray:
    """Answer -> 1-D float64 array; accepts numbers, sequences, arrays, tensors, "3, 1"."""
    if answer is None or answer is Ellipsis or (isinstance(answer, str) and not answer.strip()):
        raise _Unanswered()
    if isinstance(answer, str):
        tokens = _NUMBER.findall(answer)
        if not tokens or _NUMBER.sub("", answer).strip(" ,;()[]\t\n"):
            raise ValueError(f"could not read {answer!r} as numbers; type them like 3, 1")
        return np.array([_eval_number(t) for t in tokens], dtype=np.float64)
    if hasattr(answer, "detach"):
        answer = answer.detach().cpu().numpy()
    arr = np.asarray(answer, dtype=object).ravel()
    if any(a is Ellipsis for a in arr):
        raise _Unanswered()
    return np.asarray(arr, dtype=np.float64)


_NUMBER = re.compile(r"(?:sqrt|√)\s*\(?\s*[0-9.]+(?:\s*/\s*[0-9.]+)?\s*\)?"
                     r"|[-+]?[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?(?:\s*/\s*[0-9]*\.?[0-9]+)?", re.I)


def _eval_number(text: str) -> float:
    """``"2/3"`` -> 0.667, ``"sqrt(12.5)"`` -> 3.536, ``"1.5"`` -> 1.5 (no ``eval``)."""
    t = re.sub(r"\s+", "", text.lower()).replace("√", "sqrt")
    m = re.fullmatch(r"sqrt\(?([0-9.]+(?:/[0-9.]+)?)\)?", t)
    if m:
        return math.sqrt(_eval_number(m.group(1)))
    if "/" in t:
        a, b = t.split("/", 1)
        return float(a) / float(b)
    return float(t)


def _close(a, b, tol=5e-3) -> bool:
    a, b = np.atleast_1d(np.asarray(a, float)), np.atleast_1d(np.asarray(b, float))
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= tol))


def _fmt(v) -> str:
    v = np.asarray(v, dtype=np.float64).ravel()
    s = ", ".join(f"{a:.3f}".rstrip("0").rstrip(".") if abs(a - round(a)) > 1e-9 else f"{a:.0f}"
                  for a in v)
    return s if v.size == 1 else f"({s})"


# --------------------------------------------------------------------------- the questions
# Each grader takes the parsed answer and returns (correct, message).


def _x2244():
    return np.array([2.0, 2.0, 4.0, 4.0])


def _answer_mean_var():
    x = _x2244()
    return np.array([x.mean(), x.var()])  # biased variance: divide by d


def _grade_mean_var(ans):
    want = _answer_mean_var()
    x = _x2244()
    if ans.size != 2:
        return False, f"give two numbers, the mean and the variance (you gave {ans.size})."
    mean, var = ans
    if not _close(mean, want[0]):
        if _close(mean, x.sum()):
            return False, "that first number is the sum: the mean divides it by d = 4."
        return False, "the mean is wrong: add the four entries and divide by d = 4."
    if _close(var, want[1]):
        return True, "mean 3, and the average squared distance from it is 1."
    if _close(var, x.var(ddof=1)):
        return False, (f"your variance is {var:.3f} = 4/3: you divided by n - 1 = 3. "
                       "Normalization uses the biased variance: divide by d = 4.")
    if _close(var, ((x - x.mean()) ** 2).sum()):
        return False, "that is the sum of squared deviations: divide it by d = 4."
    if _close(var, (x ** 2).mean()):
        return False, "that is the mean of x², not of (x - mean)²: subtract the mean first."
    if _close(var, x.std()):
        return False, "that is the standard deviation; the variance is its square."
    return False, "the variance is the mean of (x_r - mean)² over the d = 4 features."


def _answer_ln():
    return layer_norm(_x2244(), eps=0.0)


def _grade_ln(ans):
    want = _answer_ln()
    x = _x2244()
    if ans.size != 4:
        return False, f"LayerNorm keeps the shape: give 4 numbers, you gave {ans.size}."
    if _close(ans, want):
        return True, "(x - 3) / sqrt(1): the mean is 0 and the variance 1."
    if _close(ans, want * math.sqrt(3 / 4)):
        return False, ("your output equals the answer times 0.866 = sqrt(3/4): you divided the "
                       "variance by n - 1; divide by d = 4.")
    if _close(ans, rms_norm(x, eps=0.0)):
        return False, "that is RMSNorm (x / RMS): LayerNorm first subtracts the mean, 3."
    if _close(ans, x / x.std()):
        return False, "you scaled but did not center: subtract the mean 3 first."
    if _close(-ans, want):
        return False, "the signs are flipped: compute x - mean, not mean - x."
    return False, "compute (x_r - mean) / sqrt(variance) for each of the 4 entries."


def _answer_rms():
    x = np.array([3.0, 4.0])
    return np.array([math.sqrt((x ** 2).mean())])


def _grade_rms(ans):
    want = _answer_rms()
    x = np.array([3.0, 4.0])
    if ans.size != 1:
        return False, f"the RMS of a token is one number; you gave {ans.size}."
    if _close(ans, want):
        return True, "sqrt((9 + 16) / 2) = sqrt(12.5)."
    if _close(ans, np.linalg.norm(x)):
        return False, ("that is sqrt(9 + 16) = 5, the length of the vector: divide the sum of "
                       "squares by d = 2 before the square root.")
    if _close(ans, (x ** 2).mean()):
        return False, "that is the mean square, 12.5: take its square root."
    if _close(ans, x.mean()):
        return False, "that is the mean, 3.5: square first, average, then take the root."
    if _close(ans, x.std()):
        return False, "you subtracted the mean (that is the standard deviation): RMS does not center."
    return False, "RMS = sqrt of the mean of the squares: sqrt((3² + 4²) / 2)."


_PRE = ("add", ("X",), ("call", "F", ("call", "Norm", ("X",))))
_POST = ("call", "Norm", ("add", ("X",), ("call", "F", ("X",))))
_NORM_NAMES = {"norm", "ln", "layernorm", "rmsnorm", "rms", "layer_norm", "rms_norm"}
_SUB_NAMES = {"attention", "attn", "f", "sublayer", "mha", "selfattention", "self_attn"}


def _canon(node):
    if isinstance(node, ast.Name):
        if node.id.lower() == "x":
            return ("X",)
        raise ValueError(f"unknown name {node.id!r}: use X for the input")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _canon(node.left), _canon(node.right)
        return ("add",) + tuple(sorted([a, b], key=repr))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1:
        f = node.func.id.lower()
        if f in _NORM_NAMES:
            return ("call", "Norm", _canon(node.args[0]))
        if f in _SUB_NAMES:
            return ("call", "F", _canon(node.args[0]))
        raise ValueError(f"unknown function {node.func.id!r}: use Norm(...) and Attention(...)")
    raise ValueError("use only X, Norm(...), Attention(...) and +")


def _canon_expected(t):
    if t[0] == "add":
        return ("add",) + tuple(sorted([_canon_expected(t[1]), _canon_expected(t[2])], key=repr))
    if t[0] == "call":
        return ("call", t[1], _canon_expected(t[2]))
    return t


def _parse_formula(answer) -> tuple:
    if answer is None or answer is Ellipsis or not str(answer).strip():
        raise _Unanswered()
    text = str(answer).strip()
    text = re.sub(r"\\operatorname\{(\w+)\}", r"\1", text).replace("\\left", "").replace("\\right", "")
    text = re.sub(r"^\s*Y\s*=", "", text, flags=re.I).strip()
    try:
        return _canon(ast.parse(text, mode="eval").body)
    except SyntaxError:
        raise ValueError("could not read that formula: write it with X, Norm(...), "
                         "Attention(...) and +") from None


def _grade_pre_ln(tree):
    if tree == _canon_expected(_PRE):
        return True, "normalize X, attend, then add the original X back: the residual carries X untouched."
    if tree == _canon_expected(_POST):
        return False, ("that is the original Post-LN: it normalizes after the residual addition. "
                       "Pre-LN normalizes only what enters the sublayer.")
    if tree == _canon_expected(("call", "F", ("call", "Norm", ("X",)))):
        return False, "you dropped 'add the original': the residual X + ... is missing."
    if tree == _canon_expected(("add", ("call", "Norm", ("X",)), ("call", "F", ("call", "Norm", ("X",))))):
        return False, "that adds the normalized X: the residual path carries the original X."
    if tree == _canon_expected(("add", ("X",), ("call", "F", ("X",)))):
        return False, "there is no Norm: normalize X before it enters Attention."
    if tree == _canon_expected(("add", ("X",), ("call", "Norm", ("call", "F", ("X",))))):
        return False, "that normalizes after attending: the seed's order is normalize, attend, add."
    return False, "read it in order: Norm(X) first, then Attention of that, then add X."


def _grade_choice(correct_index: int, wrong: dict[int, str], right: str):
    def grade(i):
        if i == correct_index:
            return True, right
        return False, wrong.get(i, "not that one; read the section again.")
    return grade


def _rms_shape():
    import torch

    x = torch.zeros(2, 3, 8)
    rms = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + 1e-6)  # the seed's line
    return np.array(rms.shape, dtype=np.float64)


def _grade_shape(ans):
    want = _rms_shape()
    if _close(ans, want, tol=0):
        return True, "mean(dim=-1) reduces only the feature axis to 1; keepdim=True keeps it as a 1."
    if _close(ans, want[:-1], tol=0):
        return False, "that is the shape without keepdim=True: keepdim keeps the reduced axis as size 1."
    if _close(ans, [2, 3, 8], tol=0):
        return False, "that is x's shape: mean(dim=-1) reduces the last axis (8 features)."
    if ans.size == 3 and ans[-1] == 8:
        return False, "the reduction is over dim=-1, the last axis: it becomes 1, the others stay."
    return False, "start from [2, 3, 8] and reduce the last axis, keeping it (keepdim=True)."


_AXIS_OPTIONS = (
    "the batch axis B: every sequence in the batch together",
    "the sequence axis T: every position of the sequence",
    "the feature axis D: the d features of that one token",
    "all three axes B, T and D at once",
)
_SHAPE_OPTIONS = (
    "No: it transforms the feature values but keeps every axis length, [B, T, D] -> [B, T, D]",
    "Yes: the feature axis shrinks to 1, [B, T, D] -> [B, T, 1]",
    "Yes: the statistics remove the batch axis, [B, T, D] -> [T, D]",
)
_SUBTRACT_OPTIONS = ("Yes", "No")

QUESTIONS: dict[str, Question] = {}


def _add(q: Question) -> None:
    QUESTIONS[q.qid] = q


_add(Question(
    "retrieval_axis", "Retrieval check",
    "Which axis supplies the mean and variance for one token?", "choice",
    "pick one option", _AXIS_OPTIONS,
    _grade_choice(2, {
        0: "averaging over the batch is BatchNorm; LayerNorm and RMSNorm never mix batch items.",
        1: "averaging over positions would mix tokens; each token is normalized on its own.",
        3: "that would give one mean for the whole tensor; the statistics are per token.",
    }, "the d features of that one token (dim=-1); batch and sequence stay separate."),
    lambda: _AXIS_OPTIONS[2]))
_add(Question(
    "trace_rms_shape", "Trace it",
    "For x.shape == [2, 3, 8], what is the shape of rms after keepdim=True?", "shape",
    "type the shape, e.g. 4, 5, 6", (), _grade_shape,
    lambda: "[" + ", ".join(str(int(v)) for v in _rms_shape()) + "]"))
_add(Question(
    "ps_mean_var", "Practice studio", "Compute the mean and variance of (2, 2, 4, 4).", "numbers",
    "two numbers: mean, variance (fractions like 2/3 are fine)", (), _grade_mean_var,
    lambda: "mean = {:g}, variance = {:g}".format(*_answer_mean_var())))
_add(Question(
    "ps_layernorm", "Practice studio",
    "Normalize (2, 2, 4, 4) with LayerNorm, ignoring ε, γ = 1 and β = 0.", "numbers",
    "four numbers", (), _grade_ln, lambda: _fmt(_answer_ln())))
_add(Question(
    "ps_rms_3_4", "Practice studio", "Compute the RMS of (3, 4).", "numbers",
    "one number (3 decimals), or sqrt(...)", (), _grade_rms,
    lambda: f"sqrt((9 + 16) / 2) = sqrt(12.5) ≈ {_answer_rms()[0]:.3f}"))
_add(Question(
    "ps_rms_subtracts_mean", "Practice studio", "State whether RMSNorm subtracts the mean.",
    "choice", "pick one option", _SUBTRACT_OPTIONS,
    _grade_choice(1, {0: "RMSNorm only rescales by the RMS; subtracting the mean is what "
                      "LayerNorm adds (try the LN/RMS toggle: RMSNorm's output mean is not 0)."},
                  "it only rescales: x / RMS(x), so the output mean is not forced to zero."),
    lambda: "No"))
_add(Question(
    "ps_pre_ln_formula", "Practice studio",
    "Rewrite “normalize, attend, add the original” as one Pre-LN formula.", "formula",
    "a formula in X, Norm(...), Attention(...) and +", (), _grade_pre_ln,
    lambda: "Y = X + Attention(Norm(X))"))
_add(Question(
    "ps_shape_change", "Practice studio", "Does normalization change the tensor shape? Explain.",
    "choice", "pick one option", _SHAPE_OPTIONS,
    _grade_choice(0, {
        1: "only the statistic (mean, RMS) has shape [B, T, 1]; it broadcasts back over D, so "
           "the output is [B, T, D] again.",
        2: "no axis is removed: each token is normalized in place.",
    }, "the values change, every axis length stays: the residual additions remain valid."),
    lambda: _SHAPE_OPTIONS[0]))


# --------------------------------------------------------------------------- the API


def _question(qid: str) -> Question:
    if qid not in QUESTIONS:
        raise KeyError(f"unknown question {qid!r}; the questions are {sorted(QUESTIONS)}")
    return QUESTIONS[qid]


def check(qid: str, answer) -> Feedback:
    """Check an answer to question ``qid`` and say what is right or likely wrong.

    Args:
        qid: a key of :data:`QUESTIONS`, e.g. ``"ps_mean_var"``.
        answer: numbers (a number, tuple, list, numpy array, tensor or a string like
            ``"3, 1"`` or ``"sqrt(12.5)"``), an option (its index or its text) for a choice,
            a string formula such as ``"X + Attention(Norm(X))"``, or a shape (``(2, 3, 1)``,
            ``torch.Size``, ``"2, 3, 1"``). ``...`` or None means "not answered yet".

    Returns:
        :class:`Feedback`: ``correct`` is True, False, or None (no answer yet). A real answer,
        right or wrong, unlocks :func:`reveal` for that question.

    Raises:
        KeyError: unknown ``qid``. A malformed answer never raises: it gets a message.
    """
    q = _question(qid)
    try:
        if q.kind == "choice":
            if answer is None or answer is Ellipsis or (isinstance(answer, str) and not answer.strip()):
                raise _Unanswered()
            if isinstance(answer, (int, np.integer)) and not isinstance(answer, bool):
                idx = int(answer)
                if not 0 <= idx < len(q.options):
                    raise ValueError(f"pick an option number from 0 to {len(q.options) - 1}")
            else:
                text = str(answer).strip().lower()
                opts = [o.lower() for o in q.options]
                matches = [i for i, o in enumerate(opts) if o == text]
                matches = matches or [i for i, o in enumerate(opts) if o.startswith(text)]
                matches = matches or [i for i, o in enumerate(opts) if text in o]
                if len(matches) != 1:
                    raise ValueError("give one of the options: " + " | ".join(q.options))
                idx = matches[0]
            ok, msg = q._grade(idx)
        elif q.kind == "formula":
            ok, msg = q._grade(_parse_formula(answer))
        else:
            ok, msg = q._grade(_numbers(answer))
    except _Unanswered:
        return Feedback(qid, None, f"replace the ... with your answer ({q.hint}), then run again.")
    except ValueError as e:  # unreadable: not an attempt, the answer stays hidden
        return Feedback(qid, False, f"{e} ({q.hint}).")
    _ATTEMPTED.add(qid)
    return Feedback(qid, ok, msg)


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
    q = _question(qid)
    if qid not in _ATTEMPTED:
        return f"Answer first: run check({qid!r}, your_answer); the standard answer appears after one attempt."
    return f"Standard answer: {q._answer()}"


def reset() -> None:
    """Forget every attempt (locks the answers again)."""
    _ATTEMPTED.clear()


class _Quiz:
    """The widget form of one question; see :func:`quiz`."""

    def __init__(self, qid: str):
        import ipywidgets as W

        q = _question(qid)
        self.qid = qid
        self.prompt = W.HTML(f"<b>{html.escape(q.section)}.</b> {html.escape(q.prompt)}")
        if q.kind == "choice":
            self.answer = W.RadioButtons(options=list(q.options), value=None, description="answer",
                                         layout=W.Layout(width="max-content"))
        else:
            self.answer = W.Text(value="", placeholder=q.hint, description="answer",
                                 continuous_update=False, layout=W.Layout(width="420px"))
        self.check_button = W.Button(description="Check", button_style="primary")
        self.reveal_button = W.Button(description="Show answer", disabled=True,
                                      tooltip="available after your first attempt")
        self.feedback = W.HTML()
        self.feedback.add_class("normref-feedback")
        self.check_button.on_click(self._on_check)
        self.reveal_button.on_click(self._on_reveal)
        self.widget = W.VBox([self.prompt, self.answer,
                              W.HBox([self.check_button, self.reveal_button]), self.feedback])

    def _on_check(self, _=None) -> Feedback:
        value = self.answer.value
        if self.answer.__class__.__name__ == "RadioButtons" and value is not None:
            value = list(_question(self.qid).options).index(value)
        fb = check(self.qid, value)
        self.feedback.value = fb._repr_html_()
        self.reveal_button.disabled = not attempted(self.qid)
        return fb

    def _on_reveal(self, _=None) -> str:
        text = reveal(self.qid)
        self.feedback.value += f"<div><i>{html.escape(text)}</i></div>"
        return text

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


def quiz(qid: str) -> _Quiz:
    """The question as a widget: its prompt, an answer box (or options), Check, Show answer.

    Check calls :func:`check` and shows the feedback in an ``HTML`` widget (CSS class
    ``normref-feedback``); Show answer stays disabled until the first real attempt, then
    appends :func:`reveal`'s text. Builds with no browser attached.

    Args:
        qid: a key of :data:`QUESTIONS`.

    Returns:
        An object with ``.widget`` (an ``ipywidgets.VBox``; a cell ending in it shows it),
        ``.answer``, ``.check_button``, ``.reveal_button`` and ``.feedback``.

    Raises:
        KeyError: unknown ``qid``.
    """
    return _Quiz(qid)
