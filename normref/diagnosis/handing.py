"""Handing the trace back: the diagnosis' trace made where the student's code runs.

Where grading makes the graded calls (the grader's clean room: :func:`normref.handback.run_calls`,
:func:`normref.plan.run_plan`), each call is traced afterwards as the self-check traces it
(:func:`trace_record`, :func:`.trace.trace_answer`), and the result goes into that call's record
(:mod:`.handed` reads it back in the grader). :func:`trace_imports` names what that process
imports for it before its seal.
"""
from __future__ import annotations

from .handed import TRACE_KEY, expr_json

__all__ = ["trace_imports", "trace_record", "trace_into", "TRACE_MODULES"]

#: The modules a trace runs (with ``normref.calling``, ``normref._torch`` and ``normref.wire``): the
#: grader's clean room keeps their code where every other normref function is absent
#: (``grader/kernel/cleanroom_seal.py``). None computes a normalization: they follow the answer's.
TRACE_MODULES = ("normref.diagnosis.expr", "normref.diagnosis.sym", "normref.diagnosis.trace",
                 "normref.diagnosis.questions", "normref.diagnosis.handed", "normref.diagnosis.handing")


def trace_imports(checker: str | None) -> list[str]:
    """The modules a process must have imported to trace answers to ``checker``'s question (the
    grader's clean room imports them before its seal, which refuses reading files): the tracing
    itself and the module that declares the question (where its ``args`` is defined); ``[]``
    for a question not declared or not traced."""
    from .questions import declared

    q = declared(checker) if checker else None
    if q is None or not q.traceable:
        return []
    home = getattr(q.args, "__module__", None)
    return [*TRACE_MODULES, *([home] if home else [])]


def trace_record(checker: str | None, answer, args: tuple, kwargs: dict, module=None) -> dict | None:
    """The trace of one call of ``answer`` as the self-check makes it (the question declared
    for ``checker``, :func:`.questions.declared`; :func:`.trace.trace_answer`): ``{"expr":
    formula as JSON, "value": the traced value, normref.wire.encode}``, or None where the
    question is not traced or the code cannot be followed (or raised). ``module``: for a class
    question, the student's module built for the call: its parts named by the question's other
    parameters are replaced by the stand-ins and it is called on the first (the self-check
    builds a fresh one the same way, ``Question.call``; here no course code but the tracing
    runs, the rest of normref being absent where this runs).

    Raises:
        normref.calling.Timeout: the traced call ran past its time (trace no further calls).
    """
    from .questions import declared
    from .trace import trace_answer, traceable

    q = declared(checker) if checker else None
    if q is None or not q.traceable or not traceable(answer):
        return None
    if module is None:
        t = trace_answer(q, answer, tuple(args), dict(kwargs))
    else:
        t = trace_answer(q, module, tuple(args), dict(kwargs), invoke=lambda m, a, k: _forward(q, m, a, k))
    if t is None:
        return None
    from ..wire import encode

    try:
        return {"expr": expr_json(t.expr), "value": encode(t.value)}
    except TypeError:
        return None


def _forward(q, m, args: tuple, kwargs: dict):
    """``m`` with its parts (the question's parameters after the first) set to ``args[1:]``,
    called on ``args[0]``."""
    from .trace import as_module

    for name, part in zip(q.params[1:], args[1:]):
        setattr(m, name, as_module(part))
    return m(args[0], **kwargs)


def trace_into(checker: str, answer, items: list, until: float) -> None:
    """The trace of each call ``(args, kwargs, record)`` of ``items`` (:func:`trace_record`; an
    item ``(args, kwargs, record, module)``: a class question's built module) into
    ``record["traced"]``, made after the graded calls and outside their recorder (it changes no
    output and finds nothing a rule counts), until one runs past its time or the clock
    (``time.monotonic()``) reaches ``until``. A trace that fails is left out: it costs nothing."""
    import time

    from ..calling import Timeout

    for args, kwargs, rec, *module in items:
        if time.monotonic() > until:
            return
        try:
            found = trace_record(checker, answer, args, kwargs, *module)
        except Timeout:
            return
        except Exception:  # noqa: BLE001 - the answer's code, followed: what it raises is its own
            continue
        if found is not None:
            rec[TRACE_KEY] = found
