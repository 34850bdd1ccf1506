"""Trusted scoring: the graded batteries' inputs drawn from a secret seed, and their scores
computed in the grader's own process.

For every question in :data:`QUESTIONS` (the code questions' full batteries):

1. :func:`prepare_inputs`, before autograde, draws a new battery from a secret seed (new per
   grading run, written to ``logs/scoring/`` with the run, never where a kernel can read it)
   covering the kinds of case of the visible battery: a small token, ``[B, T, D]`` with a
   trained gamma (and beta), ``B = T = D``, tiny values with eps = 1e-4 (where eps sits), the
   float16 overflow row (for LayerNorm with a row of large mean, where the one-pass variance
   cancels), bfloat16, a constant row (LayerNorm). It runs the course's own checker
   on those cases with a probe in place of the student's function, and saves the calls the
   checker makes (arguments and keyword arguments) to ``logs/scoring/handback-inputs.json``
   (outside every sandbox): the autograde preprocessor ``HandbackInputs`` (``nbgrader_config.py``)
   writes a question's inputs into its hidden test just before it runs, the kernel's only view
   of the question.
2. In the kernel, the hidden test ``hand_back(grade_id, fn)`` (:mod:`normref.handback`) makes
   those calls and shows the outputs (or exceptions) as one output of its MIME type.
3. :func:`grader.scores.score_notebook`, after autograde, reads that output from the autograded
   notebook (nothing pickled: arrays as ``.npy``, tensors with dtype and shape), replays it
   through the same checker on the same cases (:class:`grader.replay.Replay` stands in for the
   student's function), and :func:`grader.scores.score_class` writes ``points x score`` into
   nbgrader's gradebook (``Grade`` rows) and the checker's diagnosis into the autograded
   notebook (what the feedback shows), with, in that output's metadata, the record of what the
   outputs computed case by case (the class report groups wrong answers by it,
   :mod:`grader.groups`, without running any code).

The same holds for classes and short answers. A class question (the block assignment's
``RMSNorm`` module and ``PreNormBlock``) hands back the record of a plan the grader decides
(:func:`module_plan`, :func:`block_plan`: construct with given arguments, report the named
parameters and submodules, load given weights, swap in the checker's known submodules, call
the student's own submodules in the reference wiring, call ``forward`` on drawn inputs;
:func:`normref.plan.run_plan` performs it); :class:`grader.replay.ReplayClass` rebuilds the
modules from that record for the same checker. A short answer (the practice assignment, :data:`PRACTICE`)
hands back its values (:func:`normref.wire.encode_answer`), checked here by its
``normref.answers`` checker with the setting its visible check shows.

A cell that hands back no outputs, or more than one set, scores 0 (flagged when it is more
than one). The student's code never sees a score, a checker or the reference's outputs.
"""
from __future__ import annotations

import json
import os
import secrets
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from unittest import mock

import numpy as np

from normref.handback_files import HANDBACK_ENV as ENV
from normref.handback_files import INPUTS_FILE, SCORING_DIR
from normref.wire import dump_inputs

from .draws import pick as _pick
from .draws import token as _token

__all__ = ["QUESTIONS", "PRACTICE", "prepare_inputs", "module_plan", "block_plan", "run_check", "plan_cases"]


# --------------------------------------------------------------------------- drawn batteries


def _gen(seed: int, grade_id: str):
    """A torch generator for one question, from the run's seed and the question's name."""
    import hashlib

    import torch

    h = int.from_bytes(hashlib.sha256(f"{seed}:{grade_id}".encode()).digest()[:8], "little")
    return torch.Generator().manual_seed(h & (2**63 - 1))


def _with_std(x, std):
    """``x`` ([..., D]) with each token rescaled about its mean to this (biased) std."""
    mean = x.mean(-1, keepdim=True)
    c = x - mean
    return mean + c / c.pow(2).mean(-1, keepdim=True).sqrt() * std


def _one_pass_error(row: list[float], eps: float = 1e-5) -> tuple[float, float]:
    """(the float16 output's largest error with the one-pass float32 variance, with the float64
    two-pass variance), each over the float16 tolerance, against the two-pass float32 reference;
    weight 1, bias 0."""
    from normref.checks.compare import tolerance

    x = np.array(row, np.float16)
    h = x.astype(np.float32)
    m = h.mean()
    ref = ((h - m) / np.sqrt(((h - m) ** 2).mean() + np.float32(eps))).astype(np.float16).astype(np.float64)
    one = ((h - m) / np.sqrt((h * h).mean() - m * m + np.float32(eps))).astype(np.float16).astype(np.float64)
    h64 = x.astype(np.float64)
    f64 = ((h64 - h64.mean()) / np.sqrt(h64.var() + eps)).astype(np.float16).astype(np.float64)
    rtol, atol = tolerance("float16")
    tol = atol + rtol * np.abs(ref)
    return float((np.abs(one - ref) / tol).max()), float((np.abs(f64 - ref) / tol).max())


