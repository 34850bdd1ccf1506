"""The ``batchnorm`` assignment (issue 32 item 6) told what each wrong answer computes (issue 31):
every wrong variant of its answer bank (source/batchnorm/answer_bank.py) fails with a message that
states the difference its code makes, measured by the shared diagnosis from what the question
declares (a mask, running averages, a flag), never by its name; each claim is also checked here
by running the variant's code directly against BatchNorm computed by hand (numpy, float64).
The reference written by hand in grading.py agrees with the checker's expected values (torch's
BatchNorm on the real tokens), and every variant scores the bank's points on the public battery
and on drawn ones.
"""
from __future__ import annotations

import functools
import re

import numpy as np
import pytest
import torch

from grader.scoring.batteries import question_generator
from grader.scoring.questions import assignment_module, assignments

SEEDS = (0, 1, 2)  # drawn batteries the messages are read on (points: also 3, 4, 5)
POINTS_SEEDS = (0, 1, 2, 3, 4, 5)


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _assignment():
    return assignments()["batchnorm"]


def _chk():
    return assignment_module("batchnorm", "batchnorm_check")


@functools.lru_cache(maxsize=None)
def _answer(variant: str):
    ns = {"torch": torch}
    stub = 'def batch_norm(*a, **k):\n    raise NotImplementedError("replace this line with your code")'
    src = _assignment().answers[variant].get("batch_norm_impl", stub)
    exec(src, ns)  # noqa: S102 - the answer bank's own code
    return ns["batch_norm"]


def _battery(seed: int | None) -> list:
    if seed is None:
        return _chk().public_battery()
    return _assignment().module.draw_batchnorm_battery(question_generator(seed, "batch_norm_battery"))


@functools.lru_cache(maxsize=None)
def _run(variant: str, seed: int | None):
    """``(cases, CheckResult)`` of one variant on the public battery (None) or a drawn one."""
    cases = _battery(seed)
    return cases, _chk().check_batch_norm(_answer(variant), cases=cases)


def _np(t) -> np.ndarray:
    return t.detach().double().numpy()


def _real(case) -> np.ndarray:
    """``[B, T]`` bool: the case's real tokens."""
    return np.ones(case.x.shape[:2], bool) if case.mask is None else case.mask.numpy().astype(bool)


def _by_hand(case):
    """BatchNorm by hand (Ioffe and Szegedy, Algorithm 1 and section 3.1), float64: ``(y, mean,
    biased variance, n)`` over the real tokens in training, the running averages in evaluation."""
    x, real = _np(case.x), _real(case)
    rows = x[real]  # [N, D]
    n = rows.shape[0]
    if case.training:
        mean, var = rows.mean(0), rows.var(0)
    else:
        mean, var = _np(case.running_mean), _np(case.running_var)
    y = (x - mean) / np.sqrt(var + case.eps) * _np(case.weight) + _np(case.bias)
    return y * real[..., None], rows.mean(0), rows.var(0), n


def _call(variant: str, case, **change):
    args, kw = case.call()
    x = change.pop("x", args[0])
    kw.update(change)
    return tuple(_np(o) for o in _answer(variant)(x, *args[1:], **kw))


# ------------------------------------------------------------------ what each variant's code does


