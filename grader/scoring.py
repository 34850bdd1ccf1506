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
   checker makes (arguments and keyword arguments) to ``<inputs>/<grade_id>.pt``: the kernel's
   only view of the question (``NORMREF_HANDBACK_DIR``, read-only in the sandbox), locked with a
   key of its own (new every run, in ``logs/scoring/handback-keys.json``, outside the sandbox)
   that the autograde preprocessor ``HandbackKeys`` (``nbgrader_config.py``) writes into that
   question's hidden test just before it runs.
2. In the kernel, the hidden test ``hand_back(grade_id, fn)`` (:mod:`normref.handback`) makes
   those calls and shows the outputs (or exceptions) as one output of its MIME type.
3. :func:`score_notebook`, after autograde, reads that output from the autograded notebook
   (nothing pickled: arrays as ``.npy``, tensors with dtype and shape), replays it through
   the same checker on the same cases (:class:`Replay` stands in for the student's function),
   and :func:`score_class` writes ``points x score`` into nbgrader's gradebook (``Grade``
   rows) and the checker's diagnosis into the autograded notebook (what the feedback shows),
   with, in that output's metadata, the record of what the outputs computed case by case (the
   class report groups wrong answers by it, :mod:`grader.groups`, without running any code).

The same holds for classes and short answers. A class question (the block assignment's
``RMSNorm`` module and ``PreNormBlock``) hands back the record of a plan the grader decides
(:func:`module_plan`, :func:`block_plan`: construct with given arguments, report the named
parameters and submodules, load given weights, swap in the checker's known submodules, call
the student's own submodules in the reference wiring, call ``forward`` on drawn inputs;
:func:`normref.handback.run_plan` performs it); :class:`ReplayClass` rebuilds the modules from
that record for the same checker. A short answer (the practice assignment, :data:`PRACTICE`)
hands back its values (:func:`normref.handback.encode_answer`), checked here by its
``normref.answers`` checker with the setting its visible check shows.

