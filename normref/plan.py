"""A class question's hand-back: the grader's plan performed on the student's class in the
grading kernel (:func:`run_plan`), recorded, never judged (the grader judges the record with the
question's checker, :class:`grader.scoring.replay.ReplayClass`).
"""
from __future__ import annotations

from . import calling
from ._torch import import_if_named
from .recorder import recorder_for, recorder_intact
from .wire import encode, encode_exception, report_module, snapshot, unchanged


def _timed(fn, args: tuple, kwargs: dict, reference: dict | None = None, handed_in=(),
           sealed: dict | None = None) -> dict:
    """One call of the student's code: ``{"out": encode(...)}``, ``{"raised": [type, message]}``
    or ``{"timeout": True}``, with ``"references"`` when ``reference`` is given and the call ran
    a reference normalization (see :func:`normref.handback.run_calls`)."""
    rec: dict = {}
    import_if_named(fn)  # an answer that imports torch: before the call, neither recorded nor timed
    recorder = recorder_for(reference, handed_in, sealed) if reference is not None else None
    try:
        if recorder is None:
            rec["value"] = calling.call_with_timeout(fn, tuple(args), dict(kwargs), calling.CALL_TIMEOUT_S)
        else:
            with recorder:
                rec["value"] = calling.call_with_timeout(fn, tuple(args), dict(kwargs), calling.CALL_TIMEOUT_S)
                rec["out"] = encode(rec["value"])  # inside the record (see run_calls)
    except calling.Timeout:
        rec["timeout"] = True
    except Exception as e:  # noqa: BLE001 - the student's error is handed back as it is
        rec["raised"] = encode_exception(e)
    if recorder is not None:
        if not recorder_intact():
            recorder.found.append("changed the grader's call recorder (its class was patched)")
        if recorder.found:
            rec["references"] = recorder.found
    return rec


def _value(expr, x, outs: list):
    """An input of a traced call: ``"x"``, ``"r<i>"`` (the i-th traced output) or ``["+", a, b]``."""
    if isinstance(expr, (list, tuple)) and len(expr) == 3 and expr[0] == "+":
        return _value(expr[1], x, outs) + _value(expr[2], x, outs)
    if expr == "x":
        return x
    return outs[int(str(expr)[1:])]


def _construct(cls, case: dict) -> tuple[dict, object]:
    """A case's ``"new"``: ``(its record, the built object or None)``."""
    import copy

    from torch import nn

    args, kwargs = case["new"]
    if case.get("copy_module") and isinstance(cls, nn.Module):
        new = _timed(copy.deepcopy, (cls,), {})
    elif case.get("seeded"):
        with calling.seeded():
            new = _timed(cls, args, kwargs)
    else:
        new = _timed(cls, args, kwargs)
    m = new.pop("value", None)
    if not new:  # it returned
        new["module"] = isinstance(m, nn.Module)
        if not new["module"]:
            new["type"] = type(m).__name__[:80]
    return new, m


def _load_and_swap(m, case: dict) -> dict | None:
    """A case's ``"load"`` (trained weights copied in) and ``"swap"`` (the grader's submodules set
    in); the record of what the student's module raised, else None."""
    import torch

    try:
        with torch.no_grad():
            for name, value in (case.get("load") or {}).items():
                w = getattr(m, name, None)
                if isinstance(w, torch.Tensor) and tuple(w.shape) == tuple(value.shape):
                    w.copy_(value)
        for name, part in case.get("swap") or ():
            setattr(m, name, part)
    except Exception as e:  # noqa: BLE001 - the student's module refused a weight or a part
        return {"raised": encode_exception(e)}
    return None


def _trace(m, spec: dict, reference: dict | None, handed: list, sealed: dict | None) -> list[dict]:
    """A case's ``"trace"``: the module's own submodules called in the grader's wiring, in order,
    up to the first that raised or timed out."""
    outs, trace = [], []
    tx = spec["x"]
    for name, expr in spec["calls"]:
        arg = _value(expr, tx, outs)
        part = getattr(m, name, None)
        one = _timed(part, (arg,), {}, reference or {}, handed, sealed) if callable(part) else {
            "raised": ["TypeError", f"{name} is not callable"]}
        one["in"] = encode(arg)
        out = one.pop("value", None)
        if "raised" in one or "timeout" in one:
            trace.append(one)
            break
        one.setdefault("out", encode(out))
        trace.append(one)
        outs.append(out)
    return trace


