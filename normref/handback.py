"""The grading kernel's half of trusted scoring: run the student's code on the grader's inputs
and hand the outputs back, unjudged.

While ``make grade`` autogrades, a question's hidden test is one line,
``hand_back("rms_norm_battery", rms_norm)``. The grader has drawn that question's inputs from a
secret seed (new every grading run) and left them, as the exact calls its checker makes, in
``$NORMREF_HANDBACK_DIR/<grade_id>.pt``, locked with a key of that question's own (:func:`lock`);
an nbgrader preprocessor rewrites the line, just before the cell runs, into a call of the
hand-back that :func:`seal` kept at kernel start, with the key (see :func:`seal`), so that no
answer cell can read the inputs beforehand. This module makes each call in the kernel and shows
the outputs (arrays and tensors with their dtype and shape, or the exception) as one output
of MIME type :data:`MIME`. The grader's own process reads that output from the autograded
notebook and judges it with the same checker, outside the student's process
(:mod:`grader.scoring`): nothing here decides a score, so patching it can only change the
outputs handed back, which the student's code could have returned itself.

A class question hands back the record of the grader's plan instead (:func:`run_plan`:
construct, report, load weights, swap in known submodules, call ``forward``), and a short
answer its values (:func:`encode_answer`); both are judged by the grader the same way.

Outside autograde (a student's own kernel, ``nbgrader validate``), :func:`hand_back` does
nothing. In autograde it returns 0.0, so that a hidden test whose outputs never reach the
grader's scoring stage scores 0, never full marks.
"""
from __future__ import annotations

import base64
import io
import os
import sys
from pathlib import Path

import numpy as np

from ._torch import directory, import_if_named, is_tensor, loaded
from .handback_files import HANDBACK_ENV

#: MIME type of the one output a hidden test shows.
MIME = "application/vnd.normref.handback+json"
#: Environment variable naming the folder of the grader's inputs.
ENV = HANDBACK_ENV
#: Largest array handed back (elements); the graded inputs are tiny.
MAX_ELEMENTS = 1 << 16
#: First bytes of an inputs file locked with its question's key (:func:`lock`).
MAGIC = b"NRHB1\n"


# ------------------------------------------------------------------ the inputs, locked per question
#
# The grader (grader.scoring.prepare_inputs) writes each question's inputs locked with a key of
# its own, new every grading run; only an nbgrader preprocessor outside the sandbox knows the keys,
# and it writes a question's key into that question's hidden test cell just before autograde runs
# it (nbgrader_config.py, HandbackKeys). An answer cell, which runs earlier, cannot read them.

def question_key(master: bytes, grade_id: str) -> bytes:
    """The key of one question: HMAC-SHA256 of its ``grade_id`` under the run's master key."""
    import hashlib
    import hmac

    return hmac.new(master, b"normref-handback:" + grade_id.encode(), hashlib.sha256).digest()