def _witness(variant: str, case) -> bool:
    """Whether the claim its message makes holds of the variant's code on ``case``, by calling it
    (True where the variant's claim does not concern this case)."""
    real = _real(case)
    m = case.momentum
    rm, rv = _np(case.running_mean), _np(case.running_var)
    y_ref, mean, bvar, n = _by_hand(case)
    if variant == "ignores_mask":  # moving the padded values moves the real outputs
        x2 = case.x.clone()
        x2[torch.as_tensor(~real)] += 7.0
        return not np.allclose(_call(variant, case)[0][real], _call(variant, case, x=x2)[0][real], atol=1e-4)
    if variant == "per_token_stats":  # one element moves that token's features only, BatchNorm's a feature
        x2 = case.x.clone().float()
        x2[0, 0, 0] += 1 + abs(float(x2[0, 0, 0]))
        moved = np.abs(_call(variant, case, x=x2)[0] - _call(variant, case, x=case.x.float())[0]) > 1e-4
        want = np.zeros_like(moved)
        want[0, 0, :] = True
        return np.array_equal(moved, want)
    if variant == "biased_running_var":  # the biased variance averaged in
        return np.allclose(_call(variant, case)[2], (1 - m) * rv + m * bvar, rtol=1e-4)
    if variant == "momentum_reversed":  # momentum weighs the old averages
        _, new_mean, new_var = _call(variant, case)
        return np.allclose(new_mean, m * rm + (1 - m) * mean, rtol=1e-4, atol=1e-4) and \
            np.allclose(new_var, m * rv + (1 - m) * bvar * n / (n - 1), rtol=1e-4)
    if variant == "eval_uses_batch_stats":  # evaluation normalises with the batch's statistics
        x, w, b = _np(case.x), _np(case.weight), _np(case.bias)
        batch = (x - mean) / np.sqrt(bvar + case.eps) * w + b
        return np.allclose(_call(variant, case)[0], batch, rtol=1e-4, atol=1e-4)
    if variant == "padding_not_zeroed":  # right at the real tokens, not 0 at the padded ones
        y = _call(variant, case)[0]
        return np.allclose(y[real], y_ref[real], rtol=1e-4, atol=1e-4) and np.all(np.abs(y[~real]) > 1e-3)
    if variant == "stats_in_float16":  # right on the same values in float32
        return np.allclose(_call(variant, case, x=case.x.float())[0], y_ref, rtol=1e-3, atol=1e-3)
    return True


def _phrases(variant: str, case) -> list[str]:
    """What the message of a failing case of ``variant`` must say, with the case's own numbers
    (derived here from the case, not from the diagnosis)."""
    m, real = case.momentum, _real(case)
    n = int(real.sum())
    if variant == "ignores_mask":
        return ["changing the padded tokens' values (mask False) changes your y at the real tokens: the padding "
                "enters your statistics, where BatchNorm's y at the real tokens does not depend on it"]
    if variant == "per_token_stats":
        return ["moving one element, x[0, 0, 0], changes your y at every feature of that token, where BatchNorm's y "
                "changes at feature 0 of every real token: your statistics are taken over one token's features, "
                "BatchNorm's over every real token of the batch"]
    if variant == "biased_running_var":
        return [f"your new_running_var is {1 - m:.4g} * running_var + {m:.4g} * the batch's variance divided by n = "
                f"{n} (biased), where BatchNorm's is {1 - m:.4g} * running_var + {m:.4g} * the batch's variance "
                f"divided by n - 1 = {n - 1} (unbiased): BatchNorm's statistic is yours times {n / (n - 1):.4g} = "
                f"{n}/{n - 1}"]
    if variant == "momentum_reversed":
        return [f"your new_running_mean is {m:.4g} * running_mean + {1 - m:.4g} * the batch's mean, where "
                f"BatchNorm's is {1 - m:.4g} * running_mean + {m:.4g} * the batch's mean: the two weights are "
                f"swapped (BatchNorm gives the new statistic the weight momentum = {m:g}, running_mean the rest)"]
    if variant == "eval_uses_batch_stats":
        return ["your y with training=False is BatchNorm's y with training=True",
                "changing running_mean or running_var does not change your y: yours uses neither"]
    if variant == "padding_not_zeroed":
        return ["your y differs from BatchNorm's only at the padded positions (mask False)", "BatchNorm's is 0."]
    if variant == "stats_in_float16":
        x = _np(case.x)
        sq = float(np.max((x - x[real].mean(0)) ** 2))
        assert sq > 65504, "the float16 case's squares overflow float16 (the battery's promise)"
        return ["on the same values in float32 your y is right, so the float16 computation is what fails: squaring "
                f"overflows float16, whose largest number is 65504: (x - mean)**2, the mean over every real token of "
                f"the batch, reaches {sq:.6g}"]
    return []


_HEAD = re.compile(r"^case '.*?': (y|new_running_mean|new_running_var): max abs error [^;]*; (.*)$", re.S)
_WRONG = ("ignores_mask", "per_token_stats", "biased_running_var", "eval_uses_batch_stats", "padding_not_zeroed",
          "momentum_reversed", "stats_in_float16")


