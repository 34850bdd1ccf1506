"""Checkers that grade a student's implementation and diagnose the mistake.

Each ``check_*`` runs a battery of cases against the ``normref`` reference and returns a
:class:`CheckResult` with ``.passed``, ``.score`` (fraction of cases passed, 0..1) and one
message per failing case saying which case, by how much (max abs and relative error) and
the most likely cause. The cause is found from the *signature* of the wrong output: the
output is compared with what each known fault would produce on that same input (dividing by
n-1, eps outside the square root, the wrong axis, the residual taken from Norm(x), ...), and
the closest one is named; never from the student's source. Each fault's sentence comes from
the registry :mod:`normref.faults`, in the words of the answer's backend (numpy or torch).

A student function that raises, loops, returns the wrong kind/shape/dtype, returns NaN or
modifies its input gets a clear message; the checker itself never raises because of it.

Each checker runs its public battery, or the battery it is given (``cases=``: grading hands in
the one it draws for its run, ``grader/scoring/batteries.py``). Every battery draws from a generator of
its own (:func:`~normref.checks.core.seeded_randn`, :func:`~normref.checks.core.seeded_module`),
never from torch's or numpy's global RNG, so checks in several threads at once do not meet.

By family (one module each): :mod:`~normref.checks.core` (results, calling student code, the
seeded inputs), :mod:`~normref.checks.compare` (tolerances, errors, the closest fault model),
:mod:`~normref.checks.norms` (:func:`check_rms_norm`,
:func:`check_layer_norm`), :mod:`~normref.checks.module` (:func:`check_rms_norm_module`),
:mod:`~normref.checks.placement` (:func:`check_pre_ln`, :func:`check_post_ln`),
:mod:`~normref.checks.block` (:func:`check_pre_ln_block`),
:mod:`~normref.checks.backward` (:func:`check_layer_norm_backward`) and
:mod:`~normref.checks.modern` (:func:`check_peri_ln`, :func:`check_qk_norm_logits`, :func:`check_dyt`).
"""
from __future__ import annotations

import importlib

from .. import faults as _faults
from .core import CALL_TIMEOUT_S, CaseResult, CheckResult

#: Each checker's module, imported on first use (PEP 562): the block's (torch) only by the block.
_LAZY = {"check_rms_norm": "norms", "check_layer_norm": "norms", "check_rms_norm_module": "module",
         "check_pre_ln": "placement", "check_post_ln": "placement", "check_pre_ln_block": "block",
         "check_layer_norm_backward": "backward", "check_dyt": "modern", "check_peri_ln": "modern",
         "check_qk_norm_logits": "modern"}

#: Every fault kind the code checkers can name, with the sentence a student reads (torch's
#: words; :func:`normref.faults.message` gives numpy's). A view of :mod:`normref.faults`.
FAULT_KINDS: dict[str, str] = {k: _faults.FAULTS[k].message for k in _faults.kinds("code")}

__all__ = [
    "CALL_TIMEOUT_S",
    "CaseResult",
    "CheckResult",
    "FAULT_KINDS",
    "check_rms_norm",
    "check_layer_norm",
    "check_rms_norm_module",
    "check_pre_ln",
    "check_post_ln",
    "check_pre_ln_block",
    "check_layer_norm_backward",
    "check_peri_ln",
    "check_qk_norm_logits",
    "check_dyt",
]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
