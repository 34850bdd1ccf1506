"""normref.experiments: the measured invariance table agrees with the papers' tables, the float16
demonstration shows the overflow, and the timing returns honest numbers."""
import math

import numpy as np
import pytest
import torch

from normref import experiments as E

# Ba, Kiros and Hinton 2016, Table 1, row "Layer norm"; Zhang and Sennrich 2019, Table 1, row
# "RMSNorm" (True = invariant). Typed from the papers.
PAPER = {
    "weight matrix re-scaling": {"LayerNorm": True, "RMSNorm": True},
    "weight matrix re-centering": {"LayerNorm": True, "RMSNorm": False},
    "weight vector re-scaling": {"LayerNorm": False, "RMSNorm": False},
    "dataset re-scaling": {"LayerNorm": True, "RMSNorm": True},
    "dataset re-centering": {"LayerNorm": False, "RMSNorm": False},
    "single training case re-scaling": {"LayerNorm": True, "RMSNorm": True},
    # the lesson's two, by the definitions: LN removes mean and scale, RMSNorm only the scale
    "token re-scaling": {"LayerNorm": True, "RMSNorm": True},
    "token re-centering": {"LayerNorm": True, "RMSNorm": False},
}


@pytest.mark.parametrize("seed", [0, 1])
def test_invariance_table_matches_the_papers(seed):
    t = E.invariance_table(seed=seed)
    assert t.as_dict() == PAPER


def test_invariance_table_separates_clearly():
    t = E.invariance_table()
    for (tr, norm), change in t.max_change.items():
        if PAPER[tr][norm]:
            assert change < 1e-12, (tr, norm, change)
        else:
            assert change > 0.1, (tr, norm, change)  # a real change, not rounding


def test_invariance_table_renders_ticks_from_the_measurement():
    t = E.invariance_table()
    h = t.to_html()
    assert h.count("&#10004; invariant") == sum(v for row in PAPER.values() for v in row.values())
    assert h.count("&#10008; changes") == sum(not v for row in PAPER.values() for v in row.values())
    assert str(t).splitlines()[4].split()[-2:] == ["invariant", "changes"]  # weight matrix re-centering


def test_float16_statistics_overflow_and_float32_fixes_it():
    d = E.float16_overflow_demo()
    assert d["fp16_max"] == 65504.0 and 300.0 ** 2 > d["fp16_max"]
    assert torch.isinf(d["x_sq_fp16"]).all() and torch.isinf(d["mean_sq_fp16"]).all()
    assert (d["y_fp16_stats"] == 0).all()  # rsqrt(inf) = 0: the output collapses
    assert d["mean_sq_fp32"].item() == 90000.0
    # the seed's MiniMind forward, written out here
    x = d["x"]
    want = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
    assert d["y_fp32_stats"].dtype == torch.float16
    torch.testing.assert_close(d["y_fp32_stats"], want)
    assert d["y_fp32_stats"].tolist() == [1.0, -1.0, 1.0, -1.0]


def test_float16_below_256_does_not_overflow():
    d = E.float16_overflow_demo(x=(255.0, -255.0))
    assert torch.isfinite(d["x_sq_fp16"]).all()
    assert math.isclose(d["y_fp16_stats"][0].item(), 1.0, rel_tol=2e-3)


def test_time_norms_measures_both_implementations():
    r = E.time_norms((2, 3, 8), repeats=2, number=3)
    assert r["shape"] == (2, 3, 8)
    assert [row["impl"] for row in r["rows"]] == ["eager ops (normref)", "fused (torch.nn.functional)"]
    for row in r["rows"]:
        assert 0 < row["layer_us"] < 1e5 and 0 < row["rms_us"] < 1e5
    assert "7%~64%" in E.RMSNORM_PAPER_CLAIM


# --------------------------------------------------------------------------- placement
# The claims 03_placement.ipynb makes in words are asserted here as numbers (seeds fixed).