A cell that hands back no outputs, or more than one set, scores 0 (flagged when it is more
than one). The student's code never sees a score, a checker or the reference's outputs.
"""
from __future__ import annotations

import base64
import builtins
import io
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

import nbformat
import numpy as np

from normref.faults import METADATA_KEY, output_metadata
from normref.handback import ENV, MIME, dump_inputs, lock, question_key
from normref.handback_files import KEYS_FILE, SCORING_DIR

from .draws import pick as _pick
from .draws import token as _token

# The run's question keys (``{grade_id: hex}``, normref.handback_files.KEYS_FILE), beside the seeds
# in ``logs/scoring/`` (outside every sandbox): read by the autograde preprocessor that writes each
# key into its hidden test cell (``HandbackKeys`` in ``nbgrader_config.py``), found from
# ``$NORMREF_HANDBACK_DIR``'s parent folder as ``scoring/handback-keys.json``.


def keys_path(inputs: Path) -> Path:
    """Where the keys of the inputs in ``inputs`` (``logs/handback``) are: ``logs/scoring/handback-keys.json``."""
    return Path(inputs).parent / SCORING_DIR / KEYS_FILE

__all__ = ["QUESTIONS", "PRACTICE", "prepare_inputs", "score_notebook", "score_class", "Replay", "ReplayClass",
           "decode_answer", "module_plan", "block_plan", "Scored", "inputs_id",
           "RECORD_KEY", "annotate_notebook"]


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


def prepare_inputs(course_root: Path, *, seed: int | None = None, log=print,
                   set_env: bool = True) -> tuple[int, Path]:
    """Draw this run's graded inputs and point the kernels at them.

    Writes ``logs/handback/<grade_id>.pt`` (what the kernels may read, each locked with a key of
    its own, new every run: :func:`normref.handback.lock`; the keys go to
    ``logs/scoring/handback-keys.json``, which no kernel can read) and appends the seed to
    ``logs/scoring/seeds.jsonl`` (what reproduces the grades; no kernel can read ``logs/``), and
    sets ``NORMREF_HANDBACK_DIR`` in this process's environment (unless ``set_env`` is
    False: then pass it to nbgrader yourself), which nbgrader's autograde processes and the
    sandbox inherit.

    Returns:
        ``(seed, inputs folder)``.
    """
    root = Path(course_root)
    seed = new_seed() if seed is None else seed
    inputs = root / "logs" / "handback"
    inputs.mkdir(parents=True, exist_ok=True)
    master, keys = secrets.token_bytes(32), {}
    for gid in QUESTIONS:
        q = QUESTIONS[gid]
        if q.kind == "class":  # the plan of calls (a visible check's public cases, too)
            data = {"kind": "class", "plan": q.plan(plan_cases(gid, seed)), "reference": q.reference,
                    "visible": q.all_or_nothing}
        elif q.kind == "values":  # a short answer: nothing to draw, the kernel hands back values
            data = {"kind": "values"}
        else:
            calls = None if q.public else probe_calls(gid, seed)  # public cases: the kernel makes them
            data = {"calls": calls, "public": q.public, "reference": q.reference}
        # a numpy or short-answer question's kernel reads its inputs without importing torch
        blob = dump_inputs(data, torch_free=q.backend == "numpy" or q.kind == "values")
        key = question_key(master, gid)
        keys[gid] = key.hex()
        (inputs / f"{gid}.pt").write_bytes(lock(key, blob))
    seeds = root / "logs" / SCORING_DIR
    seeds.mkdir(parents=True, exist_ok=True)
    kp = keys_path(inputs)
    kp.unlink(missing_ok=True)
    fd = os.open(kp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(keys, f)
    with (seeds / "seeds.jsonl").open("a") as f:
        f.write(json.dumps({"time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "seed": seed,
                            "questions": sorted(QUESTIONS)}) + "\n")
    if set_env:
        os.environ[ENV] = str(inputs.resolve())
    log(f"scoring: graded inputs drawn for {len(QUESTIONS)} questions (seed in {seeds / 'seeds.jsonl'})")
    return seed, inputs


# --------------------------------------------------------------------------- the outputs


def _npy(s: str) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(s)), allow_pickle=False)


def _opaque(type_name: str):
    name = type_name if str(type_name).isidentifier() else "object"
    return type(name, (), {"__repr__": lambda self: f"<{name}>"})()


def decode(d: dict):
    """The inverse of :func:`normref.handback.encode` (no pickles: ``.npy`` and JSON only)."""
    import torch

    t = d.get("t")
    if t == "torch":
        dtype = getattr(torch, str(d.get("dtype")), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown dtype {d.get('dtype')!r}")
        return torch.from_numpy(np.array(_npy(d["npy"]))).to(dtype)
    if t == "numpy":
        return _npy(d["npy"])
    if t == "seq":
        items = [decode(i) for i in d.get("items", [])][:16]
        return list(items) if d.get("type") == "list" else tuple(items)
    if t == "py":
        v = d.get("value")
        return v if v is None or isinstance(v, (bool, int, float)) else _opaque(type(v).__name__)
    return _opaque(d.get("type", "object"))


def _exception(name: str, message: str) -> Exception:
    cls = getattr(builtins, name, None) if str(name).isidentifier() else None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = type(name if str(name).isidentifier() else "Error", (Exception,), {})
    try:
        return cls(message)
    except Exception:  # noqa: BLE001 - an exception class with odd arguments
        return RuntimeError(f"{name}: {message}")


class Replay:
    """Stands in for the student's function while the grader's checker runs: each call gives
    back what the student's function gave back on that call in the kernel (its output, its
    exception, a timeout), and modifies the inputs as the student's call did."""

    __name__ = "replay"

    def __init__(self, records: list[dict]):
        self.records = records
        self.i = 0

    def __call__(self, *args, **kwargs):
        import torch

        from normref.checks.core import _Timeout

        rec = self.records[self.i] if self.i < len(self.records) else {
            "raised": ["RuntimeError", "no output was handed back for this call"]}
        self.i += 1
        for k, enc in (rec.get("after") or {}).items():
            i = int(k)
            try:
                new = decode(enc)
                if isinstance(args[i], torch.Tensor) and args[i].shape == new.shape:
                    args[i].copy_(new)
                elif isinstance(args[i], np.ndarray) and args[i].shape == new.shape:
                    args[i][...] = new
            except (IndexError, ValueError, TypeError, RuntimeError, KeyError):
                pass
        if rec.get("timeout"):
            raise _Timeout()
        if "raised" in rec:
            name, message = (list(rec["raised"]) + ["", ""])[:2]
            raise _exception(str(name), str(message))
        return decode(rec.get("out", {}))


