"""What a formula does that the reference's does not, in the student's words.

:func:`differences` compares two canonical formulas (:mod:`.expr`) and says, clause by clause,
where they part: a callable applied to another argument, or never, or also elsewhere ("out_norm
belongs on F's output, F(norm(x)), before the residual add: yours normalizes the sum
x + F(norm(x))"; "k_norm is never applied: it belongs on k"), an input that enters elsewhere
("weight is inside tanh(...): DyT multiplies tanh's output by it"; "you divide by alpha where
DyT multiplies by it"), a term added or left out ("the residual x is not added"), a coefficient
("divided by d where the reference divides by sqrt(d)"). :func:`placement_name` names a
formula that *is* a known placement (its canonical form equals that placement's), never one
that only resembles it.
"""
from __future__ import annotations

from typing import Callable

from . import expr as E

__all__ = ["differences", "placement_name", "scale_words"]


def _r(e: E.Expr, ctx: dict) -> str:
    return E.render(e, ctx.get("sizes"), ctx.get("names"))


def _desc(e: E.Expr, ctx: dict) -> str:
    """``e`` as a place: ``"F's output, F(norm(x))"``, ``"k"``, ``"x + F(x)"``."""
    if isinstance(e, E.Call):
        return f"{e.fn}'s output, {_r(e, ctx)}"
    return _r(e, ctx)


def _args(e: E.Expr, fn: str) -> list[E.Expr]:
    return [c.arg for c in E.calls_in(e) if c.fn == fn]


def scale_words(c: float, ctx: dict) -> str:
    """``"divided by sqrt(d)"``, ``"multiplied by 2"``, ``"multiplied by 0.707"``, ``"not scaled"``."""
    if abs(c - 1) < 1e-9:
        return "not scaled"
    w = E.number_words(abs(c), ctx.get("sizes"))
    sign = "negated and " if c < 0 else ""
    if w is not None and w.startswith("1/"):
        return f"{sign}divided by {w[2:]}"
    return f"{sign}multiplied by {w if w is not None else f'{abs(c):.3g}'}"


def _extra_atoms(a: E.Expr, b: E.Expr) -> list[E.Expr] | None:
    """The terms ``a`` has beyond ``b`` when ``a = b + those`` (each an input atom), else None."""
    ta, tb = E.terms(a), E.terms(b)
    if any(abs(ta.get(t, 0.0) - c) > 1e-9 for t, c in tb.items()):
        return None
    extra = [t for t in ta if t not in tb]
    if extra and all(isinstance(t, E.Atom) for t in extra):
        return extra
    return None


_STATS = ("mean", "sum", "var", "std", "norm", "amax")


def _callable_clauses(S: E.Expr, R: E.Expr, title: str, callables: list[str], ctx: dict) -> list[str]:
    out: list[str] = []
    said: set[str] = set()
    s_args = {c: _args(S, c) for c in callables}
    r_args = {c: _args(R, c) for c in callables}
    # the whole reference's output passed through a callable once more, or its last one left out
    if isinstance(S, E.Call) and S.arg == R and S.fn in callables:
        residual = any(isinstance(t, E.Atom) for t in E.terms(R))
        ends = " ends with the residual add" if residual else f" ends at {_r(R, ctx)}"
        out.append(f"yours passes {title}'s output through {S.fn} once more: {title}{ends}")
        ctx["said_residual"] = True
        return out
    if isinstance(R, E.Call) and R.arg == S and R.fn in callables:
        return [f"{R.fn} is not applied at the end: {title} ends with {R.fn}({_r(S, ctx)})"]
    # a callable moved onto a residual sum: "belongs on F's output, before the residual add"
    for c in callables:
        for b in r_args[c]:
            if b in s_args[c]:
                continue
            for c2 in callables:
                for a in s_args[c2]:
                    extra = _extra_atoms(a, b)
                    if extra and a not in r_args[c2] and c not in said:
                        if c2 == c:
                            did = f"yours normalizes the sum {_r(a, ctx)}"
                        else:
                            did = f"yours applies {c2} to the sum {_r(a, ctx)}"
                            if not s_args[c]:
                                did += f" and never applies {c}"
                        out.append(f"{c} belongs on {_desc(b, ctx)}, before the residual add: {did}")
                        said |= {c, c2}
                        ctx["said_residual"] = True
    for c in callables:
        if c in said:
            continue
        sa, ra = s_args[c], r_args[c]
        if sorted(sa) == sorted(ra):
            continue
        missing = [b for b in ra if b not in sa]
        extra = [a for a in sa if a not in ra]
        if ra and not sa:
            out.append(f"{c} is never applied: it belongs on {_desc(ra[0], ctx)}")
        elif sa and not ra:
            out.append(f"{c} is applied to {_r(sa[0], ctx)}, where {title} does not use it")
        elif missing and extra:
            out.append(f"{c} is applied to {_r(extra[0], ctx)} where {title} applies it to {_r(missing[0], ctx)}")
        elif extra:
            out.append(f"{c} is also applied to {_r(extra[0], ctx)}")
        elif missing:
            out.append(f"{c} is not applied to {_r(missing[0], ctx)}")
    return out


