"""How much of its grammar a checker names: every variant played as a student's code (test
tooling: the tests and ``make bench``'s diagnosis figures; never in the product).

:func:`student_from_variant` turns a variant into something the checker accepts (a function,
an ``nn.Module`` class, a block class) that computes the variant on whatever input it is
given. :func:`coverage` runs the real checker on each variant and counts: the variants the
battery cannot tell from the reference, those the known fault kinds diagnose, those the
search names (and whether the name it gives is the variant or one that the battery cannot
tell from it), and the slowest checker call. ``make bench`` prints it.

``check_pre_ln``/``check_post_ln`` have no grammar in the product (their answers' formulas are
traced or identified): :func:`placement_grammar` here generates their wrong wirings, to play.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from normref.diagnosis import grammar_for as _product_grammar
from normref.diagnosis import observation_case as _product_case
from normref.diagnosis import variant_id
from normref.diagnosis.gradients import BackwardCase
from normref.diagnosis.norms import evaluate_norm, norm_case
from normref.diagnosis.search import Choice, Grammar, Variant
from normref.diagnosis.wiring import BlockCase

__all__ = ["CHECKERS", "Coverage", "PlacementCase", "student_from_variant", "coverage", "battery_of", "grammar_for",
           "observation_case", "placement_grammar", "run_checker"]


# --------------------------------------------------------------------------- wrong placements to play
# (the grammar that drove check_pre_ln/check_post_ln's search before their formulas were traced)


def _f64(t) -> np.ndarray:
    import torch

    return t.detach().to("cpu", torch.float64).numpy()


@dataclass
class PlacementCase:
    """``x [..., D]`` (torch), the sublayer ``F`` and the norm ``N`` of one placement case."""

    x: object
    F: Callable
    N: Callable


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


def placement_grammar(which: str) -> Grammar:
    """Wrong placements of ``check_pre_ln`` (``which="pre_ln"``) or ``check_post_ln``
    (``"post_ln"``), each single or pair change of the reference's wiring, to play as answers
    (the checkers trace or identify their formulas; no search runs on these)."""
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
    return Grammar(which, reference, dims, lambda ch, c: _eval_placement(ref, ch, c, memo))




# --------------------------------------------------------------------------- coverage

#: The checkers with a grammar: name -> (module path of the check function, its name, args).
CHECKERS = {
    "rms_norm": ("check_rms_norm", ()),
    "layer_norm": ("check_layer_norm", ("numpy",)),
    "RMSNorm module": ("check_rms_norm_module", ()),
    "pre_ln": ("check_pre_ln", ()),
    "post_ln": ("check_post_ln", ()),
    "pre-LN block": ("check_pre_ln_block", ()),
    "layer_norm_backward": ("check_layer_norm_backward", ()),
}


def grammar_for(checker: str) -> Grammar | None:
    """The checker's grammar: the product's (:func:`normref.diagnosis.grammar_for`), or for
    pre_ln/post_ln the generator of wrong placements here."""
    if checker in ("pre_ln", "post_ln"):
        return placement_grammar(checker)
    return _product_grammar(checker)


def observation_case(checker: str, case):
    """The grammar's form of one battery case (:func:`normref.diagnosis.observation_case`; a
    placement case as :class:`PlacementCase`)."""
    if checker in ("pre_ln", "post_ln"):
        return PlacementCase(case.x, case.sublayer, case.norm)
    return _product_case(checker, case)


def run_checker(checker: str, student):
    """``check_*(student)`` for the checker named ``checker``."""
    from normref import checks

    fn_name, args = CHECKERS[checker]
    return getattr(checks, fn_name)(student, *args)


def battery_of(checker: str) -> list:
    """The grammar's form of the checker's battery cases it can evaluate."""
    from normref.checks import backward, block, module, norms, placement

    raw = {  # each from its own generator: torch's global RNG is not touched
        "rms_norm": lambda: norms.battery("rms", "torch"),
        "layer_norm": lambda: norms.battery("layer", "numpy"),
        "RMSNorm module": module._module_battery,
        "pre_ln": placement._placement_battery,
        "post_ln": placement._placement_battery,
        "pre-LN block": block._block_battery,
        "layer_norm_backward": backward._backward_battery,
    }[checker]()
    cases = [observation_case(checker, c) for c in raw]
    return [c for c in cases if c is not None]


def _tensor_like(out: np.ndarray, x):
    import torch

    if isinstance(x, torch.Tensor):
        return torch.from_numpy(np.ascontiguousarray(out)).to(torch.float32).to(x.dtype)
    return out.astype(x.dtype)


def student_from_variant(checker: str, v: Variant):
    """A student's answer that computes variant ``v`` of ``checker``'s reference on any input
    (raises where the variant would)."""
    ch = {c.dim: c.value for c in v}
    if checker in ("rms_norm", "layer_norm"):
        return _norm_student("rms" if checker == "rms_norm" else "layer", ch)
    if checker == "RMSNorm module":
        return _module_student(ch)
    if checker in ("pre_ln", "post_ln"):
        return _placement_student(checker, ch)
    if checker == "pre-LN block":
        return _block_student(checker, ch)
    if checker == "layer_norm_backward":
        return _backward_student(checker, ch)
    raise KeyError(checker)


def _cannot_compute():
    raise RuntimeError("this variant cannot be computed on this input (shapes do not broadcast)")


def _variant_norm(kind: str, ch: dict, x, weight, bias, eps):
    """The norm variant ``ch`` on a checker's inputs, as ``x``'s type; raises where it would."""
    with np.errstate(all="ignore"):
        try:
            out = evaluate_norm(kind, ch, norm_case(x, weight, bias, eps))
        except (ValueError, IndexError):
            out = None
    return _cannot_compute() if out is None else _tensor_like(out, x)


def _norm_student(kind: str, ch: dict):
    """``rms_norm(x, weight, eps)`` or ``layer_norm(x, weight, bias, eps)`` computing ``ch``."""
    def norm_fn(x, weight, *rest, eps=1e-6 if kind == "rms" else 1e-5):
        return _variant_norm(kind, ch, x, weight, rest[0] if rest else None, eps)

    return norm_fn


def _module_student(ch: dict):
    """An ``RMSNorm(dim, eps)`` module class computing ``ch``."""
    import torch
    from torch import nn

    class VariantRMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return _variant_norm("rms", ch, x, self.weight, None, self.eps)

    return VariantRMSNorm


def _placement_student(checker: str, ch: dict):
    """``pre_ln``/``post_ln(x, sublayer, norm)`` computing ``ch``."""
    import torch

    def placement_fn(x, sublayer, norm):
        g = grammar_for(checker)  # fresh: its memo is keyed by case object
        out = g.evaluate(ch, PlacementCase(x, sublayer, norm))
        return torch.from_numpy(out).to(x.dtype)

    return placement_fn


def _block_student(checker: str, ch: dict):
    """A pre-LN block class ``(dim, n_heads)`` with normref's parts, wired as ``ch``."""
    import torch
    from torch import nn

    from normref.blocks import CausalSelfAttention, FeedForward
    from normref.modules import RMSNorm

    class VariantBlock(nn.Module):
        def __init__(self, dim, n_heads):
            super().__init__()
            self.input_layernorm = RMSNorm(dim)
            self.self_attn = CausalSelfAttention(dim, n_heads)
            self.post_attention_layernorm = RMSNorm(dim)
            self.mlp = FeedForward(dim)

        def forward(self, x):
            g = grammar_for(checker)
            out = g.evaluate(ch, BlockCase(x, self.self_attn, self.mlp, self.input_layernorm,
                                           self.post_attention_layernorm))
            return torch.from_numpy(out).to(x.dtype)

    return VariantBlock