def _forward(m, x, reference: dict | None, handed: list, sealed: dict | None) -> dict:
    """A case's ``"forward"``: ``m(x)`` under the recorder, with ``"after"`` when it changed ``x``."""
    before = snapshot(x)
    one = _timed(m, (x,), {}, reference or {}, handed, sealed)
    if "value" in one:
        value = one.pop("value")
        one.setdefault("out", encode(value))
    if not unchanged(x, before):
        one["after"] = {"0": encode(x)}
    return one


def _run_case(cls, case: dict, reference: dict | None, sealed: dict | None, built: list | None = None) -> dict:
    import torch

    rec: dict = {}
    rec["new"], m = _construct(cls, case)
    if not rec["new"].get("module"):
        return rec
    if built is not None:
        built.append((rec, m, case.get("forward")))
    rec["report"] = report_module(m, case.get("attrs", ()))
    handed = [part for _, part in case.get("swap") or ()]
    refused = _load_and_swap(m, case)
    if refused is not None:
        rec["forward"] = refused
        return rec
    x = case.get("forward")
    with torch.no_grad():
        if case.get("trace"):
            rec["trace"] = _trace(m, case["trace"], reference, handed, sealed)
        if x is not None:
            rec["forward"] = _forward(m, x, reference, handed, sealed)
    return rec


def run_plan(cls, plan: list[dict], reference: dict | None = None, sealed: dict | None = None,
             trace: str | None = None) -> list[dict] | dict:
    """Perform the grader's plan for a class question (its checker's cases, decided by the
    grader) on the student's class ``cls`` and record what happened; nothing is judged here.

    Each case of ``plan`` is a dict, performed in this order:

    * ``"new": [args, kwargs]``: ``cls(*args, **kwargs)`` (with the global torch RNG state kept
      when ``"seeded"``; with ``"copy_module"``, a built ``nn.Module`` is deep-copied instead,
      never modified);
    * ``"attrs"``: attribute names to report (:func:`normref.wire.report_module`: tensors with
      values, submodules by type, which are the same object), with the ``named_parameters`` names;
    * ``"load": {name: tensor}``: copied into those tensors of the module (a trained weight);
    * ``"swap": [[name, module], ...]``: the grader's own submodules set in place of the student's;
    * ``"trace": {"x": x, "calls": [[attribute, input], ...]}``: the module's own submodules
      called in the grader's wiring, each input ``"x"``, ``"r<i>"`` (an earlier output) or
      ``["+", a, b]``, outputs recorded in order with the input each got;
    * ``"forward": x``: ``module(x)`` without autograd, under the reference recorder.

    Args:
        reference: the keyword arguments of :class:`normref.recorder.ReferenceRecorder` (the
            question's reference names); ``sealed``: what :func:`normref.handback.seal` captured.
        trace: the checker's name: after every case, each case with a ``"forward"`` input is
            traced as the self-check traces the question (:func:`_trace_cases`), into its
            record's ``"traced"``.

    Returns:
        One record per case (``{"new": {...}, "report": ..., "trace": [...], "forward": {...}}``),
        or ``{"not_callable": type name}``.
    """
    import torch

    if not callable(cls):
        return {"not_callable": type(cls).__name__[:80]}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors; two threads were 10x slower on a loaded machine
    records: list = []
    built: list = []
    try:
        for case in plan:
            records.append(_run_case(cls, case, reference, sealed, built if trace else None))
        if trace:
            _trace_cases(trace, cls, built)
    finally:
        torch.set_num_threads(threads)
    return records


def _trace_cases(checker: str, cls, built: list) -> None:
    """The diagnosis' trace of each built case ``(record, module, forward input)`` whose forward
    returned: the question's call is its first parameter, the forward input, and each other
    parameter, the module's attribute of that name (the grader's part swapped in, or the
    student's own), the module called with those parts traced; into the record's ``"traced"``
    (:func:`normref.diagnosis.handing.trace_into`)."""
    import time

    from .diagnosis.handing import trace_into
    from .diagnosis.questions import declared

    q = declared(checker)
    items = []
    for rec, m, x in built if q is not None else ():
        parts = [getattr(m, p, None) for p in q.params[1:]]
        if x is not None and "out" in (rec.get("forward") or {}) and all(callable(p) for p in parts):
            items.append(((x, *parts), {}, rec, m))
    trace_into(checker, cls, items, time.monotonic() + calling.CALL_TIMEOUT_S * 2)


__all__ = ["run_plan"]