def _statistics_clause(S: E.Expr, R: E.Expr, title: str, ctx: dict, handed: list) -> list[str]:
    """The statistics (means, deviations, norms over an axis) the answer takes and the
    reference does not (a callable handed in is never one, whatever its name)."""
    r_calls = {c.key for c in E.calls_in(R)}
    taken = [c for c in E.calls_in(S) if c.fn in _STATS and c.fn not in handed and c.key not in r_calls]
    if not taken:
        return []
    said = ", ".join(dict.fromkeys(_r(c, ctx) for c in taken))
    return [f"you take statistics of the input, {said}, where {title} takes none"
            if not any(c.fn in _STATS for c in E.calls_in(R)) else f"you take {said}, which {title} does not"]


def _perm_clause(S: E.Expr, R: E.Expr, title: str, ctx: dict) -> list[str]:
    out = []
    r_nodes = {n.key for n in _nodes(R)}
    for n in _nodes(S):
        if isinstance(n, E.Perm) and n.key not in r_nodes and n.perm != ("T",):
            t = E.transpose(n.arg)
            if t.key in r_nodes:
                how = "reverses every axis (.T of a tensor of more than two axes)" \
                    if n.perm == tuple(range(-1, -len(n.perm) - 1, -1)) else f"permutes its axes as {n.perm}"
                out.append(f"your transpose of {_r(n.arg, ctx)} {how}, where {title} transposes the last two "
                           f"axes only, {_r(t, ctx)} (.transpose(-2, -1))")
    return out


def _nodes(e: E.Expr) -> list[E.Expr]:
    out = [e]
    if isinstance(e, E.Call):
        out += _nodes(e.arg)
    elif isinstance(e, E.Lin):
        for t, _ in e.items:
            out += _nodes(t)
    elif isinstance(e, E.Prod):
        for f, _ in e.factors:
            out += _nodes(f)
    elif isinstance(e, E.MatMul):
        out += _nodes(e.a) + _nodes(e.b)
    elif isinstance(e, E.Perm):
        out += _nodes(e.arg)
    return out


def _occurrences(e: E.Expr, atom: E.Atom) -> list[tuple]:
    """Where ``atom`` enters ``e``: ``(enclosing calls, power, how, partner)`` each time: ``how``
    ``"added"``, ``"multiplied"`` (``partner``: the call it multiplies, if any), ``"argument"``,
    ``"matmul"`` or ``"alone"``."""
    out: list[tuple] = []

    def walk(n: E.Expr, path: tuple, how: str, p: float, partner: str) -> None:
        if n == atom:
            out.append((path, p, how, partner))
        elif isinstance(n, E.Call):
            walk(n.arg, path + (n.fn,), "argument", 1.0, "")
        elif isinstance(n, E.Lin):
            for t, _ in n.items:
                walk(t, path, "added" if len(n.items) > 1 else how, p, partner)
        elif isinstance(n, E.Prod):
            calls = [f.fn for f, _ in n.factors if isinstance(f, E.Call)]
            for f, q in n.factors:
                walk(f, path, "multiplied", q * p, calls[0] if calls and f != atom or calls else "")
        elif isinstance(n, E.MatMul):
            walk(n.a, path, "matmul", p, "")
            walk(n.b, path, "matmul", p, "")
        elif isinstance(n, E.Perm):
            walk(n.arg, path, how, p, partner)

    walk(e, (), "alone", 1.0, "")
    return out