def _raise_recorded(rec: dict, what: str):
    """Raise what the kernel recorded for one call (a timeout, the student's exception)."""
    from normref.checks.core import _Timeout

    if rec.get("timeout"):
        raise _Timeout()
    if "raised" in rec:
        name, message = (list(rec["raised"]) + ["", ""])[:2]
        raise _exception(str(name), str(message))
    if "out" not in rec:
        raise RuntimeError(f"{what}: nothing was handed back for this call")


def _replay_types():
    """The :class:`torch.nn.Module` stand-ins of :class:`ReplayClass` (made once, on first use:
    importing this module does not import torch)."""
    global _REPLAY_TYPES
    if _REPLAY_TYPES is not None:
        return _REPLAY_TYPES
    import torch
    from torch import nn

    class ReplayPart(nn.Module):
        """One of the student's submodules: each call checks that the grader's checker passes
        the input the kernel used (the grader's wiring), then gives back the kernel's output."""

        def __init__(self, name: str):
            super().__init__()
            self.replay_name = name
            self.replay_queue: list[dict] = []

        def forward(self, *args, **kwargs):
            if not self.replay_queue:
                raise RuntimeError(f"{self.replay_name}: this call was not made in the grading kernel")
            rec = self.replay_queue.pop(0)
            try:
                want = decode(rec.get("in", {}))
            except (ValueError, TypeError, KeyError):
                want = None
            got = args[0] if args else None
            if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor) and got.shape == want.shape
                    and got.dtype == want.dtype and torch.equal(got, want)):
                raise RuntimeError(f"{self.replay_name}: the grading kernel called it on other inputs than "
                                   "the grader's wiring")
            _raise_recorded(rec, self.replay_name)
            return decode(rec["out"])

    class ReplayModule(nn.Module):
        """The student's built module as the kernel reported it (its tensors with their values,
        its submodules as :class:`ReplayPart`, which attributes are one object, its parameter
        names); ``forward`` gives back the kernel's output on the grader's input (and modifies
        the input as the student's call did)."""

        def __init__(self, rec: dict, case: dict):
            super().__init__()
            report = rec.get("report") if isinstance(rec.get("report"), dict) else {}
            self.replay_forward = rec.get("forward") if isinstance(rec.get("forward"), dict) else {}
            self.replay_params = report.get("params", [])
            objects: dict = {}
            attrs = report.get("attrs") if isinstance(report.get("attrs"), dict) else {}
            for name in (case.get("attrs") or ()):
                d = attrs.get(name)
                if not isinstance(d, dict) or d.get("kind") in (None, "absent"):
                    continue
                kind = d["kind"]
                if kind == "same":
                    obj = objects.get(str(d.get("as")))
                elif kind == "tensor":
                    try:
                        t = decode(d.get("value", {}))
                    except (ValueError, TypeError, KeyError):
                        t = None
                    if not isinstance(t, torch.Tensor):
                        obj = _opaque("Tensor")
                    elif d.get("param"):
                        obj = nn.Parameter(t, requires_grad=t.is_floating_point())
                    else:
                        obj = t
                elif kind in ("module", "callable"):
                    obj = ReplayPart(name)
                else:
                    obj = _opaque(d.get("type", "object"))
                if obj is None:
                    continue
                objects[name] = obj
                setattr(self, name, obj)
            trace = rec.get("trace") if isinstance(rec.get("trace"), list) else []
            calls = (case.get("trace") or {}).get("calls", [])
            for (name, _), one in zip(calls, trace):  # each traced call to the object it was made on
                part = objects.get(name)
                if isinstance(part, ReplayPart) and isinstance(one, dict):
                    part.replay_queue.append(one)

        def named_parameters(self, *args, **kwargs):
            if isinstance(self.replay_params, dict):
                _raise_recorded(self.replay_params, "named_parameters")
            for name in self.replay_params if isinstance(self.replay_params, list) else []:
                p = getattr(self, str(name), None) if "." not in str(name) else None
                yield str(name), p if isinstance(p, nn.Parameter) else nn.Parameter(torch.zeros(0))

        def forward(self, *args, **kwargs):
            if not self.replay_forward:
                raise RuntimeError("forward: nothing was handed back for this call")
            return Replay([self.replay_forward])(*args, **kwargs)

    _REPLAY_TYPES = (ReplayModule, ReplayPart)
    return _REPLAY_TYPES


