"""Numeric identification: which composition of the question's inputs and callables an answer's
outputs are, when its code cannot be traced (grading replays outputs; code that indexes or calls
torch functions the stand-ins do not follow).

The space is generated, not listed: every expression up to :data:`MAX_SIZE` nodes built from the
inputs (``x``; ``q``, ``k``; their multiples :data:`SCALES` as a callable's argument), each
callable handed in applied to a smaller one (``F(.)``, ``norm(.)``), sums of two, and the
question's products (``a b^T`` for attention logits), evaluated with the case's real objects
and kept once per distinct value (two expressions that give the same numbers on every case are
one). An answer's outputs are identified as one of them times a constant (least squares:
``c E``; one number, or one word of each case's sizes such as ``1/sqrt(d)``), or a sum of two
of them (a meet in the middle over a random projection). A match must reproduce the answer on
every case it gave an output (within twice the case's tolerance) and differ from the reference
wherever the answer failed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from . import expr as E

__all__ = ["Identified", "identify", "MAX_SIZE"]

#: The largest expression generated (nodes: inputs, calls, sums, products).
MAX_SIZE = 6
#: At most this many distinct values are kept (the search stops growing beyond it).
MAX_POOL = 4000
#: The scalar multiples of each input generated (size 2 each): ``2 x``, ``x / 2``, ``-x``.
SCALES = (2.0, 0.5, -1.0)


@dataclass
class Identified:
    """What the outputs are: ``coefficients[i] * expr`` on case ``i`` (``expr`` canonical; the
    coefficients one number, or one word of each case's sizes such as ``1/sqrt(d)``)."""

    expr: E.Expr
    coefficients: list
    size: int
    alternatives: int = 0

    def formula(self, i: int = 0) -> E.Expr:
        """The formula on case ``i``."""
        c = self.coefficients[i]
        return self.expr if abs(c - 1) < 1e-9 else E.scale(self.expr, c)


def _f64(t) -> np.ndarray:
    import torch

    return t.detach().to("cpu", torch.float64).numpy()


class _Pool:
    """Expressions and their values on the identification cases, one per distinct value."""

    def __init__(self, n_cases: int):
        self.n = n_cases
        self.items: list[tuple[E.Expr, list, np.ndarray]] = []  # (expr, tensors per case, flat f64)
        self.seen: set = set()
        self.by_size: dict[int, list[int]] = {}
        #: expressions used only as a callable's argument (never in a sum or a product)
        self.arguments_only: set[int] = set()

    def add(self, e: E.Expr, vals: list) -> int | None:
        flat = np.concatenate([_f64(v).ravel() for v in vals])
        if not np.all(np.isfinite(flat)):
            return None
        key = np.round(flat[:256], 5).tobytes()
        if key in self.seen:
            return None
        self.seen.add(key)
        self.items.append((e, vals, flat))
        i = len(self.items) - 1
        self.by_size.setdefault(E.size(e), []).append(i)
        return i


def _evaluate(f, *vals):
    try:
        out = f(*vals)
    except Exception:  # noqa: BLE001 - a composition that does not apply to this case
        return None
    return out


def identify(inputs: list[dict], callables: list[dict], outputs: list, tolerances: list,
             references: list, failed: list[bool], *, products: tuple = (), max_size: int = MAX_SIZE,
             budget_s: float = 1.0) -> Identified | None:
    """The composition the outputs are, or None.

    Args:
        inputs: per identification case, ``{name: tensor}`` (the question's tensor inputs).
        callables: per case, ``{name: callable}`` (the callables handed in, the case's own).
        outputs: per case, the answer's output as float64 numpy (same shape as the reference).
        tolerances: per case, ``(rtol, atol)``.
        references: per case, the reference output as float64 numpy.
        failed: per case, whether the answer failed it.
        products: the binary products to generate beside sums: ``"matmul_t"`` (``a b^T``),
            ``"matmul"`` (``a b``).
        max_size: the largest expression generated.
        budget_s: stop generating after this many seconds (what was found so far is used).
    """
    import torch

    t0 = time.perf_counter()
    n = len(inputs)
    if not n:
        return None
    y = np.concatenate([o.ravel() for o in outputs])
    ref = np.concatenate([r.ravel() for r in references])
    rt = np.concatenate([np.full(o.size, t[0]) for o, t in zip(outputs, tolerances)])
    at = np.concatenate([np.full(o.size, t[1]) for o, t in zip(outputs, tolerances)])
    bounds = [0] + list(np.cumsum([o.size for o in outputs]))
    shapes = [o.shape for o in outputs]

    def matches(v: np.ndarray, cs) -> bool:
        cv = v * np.concatenate([np.full(bounds[i + 1] - bounds[i], cs[i]) for i in range(n)])
        if not np.all(np.abs(cv - y) <= 2 * (rt * np.abs(y) + at)):
            return False
        for i in range(n):  # wrong wherever the answer failed
            s = slice(bounds[i], bounds[i + 1])
            if failed[i] and np.allclose(cv[s], ref[s], rtol=rt[s][0], atol=at[s][0]):
                return False
        return True

    pool = _Pool(n)
    found: list[tuple[int, float, E.Expr, list]] = []  # (size, |1 - c|, expr, coefficient per case)
    sizes = [_sizes(inp) for inp in inputs]
    ones = [1.0] * n

    def consider(i: int) -> None:
        e, vals, flat = pool.items[i]
        if [tuple(v.shape) for v in vals] != [tuple(s) for s in shapes]:
            return
        if matches(flat, ones):
            found.append((E.size(e), 0.0, e, ones))
            return
        cs = _coefficients(flat, y, bounds, sizes)
        if cs is not None and matches(flat, cs):
            found.append((E.size(e), abs(1 - cs[0]), e, cs))

    names = list(inputs[0])
    with torch.no_grad():
        for name in names:
            i = pool.add(E.Atom(name), [inp[name] for inp in inputs])
            if i is not None:
                consider(i)
        for name in names:  # the inputs' scalar multiples a student writes, as a callable's argument: F(2 x)
            for c in SCALES:
                i = pool.add(E.scale(E.Atom(name), c), [inp[name] * c for inp in inputs])
                if i is not None:
                    pool.arguments_only.add(i)
        for s in range(2, max_size + 1):
            if found and min(f[0] for f in found) < s:
                break
            if time.perf_counter() - t0 > budget_s or len(pool.items) > MAX_POOL:
                break
            _grow(pool, s, callables, products, consider)
        if not found:
            pair = _pair(pool, y, lambda v: matches(v, ones), budget_s - (time.perf_counter() - t0))
            if pair is not None:
                found.append(pair)
    if not found:
        return None
    found.sort(key=lambda f: (f[0], f[1], f[2].key))
    size, _, e, c = found[0]
    return Identified(e, c, size, len(found) - 1)


def _coefficients(flat: np.ndarray, y: np.ndarray, bounds: list, sizes: list) -> list | None:
    """One least-squares coefficient per case, when they are one number, or one word of each
    case's sizes (``1/sqrt(d)`` on cases of different d); None otherwise."""
    cs, common = [], None
    for i in range(len(bounds) - 1):
        v, t = flat[bounds[i]:bounds[i + 1]], y[bounds[i]:bounds[i + 1]]
        vv = float(v @ v)
        if vv <= 0:
            return None
        c = float(v @ t) / vv
        cs.append(c)
        words = [(np.sign(c), w) for w in E.number_words_all(abs(c), sizes[i])]
        common = words if common is None else [w for w in common if w in words]
    if common:
        sg, w = common[0]
        return [float(sg) * _value_of(w, sz) for sz in sizes]
    if max(cs) - min(cs) <= 1e-4 * max(1.0, abs(cs[0])):
        return [cs[0]] * len(cs)
    return None


def _sizes(inputs: dict) -> dict:
    first = next(iter(inputs.values()))
    shape = tuple(first.shape)
    out = {"d": shape[-1]}
    if len(shape) >= 2:
        out["T"] = shape[-2]
    return out


def _value_of(word: str, sizes: dict) -> float:
    import math

    inv = word.startswith("1/")
    w = word[2:] if inv else word
    if w.startswith("sqrt("):
        inner = w[5:-1]
        v = math.sqrt(float(sizes.get(inner, inner)))
    else:
        v = float(sizes.get(w, w))
    return 1 / v if inv else v


def _grow(pool: _Pool, s: int, callables: list[dict], products: tuple, consider) -> None:
    """Add every expression of size ``s``: a callable of one of size ``s - 1``; a sum, or a
    product, of two whose sizes add to ``s - 1``."""
    names = list(callables[0])
    for i in list(pool.by_size.get(s - 1, [])):
        e, vals, _ = pool.items[i]
        for c in names:
            out = [_evaluate(cb[c], v) for cb, v in zip(callables, vals)]
            if any(o is None or not hasattr(o, "shape") for o in out):
                continue
            j = pool.add(E.Call(c, e), out)
            if j is not None:
                consider(j)
    for s1 in range(1, s - 1):
        s2 = s - 1 - s1
        for i in [i for i in pool.by_size.get(s1, []) if i not in pool.arguments_only]:
            for j in [j for j in pool.by_size.get(s2, []) if j not in pool.arguments_only]:
                ea, va, _ = pool.items[i]
                eb, vb, _ = pool.items[j]
                if s1 == s2 and j <= i:
                    pass
                else:
                    out = [_evaluate(lambda a, b: a + b, a, b) for a, b in zip(va, vb)]
                    if all(o is not None and tuple(o.shape) == tuple(a.shape) for o, a in zip(out, va)):
                        k = pool.add(E.add(ea, eb), out)
                        if k is not None:
                            consider(k)
                for prod in products:
                    if prod == "matmul_t":
                        fn, ex = (lambda a, b: a @ b.transpose(-2, -1)), E.matmul(ea, E.transpose(eb))
                    else:
                        fn, ex = (lambda a, b: a @ b), E.matmul(ea, eb)
                    out = [_evaluate(fn, a, b) for a, b in zip(va, vb)]
                    if all(o is not None for o in out):
                        k = pool.add(ex, out)
                        if k is not None:
                            consider(k)


def _pair(pool: _Pool, y: np.ndarray, matches, budget_s: float) -> tuple | None:
    """``E1 + E2`` (coefficients 1) whose values are the outputs: for each ``E1`` the rest
    ``y - E1`` is looked up among the pool's values by a random projection, then checked."""
    if budget_s <= 0 or len(pool.items) < 2:
        return None
    good = [i for i, (_, vals, flat) in enumerate(pool.items) if flat.size == y.size and i not in pool.arguments_only]
    if len(good) < 2:
        return None
    rng = np.random.default_rng(0)
    p = rng.normal(size=y.size)
    keys = np.array([pool.items[i][2] @ p for i in good])
    order = np.argsort(keys)
    sk = keys[order]
    scale = np.abs(p).sum() * (np.abs(y).max() + 1.0) * 1e-3
    t0 = time.perf_counter()
    best = None
    for a_pos, i in enumerate(good):
        if time.perf_counter() - t0 > budget_s:
            break
        target = float(y @ p) - keys[a_pos]
        lo, hi = np.searchsorted(sk, target - scale), np.searchsorted(sk, target + scale)
        for j in order[lo:hi]:
            jj = good[j]
            if jj == i:
                continue
            v = pool.items[i][2] + pool.items[jj][2]
            if matches(v):
                e = E.add(pool.items[i][0], pool.items[jj][0])
                cand = (E.size(e), 0.0, e, [1.0] * pool.n)
                if best is None or cand[0] < best[0]:
                    best = cand
    return best