def _keystream(key: bytes, nonce: bytes, n: int) -> np.ndarray:
    import hashlib

    blocks = bytearray()
    for i in range((n + 31) // 32):
        blocks += hashlib.sha256(key + nonce + i.to_bytes(8, "little")).digest()
    return np.frombuffer(bytes(blocks[:n]), dtype=np.uint8)


def lock(key: bytes, data: bytes) -> bytes:
    """``data`` encrypted with ``key`` (a SHA-256 keystream, counter mode) and authenticated
    (HMAC-SHA256, encrypt-then-MAC): ``MAGIC + nonce + tag + ciphertext``."""
    import hashlib
    import hmac
    import secrets

    nonce = secrets.token_bytes(16)
    ct = (np.frombuffer(data, dtype=np.uint8) ^ _keystream(key, nonce, len(data))).tobytes()
    tag = hmac.new(key, nonce + ct, hashlib.sha256).digest()
    return MAGIC + nonce + tag + ct


def unlock(key: bytes, blob: bytes) -> bytes:
    """The inverse of :func:`lock`. Raises ValueError for a wrong key or a changed file."""
    import hashlib
    import hmac

    if not blob.startswith(MAGIC):
        raise ValueError("not a locked inputs file")
    nonce, tag, ct = blob[len(MAGIC):len(MAGIC) + 16], blob[len(MAGIC) + 16:len(MAGIC) + 48], blob[len(MAGIC) + 48:]
    if not hmac.compare_digest(tag, hmac.new(key, nonce + ct, hashlib.sha256).digest()):
        raise ValueError("wrong key for these inputs")
    return (np.frombuffer(ct, dtype=np.uint8) ^ _keystream(key, nonce, len(ct))).tobytes()


#: How :func:`torch.save` archives start (a zip file).
_ZIP = b"PK\x03\x04"


def dump_inputs(data: dict, torch_free: bool) -> bytes:
    """A question's inputs as the grader writes them (before :func:`lock`): a pickle when
    ``torch_free`` (a numpy or short-answer question: arrays and Python values, which its kernel
    reads without importing torch), else ``torch.save``'s archive (tensors, modules)."""
    if torch_free:
        import pickle

        return pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
    import torch

    buf = io.BytesIO()
    torch.save(data, buf)
    return buf.getvalue()


def load_inputs(data: bytes) -> dict:
    """What :func:`dump_inputs` wrote: ``torch.load`` for a ``torch.save`` archive, else
    ``pickle.loads`` (no torch import). Written by the grader only (the kernel cannot write them)."""
    if data.startswith(_ZIP):
        import torch

        return torch.load(io.BytesIO(data), weights_only=False)
    import pickle

    return pickle.loads(data)


def _npy(a: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def encode(obj, depth: int = 0) -> dict:
    """A JSON-able description of an output: ``{"t": "torch"|"numpy"|"seq"|"py"|"other", ...}``.

    Tensors keep their dtype name (bfloat16 travels as its exact float32 values) and shape;
    numpy arrays travel as ``.npy`` bytes (no pickles); anything else by its type name.
    """
    if is_tensor(obj):
        torch = loaded()
        if obj.numel() > MAX_ELEMENTS or obj.is_complex():
            return {"t": "other", "type": "Tensor"}
        t = obj.detach().cpu()
        data = t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
        return {"t": "torch", "dtype": str(t.dtype).replace("torch.", ""), "npy": _npy(data)}
    if isinstance(obj, np.ndarray):
        if obj.size > MAX_ELEMENTS or obj.dtype.hasobject:
            return {"t": "other", "type": "ndarray"}
        return {"t": "numpy", "npy": _npy(obj)}
    if isinstance(obj, (tuple, list)) and depth < 2 and len(obj) <= 16:
        return {"t": "seq", "type": type(obj).__name__, "items": [encode(o, depth + 1) for o in obj]}
    if obj is None or isinstance(obj, (bool, int, float)):
        return {"t": "py", "value": obj}
    return {"t": "other", "type": type(obj).__name__[:80]}


def _arrays(args) -> list[tuple[int, object]]:
    return [(i, a) for i, a in enumerate(args) if isinstance(a, np.ndarray) or is_tensor(a)]


def _copy(a):
    return a.clone() if hasattr(a, "clone") else np.array(a, copy=True)


def _same(a, b) -> bool:
    if is_tensor(a):
        return bool(loaded().equal(a, b))
    return bool(np.array_equal(a, b, equal_nan=True))


#: The normref modules whose functions and methods can be references (by their code objects).
_REFERENCE_MODULES = ("normref.functional", "normref.modules", "normref.blocks", "normref.backward",
                      "normref.placements")
#: Those of them that import torch.
_TORCH_MODULES = ("normref.modules", "normref.blocks")


def _with_torch(torch: bool | None) -> bool:
    return loaded() is not None if torch is None else bool(torch)


def reference_codes(torch: bool | None = None) -> dict:
    """``{code object: "module.qualname"}`` of every function and method defined in
    :data:`_REFERENCE_MODULES`, read from the modules as they are now (the sealed prologue
    reads them before any student cell runs, :func:`seal`).

    Args:
        torch: also import the modules that import torch (:data:`_TORCH_MODULES`); default:
            when this process has torch already. Without, those not imported yet are left out:
            their code is known by its fingerprint (:func:`source_prints`) and its file.
    """
    import importlib
    import types

    out = {}
    for modname in _REFERENCE_MODULES:
        if modname in _TORCH_MODULES and not _with_torch(torch) and modname not in sys.modules:
            continue
        mod = importlib.import_module(modname)
        for obj in list(vars(mod).values()):
            members = [obj]
            if isinstance(obj, type) and obj.__module__ == modname:
                members = list(vars(obj).values())
            for m in members:
                f = getattr(m, "__func__", m)
                if isinstance(f, types.FunctionType) and f.__module__ == modname:
                    out[f.__code__] = f"{modname}.{f.__qualname__}"
    return out


def code_print(code) -> int:
    """A fingerprint of a code object: its bytecode, constants and names, nested code objects
    by their own fingerprints; a copy made with ``code.replace(co_name=...)`` (or the same
    source compiled again) has the same one."""
    import types

    consts = tuple(code_print(c) if isinstance(c, types.CodeType) else (type(c).__name__, repr(c))
                   for c in code.co_consts)
    return hash((code.co_code, consts, code.co_names))


def reference_prints(codes: dict) -> dict:
    """``{fingerprint: name}`` of the references in ``codes`` that have a docstring (a function
    without one may be an honest student's same few lines: it is known by identity only), and,
    of the reference modules not imported yet, their functions compiled from source
    (:func:`source_prints`), so that a copy of one is known before its module is imported."""
    out = source_prints()
    out.update({code_print(c): n for c, n in codes.items()
                if c.co_consts and isinstance(c.co_consts[0], str) and len(c.co_consts[0]) >= 20})
    return out


def source_prints() -> dict:
    """``{fingerprint: "module.qualname"}`` of the documented functions and methods of the
    reference modules this process has not imported (:data:`_TORCH_MODULES` in a kernel without
    torch), from their source compiled (never run): the same fingerprints as the imported
    code's (:func:`code_print`), without importing torch."""
    import importlib.util
    import types

    out = {}
    for modname in _REFERENCE_MODULES:
        if modname in sys.modules:
            continue
        hit = _CACHE.get(("source_prints", modname))
        if hit is None:
            spec = importlib.util.find_spec(modname)
            hit = {}
            if spec is not None and spec.origin and os.path.isfile(spec.origin):
                with open(spec.origin, encoding="utf-8") as f:
                    module = compile(f.read(), spec.origin, "exec", dont_inherit=True)
                todo = [c for c in module.co_consts if isinstance(c, types.CodeType)]
                while todo:  # its functions and its classes' methods (class bodies are not CO_OPTIMIZED)
                    c = todo.pop()
                    todo.extend(k for k in c.co_consts
                                if isinstance(k, types.CodeType) and "<locals>" not in k.co_qualname)
                    if c.co_flags & 0x1 and c.co_consts and isinstance(c.co_consts[0], str) \
                            and len(c.co_consts[0]) >= 20:
                        hit[code_print(c)] = f"{modname}.{c.co_qualname}"
            _CACHE[("source_prints", modname)] = hit
        out.update(hit)
    return out


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
    recorder itself and the checkers' call helpers (which start and stop the student's call)."""
    from .checks import core

    # the block's parts, when this process has normref.blocks (or torch, which it needs): an
    # answer without torch cannot run them without importing it (then they count as normref code)
    blocks = sys.modules.get("normref.blocks")
    if blocks is None and loaded() is not None:
        from . import blocks
    parts = [blocks.CausalSelfAttention, blocks.FeedForward] if blocks is not None else []
    return _codes_within([*parts, ReferenceRecorder, encode, _npy, *(getattr(core, n) for n in _CORE_USED),
                          *_TORCH_HELPERS.values()])


_CACHE: dict = {}


def _checker_calls() -> tuple[frozenset, object]:
    """The self-check's own functions that it calls, under the recorder, on the student's parts
    (the block checker's reference wiring), and the code of the helper that calls them: such a
    call made by the checker is not the student's; the same function called from the student's
    code is."""
    hit = _CACHE.get("checker_calls")
    if hit is None:
        from .checks import core

        block = sys.modules.get("normref.checks.block")
        if block is None:  # the block checker is not loaded: none of its functions can be running
            return frozenset(), core._call_alarm.__code__
        hit = _CACHE["checker_calls"] = (frozenset({block._block_reference.__code__}), core._call_alarm.__code__)
    return hit


def _cached(what: str, key, make):
    """``make(key)``, kept for the next recorder with the same ``key`` (the self-check's
    recorders; grading's come from :func:`seal`)."""
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
            kernel's own, from :func:`seal`); another one alive then is recorded, as work this
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

    Attributes:
        found: what was executed, e.g. ``["calls torch's rms_norm"]``, in order of first call.
    """

    def __init__(self, torch_names=(), normref_names=(), handed_in=(), codes=None, threads=None,
                 autograd=False, prints=None, allowed=None, checker_calls=None, torch_dir=None):
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
            return "torchref", f"calls torch's reference code torch.{mod}.{code.co_name}"
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

    def _check_threads(self) -> None:
        if self._threads is None:
            return
        extra = set(sys._current_frames()) - set(self._threads)
        if extra:
            self._add(f"runs code in another thread or process ({len(extra)} thread(s) started before the "
                      "grader's call were still running)")

    def __enter__(self) -> "ReferenceRecorder":
        rec = self
        self._check_threads()
        self._entry = sys._getframe(1)
        mode_on = stack_len = stack_at = None

        def arm(torch) -> None:
            """The torch function mode on, now (torch loaded) or as soon as the call has imported
            torch (a numpy kernel): every torch function and op called after it is seen."""
            nonlocal mode_on, stack_len, stack_at
            from torch.overrides import TorchFunctionMode

            class Mode(TorchFunctionMode):
                def __torch_function__(self, func, types, args=(), kwargs=None):
                    name = str(getattr(func, "__name__", "")).split(".")[0]
                    if name in rec.torch_names and rec._student_frame(sys._getframe(1)):
                        rec._add(f"calls torch's {name}")
                    return func(*args, **(kwargs or {}))

            mode_on = torch._C._is_torch_function_mode_enabled
            stack_len = torch._C._len_torch_function_stack
            stack_at = torch._C._get_function_stack_at
            if self.autograd:
                self._autograd_codes = self._autograd_of(torch)
            self._mode = Mode()
            self._mode.__enter__()

        kinds = self._kind
        allowed = self._allowed
        classify = self._classify
        library = self._is_library
        modules = sys.modules
        switched = "switched off the grader's call recorder (torch function mode)"
        waiting = loaded() is None  # no torch yet: arm as soon as the call's import of it is done

        def profile(frame, event, arg):
            nonlocal waiting
            if waiting:
                torch = modules.get("torch")
                if torch is not None and getattr(getattr(torch, "__spec__", None), "_initializing", True) is False \
                        and loaded() is torch:
                    waiting = False
                    arm(torch)
            if event == "c_call":
                mod, name = getattr(arg, "__module__", None), getattr(arg, "__name__", None)
                if (mod, name) in _ESCAPES:
                    # Work moved to another thread or process runs where this recorder cannot see it.
                    self._add(f"runs code in another thread or process ({arg.__module__}.{arg.__name__})")
                    return
                code = frame.f_code
                if (mod, name) in _PROFILE_SETTERS and code not in allowed:
                    self._add("switched off the grader's call recorder (sys.setprofile)")
                student = kinds.get((code, "student"))
                if student is None:
                    student = kinds[(code, "student")] = not library(code, frame)
                if student and mode_on is not None:
                    if name in _MODE_C:
                        self._add(switched)
                    elif not mode_on() or stack_at(stack_len() - 1) is not self._mode:
                        self._add(switched)  # DisableTorchFunction, or the mode popped off the stack
                if self.autograd and name == "run_backward" and self._student_frame(frame):
                    self._add(AUTOGRAD_MESSAGE)
                return
            if event != "call":
                return
            code = frame.f_code
            try:
                kind = kinds[code]
            except KeyError:
                kind = kinds[code] = classify(code)
            if kind is None:
                caller = frame.f_back
                if caller is not None and code not in allowed:
                    student = kinds.get((code, "student"))
                    if student is None:
                        student = kinds[(code, "student")] = not library(code, frame)
                    if not student:
                        student = kinds.get((caller.f_code, "student"))
                        if student is None:
                            student = kinds[(caller.f_code, "student")] = not library(caller.f_code, caller)
                    if student and caller is not self._entry and mode_on is not None and (
                            not mode_on() or stack_at(stack_len() - 1) is not self._mode):
                        self._add(switched)  # DisableTorchFunction, or the mode popped off the stack
                return
            if kind[0] in ("normref", "torchref") and kind[0] in done:
                return
            if kind[0] == "mode":
                if self._mode_caller(frame):
                    self._add(kind[1])
            elif self._student_frame(frame):
                self._add(kind[1])
                done.add(kind[0])

        done: set = set()
        self._mode = None
        if not waiting:
            arm(loaded())
        self._old_profile = sys.getprofile()
        self._profile = profile
        sys.setprofile(profile)
        return self

    def __exit__(self, *exc) -> None:
        if sys.getprofile() is not self._profile:
            self._add("switched off the grader's call recorder (sys.setprofile)")
        if self._mode is None:  # torch was never loaded while the call ran ...
            sys.setprofile(self._old_profile)
            if loaded() is not None:  # ... or it was, and the mode could not follow
                self._add("switched off the grader's call recorder (torch function mode)")
            self._check_threads()
            return
        from torch.overrides import _get_current_function_mode_stack

        stack = _get_current_function_mode_stack()
        if not stack or stack[-1] is not self._mode:
            self._add("switched off the grader's call recorder (torch function mode)")
        sys.setprofile(self._old_profile)
        if stack and self._mode in stack:
            self._mode.__exit__(*exc)
        self._check_threads()


#: C functions that move work out of the recorded call: a thread or a child process.
_ESCAPES = {("_thread", "start_new_thread"), ("_thread", "start_new"), ("_thread", "start_joinable_thread"),
            ("posix", "fork"), ("posix", "forkpty"), ("posix", "posix_spawn"), ("posix", "posix_spawnp"),
            ("_posixsubprocess", "fork_exec"), ("posix", "system")}
#: The recorder's methods as this module defined them (compared before every graded call).
_RECORDER_METHODS = {k: v for k, v in ReferenceRecorder.__dict__.items() if callable(v)}


def _recorder_intact() -> bool:
    """False if :class:`ReferenceRecorder`'s methods were replaced in this kernel (a patched class)."""
    return all(ReferenceRecorder.__dict__.get(k) is v for k, v in _RECORDER_METHODS.items())


def _recorder(reference: dict | None, handed_in=(), sealed: dict | None = None) -> ReferenceRecorder:
    kw = dict(reference or {})
    if sealed is not None:
        kw.setdefault("codes", sealed["codes"])
        kw.setdefault("threads", sealed["threads"])
        for k in ("prints", "allowed", "torch_dir"):
            if k in sealed:
                kw.setdefault(k, sealed[k])
        # grading calls no checker function of its own under the recorder: nothing is exempt
        kw.setdefault("checker_calls", (frozenset(), None))
    return ReferenceRecorder(handed_in=handed_in, **kw)


def _handed_in(args, kwargs) -> list:
    """The grader's objects among a call's arguments (a norm, a sublayer): not arrays, not numbers."""
    return [a for a in (*args, *kwargs.values())
            if not (is_tensor(a) or isinstance(a, (np.ndarray, int, float, bool, str, type(None), tuple, list)))]


def run_calls(fn, calls: list, reference: dict | None = None, sealed: dict | None = None) -> list[dict] | dict:
    """Make each call ``(args, kwargs, grad_enabled)`` of ``fn``, as the checker would; one
    record per call: ``{"out": encode(output)}``, ``{"raised": [type, message]}`` or
    ``{"timeout": True}``, plus ``"after"`` for inputs the call modified and ``"references"``
    for the reference normalizations it executed (``reference``: the keyword arguments of
    :class:`ReferenceRecorder`; ``sealed``: what :func:`seal` captured at kernel start).
    Without torch loaded (a numpy question) autograd's mode is not set: nothing uses it."""
    import contextlib

    from .checks.core import CALL_TIMEOUT_S, _call_with_timeout, _Timeout

    if not callable(fn):
        return {"not_callable": type(fn).__name__[:80]}
    import_if_named(fn)  # an answer that imports torch does it here, not inside a timed call
    records = []
    for args, kwargs, grad in calls:
        before = [(i, _copy(a)) for i, a in _arrays(args)]
        rec: dict = {}
        recorder = _recorder(reference, _handed_in(args, kwargs), sealed)
        torch = loaded()
        grad_mode = torch.set_grad_enabled(grad) if torch is not None else contextlib.nullcontext()
        try:
            with grad_mode, recorder:
                out = _call_with_timeout(fn, tuple(args), dict(kwargs), CALL_TIMEOUT_S)
                # encoded inside the record: a returned object whose conversion runs code
                # (a tensor subclass, say) runs it where the recorder sees it
                rec["out"] = encode(out)
        except _Timeout:
            rec["timeout"] = True
        except Exception as e:  # noqa: BLE001 - the student's error is handed back as it is
            rec["raised"] = [type(e).__name__[:80], str(e)[:500]]
        if not _recorder_intact():
            recorder.found.append("changed the grader's call recorder (its class was patched)")
        if recorder.found:
            rec["references"] = recorder.found
        changed = {str(i): encode(args[i]) for i, b in before if not _same(args[i], b)}
        if changed:
            rec["after"] = changed
        records.append(rec)
    return records


def probe(check, *args, **kwargs) -> list[tuple[tuple, dict, bool]]:
    """The calls a checker makes of the student's function: ``check(probe_fn, *args,
    **kwargs)`` with a stand-in that records each call (copies of its arguments, and whether
    autograd was on) and raises. Returns ``[(args, kwargs, grad enabled)]`` in order."""
    import copy

    calls = []

    def stand_in(*a, **k):
        torch = loaded()  # without torch (a numpy check) autograd is on, as torch starts
        calls.append((copy.deepcopy(a), copy.deepcopy(k), torch.is_grad_enabled() if torch is not None else True))
        raise RuntimeError("probe")

    check(stand_in, *args, **kwargs)
    return calls


# ------------------------------------------------------------------ classes and short answers

#: Attributes reported after a class is constructed, at most (their names come from the grader).
MAX_REPORTED = 64


def _describe(obj, seen: dict) -> dict:
    """What the grader needs of one attribute of a built module: a tensor's values (and whether
    it is an ``nn.Parameter``), a submodule's or callable's type, and which earlier attribute
    is the same object (``seen``: ``{id(obj): attribute name}``)."""
    import torch
    from torch import nn

    if id(obj) in seen:
        return {"kind": "same", "as": seen[id(obj)]}
    if isinstance(obj, torch.Tensor):
        return {"kind": "tensor", "param": isinstance(obj, nn.Parameter), "value": encode(obj.detach())}
    kind = "module" if isinstance(obj, nn.Module) else "callable" if callable(obj) else "other"
    return {"kind": kind, "type": type(obj).__name__[:80]}


def _report(m, attrs) -> dict:
    """The built module as the grader sees it: ``named_parameters`` names and the ``attrs``."""
    names = []
    try:
        for name, _ in m.named_parameters():
            names.append(str(name)[:200])
            if len(names) >= MAX_REPORTED:
                break
    except Exception as e:  # noqa: BLE001 - the student's module may break named_parameters
        names = {"raised": [type(e).__name__[:80], str(e)[:500]]}
    seen: dict = {}
    out = {}
    for a in list(attrs)[:MAX_REPORTED]:
        try:
            obj = getattr(m, a)
        except Exception:  # noqa: BLE001 - a missing attribute, or a property that raises
            out[a] = {"kind": "absent"}
            continue
        out[a] = _describe(obj, seen)
        seen.setdefault(id(obj), a)
    return {"params": names, "attrs": out}


def _timed(fn, args: tuple, kwargs: dict, reference: dict | None = None, handed_in=(),
           sealed: dict | None = None) -> dict:
    """One call of the student's code: ``{"out": encode(...)}``, ``{"raised": [type, message]}``
    or ``{"timeout": True}``, with ``"references"`` when ``reference`` is given and the call ran
    a reference normalization (see :func:`run_calls`)."""
    from .checks.core import CALL_TIMEOUT_S, _call_with_timeout, _Timeout

    rec: dict = {}
    import_if_named(fn)  # an answer that imports torch: before the call, neither recorded nor timed
    recorder = _recorder(reference, handed_in, sealed) if reference is not None else None
    try:
        if recorder is None:
            rec["value"] = _call_with_timeout(fn, tuple(args), dict(kwargs), CALL_TIMEOUT_S)
        else:
            with recorder:
                rec["value"] = _call_with_timeout(fn, tuple(args), dict(kwargs), CALL_TIMEOUT_S)
                rec["out"] = encode(rec["value"])  # inside the record (see run_calls)
    except _Timeout:
        rec["timeout"] = True
    except Exception as e:  # noqa: BLE001 - the student's error is handed back as it is
        rec["raised"] = [type(e).__name__[:80], str(e)[:500]]
    if recorder is not None:
        if not _recorder_intact():
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


def run_plan(cls, plan: list[dict], reference: dict | None = None, sealed: dict | None = None) -> list[dict] | dict:
    """Perform the grader's plan for a class question (its checker's cases, decided by the
    grader) on the student's class ``cls`` and record what happened; nothing is judged here.

    Each case of ``plan`` is a dict, performed in this order:

    * ``"new": [args, kwargs]``: ``cls(*args, **kwargs)`` (with the global torch RNG state kept
      when ``"seeded"``; with ``"copy_module"``, a built ``nn.Module`` is deep-copied instead,
      never modified);
    * ``"attrs"``: attribute names to report (:func:`_report`: tensors with values, submodules
      by type, which are the same object), with the ``named_parameters`` names;
    * ``"load": {name: tensor}``: copied into those tensors of the module (a trained weight);
    * ``"swap": [[name, module], ...]``: the grader's own submodules set in place of the student's;
    * ``"trace": {"x": x, "calls": [[attribute, input], ...]}``: the module's own submodules
      called in the grader's wiring, each input ``"x"``, ``"r<i>"`` (an earlier output) or
      ``["+", a, b]``, outputs recorded in order with the input each got;
    * ``"forward": x``: ``module(x)`` without autograd, under the reference recorder.

    Returns:
        One record per case (``{"new": {...}, "report": ..., "trace": [...], "forward": {...}}``),
        or ``{"not_callable": type name}``.
    """
    import copy

    import torch
    from torch import nn

    from .checks.core import seeded

    if not callable(cls):
        return {"not_callable": type(cls).__name__[:80]}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors; two threads were 10x slower on a loaded machine
    records = []
    try:
        for case in plan:
            rec: dict = {}
            records.append(rec)
            args, kwargs = case["new"]
            if case.get("copy_module") and isinstance(cls, nn.Module):
                new = _timed(copy.deepcopy, (cls,), {})
            elif case.get("seeded"):
                with seeded():
                    new = _timed(cls, args, kwargs)
            else:
                new = _timed(cls, args, kwargs)
            m = new.pop("value", None)
            if not new:  # it returned
                new["module"] = isinstance(m, nn.Module)
                if not new["module"]:
                    new["type"] = type(m).__name__[:80]
            rec["new"] = new
            if not new.get("module"):
                continue
            rec["report"] = _report(m, case.get("attrs", ()))
            handed = [part for _, part in case.get("swap") or ()]
            try:
                with torch.no_grad():
                    for name, value in (case.get("load") or {}).items():
                        w = getattr(m, name, None)
                        if isinstance(w, torch.Tensor) and tuple(w.shape) == tuple(value.shape):
                            w.copy_(value)
                for name, part in case.get("swap") or ():
                    setattr(m, name, part)
            except Exception as e:  # noqa: BLE001 - the student's module refused a weight or a part
                rec["forward"] = {"raised": [type(e).__name__[:80], str(e)[:500]]}
                continue
            x = case.get("forward")
            with torch.no_grad():
                if case.get("trace"):
                    outs, trace = [], []
                    rec["trace"] = trace
                    tx = case["trace"]["x"]
                    for name, expr in case["trace"]["calls"]:
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
                if x is not None:
                    before = _copy(x)
                    one = _timed(m, (x,), {}, reference or {}, handed, sealed)
                    if "value" in one:
                        value = one.pop("value")
                        one.setdefault("out", encode(value))
                    if not _same(x, before):
                        one["after"] = {"0": encode(x)}
                    rec["forward"] = one
    finally:
        torch.set_num_threads(threads)
    return records


def encode_answer(value, depth: int = 0) -> dict:
    """A short answer as JSON, for the grader to check: numbers, strings, bools and None as
    they are; tuples, lists and ``torch.Size`` item by item; numpy scalars, arrays and tensors
    as ``.npy`` with their dtype; anything else by its type name and ``repr`` (and its value
    as a number, when it has one), which the grader notes in the feedback."""
    import math

    torch = loaded()
    if isinstance(value, np.generic) and not isinstance(value, np.object_):  # before float: np.float64 is one
        return {"t": "npscalar", "npy": _npy(np.asarray(value))}
    if value is None or isinstance(value, bool) or (isinstance(value, int) and abs(value) < 2**63):
        return {"t": "py", "value": value}
    if isinstance(value, float):
        return {"t": "py", "value": value} if math.isfinite(value) else {"t": "float", "repr": repr(value)}
    if isinstance(value, str):
        return {"t": "str", "value": value[:10000]}
    if value is Ellipsis:
        return {"t": "ellipsis"}
    if isinstance(value, (tuple, list)) and depth < 3 and len(value) <= 64:
        kind = "Size" if torch is not None and isinstance(value, torch.Size) else \
            "list" if isinstance(value, list) else "tuple"
        return {"t": "seq", "type": kind, "items": [encode_answer(v, depth + 1) for v in value]}
    if isinstance(value, np.ndarray) or is_tensor(value):
        return encode(value)
    out = {"t": "repr", "type": type(value).__name__[:80]}
    try:
        out["repr"] = repr(value)[:500]
    except Exception:  # noqa: BLE001 - a repr that raises
        out["repr"] = f"<{out['type']}>"
    try:
        number = np.asarray(value, dtype=np.float64)
        if number.size == 1 and np.isfinite(number).all():
            out["number"] = float(number.reshape(()))
    except Exception:  # noqa: BLE001 - not a number
        pass
    return out


def hand_back(grade_id: str, fn, *more) -> float | None:
    """Run ``fn`` on the grader's inputs for ``grade_id`` and show the outputs (autograde only).

    What is handed back depends on the question (the grader's inputs file says which): a
    function's outputs on the checker's calls (:func:`run_calls`); a class's record of the
    grader's plan (:func:`run_plan`: ``fn`` is the class); a short answer's values
    (:func:`encode_answer`: ``fn`` and ``more`` are the answers, e.g.
    ``hand_back("practice_mean_var", mean_1357, var_1357)``).

    In ``make grade`` this line of the hidden test is not what runs: the grader's nbgrader
    preprocessor (``HandbackKeys`` in ``nbgrader_config.py``) replaces it, just before autograde
    executes the cell, with a call of the hand-back :func:`seal` captured when the kernel started,
    given the question's key (its inputs are locked with it, :func:`lock`). Called as written, in
    autograde, it has no key to the inputs: the cell fails, naming ``make grade`` (an
    ``nbgrader autograde`` without the keys is refused before it runs anything:
    ``GradedByMakeGrade`` in ``nbgrader_config.py``).

    Returns:
        None outside autograde (no output: Validate judges the visible part of the cell).

    Raises:
        RuntimeError: in autograde (as written, without its key), e.g. ``practice_rms: this
            hidden test ran without its key: it is graded by `make grade` ...``.
    """
    if os.environ.get("NBGRADER_EXECUTION") != "autograde":
        return None  # nothing to hand back; and validate must not read a score of 0 here
    raise RuntimeError(f"{grade_id}: this hidden test ran without its key: it is graded by `make grade` "
                       "(python -m grader), not by nbgrader autograde alone; its score here is not a grade")


def _hand_back_keyed(grade_id: str, key: bytes, fn, more: tuple, sealed: dict | None, display) -> float | None:
    """What the sealed hand-back does (:func:`seal`): unlock the question's inputs, run, show."""
    folder = os.environ.get(ENV)
    if not folder:
        print(f"{grade_id}: this grading run drew no inputs (grade with make grade): 0 points for now")
        return 0.0
    path = Path(folder) / f"{grade_id}.pt"
    if not path.is_file():
        print(f"{grade_id}: the grader left no inputs for this question")
        return 0.0
    try:
        data = unlock(key, path.read_bytes())
    except ValueError as e:
        print(f"{grade_id}: the grader's inputs could not be read ({e}): 0 points for now")
        return 0.0
    inputs = load_inputs(data)  # written by the grader, read-only in here
    kind = inputs.get("kind", "function")
    changed = sealed["changed"]() if sealed else []
    if kind == "values":
        bundle = {"grade_id": grade_id, "values": [encode_answer(v) for v in (fn, *more)]}
        retval = 0.0
    elif kind == "class":
        bundle = {"grade_id": grade_id, "cases": run_plan(fn, inputs["plan"], inputs.get("reference"), sealed)}
        retval = None if inputs.get("visible") else 0.0
    else:
        calls = inputs.get("calls")
        if calls is None:  # a visible check: its public cases, made here by the course's checker
            from . import checks

            name, args, kwargs = inputs["public"]
            calls = probe(getattr(checks, name), *args, **kwargs)
        bundle = {"grade_id": grade_id, "calls": run_calls(fn, calls, inputs.get("reference"), sealed)}
        # A visible check keeps nbgrader's pass/fail of its cell until the grader's score
        # replaces it (the grader compares the two); a battery scores 0 until then.
        retval = None if inputs.get("public") else 0.0
    if sealed:
        changed = sorted(set(changed) | set(sealed["changed"]()))
        if changed:
            bundle["changed"] = changed
    display({MIME: bundle, "text/plain": f"{grade_id}: outputs handed to the grader"}, raw=True)
    return retval


#: What the hand-back uses of the checkers' module (its call helpers): watched by :func:`seal`. The
#: rest of it (``CheckResult`` ...) is the self-check's: patching that changes only the self-check.
_CORE_USED = ("_call_with_timeout", "_call_alarm", "_Timeout", "seeded")
#: The helpers of :mod:`normref._torch` that the hand-back and the call helpers use (each module's
#: own binding of them is watched by :func:`seal` too).
_TORCH_HELPERS = {"directory": directory, "import_if_named": import_if_named, "is_tensor": is_tensor,
                  "loaded": loaded}


def _watched(owner, names=None) -> dict:
    """The functions and classes ``owner`` (a module) defines (only ``names``, when given):
    ``{name: (object, code, (class dict, method codes))}``."""
    import types

    out = {}
    for k, v in list(vars(owner).items()):
        if names is not None and k not in names:
            continue
        if getattr(v, "__module__", None) != owner.__name__:
            continue
        if isinstance(v, types.FunctionType):
            out[k] = (v, v.__code__, None)
        elif isinstance(v, type):
            members = dict(vars(v))
            codes = {a: getattr(getattr(m, "__func__", m), "__code__", None) for a, m in members.items()}
            out[k] = (v, None, (members, codes))
    return out


def seal(torch: bool = True):
    """The hand-back as it is now, kept from later changes: what the grading kernel runs first.

    ``make grade``'s preprocessor puts ``<name> = normref.handback.seal()`` (a fresh random
    name per run) in a cell of its own before every cell of the notebook, and each hidden test
    calls ``<name>(grade_id, key, fn, *more)``. The returned function keeps its own references
    to this module's functions (and the checkers' call helpers), the course references' code
    objects (:func:`reference_codes`), the kernel's threads and IPython's ``display``; every
    hand-back it makes says which of those functions, methods or code objects were replaced
    since (``"changed"``, scored 0 and flagged by the grader). Patching ``normref.handback``
    after this (through any alias) changes no hand-back unnoticed.

    Args:
        torch: import torch and the references that need it (``normref.modules``,
            ``normref.blocks``) now. False for a kernel whose questions are numpy or short
            answers (``TORCH_FREE_ASSIGNMENTS`` in ``nbgrader_config.py``): those references'
            code is then known by its fingerprint from their source (:func:`source_prints`) and,
            once imported, by its file ("calls the course's own ..."); a call that imports torch
            is followed by the recorder (:class:`ReferenceRecorder`).
    """
    from IPython.display import display

    from .checks import core

    helpers = sys.modules[directory.__module__]
    watched = [(sys.modules[__name__], _watched(sys.modules[__name__])), (core, _watched(core, _CORE_USED)),
               (helpers, _watched(helpers)),
               *((owner, {k: (v, v.__code__, None) for k, v in vars(owner).items() if _TORCH_HELPERS.get(k) is v})
                 for owner in (sys.modules[__name__], core))]

    def changed() -> list[str]:
        out = []
        for owner, items in watched:
            now = vars(owner)
            for k, (v, code, cls) in items.items():
                where = f"{owner.__name__}.{k}"
                if now.get(k) is not v:
                    out.append(where)
                elif code is not None and v.__code__ is not code:
                    out.append(f"{where} (its code)")
                elif cls is not None:
                    members, codes = cls
                    if set(vars(v)) != set(members) or any(vars(v)[a] is not m for a, m in members.items()):
                        out.append(f"{where} (its methods)")
                    elif any(c is not None and getattr(getattr(m, "__func__", m), "__code__", None) is not c
                             for a, (m, c) in ((a, (members[a], codes[a])) for a in members)):
                        out.append(f"{where} (a method's code)")
        return out

    codes = reference_codes(torch=torch)
    state = {"torch_dir": directory(), "codes": codes, "prints": reference_prints(codes),
             "allowed": frozenset(allowed_codes()),
             "threads": frozenset(sys._current_frames()), "changed": changed}
    keyed = _hand_back_keyed

    def sealed(grade_id: str, key: str, fn, *more):
        return keyed(grade_id, bytes.fromhex(key), fn, more, state, display)

    return sealed


def as_graded(result, grade_id: str, points: float) -> None:
    """In ``nbgrader validate`` (and the toolbar's Validate), fail a question whose battery is
    not fully passed, saying what grading would give; elsewhere (JupyterLab, autograde) do
    nothing, so autograde still gives partial credit.

    Args:
        result: the question's :class:`normref.checks.CheckResult`.
        grade_id: the test cell's ``grade_id``, e.g. ``"rms_norm_battery"``.
        points: the cell's points.

    Raises:
        AssertionError: in validate, when ``result`` is not fully passed, e.g.
            ``rms_norm_battery: 5/6 cases, 3.33 of 4 points:`` then one line ``- <cause>``
            per distinct failing cause (wrapped at 76 columns); for a broken rule, its line
            alone, ``rms_norm_battery: 0 of 4 points: calls F.rms_norm — implement it with
            tensor operations``: a :class:`PointsLost`, shown without a traceback frame.
    """
    if os.environ.get("NBGRADER_EXECUTION") != "validate" or result.passed:
        return
    if result.breaches:
        raise PointsLost(_broken_rules(result.breaches, grade_id, points))
    n_ok = sum(c.passed for c in result.cases)
    earned = round(points * result.score, 2)
    # validate shows each line of an error up to 80 characters: every cause is wrapped
    raise PointsLost(f"{grade_id}: {n_ok}/{len(result.cases)} cases, {earned:g} of {points:g} points:\n"
                     + _every_cause(result))


def _broken_rules(breaches: list[str], grade_id: str, points: float) -> str:
    """Validate's message for a question that breaks a rule (:func:`as_graded`): one line
    (wrapped at 76 columns, the first 16 shorter for ``"AssertionError: "``), or a bullet per
    violation when there are several."""
    import textwrap

    from .rules import RULE_PREFIX

    head = f"{grade_id}: 0 of {points:g} points:"
    whys = [b.removeprefix(RULE_PREFIX) for b in breaches]
    if len(whys) == 1:
        pad = " " * 16
        lines = textwrap.wrap(f"{head} {whys[0]}", 76, initial_indent=pad, break_long_words=False,
                              break_on_hyphens=False)
        return "\n".join([lines[0][len(pad):], *lines[1:]])
    return "\n".join([head] + [textwrap.fill(w, 76, initial_indent="- ", subsequent_indent="  ",
                                              break_long_words=False, break_on_hyphens=False) for w in whys])


class PointsLost(AssertionError):
    """What :func:`as_graded` raises in validate: an ``AssertionError`` that IPython shows as
    its message alone (``_render_traceback_``, IPython's hook for exceptions that render
    themselves), with no frame of the course's code (``normref/handback.py:... in as_graded``)."""

    def _render_traceback_(self) -> list[str]:
        return [f"AssertionError: {self}"]


def _every_cause(result) -> str:
    """Each distinct reason ``result`` loses points, once, in order (the broken rules, then each
    failing case's diagnosis without its case name), each wrapped to 76 columns as ``- ...``:
    a student fixing the first learns of the others too (bfloat16's dtype after float16's overflow)."""
    import textwrap

    causes: dict[str, list[str]] = {}  # hint -> the cases it explains
    for why in result.breaches:
        causes.setdefault(" ".join(why.split()), [])
    for c in result.cases:
        if c.passed:
            continue
        if c.message.startswith("case '"):  # a code case, "case '<name>': <what>; <hint>": the hint
            hint = " ".join(c.message.split("': ", 1)[-1].split("; ", 1)[-1].split())
            causes.setdefault(hint, []).append(c.name.split(" (", 1)[0])
        else:  # a short answer's message, whole: it names its answer ("variance: you gave 3: ...")
            causes.setdefault(" ".join(c.message.split()), [])

    def said(hint: str, cases: list[str]) -> str:  # "float16 row [...] and bfloat16 [2, 3, 8]: <hint>"
        if not cases:
            return hint
        if len(cases) <= 2:
            return f"{' and '.join(cases)}: {hint}"
        return f"{cases[0]} and {len(cases) - 1} more cases: {hint}"

    return "\n".join(textwrap.fill(said(hint, cases), 76, initial_indent="- ", subsequent_indent="  ",
                                    break_long_words=False, break_on_hyphens=False)
                      for hint, cases in causes.items() if hint)
