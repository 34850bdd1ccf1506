"""The hand-back's wire format, both directions, in one place: what the grader sends a grading
kernel (a question's inputs) and what the kernel sends back (the student's outputs), each
encoder beside its decoder.

* **grader -> kernel**: a question's inputs (:func:`dump_inputs`, :func:`load_inputs`): the
  calls its checker makes, or a class question's plan, serialized as text (base64) that the
  autograde preprocessor writes into the hidden test's source just before it runs
  (``HandbackInputs`` in ``nbgrader_config.py``); a pickle for a numpy or short-answer question
  (its kernel reads it without importing torch), else ``torch.save``'s archive.
* **kernel -> grader**: JSON, never a pickle: arrays and tensors as ``.npy`` with their dtype
  and shape (:func:`encode`, :func:`decode`), exceptions as ``[type name, message]``
  (:func:`encode_exception`, :func:`decode_exception`), a built module's report
  (:func:`report_module`, :func:`decode_report`), short answers (:func:`encode_answer`,
  :func:`decode_answer`). One display output of MIME type :data:`MIME` carries it.

Also here: :func:`snapshot` and :func:`unchanged`, how a call's array inputs are compared before
and after (the ``"after"`` of a record; the self-check's "modifies its input").

Imports numpy and :mod:`normref._torch` only: a numpy kernel encodes without torch; decoding a
tensor imports it.
"""
from __future__ import annotations

import base64
import builtins
import io

import numpy as np

from ._syntax import PARSE_LOCK
from ._torch import is_tensor, loaded

#: MIME type of the one output a hidden test shows.
MIME = "application/vnd.normref.handback+json"
#: Largest array handed back (elements); the graded inputs are tiny.
MAX_ELEMENTS = 1 << 16
#: Attributes reported after a class is constructed, at most (their names come from the grader).
MAX_REPORTED = 64
#: How :func:`torch.save` archives start (a zip file).
_ZIP = b"PK\x03\x04"


# ------------------------------------------------------------------ grader -> kernel: the inputs

def dump_inputs(data: dict, torch_free: bool) -> str:
    """A question's inputs as text (base64), for the grader to write into its hidden test.

    Args:
        data: ``{"calls": [(args, kwargs, grad enabled)], "public": ..., "reference": ...}``
            (a function), ``{"kind": "class", "plan": [...], ...}`` or ``{"kind": "values"}``.
        torch_free: a numpy or short-answer question: a pickle (arrays and Python values, which
            its kernel reads without importing torch); else ``torch.save``'s archive (tensors,
            modules).
    """
    if torch_free:
        import pickle

        raw = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
    else:
        import torch

        buf = io.BytesIO()
        torch.save(data, buf)
        raw = buf.getvalue()
    return base64.b64encode(raw).decode("ascii")


def needs_torch(text: str) -> bool:
    """Does reading these inputs (:func:`dump_inputs`' text) need torch? A ``torch.save`` archive
    does; a numpy or short-answer question's pickle does not."""
    return base64.b64decode(text[:8]).startswith(_ZIP)


def load_inputs(text: str) -> dict:
    """What :func:`dump_inputs` wrote: ``torch.load`` for a ``torch.save`` archive, else
    ``pickle.loads`` (no torch import). Written by the grader only, into the hidden test's
    source (an answer cell cannot write it).

    Raises:
        ValueError: ``text`` is not base64; what ``pickle``/``torch.load`` raise for other bytes.
    """
    data = base64.b64decode(text, validate=True)
    if data.startswith(_ZIP):
        import torch

        return torch.load(io.BytesIO(data), weights_only=False)
    import pickle

    return pickle.loads(data)


# ------------------------------------------------------------------ kernel -> grader: values

