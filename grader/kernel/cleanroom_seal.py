"""The clean room's seal: what makes the references absent in the process that runs a student's
graded calls (:mod:`grader.kernel.cleanroom`), before any of the student's code runs there.

Run by path inside the grading sandbox (like ``grader/kernel/kernel_guard.py``): it imports only the
standard library, and torch when the process has it. :func:`seal`, in this order:

1. **torch's normalization ops are absent at the dispatcher.** Every registered op whose name
   names a normalization (:data:`NORM_OP`: ``aten::layer_norm``, ``native_layer_norm``,
   ``rms_norm``, ``_fused_rms_norm``, ``group_norm``, ``batch_norm``, ``instance_norm``, their
   ``native_*``/``_native_*``/backward variants, ``quantized::layer_norm`` ...) gets, at every
   dispatch key it has a kernel for (CPU, Autograd, CompositeImplicitAutograd, Meta, NestedTensor,
   the batching and autocast keys ...), a stand-in that records the attempt and raises
   :class:`ReferenceAbsent`. Every route to the op meets it: ``F.layer_norm``, ``nn.LayerNorm``,
   ``torch.ops.aten``, a tensor subclass's ``__torch_function__``/``__torch_dispatch__``, vmap,
   TorchScript, ``torch._transformer_encoder_layer_fwd``. The registrations' handles are
   leaked (no Python object is left that could undo them).
2. **Python implementations of a reference are absent.** Every Python function of torch's
   reference and decomposition code (``torch._refs``, ``torch._decomp``,
   ``torch._native.ops.norm``) and every torch function whose name names a normalization, and
   every function and method of the ``normref`` package but the hand-back's own modules
   (:data:`KEPT_NORMREF`), the parts an assignment hands out (:data:`HANDED_OUT`, unless a
   question names them) and the constructors of its reference classes (:func:`_constructors`:
   ``RMSNorm = normref.RMSNorm`` builds; its ``forward`` is absent), has its code replaced by a
   stand-in's; the original code objects are
   then gone from the process (checked: a weak reference to each must be dead, else the seal
   fails).
3. **Nothing can bring them back.** A seccomp filter refuses, from then on and in every process
   forked there, ``open``/``openat``/``openat2``/``creat`` (no file can be read: not a
   reference's source, not a shared library) and ``execve``/``execveat`` (no other program, no
   fresh interpreter), ``io_uring`` (which can open files), ``ptrace`` and
   ``process_vm_readv/writev``; an audit hook (which cannot be removed) refuses ``ctypes``'
   symbol lookups and address constructors, new code objects (``code.__new__``,
   ``marshal.loads``) and replacing any function's ``__code__``/``__defaults__``.

Attempts are kept in :data:`ATTEMPTS` as ``(kind, name)``: ``("torch", "layer_norm")`` for a
torch op or a torch function named after one (``F.layer_norm``), ``("torchref",
"torch._refs.native_layer_norm")`` for torch's reference code, ``("normref",
"normref.functional.rms_norm")`` for normref's code.
"""
from __future__ import annotations

import gc
import os
import re
import sys
import types

#: An op or function name that names a normalization (normref.rules.TORCH_NORMS and their variants).
NORM_OP = re.compile(r"(layer|rms|group|batch|instance)_norm|local_response_norm")
#: torch's folders of Python reference implementations and decompositions (relative to torch/).
TORCH_PY_DIRS = ("_refs" + os.sep, "_decomp" + os.sep, os.path.join("_native", "ops", "norm") + os.sep)
#: normref's modules that stay: the hand-back (it performs the grader's calls), the wire format,
#: the call helpers and the package's own lazy attribute lookup; and the diagnosis' tracing, which
#: follows an answer with stand-ins (normref.diagnosis.handing.TRACE_MODULES). None computes a
#: normalization.
KEPT_NORMREF = frozenset({"normref", "normref.handback", "normref.plan", "normref.wire", "normref.calling",
                          "normref._torch", "normref.recorder", "normref.reference_code", "normref._syntax",
                          "normref.handback_files", "normref.rules", "normref.diagnosis.expr",
                          "normref.diagnosis.sym", "normref.diagnosis.trace", "normref.diagnosis.questions",
                          "normref.diagnosis.handed", "normref.diagnosis.handing"})
