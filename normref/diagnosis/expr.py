"""Formulas as values: the expressions a traced answer computes, in a canonical form, and their
rendering in the lessons' notation.

An expression is built from the question's inputs (:class:`Atom`: ``x``, ``q``, ``alpha`` ...) by
the callables handed in and the functions a student calls (:class:`Call`: ``F(.)``, ``norm(.)``,
``tanh(.)``, ``mean(., dim=-1)``), sums with scalar coefficients (:class:`Lin`), elementwise
products and powers (:class:`Prod`), matrix products (:class:`MatMul`) and axis permutations
(:class:`Perm`; the transpose of the last two axes is ``^T``). The constructors (:func:`add`,
:func:`scale`, :func:`mul`, :func:`matmul`, :func:`permute`, :func:`power`) keep every expression
canonical: sums flattened and merged, products expanded over sums and sorted, coefficients pulled
out of products and matrix products, transposes pushed to the leaves. Two answers compute the
same formula exactly when their canonical forms are equal (``==``, ``hash``).

:func:`render` writes an expression as the lessons do: ``x + out_norm(F(norm(x)))``,
``q_norm(q) k_norm(k)^T / sqrt(d)``, ``weight * tanh(alpha * x) + bias``; coefficients are said
as the numbers of the case (:func:`number_words`: ``sqrt(d)``, ``1/d``, ``sqrt(2)``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

__all__ = ["Expr", "Atom", "Call", "Lin", "Prod", "MatMul", "Perm", "add", "scale", "mul", "matmul",
           "permute", "power", "transpose", "terms", "calls_in", "render", "number_words", "size",
           "coefficient_of", "substitute", "intermediates", "nodes"]

_TOL = 1e-7


def _num(c: float) -> str:
    """A coefficient in a canonical key: 7 significant digits (equal formulas, equal keys)."""
    if abs(c - round(c)) < _TOL * max(1.0, abs(c)):
        return str(int(round(c)))
    return f"{c:.7g}"


class Expr:
    """A canonical expression (immutable; equal when their keys are)."""

    key: str

    def __eq__(self, other) -> bool:
        return isinstance(other, Expr) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __lt__(self, other: "Expr") -> bool:
        return self.key < other.key

    def __repr__(self) -> str:
        return self.key


@dataclass(eq=False, repr=False)
class Atom(Expr):
    """An input of the question (``x``, ``q``, ``weight``) or a constant tensor (``one``)."""

    name: str
    key: str = field(init=False)

    def __post_init__(self):
        self.key = self.name


@dataclass(eq=False, repr=False)
class Call(Expr):
    """``fn(arg)``: a callable handed in (``F``, ``norm``) or a function of the student's code
    (``tanh``, ``softmax(dim=-1)``, ``mean(dim=-1)``)."""

    fn: str
    arg: Expr
    #: the call's other arguments as written (``"dim=-1"``), part of the formula
    params: str = ""
    key: str = field(init=False)

    def __post_init__(self):
        self.key = f"{self.fn}({self.arg.key}{', ' + self.params if self.params else ''})"


@dataclass(eq=False, repr=False)
class Lin(Expr):
    """``sum c_i t_i``: at least two terms, or one term with a coefficient other than 1; no term
    is itself a :class:`Lin`; sorted by key."""

    items: tuple  # ((term, coefficient), ...)
    key: str = field(init=False)

    def __post_init__(self):
        self.key = "(" + " + ".join(f"{_num(c)}*{t.key}" for t, c in self.items) + ")"


@dataclass(eq=False, repr=False)
class Prod(Expr):
    """An elementwise product of at least two factors (or one with a power other than 1):
    ``((factor, power), ...)``, factors neither sums nor products, sorted by key."""

    factors: tuple
    key: str = field(init=False)

    def __post_init__(self):
        self.key = "[" + " * ".join(f.key if p == 1 else f"{f.key}^{_num(p)}" for f, p in self.factors) + "]"


@dataclass(eq=False, repr=False)
class MatMul(Expr):
    """``a @ b`` over the last two axes (neither factor a sum or carries a coefficient)."""

    a: Expr
    b: Expr
    key: str = field(init=False)

    def __post_init__(self):
        self.key = f"{{{self.a.key} @ {self.b.key}}}"


@dataclass(eq=False, repr=False)
class Perm(Expr):
    """``arg`` with its axes permuted (``perm`` counted from the end: ``(-1, -2)`` is the
    transpose of the last two, written ``^T``)."""

    arg: Expr
    perm: tuple
    key: str = field(init=False)

    def __post_init__(self):
        self.key = f"{self.arg.key}^T" if self.perm == _T else f"{self.arg.key}^perm{self.perm}"


_T = ("T",)


# --------------------------------------------------------------------------- constructors


def terms(e: Expr) -> dict:
    """``{term: coefficient}`` of ``e`` (a sum's terms, or ``{e: 1}``)."""
    if isinstance(e, Lin):
        return dict(e.items)
    return {e: 1.0}


def _from_terms(d: dict) -> Expr:
    items = tuple(sorted(((t, c) for t, c in d.items() if abs(c) > _TOL), key=lambda tc: tc[0].key))
    if not items:
        return ZERO
    if len(items) == 1 and abs(items[0][1] - 1) < _TOL:
        return items[0][0]
    return Lin(items)


ZERO = Atom("0")


def add(*es: Expr, coeffs: Iterable[float] | None = None) -> Expr:
    """``sum c_i e_i`` (coefficients 1 unless given), canonical."""
    out: dict = {}
    for e, c in zip(es, coeffs if coeffs is not None else [1.0] * len(es)):
        if e == ZERO:
            continue
        for t, k in terms(e).items():
            out[t] = out.get(t, 0.0) + c * k
    return _from_terms(out)


def scale(e: Expr, c: float) -> Expr:
    """``c * e``."""
    return add(e, coeffs=[c])


def _factors(e: Expr) -> dict:
    return dict(e.factors) if isinstance(e, Prod) else {e: 1.0}


def _product(fs: dict) -> Expr:
    items = tuple(sorted(((f, p) for f, p in fs.items() if abs(p) > _TOL), key=lambda fp: fp[0].key))
    if not items:
        return ONE
    if len(items) == 1 and abs(items[0][1] - 1) < _TOL:
        return items[0][0]
    return Prod(items)


ONE = Atom("1")


def _mul_terms(a: Expr, b: Expr) -> Expr:
    if a == ONE:
        return b
    if b == ONE:
        return a
    fs = _factors(a)
    for f, p in _factors(b).items():
        fs[f] = fs.get(f, 0.0) + p
    return _product(fs)


def mul(a: Expr, b: Expr) -> Expr:
    """The elementwise product ``a * b``, expanded over sums."""
    out: dict = {}
    for ta, ca in terms(a).items():
        for tb, cb in terms(b).items():
            t = _mul_terms(ta, tb)
            for tt, k in terms(t).items():
                out[tt] = out.get(tt, 0.0) + ca * cb * k
    return _from_terms(out)


def power(e: Expr, p: float) -> Expr:
    """``e ** p`` (``p = -1``: ``1 / e``); a product's factors each raised, a scaled term's
    coefficient raised with it; a sum stays one factor."""
    if abs(p - 1) < _TOL:
        return e
    t = terms(e)
    if len(t) == 1:
        (term, c), = t.items()
        if c > 0 or float(p).is_integer():
            fs = {f: q * p for f, q in _factors(term).items()}
            return scale(_product(fs), c ** p)
    return _product({e: p})


def matmul(a: Expr, b: Expr) -> Expr:
    """``a @ b``, bilinear: coefficients and sums pulled out."""
    out: dict = {}
    for ta, ca in terms(a).items():
        for tb, cb in terms(b).items():
            t = MatMul(ta, tb)
            out[t] = out.get(t, 0.0) + ca * cb
    return _from_terms(out)


def transpose(e: Expr) -> Expr:
    """``e^T`` (the last two axes), pushed down: ``(a @ b)^T = b^T @ a^T``, ``(e^T)^T = e``."""
    return permute(e, _T)


def permute(e: Expr, perm: tuple) -> Expr:
    """``e`` with its axes permuted: ``perm`` is ``("T",)`` (the last two) or any other key."""
    if isinstance(e, Lin):
        return _from_terms({permute(t, perm): c for t, c in e.items})
    if perm == _T:
        if isinstance(e, Perm) and e.perm == _T:
            return e.arg
        if isinstance(e, MatMul):
            return matmul(transpose(e.b), transpose(e.a))
        if isinstance(e, Prod):
            return _product({transpose(f): p for f, p in e.factors})
    return Perm(e, perm)


def coefficient_of(e: Expr) -> tuple[Expr, float]:
    """``(e / c, c)`` when ``e`` is one term with coefficient ``c``, else ``(e, 1)``."""
    t = terms(e)
    if len(t) == 1:
        (term, c), = t.items()
        return term, c
    return e, 1.0


def size(e: Expr) -> int:
    """The number of nodes (atoms, calls, sums' terms, products' factors, matrix products)."""
    if isinstance(e, Atom):
        return 1
    if isinstance(e, Call):
        return 1 + size(e.arg)
    if isinstance(e, Lin):
        return sum(size(t) for t, _ in e.items) + len(e.items) - 1 + sum(abs(c - 1) > _TOL for _, c in e.items)
    if isinstance(e, Prod):
        return sum(size(f) for f, _ in e.factors) + len(e.factors) - 1
    if isinstance(e, MatMul):
        return 1 + size(e.a) + size(e.b)
    if isinstance(e, Perm):
        return 1 + size(e.arg)
    return 1


def calls_in(e: Expr) -> list[Call]:
    """Every :class:`Call` in ``e``, outermost first."""
    out: list[Call] = []

    def walk(n: Expr) -> None:
        if isinstance(n, Call):
            out.append(n)
            walk(n.arg)
        elif isinstance(n, Lin):
            for t, _ in n.items:
                walk(t)
        elif isinstance(n, Prod):
            for f, _ in n.factors:
                walk(f)
        elif isinstance(n, MatMul):
            walk(n.a)
            walk(n.b)
        elif isinstance(n, Perm):
            walk(n.arg)

    walk(e)
    return out


def substitute(e: Expr, old: Expr, new: Expr) -> Expr:
    """``e`` with every occurrence of ``old`` replaced by ``new`` (canonical again)."""
    if e == old:
        return new
    if isinstance(e, Call):
        return Call(e.fn, substitute(e.arg, old, new), e.params)
    if isinstance(e, Lin):
        return add(*[substitute(t, old, new) for t, _ in e.items], coeffs=[c for _, c in e.items])
    if isinstance(e, Prod):
        out: Expr = ONE
        for f, p in e.factors:
            out = mul(out, power(substitute(f, old, new), p))
        return out
    if isinstance(e, MatMul):
        return matmul(substitute(e.a, old, new), substitute(e.b, old, new))
    if isinstance(e, Perm):
        return permute(substitute(e.arg, old, new), e.perm)
    return e


# --------------------------------------------------------------------------- words


def _number_candidates(context: dict | None) -> list[tuple[str, float]]:
    cands: list[tuple[str, float]] = []
    for name, v in sorted((context or {}).items(), key=lambda kv: (kv[0] != "d", kv[0])):
        if v and v > 1:
            cands += [(name, v), (f"sqrt({name})", math.sqrt(v)), (f"1/{name}", 1 / v),
                      (f"1/sqrt({name})", 1 / math.sqrt(v))]
    cands += [(str(k), float(k)) for k in range(1, 17)]
    cands += [(f"1/{k}", 1 / k) for k in range(2, 17)]
    for k in (2, 3, 8):
        cands += [(f"sqrt({k})", math.sqrt(k)), (f"1/sqrt({k})", 1 / math.sqrt(k))]
    return cands + [("0.5", 0.5), ("0.25", 0.25), ("1.5", 1.5)]


def number_words_all(c: float, context: dict | None = None) -> list[str]:
    """Every way :func:`number_words` can say ``c`` (the case's sizes' words first)."""
    if c <= 0:
        return []
    return [name for name, v in _number_candidates(context) if abs(c - v) <= 1e-4 * max(1.0, v)]


def number_words(c: float, context: dict | None = None) -> str | None:
    """A positive number as a student would write it, from the case's sizes (``context``:
    ``{"d": 8, "T": 3}``, said first) and the small integers: ``"sqrt(d)"``, ``"1/d"``,
    ``"sqrt(2)"``, ``"2"``; None when none fits within 1e-4."""
    words = number_words_all(c, context)
    return words[0] if words else None


def _coef_prefix(c: float, context: dict | None) -> tuple[str, str]:
    """``(prefix, suffix)`` that say the coefficient ``c`` around a term: ``("2 ", "")``,
    ``("", " / sqrt(d)")``, ``("-", "")``."""
    sign = "-" if c < 0 else ""
    a = abs(c)
    if abs(a - 1) < _TOL:
        return sign, ""
    w = number_words(a, context)
    if w is not None and w.startswith("1/"):
        return sign, f" / {w[2:]}"
    if w is not None:
        return f"{sign}{w} ", ""
    return f"{sign}{a:.3g} ", ""


def _atomic(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += ch in "(["
        depth -= ch in ")]"
        if depth == 0 and ch in " +-*/@":
            return False
    return True


#: The inputs a sum names first (the residual stream): ``x + F(Norm(x))``, ``q``, ``k``, ``dy``.
LEAD = ("x", "q", "k", "dy", "h")


def render(e: Expr, context: dict | None = None, names: dict | None = None) -> str:
    """``e`` in the lessons' notation: ``x + out_norm(F(norm(x)))``, ``q_norm(q) k_norm(k)^T /
    sqrt(d)``, ``weight * tanh(alpha * x) + bias``.

    Args:
        context: the case's sizes for coefficients (``{"d": 8}``: ``0.3536`` is ``1 / sqrt(d)``).
        names: ``{expr: name}`` of intermediates to write by name (a block's ``h``).
    """
    names = names or {}
    if e in names:
        return names[e]
    if isinstance(e, Atom):
        return e.name
    if isinstance(e, Call):
        return f"{e.fn}({render(e.arg, context, names)}{', ' + e.params if e.params else ''})"
    if isinstance(e, Lin):
        return _render_sum(e, context, names)
    if isinstance(e, Prod):
        return _render_prod(e, context, names)
    if isinstance(e, MatMul):
        a, b = render(e.a, context, names), render(e.b, context, names)
        a = a if _atomic(a) else f"({a})"
        b = b if _atomic(b) else f"({b})"
        return f"{a} {b}"
    if isinstance(e, Perm):
        inner = render(e.arg, context, names)
        inner = inner if _atomic(inner) and (" " not in inner or isinstance(e.arg, Call)) else f"({inner})"
        if e.perm == _T:
            return f"{inner}^T"
        if e.perm == tuple(range(-1, -len(e.perm) - 1, -1)):
            return f"{inner}.T"
        return f"{inner}.permute{e.perm}"
    return e.key


def _render_sum(e: Lin, context, names) -> str:
    items = list(e.items)
    cs = [c for _, c in items]
    # one common coefficient: said once, around the sum ((x + F(Norm(x))) / sqrt(2))
    if len(items) > 1 and all(abs(c - cs[0]) < 1e-9 * max(1, abs(cs[0])) for c in cs) and abs(cs[0] - 1) > _TOL:
        inner = render(add(*[t for t, _ in items]), context, names)
        pre, post = _coef_prefix(cs[0], context)
        return f"{pre}({inner}){post}"
    for named, word in names.items():  # a named sum among the terms: h + mlp(...)
        if isinstance(named, Lin) and named != e:
            inside = dict(named.items)
            mine = dict(items)
            if all(t in mine and abs(mine[t] - c) < _TOL for t, c in inside.items()):
                rest = _from_terms({t: c for t, c in mine.items() if t not in inside})
                return f"{word} + {render(rest, context, names)}"
    common = _common_factor(items)
    if common is not None:
        return common(context, names)
    # the terms in a reading order: the residual stream first, then the smaller terms, a
    # parameter (a bias) or a constant last: x + F(Norm(x)), weight * tanh(alpha * x) + bias
    items.sort(key=lambda tc: (0 if isinstance(tc[0], Atom) and tc[0].name in LEAD else
                               2 if isinstance(tc[0], Atom) else 1, size(tc[0]), tc[0].key))
    out = ""
    for i, (t, c) in enumerate(items):
        if t == ONE:  # a constant added: the number itself
            out += (f"{c:g}" if i == 0 else (" - " if c < 0 else " + ") + f"{abs(c):g}")
            continue
        s = render(t, context, names)
        s_par = s if _atomic(s) or isinstance(t, (Prod, MatMul)) else f"({s})"
        pre, post = _coef_prefix(abs(c), context)
        body = (pre + (s_par if pre or post else s) + post) if (pre or post) else s
        if i == 0:
            out = ("-" if c < 0 else "") + body
        else:
            out += (" - " if c < 0 else " + ") + body
    return out


def _common_factor(items: list):
    """A sum whose terms share factors, said with them taken out once: ``alpha * (x - mean(x)) /
    std(x)`` rather than ``alpha * x / std(x) - alpha * mean(x) / std(x)``; None when they share none."""
    if len(items) < 2:
        return None
    fsets = [_factors(t) for t, _ in items]
    shared = {f: p for f, p in fsets[0].items() if all(fs.get(f) == p for fs in fsets[1:])}
    if not shared or any(set(fs) == set(shared) for fs in fsets):
        return None
    rest = add(*[_product({f: p for f, p in fs.items() if f not in shared}) for fs in fsets],
               coeffs=[c for _, c in items])
    num = {f: p for f, p in shared.items() if p > 0}
    den = {f: -p for f, p in shared.items() if p < 0}

    def said(context, names) -> str:
        inner = render(rest, context, names)
        parts = [render(_product(num), context, names)] if num else []
        text = " * ".join(parts + [f"({inner})"])
        if den:
            d = render(_product(den), context, names)
            text += f" / {d if _atomic(d) else '(' + d + ')'}"
        return text

    return said


def _render_prod(e: Prod, context, names) -> str:
    num, den = [], []
    ordered = sorted(e.factors, key=lambda fp: (not isinstance(fp[0], Atom), fp[0].key))
    for f, p in ordered:
        s = render(f, context, names)
        s = s if _atomic(s) else f"({s})"
        if p > 0:
            num.append(s if abs(p - 1) < _TOL else (f"{s}**{_num(p)}" if p != 0.5 else f"sqrt({s.strip('()')})"))
        else:
            q = -p
            root = f"sqrt({s.strip('()')})"
            den.append(s if abs(q - 1) < _TOL else (root if abs(q - 0.5) < _TOL else f"{s}**{_num(q)}"))
    top = " * ".join(num) if num else "1"
    if not den:
        return top
    bottom = den[0] if len(den) == 1 else "(" + " * ".join(den) + ")"
    return f"{top} / {bottom}"


def nodes(e: Expr) -> list[Expr]:
    """Every node of ``e``, ``e`` first."""
    out = [e]
    if isinstance(e, Call):
        out += nodes(e.arg)
    elif isinstance(e, Lin):
        for t, _ in e.items:
            out += nodes(t)
    elif isinstance(e, Prod):
        for f, _ in e.factors:
            out += nodes(f)
    elif isinstance(e, MatMul):
        out += nodes(e.a) + nodes(e.b)
    elif isinstance(e, Perm):
        out += nodes(e.arg)
    return out


def intermediates(R: Expr, S: Expr, min_size: int = 4) -> dict:
    """Sub-formulas worth a name in a long formula, ``{expr: name}``: ``h``, the reference's
    intermediate (a sum a callable reads: a block's ``h = x + self_attn(input_layernorm(x))``),
    and ``g``, one of the answer's own when it does not use ``h`` (a call it makes twice, else
    a sum a callable reads)."""
    def candidates(e: Expr) -> list:
        all_nodes = nodes(e)
        counts: dict = {}
        for n in all_nodes:
            counts[n] = counts.get(n, 0) + 1
        read = {c.arg for c in all_nodes if isinstance(c, Call) and isinstance(c.arg, Lin)}
        twice = [n for n, k in counts.items() if k >= 2 and isinstance(n, Call) and size(n) >= min_size]
        sums = sorted((n for n in read if size(n) >= min_size and n != e), key=lambda n: (size(n), n.key))
        return [n for n in twice + sums if n != e]

    out: dict = {}
    r = candidates(R)
    if r:
        out[r[0]] = "h"
    if not any(n in nodes(S) or _inside(n, S) for n in out):
        s_c = candidates(S)
        if s_c:
            out[s_c[0]] = "g" if out else "h"
    return out


def _inside(named: Expr, e: Expr) -> bool:
    """Whether a named sum's terms all appear among some sum's terms in ``e``."""
    if not isinstance(named, Lin):
        return False
    inside = dict(named.items)
    for n in nodes(e):
        if isinstance(n, Lin):
            mine = dict(n.items)
            if all(t in mine and abs(mine[t] - c) < _TOL for t, c in inside.items()):
                return True
    return False
