"""Which outputs move, in words: the axes one moved element reaches, and what padding reaches.

The ``element`` probe moves ``x[0, 0, 0]`` and sees which outputs change, for the answer and for
the reference; :func:`moved_words` says a set of moved outputs as the part of the tensor it is
("every feature of that token", "feature 0 of every real token"), and :func:`span_words` says
what statistics reaching exactly that part are taken over ("one token's features", "every real
token of the batch"). Both read the moved sets only: nothing is assumed of the reference.

The ``pad`` probe (a question that declares a mask, :attr:`normref.diagnosis.Question.mask`)
moves the padded tokens' values: :func:`pad_fact` says whether the answer's outputs at the real
tokens follow them, where the reference's do not.
"""
from __future__ import annotations

import numpy as np

__all__ = ["f64", "moved", "real_tokens", "moved_words", "span_words", "element_words", "pad_fact"]


def f64(a) -> np.ndarray | None:
    """A tensor or array as float64 numpy (None for anything else, or what does not convert)."""
    from .._torch import is_tensor

    try:
        if is_tensor(a):
            import torch

            return a.detach().to("cpu", torch.float64).numpy()
        if isinstance(a, np.ndarray):
            return a.astype(np.float64)
    except Exception:  # noqa: BLE001 - an odd output is no measurement
        return None
    return None


def moved(a: np.ndarray, b: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Where ``b`` differs from ``a`` by more than 1e-4 of the reference's size there."""
    tol = 1e-4 * (np.abs(ref) + 1.0)
    return np.abs(a - b) > tol


def real_tokens(args: tuple, kwargs: dict, params: tuple, mask: str | None) -> np.ndarray | None:
    """The real tokens of one call (``[B, T]`` bool) of a question declaring its mask parameter
    ``mask``; all True where the call gives no mask; None for a question without one."""
    if mask is None:
        return None
    m = kwargs.get(mask, args[params.index(mask)] if mask in params and params.index(mask) < len(args) else None)
    x = args[0]
    if m is None:
        return np.ones(tuple(x.shape[:-1]), dtype=bool) if getattr(x, "ndim", 0) >= 2 else None
    v = f64(m)
    return None if v is None else v != 0


def _feature_words(f: np.ndarray) -> str:
    """The features a moved set reaches, ``f`` ``[D]`` bool."""
    idx = [int(i) for i in np.flatnonzero(f)]
    if len(idx) == f.size and f.size > 1:
        return "every feature"
    if len(idx) == 1:
        return f"feature {idx[0]}"
    return "features " + ", ".join(map(str, idx)) if len(idx) <= 4 else f"{len(idx)} of the {f.size} features"


def _token_part(k: np.ndarray, real: np.ndarray | None) -> str | None:
    """The tokens a moved set reaches (``k``: the token axes, bool), said from the moved token
    ``(0, ..., 0)``; ``real``: the real tokens (a masked question), else None."""
    origin = (0,) * k.ndim
    if k.sum() == 1 and k[origin]:
        return "that token"
    if k.size > 1 and real is not None and real.shape == k.shape and np.array_equal(k, real):
        return "every real token"
    if k.all():
        return "every token of the batch" if k.ndim >= 2 else "every token"
    if k.ndim == 2 and k[0].all() and not k[1:].any():
        return "every token of that sequence"
    if k.ndim == 2 and k[:, 0].all() and not k[:, 1:].any():
        return "that position of every sequence"
    return None


def _box(m: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(tokens, features)`` when the moved set ``m`` ``[..., D]`` is every reached feature of
    every reached token, else None."""
    k, f = m.any(-1), m.reshape(-1, m.shape[-1]).any(0)
    return (k, f) if np.array_equal(m, k[..., None] & f) else None


def moved_words(m: np.ndarray, real: np.ndarray | None = None) -> str | None:
    """A moved set ``m`` (``[..., D]`` bool, reached from ``(0, ..., 0)``) as the part of the
    output it is: ``"every feature of that token"``, ``"feature 0 of every real token"``,
    ``"only that element"``; None where it is no such part."""
    if m.ndim < 2 or not m.any():
        return None
    box = _box(m)
    if box is None:
        return None
    k, f = box
    if m.sum() == 1 and m[(0,) * m.ndim]:
        return "only that element"
    tokens = _token_part(k, real)
    if tokens is None:
        return None
    return f"{_feature_words(f)} of {tokens}"


def span_words(m: np.ndarray, real: np.ndarray | None = None) -> str | None:
    """What statistics reaching exactly the moved set ``m`` are taken over: ``"one token's
    features"``, ``"every real token of the batch"``, ``"the tokens of one sequence"``; None
    where the set is one element or no part of the output (:func:`moved_words`)."""
    box = _box(m) if m.ndim >= 2 and m.any() else None
    if box is None or m.sum() <= 1:
        return None
    k, f = box
    features, tokens = f.sum() > 1, k.sum() > 1
    if features and not tokens:
        return "one token's features"
    part = _token_part(k, real)
    if part is None:
        return None
    over = {"every real token": "every real token of the batch", "every token of the batch": "every token of the batch",
            "every token": "every token", "every token of that sequence": "the tokens of one sequence",
            "that position of every sequence": "one position of every sequence"}[part]
    return f"every feature of {over}" if features else over


def element_words(ms: np.ndarray, mr: np.ndarray, where: str, title: str, name: str,
                  real: np.ndarray | None = None) -> str | None:
    """The ``element`` probe's sentence where the reference's moved set ``mr`` reaches beyond one
    token (BatchNorm's statistics over the batch, per feature): what moved in the answer's
    output ``ms`` against ``mr``, and the statistics each implies. None where either set is no
    part of the output that words can name."""
    your = "your output" if name == "output" else f"your {name}"
    theirs = f"{title}'s" if name == "output" else f"{title}'s {name}"
    wr = moved_words(mr, real)
    if wr is None:
        return None
    if not ms.any():
        return f"moving one element, {where}, changes nothing of {your}, where {theirs} changes at {wr}"
    ws = moved_words(ms, real)
    if ws is None:
        ws = f"{int(ms.sum())} of its values"
    head = f"moving one element, {where}, changes {your} at {ws}, where {theirs} changes at {wr}"
    s_over, r_over = span_words(ms, real), span_words(mr, real)
    if s_over and r_over:
        return f"{head}: your statistics are taken over {s_over}, {title}'s over {r_over}"
    if r_over and ms.sum() == 1:
        return f"{head}: nothing else of {your} depends on it, where {title}'s statistics are taken over {r_over}"
    return head


def pad_fact(got0, got1, want0, want1, real: np.ndarray, title: str, name: str) -> str | None:
    """The ``pad`` probe's sentence: the padded tokens' values moved (``real`` ``[B, T]`` bool,
    False at padding), the answer's outputs at the real tokens change where the reference's do
    not: the padding enters the answer's statistics. None otherwise."""
    if got0 is None or got1 is None or got0.shape != want0.shape or got0.shape[:-1] != real.shape:
        return None
    ms, mr = moved(got0, got1, want0), moved(want0, want1, want0)
    if not ms[real].any() or mr[real].any():
        return None
    your = "your output" if name == "output" else f"your {name}"
    theirs = f"{title}'s" if name == "output" else f"{title}'s {name}"
    return (f"changing the padded tokens' values (mask False) changes {your} at the real tokens: the padding "
            f"enters your statistics, where {theirs} at the real tokens does not depend on it")
