"""Lesson 04's experiments (normref.modern_experiments, modern_plots, the LearningRateExplorer):
every claim the lesson makes is asserted here from what the same functions compute, with the
lesson's settings, on at least three seeds; and the pieces (the tanh fit, the contrast, the
runs' bookkeeping, the figures' computed takeaways, the widget) on their own."""
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from normref import modern_experiments as me
from normref import modern_plots as mp
from normref import widgets

SEEDS = me.SEEDS  # the lesson's seeds: every claim it makes is asserted on each of them
LESSON = (Path(__file__).resolve().parents[1] / "notebooks" / "04_modern.md").read_text()
PLACEMENT_LESSON = (Path(__file__).resolve().parents[1] / "notebooks" / "03_placement.md").read_text()


def said(text: str) -> bool:
    """Is ``text`` in lesson 04's prose (line breaks and runs of spaces read as one space)?"""
    return " ".join(text.split()) in " ".join(LESSON.split())


@pytest.fixture(scope="module")
def init():
    return me.init_profiles(seeds=SEEDS)


@pytest.fixture(scope="module")
def trained():
    """Every run the lesson draws, trained here (not read from the shipped file)."""
    return me.lesson_runs(recompute=True, progress=False)


@pytest.fixture(scope="module")
def low(trained):
    return trained["low"]


@pytest.fixture(scope="module")
def high(trained):
    return trained["high"]


@pytest.fixture(scope="module")
def qk(trained):
    return trained["qk"]


@pytest.fixture(scope="module")
def dyt(trained):
    return trained["dyt"]


def test_the_shipped_runs_are_what_training_gives(trained):
    """The lesson reads normref/data/modern_runs.json: it must hold these same runs (stored to
    7 significant digits)."""
    shipped = me.lesson_runs()
    assert shipped.keys() == trained.keys()
    for group in trained:
        assert shipped[group].keys() == trained[group].keys()
        for label, runs in trained[group].items():
            for a, b in zip(shipped[group][label], runs, strict=True):
                assert (a["seed"], a["lr"], a["placement"]) == (b["seed"], b["lr"], b["placement"])
                for k in ("loss", "max_logit", "rms_init", "rms_final"):
                    np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-6, err_msg=f"{group} {label} {k}")
                for fa, fb in zip(a.get("ln_fits", []), b.get("ln_fits", []), strict=True):
                    assert fa["name"] == fb["name"] and fa["r2_tanh"] == pytest.approx(fb["r2_tanh"], abs=1e-6)


def test_lesson_runs_refuses_a_file_made_with_other_settings(tmp_path):
    path = tmp_path / "runs.json"
    path.write_text(me.RUNS_FILE.read_text())
    with pytest.raises(ValueError, match="other settings or seeds"):
        me.lesson_runs(path=path, seeds=(0, 1))


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


def test_at_init_the_gradient_profiles_are_as_the_lesson_words_them(init):
    g = init["grad"]  # [seeds, depth] per placement
    assert np.all(g["output"][:, 0] > g["peri"][:, 0]) and np.all(g["peri"][:, 0] > g["pre"][:, 0])
    for p in ("pre", "peri", "output"):
        assert np.all(g[p][:, -1] < g[p][:, 0])
    steep = g["output"][:, 0] / g["output"][:, -1]
    assert said(f"{round(steep.min())} to {round(steep.max())} times its last layer's"), steep
    post = g["post"][:, -1] / g["post"][:, 0]
    deep = g["deep"][:, -1] / g["deep"][:, 0]
    assert said(f"gets {mp.span(post).replace('-', ' to ')} times its first layer's gradient"), post
    assert said(f"flattest ({mp.span(deep).replace('-', ' to ')})"), deep
    smaller = (g["post"] / g["deep"]).mean(1)
    assert said(f"{round(smaller.min())} to {round(smaller.max())} times smaller than Post-LN's"), smaller


def test_lessons_03_and_04_agree_on_post_lns_gradient_profile(init):
    """Both say Post-LN's profile has no steady shape: lesson 03 measured its last/first-layer
    gradient at 0.34 to 1.15 (LayerNorm, seeds 0-2, depths 2-16); lesson 04's RMSNorm stacks fall
    inside that range, and one seed's profile rises where another's falls by a third."""
    assert "no steady shape" in PLACEMENT_LESSON and said("Post-LN's profile has no steady shape, as in lesson 03")
    assert "0.34 to 1.15 times its first" in " ".join(PLACEMENT_LESSON.split())
    ratio = init["grad"]["post"][:, -1] / init["grad"]["post"][:, 0]
    assert np.all((0.34 <= ratio) & (ratio <= 1.15)), ratio
    assert ratio.max() > 1.0 and ratio.min() < 0.7, ratio


# ----------------------------------------------------------------------------- (b) after training


def test_pre_ln_hidden_states_grow_in_training_peri_and_output_stay_bounded(low, high):
    for runs, factor in ((low, 2.0), (high, 100.0)):
        pre = np.array([r["rms_final"][-1] for r in runs["pre"]])
        for p in ("peri", "output"):
            other = np.array([r["rms_final"][-1] for r in runs[p]])
            assert np.all(pre > factor * other), (p, pre, other)  # every seed
            grown = np.array([r["rms_final"][-1] / r["rms_init"][-1] for r in runs[p]])
            assert np.all(grown < 3.0), (p, grown)
    grown = {lr: np.array([r["rms_final"][-1] / r["rms_init"][-1] for r in runs["pre"]])
             for lr, runs in ((me.LOW_LR, low), (me.HIGH_LR, high))}
    assert np.all((7 <= grown[me.LOW_LR]) & (grown[me.LOW_LR] <= 9)) and said("7 to 9 times at lr 0.01"), grown
    assert np.all(grown[me.HIGH_LR] > 1000) and said("a thousand times or more at lr 0.1"), grown
    for p in ("post", "deep"):
        assert all(r["rms_final"].max() < 1.5 for r in low[p])


