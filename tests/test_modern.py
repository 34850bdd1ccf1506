"""Lesson 04's experiments (normref.modern_experiments, modern_plots, the LearningRateExplorer):
every claim the lesson makes is asserted here from what the same functions compute, with the
lesson's settings, on at least three seeds; and the pieces (the tanh fit, the contrast, the
runs' bookkeeping, the figures' computed takeaways, the widget) on their own."""
import math

import numpy as np
import pytest
import torch

from normref import modern_experiments as me
from normref import modern_plots as mp
from normref import widgets

SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def init():
    return me.init_profiles(seeds=SEEDS)


@pytest.fixture(scope="module")
def low():
    return me.train_runs(me.LOW_RUNS, lr=me.LOW_LR, seeds=SEEDS)


@pytest.fixture(scope="module")
def high():
    return me.train_runs(me.HIGH_RUNS, lr=me.HIGH_LR, seeds=SEEDS)


@pytest.fixture(scope="module")
def qk():
    return me.train_runs(me.QK_RUNS, lr=me.HIGH_LR, seeds=SEEDS)


@pytest.fixture(scope="module")
def dyt():
    return me.train_runs(me.DYT_RUNS, lr=me.LOW_LR, seeds=SEEDS)


# ----------------------------------------------------------------------------- (a) at initialisation


def test_at_init_peri_and_output_ln_grow_like_sqrt_1_plus_2l_faster_than_pre_ln(init):
    layers = np.arange(1, init["depth"] + 1)
    for p in ("peri", "output"):
        rms = init["rms"][p]  # [seeds, depth]
        np.testing.assert_allclose(rms, np.broadcast_to(np.sqrt(1 + 2 * layers), rms.shape), rtol=0.1)
    pre = init["rms"]["pre"]
    assert np.all(np.diff(pre, axis=1) > 0)  # Pre-LN grows layer by layer, every seed
    assert np.all(pre < init["rms"]["peri"]) and np.all(pre < init["rms"]["output"])
    for p in ("post", "deep"):
        np.testing.assert_allclose(init["rms"][p], 1.0, atol=1e-3)


def test_at_init_the_gradient_profiles(init):
    g = init["grad"]  # [seeds, depth] per placement
    assert np.all(g["output"][:, 0] > g["peri"][:, 0]) and np.all(g["peri"][:, 0] > g["pre"][:, 0])
    assert np.all(g["output"][:, -1] / g["output"][:, 0] < 0.15)  # Output-LN's fall steeply
    for p in ("pre", "peri"):
        assert np.all(g[p][:, -1] < g[p][:, 0])
    ratio = g["post"][:, -1] / g["post"][:, 0]
    assert np.all((0.5 < ratio) & (ratio < 1.5))  # Post-LN's profile is flat (lesson 03)
    assert np.all(g["deep"] < g["post"] / 5)  # DeepNorm's beta-scaled init: much smaller


# ----------------------------------------------------------------------------- (b) after training


def test_pre_ln_hidden_states_grow_in_training_peri_and_output_stay_bounded(low, high):
    for runs, factor in ((low, 2.0), (high, 100.0)):
        pre = np.array([r["rms_final"][-1] for r in runs["pre"]])
        for p in ("peri", "output"):
            other = np.array([r["rms_final"][-1] for r in runs[p]])
            assert np.all(pre > factor * other), (p, pre, other)  # every seed
            grown = np.array([r["rms_final"][-1] / r["rms_init"][-1] for r in runs[p]])
            assert np.all(grown < 3.0), (p, grown)
        pre_grown = np.array([r["rms_final"][-1] / r["rms_init"][-1] for r in runs["pre"]])
        assert np.all(pre_grown > (1000 if runs is high else 5)), pre_grown  # "a thousand or more" at lr 0.1
    for p in ("post", "deep"):
        assert all(r["rms_final"].max() < 1.5 for r in low[p])


def test_at_lr_0_1_peri_ln_ends_below_pre_ln_on_every_seed(high):
    c = me.lr_contrast(high, "pre", "peri", margin=0.2)
    assert c["holds"] and c["seeds"] == list(SEEDS), c
    assert me.contrast_words(c, "pre", "peri").startswith("at lr 0.1 Peri-LN ends below Pre-LN on every seed (0, 1, 2)")


