"""Lesson 01's "Why not BatchNorm for tokens?": the table's claims, checked against BatchNorm's
statistics computed here by hand (numpy, float64), not by the code under test."""
import math

import numpy as np
import torch

from normref import batch_stats


def _bn_by_hand(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Ioffe and Szegedy's Algorithm 1 over [B, T, D]: each feature's mean and biased variance
    across every token of every sequence."""
    mu = x.mean(axis=(0, 1), keepdims=True)  # [1, 1, D]
    var = ((x - mu) ** 2).mean(axis=(0, 1), keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def _sequences(seed=0, t=4, d=8):
    g = torch.Generator().manual_seed(seed)
    a = 1.0 + 2.0 * torch.randn(1, t, d, generator=g, dtype=torch.float64)
    b = -1.0 + 0.5 * torch.randn(1, t, d, generator=g, dtype=torch.float64)
    return a.numpy(), b.numpy()


def test_batchnorm_moves_in_every_scenario_and_layernorm_in_none():
    table = batch_stats.batch_vs_layer()
    for scenario, _ in batch_stats.SCENARIOS:
        assert table.moved(scenario, "BatchNorm"), scenario
        assert not table.moved(scenario, "LayerNorm"), scenario


def test_the_measured_changes_are_batchnorm_by_hand():
    a, b = _sequences()
    table = batch_stats.batch_vs_layer()
    joined = np.abs(_bn_by_hand(a)[0] - _bn_by_hand(np.concatenate([a, b]))[0]).max()
    assert math.isclose(table.change[("another sequence joins the batch", "BatchNorm")], joined, rel_tol=1e-9)
    padded = np.concatenate([a, np.zeros((1, 1, a.shape[2]))], axis=1)
    pad = np.abs(_bn_by_hand(a)[0] - _bn_by_hand(padded)[0, :a.shape[1]]).max()
    assert math.isclose(table.change[("a padding token is added", "BatchNorm")], pad, rel_tol=1e-9)
    assert "more than 1 value per channel" in table.refused[("a batch of one token", "BatchNorm")]


def test_the_figure_says_what_the_table_measured():
    plot = batch_stats.plot_batch_vs_layer()
    assert "moves (or it refuses) in 4 of 4, LayerNorm's in 0" in plot.alt
    assert plot.data["LayerNorm"] == [0.0, 0.0, 0.0, 0.0]