def test_at_lr_0_1_every_placement_spikes_and_peri_ln_recovers(high):
    peaks = {p: np.array([r["loss"][:10].max() for r in high[p]]) for p in ("pre", "peri", "output")}
    at20 = {p: np.array([r["loss"][19] for r in high[p]]) for p in ("pre", "peri", "output")}
    for p, name in (("pre", "Pre-LN's"), ("peri", "Peri-LN's"), ("output", "Output-LN's")):
        assert np.all(peaks[p] > np.log(16)), p  # above the uniform guess: a spike
    assert said(f"Pre-LN's to {mp.span(peaks['pre'], '.1f')} nats, Peri-LN's to {mp.span(peaks['peri'], '.1f')}, "
                f"Output-LN's to {mp.span(peaks['output'], '.1f')}"), peaks
    assert peaks["peri"][SEEDS.index(1)] > peaks["pre"][SEEDS.index(1)] and said("on seed 1 Peri-LN's is the higher")
    assert np.all(at20["peri"] < 1.0) and said(f"Pre-LN is still at {mp.span(at20['pre'], '.1f')}"), at20
    c = me.lr_contrast(high, "pre", "peri", margin=0.2)
    assert c["holds"] and c["seeds"] == list(SEEDS), c
    words = me.contrast_words(c, "pre", "peri")
    assert words.startswith("at lr 0.1 Peri-LN ends below Pre-LN on every seed (0, 1, 2, 3, 4)")
    assert said(words.split("nats")[0].split("by ")[1] + "nats"), words
    assert me.spike_words(high).startswith(f"largest loss of steps 1-10: Pre-LN {mp.span(peaks['pre'])}")


def test_at_lr_0_01_no_contrast_and_post_ln_ends_above_deepnorm_stalling_on_two_seeds(low):
    c = me.lr_contrast(low, "pre", "peri")
    assert not c["holds"] and max(abs(g) for g in c["gap"]) < 0.05, c
    assert "no contrast here" in me.contrast_words(c, "pre", "peri")
    d = me.lr_contrast(low, "post", "deep", margin=0.3)
    assert d["holds"], d
    gap = np.array(d["gap"])
    assert said(f"Post-LN at lr 0.01 ends {gap.min():.2f} to {gap.max():.2f} nats above DeepNorm on every seed")
    deep = [me.final_loss(r) for r in low["deep"]]
    assert said(f"DeepNorm ends at {mp.span(deep)} on every seed"), deep
    unigram = me.loss_levels()["unigram"]
    assert unigram == pytest.approx(2.40, abs=0.005)
    stalled = me.stalled(low["post"], unigram)
    assert stalled == [2, 4] and said("on two of the five (seeds 2 and 4) it stalls at the")
    others = [r for r in low["post"] if r["seed"] not in stalled]
    for r in others:  # still falling: the last 10 steps' mean well below the 10 before
        assert r["loss"][-10:].mean() < r["loss"][-20:-10].mean() - 0.1, r["seed"]
    assert said(f"still falling after 40 steps ({mp.span([me.final_loss(r) for r in others])} nats)")
    for r in low["post"]:
        if r["seed"] in stalled:  # flat at the token-frequency level
            assert abs(r["loss"][-10:].mean() - r["loss"][-20:-10].mean()) < 0.1, r["seed"]


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
    out = [r["max_logit"].max() for r in high["output"]]
    pre = [r["max_logit"].max() for r in high["pre"]]
    normed = [r["max_logit"].max() for rs in qk.values() for r in rs]
    assert all(1e4 < v < 2.5e4 for v in out) and said("ten to twenty-five thousand in Output-LN"), out
    assert all(430 < v < 790 for v in pre) and said("hundreds in Pre-LN (430-790)"), pre
    assert all(7 < v < 17 for v in normed) and said("it stays between 7 and 17"), normed


# ----------------------------------------------------------------------------- (d) DyT


def test_layernorm_maps_are_tanh_like_weakly_and_dyt_trains_like_layernorm(dyt):
    best = []
    for r in dyt["LayerNorm"]:
        fits = r["ln_fits"]
        assert len(fits) == 2 * 6 + 1 and fits[-1]["name"] == "final norm"
        gains = np.array([f["r2_tanh"] - f["r2_line"] for f in fits])
        assert np.all(gains >= -1e-9), gains  # the tanh family contains the line (alpha -> 0)
        best.append(gains.max())
    assert said(f"at most {min(best):.2f} to {max(best):.2f} of the variance"), best
    diff = [me.final_loss(b) - me.final_loss(a) for a, b in zip(dyt["LayerNorm"], dyt["DyT"])]
    assert max(abs(d) for d in diff) < 0.04 and said("within 0.04 nats of LayerNorm's"), diff


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
    maps = me.layer_norm_maps(me.train_tiny(**me.DYT_RUNS["LayerNorm"], lr=me.LOW_LR, seed=0))
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