def test_the_lr_0_1_contrast_holds_on_three_more_seeds():
    runs = me.train_runs({"pre": {"placement": "pre"}, "peri": {"placement": "peri"}}, lr=me.HIGH_LR, seeds=(3, 4, 5))
    c = me.lr_contrast(runs, "pre", "peri", margin=0.2)
    assert c["holds"], c


def test_at_lr_0_01_there_is_no_contrast_and_deepnorm_trains_where_post_ln_does_not(low):
    c = me.lr_contrast(low, "pre", "peri")
    assert not c["holds"] and max(abs(g) for g in c["gap"]) < 0.05, c
    assert "no contrast here" in me.contrast_words(c, "pre", "peri")
    d = me.lr_contrast(low, "post", "deep", margin=0.3)
    assert d["holds"], d
    assert all(me.final_loss(r) < 0.85 for r in low["deep"])
    assert all(me.final_loss(r) > 1.1 for r in low["post"])


def test_every_run_is_finite_and_learns(low, high):
    for runs in (low, high):
        for label, rs in runs.items():
            for r in rs:
                assert np.all(np.isfinite(r["loss"])) and r["loss"].shape == (40,)
                if label != "post":
                    assert me.final_loss(r) < r["loss"][0] - 1.0, (label, r["seed"])


# ----------------------------------------------------------------------------- (c) QK-norm


def test_qk_norm_keeps_the_largest_logit_small_and_the_loss_lower(high, qk):
    for p in ("pre", "output"):
        plain, normed = high[p], qk[f"{p} + QK-norm"]
        for a, b in zip(plain, normed):
            assert a["seed"] == b["seed"]
            assert b["max_logit"].max() < a["max_logit"].max() / 20, (p, a["seed"])
            assert b["max_logit"].max() < 30
            assert me.final_loss(b) < me.final_loss(a), (p, a["seed"])
    assert all(r["max_logit"].max() > 5000 for r in high["output"])  # Output-LN: about ten thousand
    assert all(100 < r["max_logit"].max() < 1000 for r in high["pre"])  # Pre-LN: hundreds


# ----------------------------------------------------------------------------- (d) DyT


def test_layernorm_maps_are_tanh_like_weakly_and_dyt_trains_like_layernorm(dyt):
    for r in dyt["LayerNorm"]:
        maps = me.layer_norm_maps(r)
        assert len(maps) == 2 * 6 + 1 and maps[-1]["name"] == "final norm"
        gains = me.tanh_gain(maps)
        assert np.all(gains >= -1e-9), gains  # the tanh family contains the line (alpha -> 0)
        assert gains.max() >= 0.01 and gains.max() < 0.1, gains  # better, by little (measured 0.017-0.042)
    for a, b in zip(dyt["LayerNorm"], dyt["DyT"]):
        assert me.final_loss(b) <= me.final_loss(a) + 0.03, a["seed"]


# ----------------------------------------------------------------------------- the pieces


@pytest.mark.parametrize("seed", SEEDS)
def test_ln_tanh_fit_recovers_a_tanh_and_a_line(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 10, 4000)
    alpha, lam = 0.13 + 0.05 * seed, 1.5 + seed
    fit = me.ln_tanh_fit(x, lam * np.tanh(alpha * x))
    assert fit["alpha"] == pytest.approx(alpha, rel=0.04) and fit["lam"] == pytest.approx(lam, rel=0.04)
    assert fit["r2_tanh"] > 0.999 and fit["r2_line"] < 0.95
    line = me.ln_tanh_fit(x, 0.3 * x)
    assert line["slope"] == pytest.approx(0.3) and line["r2_line"] == pytest.approx(1.0)
    assert line["r2_tanh"] > 0.999  # a tiny alpha: tanh(a x) / a ~ x
    with pytest.raises(ValueError, match="same, nonzero size"):
        me.ln_tanh_fit(x, x[:-1])


def test_train_tiny_is_deterministic_and_records_per_step():
    a = me.train_tiny("peri", lr=0.01, steps=5, seed=7)
    b = me.train_tiny("peri", lr=0.01, steps=5, seed=7)
    assert np.array_equal(a["loss"], b["loss"]) and np.array_equal(a["max_logit"], b["max_logit"])
    assert a["loss"].shape == a["max_logit"].shape == (5,)
    assert a["rms_init"].shape == a["rms_final"].shape == (me.TINY["depth"],)
    assert a["loss"][0] == pytest.approx(math.log(16), abs=0.5)  # starts near uniform over 16 tokens
    with pytest.raises(ValueError, match="unknown model option"):
        me.train_tiny("pre", steps=1, width=8)


