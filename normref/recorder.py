"""The call recorder: which reference normalizations a student's code ran while it was called,
by any spelling (:class:`ReferenceRecorder`), for grading's hand-back (:mod:`normref.handback`,
:mod:`normref.plan`) and the student's self-check (:func:`normref.checks.core.student_call`)
alike.

It knows the course's references by their code objects (:mod:`normref.reference_code`), lets
the student's code run the course code an answer may run (:func:`allowed_codes`: the block's
given parts, the call helpers of :mod:`normref.calling`, the hand-back's encoder), and counts
any other normref code, torch's Python reference code, autograd (the backward question),
another thread or process, and the recorder switched off.
"""
from __future__ import annotations

import os
import sys
from threading import get_ident as threading_ident

import numpy as np

from . import calling
from ._torch import directory, import_if_named, is_tensor, loaded
from .reference_code import code_print, reference_codes, reference_prints
from .threads import started_by_notebook
from .wire import _npy, encode

#: The helpers of :mod:`normref._torch` that the hand-back and the call helpers use: an answer
#: may run them, and each module's own binding of them is watched by :func:`normref.handback.seal`.
TORCH_HELPERS = {"directory": directory, "import_if_named": import_if_named, "is_tensor": is_tensor,
                 "loaded": loaded}
#: The call helpers (:mod:`normref.calling`) an answer runs inside: they start and stop its call.
CALL_HELPERS = (calling.call_with_timeout, calling.call_alarm, calling.Timeout, calling.seeded)
_CACHE: dict = {}

def _codes_within(objs) -> set:
    """The code objects of ``objs`` (functions, classes' methods), nested ones included."""
    import types

    out, todo = set(), []
    for o in objs:
        members = list(vars(o).values()) if isinstance(o, type) else [o]
        for m in members:
            f = getattr(m, "__func__", m)
            for f in (f, getattr(f, "fget", None), getattr(f, "fset", None)):
                if isinstance(f, types.FunctionType):
                    todo.append(f.__code__)
    while todo:
        c = todo.pop()
        if c not in out:
            out.add(c)
            todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return out


def allowed_codes() -> set:
    """normref code a student's answer may run: the parts the assignment gives them
    (:class:`normref.blocks.CausalSelfAttention`, :class:`normref.blocks.FeedForward`), the
    recorder itself, the hand-back's encoder, the call helpers (which start and stop the
    student's call, :data:`CALL_HELPERS`) and :mod:`normref.threads` (it notes who starts a
    thread, inside ``threading``'s own start)."""
    # the block's parts, when this process has normref.blocks (or torch, which it needs): an
    # answer without torch cannot run them without importing it (then they count as normref code)
    blocks = sys.modules.get("normref.blocks")
    if blocks is None and loaded() is not None:
        from . import blocks
    parts = [blocks.CausalSelfAttention, blocks.FeedForward] if blocks is not None else []
    from . import threads

    return _codes_within([*parts, ReferenceRecorder, encode, _npy, *CALL_HELPERS, *TORCH_HELPERS.values(),
                          threads.watch_threads, threads.started_by_notebook, threads._library_paths])


def _checker_calls() -> tuple[frozenset, object]:
    """The self-check's own functions that it calls, under the recorder, on the student's parts
    (the block checker's reference wiring), and the code of the helper that calls them: such a
    call made by the checker is not the student's; the same function called from the student's
    code is."""
    hit = _CACHE.get("checker_calls")
    if hit is None:
        block = sys.modules.get("normref.checks.block")
        if block is None:  # the block checker is not loaded: none of its functions can be running
            return frozenset(), calling.call_alarm.__code__
        hit = _CACHE["checker_calls"] = (frozenset({block._block_reference.__code__}), calling.call_alarm.__code__)
    return hit


def _cached(what: str, key, make):
    """``make(key)``, kept for the next recorder with the same ``key`` (the self-check's
    recorders; grading's come from :func:`normref.handback.seal`)."""
    hit = _CACHE.get(what)
    if hit is None or hit[0] is not key:
        hit = _CACHE[what] = (key, make(key))
    return hit[1]


