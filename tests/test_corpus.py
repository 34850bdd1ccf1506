"""Issue 31 item 5: the held-out corpus (tests/corpus/wrong_answers.py, written before the
mechanisms) through the checkers: every wrong answer fails and names, on every failing case that
returned a value, a measured difference, in the self-check and as grading replays the hand-back;
every correct answer written unusually passes with nothing to diagnose."""
from __future__ import annotations

import pytest
import torch

from corpus.figures import FUNCTIONS, check, graded, how_named
from corpus.wrong_answers import CORRECT, WRONG


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("answer", WRONG, ids=[a.name for a in WRONG])
def test_every_wrong_answer_is_told_what_it_computes(answer):
    r = check(answer.question, answer.code)
    assert not r.passed, r.report()
    assert how_named(r) != "bare", r.report()
    if answer.question in FUNCTIONS:
        g = graded(answer.question, answer.code)
        assert not g.passed and how_named(g) != "bare", g.report()
        assert g.score == r.score


@pytest.mark.parametrize("answer", CORRECT, ids=[a.name for a in CORRECT])
def test_every_correct_answer_written_unusually_passes(answer):
    r = check(answer.question, answer.code)
    assert r.passed and r.score == 1.0 and not r.faults, r.report()