_REPLAY_TYPES = None


class ReplayClass:
    """Stands in for the student's class while the grader's checker runs: the i-th
    construction gives back the module the kernel built for the plan's i-th case (or raises
    what its constructor raised), rebuilt from the kernel's record (:func:`_replay_types`).

    Args:
        records: the kernel's records (:func:`normref.handback.run_plan`), one per case.
        plan: the plan those records answer (the grader's own, recomputed from the seed).
    """

    __name__ = "replay"

    def __init__(self, records: list[dict], plan: list[dict]):
        self.records, self.plan, self.i = records, plan, 0

    def __call__(self, *args, **kwargs):
        i, self.i = self.i, self.i + 1
        rec = self.records[i] if i < len(self.records) and isinstance(self.records[i], dict) else {}
        new = rec.get("new") if isinstance(rec.get("new"), dict) else {
            "raised": ["RuntimeError", "nothing was handed back for this case"]}
        if not new.get("module"):
            if "raised" in new or new.get("timeout"):
                _raise_recorded(new, "the class")
            return _opaque(new.get("type", "object"))
        return _replay_types()[0](rec, self.plan[i] if i < len(self.plan) else {})


class _Shown:
    """A short answer of a type the kernel hands back only as text (and a number, if it is one)."""

    def __init__(self, text: str, number: float | None):
        self.text, self.number = text, number

    def __repr__(self) -> str:
        return self.text

    def __array__(self, dtype=None, copy=None):
        if self.number is None:
            raise TypeError(f"{self.text} is not a number")
        return np.asarray(self.number, dtype=dtype)


def decode_answer(d: dict, depth: int = 0):
    """The inverse of :func:`normref.handback.encode_answer` (JSON and ``.npy`` only): the
    answer as the checker would have seen it in the kernel; an object of another type comes
    back as its text (and number), under its type's name."""
    import torch

    t = d.get("t") if isinstance(d, dict) else None
    if t == "py":
        v = d.get("value")
        return v if v is None or isinstance(v, (bool, int, float)) else _opaque(type(v).__name__)
    if t == "float":
        return float(str(d.get("repr"))) if str(d.get("repr")) in ("nan", "inf", "-inf") else float("nan")
    if t == "str":
        return str(d.get("value", ""))
    if t == "ellipsis":
        return Ellipsis
    if t == "seq" and depth < 3:
        items = [decode_answer(i, depth + 1) for i in list(d.get("items", []))[:64]]
        if d.get("type") == "Size":
            try:
                return torch.Size(items)
            except (TypeError, ValueError):
                return tuple(items)
        return items if d.get("type") == "list" else tuple(items)
    if t == "npscalar":
        return _npy(d["npy"])[()]
    if t in ("torch", "numpy"):
        return decode(d)
    if t == "repr":
        name = d.get("type") if str(d.get("type")).isidentifier() else "object"
        number = d.get("number") if isinstance(d.get("number"), (int, float)) else None
        return type(name, (_Shown,), {})(str(d.get("repr", ""))[:500], number)
    return _opaque(d.get("type", "object") if isinstance(d, dict) else "object")