def _large_mean_row(g) -> list[float]:
    """Four float16 integers (LayerNorm's float16 case, second row; see
    :data:`normref.checks.norms.LARGE_MEAN_ROW`): mean in [1498, 2001] with a fraction of
    .25 or .75, spread of a few units. Every sum is exact in float32 and E[x]**2 is not (float32
    spacing 0.25 above 2**21): the one-pass variance E[x**2] - E[x]**2 is off by 1/16. Drawn
    again until that moves the output by at least 4 x the float16 tolerance and float64
    statistics stay within half of it."""
    import torch

    while True:
        row = (int(torch.randint(1500, 2000, (1,), generator=g)) + torch.randint(-2, 3, (4,), generator=g)).tolist()
        if sum(row) % 2 == 1:
            one, f64 = _one_pass_error([float(v) for v in row])
            if one >= 4 and f64 <= 0.5:
                return [float(v) for v in row]


def draw_norm_battery(kind: str, backend: str, g) -> list:
    """A drawn RMSNorm (``kind="rms"``) or LayerNorm (``"layer"``) battery for ``backend``
    (``"torch"``: six cases for rms, seven for layer; ``"numpy"``: without bfloat16), the
    kinds of case of :func:`normref.checks.norms.battery` with new numbers and shapes."""
    import torch

    from normref.checks.norms import NormCase, float16_case
    from normref.functional import LAYER_NORM_EPS, RMS_NORM_EPS

    eps = RMS_NORM_EPS if kind == "rms" else LAYER_NORM_EPS

    def rnd(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    bias = (lambda b: b) if kind == "layer" else (lambda b: None)
    b_, t_, d = _pick(g, [2, 3]), _pick(g, [3, 4, 5]), _pick(g, [6, 8, 10])
    n = _pick(g, [3, 4, 5])
    d2 = _pick(g, [4, 5, 6, 7])
    big = float(_pick(g, [264, 300, 384, 500, 640, 1000]))
    tok = _token(g)
    w, b = 1 + 0.5 * rnd(d), 0.1 * rnd(d)
    btd, nnn, tiny = rnd(b_, t_, d, shift=0.5), rnd(n, n, n, scale=2.0, shift=1.0), rnd(2, d2)
    if kind == "layer":
        # Where eps sits shows in float32 only on a token of small variance. Every token gets a
        # std between 1 and 2, but one of std 0.2 in [B, T, D] (both eps faults show) and one
        # of std 0.4 in B = T = D (sqrt(var) + eps is within tolerance there, no eps is not).
        btd = _with_std(btd, 1 + torch.rand(b_, t_, 1, generator=g))
        nnn = _with_std(nnn, 1 + torch.rand(n, n, 1, generator=g))
        btd[0, 0] = _with_std(btd[0, 0], 0.2)
        nnn[0, 0] = _with_std(nnn[0, 0], 0.4)
        # tiny values: std 1e-3 to 2e-3 against eps = 1e-4, so var still shows (n-1 is seen),
        # and a mean of the same order, as in the visible case (scaled before: rescaling the
        # spread alone kept a mean of ~0.4 against it, where the one-pass variance cancels too)
        tiny = _with_std(1e-3 * tiny, 1e-3 * (1 + torch.rand(2, 1, generator=g)))
    else:  # RMS between 1 and 2 in every token: eps stays below float32's tolerance there
        btd = btd / btd.pow(2).mean(-1, keepdim=True).sqrt() * (1 + torch.rand(b_, t_, 1, generator=g))
        nnn = nnn / nnn.pow(2).mean(-1, keepdim=True).sqrt() * (1 + torch.rand(n, n, 1, generator=g))
        tiny = tiny / tiny.pow(2).mean(-1, keepdim=True).sqrt() * 1e-3 * (1 + torch.rand(2, 1, generator=g))
    cases = [
        NormCase(f"token {tuple(int(v) for v in tok.tolist())}", tok, torch.ones(3), bias(torch.zeros(3)), eps),
        NormCase(f"[{b_}, {t_}, {d}] float32 with a trained gamma", btd, w, bias(b), eps),
        NormCase(f"B = T = D [{n}, {n}, {n}] (a wrong axis still broadcasts)", nnn,
                 1 + 0.5 * rnd(n), bias(0.1 * rnd(n)), eps),
        NormCase(f"tiny values 1e-3 [2, {d2}] with eps=1e-4 (where eps sits matters)", tiny,
                 torch.ones(d2), bias(torch.zeros(d2)), 1e-4),
        float16_case(kind, big, _large_mean_row(g) if kind == "layer" else rnd(4, shift=2.5).tolist(), eps),
        NormCase(f"bfloat16 [{b_}, {t_}, 8]", rnd(b_, t_, 8).to(torch.bfloat16), 1 + 0.5 * rnd(8),
                 bias(0.1 * rnd(8)), eps),
    ]
    if kind == "layer":
        c = float(_pick(g, [-3, 2, 5, 7]))
        cases.append(NormCase(f"constant row [{c:g}] * 4 (variance 0: output must be beta)",
                              torch.stack([torch.full((4,), c), _with_std(rnd(4), 1.0)]), torch.ones(4),
                              0.5 * rnd(4), eps))
    if backend == "numpy":
        def conv(t):
            return None if t is None else t.numpy()

        cases = [NormCase(c.name, conv(c.x), conv(c.weight), conv(c.bias), c.eps)
                 for c in cases if c.x.dtype != torch.bfloat16]
    return cases


def draw_backward_battery(g) -> list:
    """A drawn LayerNorm-backward battery (float64 numpy): a token with a one-hot ``dy``,
    ``[B, T, D]`` with a trained gamma, ``B = T = D``, tiny values with eps = 1e-4."""
    import torch

    from normref.checks.backward import _BackwardCase
    from normref.functional import LAYER_NORM_EPS

    def rnd(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale + shift).numpy()

    tok = np.sort(_token(g).double().numpy())  # dy = (1, 0, 0) on the smallest: every term shows
    dy = np.array([1.0, 0.0, 0.0])
    b_, t_, d, n, d2 = _pick(g, [2, 3]), _pick(g, [3, 4]), _pick(g, [6, 8]), _pick(g, [3, 4, 5]), _pick(g, [4, 5, 6])
    return [
        _BackwardCase(f"token {tuple(int(v) for v in tok)} with dy = (1, 0, 0)", dy, tok, np.ones(3), LAYER_NORM_EPS),
        _BackwardCase(f"[{b_}, {t_}, {d}] with a trained gamma", rnd(b_, t_, d), rnd(b_, t_, d, shift=0.5),
                      1 + 0.5 * rnd(d), LAYER_NORM_EPS),
        _BackwardCase(f"B = T = D [{n}, {n}, {n}] (a wrong axis still broadcasts)", rnd(n, n, n),
                      rnd(n, n, n, scale=2.0, shift=1.0), 1 + 0.5 * rnd(n), LAYER_NORM_EPS),
        _BackwardCase(f"tiny values 1e-3 [2, {d2}] with eps=1e-4 (where eps sits matters)", rnd(2, d2),
                      rnd(2, d2, scale=1e-3), 1 + 0.5 * rnd(d2), 1e-4),
    ]


def draw_placement_battery(g) -> list:
    """A drawn Pre-/Post-LN battery: a token through F(v) = 2v and then F(v) = (v3, v1, v2)
    (:class:`normref.checks.placement.Roll`), with LayerNorm without eps; ``[B, T, 8]``
    through tanh(v W + c) and an RMSNorm with a trained gamma; ``B = T = D`` through
    tanh(v W + c) and a LayerNorm with gamma and beta; ``[2, T, 8]`` through causal
    self-attention and an RMSNorm. Every object is the course's own class."""
    import torch
    from torch import nn

    from normref.blocks import CausalSelfAttention
    from normref.checks.placement import Roll, ToySublayer, _PlacementCase
    from normref.modules import LayerNorm, RMSNorm

    def rnd(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    def seed():
        return int(torch.randint(2**31 - 1, (1,), generator=g))

    twice = nn.Linear(3, 3, bias=False)
    with torch.no_grad():
        twice.weight.copy_(2 * torch.eye(3))
    b_, t_, n, t2 = _pick(g, [2, 3]), _pick(g, [3, 4]), _pick(g, [3, 4, 5]), _pick(g, [4, 5, 6])
    rms8, ln = RMSNorm(8), LayerNorm(n)
    with torch.no_grad():
        rms8.weight.copy_(1 + 0.5 * rnd(8))
        ln.weight.copy_(1 + 0.5 * rnd(n))
        ln.bias.copy_(0.3 * rnd(n))
    with torch.random.fork_rng():
        torch.manual_seed(seed())
        attn = CausalSelfAttention(8, 2)
    rms8b = RMSNorm(8)
    with torch.no_grad():
        rms8b.weight.copy_(1 + 0.5 * rnd(8))
    tok = _token(g)
    return [
        _PlacementCase(f"token {tuple(int(v) for v in tok.tolist())}, F(v) = 2v, then F(v) = (v3, v1, v2), "
                       "LayerNorm without eps", tok, twice, LayerNorm(3, eps=0.0), Roll()),
        _PlacementCase(f"[{b_}, {t_}, 8], F(v) = tanh(v W + c), RMSNorm with a trained gamma",
                       rnd(b_, t_, 8, scale=2.0, shift=0.5), ToySublayer(8, seed()), rms8),
        _PlacementCase(f"B = T = D [{n}, {n}, {n}], F(v) = tanh(v W + c), LayerNorm with gamma and beta",
                       rnd(n, n, n, scale=3.0, shift=1.0), ToySublayer(n, seed()), ln),
        _PlacementCase(f"[2, {t2}, 8], F = causal self-attention, RMSNorm", rnd(2, t2, 8, scale=2.0), attn, rms8b),
    ]


def _rms_scaled(x, lo, g):
    """``x`` with each token rescaled to an RMS drawn uniformly in ``[lo, 2 lo]``."""
    import torch

    r = lo * (1 + torch.rand(*x.shape[:-1], 1, generator=g))
    return x / x.pow(2).mean(-1, keepdim=True).sqrt() * r


def draw_module_battery(g) -> list:
    """A drawn RMSNorm-module battery, the kinds of case of
    :func:`normref.checks.module._module_battery`: the parameter (structural: ``RMSNorm(8)``,
    as it is), ``[B, T, D]`` float32 with a trained weight, ``B = T = D``, the float16
    overflow row, bfloat16 with a trained weight, ``eps=1e-4`` on tiny values and the default
    eps on values of RMS 1e-3 to 2e-3 (where 1e-6 is felt against 1e-5 or 1e-8)."""
    import torch

    from normref.checks.module import _ModuleCase

    def rnd(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    b_, t_, d = _pick(g, [2, 3]), _pick(g, [3, 4, 5]), _pick(g, [6, 8, 10])
    n, d5, d4 = _pick(g, [3, 4, 5]), _pick(g, [4, 5, 6, 7]), _pick(g, [3, 4, 5, 6])
    big = float(_pick(g, [264, 300, 384, 500, 640, 1000]))
    return [
        _ModuleCase("RMSNorm(8): weight is an nn.Parameter of ones, shape [8], the only parameter", 8),
        _ModuleCase(f"[{b_}, {t_}, {d}] float32 with a trained weight", d,
                    _rms_scaled(rnd(b_, t_, d, shift=0.5), 1.0, g), weight=1 + 0.5 * rnd(d)),
        _ModuleCase(f"B = T = D [{n}, {n}, {n}] (a wrong axis still broadcasts)", n,
                    _rms_scaled(rnd(n, n, n, scale=2.0, shift=1.0), 1.0, g), weight=1 + 0.5 * rnd(n)),
        _ModuleCase(f"float16 row [{big:g}, -{big:g}, {big:g}, -{big:g}] (x**2 overflows float16)", 4,
                    torch.stack([torch.tensor([big, -big, big, -big]), rnd(4, shift=2.5)]).to(torch.float16)),
        _ModuleCase(f"bfloat16 [{b_}, {t_}, 8] with a trained weight", 8, rnd(b_, t_, 8).to(torch.bfloat16),
                    weight=1 + 0.5 * rnd(8)),
        _ModuleCase(f"RMSNorm({d5}, eps=1e-4) on tiny values (where eps sits matters)", d5,
                    _rms_scaled(rnd(2, d5), 1e-3, g), eps=1e-4),
        _ModuleCase(f"default eps: RMSNorm({d4}) on values of RMS 1e-3 to 2e-3 (eps=1e-6 is felt)", d4,
                    _rms_scaled(rnd(2, d4), 1e-3, g)),
    ]


def draw_block_battery(g) -> list:
    """A drawn pre-norm-block battery, the kinds of case of
    :func:`normref.checks.block._block_battery`: the build (its attributes, and forward on a drawn
    ``[B, T, 8]`` input changes it as a block does); the wiring
    on ``[B, T, 8]`` through the course's attention and feed-forward net (weights drawn) and
    two RMSNorms with different trained gammas; the same with two LayerNorms with gammas and
    betas; the student's own submodules on ``[B, T, 8]``."""
    import torch

    from normref.blocks import CausalSelfAttention, FeedForward
    from normref.checks.block import NORM_X_SCALE, NORM_X_SHIFT, _BlockCase
    from normref.modules import LayerNorm, RMSNorm

    def rnd(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    def parts(norm_cls):
        with torch.random.fork_rng():
            torch.manual_seed(int(torch.randint(2**31 - 1, (1,), generator=g)))
            attn, mlp = CausalSelfAttention(8, 2), FeedForward(8, 16)
        n1, n2 = norm_cls(8), norm_cls(8)
        with torch.no_grad():
            for n in (n1, n2):
                n.weight.copy_(1 + 0.5 * rnd(8))
                if getattr(n, "bias", None) is not None:
                    n.bias.copy_(0.3 * rnd(8))
        return attn, mlp, n1, n2

    b1, t1, b2, t2 = _pick(g, [2, 3]), _pick(g, [3, 4, 5]), _pick(g, [3, 4, 5]), _pick(g, [4, 5, 6])
    b3, t3 = _pick(g, [2, 3]), _pick(g, [3, 4, 5])
    b0, t0 = _pick(g, [2, 3]), _pick(g, [3, 4, 5])
    cases = [
        _BlockCase("build: block_cls(8, 2) has input_layernorm, self_attn, post_attention_layernorm, mlp (two "
                   f"norms that normalise), and its forward changes a [{b0}, {t0}, 8] input as a block does",
                   rnd(b0, t0, 8)),
        _BlockCase(f"wiring [{b1}, {t1}, 8]: known attention, feed-forward and two RMSNorms with different gammas",
                   rnd(b1, t1, 8, scale=2.0), parts(RMSNorm)),
        _BlockCase(f"wiring [{b2}, {t2}, 8]: two LayerNorms with different gammas and betas",
                   rnd(b2, t2, 8, scale=2.0, shift=0.5), parts(LayerNorm)),
        _BlockCase(f"your own block on [{b3}, {t3}, 8]: shape kept, and out = h + mlp(ln2(h)) with your modules",
                   rnd(b3, t3, 8), "own"),
    ]
    # the build case's norms, freshly built, must normalise a large input (drawn last: the draws
    # above are unchanged)
    cases[0].norm_x = rnd(b0, t0, 8, scale=NORM_X_SCALE, shift=NORM_X_SHIFT)
    return cases


def module_plan(cases: list) -> list[dict]:
    """The kernel's plan (:func:`normref.handback.run_plan`) for
    :func:`normref.checks.check_rms_norm_module` on ``cases`` (``_ModuleCase``): construct
    ``cls(dim)`` or ``cls(dim, eps=...)``, report ``weight`` and the parameters, load the
    trained weight, call ``forward(x)``."""
    plan = []
    for c in cases:
        plan.append({"new": [(c.dim,), {} if c.eps is None else {"eps": c.eps}], "attrs": ["weight"],
                     "load": None if c.weight is None else {"weight": c.weight}, "forward": c.x})
    return plan


def block_plan(cases: list) -> list[dict]:
    """The kernel's plan for :func:`normref.checks.check_pre_ln_block` on ``cases``
    (``_BlockCase``): build ``block_cls(8, 2)`` (RNG state kept), report the four attributes;
    on a wiring case swap in the checker's submodules, on the own case call the student's
    submodules in the reference wiring (``h = x + attn(ln1(x))``, then ``mlp(ln2(h))``, as
    :func:`normref.checks.block._block_reference`); on the build case call each freshly built
    norm on the case's large input (``trace``, before ``forward``: the checker's
    :func:`normref.checks.block._norm_case`); then ``forward(x)``."""
    from normref.checks.block import _BLOCK_ATTRS, _BLOCK_DIM, _BLOCK_HEADS, _NORM_ATTRS, _PART_ATTRS

    plan = []
    for c in cases:
        step = {"new": [(_BLOCK_DIM, _BLOCK_HEADS), {}], "seeded": True, "copy_module": True,
                "attrs": list(_BLOCK_ATTRS),
                "forward": c.x}
        if c.parts == "own":
            step["trace"] = {"x": c.x, "calls": [["input_layernorm", "x"], ["self_attn", "r0"],
                                                 ["post_attention_layernorm", ["+", "x", "r1"]], ["mlp", "r2"]]}
        elif c.parts is not None:
            step["swap"] = [[a, p] for a, p in zip(_PART_ATTRS, c.parts)]
        elif getattr(c, "norm_x", None) is not None:  # the build case: each norm, freshly built, on a large input
            step["trace"] = {"x": c.norm_x, "calls": [[a, "x"] for a in _NORM_ATTRS]}
        plan.append(step)
    return plan


# What counts as running a reference: normref.rules' lists, which the student's self-check uses too.
from normref.rules import BACKWARD_REFERENCE, BLOCK_REFERENCE, NORM_REFERENCE, PLACEMENT_REFERENCE  # noqa: E402


@dataclass(frozen=True)
class Question:
    """One question scored outside the kernel: its checker, where that checker gets its
    battery (``module.attr``, replaced by the drawn one while the grader runs it), what counts
    as calling the reference (:class:`normref.handback.ReferenceRecorder`'s arguments), and
    whose words the rule is stated in."""

    check: Callable
    module: str | None
    attr: str | None
    draw: Callable | None
    reference: dict = field(default_factory=dict)
    backend: str = "torch"
    #: a visible check: the checker's own (public) cases, all or nothing; ``public`` names
    #: that checker and its arguments, so the kernel makes the public calls itself
    all_or_nothing: bool = False
    public: tuple | None = None
    #: what the kernel hands back: ``"function"`` (outputs of the checker's calls), ``"class"``
    #: (the record of ``plan(cases)``, :func:`normref.handback.run_plan`) or ``"values"`` (a
    #: short answer's values, checked by ``check(values)``)
    kind: str = "function"
    plan: Callable | None = None
    #: a class question's visible check: how many of the public battery's cases it runs
    head: int | None = None


def _checks():
    from normref import checks

    from . import backward  # noqa: F401 - registers the backward's grammar with normref.diagnosis

    return checks


def _analytic_backward():
    """The grader's analytic LayerNorm backward (``grader/backward.py``), not in the student package."""
    from .backward import layer_norm_backward

    return layer_norm_backward


_NORMS = NORM_REFERENCE
QUESTIONS: dict[str, Question] = {
    "rms_norm_battery": Question(lambda fn: _checks().check_rms_norm(fn), "normref.checks.norms", "battery",
                                 lambda g: draw_norm_battery("rms", "torch", g), _NORMS),
    "layer_norm_battery": Question(lambda fn: _checks().check_layer_norm(fn, "numpy"), "normref.checks.norms",
                                   "battery", lambda g: draw_norm_battery("layer", "numpy", g), _NORMS, "numpy"),
    "layer_norm_backward_gradcheck": Question(
        lambda fn: _checks().check_layer_norm_backward(fn, reference=_analytic_backward()),
        "normref.checks.backward", "_backward_battery",
        draw_backward_battery, BACKWARD_REFERENCE, "numpy"),
    "pre_ln_battery": Question(lambda fn: _checks().check_pre_ln(fn), "normref.checks.placement",
                               "_placement_battery", draw_placement_battery, PLACEMENT_REFERENCE),
    "post_ln_battery": Question(lambda fn: _checks().check_post_ln(fn), "normref.checks.placement",
                                "_placement_battery", draw_placement_battery, PLACEMENT_REFERENCE),
}
# The visible checks are scored outside the kernel too, on their public cases, all or nothing.
_VISIBLE = {  # grade_id: (checker, its arguments after fn, cases counted, the battery's question)
    "rms_norm_shape": ("check_rms_norm", ((), {"quick": True}), None, "rms_norm_battery"),
    "layer_norm_seed": ("check_layer_norm", (("numpy",), {"quick": True}), None, "layer_norm_battery"),
    "layer_norm_backward_seed": ("check_layer_norm_backward", ((), {}), 2, "layer_norm_backward_gradcheck"),
    "pre_ln_quick": ("check_pre_ln", ((), {}), 2, "pre_ln_battery"),
    "post_ln_quick": ("check_post_ln", ((), {}), 2, "post_ln_battery"),
}


def _public_check(name: str, args: tuple, kwargs: dict, head: int | None) -> Callable:
    def check(fn):
        result = getattr(_checks(), name)(fn, *args, **kwargs)
        return result if head is None else result.head(head)

    return check


for _gid, (_name, (_args, _kwargs), _head, _battery) in _VISIBLE.items():
    QUESTIONS[_gid] = Question(_public_check(_name, _args, _kwargs, _head), None, None, None,
                               QUESTIONS[_battery].reference, QUESTIONS[_battery].backend,
                               all_or_nothing=True, public=(_name, _args, _kwargs))

# The modern assignment (lesson 04): Peri-LN, QK-norm logits and DyT, drawn in grader/modern_batteries.py.
from normref.rules import DYT_REFERENCE, PERI_REFERENCE, QK_REFERENCE  # noqa: E402

from .modern_batteries import draw_dyt_battery, draw_peri_battery, draw_qk_battery  # noqa: E402

_MODERN = (("peri_ln", "check_peri_ln", "_peri_battery", draw_peri_battery, PERI_REFERENCE),
           ("qk_logits", "check_qk_norm_logits", "_qk_battery", draw_qk_battery, QK_REFERENCE),
           ("dyt", "check_dyt", "_dyt_battery", draw_dyt_battery, DYT_REFERENCE))
for _gid, _name, _attr, _draw, _ref in _MODERN:
    QUESTIONS[f"{_gid}_battery"] = Question(_public_check(_name, (), {}, None), "normref.checks.modern", _attr,
                                            _draw, _ref)
    QUESTIONS[f"{_gid}_quick"] = Question(_public_check(_name, (), {"quick": True}, None), None, None, None, _ref,
                                          all_or_nothing=True, public=(_name, (), {"quick": True}))

# Classes (the block assignment's RMSNorm module and PreNormBlock): the grader decides every
# call (:func:`module_plan`, :func:`block_plan`), the kernel performs them and records what
# happened (:func:`normref.handback.run_plan`), the checker judges the record (:class:`ReplayClass`).
_BLOCK_REFERENCE = BLOCK_REFERENCE
QUESTIONS.update({
    "rms_module_battery": Question(lambda cls: _checks().check_rms_norm_module(cls), "normref.checks.module",
                                   "_module_battery", draw_module_battery, _NORMS, kind="class", plan=module_plan),
    "rms_module_quick": Question(lambda cls: _checks().check_rms_norm_module(cls, quick=True),
                                 "normref.checks.module", "_module_battery", None, _NORMS, all_or_nothing=True,
                                 kind="class", plan=module_plan, head=2),
    "block_battery": Question(lambda cls: _checks().check_pre_ln_block(cls), "normref.checks.block",
                              "_block_battery", draw_block_battery, _BLOCK_REFERENCE, kind="class", plan=block_plan),
    "block_quick": Question(lambda cls: _checks().check_pre_ln_block(cls, quick=True), "normref.checks.block",
                            "_block_battery", None, _BLOCK_REFERENCE, all_or_nothing=True, kind="class",
                            plan=block_plan, head=2),
})

#: The practice assignment's short answers: grade_id -> (normref.answers checker, its setting
#: as the notebook's visible check passes it). The kernel hands back the answers' values.
PRACTICE = {
    "practice_mean_var": ("check_mean_var", {"x": (1, 3, 5, 7)}),
    "practice_layer_norm": ("check_layer_norm_2244", {"x": (1, 3, 5, 7)}),
    "practice_rms": ("check_rms_34", {"x": (5, 12)}),
    "practice_subtracts_mean": ("check_rms_subtracts_mean", {"ask": "shift_changes_output"}),
    "practice_pre_ln_formula": ("check_pre_ln_formula", {"sublayer": "ffn"}),
    "practice_shape": ("check_norm_changes_shape", {"ask": "keeps"}),
    "trace_rms_shape": ("check_rms_shape", {"x_shape": (4, 5, 6)}),
    "retrieval_stats_axis": ("check_stats_axis", {"layout": "BDT"}),
}


def _answer_check(name: str, kwargs: dict) -> Callable:
    def check(values):
        from normref import answers

        return getattr(answers, name)(*values, **kwargs)

    return check


for _gid, (_name, _kwargs) in PRACTICE.items():
    QUESTIONS[_gid] = Question(_answer_check(_name, _kwargs), None, None, None, {}, kind="values")


def plan_cases(grade_id: str, seed: int) -> list:
    """A class question's cases: its drawn battery for this seed, or for a visible check the
    first ``head`` cases of the checker's own (public) battery."""
    import importlib

    from normref.checks.core import seeded

    q = QUESTIONS[grade_id]
    if q.draw is not None:
        return drawn_cases(grade_id, seed)
    # the block's public battery seeds torch's global RNG: never while another thread draws
    with _CHECKER_LOCK, seeded():
        return getattr(importlib.import_module(q.module), q.attr)()[:q.head]


@contextmanager
def _drawn(q: Question, cases: list):
    import importlib

    module = importlib.import_module(q.module)
    with mock.patch.object(module, q.attr, lambda *a, **k: cases):
        yield


#: One checker at a time per process: a checker's battery is put in place by patching its module
#: (:func:`_drawn`), a battery's sublayers (and the block's public battery, :func:`plan_cases`)
#: are built under torch's global RNG, and the checkers' source scan (``ast``) is not safe in
#: concurrent threads on Python 3.11. Two scorings at once in threads (test_assignments grades
#: two assignments so) swapped batteries or reseeded a draw half-way: a correct Post-LN scored 0
#: of 4, a correct block 2 of 4, in fresh-clone runs. Reentrant: :func:`probe_calls` runs
#: :func:`run_check` inside it.
_CHECKER_LOCK = threading.RLock()


def drawn_cases(grade_id: str, seed: int) -> list:
    """The battery of ``grade_id`` for this seed (the same every time for one seed)."""
    with _CHECKER_LOCK:
        return QUESTIONS[grade_id].draw(_gen(seed, grade_id))


def run_check(grade_id: str, seed: int, fn):
    """``grade_id``'s checker on its drawn battery (a visible check: on its own public cases),
    with ``fn`` as the student's function: a :class:`normref.checks.CheckResult`. (In grading
    ``fn`` is a :class:`Replay`.)"""
    q = QUESTIONS[grade_id]
    with _CHECKER_LOCK:
        if q.draw is None:
            return q.check(fn)
        with _drawn(q, drawn_cases(grade_id, seed)):
            return q.check(fn)


# --------------------------------------------------------------------------- the inputs


def probe_calls(grade_id: str, seed: int) -> list[tuple[tuple, dict, bool]]:
    """The calls ``grade_id``'s checker makes of the student's function on the drawn battery:
    ``[(args, kwargs, grad enabled)]`` (copies, in order)."""
    from normref.handback import probe

    return probe(lambda fn: run_check(grade_id, seed, fn))


def new_seed() -> int:
    """A secret seed for one grading run."""
    return secrets.randbits(62)


def question_inputs(grade_id: str, seed: int) -> str:
    """What the kernel is given for ``grade_id`` (:func:`normref.wire.dump_inputs`): a function's
    calls (``None`` for a visible check: the kernel makes its public cases), a class's plan, or
    nothing to draw for a short answer; a numpy or short-answer question's without torch."""
    q = QUESTIONS[grade_id]
    if q.kind == "class":  # the plan of calls (a visible check's public cases, too)
        data = {"kind": "class", "plan": q.plan(plan_cases(grade_id, seed)), "reference": q.reference,
                "visible": q.all_or_nothing}
    elif q.kind == "values":  # a short answer: nothing to draw, the kernel hands back values
        data = {"kind": "values"}
    else:
        calls = None if q.public else probe_calls(grade_id, seed)  # public cases: the kernel makes them
        data = {"calls": calls, "public": q.public, "reference": q.reference}
    # a numpy or short-answer question's kernel reads its inputs without importing torch
    return dump_inputs(data, torch_free=q.backend == "numpy" or q.kind == "values")


def prepare_inputs(course_root: Path, *, seed: int | None = None, log=print,
                   set_env: bool = True) -> tuple[int, Path]:
    """Draw this run's graded inputs and point nbgrader's autograde at them.

    Writes ``logs/scoring/handback-inputs.json`` (``{grade_id: text}``, :func:`question_inputs`;
    the grader's alone, mode 0600, outside every sandbox: the autograde preprocessor
    ``HandbackInputs`` of ``nbgrader_config.py`` writes each question's into its hidden test just
    before it runs), appends the seed to ``logs/scoring/seeds.jsonl`` (what reproduces the
    grades), and sets ``NORMREF_HANDBACK_INPUTS`` to the inputs file in this process's
    environment (unless ``set_env`` is False: then pass it to nbgrader yourself), which
    nbgrader's autograde inherits. No kernel is given the variable or the folder.

    Returns:
        ``(seed, inputs file)``.
    """
    root = Path(course_root)
    seed = new_seed() if seed is None else seed
    folder = root / "logs" / SCORING_DIR
    folder.mkdir(parents=True, exist_ok=True)
    inputs = {gid: question_inputs(gid, seed) for gid in QUESTIONS}
    path = folder / INPUTS_FILE
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(inputs, f)
    with (folder / "seeds.jsonl").open("a") as f:
        f.write(json.dumps({"time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "seed": seed,
                            "questions": sorted(QUESTIONS)}) + "\n")
    if set_env:
        os.environ[ENV] = str(path.resolve())
    log(f"scoring: graded inputs drawn for {len(QUESTIONS)} questions (seed in {folder / 'seeds.jsonl'})")
    return seed, path


def inputs_stage(b) -> None:
    """``grade_class`` stage before autograde: draw this run's graded inputs (a new seed)."""
    b.scoring_seed, _ = prepare_inputs(b.tree.root, log=b.log)
