"""The clean room's process: run by path inside the grading sandbox (``python
grader/kernel/cleanroom_box.py``), driven by the grader's worker (:mod:`grader.kernel.cleanroom`) over its
standard input and output.

It imports what the answer's definitions name, seals itself (:mod:`grader.kernel.cleanroom_seal`:
the references absent), then, as the worker asks and in the notebook's order, executes the
answer's definitions and performs each question's calls with the course's own hand-back code
(:func:`normref.handback.run_calls`, :func:`normref.plan.run_plan`), answering with their
records in the hand-back's wire format (:mod:`normref.wire`). An attempt to run an absent
reference during a call is put in that call's record's ``"references"``, in the call recorder's
words (:class:`normref.recorder.ReferenceRecorder`), when the question's rule names it.

The grader's own objects a question hands in (Pre-LN's norm and sublayer, the block's
swapped-in submodules) are not in this process: each is a stand-in (:func:`_proxy`) that carries
its tensors and settings and sends every call to the worker, which runs the grader's object and
answers, for that unit of work only.

Everything here is the student's to change once their code has run: nothing it says is
trusted beyond "these are the outputs the student's code gave" (the worker checks the rest).
"""
from __future__ import annotations

import base64
import builtins
import io
import json
import os
import struct
import sys
import threading
import types

try:
    from . import cleanroom_seal as seal_module
except ImportError:  # run by path, as the sandbox runs it (runpy's run_path, from a warm zygote, too)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cleanroom_seal as seal_module  # type: ignore[no-redef]

    del sys.path[0]

#: Largest message either way (bytes).
MAX_FRAME = 64 * 2**20
#: Seconds one definition may run.
DEFINE_TIMEOUT_S = 10.0
_IO: dict = {}
_RPC_LOCK = threading.Lock()


# ------------------------------------------------------------------ frames

def send(msg: dict) -> None:
    data = json.dumps(msg).encode()
    out = _IO["out"]
    out.write(struct.pack(">I", len(data)) + data)
    out.flush()


def receive() -> dict:
    head = _IO["in"].read(4)
    if len(head) < 4:
        raise EOFError("the worker is gone")
    (n,) = struct.unpack(">I", head)
    if n > MAX_FRAME:
        raise ValueError("message too large")
    return json.loads(_IO["in"].read(n))


def _own_streams() -> None:
    """The protocol on private descriptors; the student's code gets /dev/null as stdin and stdout."""
    _IO["in"] = os.fdopen(os.dup(0), "rb")
    _IO["out"] = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)


# ------------------------------------------------------------------ before the seal

def _block_torch() -> None:
    """A numpy assignment's clean room has no torch: importing it fails with this message."""
    class NoTorch:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError("torch is not available to a numpy assignment's graded code")
            return None

    sys.meta_path.insert(0, NoTorch())


def _preimport(modules: list, names: list) -> None:
    """Import what the definitions import, while files can still be read (errors are the
    definitions' to meet again)."""
    import importlib

    for m in modules:
        try:
            importlib.import_module(m)
        except BaseException:  # noqa: BLE001 - an import that fails here fails in the definitions too
            pass
    for m, name in names:
        try:
            getattr(importlib.import_module(m), name)
        except BaseException:  # noqa: BLE001 - as above
            try:
                importlib.import_module(f"{m}.{name}")
            except BaseException:  # noqa: BLE001 - as above
                pass


def _own_modules(modules: dict):
    """A finder (for ``sys.meta_path``, put there after the seal) of the student's own modules
    handed in beside the notebook (``{name: [source, is_package]}``), from memory (no file is read
    after the seal), each only where no installed module of its top-level name is found (looked
    up now, before the seal): the kernel searches the student's folder last. Their code runs when
    an import needs them, after the seal, as the answer's definitions do. None when none is served."""
    import importlib.abc
    import importlib.util

    tops = {n.split(".")[0] for n in modules}
    installed = {t for t in tops if t in sys.modules or importlib.util.find_spec(t) is not None}
    served = {n: v for n, v in modules.items() if n.split(".")[0] not in installed}
    if not served:
        return None

    class OwnModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path=None, target=None):
            if name not in served:
                return None
            spec = importlib.util.spec_from_loader(name, self, origin=f"{name.replace('.', '/')}.py",
                                                   is_package=bool(served[name][1]))
            if served[name][1]:
                spec.submodule_search_locations = []
            return spec

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            module.__file__ = module.__spec__.origin
            exec(compile(served[module.__name__][0], module.__file__, "exec"), module.__dict__)

    return OwnModules()


