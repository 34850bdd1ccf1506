"""Issue 23 items 2 and 3: a wrong short answer is told the principle to reason from, never the
answer; and the Pre-LN formula question shares one notion of the Pre-LN block with the block
checker, in the lesson's widget, through ``normref.practice.check`` and in the assignment.

Every short-answer checker is run, in every setting a lesson or the practice assignment asks it
in, on every wrong answer listed here (together they reach every diagnosis the checker has: the
test says so), and each message is searched for the right answer. "Contains" is read the way a
student would read it: a number (or arithmetic such as ``(1 + 3 + 5 + 7) / 4``) within the
checker's tolerance of a right number; a tuple equal to the right shape or vector; a formula
that reads as the right formula (every span of the message that ``parse_formula`` can read);
for a yes/no question the right verdict's words (``yes``/``true`` or ``no``/``false``) or a
sentence stating it ("RMSNorm's output changes", "RMSNorm does not subtract the mean", "the
shape is kept"); for an axis, the right axis by number or name.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from normref import answers as A
from normref import practice as P

# --------------------------------------------------------------------------- what "contains" means

# a number: digits, a decimal point, an exponent; not part of a name (ln_1357, x_r) nor of a
# symbolic expression (n-1, d - 1, x^2)
_NUM = re.compile(r"(?<![\w.^])(?<![A-Za-z_][-+*/])(?<![A-Za-z_] [-+*/] )\d+(?:\.\d+)?(?:e-?\d+)?(?![\w.])")
# arithmetic: numbers, + - * / ** ^, parentheses, sqrt / √
_ARITH = re.compile(r"(?:sqrt|√|[\d.()+\-*/^ ])+")


def numbers_in(text: str, givens: set[float]) -> list[float]:
    """Every number a reader sees in ``text``: each arithmetic run's value (``(25 + 144) / 2``,
    ``20/4``), or a lone literal (except those the question itself states, ``givens``, and those
    inside a symbolic expression such as ``n-1``)."""
    literals = {m.start(): float(m.group()) for m in _NUM.finditer(text)}
    out = []
    for m in _ARITH.finditer(text):
        raw = m.group()
        run = raw.strip(" +-*/^")
        if not re.search(r"\d", run):
            continue
        start = m.start() + raw.index(run)
        if _NUM.fullmatch(run):
            if start in literals and literals[start] not in givens:
                out.append(literals[start])
            continue
        while run.count("(") > run.count(")") and run.startswith("("):
            run = run[1:]
        while run.count(")") > run.count("(") and run.endswith(")"):
            run = run[:-1]
        try:
            out.append(A.parse_number(run))
        except A.AnswerFormatError:
            pass
    return out


def tuples_in(text: str) -> list[tuple[float, ...]]:
    """Every bracketed or parenthesised list of two or more numbers in ``text``."""
    out = []
    for m in re.finditer(r"[\[(]\s*(-?\d+(?:\.\d+)?(?:\s*,\s*-?\d+(?:\.\d+)?)+)\s*[\])]", text):
        out.append(tuple(float(v) for v in m.group(1).split(",")))
    return out


_FORMULA_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[()+]")
_PRE_LN = {"X+A(N(X))", "A(N(X))+X"}  # the accepted canonical forms, written out here


def formulas_in(text: str, sublayer: str) -> list[str]:
    """The canonical form of every span of ``text`` that ``parse_formula`` reads as a formula."""
    toks = [(m.start(), m.end()) for m in _FORMULA_TOKEN.finditer(text)]
    out = []
    for i in range(len(toks)):
        for j in range(i + 1, min(len(toks), i + 40) + 1):
            span = text[toks[i][0]:toks[j - 1][1]]
            if "(" not in span or "+" not in span or span.count("(") != span.count(")"):
                continue
            try:
                out.append(A.parse_formula(span, sublayer=sublayer))
            except A.AnswerFormatError:
                continue
    return out


# yes/no: the verdict's own words, and sentences that state it
_VERDICT_WORDS = {True: r"(?<![=\w])(yes|true)\b", False: r"(?<![=\w])(no|false)\b"}
_STATEMENTS = {
    # "does adding 5 to every feature change RMSNorm's output?" -> yes
    "shift": [r"(output|rmsnorm\(x \+ 5\)|result)s?\s+(changes|is different|differs|will change|does change)",
              r"nothing removes the shift", r"shift (is not|isn't|is never) removed",
              r"rmsnorm does not subtract", r"(shift|constant) (stays|survives|remains)"],
    # "does RMSNorm subtract the mean?" -> no
    "center": [r"(rmsnorm|it) (does not|doesn't|never|does no) (subtract|center|centre|remove)",
               r"\bno centering\b", r"without centering", r"(only|just) (rescales|scales|divides)",
               r"mean (is not|isn't) subtracted", r"not forced to zero"],
    # "does Norm(x) keep x's shape?" -> yes; "does normalization change the shape?" -> no
    "shape": [r"(keeps|preserves|does not change|doesn't change|leaves) (the |its |every )?(shape|layout|axis)",
              r"not the layout", r"shape (stays|is kept|is unchanged|is preserved|is the same)",
              r"same shape", r"\[3, 7, 16\]\s*(->|→)\s*\[3, 7, 16\]"],
}


def states_verdict(text: str, verdict: bool, topic: str) -> str | None:
    low = text.lower()
    both = re.search(_VERDICT_WORDS[True], low) and re.search(_VERDICT_WORDS[False], low)
    for pat in ([] if both else [_VERDICT_WORDS[verdict]]) + _STATEMENTS[topic]:  # "True or False" lists both
        m = re.search(pat, low)
        if m:
            return m.group()
    return None


# --------------------------------------------------------------------------- the questions
# (setting name, grade function of one answer, the right answer, what kind it is, wrong answers,
# the diagnoses these wrong answers must reach). Right answers are derived by hand.

def _mv(x):
    return lambda a: A.check_mean_var(a[0], a[1], x=x)


_SQ5 = math.sqrt(5)
QUESTIONS = [
    # -- the practice assignment's settings (source/practice/grading.py)
    ("practice_mean_var", _mv((1, 3, 5, 7)), (4.0, 5.0), "pair", {1, 3, 5, 7, 4},
     [(16, 5), (4, 20 / 3), (4, 20), (4, 21), (16, 20 / 3), (3, 6), (4, "about five")],
     {"sum_not_mean", "unbiased_variance", "sum_of_squares", "uncentered_variance", "wrong_values", "bad_format"}),
    ("practice_layer_norm", lambda a: A.check_layer_norm_2244(a, x=(1, 3, 5, 7)),
     tuple((v - 4) / _SQ5 for v in (1, 3, 5, 7)), "vector", {1, 3, 5, 7, 4, 0},
     [tuple((v - 4) / math.sqrt(20 / 3) for v in (1, 3, 5, 7)), tuple(v / _SQ5 for v in (1, 3, 5, 7)),
      (-3, -1, 1, 3), tuple(v / math.sqrt(21) for v in (1, 3, 5, 7)), (-0.45, -0.15, 0.15, 0.45),
      (1, 2, 3, 4), (1, 2, 3), "one two"],
     {"unbiased_variance", "not_centered", "not_scaled", "divided_by_variance", "wrong_shape", "bad_format"}),
    ("practice_rms", lambda a: A.check_rms_34(a, x=(5, 12)), math.sqrt(84.5), "number", {5, 12, 2},
     [13, 84.5, 8.5, 13 / 2, 169, 10, "about nine"],
     {"l2_norm_not_rms", "missing_sqrt", "mean_abs_not_rms", "divided_outside_sqrt", "sum_of_squares",
      "wrong_values", "bad_format"}),
    ("practice_subtracts_mean", lambda a: A.check_rms_subtracts_mean(a, ask="shift_changes_output"),
     True, "yes/no shift", set(), [False, "no", "No.", 0], {"subtracts_mean", "bad_format"}),
    ("practice_pre_ln_formula", lambda a: A.check_pre_ln_formula(a, sublayer="ffn"), "H+FFN(Norm(H))", "ffn",
     set(), ["Y = Norm(H + FFN(H))", "Y = Norm(H + F(H))", "H + Norm(FFN(H))", "FFN(Norm(H))",
             "Norm(H) + FFN(Norm(H))", "H + FFN(H)", "H + Norm(FFN(Norm(H)))", "H + Attention(Norm(H))",
             "Norm(H + Attention(H))", "H + Attention(Norm(H)) + FFN(Norm(H + Attention(Norm(H))))",
             "H + Attention(Norm(H)) + FFN(Norm(H))", "H + FFN(Norm(H)", "Y = softmax(H)", "Norm(Norm(H))"],
     {"pre_post_swapped", "norm_on_sublayer_output", "missing_residual", "residual_from_normed", "missing_norm",
      "is_peri_ln", "wrong_values", "whole_block", "mlp_reads_x", "bad_format"}),
    ("practice_shape", lambda a: A.check_norm_changes_shape(a, ask="keeps"), True, "yes/no shape", set(),
     [False, "no", "maybe"], {"says_shape_changes", "bad_format"}),
    ("trace_rms_shape", lambda a: A.check_rms_shape(a, x_shape=(4, 5, 6)), (4, 5, 1), "shape", set(),
     [(4, 5), (4, 5, 6), (1, 5, 6), (4, 1, 6), (6,), "a shape"],
     {"missing_keepdim", "output_shape_not_statistic", "wrong_axis", "wrong_values", "bad_format"}),
    ("retrieval_stats_axis", lambda a: A.check_stats_axis(a, layout="BDT"), (1, -2), "axis BDT", set(),
     [0, -1, 2, -3, "dim=-1", "the last axis", "feature", 5, True],
     {"batch_axis", "sequence_axis", "bad_format"}),
]
# -- the lessons' settings (normref.practice, the seed's numbers), answered as a widget would
QUESTIONS += [
    ("ps_mean_var", lambda a: P.check("ps_mean_var", a), (3.0, 1.0), "pair", {2, 4},
     [(12, 1), (3, 4 / 3), (3, 4), (3, 10), (2, 2), "three, four", "3"],
     {"sum_not_mean", "unbiased_variance", "sum_of_squares", "uncentered_variance", "wrong_values", "bad_format"}),
    ("ps_layernorm", lambda a: P.check("ps_layernorm", a), (-1.0, -1.0, 1.0, 1.0), "vector", {2, 4, 1, 0},
     [(-math.sqrt(3 / 4),) * 2 + (math.sqrt(3 / 4),) * 2, (2 / math.sqrt(10),) * 2 + (4 / math.sqrt(10),) * 2,
      (-0.75, -0.75, 0.75, 0.75), (0.5, 0.5, 1, 1), (1, 2)],
     {"unbiased_variance", "not_centered", "divided_by_variance", "wrong_shape"}),
    ("ps_rms_3_4", lambda a: P.check("ps_rms_3_4", a), math.sqrt(12.5), "number", {3, 4, 2},
     [5, 12.5, 3.5, 2.5, 25, 4, "abc"],
     {"l2_norm_not_rms", "missing_sqrt", "mean_abs_not_rms", "divided_outside_sqrt", "sum_of_squares",
      "wrong_values", "bad_format"}),
    ("ps_rms_subtracts_mean", lambda a: P.check("ps_rms_subtracts_mean", a), False, "yes/no center", set(),
     [0, "Yes", True, "yes"], {"subtracts_mean"}),
    ("ps_pre_ln_formula", lambda a: P.check("ps_pre_ln_formula", a), "X+Attention(Norm(X))", "attention", set(),
     ["Norm(X + Attention(X))", "X + Norm(Attention(X))", "Attention(Norm(X))", "Norm(X) + Attention(Norm(X))",
      "X + Attention(X)", "X + Norm(Attention(Norm(X)))", "X + MLP(Norm(X))", "Norm(X + MLP(X))",
      "X + Attention(Norm(X)) + MLP(Norm(X + Attention(Norm(X))))", "X + Attention(Norm(X)) + MLP(Norm(X))",
      "Norm(Norm(X + Attention(X)) + MLP(Norm(X + Attention(X))))", "X + Attention(Norm(X)) + MLP(X)",
      "Norm(Norm(X))"],
     {"pre_post_swapped", "norm_on_sublayer_output", "missing_residual", "residual_from_normed", "missing_norm",
      "is_peri_ln", "wrong_values", "whole_block", "mlp_reads_x"}),
    ("ps_shape_change", lambda a: P.check("ps_shape_change", a), False, "yes/no shape", set(), [1, 2],
     {"says_shape_changes"}),
    ("trace_rms_shape", lambda a: P.check("trace_rms_shape", a), (2, 3, 1), "shape", set(),
     [(2, 3), (2, 3, 8), (1, 3, 8), (2, 1, 8), (8,)],
     {"missing_keepdim", "output_shape_not_statistic", "wrong_axis", "wrong_values"}),
    ("retrieval_axis", lambda a: P.check("retrieval_axis", a), "feature", "axis BTD", set(),
     [0, 1, "batch", "the sequence axis T: every position of the sequence", "hmm"],
     {"batch_axis", "sequence_axis", "bad_format"}),
]


def _message(result) -> tuple[str, tuple[str, ...], bool]:
    if isinstance(result, P.Feedback):
        return result.message, result.faults, result.correct is True
    return " ".join(result.messages), tuple(result.faults), result.passed


def _given_away(kind: str, right, text: str, givens: set, answer=None) -> str | None:
    """What in ``text`` states the right answer (for a pair, the parts ``answer`` got wrong),
    or None. ``givens``: the numbers the question itself states (its values, d, gamma = 1)."""
    if kind == "pair" and answer is not None and not isinstance(answer, str):
        right = [r for r, a in zip(right, answer) if not (isinstance(a, (int, float)) and abs(a - r) < 5e-3)]
    if kind in ("number", "pair"):
        for v in numbers_in(text, {float(g) for g in givens}):
            for r in np.atleast_1d(right):
                if abs(v - r) <= 5e-3 * max(1.0, abs(r)):
                    return f"the number {v:g}"
    if kind == "vector":
        for t in tuples_in(text):
            if len(t) == len(right) and np.allclose(t, right, atol=5e-3):
                return f"the vector {t}"
        for v in numbers_in(text, {float(g) for g in givens}):
            if any(abs(v - r) <= 5e-3 for r in right if abs(r) not in givens):
                return f"an entry {v:g}"
    if kind == "shape":
        for t in tuples_in(text):
            if t == tuple(float(v) for v in right):
                return f"the shape {t}"
    if kind.startswith("yes/no"):
        return states_verdict(text, right, kind.split()[1])
    if kind in ("attention", "ffn"):
        for canon in formulas_in(text, kind):
            if canon in _PRE_LN:
                return f"the formula {canon}"
    if kind == "axis BDT":
        m = re.search(r"\b(axis|dim)\s*=?\s*(1|-2)\b|\baxis number (1|-2)\b", text)
        if m:
            return m.group()
    if kind == "axis BTD":
        m = re.search(r"feature axis|\bd features\b|dim=-1|axis=-1|last axis|\baxis d\b", text.lower())
        if m:
            return m.group()
    return None


@pytest.mark.parametrize("setting, grade, right, kind, givens, wrong, faults", QUESTIONS,
                         ids=[q[0] + ("-lesson" if i >= 8 else "") for i, q in enumerate(QUESTIONS)])
def test_no_wrong_answer_is_told_the_right_one(setting, grade, right, kind, givens, wrong, faults):
    P.reset()
    seen = set()
    for answer in wrong:
        text, found, ok = _message(grade(answer))
        assert not ok, (setting, answer)
        seen |= set(found)
        leak = _given_away(kind, right, text, givens, answer)
        assert leak is None, f"{setting}: the answer {answer!r} is told {leak}: {text!r}"
    assert seen == faults, (setting, seen ^ faults)  # every diagnosis the checker has was reached


# the detectors themselves find what they are meant to find (a test of the test)
@pytest.mark.parametrize("kind, right, text, givens", [
    ("pair", (4.0, 5.0), "divide the sum of squares by d: 20/4.", {1, 3, 5, 7}),
    ("pair", (4.0, 5.0), "add them: (1 + 3 + 5 + 7) / 4", {1, 3, 5, 7}),
    ("number", math.sqrt(84.5), "RMS = sqrt((25 + 144) / 2)", {5, 12}),
    ("number", math.sqrt(84.5), "the RMS is 9.19", {5, 12}),
    ("vector", tuple((v - 4) / _SQ5 for v in (1, 3, 5, 7)), "it is (-1.342, -0.447, 0.447, 1.342)", set()),
    ("shape", (4, 5, 1), "rms has shape [4, 5, 1]", set()),
    ("yes/no shift", True, "Nothing removes the shift, so RMSNorm's output changes.", set()),
    ("yes/no center", False, "RMSNorm does not subtract the mean: it only rescales.", set()),
    ("yes/no shape", True, "normalization changes values, not the layout", set()),
    ("ffn", None, "Pre-LN is x + F(Norm(x)) (normalize the sublayer's input)", set()),
    ("attention", None, "that is the other placement: Pre-LN is X + Attention(Norm(X)).", set()),
    ("axis BDT", None, "the features are axis 1 here", set()),
])
def test_the_leak_detectors_see_a_stated_answer(kind, right, text, givens):
    assert _given_away(kind, right, text, givens) is not None


def test_the_leak_detectors_let_principles_through():
    assert _given_away("pair", (4.0, 5.0), "add the 4 values and divide by how many there are; "
                       "did you divide by n-1?", {1, 3, 5, 7, 4}) is None
    assert _given_away("pair", (3.0, 1.0), "did you divide by n-1 (unbiased variance) instead of n?", {2, 4}) is None
    assert _given_away("yes/no shift", True, A.check_rms_subtracts_mean(False, ask="shift_changes_output")
                       .messages[0], set()) is None


# --------------------------------------------------------------------------- item 3: one Pre-LN block
# The quiz's forms, each with what it is in the course's own terms. The block checker
# (normref.checks.block) is the authority on the whole block: the sequential form is its
# reference, the parallel form its mlp_reads_x. The single-sublayer forms are checked against
# normref.checks.placement's check_pre_ln (the Pre-LN sublayer, x + F(Norm(x))).
QUIZ_FORMS = [  # (formula, what the quiz must say: None = correct, else its fault kind and words)
    ("Y = X + Attention(Norm(X))", None, None),
    ("Attention(LN(X)) + X", None, None),
    ("X + Attention(Norm(X)) + MLP(Norm(X + Attention(Norm(X))))", "whole_block", "the whole Pre-LN block"),
    ("X + Attention(Norm(X)) + MLP(Norm(Attention(Norm(X)) + X))", "whole_block", "the whole Pre-LN block"),
    ("X + Attention(Norm(X)) + MLP(Norm(X))", "mlp_reads_x", "parallel block"),
    ("MLP(Norm(X)) + X + Attention(Norm(X))", "mlp_reads_x", "parallel block"),
    ("Norm(X + Attention(X))", "pre_post_swapped", "Post-LN"),
    ("X + MLP(Norm(X))", "wrong_values", "this question's sublayer is attention"),
]


def _block_class(canon: str):
    """A MiniMind-style block whose forward computes ``canon`` (X the input, A self_attn, W mlp,
    the norm inside A(...) input_layernorm, inside W(...) post_attention_layernorm), built from
    the course's handed-out sublayers and a hand-written RMSNorm."""
    import torch
    from torch import nn

    from normref import CausalSelfAttention, FeedForward

    expr = canon.replace("A(N(", "A(N1(").replace("W(N(", "W(N2(")
    assert "N(" not in expr, canon  # every norm sits right inside a sublayer in these forms
    wiring = eval("lambda X, A, W, N1, N2: " + expr)  # noqa: S307 - the test's own canonical string

    class Norm(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    class Block(nn.Module):
        def __init__(self, dim, n_heads):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = Norm(dim), Norm(dim)
            self.self_attn, self.mlp = CausalSelfAttention(dim, n_heads), FeedForward(dim)

        def forward(self, x):
            return wiring(x, self.self_attn, self.mlp, self.input_layernorm, self.post_attention_layernorm)

    return Block


def _sublayer_fn(canon: str):
    """``fn(x, sublayer, norm)`` computing a one-sublayer ``canon`` (for check_pre_ln)."""
    wiring = eval("lambda X, A, N: " + canon)  # noqa: S307
    return lambda x, sublayer, norm: wiring(x, sublayer, norm)


@pytest.mark.parametrize("formula, fault, words", QUIZ_FORMS, ids=[f for f, _, _ in QUIZ_FORMS])
def test_the_quiz_the_api_and_the_block_checker_agree_on_each_form(formula, fault, words):
    from normref import check_pre_ln, check_pre_ln_block

    P.reset()
    api = P.check("ps_pre_ln_formula", formula)
    quiz = P.quiz("ps_pre_ln_formula")
    quiz.answer.check(formula)  # what the form's Check button (or Enter) does with the box's text
    shown = quiz.feedback.value
    assert api.correct is (fault is None), api
    assert ("✔ correct" in shown) is (fault is None) and ("✘ not yet" in shown) is (fault is not None), shown
    if fault is not None:
        assert api.faults == (fault,) and words in api.message, api
        assert html_text(shown).endswith(api.message), (shown, api.message)
    canon = A.parse_formula(formula)
    if "W" in canon and "A" in canon:  # both sublayers: the block checker's verdict on that wiring
        block = check_pre_ln_block(_block_class(canon))
        if fault == "whole_block":  # the whole Pre-LN block: exactly the block checker's block
            assert block.passed, block.report()
        else:  # the parallel block: the block checker's mlp_reads_x
            assert not block.passed and "mlp_reads_x" in block.faults, block.report()
    elif "W" not in canon:  # one sublayer: the placement checker's Pre-LN
        placement = check_pre_ln(_sublayer_fn(canon))
        assert placement.passed is (fault is None), placement.report()


def html_text(markup: str) -> str:
    import html as _html

    return _html.unescape(re.sub(r"<[^>]+>", "", markup))


def test_the_widget_checks_the_text_it_shows_and_clears_stale_feedback():
    """The browser once showed "✔ correct" under the parallel form: the widget's feedback now
    names the answer it judged, so feedback left from an earlier attempt cannot pass for it."""
    P.reset()
    quiz = P.quiz("ps_pre_ln_formula")
    quiz.answer.check("X + Attention(Norm(X))")
    assert "✔ correct" in quiz.feedback.value
    quiz.answer.check("X + Attention(Norm(X)) + MLP(Norm(X))")
    text = html_text(quiz.feedback.value)
    assert "✘ not yet" in text and "✔" not in text and "parallel block" in text
    assert "X + Attention(Norm(X)) + MLP(Norm(X))" in text  # the answer judged, as typed
