"""The outputs of an answer, by name: what every measured sentence is about.

A checker records what it compared (``CaseResult.observed``) as ``(got, want, rtol, atol)``,
float64. An answer with several outputs (the backward's ``(dx, dweight, dbias)``, BatchNorm's
``(y, new_running_mean, new_running_var)``) is compared output by output, and recorded joined
(the grammar search and the class report's groups compare one vector): :func:`observe` joins
them and keeps each one's name and shape (:class:`Observed`), and :func:`split` gives them back,
each in its own shape, so that a measured sentence names the output it is about ("your dweight
..."), an index is one of that output's own ("at (3,)" of a ``[5]`` dweight), and per-token
statistics are said only of an output whose rows are tokens (:class:`normref.diagnosis.Output`,
declared with the question).
"""
from __future__ import annotations

import numpy as np

__all__ = ["Observed", "observe", "split"]


class Observed(tuple):
    """``(got, want, rtol, atol)`` of one case (a 4-tuple, as every reader unpacks it), with the
    outputs it holds: ``parts``, ``((name, shape), ...)`` in order, where ``got`` and ``want`` are
    their values flattened and joined (one named output keeps its own shape); ``()``: one
    output, unnamed (the question's only output). ``failed``: the output the checker failed
    the case on (its message names it), or None: the diagnosis speaks of it first."""

    parts: tuple
    failed: str | None

    def __new__(cls, got, want, rtol, atol, parts=(), failed=None):
        self = super().__new__(cls, (got, want, rtol, atol))
        self.parts = tuple((str(n), tuple(int(s) for s in shape)) for n, shape in parts)
        self.failed = None if failed is None else str(failed)
        return self

    def __reduce__(self):  # pickled and copied with its parts
        return (Observed, (*self, self.parts, self.failed))


def observe(outputs: dict, rtol: float, atol: float, failed: str | None = None) -> Observed:
    """The record of one case of an answer with named outputs.

    Args:
        outputs: ``{name: (got, want)}`` in the answer's order, each a float64 array (the
            student's and the expected, one shape).
        rtol, atol: the case's tolerance.
        failed: the name of the output the case failed on (what the checker's message names).

    Returns:
        :class:`Observed`: one output keeps its shape; several are flattened and joined.

    Raises:
        ValueError: an output's ``got`` and ``want`` differ in shape.
    """
    items = [(n, np.asarray(g, np.float64), np.asarray(w, np.float64)) for n, (g, w) in outputs.items()]
    for n, g, w in items:
        if g.shape != w.shape:
            raise ValueError(f"{n}: got shape {g.shape}, want {w.shape}")
    parts = tuple((n, g.shape) for n, g, _ in items)
    if len(items) == 1:
        _, g, w = items[0]
        return Observed(g, w, rtol, atol, parts, failed)
    got = np.concatenate([g.ravel() for _, g, _ in items])
    want = np.concatenate([w.ravel() for _, _, w in items])
    return Observed(got, want, rtol, atol, parts, failed)


def split(seen: tuple, default: str | None = None) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """``[(name, got, want), ...]``, each output of a case's record in its own shape.

    A record without names (a plain ``(got, want, rtol, atol)``) is one output named
    ``default``; with ``default=None`` (the question has several outputs, so it is unknown which
    one this is) nothing: no sentence may be said of it. A record whose parts do not add up to
    its values gives nothing either.
    """
    got, want = np.asarray(seen[0]), np.asarray(seen[1])
    parts = getattr(seen, "parts", ())
    if not parts:
        return [] if default is None else [(default, got, want)]
    if len(parts) == 1:
        return [(parts[0][0], got, want)] if got.shape == want.shape == parts[0][1] else []
    sizes = [int(np.prod(shape)) for _, shape in parts]
    if got.shape != want.shape or got.ndim != 1 or sum(sizes) != got.size:
        return []
    out, at = [], 0
    for (name, shape), n in zip(parts, sizes):
        out.append((name, got[at:at + n].reshape(shape), want[at:at + n].reshape(shape)))
        at += n
    return out