def _backward_student(checker: str, ch: dict):
    """``layer_norm_backward(dy, x, weight, eps)`` computing ``ch``: ``(dx, dweight, dbias)``."""
    def backward_fn(dy, x, weight, eps=1e-5):
        out = grammar_for(checker).evaluate(ch, BackwardCase(dy, x, weight, eps))
        if out is None:
            _cannot_compute()
        n, d = x.size, weight.size
        return out[:n].reshape(x.shape), out[n:n + d], out[n + d:]

    return backward_fn


@dataclass
class Coverage:
    """What :func:`coverage` counted for one checker."""

    checker: str
    singles: int = 0
    pairs: int = 0
    invisible: list[str] = field(default_factory=list)  # the battery cannot tell it from the reference
    known: list[str] = field(default_factory=list)  # a known fault kind diagnoses it
    named: list[str] = field(default_factory=list)  # the search names exactly it
    named_equivalent: list[str] = field(default_factory=list)  # named as a battery-equivalent variant
    unnamed: list[str] = field(default_factory=list)  # generic diagnosis only
    slowest_s: float = 0.0
    slowest: str = ""

    @property
    def total(self) -> int:
        return self.singles + self.pairs

    @property
    def played(self) -> int:
        """Variants run through the checker (all, or the sample)."""
        return len(self.invisible) + len(self.known) + len(self.named) + len(self.named_equivalent) \
            + len(self.unnamed)

    @property
    def visible(self) -> int:
        """Played variants the battery tells from the reference."""
        return self.played - len(self.invisible)

    def share_named(self) -> float:
        """Named (exactly or as an equivalent) or diagnosed by a known kind, of the visible ones."""
        good = len(self.named) + len(self.named_equivalent) + len(self.known)
        return good / self.visible if self.visible else 1.0

    def line(self) -> str:
        return (f"{self.checker}: {self.total} variants ({self.singles} single, {self.pairs} pairs), "
                f"{self.played} played, {self.visible} visible on the battery: "
                f"{len(self.known)} by a known fault kind, "
                f"{len(self.named)} named by the search or their formula, {len(self.named_equivalent)} named as an "
                f"equivalent variant, {len(self.unnamed)} unnamed ({100 * self.share_named():.0f}% "
                f"named); slowest checker call {self.slowest_s:.2f} s ({self.slowest})")


