"""torch as this process has it: without importing it.

``import normref`` and the numpy-only assignments' kernels (layernorm, layernorm_backward,
practice) do not import torch (1.5-4 s per kernel). Code that only asks "is this a tensor?" asks
:func:`is_tensor`: no object can be a tensor before torch is imported, so the question needs no
import. Code that computes with torch imports it where it does (``import torch`` in the function).
"""
from __future__ import annotations

import sys

_DIR: list[str] = []


def loaded():
    """The ``torch`` module if this process has imported it (fully), else None."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(getattr(torch, "Tensor", None), type):
        return None  # not imported, or still being imported
    return torch


def is_tensor(x) -> bool:
    """``isinstance(x, torch.Tensor)``, False without importing torch when it is not loaded."""
    torch = loaded()
    return torch is not None and isinstance(x, torch.Tensor)


def directory() -> str:
    """torch's package folder (with a trailing separator), found without importing torch; kept
    from the first call (the grading kernel's seal makes it before any student cell runs)."""
    if not _DIR:
        import importlib.util
        import os

        torch = loaded()
        if torch is not None:
            where = os.path.dirname(os.path.abspath(torch.__file__))
        else:
            spec = importlib.util.find_spec("torch")
            locations = list(spec.submodule_search_locations or []) if spec is not None else []
            where = os.path.abspath(locations[0]) if locations else os.path.join(sys.prefix, "torch")
        _DIR.append(where + os.sep)
    return _DIR[0]


def import_if_named(*objs) -> None:
    """Import torch now if the code of ``objs`` (functions, classes, their nested functions and
    the functions of the notebook they are defined in) names ``torch``: a numpy answer that
    imports torch inside its body then does not pay for the import inside a timed, recorded
    call (5 s, normref.checks.core.CALL_TIMEOUT_S). Anything else is left to import torch
    itself, and the recorder follows it (normref.recorder.ReferenceRecorder)."""
    if loaded() is not None:
        return
    import types

    seen: set = set()
    todo: list = []

    def add(o, depth=0):
        if id(o) in seen or depth > 2 or str(getattr(o, "__module__", "")).split(".")[0] == "normref":
            return  # the course's own code imports torch itself where it computes with it
        seen.add(id(o))
        f = getattr(o, "__func__", o)
        if isinstance(f, types.FunctionType):
            todo.append(f.__code__)
            if depth == 0:  # the helpers it may call: the other functions of its notebook
                for v in list(getattr(f, "__globals__", {}).values()):
                    if getattr(v, "__module__", None) == f.__module__ and (
                            isinstance(v, (types.FunctionType, type))):
                        add(v, depth + 1)
        elif isinstance(o, type):
            for v in list(vars(o).values()):
                add(v, depth)
        elif isinstance(o, property):
            for g in (o.fget, o.fset):
                if g is not None:
                    add(g, depth)

    for o in objs:
        add(o)
        if not isinstance(o, (type, types.FunctionType, types.MethodType)):
            add(type(o))
    codes: set = set()
    while todo:
        c = todo.pop()
        if c in codes:
            continue
        codes.add(c)
        if any(n.split(".")[0] == "torch" for n in c.co_names) or any(
                isinstance(k, str) and k.split(".")[0] == "torch" for k in c.co_consts):
            import torch  # noqa: F401 - what the answer will import anyway

            return
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
