"""normref.experiments: the measured invariance table agrees with the papers' tables, the float16
demonstration shows the overflow, and the timing returns honest numbers."""
import math

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