def _role(occ: tuple, name: str) -> str:
    """How one occurrence enters: ``"multiplies tanh's output"``, ``"is a factor inside tanh(...)"``."""
    path, p, how, partner = occ
    inside = f" inside {path[-1]}(...)" if path else ""
    if how == "multiplied" and partner and not path:
        return f"{'divides' if p < 0 else 'multiplies'} {partner}'s output"
    if how == "multiplied":
        return ("is a divisor" if p < 0 else "is a factor") + (inside or " of the output")
    if how == "added":
        return "is added" + (inside or " last")
    if how == "argument":
        return f"is the whole argument of {path[-1]}(...)" if path else "is the output"
    if how == "matmul":
        return "enters a matrix product" + inside
    return "is the output"


def _atom_clauses(S: E.Expr, R: E.Expr, title: str, atoms: list[str], ctx: dict) -> list[str]:
    out: list[str] = []
    never = []
    for name in atoms:
        a = E.Atom(name)
        so, ro = _occurrences(S, a), _occurrences(R, a)
        if sorted(so) == sorted(ro):
            continue
        if ro and not so:
            never.append(name)
            continue
        if so and not ro:
            out.append(f"{name} is used, where {title} does not use it")
            continue
        s_paths, r_paths = {o[0] for o in so}, {o[0] for o in ro}
        if s_paths != r_paths:
            sp = sorted(s_paths - r_paths or s_paths)[0]
            ro0 = next(o for o in ro if o[0] in (r_paths - s_paths or r_paths))
            so0 = next(o for o in so if o[0] == sp)
            out.append(f"{name} {_role(so0, name)}" if sp else f"{name} is outside every function")
            out[-1] += f", where {title}'s {name} {_role(ro0, name)}"
            continue
        s_pow, r_pow = {(o[0], o[1]) for o in so}, {(o[0], o[1]) for o in ro}
        if s_pow != r_pow:
            q = sorted(s_pow - r_pow)[0][1] if s_pow - r_pow else 1.0
            ref_q = sorted(r_pow - s_pow)[0][1] if r_pow - s_pow else 1.0
            out.append(f"you {'divide by' if q < 0 else 'multiply by'} {name}{_pw(q)} where {title} "
                       f"{'divides by' if ref_q < 0 else 'multiplies by'} {name}{_pw(ref_q)}")
            continue
        out.append(f"{name} {_role(sorted(so)[0], name)}, where {title}'s {name} {_role(sorted(ro)[0], name)}")
    if never:
        out.insert(0, f"{' and '.join(never)} {'is' if len(never) == 1 else 'are'} never used")
    return out


def _pw(q: float) -> str:
    return "" if abs(abs(q) - 1) < 1e-9 else f"**{abs(q):g}"


