"""What every graded battery draws from its question's generator (``grader.scoring._gen``):
the one place of both :mod:`grader.scoring`'s batteries and :mod:`grader.modern_batteries`'.
"""
from __future__ import annotations


def token(g):
    """Three distinct small integers as floats, of nonzero mean: the kind of the seed's
    (1, 2, 3) (a zero mean would let RMSNorm and LayerNorm agree on it).

    Args:
        g: a ``torch.Generator``.

    Returns:
        A float32 tensor of shape ``[3]``.
    """
    import torch

    while True:
        t = torch.randint(-6, 7, (3,), generator=g).float()
        if len(set(t.tolist())) == 3 and abs(float(t.sum())) >= 3:
            return t


def pick(g, options):
    """One of ``options`` (a sequence), drawn uniformly with the ``torch.Generator`` ``g``."""
    import torch

    return options[int(torch.randint(len(options), (1,), generator=g))]


__all__ = ["token", "pick"]