def test_probe_post_ln_stream_has_norm_sqrt_d_and_pre_ln_grows():
    for norm in ("layer", "rms"):
        post = E.probe_stack("post", depth=4, norm=norm)
        # LayerNorm/RMSNorm with weight 1: every token leaves with RMS 1, i.e. norm sqrt(32)
        np.testing.assert_allclose(post["residual"], math.sqrt(32), rtol=1e-4)
        pre = E.probe_stack("pre", depth=4, norm=norm)
        assert np.all(np.diff(pre["residual"]) > 0), pre["residual"]
        assert post["grad"].shape == pre["grad"].shape == (4,)


def test_probe_matches_a_direct_forward_pass():
    import normref

    torch.manual_seed(3)
    stack = normref.TransformerStack(3, 32, 4, norm="layer", placement="pre")
    x = torch.randn(8, 16, 32, generator=torch.Generator().manual_seed(3))
    _, hidden = stack(x, return_hidden=True)
    want = [h.detach().norm(dim=-1).mean().item() for h in hidden[1:]]
    np.testing.assert_allclose(E.probe_stack("pre", depth=3, seed=3)["residual"], want, rtol=1e-6)


def test_gradient_profiles_at_init_as_the_notebook_describes_them():
    p = E.placement_profiles(depth=8)
    g = p["grad"]
    ratio = {k: g[k][-1] / g[k][0] for k in g}
    # Post-LN's last/first ratio well above Pre-LN's (measured 0.91 vs 0.47)
    assert ratio["post"] > 1.5 * ratio["pre"]
    assert 0.6 < ratio["post"] < 1.4  # "roughly flat"
    assert ratio["pre"] < 0.65  # "falls toward the output"
    assert 1.5 < g["post"][-1] / g["pre"][-1] < 3.5  # "about twice Pre-LN's gradient" (2.2)


def test_xiong_theorem_1_depth_sweep():
    d = E.last_layer_grad_vs_depth(depths=(1, 4, 16))
    pre, post = d["pre"], d["post"]
    # Pre-LN ~ 1/sqrt(L): from L = 1 to 16 at least halves (measured / 3.1; 1/sqrt(16) = / 4)
    assert pre[-1] < 0.5 * pre[0]
    assert pre[0] > pre[1] > pre[2]
    # Post-LN does not depend on L (measured 0.121 -> 0.121)
    assert 0.8 < post[-1] / post[0] < 1.25
    assert post[-1] / pre[-1] > 2.5


def test_train_placements_is_deterministic_and_warmup_only_changes_the_rate():
    a = E.train_placements(steps=3, runs=[("post", False), ("post", True)])
    b = E.train_placements(steps=3, runs=[("post", False)])
    np.testing.assert_array_equal(a[("post", False)], b[("post", False)])
    # the first loss is measured before any update: the same with and without warmup
    assert a[("post", False)][0] == a[("post", True)][0]
    assert a[("post", False)][1] != a[("post", True)][1]
    assert a["optimal"] == pytest.approx(math.log(2))
    assert set(a) >= {("post", False), ("post", True), "optimal", "steps", "warmup", "lr", "depth"}


def test_one_thread_restores_the_thread_count():
    before = torch.get_num_threads()
    with E.one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


# ---------------------------------------------------------------- lesson 03's claims, as invited


