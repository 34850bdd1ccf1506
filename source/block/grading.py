"""The ``block`` assignment's grading (lesson 03): ``pre_ln`` and ``post_ln`` (functions), the
``RMSNorm`` module and the ``PreNormBlock`` (classes), each a visible check and a battery drawn
anew for every grading run; the warm-up question is graded by hand.

A class question's kernel performs a plan the grader decides (:func:`module_plan`,
:func:`block_plan`; :func:`normref.plan.run_plan`) and hands back its record, which the
checker judges (:class:`grader.scoring.replay.ReplayClass`).
"""

from grader.scoring.batteries import FLOAT16_OVERFLOW_VALUES, draw_token, pick
from grader.scoring.questions import Assignment, battery, checker, visible
from normref.rules import BLOCK_REFERENCE, NORM_REFERENCE, PLACEMENT_REFERENCE


def module_plan(cases: list) -> list[dict]:
    """The kernel's plan (:func:`normref.plan.run_plan`) for
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


def draw_placement_battery(g) -> list:
    """A drawn Pre-/Post-LN battery: a token through F(v) = 2v and then F(v) = (v3, v1, v2)
    (:class:`normref.checks.placement.Roll`), with LayerNorm without eps; ``[B, T, 8]``
    through tanh(v W + c) and an RMSNorm with a trained gamma; ``B = T = D`` through
    tanh(v W + c) and a LayerNorm with gamma and beta; ``[2, T, 8]`` through causal
    self-attention and an RMSNorm. Every object is the course's own class."""
    import torch
    from torch import nn

    from normref.blocks import CausalSelfAttention
    from normref.checks.core import seeded_module
    from normref.checks.placement import Roll, ToySublayer, _PlacementCase
    from normref.modules import LayerNorm, RMSNorm

    def rnd(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    def seed():
        return int(torch.randint(2**31 - 1, (1,), generator=g))

    twice = nn.Linear(3, 3, bias=False, device="meta").to_empty(device="cpu")  # no weights drawn: set here
    with torch.no_grad():
        twice.weight.copy_(2 * torch.eye(3))
    b_, t_, n, t2 = pick(g, [2, 3]), pick(g, [3, 4]), pick(g, [3, 4, 5]), pick(g, [4, 5, 6])
    rms8, ln = RMSNorm(8), LayerNorm(n)
    with torch.no_grad():
        rms8.weight.copy_(1 + 0.5 * rnd(8))
        ln.weight.copy_(1 + 0.5 * rnd(n))
        ln.bias.copy_(0.3 * rnd(n))
    attn = seeded_module(torch.Generator().manual_seed(seed()), CausalSelfAttention, 8, 2)
    rms8b = RMSNorm(8)
    with torch.no_grad():
        rms8b.weight.copy_(1 + 0.5 * rnd(8))
    tok = draw_token(g)
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

    b_, t_, d = pick(g, [2, 3]), pick(g, [3, 4, 5]), pick(g, [6, 8, 10])
    n, d5, d4 = pick(g, [3, 4, 5]), pick(g, [4, 5, 6, 7]), pick(g, [3, 4, 5, 6])
    big = float(pick(g, FLOAT16_OVERFLOW_VALUES))
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
    from normref.checks.core import seeded_module
    from normref.modules import LayerNorm, RMSNorm

    def rnd(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    def parts(norm_cls):
        init = torch.Generator().manual_seed(int(torch.randint(2**31 - 1, (1,), generator=g)))
        attn, mlp = seeded_module(init, CausalSelfAttention, 8, 2), seeded_module(init, FeedForward, 8, 16)
        n1, n2 = norm_cls(8), norm_cls(8)
        with torch.no_grad():
            for n in (n1, n2):
                n.weight.copy_(1 + 0.5 * rnd(8))
                if getattr(n, "bias", None) is not None:
                    n.bias.copy_(0.3 * rnd(8))
        return attn, mlp, n1, n2

    b1, t1, b2, t2 = pick(g, [2, 3]), pick(g, [3, 4, 5]), pick(g, [3, 4, 5]), pick(g, [4, 5, 6])
    b3, t3 = pick(g, [2, 3]), pick(g, [3, 4, 5])
    b0, t0 = pick(g, [2, 3]), pick(g, [3, 4, 5])
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


def _public_battery(module: str, name: str):
    """``normref.checks.<module>.<name>``, the public battery of a class question's checker."""
    def public() -> list:
        import importlib

        return getattr(importlib.import_module(f"normref.checks.{module}"), name)()

    return public


PRE_LN = battery("pre_ln_battery", checker("check_pre_ln"), draw_placement_battery, PLACEMENT_REFERENCE)
POST_LN = battery("post_ln_battery", checker("check_post_ln"), draw_placement_battery, PLACEMENT_REFERENCE)
MODULE = battery("rms_module_battery", checker("check_rms_norm_module"), draw_module_battery, NORM_REFERENCE,
                 kind="class", plan=module_plan)
BLOCK = battery("block_battery", checker("check_pre_ln_block"), draw_block_battery, BLOCK_REFERENCE,
                kind="class", plan=block_plan)

ASSIGNMENT = Assignment("block", (
    visible("pre_ln_quick", PRE_LN, "check_pre_ln", head=2), PRE_LN,
    visible("post_ln_quick", POST_LN, "check_post_ln", head=2), POST_LN,
    visible("rms_module_quick", MODULE, "check_rms_norm_module", quick=True, head=2,
            public_cases=_public_battery("module", "_module_battery")), MODULE,
    visible("block_quick", BLOCK, "check_pre_ln_block", quick=True, head=2,
            public_cases=_public_battery("block", "_block_battery")), BLOCK,
), manual=("block_warmup_why",))
