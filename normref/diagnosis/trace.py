"""Tracing: run an answer on stand-ins that record the formula it computes.

Each tensor input of the question becomes a :class:`Sym`, which carries the real tensor (so
every shape, dtype, broadcast and error is the real one) and the formula that gave it
(:mod:`.expr`); each callable handed in becomes a :class:`StandIn` that calls the real one and
records ``name(arg)``. Sums, scalar multiples, elementwise products and powers, matrix products,
transposes and permutations, casts, and the elementwise and reducing functions of torch a
student uses (``torch.tanh``, ``torch.add``, ``torch.einsum`` for a product of two operands,
``x.mean(dim=-1)``, ...) are followed through ``__torch_function__`` and the operators. What
cannot be followed (indexing, a real tensor that is not a single number, branching on a
value, a function not listed here) raises :class:`Untraceable`: the caller then identifies the
answer numerically (:mod:`.compose`).

:func:`trace` calls the answer on one case and returns the :class:`Traced` formula, with the
casts it made, or None; the caller checks that the traced value is what the answer returned.
"""
from __future__ import annotations

import contextlib
import io
import types
from dataclasses import dataclass
from typing import Callable

from . import expr as E
from .sym import Sym, Untraceable, _Log

__all__ = ["Sym", "StandIn", "Traced", "Untraceable", "as_module", "parts_of", "rebuild", "stand_in_module", "trace",
           "trace_answer", "traceable"]


def _torch():
    import torch

    return torch


# --------------------------------------------------------------------------- stand-ins


class StandIn:
    """A callable handed in, traced: calls the real one on the value and records
    ``name(arg)``. A call on anything but a :class:`Sym` is not followed."""

    def __init__(self, name: str, real: Callable):
        self.name, self.real = name, real

    def __call__(self, v, *a, **k):
        if not isinstance(v, Sym) or a or k:
            raise Untraceable(f"{self.name} called on something other than one tensor")
        return v._new(self.real(v.value), E.Call(self.name, v.expr))

    def __repr__(self) -> str:
        return repr(self.real)

    def __getattr__(self, item):  # a norm's normalized_shape, weight, eps ...
        return getattr(self.real, item)


def stand_in_module(name: str, real):
    """An ``nn.Module`` stand-in (a block's submodule, which ``nn.Module.__setattr__`` requires
    to be a module) that traces like :class:`StandIn`."""
    from torch import nn

    class TracedPart(nn.Module):
        def __init__(self):
            super().__init__()
            self.trace_name = name
            object.__setattr__(self, "trace_real", real)

        def forward(self, v, *a, **k):
            return StandIn(self.trace_name, self.trace_real)(v, *a, **k)

    return TracedPart()


# --------------------------------------------------------------------------- tracing


@dataclass
class Traced:
    """What one traced call computed: its formula, the real value (the answer's output on the
    case, recomputed) and the casts it made (``(where, from, to)``)."""

    expr: E.Expr
    value: object
    casts: list


def traceable(fn) -> bool:
    """Whether ``fn`` is code to trace: a Python function, method or class a student (or a test)
    wrote; never normref's or the grader's own (the hand-back's probe, the grader's replays)."""
    if isinstance(fn, (types.FunctionType, types.MethodType)):
        code = getattr(fn, "__code__", None) or getattr(getattr(fn, "__func__", None), "__code__", None)
        module = str(getattr(fn, "__module__", "") or "")
    elif isinstance(fn, type):
        module = str(getattr(fn, "__module__", "") or "")
        code = True
    else:
        return False
    return bool(code) and module.split(".")[0] not in ("normref", "grader")


def trace(call: Callable, inputs: dict, callables: dict, timeout: float = 2.0) -> Traced | None:
    """Call ``call(**stand-ins)`` once and return what it computed, or None where the code
    cannot be followed (or raised, or did not return a traced tensor). Raises
    :class:`normref.calling.Timeout` when the call ran past ``timeout`` (the caller stops
    tracing that answer).

    Args:
        call: ``call(symbols: dict, stand_ins: dict) -> output``: runs the answer on them.
        inputs: ``{name: tensor}``: each becomes a :class:`Sym` whose formula is ``name``.
        callables: ``{name: callable}``: each becomes a :class:`StandIn` named ``name``.
        timeout: seconds the call may run.
    """
    from ..calling import Timeout, call_with_timeout

    torch = _torch()
    log = _Log()
    syms = {n: Sym(v.detach().clone(), E.Atom(n), log) for n, v in inputs.items()}
    stands = {n: StandIn(n, f) for n, f in callables.items()}
    try:  # what the answer prints while traced is not the student's output: kept out of the cell
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            out = call_with_timeout(call, (syms, stands), {}, timeout)
    except Timeout:
        raise
    except Untraceable:
        return None
    except Exception:  # noqa: BLE001 - the answer raised on this case (said elsewhere)
        return None
    if not isinstance(out, Sym):
        return None
    return Traced(out.expr, out.value, list(log.casts))


def _is_tensor(a) -> bool:
    from .._torch import is_tensor

    return is_tensor(a)


def parts_of(q, args: tuple) -> tuple[dict, dict]:
    """``({notation: tensor}, {notation: callable})`` of one call of question ``q``
    (:class:`.questions.Question`)."""
    inputs, callables = {}, {}
    for p, a in zip(q.params, args):
        if _is_tensor(a):
            inputs[q.notation(p)] = a
        elif callable(a) and not isinstance(a, (int, float)):
            callables[q.notation(p)] = a
    return inputs, callables


def rebuild(q, args: tuple, syms: dict, stands: dict) -> tuple:
    """The call's ``args`` with each tensor and callable replaced by its stand-in."""
    out = []
    for p, a in zip(q.params, args):
        n = q.notation(p)
        out.append(syms.get(n, stands.get(n, a)) if (_is_tensor(a) or callable(a)) else a)
    return tuple(out) + tuple(args[len(q.params):])


def trace_answer(q, answer, args: tuple, kwargs: dict, invoke: Callable | None = None) -> Traced | None:
    """The answer to question ``q`` traced on one call (:func:`trace`): the self-check's, and
    grading's where the answer runs (:mod:`.handing`). ``invoke(answer, args, kwargs)``: how
    the answer is called on the stand-ins (default :meth:`.questions.Question.invoke`).

    Raises:
        normref.calling.Timeout: the call ran past its time.
    """
    inputs, callables = parts_of(q, args)
    call = invoke or q.invoke
    return trace(lambda syms, stands: call(answer, rebuild(q, args, syms, stands), kwargs), inputs, callables)


def as_module(part):
    """``part`` where an ``nn.Module`` must go (a block's attribute): itself when it is one, a
    traced stand-in's module form when it is a :class:`StandIn`."""
    from torch import nn

    if isinstance(part, StandIn):
        return stand_in_module(part.name, part.real)
    if isinstance(part, nn.Module):
        return part
    raise Untraceable("a block part that is not a module")