def coverage(checker: str, *, sample: int | None = None, seed: int = 0) -> Coverage:
    """Play every variant (or a seeded sample of ``sample``) of ``checker``'s grammar through
    the real checker and count what it says.

    Returns:
        :class:`Coverage`; a variant counts as named when its ``[variant: id]`` is the variant's
        id, or as an equivalent when the named variant's id differs (the battery does not tell
        the two apart: the search only names variants that reproduce every output).
    """
    g = grammar_for(checker)
    cases = battery_of(checker)
    singles, pairs = g.singles(cases), g.pairs(cases)
    cov = Coverage(checker, len(singles), len(pairs))
    variants = singles + pairs
    if sample is not None and sample < len(variants):
        variants = random.Random(seed).sample(variants, sample)
    for v in variants:
        vid = variant_id(v)
        student = student_from_variant(checker, v)
        t0 = time.perf_counter()
        r = run_checker(checker, student)
        dt = time.perf_counter() - t0
        if dt > cov.slowest_s:
            cov.slowest_s, cov.slowest = dt, vid
        faults = set(r.faults)
        if r.passed:
            cov.invisible.append(vid)
        elif "found_variant" in faults:
            tags = {c.variant for c in r.cases if getattr(c, "variant", None)} or \
                {m.split("[variant: ")[1].split("]")[0] for m in r.messages if "[variant: " in m}
            (cov.named if vid in tags else cov.named_equivalent).append(vid)
        elif "other_formula" in faults:  # the traced formula states what the variant computes
            cov.named.append(vid)
        elif faults - {"wrong_values", "returns_nan", "measured"}:
            cov.known.append(vid)
        else:
            cov.unnamed.append(vid)
    return cov