#: torch's Python reference implementations and decompositions (they never pass through
#: ``__torch_function__``), and its tracers and compilers (which run a function where the mode
#: may not see it): running one counts as calling torch's own normalization.
_TORCH_REFERENCE_DIRS = ("_refs", "_decomp", "_prims", "_dynamo", "_inductor", "_functorch", "jit", "fx", "export")
#: torch's symbolic-shape helpers, inside ``fx`` but called by its eager code on plain ints
#: (autograd's shape check of ``Tensor.backward(gradient)``: ``sym_eq``, ``expect_true``; the
#: ``torch.sym_*`` functions): they compute no normalization and trace nothing.
_TORCH_SHAPE_HELPERS = (os.path.join("fx", "experimental", "symbolic_shapes.py"),
                        os.path.join("fx", "experimental", "sym_node.py"))
#: torch's function-mode helpers: an answer calling them is taking the recorder's mode off the stack.
_MODE_HELPERS = ("_pop_mode_temporarily", "_get_current_function_mode_stack", "_pop_mode", "_push_mode")
#: C functions that take a torch function mode off the stack, or run autograd's engine.
_MODE_C = {"_pop_torch_function_stack", "_push_on_torch_function_stack", "_set_torch_function_mode"}
#: C functions that replace the profile hook the recorder runs on.
_PROFILE_SETTERS = {("sys", "setprofile"), ("sys", "_setprofileallthreads"), ("_thread", "setprofile")}
#: What the backward question's answer may not use (``autograd=True``).
AUTOGRAD_MESSAGE = "uses autograd"
#: How a thread or process of the student's is recorded (flagged for review, never points).
_ESCAPED = "runs code in another thread or process"
#: What the student's code taking the recorder's torch function mode off is recorded as.
_SWITCHED = "switched off the grader's call recorder (torch function mode)"


