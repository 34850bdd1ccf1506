"""A student's outputs on a checker's battery, as JSON for the grader (the class report's groups).

:func:`record` runs checkers (``normref.checks``) on a student's objects and returns, per case,
whether it passed, its fault kind and message, and the student's and the reference output as
float64 lists (``got``/``want``, from ``CaseResult.observed``; None where the output could not
be compared). Runs where the student's code runs (the grader executes it in its sandbox kernel);
:func:`agree` tells, in the grader, whether two records computed the same thing.
"""
from __future__ import annotations

import json
import math

import numpy as np

__all__ = ["record", "record_json", "agree", "call_key", "MARKER"]

#: Printed before the JSON, so the grader finds it in the cell's output.
MARKER = "<<normref-record>>"


def _list(a) -> list | None:
    if a is None:
        return None
    return np.asarray(a, dtype=np.float64).ravel().tolist()


def call_key(name: str, args: tuple = ()) -> str:
    """The key of one checker call in a record: ``check_layer_norm, 'numpy'``."""
    return name + "".join(f", {a!r}" for a in args)


def record(calls: list[tuple[str, object, tuple]]) -> dict:
    """Run each ``check_<name>(obj, *args)`` and return what the student's code computed.

    Args:
        calls: ``[(check function name, the student's object, extra args), ...]``, e.g.
            ``[("check_layer_norm", layer_norm, ("numpy",))]``.

    Returns:
        ``{call_key(name, args): {"checker": CheckResult.name, "score": float (the graded cases'),
        "cases": [{"name", "passed", "fault", "message", "variant", "probe", "got", "want",
        "shape", "rtol", "atol"}, ...]}}`` (the graded cases, then the diagnostic probes of
        :mod:`normref.diagnosis.probes`); a call whose
        checker is unknown or raised is ``{"error": "..."}``.
    """
    from .. import checks

    out: dict = {}
    for name, obj, args in calls:
        try:
            r = getattr(checks, name)(obj, *args)
        except Exception as e:  # noqa: BLE001 - checkers do not raise; an unknown name might
            out[call_key(name, args)] = {"error": f"{type(e).__name__}: {e}"}
            continue
        from .probes import run_probes

        cases = []
        try:
            probes = run_probes(name, obj, args, r)
        except Exception:  # noqa: BLE001 - a probe only adds to the record
            probes = []
        for c in list(r.cases) + probes:
            seen = c.observed
            cases.append({"name": c.name, "passed": c.passed, "fault": c.fault, "message": c.message,
                          "variant": getattr(c, "variant", None), "probe": any(c is p for p in probes),
                          "got": _list(seen[0]) if seen else None,
                          "want": _list(seen[1]) if seen else None,
                          "shape": list(np.shape(seen[0])) if seen else None,
                          "rtol": seen[2] if seen else None, "atol": seen[3] if seen else None})
        out[call_key(name, args)] = {"checker": r.name, "score": r.score, "cases": cases}
    return out


def record_json(calls: list[tuple[str, object, tuple]]) -> str:
    """:func:`record` as one line, ``MARKER`` + JSON (NaN and inf as JSON's NaN/Infinity)."""
    return MARKER + json.dumps(record(calls))


def _same_output(a: dict, b: dict) -> bool:
    if a["passed"] != b["passed"]:
        return False
    if a["got"] is None or b["got"] is None:
        return a["got"] is None and b["got"] is None and a["fault"] == b["fault"]
    if len(a["got"]) != len(b["got"]):
        return False
    rtol, atol = 2 * (a["rtol"] or 1e-5), 2 * (a["atol"] or 1e-5)
    x = np.array(a["got"], dtype=np.float64)
    y = np.array(b["got"], dtype=np.float64)
    return bool(np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True))


def agree(a: dict, b: dict) -> bool:
    """Whether two records of one checker computed the same outputs on every case: the same
    cases passed, and every failing case's outputs within twice the checker's tolerance (or
    both without an output and with the same fault kind)."""
    ca, cb = a.get("cases") or [], b.get("cases") or []
    return len(ca) == len(cb) and all(_same_output(x, y) for x, y in zip(ca, cb))


def is_wrong(rec: dict) -> bool:
    """A record with at least one failing case."""
    return any(not c["passed"] for c in rec.get("cases") or []) and not math.isnan(rec.get("score", 0.0))
