"""Stand-ins for the student's code while the grader's checker runs in the grader's process: each
gives back what the student's code did in the grading kernel, read from its hand-back
(:mod:`normref.wire`), so that the same checker judges it on the same cases without running
any of the student's code here.

:class:`Replay` stands in for a function (the records of :func:`normref.handback.run_calls`),
:class:`ReplayClass` for a class (the records of :func:`normref.plan.run_plan`).

Every record is decoded when its stand-in is made, before the checker calls it: the checker
runs the student's calls under the call recorder (:mod:`normref.recorder`), which counts any
normref code run inside them as the student's, the decoder included.
"""
from __future__ import annotations

import numpy as np

from normref.calling import Timeout
from normref.diagnosis.handed import TRACE_KEY
from normref.wire import decode, decode_exception, decode_report, opaque

#: What decoding a record may raise (a changed or damaged hand-back): raised when the checker
#: makes the call, as the student's code would have raised it.
_DECODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, RuntimeError)


def _outcome(rec: dict, what: str | None = None) -> tuple[bool, object]:
    """What one recorded call gives back, decoded now: ``(True, exception to raise)`` or
    ``(False, value to return)``. ``what``: the part's name when the record must hold an
    output (a submodule's call), else a missing output is an opaque object."""
    if rec.get("timeout"):
        return True, Timeout()
    if "raised" in rec:
        try:
            return True, decode_exception(rec["raised"])
        except _DECODE_ERRORS as e:
            return True, e
    if what is not None and "out" not in rec:
        return True, RuntimeError(f"{what}: nothing was handed back for this call")
    try:
        return False, decode(rec["out"] if what is not None else rec.get("out", {}))
    except _DECODE_ERRORS as e:
        return True, e


def _after(rec: dict) -> list[tuple]:
    """The inputs the student's call changed, decoded: ``[(position, value)]``; an entry that
    cannot be read is left out, a position that is not a number is raised at the call."""
    out: list[tuple] = []
    try:
        items = list((rec.get("after") or {}).items())
    except _DECODE_ERRORS as e:
        return [(e, None)]
    for k, enc in items:
        try:
            i = int(k)
        except _DECODE_ERRORS as e:
            out.append((e, None))
            break
        try:
            out.append((i, decode(enc)))
        except (IndexError, ValueError, TypeError, RuntimeError, KeyError):
            pass
    return out


def _modify(args: tuple, after: list[tuple]) -> None:
    """Change the call's array inputs as the student's call changed them in the kernel; what
    does not fit is left as it is."""
    import torch

    for i, new in after:
        if isinstance(i, BaseException):
            raise i
        try:
            if isinstance(args[i], torch.Tensor) and args[i].shape == new.shape:
                args[i].copy_(new)
            elif isinstance(args[i], np.ndarray) and args[i].shape == new.shape:
                args[i][...] = new
        except (IndexError, ValueError, TypeError, RuntimeError, KeyError):
            pass


class Replay:
    """Stands in for the student's function while the grader's checker runs: each call gives
    back what the student's function gave back on that call in the kernel (its output, its
    exception, a timeout), and modifies the inputs as the student's call did."""

    __name__ = "replay"

    def __init__(self, records: list[dict]):
        self.records = records
        self.i = 0
        self.seen: list[tuple] = []  # the inputs of each call, as the checker made it
        self._decoded = [(_after(r), _outcome(r)) if isinstance(r, dict) else ([], (True, AttributeError(
            f"'{type(r).__name__}' object has no attribute 'get'"))) for r in records]

    def __call__(self, *args, **kwargs):
        after, (raises, value) = self._decoded[self.i] if self.i < len(self._decoded) else (
            [], (True, RuntimeError("no output was handed back for this call")))
        rec = self.records[self.i] if self.i < len(self.records) else None
        if isinstance(rec, dict) and TRACE_KEY in rec:  # a traced call: found again by its inputs
            self.seen.append((_tensors(args, kwargs), rec))
        self.i += 1
        _modify(args, after)
        if raises:
            raise value
        return value

    def normref_traced(self, args: tuple, kwargs: dict):
        """The trace handed back with the call made on these inputs (the diagnosis':
        :func:`normref.diagnosis.handed.handed_trace`), or None."""
        want = _tensors(args, kwargs)
        return next((r.get(TRACE_KEY) for got, r in self.seen if _same(got, want)), None)


def _tensors(args: tuple, kwargs: dict) -> list:
    """The array inputs of one call, copied (what identifies the call: a case's own tensors)."""
    import torch

    out = [a.detach().clone() if isinstance(a, torch.Tensor) else np.array(a)
           for a in (*args, *kwargs.values()) if isinstance(a, (torch.Tensor, np.ndarray))]
    return out


def _same(a: list, b: list) -> bool:
    """Two calls' array inputs are the same values (same count, shapes, dtypes, entries)."""
    import torch

    if not a or len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if type(x) is not type(y) or x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not (torch.equal(x, y) if isinstance(x, torch.Tensor) else np.array_equal(x, y)):
            return False
    return True