#: The parts an assignment hands out (the block's attention and feed-forward net): they stay
#: unless one of the notebook's questions names them as references (the QK-norm question does).
HANDED_OUT = ("normref.blocks.CausalSelfAttention", "normref.blocks.FeedForward")
#: The modules of normref's reference classes: a class of theirs can be built, nothing else of it runs.
BUILT_MODULES = ("normref.modules", "normref.blocks")
#: What a sealed process has attempted to run of what is absent, in order.
ATTEMPTS: list[tuple[str, str]] = []
#: The audit events refused once sealed (prefixes), and the function attributes no one may replace.
_REFUSED_EVENTS = ("ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "ctypes.addressof", "ctypes.string_at",
                   "ctypes.wstring_at", "ctypes.PyObj_FromPtr", "code.__new__", "marshal.load")
_FROZEN_ATTRS = ("__code__", "__defaults__", "__kwdefaults__")


class ReferenceAbsent(RuntimeError):
    """What calling an absent reference raises in the clean room (after recording the attempt)."""

    kind = "normref"
    name = "a reference"

    def __init__(self, *args):
        ATTEMPTS.append((self.kind, self.name))
        super().__init__(f"{self.name} is not available while the grader runs your code: "
                         "implement it yourself")


_CLASSES: dict = {}


def absent(kind: str, name: str) -> type:
    """The :class:`ReferenceAbsent` subclass for one reference (one per name)."""
    key = (kind, name)
    if key not in _CLASSES:
        _CLASSES[key] = type("ReferenceAbsent", (ReferenceAbsent,), {"kind": kind, "name": name})
    return _CLASSES[key]


def _raiser(cls: type):
    def standin(*args, **kwargs):
        raise cls()

    return standin


# ------------------------------------------------------------------ 1. torch's ops, at the dispatcher

_HEADER = re.compile(r"^(name|schema|debug|alias analysis kind):")
_KEY = re.compile(r"^(\w+)(\[alias\])?: ")


def _kernel_keys(torch, op: str) -> list[str]:
    """The dispatch keys ``op`` has a kernel registered for (``torch._C._dispatch_dump``)."""
    keys = []
    for line in torch._C._dispatch_dump(op).splitlines():
        m = _KEY.match(line)
        if m and not _HEADER.match(line) and m.group(1) not in keys:
            keys.append(m.group(1))
    return keys


#: TorchScript's entry points in ``torch._C``: building a graph (from IR, a script, a trace) and its
#: optimizing runtimes, which run ops by kernels of their own past the dispatcher (the static
#: runtime's out-variants, the fusers): a LayerNorm there is one the seal never sees.
TORCHSCRIPT = re.compile(r"^_jit|^parse_ir$|^import_ir_module|^_create_function_from_graph$|^_freeze_module$"
                         r"|^_fuse_to_static_module$")


class TorchScriptAbsent(PermissionError):
    """TorchScript in the grader's clean room (:func:`no_torchscript`)."""

    def __init__(self, name: str = "TorchScript"):
        super().__init__(f"{name}: TorchScript is not available in the grader's clean room "
                         "(the graded calls run eagerly: write the answer in eager PyTorch)")


def no_torchscript(torch) -> int:
    """TorchScript absent from this process, as the references are: every function of ``torch._C``
    that :data:`TORCHSCRIPT` names, and ``torch.jit``'s script, trace, load, freeze and fork, raise
    :class:`TorchScriptAbsent` (its types stay, for ``isinstance``; no object of them can be made
    without those functions). Eager PyTorch, autograd and ``nn.Module`` need none of them. Returns
    how many were replaced."""
    n = 0
    for name in dir(torch._C):
        if TORCHSCRIPT.search(name) and not isinstance(getattr(torch._C, name, None), type):
            setattr(torch._C, name, _raiser(lambda name=name: TorchScriptAbsent(f"torch._C.{name}")))
            n += 1
    for name in ("script", "trace", "trace_module", "load", "freeze", "optimize_for_inference", "fork",
                 "script_if_tracing"):
        if hasattr(torch.jit, name):
            setattr(torch.jit, name, _raiser(lambda name=name: TorchScriptAbsent(f"torch.jit.{name}")))
            n += 1
    return n


def absent_ops(torch) -> list[str]:
    """Replace every normalization op's kernels by stand-ins (see the module's doc); returns the
    ops, ``["aten::layer_norm", ...]``."""
    import ctypes
    import warnings

    ops = sorted(n for n in torch._C._dispatch_get_all_op_names() if NORM_OP.search(n.split("::", 1)[1]))
    libraries: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel": that is the point
        for op in ops:
            ns, rest = op.split("::", 1)
            lib = libraries.get(ns)
            if lib is None:
                lib = libraries[ns] = torch._C._dispatch_library("IMPL", ns, "", "", 0)
            standin = _raiser(absent("torch", rest.split(".")[0]))
            for key in _kernel_keys(torch, op):
                lib.impl(rest, key, standin)
    for lib in libraries.values():  # deregistering needs these handles: keep them, unreachable
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(lib))
    libraries.clear()
    torch._C._dispatch_check_all_invariants()
    return ops