def _npy(a: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _from_npy(s: str) -> np.ndarray:
    """The array of ``.npy`` bytes (base64) that :func:`_npy` wrote, read only when its header
    announces what the encoder sends (at most :data:`MAX_ELEMENTS` values, no objects) and its
    bytes hold them: a forged header announcing petabytes allocates nothing.

    Raises:
        ValueError: not ``.npy`` bytes, or a header that is not the encoder's.
    """
    raw = base64.b64decode(s)
    f = io.BytesIO(raw)
    # the header is parsed with ast.literal_eval: one thread at a time (normref._syntax)
    with PARSE_LOCK:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(f)
        n = 1
        for d in shape:
            n *= int(d)
        if dtype.hasobject or n > MAX_ELEMENTS or n * dtype.itemsize > len(raw) - f.tell():
            raise ValueError(f"an array of {n} values of {dtype} is not what the hand-back sends")
        return np.load(io.BytesIO(raw), allow_pickle=False)


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


def opaque(type_name: str):
    """A stand-in for an object that travelled by its type name only (its ``repr`` is ``<name>``)."""
    name = type_name if str(type_name).isidentifier() else "object"
    return type(name, (), {"__repr__": lambda self: f"<{name}>"})()


def decode(d: dict):
    """The inverse of :func:`encode` (no pickles: ``.npy`` and JSON only).

    Raises:
        ValueError: an unknown torch dtype, or ``.npy`` bytes numpy cannot read.
    """
    t = d.get("t")
    if t == "torch":
        import torch

        dtype = getattr(torch, str(d.get("dtype")), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown dtype {d.get('dtype')!r}")
        return torch.from_numpy(np.array(_from_npy(d["npy"]))).to(dtype)
    if t == "numpy":
        return _from_npy(d["npy"])
    if t == "seq":
        items = [decode(i) for i in d.get("items", [])][:16]
        return list(items) if d.get("type") == "list" else tuple(items)
    if t == "py":
        v = d.get("value")
        return v if v is None or isinstance(v, (bool, int, float)) else opaque(type(v).__name__)
    return opaque(d.get("type", "object"))


def encode_exception(e: BaseException) -> list[str]:
    """``[type name, message]`` of the student's exception (cut at 80 and 500 characters)."""
    return [type(e).__name__[:80], str(e)[:500]]


def decode_exception(raised) -> Exception:
    """The exception :func:`encode_exception` described: a builtin exception class by its name,
    else a new ``Exception`` subclass of that name, with the message."""
    name, message = (list(raised) + ["", ""])[:2]
    name, message = str(name), str(message)
    cls = getattr(builtins, name, None) if name.isidentifier() else None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = type(name if name.isidentifier() else "Error", (Exception,), {})
    try:
        return cls(message)
    except Exception:  # noqa: BLE001 - an exception class with odd arguments
        return RuntimeError(f"{name}: {message}")


# ------------------------------------------------------------------ a built module (class questions)

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


def report_module(m, attrs) -> dict:
    """The built module as the grader sees it: ``{"params": named_parameters names (or
    {"raised": ...}), "attrs": {name: description}}`` for the attribute names ``attrs``
    (at most :data:`MAX_REPORTED` of each)."""
    names = []
    try:
        for name, _ in m.named_parameters():
            names.append(str(name)[:200])
            if len(names) >= MAX_REPORTED:
                break
    except Exception as e:  # noqa: BLE001 - the student's module may break named_parameters
        names = {"raised": encode_exception(e)}
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


def decode_report(report: dict, names, part) -> dict:
    """The attributes ``names`` of a module as :func:`report_module` described them, in order:
    ``{name: object}``: a tensor (an ``nn.Parameter`` when it was one), ``part(name)`` for a
    submodule or callable, the same object as an earlier attribute, an :func:`opaque` stand-in
    for anything else; an absent one is left out."""
    import torch
    from torch import nn

    attrs = report.get("attrs") if isinstance(report, dict) and isinstance(report.get("attrs"), dict) else {}
    objects: dict = {}
    for name in names or ():
        d = attrs.get(name)
        if not isinstance(d, dict) or d.get("kind") in (None, "absent"):
            continue
        kind = d["kind"]
        if kind == "same":
            obj = objects.get(str(d.get("as")))
        elif kind == "tensor":
            try:
                t = decode(d.get("value", {}))
            except (ValueError, TypeError, KeyError):
                t = None
            if not isinstance(t, torch.Tensor):
                obj = opaque("Tensor")
            elif d.get("param"):
                obj = nn.Parameter(t, requires_grad=t.is_floating_point())
            else:
                obj = t
        elif kind in ("module", "callable"):
            obj = part(name)
        else:
            obj = opaque(d.get("type", "object"))
        if obj is not None:
            objects[name] = obj
    return objects


# ------------------------------------------------------------------ short answers

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


class Shown:
    """A short answer of a type the kernel hands back only as text (and a number, if it is one)."""

    def __init__(self, text: str, number: float | None):
        self.text, self.number = text, number

    def __repr__(self) -> str:
        return self.text

    def __array__(self, dtype=None, copy=None):
        if self.number is None:
            raise TypeError(f"{self.text} is not a number")
        return np.asarray(self.number, dtype=dtype)


def decode_answer(d: dict, depth: int = 0):
    """The inverse of :func:`encode_answer` (JSON and ``.npy`` only): the answer as the checker
    would have seen it in the kernel; an object of another type comes back as its text (and
    number), a :class:`Shown` under its type's name."""
    t = d.get("t") if isinstance(d, dict) else None
    if t == "py":
        v = d.get("value")
        return v if v is None or isinstance(v, (bool, int, float)) else opaque(type(v).__name__)
    if t == "float":
        return float(str(d.get("repr"))) if str(d.get("repr")) in ("nan", "inf", "-inf") else float("nan")
    if t == "str":
        return str(d.get("value", ""))
    if t == "ellipsis":
        return Ellipsis
    if t == "seq" and depth < 3:
        items = [decode_answer(i, depth + 1) for i in list(d.get("items", []))[:64]]
        if d.get("type") == "Size":
            import torch

            try:
                return torch.Size(items)
            except (TypeError, ValueError):
                return tuple(items)
        return items if d.get("type") == "list" else tuple(items)
    if t == "npscalar":
        return _from_npy(d["npy"])[()]
    if t in ("torch", "numpy"):
        return decode(d)
    if t == "repr":
        name = d.get("type") if str(d.get("type")).isidentifier() else "object"
        number = d.get("number") if isinstance(d.get("number"), (int, float)) else None
        return type(name, (Shown,), {})(str(d.get("repr", ""))[:500], number)
    return opaque(d.get("type", "object") if isinstance(d, dict) else "object")


# ------------------------------------------------------------------ inputs before and after a call

def snapshot(a):
    """A copy of a call's input to compare with afterwards (:func:`unchanged`): a tensor's
    ``clone``, a numpy array's copy; any other object as it is (only arrays are compared)."""
    if is_tensor(a):
        return a.clone()
    if isinstance(a, np.ndarray):
        return np.array(a, copy=True)
    return a


def unchanged(a, before) -> bool:
    """Does input ``a`` still equal its :func:`snapshot` ``before`` (NaNs equal for numpy)?
    True for anything that is not an array or a tensor."""
    if is_tensor(a):
        return bool(loaded().equal(a, before))
    if isinstance(a, np.ndarray):
        return bool(np.array_equal(a, before, equal_nan=True))
    return True


__all__ = ["MIME", "MAX_ELEMENTS", "MAX_REPORTED", "dump_inputs", "load_inputs", "encode", "decode", "opaque",
           "encode_exception", "decode_exception", "report_module", "decode_report", "encode_answer",
           "decode_answer", "Shown", "snapshot", "unchanged"]