class ReferenceRecorder:
    """While the student's function runs: which reference normalizations it executed, by any
    spelling (``F.rms_norm``, an alias, ``getattr(F, "layer_norm")``, ``F.__dict__[...]``,
    ``operator.attrgetter``, ``torch.nn.LayerNorm``, ``torch.ops.aten.native_layer_norm``,
    ``normref.rms_norm``, ``normref.blocks.post_ln`` ...).

    Besides the references by name, it counts any other normref code the student's code runs
    (except :func:`allowed_codes` and the objects handed in), a copy of a reference's code
    (:func:`code_print`), torch's Python reference/decomposition/compiler code (for questions
    with ``torch_names``), the recorder's mode popped or disabled, ``sys.setprofile``, and,
    with ``autograd``, autograd.

    A :class:`torch.overrides.TorchFunctionMode` sees every torch function and op called,
    however it was reached; a profile hook sees every Python function called, and knows the
    course's references by their code objects (:func:`reference_codes`, read before any student
    code ran when the grading kernel sealed them), not by the file they are in. A call counts
    unless an object the grader handed in (Pre-/Post-LN's ``norm``, a block's swapped-in
    submodules: ``handed_in``) is running it; every other frame of a library (torch, numpy, the
    standard library, normref itself) is walked through, so a course helper cannot launder it.

    Args:
        torch_names: torch function/op names that are references (``"layer_norm"``,
            ``"native_layer_norm"`` ...; an op's overload suffix is ignored).
        normref_names: ``normref`` functions that are references, as ``module.qualname``
            (``"normref.functional.rms_norm"``, ``"normref.modules.LayerNorm.forward"``).
        handed_in: the grader's own objects given to the student's code, which may run a reference.
        codes: ``{code: name}`` of the references (default: :func:`reference_codes` now).
        threads: idents of the Python threads that may be alive when the call starts (the
            kernel's own, from :func:`normref.handback.seal`); another one alive then is recorded, as work this
            recorder cannot see (``None``: not checked).
        autograd: count any autograd the call runs (``torch.autograd.grad``, ``Tensor.backward``,
            ``torch.func``): the backward question (:data:`normref.rules.BACKWARD_REFERENCE`).
        prints: ``{fingerprint: name}`` of the references (:func:`reference_prints`; default
            from ``codes``), so that a copy of one's code object is known.
        allowed: normref code the student's code may run (:func:`allowed_codes`); any other
            normref code it runs counts ("calls the course's own ...").
        checker_calls: ``(codes, caller code)``: the self-check's own functions that it calls
            under the recorder (default :func:`_checker_calls`; grading: none).
        torch_dir: torch's folder while torch is not imported yet (a numpy kernel; default:
            :func:`normref._torch.directory`; grading: the sealed one).
        started: the :class:`threading.Thread` objects the notebook's own code started since the
            kernel was sealed (:func:`normref.threads.watch_threads`; a pool's worker started by ``submit`` in
            an answer cell is one): such a thread alive at the call is the student's.

    Attributes:
        found: what was executed, e.g. ``["calls torch's rms_norm"]``, in order of first call.
    """

    def __init__(self, torch_names=(), normref_names=(), handed_in=(), codes=None, threads=None,
                 autograd=False, prints=None, allowed=None, checker_calls=None, torch_dir=None, started=None):
        import sysconfig

        torch = loaded()  # None in a numpy kernel: the mode is set when the call imports torch
        self.torch_names = set(torch_names)
        self.normref_names = set(normref_names)
        self.autograd = bool(autograd)
        self.found: list[str] = []
        self._codes = codes if codes is not None else (reference_codes() if normref_names else {})
        self._prints = prints if prints is not None else _cached("prints", self._codes, reference_prints)
        self._allowed = allowed if allowed is not None else _cached(
            "allowed", sys.modules.get("normref.blocks"), lambda _: allowed_codes())
        self._threads = threads
        self._started = started if started is not None else ()
        self._handed = {id(o) for o in handed_in}
        self._handed_codes = {getattr(o, "__code__", None) for o in handed_in} - {None}
        self._keep = list(handed_in)  # the ids stay valid while the call runs
        here = os.path.dirname(os.path.abspath(__file__)) + os.sep
        if torch is not None:
            torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
        else:  # not imported yet: where it will come from (the sealed kernel's: as it started)
            torch_dir = torch_dir or directory()
        self._normref_dir = here
        self._stdlib = sysconfig.get_paths()["stdlib"] + os.sep
        # installed packages count as library code too: code of theirs that runs inside the
        # student's call without being called by it (a gc callback, e.g. hypothesis's; a
        # finalizer) is not the student's (it was read as the recorder switched off)
        site = {os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib")}
        self._library = tuple({torch_dir, os.path.dirname(os.path.abspath(np.__file__)) + os.sep,
                               self._stdlib, here, *site})
        self._torch_dir = torch_dir
        self._torch_refs = tuple(torch_dir + d + os.sep for d in _TORCH_REFERENCE_DIRS) if torch_names else ()
        self._shape_helpers = tuple(torch_dir + h for h in _TORCH_SHAPE_HELPERS)
        self._autograd_codes = set()
        self._functorch = ()
        if self.autograd:
            self._functorch = (torch_dir + "_functorch" + os.sep, torch_dir + "func" + os.sep)
            if torch is not None:
                self._autograd_codes = self._autograd_of(torch)
                # autograd's first Tensor.backward(gradient) imports this, and sympy with it
                # (1-2 s): here, not inside the timed call (cut at 5 s, it left sympy half-imported)
                import torch.fx.experimental.symbolic_shapes  # noqa: F401
        self._checker_calls, self._alarm = checker_calls if checker_calls is not None else _checker_calls()
        self._kind: dict = {}  # code -> what running it is (None: nothing), per call
        self._entry = None
        self._mode = None
        self._old_profile = None

    @staticmethod
    def _autograd_of(torch) -> set:
        return {torch.autograd.grad.__code__, torch.autograd.backward.__code__, torch.Tensor.backward.__code__}

    def _is_library(self, code, frame=None) -> bool:
        """Is ``code`` a library's (torch, numpy, the standard library, an installed package,
        normref)? Code without a file (``<string>``), run in ``frame``, is a library's when a
        library made it and runs it: the namedtuple classes and mpmath operators built by
        ``exec`` while sympy is imported (a library module's namespace, or called from library
        code, and not the notebook's ``__main__``)."""
        name = code.co_filename
        if not name.startswith("<"):
            return os.path.abspath(name).startswith(self._library)
        if name.startswith("<frozen "):  # importlib's own frames
            return True
        if frame is None or frame.f_globals.get("__name__") == "__main__":
            return False
        if self._library_namespace(frame.f_globals):
            return True
        back = frame.f_back
        return back is not None and not back.f_code.co_filename.startswith("<") and \
            os.path.abspath(back.f_code.co_filename).startswith(self._library)

    def _library_namespace(self, globals_: dict) -> bool:
        name = globals_.get("__name__")
        module = sys.modules.get(name) if isinstance(name, str) else None
        path = getattr(module, "__file__", None)
        return (isinstance(path, str) and getattr(module, "__dict__", None) is globals_
                and os.path.abspath(path).startswith(self._library))

    def _classify(self, code):
        """What running ``code`` is: ``(kind, words)`` or None (ordinary code)."""
        name = self._codes.get(code)
        if name is not None:
            return ("ref", f"calls {name}") if name in self.normref_names else None
        if code in self._allowed:
            return None
        filename = code.co_filename
        f = filename if filename.startswith("<") else os.path.abspath(filename)
        if self.normref_names or self.torch_names:
            name = self._prints.get(code_print(code)) if self._prints and (
                f.startswith("<") or not f.startswith(self._library) or f.startswith(self._normref_dir)) else None
            if name is not None and name in self.normref_names:
                return "ref", f"calls a copy of {name}"
        if f.startswith(self._normref_dir):
            mod = f[len(self._normref_dir):].removesuffix(".py").removesuffix("__init__").rstrip(os.sep)
            mod = mod.replace(os.sep, ".")
            return "normref", f"calls the course's own normref.{mod}.{code.co_qualname}"
        if self.autograd and (code in self._autograd_codes or f.startswith(self._functorch)):
            return "autograd", AUTOGRAD_MESSAGE  # torch.func too: autograd, whatever its folder
        if self._torch_refs and f.startswith(self._torch_refs) and not f.startswith(self._shape_helpers):
            mod = f[len(self._torch_dir):].removesuffix(".py").removesuffix("__init__").rstrip(os.sep)
            mod = mod.replace(os.sep, ".")
            # a normalization's reference code counts however it is reached; torch's other
            # reference, tracing and compiling code only when the student's code calls it itself
            # (torch's own machinery runs some, e.g. torch.ops registering its builtins)
            kind = "torchref" if code.co_name in self.torch_names else "torchtool"
            return kind, f"calls torch's reference code torch.{mod}.{code.co_name}"
        if self.torch_names and code.co_name in self.torch_names and f.startswith(self._torch_dir):
            # torch's Python normalization (F.rms_norm, F.layer_norm): seen by the profile hook,
            # whatever became of the torch function mode
            return "ref", f"calls torch's {code.co_name}"
        if code.co_name in _MODE_HELPERS and f.endswith(("overrides.py", "_python_dispatch.py")):
            return "mode", "switched off the grader's call recorder (torch function mode)"
        return None

    def _student_frame(self, frame) -> bool:
        """Is the nearest caller outside torch/numpy/the standard library/normref the student's
        code (or the grader's own call of the student's object), with no object the grader
        handed in running in between?"""
        while frame is not None:
            if frame is self._entry:  # the grader called the student's object itself (a class)
                return True
            code = frame.f_code
            if code in self._handed_codes:
                return False
            if code in self._checker_calls and frame.f_back is not None and frame.f_back.f_code is self._alarm:
                return False  # the self-check's own wiring of the student's parts, called by the checker
            if self._handed and "self" in code.co_varnames[:1]:
                if id(frame.f_locals.get("self")) in self._handed:
                    return False
            if not self._is_library(code, frame):
                return True
            if code.co_name == "<module>":
                return False  # a library module's body, run by an import inside the call: not a call of the student's
            frame = frame.f_back
        return False

    def _mode_caller(self, frame) -> bool:
        """Is the nearest caller of a mode helper outside the standard library (contextlib) the
        student's code?"""
        frame = frame.f_back
        while frame is not None and frame.f_code.co_filename.startswith(self._stdlib):
            frame = frame.f_back
        return frame is not None and frame is not self._entry and not self._is_library(frame.f_code, frame)

    def _add(self, what: str) -> None:
        if what not in self.found:
            self.found.append(what)

    def _check_threads(self, after: bool = False) -> None:
        """Record the student's threads alive now that were not when the kernel was sealed:
        work this recorder cannot see. A thread of the kernel's own machinery or of a library
        (pyzmq's, ipykernel's, matplotlib's, ipywidgets', tqdm's monitor, a pool a library keeps)
        is not the student's (:meth:`_students_thread`), and a thread is only flagged, never
        evidence of a reference call (:func:`normref.rules.observed_reference`)."""
        if self._threads is None or (after and any(w.startswith(_ESCAPED) for w in self.found)):
            return
        frames = sys._current_frames()
        extra = set(frames) - set(self._threads) - {threading_ident()}
        theirs = [i for i in sorted(extra) if self._students_thread(i, frames.get(i))]
        if theirs:
            when = "still running after" if after else "started before the grader's call were still running at"
            self._add(f"{_ESCAPED} ({len(theirs)} thread(s) of the notebook's code {when} the grader's call)")

    def _students_thread(self, ident: int, frame) -> bool:
        """Is thread ``ident`` the student's: its target (or its class's ``run``) is the
        notebook's code, or the notebook's code is on its stack now? A thread whose code is all a
        library's (the standard library, an installed package: pyzmq, ipykernel, matplotlib,
        tqdm) is not."""
        import threading
        import types

        thread = next((t for t in threading.enumerate() if t.ident == ident), None)
        if thread is not None and thread in self._started:
            return True
        if thread is not None:
            target = getattr(thread, "_target", None)
            target = getattr(target, "__func__", target)
            run = getattr(type(thread).run, "__code__", None)
            for code in (getattr(target, "__code__", None), run):
                if isinstance(code, types.CodeType) and not self._is_library(code):
                    return True
        while frame is not None:
            if not self._is_library(frame.f_code, frame):
                return True
            frame = frame.f_back
        return False

    def __enter__(self) -> "ReferenceRecorder":
        self._check_threads()
        self._entry = sys._getframe(1)
        self._mode = None
        self._mode_stack = None  # torch's (mode enabled?, stack length, stack item) once armed
        self._done: set = set()  # the kinds ("normref", "torchref") already recorded once
        waiting = loaded() is None  # no torch yet: arm as soon as the call's import of it is done
        profile = self._profile_hook(waiting)
        if not waiting:
            self._arm(loaded())
        self._old_profile = sys.getprofile()
        self._profile = profile
        sys.setprofile(profile)
        import threading

        from .threads import watch_threads

        watch_threads()  # each thread then knows which thread started it
        self._closed = False  # a thread the call starts follows it: a hook of its own
        self._old_thread_profile = threading.getprofile()
        threading.setprofile(self._thread_hook(threading_ident()))
        return self

    def _thread_hook(self, owner: int):
        """The profile hook of the threads the call starts (``threading.setprofile``; a thread
        another thread of the process starts meanwhile drops it): a reference run there is seen
        as in the call itself (its Python code and its torch C functions; the torch function mode
        is the calling thread's), until the call ends."""
        import threading

        kinds, classify = self._kind, self._classify

        def profile(frame, event, arg):
            if self._closed or getattr(threading.current_thread(), "_normref_parent", None) != owner:
                sys.setprofile(None)  # not this call's thread, or the call is over: unwatched
                return
            if event == "c_call":
                mod, name = getattr(arg, "__module__", None), str(getattr(arg, "__name__", None))
                if self.torch_names and isinstance(mod, str) and mod.split(".")[0] == "torch" and \
                        name.split(".")[0] in self.torch_names and self._student_frame(frame):
                    self._add(f"calls torch's {name.split('.')[0]}")
            elif event == "call":
                code = frame.f_code
                kind = kinds[code] if code in kinds else kinds.setdefault(code, classify(code))
                if kind is not None and kind[0] != "mode":
                    self._on_counted_call(kind, frame)

        return profile

    def _arm(self, torch) -> None:
        """The torch function mode on, now (torch loaded) or as soon as the call has imported
        torch (a numpy kernel): every torch function and op called after it is seen."""
        from torch.overrides import TorchFunctionMode

        rec = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = str(getattr(func, "__name__", "")).split(".")[0]
                if name in rec.torch_names and rec._student_frame(sys._getframe(1)):
                    rec._add(f"calls torch's {name}")
                return func(*args, **(kwargs or {}))

        self._mode_stack = (torch._C._is_torch_function_mode_enabled, torch._C._len_torch_function_stack,
                            torch._C._get_function_stack_at)
        if self.autograd:
            self._autograd_codes = self._autograd_of(torch)
        self._mode = Mode()
        self._mode.__enter__()

    def _profile_hook(self, waiting: bool):
        """The profile hook of one recorded call: it arms the mode once the call has imported
        torch (``waiting``), and sends C calls and Python calls to their checks."""
        kinds = self._kind
        allowed = self._allowed
        classify = self._classify
        modules = sys.modules

        def profile(frame, event, arg):
            nonlocal waiting
            if waiting:
                torch = modules.get("torch")
                if torch is not None and getattr(getattr(torch, "__spec__", None), "_initializing", True) is False \
                        and loaded() is torch:
                    waiting = False
                    self._arm(torch)
            if event == "c_call":
                self._on_c_call(frame, arg)
                return
            if event != "call":
                return
            code = frame.f_code
            try:
                kind = kinds[code]
            except KeyError:
                kind = kinds[code] = classify(code)
            if kind is None:
                if frame.f_back is not None and code not in allowed:
                    self._on_ordinary_call(code, frame)
            else:
                self._on_counted_call(kind, frame)

        return profile

    def _is_student(self, code, frame) -> bool:
        """Is ``code`` (run in ``frame``) the student's, not a library's? Kept per call."""
        key = (code, "student")
        student = self._kind.get(key)
        if student is None:
            student = self._kind[key] = not self._is_library(code, frame)
        return student

    def _mode_off(self) -> bool:
        """Is the armed mode switched off (DisableTorchFunction) or popped off torch's stack?
        False before the mode is armed."""
        if self._mode_stack is None:
            return False
        mode_on, stack_len, stack_at = self._mode_stack
        return not mode_on() or stack_at(stack_len() - 1) is not self._mode

    def _on_c_call(self, frame, arg) -> None:
        """A C function called: a thread or process started, the profile hook replaced, the
        mode taken off by the student's code, autograd's engine run."""
        mod, name = getattr(arg, "__module__", None), getattr(arg, "__name__", None)
        if (mod, name) in _ESCAPES:
            # Work moved to another thread or process runs where this recorder cannot see it:
            # flagged when the student's code started it (not tqdm's monitor, pyzmq's, ...)
            if started_by_notebook(frame):
                self._add(f"{_ESCAPED} ({arg.__module__}.{arg.__name__})")
            return
        if self.torch_names and isinstance(mod, str) and mod.split(".")[0] == "torch" and \
                str(name).split(".")[0] in self.torch_names and self._student_frame(frame):
            # a torch normalization's C function, seen here too: the torch function mode may be off
            self._add(f"calls torch's {str(name).split('.')[0]}")
        code = frame.f_code
        if (mod, name) in _PROFILE_SETTERS and code not in self._allowed:
            self._add("switched off the grader's call recorder (sys.setprofile)")
        if self._mode_stack is not None and self._is_student(code, frame) and (name in _MODE_C or self._mode_off()):
            self._add(_SWITCHED)  # DisableTorchFunction, or the mode popped off the stack
        if self.autograd and name == "run_backward" and self._student_frame(frame):
            self._add(AUTOGRAD_MESSAGE)

    def _on_ordinary_call(self, code, frame) -> None:
        """An ordinary Python function called (no reference): the student's code, or a library
        called by it, must find the mode still on."""
        caller = frame.f_back
        student = self._is_student(code, frame) or self._is_student(caller.f_code, caller)
        if student and caller is not self._entry and self._mode_off():
            self._add(_SWITCHED)  # DisableTorchFunction, or the mode popped off the stack

    def _on_counted_call(self, kind: tuple, frame) -> None:
        """A call that counts (a reference, normref or torch reference code, autograd, a mode
        helper), recorded when the student's code made it."""
        if kind[0] in ("normref", "torchref", "torchtool") and kind[0] in self._done:
            return
        if kind[0] == "mode":
            if self._mode_caller(frame):
                self._add(kind[1])
        elif kind[0] == "torchtool":
            caller = frame.f_back
            if caller is not None and caller is not self._entry and not self._is_library(caller.f_code, caller):
                self._add(kind[1])
                self._done.add(kind[0])
        elif self._student_frame(frame):
            self._add(kind[1])
            self._done.add(kind[0])

    def __exit__(self, *exc) -> None:
        import threading

        threading.setprofile(self._old_thread_profile)
        self._closed = True
        if sys.getprofile() is not self._profile:
            self._add("switched off the grader's call recorder (sys.setprofile)")
        if self._mode is None:  # torch was never loaded while the call ran ...
            sys.setprofile(self._old_profile)
            if loaded() is not None:  # ... or it was, and the mode could not follow
                self._add(_SWITCHED)
            self._check_threads(after=True)
            return
        from torch.overrides import _get_current_function_mode_stack

        stack = _get_current_function_mode_stack()
        if not stack or stack[-1] is not self._mode:
            self._add(_SWITCHED)
        sys.setprofile(self._old_profile)
        if stack and self._mode in stack:
            self._mode.__exit__(*exc)
        self._check_threads(after=True)


#: C functions that move work out of the recorded call: a thread or a child process.
_ESCAPES = {("_thread", "start_new_thread"), ("_thread", "start_new"), ("_thread", "start_joinable_thread"),
            ("posix", "fork"), ("posix", "forkpty"), ("posix", "posix_spawn"), ("posix", "posix_spawnp"),
            ("_posixsubprocess", "fork_exec"), ("posix", "system")}
#: The recorder's methods as this module defined them (compared before every graded call).
_RECORDER_METHODS = {k: v for k, v in ReferenceRecorder.__dict__.items() if callable(v)}


def recorder_intact() -> bool:
    """False if :class:`ReferenceRecorder`'s methods were replaced in this kernel (a patched class)."""
    return all(ReferenceRecorder.__dict__.get(k) is v for k, v in _RECORDER_METHODS.items())


def recorder_for(reference: dict | None, handed_in=(), sealed: dict | None = None) -> ReferenceRecorder:
    """The recorder of one graded call: ``reference`` (the question's names, :mod:`normref.rules`)
    with what :func:`normref.handback.seal` captured at kernel start (``sealed``): the
    references' code objects, the kernel's threads, the allowed code; no checker function is
    exempt (grading calls none of its own under the recorder). ``sealed["recorder"]``, when
    given, makes the recorder instead (``(reference, handed_in) -> context manager`` with
    ``found``): the grader's clean room, where the references are absent, not watched
    (:mod:`grader.kernel.cleanroom_box`)."""
    if sealed is not None and sealed.get("recorder") is not None:
        return sealed["recorder"](reference, handed_in)
    kw = dict(reference or {})
    if sealed is not None:
        kw.setdefault("codes", sealed["codes"])
        kw.setdefault("threads", sealed["threads"])
        for k in ("prints", "allowed", "torch_dir"):
            if k in sealed:
                kw.setdefault(k, sealed[k])
        # grading calls no checker function of its own under the recorder: nothing is exempt
        kw.setdefault("checker_calls", (frozenset(), None))
        if sealed.get("started") is not None:
            kw.setdefault("started", sealed["started"])
    return ReferenceRecorder(handed_in=handed_in, **kw)


def grader_objects(args, kwargs) -> list:
    """The grader's objects among a call's arguments (a norm, a sublayer): not arrays, not numbers."""
    return [a for a in (*args, *kwargs.values())
            if not (is_tensor(a) or isinstance(a, (np.ndarray, int, float, bool, str, type(None), tuple, list)))]


__all__ = ["ReferenceRecorder", "AUTOGRAD_MESSAGE", "allowed_codes", "recorder_intact", "recorder_for",
           "grader_objects", "TORCH_HELPERS", "CALL_HELPERS"]