# ------------------------------------------------------------------ 2. Python implementations

_TEMPLATES: dict = {}


def _standin_code(old, cls: type):
    """A code object that raises ``cls()`` whatever it is called with, with ``old``'s name and
    number of free variables (so that it can replace ``old`` in its function)."""
    n = len(old.co_freevars)
    template = _TEMPLATES.get(n)
    if template is None:
        names = [f"v{i}" for i in range(n)]
        src = ("def outer():\n" + "".join(f"    {v} = None\n" for v in names)
               + "    def standin(*args, **kwargs):\n"
               + (f"        {', '.join(names)}\n" if names else "")
               + "        raise 'ABSENT'\n    return standin\n")
        scope: dict = {}
        exec(compile(src, "<the grader's clean room>", "exec"), scope)
        template = _TEMPLATES[n] = scope["outer"]().__code__
    consts = tuple(cls if c == "ABSENT" else c for c in template.co_consts)
    return template.replace(co_consts=consts, co_name=old.co_name, co_qualname=old.co_qualname)


def _module_of(path: str, root: str, package: str) -> str:
    rel = path[len(root):].removesuffix(".py").removesuffix("__init__").rstrip(os.sep)
    return ".".join([package, *[p for p in rel.split(os.sep) if p]])


def _constructors() -> set:
    """The code that builds a reference class: the ``__init__`` of every class of
    :data:`BUILT_MODULES` and the functions of those modules it calls (``_check_args``,
    ``make_norm``), so that a normref class can be built (as the student's own class, say) while
    none of its other methods runs."""
    out, todo = set(), []
    for name in BUILT_MODULES:
        module = sys.modules.get(name)
        for cls in list(vars(module).values()) if module is not None else ():
            init = vars(cls).get("__init__") if isinstance(cls, type) and cls.__module__ == name else None
            if isinstance(init, types.FunctionType):
                todo.append((init.__code__, module))
    while todo:
        code, module = todo.pop()
        if code in out:
            continue
        out.add(code)
        for n in code.co_names:
            f = vars(module).get(n)
            if isinstance(f, types.FunctionType) and f.__module__ == module.__name__:
                todo.append((f.__code__, module))
    return out


def _what(code, dirs: dict, normref_names: frozenset, kept: tuple):
    """What replacing ``code``'s function makes absent: ``(kind, name)`` (see :data:`ATTEMPTS`),
    or None (it stays). ``kept``: ``(handed-out class prefixes, constructor codes)``."""
    path = code.co_filename
    root = dirs.get("torch")
    if root and path.startswith(root):
        if path[len(root):].startswith(TORCH_PY_DIRS):
            return "torchref", f"{_module_of(path, root, 'torch')}.{code.co_name}"
        return ("torch", code.co_name) if NORM_OP.search(code.co_name) else None
    root = dirs.get("normref")
    if root and path.startswith(root):
        module = _module_of(path, root, "normref")
        name = f"{module}.{code.co_qualname}"
        parts, constructors = kept
        if module in KEPT_NORMREF or code in constructors or (name.startswith(parts) and name not in normref_names):
            return None
        return "normref", name
    return None


def absent_functions(torch_too: bool, normref_names=()) -> int:
    """Replace the code of every function that implements a reference (see the module's doc);
    returns how many. ``normref_names``: the notebook's questions' normref references (a
    handed-out part they name is replaced too).

    Raises:
        RuntimeError: an original code object is still alive afterwards (held somewhere the
            seal does not know): the clean room refuses to run.
    """
    import weakref

    dirs = {}
    torch = sys.modules.get("torch")
    if torch_too and torch is not None:
        dirs["torch"] = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    normref = sys.modules.get("normref")
    if normref is not None:
        dirs["normref"] = os.path.dirname(os.path.abspath(normref.__file__)) + os.sep
    names = frozenset(normref_names)
    kept = (tuple(p + "." for p in HANDED_OUT), _constructors())
    originals, count = [], 0
    for fn in gc.get_objects():
        if type(fn) is not types.FunctionType:
            continue
        what = _what(fn.__code__, dirs, names, kept)
        if what is None:
            continue
        old = fn.__code__
        fn.__code__ = _standin_code(old, absent(*what))
        originals.append((weakref.ref(old), what[1]))
        count += 1
    old = fn = None
    gc.collect()
    alive = [name for ref, name in originals if ref() is not None]
    if alive:
        raise RuntimeError(f"the clean room's seal failed: {len(alive)} reference(s) still held "
                           f"({', '.join(alive[:3])})")
    return count


