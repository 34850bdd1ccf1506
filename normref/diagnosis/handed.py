"""A trace handed back: what the diagnosis' trace of one call found where the student's code
ran, read where it is judged.

The self-check traces the answer in the student's kernel (:func:`.trace.trace_answer`). Grading
judges outputs in the grader's own process, where no student code runs: there the same trace is
made where the graded calls are made (the grader's clean room, :mod:`.handing`), and its result
(the formula, :mod:`.expr`, as JSON: :func:`expr_json`, and the traced value) travels back in
that call's record under :data:`TRACE_KEY`. The grader's stand-in for the answer
(``grader.scoring.replay``) gives it back for the call (:func:`handed_trace`), and
:func:`.diagnose.diagnose` says the same words in both places: one diagnosis, two inputs.

A record is the student's process' word: it only ever changes the words of a diagnosis (never a
score); one that does not read (a wrong shape, a name that is not a plain one, too large) is
ignored (:func:`expr_from_json`).
"""
from __future__ import annotations

import re

from . import expr as E

__all__ = ["expr_json", "expr_from_json", "traced_from_record", "handed_trace", "TRACE_KEY"]

#: The key of a call's record that holds its trace.
TRACE_KEY = "traced"
#: The most nodes a handed-back formula may have (the course's are under 100; the words of a larger one
#: would take the grader long to compose).
MAX_NODES = 400
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,79}$")
_PARAMS = re.compile(r"^[A-Za-z0-9_=\-+., ()\[\]]{0,120}$")


def expr_json(e: E.Expr) -> list:
    """``e`` as JSON: ``["atom", name]``, ``["call", fn, params, arg]``, ``["lin", [[term, c],
    ...]]``, ``["prod", [[factor, power], ...]]``, ``["matmul", a, b]``, ``["perm", arg, perm]``."""
    if isinstance(e, E.Atom):
        return ["atom", e.name]
    if isinstance(e, E.Call):
        return ["call", e.fn, e.params, expr_json(e.arg)]
    if isinstance(e, E.Lin):
        return ["lin", [[expr_json(t), float(c)] for t, c in e.items]]
    if isinstance(e, E.Prod):
        return ["prod", [[expr_json(f), float(p)] for f, p in e.factors]]
    if isinstance(e, E.MatMul):
        return ["matmul", expr_json(e.a), expr_json(e.b)]
    if isinstance(e, E.Perm):
        return ["perm", expr_json(e.arg), list(e.perm)]
    raise TypeError(f"not a formula: {type(e).__name__}")


def expr_from_json(obj) -> E.Expr | None:
    """The formula :func:`expr_json` wrote (its canonical form as it was made), or None for
    anything else: an unknown node, a name or parameter text that is not a plain one, a number
    that is not finite, more than :data:`MAX_NODES` nodes."""
    count = [0]

    def num(v) -> float:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v != v or abs(v) == float("inf"):
            raise ValueError("not a finite number")
        return float(v)

    def node(o) -> E.Expr:
        count[0] += 1
        if count[0] > MAX_NODES or not isinstance(o, list) or not o:
            raise ValueError("not a formula")
        kind, rest = o[0], o[1:]
        if kind == "atom" and len(rest) == 1 and isinstance(rest[0], str) and _NAME.match(rest[0]):
            return E.Atom(rest[0])
        if kind == "call" and len(rest) == 3 and isinstance(rest[0], str) and _NAME.match(rest[0]) \
                and isinstance(rest[1], str) and _PARAMS.match(rest[1]):
            return E.Call(rest[0], node(rest[2]), rest[1])
        if kind in ("lin", "prod") and len(rest) == 1 and isinstance(rest[0], list) and rest[0]:
            items = tuple((node(p[0]), num(p[1])) for p in rest[0] if isinstance(p, list) and len(p) == 2)
            if len(items) != len(rest[0]):
                raise ValueError("not a formula")
            return E.Lin(items) if kind == "lin" else E.Prod(items)
        if kind == "matmul" and len(rest) == 2:
            return E.MatMul(node(rest[0]), node(rest[1]))
        if kind == "perm" and len(rest) == 2 and isinstance(rest[1], list) and len(rest[1]) <= 16:
            perm = tuple(p if isinstance(p, str) and p == "T" else int(num(p)) for p in rest[1])
            return E.Perm(node(rest[0]), perm)
        raise ValueError("not a formula")

    try:
        return node(obj)
    except (ValueError, TypeError, RecursionError):
        return None


def traced_from_record(rec) -> object | None:
    """The :class:`.trace.Traced` of a handed-back ``{"expr", "value"}``, or None."""
    from ..wire import decode
    from .trace import Traced

    if not isinstance(rec, dict):
        return None
    e = expr_from_json(rec.get("expr"))
    if e is None:
        return None
    try:
        value = decode(rec.get("value") or {})
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, RuntimeError):
        return None
    return Traced(e, value, [])


def handed_trace(answer, args: tuple, kwargs: dict) -> object | None:
    """What ``answer``, a stand-in for the student's code that carries the traces made where that
    code ran (``answer.normref_traced(args, kwargs)``), hands back for this call; None."""
    find = getattr(answer, "normref_traced", None)
    if find is None:
        return None
    try:
        return traced_from_record(find(args, kwargs))
    except Exception:  # noqa: BLE001 - a trace that does not read is no trace
        return None