@dataclass
class Scored:
    """One question of one notebook, scored outside the kernel.

    Attributes:
        grade_id: the hidden test's cell.
        fraction: the checker's score on the drawn battery, 0..1.
        text: the diagnosis the feedback shows.
        flags: what the report should say (several hand-backs in one cell, a reference call).
        faults, variants: the diagnosed fault kinds, for the class report (output metadata).
        record: what the handed-back outputs computed, case by case
            (:func:`normref.diagnosis.record.result_record`), for the class report's groups of
            wrong answers; None for a visible check or a cell scored 0 without replaying it.
    """

    grade_id: str
    fraction: float
    text: str
    flags: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    record: dict | None = None


#: Where :func:`score_class` keeps a question's record in its test cell's output metadata
#: (under :data:`normref.faults.METADATA_KEY`), read by :mod:`grader.groups`.
RECORD_KEY = "record"


def inputs_id(seed: int) -> str:
    """An id of one run's drawn inputs (the same for every student of the run), not the seed."""
    import hashlib

    return hashlib.sha256(f"normref-inputs:{seed}".encode()).hexdigest()[:16]


def _handbacks(cell) -> list[dict]:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") in ("display_data", "execute_result") and MIME in o.get("data", {}):
            out.append(o["data"][MIME])
    return out


def score_notebook(nb, seed: int) -> dict[str, Scored]:
    """Score every :data:`QUESTIONS` cell of an autograded notebook from its handed-back
    outputs: ``{grade_id: Scored}``. A cell with no hand-back (the student's code never got
    there, e.g. the function is undefined) or several scores 0."""
    out = {}
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cell.cell_type != "code" or gid not in QUESTIONS:
            continue
        found = [h for h in _handbacks(cell) if isinstance(h, dict)]
        if len(found) != 1 or found[0].get("grade_id") != gid:
            flags = ([f"{gid}: {len(found)} sets of outputs in one test cell (one is handed back): scored 0"]
                     if len(found) > 1 else [])
            removed = _removed_answer(nb, cell)
            if removed:
                # the scan's reference-call removal is the reference_call fault the report counts
                kinds = ["reference_call"] if _REFERENCE_REASON in removed else []
                out[gid] = Scored(gid, 0.0, f"{gid}: 0 points: {removed}", flags, kinds)
                continue
            errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in cell.get("outputs", [])
                      if o.get("output_type") == "error"]
            why = errors[-1] if errors else "no outputs were handed back"
            out[gid] = Scored(gid, 0.0, f"{gid}: not graded ({why}): 0 points", flags)
            continue
        changed = found[0].get("changed")
        if changed:
            names = ", ".join(str(c)[:120] for c in list(changed)[:8]) if isinstance(changed, list) else "?"
            out[gid] = Scored(gid, 0.0, f"{gid}: 0 points: the grader's hand-back code was changed in the kernel "
                              f"before it ran ({names}); a hand-back that may not be the grader's is not scored",
                              [f"{gid}: changed the grader's hand-back in the kernel ({names}): scored 0"],
                              [])
            continue
        q = QUESTIONS[gid]
        if q.kind == "values":
            out[gid] = _score_values(gid, seed, found[0])
            continue
        calls = found[0].get("cases" if q.kind == "class" else "calls")
        if isinstance(calls, dict) and "not_callable" in calls:
            result = run_check(gid, seed, _opaque(calls["not_callable"]))
            calls = []
        elif q.kind == "class":
            records = [r if isinstance(r, dict) else {} for r in calls] if isinstance(calls, list) else []
            result = run_check(gid, seed, ReplayClass(records, q.plan(plan_cases(gid, seed))))
            # every recorded call of the student's code: forward, and the own submodules' calls
            calls = [c for r in records for c in [r.get("forward")] + list(r.get("trace") or [])]
        else:
            calls = calls if isinstance(calls, list) else []
            result = run_check(gid, seed, Replay(calls))
        refs = list(dict.fromkeys(str(w) for c in calls if isinstance(c, dict) for w in c.get("references", [])))
        text = ("The visible check, scored by the grader:\n" if QUESTIONS[gid].all_or_nothing
                else "Graded on new inputs drawn for this grading run:\n") + result.report()
        if refs:
            from normref.checks.core import rule_lines
            from normref.rules import rule_message

            # the student reads what the self-check said: one line per violation ("0 points:
            # calls torch's rms_norm — implement it with tensor operations"), not the cases'
            # "6/6 passed" beside it; the instructor's flags keep every record
            said = rule_lines(None, refs, QUESTIONS[gid].backend)
            out[gid] = Scored(gid, 0.0, "\n".join(f"{gid}: {r}" for r in said),
                              [f"{gid}: {rule_message(w, QUESTIONS[gid].backend)} (seen while it ran): scored 0"
                               for w in refs], ["reference_call"])
            continue
        fraction = float(result.passed) if QUESTIONS[gid].all_or_nothing else float(result.score)
        record = None
        if QUESTIONS[gid].draw is not None:
            from normref.diagnosis.record import result_record

            record = result_record(result, inputs_id(seed))
        out[gid] = Scored(gid, fraction, text, [], result.faults, result.variants, record)
    return out