# ------------------------------------------------------------------ 3. nothing brings them back

#: Per machine: (the audit architecture, the system calls refused).
_SYSCALLS = {
    "x86_64": (0xC000003E, {"open": 2, "openat": 257, "openat2": 437, "creat": 85, "execve": 59, "execveat": 322,
                            "open_by_handle_at": 304, "uselib": 134, "io_uring_setup": 425, "io_uring_enter": 426,
                            "io_uring_register": 427, "ptrace": 101, "process_vm_readv": 310,
                            "process_vm_writev": 311}),
    "aarch64": (0xC00000B7, {"openat": 56, "openat2": 437, "execve": 221, "execveat": 281,
                             "open_by_handle_at": 265, "io_uring_setup": 425, "io_uring_enter": 426,
                             "io_uring_register": 427, "ptrace": 117, "process_vm_readv": 270,
                             "process_vm_writev": 271}),
}


def _filter_program(arch: int, numbers: list[int], x32: bool) -> list[tuple[int, int, int, int]]:
    """The classic BPF program: another architecture is killed; a refused call (or, on x86_64,
    any x32 call) fails with EPERM; everything else is allowed."""
    ld_w_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    kill, allow, eperm = 0x80000000, 0x7FFF0000, 0x00050000 | 1
    checks = ([(jge, 0x40000000)] if x32 else []) + [(jeq, n) for n in numbers]
    prog = [(ld_w_abs, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill), (ld_w_abs, 0, 0, 0)]
    for i, (op, k) in enumerate(checks):
        to_eperm = len(checks) - i  # past the remaining checks and the allow
        prog.append((op, to_eperm, 0, k))
    return prog + [(ret, 0, 0, allow), (ret, 0, 0, eperm)]


def no_open_no_exec() -> None:
    """Install the seccomp filter (see the module's doc) in this process (and its future children).

    Raises:
        OSError: this machine's architecture is not known here, or the kernel refused the filter.
    """
    import ctypes
    import platform

    machine = platform.machine()
    if machine not in _SYSCALLS:
        raise OSError(f"the clean room knows no seccomp filter for {machine}")
    arch, calls = _SYSCALLS[machine]
    prog = _filter_program(arch, sorted(calls.values()), machine == "x86_64")

    class Insn(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Insn))]

    insns = (Insn * len(prog))(*[Insn(*p) for p in prog])
    fprog = Prog(len(prog), insns)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(38, 1, None, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(22, 2, ctypes.cast(ctypes.pointer(fprog), ctypes.c_void_p), 0, 0) != 0:  # SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def _refuse(event, args, _refused=_REFUSED_EVENTS, _frozen=_FROZEN_ATTRS, _error=PermissionError):
    # Only its arguments, str's own methods and these defaults (which no one may replace): a
    # student cannot change what it does. Anything it raises refuses the event.
    if event.startswith(_refused) or (event == "object.__setattr__" and len(args) > 1 and args[1] in _frozen):
        raise _error(f"{event} is not available while the grader runs your code")


def seal(*, torch_ops: bool, torch_functions: bool, normref_names=()) -> dict:
    """Make the references absent in this process, for good (the module's doc); returns what was
    done, ``{"ops": n, "functions": m}``.

    Args:
        torch_ops: replace torch's normalization ops (the notebook's questions forbid them).
        torch_functions: replace torch's Python reference implementations too.
        normref_names: the notebook's questions' normref references (``module.qualname``).

    Raises:
        RuntimeError: an original survived (:func:`absent_functions`); OSError: no seccomp.
    """
    import linecache

    torch = sys.modules.get("torch")
    ops = absent_ops(torch) if torch_ops and torch is not None else []
    jit = no_torchscript(torch) if torch_ops and torch is not None else 0
    n = absent_functions(torch_functions, normref_names)
    linecache.clearcache()
    for name in ("last_type", "last_value", "last_traceback"):
        if hasattr(sys, name):
            delattr(sys, name)
    no_open_no_exec()
    sys.addaudithook(_refuse)
    return {"ops": len(ops), "functions": n, "torchscript": jit}


__all__ = ["seal", "ATTEMPTS", "ReferenceAbsent", "absent", "NORM_OP", "HANDED_OUT", "KEPT_NORMREF",
           "TorchScriptAbsent", "no_torchscript"]
