"""The held-out corpus (issue 31 item 5) through the public checkers a student calls.

`tests/corpus/heldout.py` was written, and committed, by an author who had not read the checkers,
before any of its answers ran through them. What must hold: every correct answer passes (full
battery and quick check: a failure is a false accusation); every wrong answer fails; every
failing case of a wrong answer that returned a value names a difference (never only "the values
differ from the reference" or an unexplained number; the rule is `heldout_figures.is_bare`); no
statement the author judged untrue of their code appears; where the author found a true message
imprecise (the symptom, not the cause), the cause is named. tests/corpus/HELDOUT.md has the
figures and the verdict of every answer.
"""
import functools

import pytest

import normref
from corpus.heldout import CORRECT, WRONG
from corpus.heldout_figures import CHECKS, UNTRUE, is_bare, run

QUESTIONS = set(CHECKS)


@functools.cache
def outcome(name):
    answer = next(a for a in (*WRONG, *CORRECT) if a.name == name)
    return run(answer)


def _names(answers):
    return [a.name for a in answers]


def test_corpus_covers_every_question():
    assert len(WRONG) >= 45 and len(CORRECT) >= 12
    assert {a.question for a in WRONG} == QUESTIONS
    assert {a.question for a in CORRECT} == QUESTIONS
    names = [a.name for a in (*WRONG, *CORRECT)]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("name", _names(CORRECT))
def test_correct_answer_passes(name):
    o = outcome(name)
    assert o.passed and o.quick_passed and o.score == 1.0, f"false accusation of {name}:\n{o.report}"
    assert not o.breaches, o.breaches
    if o.answer.question == "layer_norm":  # lesson 01's own call, without the "numpy" flavour
        assert normref.check_layer_norm(o.answer.code, quick=True).passed


@pytest.mark.parametrize("name", _names(WRONG))
def test_wrong_answer_fails(name):
    o = outcome(name)
    assert not o.passed and o.score < 1.0, f"{name} ({o.answer.what}) passed:\n{o.report}"


@pytest.mark.parametrize("name", _names(WRONG))
def test_wrong_answer_is_named(name):
    o = outcome(name)
    assert o.cases, o.report
    assert not o.bare_cases, "bare: " + "\n".join(message for _, _, message in o.bare_cases)


@pytest.mark.parametrize("name,needle", [(name, needle) for name, needles in UNTRUE.items() for needle in needles])
def test_no_untrue_statement(name, needle):
    o = outcome(name)
    assert not [m for _, _, m in o.cases if needle in m], o.report


# What each answer the author judged true but imprecise (HELDOUT.md) is told now: its cause.
PRECISE = {
    "lnb_ddof1": ["as if you divided the sum of squares by n-1 (the unbiased variance) instead of n"],
    "lnb_var_term_sum": ["= d times the true one: a sum over the d features where a mean belongs"],
    "rms_weight_after_cast": ["multiplying by the float32 weight makes it float32 again: apply the weight before "
                              "casting back with .to(x.dtype)"],
    # the self-check measures it ("your dweight is the sum over the tokens of dy * x, the raw input"), the
    # grader's grammar (registered where grader.backward was imported) names it ("you summed dy * x ...")
    "lnb_dweight_raw_x": ["dy * x", "the raw input"],
}


@pytest.mark.parametrize("name", sorted(PRECISE))
def test_the_cause_is_named_where_the_author_found_only_the_symptom(name):
    o = outcome(name)
    valued = [m for _, kind, m in o.cases if kind != "raised"]
    assert valued, o.report
    for m in valued:
        assert all(words in m for words in PRECISE[name]), m
        assert "missing or wrong" not in m and "the output dtype must be the input dtype" not in m, m


@pytest.mark.parametrize("text,bare", [
    ("the values differ from the reference.", True),
    ("your dweight is the true one times -0.8165.", True),
    ("where they differ most, at (13,), yours is 0.002379 and the reference's 0.2246.", True),
    ("where your dweight and the reference's differ most, at (3,), yours is 0.002379 and the reference's 0.2246.",
     True),
    ("", True),
    ("eps belongs inside the square root: sqrt(var + eps), not sqrt(var) + eps.", False),
    ("your dbias is the true one times 0.1667 = 1/6 = 1/(number of tokens): you averaged over the tokens", False),
    ("values right but dtype float32, expected float16; the output dtype must be the input dtype", False),
])
def test_bare_rule(text, bare):
    """The hand-checkable rule itself, on messages of the kinds the checkers write."""
    assert is_bare(text) is bare