@pytest.mark.parametrize("seed", (None, *SEEDS), ids=["public", *(f"drawn{s}" for s in SEEDS)])
@pytest.mark.parametrize("variant", _WRONG)
def test_each_wrong_variant_is_told_its_measured_difference(variant, seed):
    """Every failing case that returned a value: its message is about the output it failed on
    (the first "your <output>" of the measured text), says the variant's difference in the
    case's own numbers, and that difference holds of the variant's code on that case."""
    cases, r = _run(variant, seed)
    failing = [(c, res) for c, res in zip(cases, r.cases) if not res.passed and res.observed is not None]
    assert failing, r.report()
    for case, res in failing:
        m = _HEAD.match(res.message)
        assert m, res.message
        label, said = m.groups()
        assert not said.rstrip().endswith("the values differ from the reference."), res.message
        first = re.search(r"your (y|new_running_mean|new_running_var)\b", said)
        assert first and first.group(1) == label, res.message
        for phrase in _phrases(variant, case):
            assert phrase in res.message, (phrase, res.message)
        assert _witness(variant, case), (variant, case.name)


def test_the_messages_before_the_shared_diagnosis_knew_batchnorm_are_gone():
    """The weak or wrong sentences of the per-token diagnosis are not said of BatchNorm: a
    running average's failure told of another output, per-token RMS as the whole story."""
    for variant in _WRONG:
        for seed in (None, *SEEDS):
            for res in _run(variant, seed)[1].cases:
                m = _HEAD.match(res.message)
                if m is None:
                    continue
                label, said = m.groups()
                other = re.findall(r"where your (\w+) and the reference's differ most", said)
                assert all(o == label for o in other), res.message
                assert "span only the d features of one token" not in said, res.message


@pytest.mark.parametrize("variant", ("blank", "partial", "no_value_error"))
def test_the_variants_that_raise_or_refuse_keep_their_messages(variant):
    _, r = _run(variant, None)
    bad = [c for c in r.cases if not c.passed]
    assert bad
    for c in bad:
        assert ("raised NotImplementedError" in c.message or
                "returned a value for one real token in training" in c.message), c.message


# ------------------------------------------------------------------ points and reference


@pytest.mark.parametrize("variant", sorted(_assignment().answers))
def test_each_variant_scores_the_banks_points_public_and_drawn(variant):
    want = _assignment().expected[variant]
    quick = _chk().check_batch_norm(_answer(variant), quick=True)
    assert float(quick.passed) == want["batch_norm_quick"], quick.report()
    for seed in (None, *POINTS_SEEDS):
        r = _run(variant, seed)[1] if seed in (None, *SEEDS) else \
            _chk().check_batch_norm(_answer(variant), cases=_battery(seed))
        assert round(4 * r.score, 2) == want["batch_norm_battery"], (seed, r.report())


def test_the_reference_by_hand_agrees_with_the_checkers_expected_values():
    """grading.py's batch_norm_reference against the checker's expected (torch's BatchNorm on the
    real tokens) and against BatchNorm by hand here, on 12 drawn batteries: the same values and
    dtypes, and both refuse one real token in training."""
    reference = _assignment().module.batch_norm_reference
    chk = _chk()
    compared = refused = 0
    for seed in range(12):
        for case in _assignment().module.draw_batchnorm_battery(question_generator(seed, "reference")):
            args, kw = case.call()
            try:
                want = chk.expected(case)
            except ValueError:
                with pytest.raises(ValueError):
                    reference(*args, **kw)
                refused += 1
                continue
            got = reference(*args, **kw)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape, case.name
                assert torch.allclose(g.double(), w.double(), rtol=2e-3, atol=2e-3), case.name
            if case.x.dtype == torch.float32:
                y, mean, bvar, n = _by_hand(case)
                assert np.allclose(_np(got[0]), y, rtol=1e-4, atol=1e-4), case.name
                if case.training:
                    m = case.momentum
                    assert np.allclose(_np(got[1]), (1 - m) * _np(case.running_mean) + m * mean, atol=1e-5)
                    assert np.allclose(_np(got[2]), (1 - m) * _np(case.running_var) + m * bvar * n / (n - 1),
                                       rtol=1e-5)
            compared += 1
    assert compared == 12 * 6 and refused == 12


