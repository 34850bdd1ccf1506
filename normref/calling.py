"""Calling a student's code safely: the helpers that start and stop one call, shared by the
self-check (:func:`normref.checks.core.student_call`) and grading's hand-back
(:func:`normref.handback.run_calls`, :func:`normref.plan.run_plan`).

A call gets warnings and ``sys.stderr`` swallowed (nbgrader scores a test cell 0 if anything
reaches stderr), torch's default dtype restored afterwards, and, on the main thread of a Unix
process, a timer that stops it after :data:`CALL_TIMEOUT_S` (raising :class:`Timeout`). The
call recorder (:class:`normref.recorder.ReferenceRecorder`) lets the student's code run these
helpers (:func:`normref.recorder.allowed_codes`); the sealed hand-back watches them for changes
(:func:`normref.handback.seal`).
"""
from __future__ import annotations

import contextlib
import io
import signal
import threading
import warnings
from typing import Callable

import numpy as np

from ._torch import loaded

#: Seconds one call of the student's code may run before it is stopped.
CALL_TIMEOUT_S = 5.0


class Timeout(Exception):
    """Raised into a student's call that ran past its time (:func:`call_with_timeout`)."""


def call_with_timeout(fn: Callable, args: tuple, kwargs: dict, timeout: float):
    """Call ``fn`` with warnings and stderr swallowed (nbgrader scores a test cell 0 if anything
    reaches stderr) and torch's default dtype restored; on the main thread of a Unix process,
    stop it after ``timeout`` seconds. A call that imports torch itself (a numpy answer) finds
    its default dtype float32 afterwards, as torch starts.

    Raises:
        Timeout: the call ran past ``timeout`` seconds; anything ``fn`` raises, as it is.
    """
    torch = loaded()
    default_dtype = torch.get_default_dtype() if torch is not None else None
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            return call_alarm(fn, args, kwargs, timeout)
    finally:
        torch = loaded()
        if torch is not None:
            torch.set_default_dtype(default_dtype if default_dtype is not None else torch.float32)


def call_alarm(fn: Callable, args: tuple, kwargs: dict, timeout: float):
    """``fn(*args, **kwargs)`` under a ``SIGALRM`` timer of ``timeout`` seconds (main thread of a
    Unix process only; elsewhere a plain call). Raises :class:`Timeout` when it fires."""
    use_alarm = (
        hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    )
    if not use_alarm:
        return fn(*args, **kwargs)

    def _handler(signum, frame):
        raise Timeout()

    old = signal.signal(signal.SIGALRM, _handler)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return fn(*args, **kwargs)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def seeded():
    """Keep the caller's global torch RNG state untouched by the checker's own seeding."""
    import torch

    state = torch.random.get_rng_state()
    try:
        yield
    finally:
        torch.random.set_rng_state(state)


__all__ = ["CALL_TIMEOUT_S", "Timeout", "call_with_timeout", "call_alarm", "seeded"]