def _lesson_03() -> str:
    from pathlib import Path

    return " ".join((Path(__file__).resolve().parents[1] / "notebooks" / "03_placement.md").read_text().split())


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_lesson_03s_training_claims_hold_for_every_depth_it_invites(seed):
    """Lesson 03 (c) on two seeds: the loss levels it names, and, at the default depth 6 and at
    the depths it invites (2 and 10), which runs train and which stall, as its text says; and
    each figure's takeaway says the same from its own numbers. About 30 s of CPU per seed."""
    from normref import plots

    text = _lesson_03()
    outcome = {}
    for depth, runs in ((2, None), (6, None), (10, [("pre", False), ("post", False), ("post", True)])):
        c = E.train_placements(depth=depth, seed=seed, runs=runs)
        p = plots.plot_training(c)
        outcome[depth] = p.data["outcome"]
        for key, how in p.data["outcome"].items():  # the takeaway states each run's measured outcome
            if key == ("pre", True):
                continue
            name = f"{key[0].capitalize()}-LN {'with' if key[1] else 'without'} warmup"
            verb = {"trains": "trains to", "stalls": "stalls at", "partway": "gets to"}[how]
            assert f"{name} {verb} {p.data['final'][key]:.2f} nats" in p.takeaway, p.takeaway
        if depth == 6:
            # the levels the lesson explains, as computed from the data
            assert f"{c['uniform']:.2f}" == "2.77" and f"{c['unigram']:.2f}" == "2.40"
            assert "about $2.40$ nats" in text and "$\\ln 16\\approx2.77$" in text
    # depth 2: "all four runs train, Post-LN without warmup too"
    assert set(outcome[2].values()) == {"trains"}, outcome[2]
    assert "At 2 layers all four runs train" in text
    # depth 6: Pre-LN trains, Post-LN stalls (at the frequency level) without warmup and trains with it
    assert outcome[6][("pre", False)] == "trains" and outcome[6][("post", False)] == "stalls"
    assert outcome[6][("post", True)] in ("trains", "partway")
    assert "Ramping the rate up first lets it train" in text
    # depth 10: Post-LN stalls with warmup as well, Pre-LN trains
    assert outcome[10] == {("pre", False): "trains", ("post", False): "stalls", ("post", True): "stalls"}
    assert "At 10 layers (and 12) Post-LN stalls at 2.40 nats *with* warmup as well" in text


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_lesson_03s_gradient_claims_hold_across_the_explorers_range(norm):
    """Lesson 03 (b) and the explorer (depth 1-16): on seeds 0 and 1 at depths 2, 8, 12 and 16,
    Pre-LN's per-layer gradient falls toward the output, Post-LN's falls less, and Post-LN's
    output layer gets more gradient than Pre-LN's, within the ranges the lesson states."""
    text = _lesson_03()
    assert "its last layer gets 0.34 to 1.15 times its first layer's, Pre-LN's 0.24 to 0.85 times" in text
    for depth in (2, 8, 12, 16):
        for seed in (0, 1):
            pre = E.probe_stack("pre", depth=depth, norm=norm, seed=seed)["grad"]
            post = E.probe_stack("post", depth=depth, norm=norm, seed=seed)["grad"]
            pre_ratio, post_ratio = pre[-1] / pre[0], post[-1] / post[0]
            assert 0.24 <= pre_ratio <= 0.85 and pre_ratio < 1, (depth, seed, pre_ratio)
            assert 0.34 <= post_ratio <= 1.15 and post_ratio > pre_ratio, (depth, seed, post_ratio)
            assert post[-1] > 1.15 * pre[-1], (depth, seed)
    assert "Post-LN's gradient is about the same at every layer" not in text


def test_the_block_assignment_labels_its_gradient_plot_as_lesson_03_does():
    """Lesson 03 says its per-layer shapes differ from Xiong et al.'s Fig. 3: the block
    assignment does not label the same plot "(Xiong et al. 2020, Fig. 3)" as if they matched."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    assert "Their Fig. 3 has a different shape from the left" in _lesson_03()
    for tree in ("source", "release"):
        nb = json.loads((root / tree / "block" / "block.ipynb").read_text())
        text = " ".join("".join(c["source"]) for c in nb["cells"]).split()
        text = " ".join(text)
        assert "(Xiong et al. 2020, Fig. 3)," not in text, tree
        assert "whose per-layer shapes differ from this small model's" in text, tree
