"""The grammar of residual wiring: Pre-LN and Post-LN sublayers, and a whole pre-norm block.

A sublayer (``check_pre_ln``, ``check_post_ln``) is ``out = post(residual + branch(F(input)))``:

* ``input``: what the sublayer F reads, ``x`` or ``Norm(x)``;
* ``branch``: F's output as is, or normalized (``Norm(F(.))``);
* ``residual``: what the residual path carries, ``x``, ``Norm(x)`` or nothing;
* ``post``: the sum as is, or normalized after the add.

Pre-LN is (``Norm(x)``, as is, ``x``, as is); Post-LN is (``x``, as is, ``x``, normalized).

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

__all__ = ["PlacementCase", "BlockCase", "placement_grammar", "block_grammar"]


@dataclass
class PlacementCase:
    """``x [..., D]`` (torch), the sublayer ``F`` and the norm ``N`` of one placement case."""

    x: object
    F: Callable
    N: Callable


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


_PRE = {"input": "Nx", "branch": "F", "residual": "x", "post": False}
_POST = {"input": "x", "branch": "F", "residual": "x", "post": True}


def _eval_placement(ref: dict, ch: dict, c: PlacementCase, memo: dict) -> np.ndarray:
    import torch

    s = {**ref, **ch}
    key = (id(c), tuple(sorted(s.items())))
    if key in memo:
        return memo[key]
    with torch.no_grad():
        x, F, N = c.x, c.F, c.N
        inp = N(x) if s["input"] == "Nx" else x
        br = F(inp)
        if s["branch"] == "NF":
            br = N(br)
        res = {"x": x, "Nx": N(x), "none": None}[s["residual"]]
        out = br if res is None else res + br
        if s["post"]:
            out = N(out)
    memo[key] = _f64(out)
    return memo[key]


_PHRASES = {
    ("input", "x"): "fed x to the sublayer instead of Norm(x)",
    ("input", "Nx"): "fed Norm(x) to the sublayer instead of x",
    ("branch", "NF"): "normalized the sublayer's output, Norm(F(.))",
    ("residual", "Nx"): "added Norm(x) on the residual path instead of x",
    ("residual", "none"): "left out the residual add",
    ("post", True): "normalized after the residual add",
    ("post", False): "did not normalize after the residual add",
}


#: The known placements in the grammar's dimensions (DeepNorm's scaled residual is not one of them:
#: the checkers' fault models fit its alpha). Keys of :data:`normref.placements.PLACEMENTS`.
_KNOWN_SPECS = {
    "pre": {"input": "Nx", "branch": "F", "residual": "x", "post": False},
    "post": {"input": "x", "branch": "F", "residual": "x", "post": True},
    "peri": {"input": "Nx", "branch": "NF", "residual": "x", "post": False},
    "output": {"input": "x", "branch": "NF", "residual": "x", "post": False},
}


def placement_name(ref: dict, variant) -> str | None:
    """``"Peri-LN, x + Norm(F(Norm(x)))"`` when the reference ``ref`` with ``variant``'s choices
    is a known placement (:data:`normref.placements.PLACEMENTS`), else None."""
    from ..placements import PLACEMENTS

    spec = {**ref, **{c.dim: c.value for c in variant}}
    for key, known in _KNOWN_SPECS.items():
        if spec == known:
            name, formula = PLACEMENTS[key]
            return f"{name}, {formula}"
    return None


def placement_grammar(which: str) -> Grammar:
    """The wiring grammar of ``check_pre_ln`` (``which="pre_ln"``) or ``check_post_ln``
    (``"post_ln"``); a variant that is another known placement as a whole is named as it
    (``Grammar.name``)."""
    ref = _PRE if which == "pre_ln" else _POST
    known = ({("input", "x"): "missing_norm", ("residual", "Nx"): "residual_from_normed",
              ("residual", "none"): "missing_residual", ("branch", "NF"): "is_peri_ln"} if which == "pre_ln" else
             {("residual", "none"): "missing_residual", ("post", False): "missing_norm"})
    values = {"input": ["x", "Nx"], "branch": ["F", "NF"], "residual": ["x", "Nx", "none"],
              "post": [False, True]}

    def dims(cases: Sequence[object]) -> list[list[Choice]]:
        return [[Choice(d, v, _PHRASES[(d, v)], known.get((d, v))) for v in vs if v != ref[d]]
                for d, vs in values.items()]

    memo: dict = {}
    reference = ("Pre-LN returns x + F(Norm(x))" if which == "pre_ln"
                 else "Post-LN returns Norm(x + F(x))")
    return Grammar(which, reference, dims, lambda ch, c: _eval_placement(ref, ch, c, memo),
                   name=lambda v: placement_name(ref, v))


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
