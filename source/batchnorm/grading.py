"""The ``batchnorm`` assignment's grading (lesson 01's "Why not BatchNorm for tokens?"): a masked
BatchNorm over ``[B, T, D]`` tokens in training and evaluation mode, its visible check (training,
without and with padding) and its battery, drawn anew for every grading run and judged by the
self-check's own checker (:mod:`.batchnorm_check`, released beside the notebook), whose expected
values come from ``torch.nn.functional.batch_norm`` on the real tokens.

:func:`batch_norm_reference` is the answer written out by hand: the lessons do not need it, so it
lives here, on the grader's side; the tests check it against the checker's expected values.
"""
from grader.scoring.batteries import pick
from grader.scoring.questions import Assignment, battery, checker, visible

from .batchnorm_check import REFERENCE, BatchNormCase, check_batch_norm


def batch_norm_reference(x, weight, bias, running_mean, running_var, mask=None, training=True, momentum=0.1,
                         eps=1e-5):
    """Masked BatchNorm over ``x`` ``[B, T, D]`` (``mask`` ``[B, T]``, True = real): ``(y [B, T, D]`` in
    x's dtype, 0 at padding, ``new_running_mean [D], new_running_var [D])``; statistics in float32.

    Raises:
        ValueError: fewer than two real tokens in training.

    Source: Ioffe and Szegedy 2015, Algorithm 1 and section 3.1 (the unbiased running variance).
    """
    import torch

    real = torch.ones(x.shape[:2], dtype=torch.bool) if mask is None else mask.bool()  # [B, T]
    w = real[..., None].float()  # [B, T, 1]
    xf = x.float()
    if training:
        n = int(real.sum())
        if n < 2:
            raise ValueError(f"BatchNorm needs at least two real tokens in training, got {n}")
        mean = (xf * w).sum(dim=(0, 1)) / n  # [D]
        var = ((xf - mean) ** 2 * w).sum(dim=(0, 1)) / n  # [D], biased: what normalises
        new_mean = (1 - momentum) * running_mean + momentum * mean
        new_var = (1 - momentum) * running_var + momentum * var * n / (n - 1)  # unbiased, as BatchNorm1d
    else:
        mean, var = running_mean.float(), running_var.float()
        new_mean, new_var = running_mean, running_var
    y = (xf - mean) / torch.sqrt(var + eps) * weight + bias  # [B, T, D]
    return (y * w).to(x.dtype), new_mean, new_var


def draw_batchnorm_battery(g) -> list:
    """A drawn battery of the public battery's kinds (:func:`.batchnorm_check.public_battery`):
    training without padding, training with padding (filled with large values, so ignoring the
    mask shows), evaluation with running averages, ``B = T = D`` with padding (where per-token
    statistics keep the shape), float16 (statistics in float32), another momentum, one real token."""
    import torch

    def rnd(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    def case(name, b, t, d, *, pad=None, dtype=None, training=True, momentum=0.1, scale=2.0, shift=None):
        shift = float(pick(g, [-1.0, 0.5, 1.0])) if shift is None else shift
        x = rnd(b, t, d, scale=scale, shift=shift)  # [B, T, D]
        mask = None
        if pad is not None:
            mask = torch.ones(b, t, dtype=torch.bool)
            for i, p in enumerate(pad):
                if p:
                    mask[i, t - p:] = False
                    x[i, t - p:] = float(pick(g, [40.0, 50.0, 60.0]))
        if dtype is not None:
            x = x.to(dtype)
        return BatchNormCase(name, x, 1 + 0.5 * rnd(d), 0.3 * rnd(d), 0.5 * rnd(d), 1 + rnd(d).abs(), mask,
                             training, momentum)

    b, t, d = pick(g, [2, 3]), pick(g, [3, 4]), pick(g, [4, 6, 8])
    n = pick(g, [3, 4, 5])
    m = float(pick(g, [0.05, 0.2, 0.3]))
    s16 = float(pick(g, [200.0, 250.0, 300.0]))
    return [
        case(f"[{b}, {t}, {d}] training, no padding", b, t, d),
        case(f"[2, {t + 1}, {d}] training, the last 2 tokens of sequence 1 are padding", 2, t + 1, d, pad=(0, 2)),
        case(f"[{b}, {t}, {d}] evaluation with running averages", b, t, d, training=False),
        case(f"B = T = D [{n}, {n}, {n}] training, padding in two sequences", n, n, n,
             pad=tuple(1 if i % 2 == 0 else 0 for i in range(n))),
        case(f"float16 [2, {t}, 8] training, a spread of {s16:g} (its squares overflow float16): statistics in float32",
             2, t, 8, dtype=torch.float16, scale=s16, shift=300.0),
        case(f"[{b + 1}, 2, {d}] training, momentum {m:g}", b + 1, 2, d, momentum=m),
        case("one real token in training: BatchNorm has no spread to divide by", 1, 2, d, pad=(1,)),
    ]


BATTERY = battery("batch_norm_battery", checker(check_batch_norm), draw_batchnorm_battery, REFERENCE)

ASSIGNMENT = Assignment("batchnorm", (
    visible("batch_norm_quick", BATTERY, check_batch_norm, quick=True),
    BATTERY,
))
