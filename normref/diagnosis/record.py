"""What a student's code computed on a checker's battery, as JSON (the class report's groups).

:func:`result_record` turns a checker's :class:`normref.checks.CheckResult` into a record: per
case, whether it passed, its fault kind, message and variant, and the student's output as
float64 numbers (``got``; None where it could not be compared) with the checker's tolerance.
The grader makes it in its own process, from the outputs the kernel handed back
(:func:`grader.scoring.scores.score_notebook`), and keeps it in the autograded notebook; no student
code runs for it. :func:`agree` tells whether two records computed the same thing.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["result_record", "agree", "is_wrong"]


def _number(v: float) -> float | str:
    # JSON has no NaN or infinity (a notebook with them does not open in JupyterLab): as text
    return v if math.isfinite(v) else str(v)


def _list(a) -> list | None:
    if a is None:
        return None
    return [_number(v) for v in np.asarray(a, dtype=np.float64).ravel().tolist()]


def _floats(values: list) -> np.ndarray:
    return np.array([float(v) for v in values], dtype=np.float64)


def result_record(result, inputs: str | None = None) -> dict:
    """The record of one check run.

    Args:
        result: a :class:`normref.checks.CheckResult` (each case's ``observed`` is
            ``(got, want, rtol, atol)`` where the output was compared by value).
        inputs: what identifies the battery's inputs (records on other inputs never agree).

    Returns:
        ``{"checker": CheckResult.name, "score": float, "inputs": inputs, "cases": [{"name",
        "passed", "fault", "message", "variant", "got", "want", "shape", "rtol", "atol"}, ...]}``
        (``want``: the checker's reference for that student: the same for every student, except
        where it is built from the student's own objects, e.g. a block with its own submodules);
        JSON-safe (NaN and infinities as the strings ``"nan"``, ``"inf"``, ``"-inf"``).
    """
    cases = []
    for c in result.cases:
        seen = getattr(c, "observed", None)
        cases.append({"name": c.name, "passed": bool(c.passed), "fault": c.fault, "message": c.message,
                      "variant": getattr(c, "variant", None),
                      "got": _list(seen[0]) if seen else None, "want": _list(seen[1]) if seen else None,
                      "shape": list(np.shape(seen[0])) if seen else None,
                      "rtol": float(seen[2]) if seen else None, "atol": float(seen[3]) if seen else None})
    return {"checker": result.name, "score": _number(float(result.score)), "inputs": inputs, "cases": cases}


def _same_output(a: dict, b: dict) -> bool:
    if a["passed"] != b["passed"]:
        return False
    if a["passed"]:  # each within tolerance of its reference (which may be the student's own)
        return True
    if a["got"] is None or b["got"] is None:
        return a["got"] is None and b["got"] is None and a["fault"] == b["fault"]
    if len(a["got"]) != len(b["got"]):
        return False
    rtol, atol = 2 * (a["rtol"] or 1e-5), 2 * (a["atol"] or 1e-5)
    ga, gb = _floats(a["got"]), _floats(b["got"])
    wa, wb = a.get("want"), b.get("want")
    if wa is not None and wb is not None and len(wa) == len(wb) == len(ga):
        wa, wb = _floats(wa), _floats(wb)
        if not np.allclose(wa, wb, rtol=rtol, atol=atol, equal_nan=True):
            # references built from each student's own objects: compare the errors instead
            slack = atol + rtol * np.maximum(np.abs(wa), np.abs(wb))
            diff = np.abs((ga - wa) - (gb - wb))
            return bool(np.all((diff <= slack) | (np.isnan(ga) & np.isnan(gb))))
    return bool(np.allclose(ga, gb, rtol=rtol, atol=atol, equal_nan=True))


def agree(a: dict, b: dict) -> bool:
    """Whether two records of one checker computed the same outputs on every case: the same
    inputs, the same cases passed, and every failing case's outputs within twice the
    checker's tolerance (where the references differ, built from each student's own objects:
    the errors, output minus reference), or both without an output and with the same fault
    kind. Passed cases agree: each is right."""
    ca, cb = a.get("cases") or [], b.get("cases") or []
    return (a.get("inputs") == b.get("inputs") and len(ca) == len(cb)
            and all(_same_output(x, y) for x, y in zip(ca, cb)))


def is_wrong(rec: dict) -> bool:
    """A record with at least one failing case."""
    score = rec.get("score", 0.0)
    return any(not c["passed"] for c in rec.get("cases") or []) and not math.isnan(float(score))
