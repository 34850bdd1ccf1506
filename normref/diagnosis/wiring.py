"""The grammar of a pre-norm block's wiring (the search behind ``check_pre_ln_block`` where its
answer cannot be traced, as in grading's replay; ``check_pre_ln``/``check_post_ln`` have none:
their answers' formulas are traced or identified, :mod:`.diagnose`).

A block (``check_pre_ln_block``) is ``h = post1(r1 + A(na(x)))``,
``out = post2(r2 + M(nm(s)))``, with the attention's norm ``na`` (input_layernorm, the other
norm, none), the first residual ``r1`` (``x``, ``na(x)``, none), a norm after the first add,
what the MLP reads ``s`` (``h`` or ``x``), the MLP's norm ``nm`` (post_attention_layernorm,
input_layernorm, none), the second residual ``r2`` (``h``, ``nm(h)``, ``x``, none) and a norm
after the second add. All evaluated in torch with the checker's own sublayers and norms.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .search import Choice, Grammar

__all__ = ["BlockCase", "block_grammar"]


@dataclass
class BlockCase:
    """``x [B, T, D]`` (torch) and the checker's attention ``A``, feed-forward ``M`` and the two
    norms ``N1`` (input_layernorm), ``N2`` (post_attention_layernorm)."""

    x: object
    A: Callable
    M: Callable
    N1: Callable
    N2: Callable


def _f64(t) -> np.ndarray:
    import torch

    return t.detach().to("cpu", torch.float64).numpy()


_BLOCK_REF = {"na": "N1", "r1": "x", "post1": False, "s": "h", "nm": "N2", "r2": "h", "post2": False}
_BLOCK_VALUES = {"na": ["N2", "none"], "r1": ["normed", "none"], "post1": [True], "s": ["x"],
                 "nm": ["N1", "none"], "r2": ["normed", "none", "x"], "post2": [True]}
_BLOCK_PHRASES = {
    ("na", "N2"): "fed attention post_attention_layernorm(x) instead of input_layernorm(x)",
    ("na", "none"): "fed attention x without input_layernorm",
    ("r1", "normed"): "added input_layernorm(x) instead of x on the first residual path",
    ("r1", "none"): "left out the first residual add (h = x + attention(...))",
    ("post1", True): "normalized h after the first residual add (Post-LN style)",
    ("s", "x"): "fed the feed-forward net the block's input x instead of h = x + attention(...)",
    ("nm", "N1"): "normalized the feed-forward input with input_layernorm instead of "
                  "post_attention_layernorm",
    ("nm", "none"): "fed the feed-forward net without post_attention_layernorm",
    ("r2", "normed"): "added post_attention_layernorm(h) instead of h on the second residual path",
    ("r2", "none"): "left out the second residual add (out = h + mlp(...))",
    ("r2", "x"): "added x instead of h on the second residual path",
    ("post2", True): "normalized the output after the second residual add (Post-LN style)",
}
_BLOCK_KNOWN = {("s", "x"): "mlp_reads_x", ("nm", "N1"): "shared_norm", ("r1", "none"): "missing_residual",
                ("r2", "none"): "missing_residual"}


def _eval_block(ch: dict, c: BlockCase, memo: dict) -> np.ndarray:
    import torch

    s = {**_BLOCK_REF, **ch}
    key = (id(c), tuple(sorted(s.items(), key=lambda kv: kv[0])))
    if key in memo:
        return memo[key]
    norms = {"N1": c.N1, "N2": c.N2, "none": lambda v: v}

    def part(name, fn):  # sub-expressions shared by many variants, computed once per case
        k = (id(c), name)
        if k not in memo:
            memo[k] = fn()
        return memo[k]

    with torch.no_grad():
        x = c.x
        a_in = part(("a_in", s["na"]), lambda: norms[s["na"]](x))
        attn = part(("attn", s["na"]), lambda: c.A(a_in))

        def make_h():
            r1 = {"x": x, "normed": a_in, "none": None}[s["r1"]]
            h = attn if r1 is None else r1 + attn
            return c.N1(h) if s["post1"] else h

        hk = ("h", s["na"], s["r1"], s["post1"])
        h = part(hk, make_h)
        src_k = hk if s["s"] == "h" else ("x",)
        src = h if s["s"] == "h" else x
        nm = norms[s["nm"]]
        mlp = part(("mlp", src_k, s["nm"]), lambda: c.M(nm(src)))
        r2 = {"h": lambda: h, "normed": lambda: part(("nm_h", hk, s["nm"]), lambda: nm(h)),
              "x": lambda: x, "none": lambda: None}[s["r2"]]()
        out = mlp if r2 is None else r2 + mlp
        if s["post2"]:
            out = c.N2(out)
    memo[key] = _f64(out)
    return memo[key]


def block_grammar() -> Grammar:
    """The wiring grammar of ``check_pre_ln_block`` (MiniMind's pre-norm block)."""

    def dims(cases: Sequence[object]) -> list[list[Choice]]:
        return [[Choice(d, v, _BLOCK_PHRASES[(d, v)], _BLOCK_KNOWN.get((d, v))) for v in vs]
                for d, vs in _BLOCK_VALUES.items()]

    memo: dict = {}
    return Grammar("pre-LN block", "the block computes h = x + self_attn(input_layernorm(x)), "
                   "out = h + mlp(post_attention_layernorm(h))", dims,
                   lambda ch, c: _eval_block(ch, c, memo))
