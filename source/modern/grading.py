"""The ``modern`` assignment's grading (lesson 04): Peri-LN, QK-norm's logits and DyT, each a
visible check and a battery drawn anew for every grading run (the kinds of case of
:mod:`normref.checks.modern` with new numbers: a small token of the seed's kind, ``[B, T, D]``,
``B = T = D``, float16, bfloat16, each object the course's own class); the question on Peri-LN's
bound is graded by hand."""
from grader.scoring.questions import Assignment, battery, checker, visible
from normref.rules import DYT_REFERENCE, PERI_REFERENCE, QK_REFERENCE


def _tools(g):
    import torch

    from grader.scoring.batteries import draw_token, pick

    def rnd(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    def seed():
        return int(torch.randint(2**31 - 1, (1,), generator=g))

    def trained(norm, scale=0.5, shift=0.3):
        d = norm.normalized_shape[0]
        with torch.no_grad():
            norm.weight.copy_(1 + scale * rnd(d))
            if getattr(norm, "bias", None) is not None:
                norm.bias.copy_(shift * rnd(d))
        return norm

    return rnd, seed, trained, (lambda options: pick(g, options)), (lambda: draw_token(g))


def draw_peri_battery(g) -> list:
    """A drawn Peri-LN battery: a token through F(v) = v^2 with a LayerNorm without eps and a
    second one with a drawn gamma; ``[B, T, 8]`` through tanh(v W + c) and two RMSNorms;
    ``B = T = D`` with two LayerNorms (gammas and betas); float16 ``[B, T, 8]``; bfloat16
    ``B = T = D``."""
    import torch

    from normref.checks.modern import Square, _PeriCase
    from normref.checks.placement import ToySublayer
    from normref.modules import LayerNorm, RMSNorm

    rnd, seed, trained, pick, token = _tools(g)
    b_, t_, n, n2 = pick([2, 3]), pick([3, 4]), pick([3, 4, 5]), pick([3, 4, 5])
    tok = token()
    out = LayerNorm(3, eps=0.0)
    with torch.no_grad():
        out.weight.copy_(torch.tensor([2.0, 1.0, 0.5])[torch.randperm(3, generator=g)] + 0.1 * rnd(3))
    return [
        _PeriCase(f"token {tuple(int(v) for v in tok.tolist())}, F(v) = v^2, LayerNorm without eps, then a "
                  "LayerNorm with its own gamma", tok, Square(), LayerNorm(3, eps=0.0), out),
        _PeriCase(f"[{b_}, {t_}, 8], F(v) = tanh(v W + c), two RMSNorms with different gammas",
                  rnd(b_, t_, 8, scale=2.0, shift=0.5), ToySublayer(8, seed()), trained(RMSNorm(8)),
                  trained(RMSNorm(8))),
        _PeriCase(f"B = T = D [{n}, {n}, {n}], two LayerNorms with gammas and betas",
                  rnd(n, n, n, scale=3.0, shift=1.0), ToySublayer(n, seed()), trained(LayerNorm(n)),
                  trained(LayerNorm(n))),
        _PeriCase(f"float16 [{b_}, {t_}, 8], two RMSNorms", rnd(b_, t_, 8, scale=4.0).half(), ToySublayer(8, seed()),
                  trained(RMSNorm(8)), trained(RMSNorm(8))),
        _PeriCase(f"bfloat16 B = T = D [{n2}, {n2}, {n2}], two RMSNorms", rnd(n2, n2, n2, scale=2.0).bfloat16(),
                  ToySublayer(n2, seed()), trained(RMSNorm(n2)), trained(RMSNorm(n2))),
    ]


def draw_qk_battery(g) -> list:
    """A drawn QK-norm-logits battery: a token's rotations as queries (``T = d = 3``, a missing
    transpose keeps the shape), RMSNorms of weight 1 without eps; ``[B, T, 8]`` with trained
    RMSNorms; ``B = T = D`` with LayerNorms; float16 ``[2, T, 8]`` of RMS 30; bfloat16 ``B = T = D``."""
    import torch

    from normref.checks.modern import _QKCase
    from normref.modules import LayerNorm, RMSNorm

    rnd, seed, trained, pick, token = _tools(g)
    b_, t_, n, n2, t2 = pick([2, 3]), pick([3, 4]), pick([3, 4, 5]), pick([3, 4, 5]), pick([4, 5, 6])
    tok = token()
    q = torch.stack([tok, tok.roll(1), tok.roll(2)])[None]  # [1, 3, 3]
    k = torch.stack([tok, torch.ones(3), tok.flip(0)])[None]
    return [
        _QKCase(f"token {tuple(int(v) for v in tok.tolist())} and its rotations as queries, RMSNorms of weight 1 "
                "without eps", q, k, RMSNorm(3, eps=0.0), RMSNorm(3, eps=0.0)),
        _QKCase(f"[{b_}, {t_}, 8], RMSNorms with different gammas", rnd(b_, t_, 8, scale=3.0),
                rnd(b_, t_, 8, scale=3.0), trained(RMSNorm(8)), trained(RMSNorm(8))),
        _QKCase(f"B = T = D [{n}, {n}, {n}], LayerNorms with gammas and betas", rnd(n, n, n, scale=2.0, shift=1.0),
                rnd(n, n, n, scale=2.0, shift=-0.5), trained(LayerNorm(n)), trained(LayerNorm(n))),
        _QKCase(f"float16 [2, {t2}, 8] of RMS 30, RMSNorms", rnd(2, t2, 8, scale=30.0).half(),
                rnd(2, t2, 8, scale=30.0).half(), trained(RMSNorm(8)), trained(RMSNorm(8))),
        _QKCase(f"bfloat16 B = T = D [{n2}, {n2}, {n2}], RMSNorms", rnd(n2, n2, n2, scale=2.0).bfloat16(),
                rnd(n2, n2, n2, scale=2.0).bfloat16(), trained(RMSNorm(n2)), trained(RMSNorm(n2))),
    ]


def draw_dyt_battery(g) -> list:
    """A drawn DyT battery: a token with alpha 0.5, weight 1, bias 0; ``[B, T, 8]`` with a drawn
    alpha, weight and bias; ``B = T = D`` with alpha 1.5 (tanh saturates); float16 ``[B, T, 8]`` of
    size ~300 with alpha 0.01; bfloat16 ``B = T = D``."""
    import torch

    from normref.checks.modern import _DyTCase

    rnd, seed, trained, pick, token = _tools(g)
    b_, t_, n, n2 = pick([2, 3]), pick([3, 4]), pick([3, 4, 5]), pick([3, 4, 5])
    tok = token()

    def alpha(lo, hi):
        return torch.tensor([lo + (hi - lo) * float(torch.rand(1, generator=g))])

    return [
        _DyTCase(f"token {tuple(int(v) for v in tok.tolist())}, alpha 0.5, weight 1, bias 0", tok,
                 torch.tensor([0.5]), torch.ones(3), torch.zeros(3)),
        _DyTCase(f"[{b_}, {t_}, 8], a drawn alpha, trained weight and bias", rnd(b_, t_, 8, scale=2.0),
                 alpha(0.5, 0.8), 1 + 0.5 * rnd(8), 0.3 * rnd(8)),
        _DyTCase(f"B = T = D [{n}, {n}, {n}], alpha 1.5 (tanh saturates)", rnd(n, n, n, scale=3.0, shift=1.0),
                 torch.tensor([1.5]), 1 + 0.5 * rnd(n), 0.3 * rnd(n)),
        _DyTCase(f"float16 [{b_}, {t_}, 8] of size ~300, alpha 0.01", rnd(b_, t_, 8, scale=300.0).half(),
                 torch.tensor([0.01]), 1 + 0.5 * rnd(8), 0.3 * rnd(8)),
        _DyTCase(f"bfloat16 B = T = D [{n2}, {n2}, {n2}], a drawn alpha", rnd(n2, n2, n2, scale=2.0).bfloat16(),
                 alpha(0.5, 0.8), 1 + 0.5 * rnd(n2), 0.3 * rnd(n2)),
    ]


PERI = battery("peri_ln_battery", checker("check_peri_ln"), draw_peri_battery, PERI_REFERENCE)
QK = battery("qk_logits_battery", checker("check_qk_norm_logits"), draw_qk_battery, QK_REFERENCE)
DYT = battery("dyt_battery", checker("check_dyt"), draw_dyt_battery, DYT_REFERENCE)

ASSIGNMENT = Assignment("modern", (
    visible("peri_ln_quick", PERI, "check_peri_ln", quick=True), PERI,
    visible("qk_logits_quick", QK, "check_qk_norm_logits", quick=True), QK,
    visible("dyt_quick", DYT, "check_dyt", quick=True), DYT,
), manual=("peri_bound_why",))