#: How the grader's repair stage (grader/repair.py) replaces an answer cell it removed.
_REMOVED = "# The grader removed this cell: "
from .repair import REFERENCE_REASON as _REFERENCE_REASON  # noqa: E402 - beside the table it keys
_RULES = {"it tried to change how grading works":
          "code that changes how grading works (the grader's checkers, hand-back or recorder, the "
          "interpreter's or IPython's machinery, threads, TorchScript) is not allowed: the cell is "
          "removed and its question earns what a blank answer earns",
          _REFERENCE_REASON:
          "calling the reference normalization instead of implementing it earns what a blank answer "
          "earns: implement it with tensor operations"}


def _removed_answer(nb, test_cell) -> str | None:
    """Why this test cell's question has no hand-back, when the answer cell above it was removed by
    the grader's scan (the rule it broke, stated as the report states it), else None."""
    answer = None
    for cell in nb.cells:
        if cell is test_cell:
            break
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution") and cell.cell_type == "code":
            answer = cell
    if answer is None or not answer.source.startswith(_REMOVED):
        return None
    reason = answer.source[len(_REMOVED):].split("\n", 1)[0].strip().rstrip(".")
    aid = answer.metadata.get("nbgrader", {}).get("grade_id", "?")
    if reason not in _RULES:  # not the scan (e.g. the kernel died in this question's code)
        return f"the grader removed your answer cell {aid!r}: {reason}."
    return (f"the grader removed your answer cell {aid!r} before grading: {reason}. The rule: "
            f"{_RULES[reason]}. (The report names the line it found.)")


def _score_values(gid: str, seed: int, bundle: dict) -> Scored:
    """A short answer's handed-back values, checked here by its ``normref.answers`` checker."""
    values = bundle.get("values")
    values = [decode_answer(v) for v in values[:8]] if isinstance(values, list) else []
    try:
        result = run_check(gid, seed, tuple(values))
    except Exception as e:  # noqa: BLE001 - a hand-back of the wrong arity (a changed hidden test)
        return Scored(gid, 0.0, f"{gid}: not graded (the answers handed back could not be checked: "
                      f"{type(e).__name__}): 0 points")
    shown = [f"{type(v).__name__} {v!r}" for v in values if isinstance(v, _Shown)]
    note = (f"\n(handed to the grader as text, its type not being a number, tuple, string or bool: "
            f"{'; '.join(shown)})" if shown else "")
    return Scored(gid, float(result.score), "Checked by the grader:\n" + result.report() + note, [],
                  result.faults, result.variants)


