"""The graded batteries, drawn from a grading run's secret seed (:mod:`grader.scoring.inputs`): for
each code question a battery of the kinds of case of its checker's public battery, with new
numbers and shapes (a small token, ``[B, T, D]`` with a trained gamma (and beta), ``B = T = D``,
tiny values with eps = 1e-4, the float16 overflow row, bfloat16, a constant row ...), every
object the course's own class, so the kernel can be handed it.

Every draw reads one ``torch.Generator`` (:func:`question_generator`: the run's seed and the
question's name), never torch's global RNG: the sublayers' weights too
(:func:`normref.checks.core.seeded_module`). The same seed draws the same battery, in any
thread, whatever else runs. The checker takes the drawn battery as its ``cases`` argument.
Each assignment's own batteries are in its folder's ``grading.py`` (:mod:`grader.scoring.questions`);
the norms' battery here is shared by ``rmsnorm`` and ``layernorm``.
"""
from __future__ import annotations

import numpy as np

__all__ = ["FLOAT16_OVERFLOW_VALUES", "question_generator", "draw_token", "pick", "draw_norm_battery"]


#: The float16 overflow row's values a drawn battery takes (``[v, -v, v, -v]``): every square is
#: above float16's largest 65504 (from 256 up), and none is above the public battery's 300, so an
#: answer the public float16 case passes meets no larger value when it is graded.
FLOAT16_OVERFLOW_VALUES = (264, 272, 280, 288, 296, 300)


def question_generator(seed: int, grade_id: str):
    """A ``torch.Generator`` for one question, from the run's seed and the question's name
    (seeded with ``sha256(f"{seed}:{grade_id}")``'s first 8 bytes, little-endian, top bit cleared)."""
    import hashlib

    import torch

    h = int.from_bytes(hashlib.sha256(f"{seed}:{grade_id}".encode()).digest()[:8], "little")
    return torch.Generator().manual_seed(h & (2**63 - 1))


def draw_token(g):
    """Three distinct small integers as floats, of nonzero mean: the kind of the seed's
    (1, 2, 3) (a zero mean would let RMSNorm and LayerNorm agree on it)."""
    import torch

    while True:
        t = torch.randint(-6, 7, (3,), generator=g).float()
        if len(set(t.tolist())) == 3 and abs(float(t.sum())) >= 3:
            return t


def pick(g, options):
    """One of ``options``, drawn uniformly from ``g``."""
    import torch

    return options[int(torch.randint(len(options), (1,), generator=g))]


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


def _token_spreads(kind: str, btd, nnn, tiny, g) -> tuple:
    """``[B, T, D]``, ``B = T = D`` and tiny-value inputs rescaled token by token (drawn from
    ``g``): LayerNorm's to stds where eps's place shows, RMSNorm's to RMS 1 to 2."""
    import torch

    b_, t_ = btd.shape[:2]
    n = nnn.shape[0]
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
    return btd, nnn, tiny


def _eps_errors(row, w, b, eps: float) -> tuple[float, float]:
    """How far LayerNorm without eps and with eps outside the square root land from the reference on
    one token (float32 ``row``, weight ``w``, bias ``b``), each as the largest multiple of the
    float32 tolerance."""
    from normref.checks.compare import tolerance

    x, w, b = (np.asarray(v, dtype=np.float64) for v in (row, w, b))
    c = x - x.mean()
    var = (c * c).mean()
    ref = c / np.sqrt(var + eps) * w + b
    rtol, atol = tolerance("float32")
    tol = atol + rtol * np.abs(ref)
    no_eps = c / np.sqrt(var) * w + b
    outside = c / (np.sqrt(var) + eps) * w + b
    return float((np.abs(no_eps - ref) / tol).max()), float((np.abs(outside - ref) / tol).max())


def _show_eps(case, std: float, outside_shows: bool) -> None:
    """Make the small-spread token ``case.x[0, 0]`` (LayerNorm's ``[B, T, D]`` or ``B = T = D``
    case, drawn with spread ``std``) show where eps sits, whatever the draw: leaving eps out must
    land at least 1.25 x the float32 tolerance away from the reference, and eps outside the square
    root at least 1.25 x too (``outside_shows``) or at most 0.75 x (the B = T = D case: only leaving
    eps out shows there; float32's own rounding is 1% of that tolerance). The token as drawn is
    kept when it does (nearly every draw: 1 in 300 did not for B = T = D, and an answer without
    eps then passed it); else, with its largest values
    moved onto the features of largest ``|weight|`` or not, its spread is narrowed or widened in
    5% steps until it does. No draw is made."""
    import torch

    row = case.x[0, 0].clone()
    centred = row - row.mean()
    placed = torch.empty_like(centred)
    placed[torch.argsort(case.weight.abs())] = centred[torch.argsort(centred.abs())]  # largest on largest |w|
    for k in (0, -1, 1, -2, 2, -3, 3, -4, 4, -5, 5, -6, 6, -8, 8, -10, 10):
        for shape in (centred, placed):
            token = row if k == 0 and shape is centred else _with_std(shape + row.mean(), std * 1.05 ** k)
            no_eps, outside = _eps_errors(token, case.weight, case.bias, case.eps)
            if no_eps >= 1.25 and (outside >= 1.25 if outside_shows else outside <= 0.75):
                case.x[0, 0] = token
                return


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
    b_, t_, d = pick(g, [2, 3]), pick(g, [3, 4, 5]), pick(g, [6, 8, 10])
    n = pick(g, [3, 4, 5])
    d2 = pick(g, [4, 5, 6, 7])
    big = float(pick(g, FLOAT16_OVERFLOW_VALUES))
    tok = draw_token(g)
    w, b = 1 + 0.5 * rnd(d), 0.1 * rnd(d)
    btd, nnn, tiny = rnd(b_, t_, d, shift=0.5), rnd(n, n, n, scale=2.0, shift=1.0), rnd(2, d2)
    btd, nnn, tiny = _token_spreads(kind, btd, nnn, tiny, g)
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
        _show_eps(cases[1], 0.2, outside_shows=True)
        _show_eps(cases[2], 0.4, outside_shows=False)
        c = float(pick(g, [-3, 2, 5, 7]))
        cases.append(NormCase(f"constant row [{c:g}] * 4 (variance 0: output must be beta)",
                              torch.stack([torch.full((4,), c), _with_std(rnd(4), 1.0)]), torch.ones(4),
                              0.5 * rnd(4), eps))
    return _numpy_cases(cases) if backend == "numpy" else cases


def _numpy_cases(cases: list) -> list:
    """The battery's cases as numpy arrays, without the bfloat16 one (numpy has no bfloat16)."""
    import torch

    from normref.checks.norms import NormCase

    def conv(t):
        return None if t is None else t.numpy()

    return [NormCase(c.name, conv(c.x), conv(c.weight), conv(c.bias), c.eps)
            for c in cases if c.x.dtype != torch.bfloat16]
