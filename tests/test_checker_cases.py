"""Checkers take their cases (issue 24): every checker runs the battery it is given (``cases=``;
``None``: its public one), and every battery, public or drawn for grading, draws from a generator
of its own: nothing patches a checker's module and nothing reads or reseeds torch's or numpy's
global RNG, so two checks (two scorings) in one process never meet."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import normref
from grader.scoring import inputs as scoring
from grader.scoring.batteries import draw_norm_battery, question_generator
from normref.checks import backward, block, modern, module, norms, placement
from normref.checks.core import seeded_module

REPO = Path(__file__).resolve().parents[1]


def honest_rms_norm(x, weight, eps=1e-6):
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)


def honest_layer_norm(x, weight, bias, eps=1e-5):
    h = x.astype(np.float64)
    m = h.mean(-1, keepdims=True)
    return ((h - m) / np.sqrt(((h - m) ** 2).mean(-1, keepdims=True) + eps) * weight + bias).astype(x.dtype)


def test_seeded_module_builds_what_manual_seed_builds_and_leaves_the_global_rng_alone():
    """Three sublayers drawn in turn from one generator seeded 19 are, weight for weight, the ones
    torch builds in turn after ``torch.manual_seed(19)`` (its own default init), and the global
    RNG's state is the same before and after."""
    before = torch.random.get_rng_state()
    g = torch.Generator().manual_seed(19)
    mine = [seeded_module(g, normref.CausalSelfAttention, 8, 2), seeded_module(g, normref.FeedForward, 8, 16),
            seeded_module(g, torch.nn.Linear, 5, 3)]
    assert torch.equal(torch.random.get_rng_state(), before)
    torch.manual_seed(19)
    torchs = [normref.CausalSelfAttention(8, 2), normref.FeedForward(8, 16), torch.nn.Linear(5, 3)]
    for a, b in zip(mine, torchs):
        assert list(a.state_dict()) == list(b.state_dict())
        assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in b.state_dict())
        assert all(p.requires_grad for p in a.parameters()) and next(a.parameters()).device.type == "cpu"
    with pytest.raises(ValueError, match="q_norm has weight outside an nn.Linear"):
        seeded_module(g, normref.CausalSelfAttention, 8, 2, qk_norm="rms")  # its norms' init is not known here


def _public(kind: str):
    return {"rms": lambda: norms.battery("rms", "torch"), "layer": lambda: norms.battery("layer", "numpy"),
            "module": module._module_battery, "placement": placement._placement_battery,
            "block": block._block_battery, "backward": backward._backward_battery,
            "peri": modern._peri_battery, "qk": modern._qk_battery, "dyt": modern._dyt_battery}[kind]()


CHECKERS = [  # (checker, an honest (or reference) answer, its public battery, arguments after the answer)
    (normref.check_rms_norm, honest_rms_norm, "rms", ()),
    (normref.check_layer_norm, honest_layer_norm, "layer", ("numpy",)),
    (normref.check_rms_norm_module, normref.RMSNorm, "module", ()),
    (normref.check_pre_ln, normref.pre_ln, "placement", ()),
    (normref.check_post_ln, normref.post_ln, "placement", ()),
    (normref.check_pre_ln_block, normref.TransformerBlock, "block", ()),
    (normref.check_layer_norm_backward, normref.backward.layer_norm_grads, "backward", ()),
    (normref.check_peri_ln, normref.peri_ln, "peri", ()),
    (normref.check_qk_norm_logits, normref.qk_norm_logits, "qk", ()),
    (normref.check_dyt, normref.dyt, "dyt", ()),
]


@pytest.mark.parametrize("checker, answer, kind, args", CHECKERS, ids=[c[0].__name__ for c in CHECKERS])
def test_every_checker_runs_the_cases_it_is_given(checker, answer, kind, args):
    """Given three of its public cases in reverse order, a checker runs those three, in that
    order (quick: the first two of them), and an honest answer passes each; without ``cases``
    it runs its public battery."""
    public = _public(kind)
    given = public[::-1][:3]
    r = checker(answer, *args, cases=given)
    assert [c.name for c in r.cases] == [c.name for c in given]
    assert all(c.passed for c in r.cases), r.report()
    assert [c.name for c in checker(answer, *args, quick=True, cases=given).cases] == [c.name for c in given[:2]]
    assert [c.name for c in checker(answer, *args).cases] == [c.name for c in public]


def test_a_drawn_battery_is_an_argument_and_its_mistakes_are_named_on_it():
    """Grading's drawn RMSNorm battery, handed to the checker: the n-1 RMS (which is no
    statistic of RMSNorm's, so every case is wrong by the factor sqrt(n/(n-1)) or raises on a
    one-element row) fails every drawn case, by name, and an honest answer passes them all."""
    drawn = draw_norm_battery("rms", "torch", question_generator(5, "rms_norm_battery"))
    assert [c.name for c in drawn] != [c.name for c in norms.battery("rms", "torch")]

    def n_minus_1(x, weight, eps=1e-6):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).sum(-1, keepdim=True) / (h.shape[-1] - 1) + eps) * weight).to(x.dtype)

    assert normref.check_rms_norm(honest_rms_norm, cases=drawn).score == 1.0
    r = normref.check_rms_norm(n_minus_1, cases=drawn)
    assert [c.name for c in r.cases] == [c.name for c in drawn] and r.score < 0.5, r.report()


def test_drawing_and_scoring_leave_the_global_rngs_alone(monkeypatch):
    """Every question's drawn battery and class plan, every checker's public battery, and the
    scoring of a correct block against its drawn battery: torch's and numpy's global RNG states
    are unchanged, and nothing seeds them."""
    def refuse(*a, **k):
        raise AssertionError("the global RNG was seeded")

    for target in ("torch.manual_seed", "torch.random.manual_seed", "torch.random.fork_rng", "numpy.random.seed"):
        monkeypatch.setattr(target, refuse)
    t_state, n_state = torch.random.get_rng_state(), np.random.get_state()[1].copy()
    for gid, q in scoring.QUESTIONS.items():
        if q.draw is not None:
            scoring.drawn_cases(gid, 11)
        if q.kind == "class":
            scoring.plan_cases(gid, 11)
    for kind in ("rms", "layer", "module", "placement", "block", "backward", "peri", "qk", "dyt"):
        _public(kind)
    assert scoring.run_check("pre_ln_battery", 11, normref.pre_ln).cases  # a reference: scored, rule broken
    assert torch.equal(torch.random.get_rng_state(), t_state)
    assert np.array_equal(np.random.get_state()[1], n_state)


def test_product_code_patches_no_checker_and_takes_no_process_wide_checker_lock():
    """The grader hands each checker its battery: no ``unittest.mock`` in normref/ or grader/, and
    no ``_CHECKER_LOCK`` (scoring in two threads at once is test_scoring's)."""
    found = []
    for path in sorted([*REPO.glob("normref/**/*.py"), *REPO.glob("grader/**/*.py")]):
        text = path.read_text(encoding="utf-8")
        for word in ("unittest import mock", "import unittest.mock", "mock.patch", "_CHECKER_LOCK"):
            if word in text:
                found.append(f"{path.relative_to(REPO)}: {word}")
    assert found == []