def _replay_part_type():
    import torch
    from torch import nn

    class ReplayPart(nn.Module):
        """One of the student's submodules: each call checks that the grader's checker passes
        the input the kernel used (the grader's wiring), then gives back the kernel's output."""

        def __init__(self, name: str):
            super().__init__()
            self.replay_name = name
            self.replay_queue: list[tuple] = []  # (the input the kernel used, its outcome)

        def add(self, rec: dict) -> None:
            """One traced call of the kernel's record, decoded now."""
            try:
                want = decode(rec.get("in", {}))
            except (ValueError, TypeError, KeyError):
                want = None
            self.replay_queue.append((want, _outcome(rec, self.replay_name)))

        def forward(self, *args, **kwargs):
            if not self.replay_queue:
                raise RuntimeError(f"{self.replay_name}: this call was not made in the grading kernel")
            want, (raises, value) = self.replay_queue.pop(0)
            got = args[0] if args else None
            if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor) and got.shape == want.shape
                    and got.dtype == want.dtype and torch.equal(got, want)):
                raise RuntimeError(f"{self.replay_name}: the grading kernel called it on other inputs than "
                                   "the grader's wiring")
            if raises:
                raise value
            return value

    return ReplayPart


def _replay_module_type(part_type):
    import torch
    from torch import nn

    class ReplayModule(nn.Module):
        """The student's built module as the kernel reported it (its tensors with their values,
        its submodules as ``ReplayPart``, which attributes are one object, its parameter
        names); ``forward`` gives back the kernel's output on the grader's input (and modifies
        the input as the student's call did)."""

        def __init__(self, rec: dict, case: dict):
            super().__init__()
            report = rec.get("report") if isinstance(rec.get("report"), dict) else {}
            forward = rec.get("forward") if isinstance(rec.get("forward"), dict) else {}
            self.replay_forward = Replay([forward]) if forward else None
            params = report.get("params", [])
            # named_parameters raised in the kernel: {"raised": ...}, decoded now
            self.replay_params_raise = _outcome(params, "named_parameters") if isinstance(params, dict) else None
            self.replay_params = params if isinstance(params, list) else []
            objects = decode_report(report, case.get("attrs") or (), part_type)
            for name, obj in objects.items():
                setattr(self, name, obj)
            trace = rec.get("trace") if isinstance(rec.get("trace"), list) else []
            calls = (case.get("trace") or {}).get("calls", [])
            for (name, _), one in zip(calls, trace):  # each traced call to the object it was made on
                part = objects.get(name)
                if isinstance(part, part_type) and isinstance(one, dict):
                    part.add(one)

        def named_parameters(self, *args, **kwargs):
            if self.replay_params_raise is not None and self.replay_params_raise[0]:
                raise self.replay_params_raise[1]
            for name in self.replay_params:
                p = getattr(self, str(name), None) if "." not in str(name) else None
                yield str(name), p if isinstance(p, nn.Parameter) else nn.Parameter(torch.zeros(0))

        def forward(self, *args, **kwargs):
            if self.replay_forward is None:
                raise RuntimeError("forward: nothing was handed back for this call")
            return self.replay_forward(*args, **kwargs)

    return ReplayModule


_REPLAY_TYPES = None


def _replay_types():
    """The :class:`torch.nn.Module` stand-ins of :class:`ReplayClass`, ``(ReplayModule,
    ReplayPart)`` (made once, on first use: importing this module does not import torch)."""
    global _REPLAY_TYPES
    if _REPLAY_TYPES is None:
        part = _replay_part_type()
        _REPLAY_TYPES = (_replay_module_type(part), part)
    return _REPLAY_TYPES


class ReplayClass:
    """Stands in for the student's class while the grader's checker runs: the i-th
    construction gives back the module the kernel built for the plan's i-th case (or raises
    what its constructor raised), rebuilt from the kernel's record (:func:`_replay_types`).

    Args:
        records: the kernel's records (:func:`normref.plan.run_plan`), one per case.
        plan: the plan those records answer (the grader's own, recomputed from the seed).
    """

    __name__ = "replay"

    def __init__(self, records: list[dict], plan: list[dict]):
        self.records, self.plan, self.i = records, plan, 0

    def normref_traced(self, args: tuple, kwargs: dict):
        """The trace handed back with the case whose forward input is ``args[0]`` (the
        diagnosis': :func:`normref.diagnosis.handed.handed_trace`), or None."""
        want = _tensors(args[:1], {})
        for rec, case in zip(self.records, self.plan):
            x = case.get("forward") if isinstance(case, dict) else None
            if isinstance(rec, dict) and x is not None and _same(_tensors((x,), {}), want):
                return rec.get(TRACE_KEY)
        return None

    def __call__(self, *args, **kwargs):
        i, self.i = self.i, self.i + 1
        rec = self.records[i] if i < len(self.records) and isinstance(self.records[i], dict) else {}
        new = rec.get("new") if isinstance(rec.get("new"), dict) else {
            "raised": ["RuntimeError", "nothing was handed back for this case"]}
        if not new.get("module"):
            if "raised" in new or new.get("timeout"):
                raise _outcome(new, "the class")[1]
            return opaque(new.get("type", "object"))
        return _replay_types()[0](rec, self.plan[i] if i < len(self.plan) else {})


__all__ = ["Replay", "ReplayClass"]
