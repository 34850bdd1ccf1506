"""The course's reference functions by their code objects: how the call recorder
(:class:`normref.recorder.ReferenceRecorder`) knows that a student's code ran one, whatever name
reached it, and a copy of one (the same code compiled again, ``code.replace(...)``) by its
fingerprint.

Read from the modules as they are when the grading kernel is sealed (:func:`normref.handback.seal`),
before any student cell runs; the modules that import torch are known, in a kernel without
torch, from their source compiled (never run).
"""
from __future__ import annotations

import os
import sys

from ._torch import loaded

#: Results kept per process (a module's fingerprints from its source).
_CACHE: dict = {}
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
    reads them before any student cell runs, :func:`normref.handback.seal`).

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


__all__ = ["reference_codes", "code_print", "reference_prints", "source_prints"]