def annotate_notebook(nb, seed: int) -> dict[str, Scored]:
    """:func:`score_notebook`, then each scored test cell's outputs replaced by one display of
    its diagnosis (what the feedback shows), whose metadata carries the fault kinds and the
    record of the outputs (``metadata["normref"]["record"]``, read by :mod:`grader.groups`).
    Changes ``nb`` in place; returns ``{grade_id: Scored}``."""
    scored = score_notebook(nb, seed)
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in scored:
            sc = scored[gid]
            meta = output_metadata(sc.faults, sc.variants)
            if sc.record is not None:
                meta[METADATA_KEY][RECORD_KEY] = sc.record
            cell.outputs = [nbformat.v4.new_output("display_data", data={"text/plain": sc.text}, metadata=meta)]
    return scored


def score_class(course_root: Path, pairs, seed: int, *, db_url: str | None = None,
                log=print) -> dict[tuple[str, str], list[str]]:
    """Score every autograded notebook of ``pairs`` (``[(assignment, student)]``): write
    ``points x fraction`` into the gradebook's ``Grade`` rows (``auto_score``) and the
    diagnosis into the notebook's test cell (the feedback shows it).

    Returns:
        ``{(assignment, student): [flags]}`` for the report.
    """
    from nbgrader.api import Gradebook

    root = Path(course_root)
    url = db_url or f"sqlite:///{root / 'gradebook.db'}"
    flags: dict[tuple[str, str], list[str]] = {}
    with Gradebook(url) as gb:
        for a, st in pairs:
            for path in sorted((root / "autograded" / st / a).glob("*.ipynb")):
                nb = nbformat.read(path, as_version=4)
                scored = annotate_notebook(nb, seed)
                if not scored:
                    continue
                for gid, s in scored.items():
                    try:
                        grade = gb.find_grade(gid, path.stem, a, st)
                    except Exception:  # noqa: BLE001 - nbgrader raises MissingEntry
                        continue
                    in_kernel = grade.auto_score
                    grade.auto_score = round(float(grade.max_score) * s.fraction, 2)
                    if (QUESTIONS[gid].all_or_nothing and in_kernel is not None and s.fraction == 0
                            and float(in_kernel) >= float(grade.max_score) > 0):
                        # same checker, same public inputs, same function: only a change made
                        # inside the kernel (or a function that is not deterministic) does this
                        s.flags.append(f"{gid}: the notebook's own check passed in its kernel, the grader's "
                                       "scoring of the same outputs did not (checkers changed at run time?): "
                                       "scored 0")
                    if s.flags:
                        flags.setdefault((a, st), []).extend(s.flags)
                gb.db.commit()
                nbformat.write(nb, path)
    return flags


# --------------------------------------------------------------------------- pipeline stages


def inputs_stage(b) -> None:
    """``grade_class`` stage before autograde: draw this run's graded inputs (a new seed)."""
    b.scoring_seed, _ = prepare_inputs(b.tree.root, log=b.log)


def scoring_stage(b) -> None:
    """``grade_class`` stage after autograde: score every graded notebook's handed-back
    outputs in this process and write the points into the gradebook; flags go to the report."""
    from .repair import Repair

    run = b.run
    pairs = list(run.autograde.graded) if run.autograde else []
    flags = score_class(b.tree.root, pairs, b.scoring_seed, db_url=b.tree.gradebook_url, log=b.log)
    for (a, st), notes in flags.items():
        run.repairs.setdefault((a, st), Repair(st, a)).flags.extend(notes)
    b.log(f"scoring: {len(pairs)} notebooks scored outside the kernels")