def _warm_up(torch) -> None:
    """Run what honest code runs once before the seal: torch reads /proc/cpuinfo and its
    libraries' settings on first use, which the seal would refuse later."""
    x = torch.randn(4, 8)
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        y = x.to(dtype)
        (y * y).mean(-1, keepdim=True).add(1e-6).rsqrt()
        (y @ y.transpose(-2, -1)).softmax(-1).tanh().sqrt().abs().sum()
        y.var(-1, unbiased=False), y.pow(2), torch.cat([y, y]), y.float().exp().log()
    torch.nn.Linear(8, 8)(x).relu()
    torch.nn.functional.silu(x), torch.nn.functional.gelu(x)
    repr(x)
    buf = io.BytesIO()
    torch.save({"x": x, "n": types.SimpleNamespace(t=x)}, buf)
    torch.load(io.BytesIO(buf.getvalue()), weights_only=False)
    from torch import nn

    class Tiny(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, h):
            return h * self.weight

    from normref import plan

    plan.run_plan(Tiny, [{"new": [(8,), {}], "attrs": ["weight"], "load": {"weight": x[0]}, "forward": x,
                          "seeded": True}], {}, {"recorder": Attempts})


def _warm_up_harness() -> None:
    """The hand-back's own path once (numpy arrays, a pickle), before the seal."""
    import pickle

    import numpy as np

    from normref import handback

    x = np.ones((2, 3), dtype=np.float32)
    pickle.loads(pickle.dumps({"x": x}))
    twice = eval("lambda a: a * 2", {})  # noqa: S307 - a function of no module: nothing for import_if_named
    handback.run_calls(twice, [((x,), {}, False)], {}, {"recorder": Attempts})


# ------------------------------------------------------------------ the student's namespace

def _namespace() -> dict:
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, display=lambda *a, **k: None, get_ipython=lambda: None)
    sys.modules["__main__"] = main
    return main.__dict__


def define(ns: dict, statements: list) -> list:
    """Execute each ``[label, source]`` in ``ns`` (one statement each, in order); returns
    ``[[label, error or None]]``."""
    import linecache

    from normref import calling

    out = []
    for i, (label, source) in enumerate(statements):
        filename = f"<{label} #{i}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            code = compile(source, filename, "exec")
            calling.call_with_timeout(exec, (code, ns), {}, DEFINE_TIMEOUT_S)
            out.append([label, None])
        except Exception as e:  # noqa: BLE001 - the student's statement failed: as in the kernel
            out.append([label, f"{type(e).__name__}: {e}"[:300]])
    return out


# ------------------------------------------------------------------ the grader's objects, by proxy

def _rpc(token: str, args: tuple, kwargs: dict):
    from normref.wire import decode, decode_exception, encode

    with _RPC_LOCK:
        send({"rpc": {"token": token, "args": [encode(a) for a in args],
                      "kwargs": {str(k): encode(v) for k, v in kwargs.items()}}})
        reply = receive()
    if "rpc_out" in reply:
        return decode(reply["rpc_out"])
    raise decode_exception(reply.get("rpc_raised") or ["RuntimeError", "the grader's object did not answer"])


def _proxy(marker):
    """The stand-in for one of the grader's objects (``marker``: a ``SimpleNamespace`` with its
    ``normref_handed`` token, ``module`` (an ``nn.Module``?), ``params``, ``buffers``, ``attrs``
    and ``children``, as the worker described it)."""
    token = marker.normref_handed
    if not marker.module:
        obj = type(marker.type_name, (), {"__call__": lambda self, *a, **k: _rpc(token, a, k),
                                          "__repr__": lambda self: f"<the grader's {marker.type_name}>"})()
        for k, v in marker.attrs.items():
            setattr(obj, k, v)
        return obj
    from torch import nn

    cls = type(marker.type_name, (nn.Module,), {"forward": lambda self, *a, **k: _rpc(token, a, k)})
    m = cls()
    for k, v in marker.params.items():
        m.register_parameter(k, nn.Parameter(v, requires_grad=v.is_floating_point()))
    for k, v in marker.buffers.items():
        m.register_buffer(k, v)
    for k, v in marker.children.items():
        m.add_module(k, _proxy(v))
    for k, v in marker.attrs.items():
        if not hasattr(m, k):
            object.__setattr__(m, k, v)
    return m


def _with_proxies(obj, depth: int = 0):
    """``obj`` (decoded inputs) with every marker replaced by its proxy."""
    if isinstance(obj, types.SimpleNamespace) and hasattr(obj, "normref_handed"):
        return _proxy(obj)
    if depth > 6:
        return obj
    if isinstance(obj, list):
        return [_with_proxies(o, depth + 1) for o in obj]
    if isinstance(obj, tuple):
        return tuple(_with_proxies(o, depth + 1) for o in obj)
    if isinstance(obj, dict):
        return {k: _with_proxies(v, depth + 1) for k, v in obj.items()}
    return obj


def _load(text: str):
    raw = base64.b64decode(text)
    if raw.startswith(b"PK\x03\x04"):
        import torch

        return torch.load(io.BytesIO(raw), weights_only=False)
    import pickle

    return pickle.loads(raw)


# ------------------------------------------------------------------ attempts, in the recorder's words