def _term_clauses(S: E.Expr, R: E.Expr, title: str, ctx: dict) -> list[str]:
    """Top-level terms: one left out or added, or scaled otherwise."""
    out: list[str] = []
    ts, tr = E.terms(S), E.terms(R)
    if len(ts) == 1 and len(tr) == 1:  # one term each: the same formula scaled as a whole?
        (s_t, s_c), = ts.items()
        (r_t, r_c), = tr.items()
        if s_t == r_t and abs(s_c / r_c - 1) > 1e-6:
            return [f"yours is {scale_words(s_c, ctx)} where {title}'s is {scale_words(r_c, ctx)}"]
    if len(ts) > 1 and set(ts) == set(tr):
        ks = [ts[t] / tr[t] for t in ts]
        if max(ks) - min(ks) < 1e-6 * max(1.0, abs(ks[0])) and abs(ks[0] - 1) > 1e-6:
            return [f"the whole output is {scale_words(ks[0], ctx)}"]
    for t, c in tr.items():
        if t in ts and abs(ts[t] - c) > 1e-6 * max(1.0, abs(c)):
            what = "the residual " + _r(t, ctx) if isinstance(t, E.Atom) else _r(t, ctx)
            if abs(ts[t] / c + 1) < 1e-9:
                out.append(f"you subtract {_r(t, ctx)} where {title} adds it")
            else:
                out.append(f"{what} is {scale_words(ts[t] / c, ctx)}")
    if ctx.get("said_residual"):
        return out
    only_s, only_r = [t for t in ts if t not in tr], [t for t in tr if t not in ts]
    if len(only_s) == 1 and len(only_r) == 1 and (isinstance(only_s[0], E.Atom) or isinstance(only_r[0], E.Atom)):
        # one term in place of another, one of them an input: "you add x where ... adds Norm(x)"
        return out + [f"you add {_r(only_s[0], ctx)} where {title} adds {_r(only_r[0], ctx)}"]
    for t, c in tr.items():
        if t not in ts and isinstance(t, E.Atom) and t.name in ctx.get("inputs", ()):
            out.append(f"the residual {_r(t, ctx)} is not added" + (
                " to the output itself" if any(t in E.terms(x.arg) for x in E.calls_in(S)) else ""))
    for t, c in ts.items():
        if t not in tr and isinstance(t, E.Atom) and t.name in ctx.get("inputs", ()):
            out.append(f"{_r(t, ctx)} is added to the output, where {title} does not add it")
    return out


def differences(S: E.Expr, R: E.Expr, *, title: str, callables: list[str], atoms: list[str],
                ctx: dict, limit: int = 3) -> list[str]:
    """What ``S`` (the student's formula) does that ``R`` (the reference's) does not, as
    clauses ("out_norm belongs on F's output, F(norm(x)), before the residual add: yours
    normalizes the sum x + F(norm(x))"), at most ``limit``; empty when ``S == R``.

    Args:
        title: what the reference is called ("Peri-LN", "DyT", "the block").
        callables: the names of the callables handed in (``F``, ``norm``): where each is
            applied is compared; without any, where each input enters (``weight`` inside
            ``tanh(...)``) is.
        atoms: the inputs' names (``x``, ``alpha``, ``weight``).
        ctx: ``{"sizes": {"d": 8}, "names": {expr: "h"}, "inputs": ("x",)}`` for the words.
    """
    if S == R:
        return []
    ctx = dict(ctx)
    clauses = _callable_clauses(S, R, title, callables, ctx)
    clauses += _perm_clause(S, R, title, ctx)
    clauses += _statistics_clause(S, R, title, ctx, callables)
    clauses += [c for c in _term_clauses(S, R, title, ctx) if c not in clauses]
    if not callables and not clauses:  # a formula of its inputs (DyT): where each one enters
        clauses += _atom_clauses(S, R, title, list(atoms), ctx)
    if not clauses:
        clauses = [f"yours computes {_r(S, ctx)} where {title} computes {_r(R, ctx)}"]
    return list(dict.fromkeys(clauses))[:limit]


def placement_name(S: E.Expr, templates: dict[str, Callable], sizes: dict | None = None) -> str | None:
    """``"Peri-LN, x + Norm(F(Norm(x)))"`` when ``S`` is that placement: ``templates`` maps a
    name to ``make() -> [formula, ...]`` (each way the question's callables fill the placement's
    slots), compared canonically; DeepNorm's ``Norm(alpha x + F(x))`` for any ``alpha != 1``."""
    for name, make in templates.items():
        for t in make():
            if t is None:
                continue
            if t == S:
                return name
            if "alpha" in name and isinstance(S, E.Call) and isinstance(t, E.Call) and S.fn == t.fn:
                ts, tt = E.terms(S.arg), E.terms(t.arg)  # t: alpha = 2; S: any alpha != 1
                if set(ts) == set(tt) and len(ts) == 2:
                    res = [k for k in ts if isinstance(k, E.Atom)]
                    other = [k for k in ts if not isinstance(k, E.Atom)]
                    if res and other and abs(ts[other[0]] - 1) < 1e-9 and abs(ts[res[0]] - 1) > 1e-6 \
                            and ts[res[0]] > 0:
                        return name.replace("alpha", f"{ts[res[0]]:.3g}", 1) if "{" not in name else name
    return None