@pytest.mark.parametrize("variant", _WRONG)
def test_grading_replays_the_same_messages(variant):
    """The probes are chosen from the battery alone: grading's kernel makes the same calls and the
    grader's replay gives the same messages as the self-check."""
    from grader.scoring.replay import Replay
    from normref.handback import probe, run_calls

    chk = _chk()
    _, r = _run(variant, None)
    g = chk.check_batch_norm(Replay(run_calls(_answer(variant), probe(chk.check_batch_norm))))
    assert [c.message for c in g.cases] == [c.message for c in r.cases]


def test_an_answer_that_always_refuses_earns_no_refusal_case_in_the_notebook_or_in_grading():
    """Refusing one real token is right; refusing everything is not (the red team's
    always_valueerror earned 0.57 of 5): the refusal case first calls the same input with every
    token real, whatever the answer does, so grading plans that call too and says the same."""
    from grader.scoring.replay import Replay
    from normref.handback import probe, run_calls

    chk = _chk()

    def always(*args, **kwargs):
        raise ValueError("no")

    mine = chk.check_batch_norm(always)
    graded = chk.check_batch_norm(Replay(run_calls(always, probe(chk.check_batch_norm))))
    assert mine.score == graded.score == 0.0
    (refusal,) = [c for c in mine.cases if "one real token" in c.name]
    assert "also with every token real (2 of them)" in refusal.message
    assert [c.message for c in graded.cases] == [c.message for c in mine.cases]
    assert chk.check_batch_norm(_answer("correct")).score == 1.0


# ------------------------------------------------------------------ the shared mechanisms, by hand


def test_moved_sets_are_said_as_the_part_of_the_output_they_are():
    from normref.diagnosis.spans import moved_words, span_words

    token = np.zeros((2, 3, 4), bool)
    token[0, 0, :] = True
    feature = np.zeros((2, 3, 4), bool)
    feature[:, :, 0] = True
    sequence = np.zeros((2, 3, 4), bool)
    sequence[0, :, 0] = True
    one = np.zeros((2, 3, 4), bool)
    one[0, 0, 0] = True
    real = np.ones((2, 3), bool)
    assert moved_words(token) == "every feature of that token" and span_words(token) == "one token's features"
    assert moved_words(feature, real) == "feature 0 of every real token"
    assert span_words(feature, real) == "every real token of the batch"
    assert moved_words(feature) == "feature 0 of every token of the batch"
    assert moved_words(sequence) == "feature 0 of every token of that sequence"
    assert span_words(sequence) == "the tokens of one sequence"
    assert moved_words(one) == "only that element" and span_words(one) is None
    padded = feature.copy()
    padded[1, 2, 0] = False  # the reference leaves a padded token at 0
    real[1, 2] = False
    assert moved_words(padded, real) == "feature 0 of every real token"


def test_a_running_average_is_fitted_to_its_weights_and_statistic():
    from normref.diagnosis.declared import fit_average

    rng = np.random.default_rng(0)
    old, s = rng.normal(size=6), rng.normal(size=6) ** 2 + 1
    cands = [("the biased one", s), ("the unbiased one", s * 6 / 5)]
    a, b, words, _ = fit_average(0.9 * old + 0.1 * s, old, cands)
    assert (round(a, 6), round(b, 6), words) == (0.9, 0.1, "the biased one")
    a, b, words, _ = fit_average(0.1 * old + 0.9 * s * 6 / 5, old, cands)
    assert (round(a, 6), round(b, 6), words) == (0.1, 0.9, "the unbiased one")
    a, c, words, _ = fit_average(0.9 * old + 0.25, old, cands)  # one number for every feature
    assert (round(a, 6), round(c, 6), words) == (0.9, 0.25, None)
    assert fit_average(old ** 3, old, cands) is None