def test_lr_contrast_reads_final_losses_and_says_so():
    def run(seed, tail):
        return {"seed": seed, "lr": 0.5, "loss": np.r_[np.full(30, 3.0), np.full(10, tail)]}

    runs = {"a": [run(0, 1.0), run(1, 1.2)], "b": [run(0, 0.7), run(1, 0.75)]}
    c = me.lr_contrast(runs, "a", "b", margin=0.3)
    assert c["a"] == pytest.approx([1.0, 1.2]) and c["gap"] == pytest.approx([0.3, 0.45]) and c["holds"]
    assert not me.lr_contrast(runs, "a", "b", margin=0.4)["holds"]
    runs["b"][1]["loss"][-1] = float("nan")
    assert me.final_loss(runs["b"][1]) == float("inf")


def test_the_figures_takeaways_are_the_numbers_they_plot(init, low, high, qk, dyt):
    p = mp.plot_init_profiles(init)
    pre_last = p.data["rms_last"]["pre"]
    assert f"{mp.span(pre_last)} in Pre-LN" in p.takeaway
    p = mp.plot_hidden_rms({me.LOW_LR: low, me.HIGH_LR: high})
    assert np.array_equal(p.data["final_last"][(me.HIGH_LR, "pre")], [r["rms_final"][-1] for r in high["pre"]])
    p = mp.plot_training_curves({me.LOW_LR: low, me.HIGH_LR: high})
    fin = p.data["final"][(me.HIGH_LR, "peri")]
    assert f"Peri-LN {mp.span(fin)} at lr 0.1" in p.takeaway
    p = mp.plot_qk_logits({"Pre-LN": high["pre"], "Pre-LN + QK-norm": qk["pre + QK-norm"]})
    assert f"Pre-LN + QK-norm {mp.span(p.data['peak']['Pre-LN + QK-norm'], '.3g')}" in p.takeaway
    maps = me.layer_norm_maps(dyt["LayerNorm"][0])
    p = mp.plot_ln_map(maps, dyt["LayerNorm"], dyt["DyT"])
    best = p.data["fits"][0]
    assert best["name"] == maps[int(np.argmax(me.tanh_gain(maps)))]["name"]
    assert f"{best['r2_tanh']:.3f} vs {best['r2_line']:.3f}" in p.takeaway
    for plot in (p,):
        assert len(plot.alt) > 40 and plot.png()[:4] == b"\x89PNG"


def test_learning_rate_explorer_trains_what_it_has_not_seen_and_reads_back(high):
    seen = {(p, me.HIGH_LR): rs[0] for p, rs in high.items()}
    w = widgets.LearningRateExplorer(runs=seen)
    assert w.trained == 0 and w.renders == 1  # the lesson's runs are reused
    got = widgets.parse_readout(w.readout.value)
    assert got["final Pre-LN"] == pytest.approx(me.final_loss(high["pre"][0]), abs=5e-4)
    assert got["final Peri-LN"] == pytest.approx(me.final_loss(high["peri"][0]), abs=5e-4)
    assert got["rms Pre-LN"] == pytest.approx(high["pre"][0]["rms_final"][-1], abs=5e-4)
    w.placement_toggle.value = "output"
    assert w.trained == 0 and "Output-LN" in w.readout_text
    w.lr_slider.value = 0.003
    assert w.trained == 2 and w.renders == 3
    fresh = me.train_tiny("pre", lr=0.003, seed=0)
    assert widgets.parse_readout(w.readout.value)["final Pre-LN"] == pytest.approx(me.final_loss(fresh), abs=5e-4)
    w.lr_slider.value = me.HIGH_LR
    assert w.trained == 2  # seen before: redrawn, not retrained
    assert "learning rate 0.1" in w.caption.value
    with pytest.raises(ValueError, match="lr must be one of"):
        widgets.LearningRateExplorer(lr=0.2)
    with pytest.raises(ValueError, match="placement must be"):
        widgets.LearningRateExplorer(placement="pre", runs=seen)
    assert torch.get_num_threads() >= 1
