"""The held-out corpus (issue 31 item 5) through the public checkers a student calls.

`tests/corpus/heldout.py` was written, and committed, by an author who had not read the checkers,
before any of its answers ran through them. What must hold: every correct answer passes (full
battery and quick check: a failure is a false accusation); every wrong answer fails; every
failing case of a wrong answer that returned a value names a difference (never only "the values
differ from the reference" or an unexplained number; the rule is `heldout_figures.is_bare`); no
statement the author judged untrue of their code appears. The entries the course does not meet
today are marked xfail with the reason, so the report lists them; tests/corpus/HELDOUT.md has the
figures and the verdict of every answer.
"""
import functools

import pytest

import normref
from corpus.heldout import CORRECT, WRONG
from corpus.heldout_figures import CHECKS, UNTRUE, is_bare, run

QUESTIONS = set(CHECKS)

# Wrong answers with a failing case whose message is bare today (measured; see HELDOUT.md).
BARE_TODAY = {
    "lnb_dweight_raw_x": "a wrong dweight that is no constant factor of the true one: the seed case says only "
                         "'your dweight is the true one times -0.8165', the tiny-values case only where the "
                         "concatenated (dx, dweight, dbias) differ most, at an index dweight does not have",
    "blk_mlp_first": "feed-forward before attention is traced on known submodules, but on the student's own "
                     "modules the case says only 'the values differ from the reference'",
}


@functools.cache
def outcome(name):
    answer = next(a for a in (*WRONG, *CORRECT) if a.name == name)
    return run(answer)


def _names(answers, xfail=None):
    xfail = xfail or {}
    return [pytest.param(a.name, marks=pytest.mark.xfail(reason=xfail[a.name], strict=False))
            if a.name in xfail else a.name for a in answers]


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


@pytest.mark.parametrize("name", _names(WRONG, BARE_TODAY))
def test_wrong_answer_is_named(name):
    o = outcome(name)
    assert o.cases, o.report
    assert not o.bare_cases, "bare: " + "\n".join(message for _, _, message in o.bare_cases)


@pytest.mark.parametrize("name,needle", [
    pytest.param(name, needle, marks=pytest.mark.xfail(
        reason="judged untrue of the code by the corpus's author (HELDOUT.md)", strict=False))
    for name, needles in UNTRUE.items() for needle in needles])
def test_no_untrue_statement(name, needle):
    o = outcome(name)
    assert not [m for _, _, m in o.cases if needle in m], o.report


@pytest.mark.parametrize("text,bare", [
    ("the values differ from the reference.", True),
    ("your dweight is the true one times -0.8165.", True),
    ("where they differ most, at (13,), yours is 0.002379 and the reference's 0.2246.", True),
    ("", True),
    ("eps belongs inside the square root: sqrt(var + eps), not sqrt(var) + eps.", False),
    ("your dbias is the true one times 0.1667 = 1/6 = 1/(number of tokens): you averaged over the tokens", False),
    ("values right but dtype float32, expected float16; the output dtype must be the input dtype", False),
])
def test_bare_rule(text, bare):
    """The hand-checkable rule itself, on messages of the kinds the checkers write."""
    assert is_bare(text) is bare
