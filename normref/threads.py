"""Which threads and processes are the notebook's own: the recorder
(:class:`normref.recorder.ReferenceRecorder`) flags work moved out of the student's call only when
the notebook's code started it, never a thread of the kernel's machinery or a library's (pyzmq's
for large outputs, ipykernel's, matplotlib's, ipywidgets', tqdm's monitor); and a thread is only
ever flagged for the instructor's review, never evidence of a reference call
(:func:`normref.rules.observed_reference`).
"""
from __future__ import annotations

import os
import sys

import numpy as np

from ._torch import directory

__all__ = ["started_by_notebook", "watch_threads"]
_CACHE: dict = {}


def _library_paths() -> tuple[str, tuple]:
    """``(the standard library's folder, every library folder)``: the standard library, the
    installed packages, torch's and numpy's folders and normref's (as
    :class:`normref.recorder.ReferenceRecorder` reads them), kept once read."""
    hit = _CACHE.get("library_paths")
    if hit is None:
        import sysconfig

        stdlib = sysconfig.get_paths()["stdlib"] + os.sep
        site = {os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib")}
        here = os.path.dirname(os.path.abspath(__file__)) + os.sep
        lib = tuple({directory(), os.path.dirname(os.path.abspath(np.__file__)) + os.sep, stdlib, here, *site})
        hit = _CACHE["library_paths"] = (stdlib, lib)
    return hit


def started_by_notebook(frame) -> bool:
    """Was the thread or process being started by ``frame`` (the Python frame that calls
    ``_thread.start_new_thread``, ``os.fork`` ...) started by the notebook's own code: is the
    nearest caller outside the standard library (``threading``, ``subprocess``,
    ``concurrent.futures``, ``multiprocessing``, ``os``) a cell's code, not a library's (tqdm's
    monitor, pyzmq's, ipykernel's, matplotlib's)?"""
    stdlib, lib = _library_paths()
    while frame is not None and (frame.f_code.co_filename.startswith(stdlib) or frame.f_code.co_filename == __file__):
        frame = frame.f_back
    if frame is None:
        return False
    name = frame.f_code.co_filename
    if name.startswith("<frozen "):
        return False
    if name.startswith("<"):  # code made by exec: a cell's when it runs in the notebook's namespace
        return frame.f_globals.get("__name__") == "__main__"
    return not os.path.abspath(name).startswith(lib)


def watch_threads():
    """A set that, from now on, holds every :class:`threading.Thread` the notebook's own code
    starts (:func:`started_by_notebook`), weakly (a finished thread leaves it): ``threading``'s
    ``_start_new_thread``, which ``Thread.start`` calls with the new thread's ``_bootstrap``, is
    wrapped once per process to note the starter (CPython 3.11 raises no audit event for a new
    thread), and each new thread's ``_normref_parent``, the ident of the thread that started it
    (the recorder follows only the threads its own call starts). What
    :func:`normref.handback.seal` hands the recorder as ``started``."""
    import threading
    import weakref

    started = _CACHE.get("started")
    if started is not None:
        return started
    started = _CACHE["started"] = weakref.WeakSet()
    original = threading._start_new_thread

    def _start_new_thread(function, args, kwargs=None):
        try:
            thread = getattr(function, "__self__", None)
            if isinstance(thread, threading.Thread):
                thread._normref_parent = threading.get_ident()  # who started it (the recorder's hook asks)
                if started_by_notebook(sys._getframe(1)):
                    started.add(thread)
        except Exception:  # noqa: BLE001 - noting the starter must never stop a thread starting
            pass
        return original(function, args) if kwargs is None else original(function, args, kwargs)

    threading._start_new_thread = _start_new_thread
    return started