def reported(attempts: list, reference: dict) -> list[str]:
    """What of ``attempts`` (:data:`grader.kernel.cleanroom_seal.ATTEMPTS` during one call) the question
    ``reference`` (:mod:`normref.rules`' dict) counts, in the call recorder's words: torch's ops
    and its reference code when it names torch norms, its own normref references, and any other
    normref code (not a reference module's: those count only when named)."""
    from normref.reference_code import _REFERENCE_MODULES

    torch_names = tuple(reference.get("torch_names", ()))
    normref_names = set(reference.get("normref_names", ()))
    out: list[str] = []
    once: set = set()
    for kind, name in attempts:
        what = None
        if kind == "torch" and any(t in name for t in torch_names):
            what = f"calls torch's {name}"
        elif kind == "torchref" and torch_names and kind not in once:
            what = f"calls torch's reference code {name}"
        elif kind == "normref" and name in normref_names:
            what = f"calls {name}"
        elif kind == "normref" and kind not in once and not name.startswith(tuple(m + "." for m in _REFERENCE_MODULES)):
            what = f"calls the course's own {name}"
        if what is not None:
            once.add(kind)
            if what not in out:
                out.append(what)
    return out


class Attempts:
    """The clean room's call recorder (``sealed["recorder"]`` of :func:`normref.recorder.recorder_for`):
    nothing is watched; what the call attempted of the absent references is read afterwards."""

    def __init__(self, reference, handed_in=()):
        self.reference = dict(reference or {})
        self.found: list[str] = []

    def __enter__(self):
        self._start = len(seal_module.ATTEMPTS)
        return self

    def __exit__(self, *exc):
        self.found = reported(seal_module.ATTEMPTS[self._start:], self.reference)
        return False


# ------------------------------------------------------------------ units of work

def _targets(ns: dict, exprs: list) -> tuple:
    return tuple(eval(compile(e, "<the hidden test>", "eval"), ns) for e in exprs)  # noqa: S307 - the grader's


def run_unit(ns: dict, unit: dict) -> dict:
    """One question (a function's calls) or one case of a class question: its record(s)."""
    from normref import handback, plan
    from normref.wire import encode_exception

    try:
        fn, *_ = _targets(ns, unit["target"])
    except Exception as e:  # noqa: BLE001 - the hidden test would have raised this
        return {"missing": f"{type(e).__name__}: {e}"[:300]}
    inputs = _with_proxies(_load(unit["inputs"]))
    sealed = {"recorder": Attempts}
    reference = inputs.get("reference")
    try:
        if unit["kind"] == "class":
            return {"cases": plan.run_plan(fn, inputs["plan"], reference, sealed, inputs.get("trace"))}
        return {"calls": handback.run_calls(fn, inputs["calls"], reference, sealed, inputs.get("trace"))}
    except Exception as e:  # noqa: BLE001 - e.g. importing torch where there is none: every call raised it
        n = len(inputs.get("plan" if unit["kind"] == "class" else "calls") or ())
        return {"calls": [{"raised": encode_exception(e)} for _ in range(n)]} if unit["kind"] != "class" else \
            {"cases": [{"new": {"raised": encode_exception(e)}} for _ in range(n)]}


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.modules.pop("cleanroom_seal", None)  # kept as seal_module; not the student's to import
    _own_streams()
    setup = receive().get("setup", {})
    if os.environ.get("NORMREF_NPROC_RLIMIT") == "1":  # no pids cgroup: capped in this sandbox's user namespace
        import resource

        n = int(os.environ.get("NORMREF_MAX_PROCS", "64"))
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
    try:
        if not setup.get("torch"):
            _block_torch()
        own = ["linecache", "pickle", "normref.calling", "normref.handback", "normref.plan", "normref.wire",
               "normref.reference_code", *(["torch"] if setup.get("torch") else [])]
        _preimport(own + list(setup.get("preimport", [])), setup.get("preimport_names", []))
        _warm_up_harness()
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(1)
            _warm_up(torch)
        own = _own_modules(setup.get("modules") or {})
        info = seal_module.seal(torch_ops=bool(setup.get("torch_ops")), torch_functions=bool(setup.get("torch_ops")),
                                normref_names=setup.get("normref_names", ()))
    except BaseException as e:  # noqa: BLE001 - told to the worker: nothing is graded here
        import traceback

        traceback.print_exc()
        send({"refused": f"{type(e).__name__}: {e}"[:500]})
        return 1
    send({"sealed": info})
    if own is not None:
        sys.meta_path.insert(0, own)
    ns = _namespace()
    while True:
        try:
            msg = receive()
        except (EOFError, ValueError):
            return 0
        if "define" in msg:
            send({"defined": define(ns, msg["define"])})
        elif "unit" in msg:
            send({"result": run_unit(ns, msg["unit"])})
        else:
            return 0


if __name__ == "__main__":
    sys.exit(main())
