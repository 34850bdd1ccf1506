"""The tensor stand-in of tracing (:mod:`.trace`): :class:`Sym` carries the real tensor (every
shape, dtype, broadcast and error is the real one) and the formula that gave it (:mod:`.expr`).

Sums, scalar multiples, elementwise products and powers, matrix products, transposes and
permutations, casts (recorded: ``Sym.log.casts``), and the elementwise and reducing functions of
torch a student uses (``torch.tanh``, ``torch.add``, ``torch.einsum`` of a batched matrix
product, ``x.mean(dim=-1)``, ...) are followed, through the operators and
``__torch_function__``; anything else (indexing, a real tensor that is not one number, branching
on a value, another function) raises :class:`Untraceable`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import expr as E

__all__ = ["Sym", "Untraceable"]

class Untraceable(Exception):
    """The answer did something the stand-ins do not follow."""


def _torch():
    import torch

    return torch


_FLOAT_NAMES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64"}


@dataclass
class _Log:
    """What one trace saw: the casts (``(where, from dtype, to dtype)``)."""

    casts: list = field(default_factory=list)


class Sym:
    """A tensor stand-in: ``value`` (the real tensor) and ``expr`` (its formula)."""

    __slots__ = ("value", "expr", "log")

    def __init__(self, value, expr: E.Expr, log: _Log):
        self.value, self.expr, self.log = value, expr, log

    # ------------------------------------------------------------------ what code reads
    @property
    def shape(self):
        return self.value.shape

    @property
    def dtype(self):
        return self.value.dtype

    @property
    def device(self):
        return self.value.device

    @property
    def ndim(self):
        return self.value.ndim

    @property
    def requires_grad(self):
        return False

    @property
    def is_cuda(self):
        return False

    def size(self, *a):
        return self.value.size(*a)

    def dim(self):
        return self.value.dim()

    def numel(self):
        return self.value.numel()

    def is_floating_point(self):
        return self.value.is_floating_point()

    def __len__(self):
        return len(self.value)

    def __bool__(self):
        raise Untraceable("the code branches on a tensor's value")

    def __float__(self):
        raise Untraceable("the code reads a tensor's value")

    __int__ = __index__ = __float__

    def item(self):
        raise Untraceable("the code reads a tensor's value")

    def __array__(self, *a, **k):
        raise Untraceable("the code turns a tensor into numpy")

    def __getitem__(self, idx):
        if idx is Ellipsis or idx == slice(None) or (isinstance(idx, tuple) and all(
                i is Ellipsis or i == slice(None) for i in idx)):
            return self
        raise Untraceable("the code indexes a tensor")

    def __repr__(self) -> str:
        return f"Sym({E.render(self.expr)})"

    # ------------------------------------------------------------------ arithmetic
    def _new(self, value, expr):
        return Sym(value, expr, self.log)

    def __add__(self, o):
        return _binary("add", self, o)

    def __radd__(self, o):
        return _binary("add", o, self)

    def __sub__(self, o):
        return _binary("sub", self, o)

    def __rsub__(self, o):
        return _binary("sub", o, self)

    def __mul__(self, o):
        return _binary("mul", self, o)

    def __rmul__(self, o):
        return _binary("mul", o, self)

    def __truediv__(self, o):
        return _binary("div", self, o)

    def __rtruediv__(self, o):
        return _binary("div", o, self)

    def __matmul__(self, o):
        return _binary("matmul", self, o)

    def __rmatmul__(self, o):
        return _binary("matmul", o, self)

    def __pow__(self, p):
        return _pow(self, p)

    def __neg__(self):
        return self._new(-self.value, E.scale(self.expr, -1.0))

    def __pos__(self):
        return self

    # ------------------------------------------------------------------ methods
    def add(self, o, alpha=1):
        return _binary("add", self, o * alpha if alpha != 1 else o)

    def sub(self, o, alpha=1):
        return _binary("sub", self, o * alpha if alpha != 1 else o)

    def mul(self, o):
        return _binary("mul", self, o)

    def div(self, o):
        return _binary("div", self, o)

    multiply, divide, subtract = mul, div, sub

    def matmul(self, o):
        return _binary("matmul", self, o)

    def pow(self, p):
        return _pow(self, p)

    def square(self):
        return _pow(self, 2)

    def sqrt(self):
        return _pow(self, 0.5)

    def rsqrt(self):
        return _pow(self, -0.5)

    def reciprocal(self):
        return _pow(self, -1)

    def abs(self):
        return _unary("abs", self)

    def exp(self):
        return _unary("exp", self)

    def tanh(self):
        return _unary("tanh", self)

    def sigmoid(self):
        return _unary("sigmoid", self)

    def relu(self):
        return _unary("relu", self)

    def softmax(self, dim, *a, **k):
        return _softmax(self, dim)

    def clamp(self, min=None, max=None):
        return _clamp(self, min, max)

    clip = clamp

    def mean(self, dim=None, keepdim=False, **k):
        return _reduce("mean", self, dim, keepdim, **k)

    def sum(self, dim=None, keepdim=False, **k):
        return _reduce("sum", self, dim, keepdim, **k)

    def var(self, dim=None, unbiased=True, keepdim=False, **k):
        return _reduce("var", self, dim, keepdim, unbiased=unbiased, **k)

    def std(self, dim=None, unbiased=True, keepdim=False, **k):
        return _reduce("std", self, dim, keepdim, unbiased=unbiased, **k)

    def amax(self, dim=None, keepdim=False):
        return _reduce("amax", self, dim, keepdim)

    def norm(self, p="fro", dim=None, keepdim=False, **k):
        return _reduce("norm", self, dim, keepdim)

    # casts
    def float(self):
        return _cast(self, "float")

    def half(self):
        return _cast(self, "half")

    def bfloat16(self):
        return _cast(self, "bfloat16")

    def double(self):
        return _cast(self, "double")

    def to(self, *a, **k):
        a = tuple(x.value if isinstance(x, Sym) else x for x in a)
        return _cast(self, "to", a, k)

    def type(self, *a, **k):
        if not a and not k:
            return self.value.type()
        return _cast(self, "type", a, k)

    def type_as(self, o):
        return _cast(self, "type_as", (o.value if isinstance(o, Sym) else o,), {})

    def clone(self, *a, **k):
        return self

    contiguous = detach = cpu = clone

    def requires_grad_(self, *a, **k):
        return self

    # axes
    def transpose(self, i, j):
        return _transpose(self, i, j)

    swapaxes = swapdims = transpose

    def t(self):
        return _transpose(self, 0, 1)

    @property
    def T(self):  # noqa: N802 - torch's name
        perm = tuple(reversed(range(self.ndim)))
        return _permute(self, perm)

    @property
    def mT(self):  # noqa: N802 - torch's name
        return _transpose(self, -2, -1)

    def permute(self, *dims):
        dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        return _permute(self, dims)

    def view_as(self, o):
        if tuple(o.shape) == tuple(self.shape):
            return self
        raise Untraceable("the code reshapes a tensor")

    def reshape(self, *shape):
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        if tuple(shape) == tuple(self.shape):
            return self
        raise Untraceable("the code reshapes a tensor")

    view = reshape

    @classmethod
    def __torch_function__(cls, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = _TORCH_FUNCTIONS.get(getattr(func, "__name__", ""))
        if handler is None:
            raise Untraceable(f"the code calls {getattr(func, '__name__', func)}")
        return handler(*args, **kwargs)


# --------------------------------------------------------------------------- the operations


def _log_of(*xs) -> _Log:
    return next(x.log for x in xs if isinstance(x, Sym))


def _operand(o) -> tuple[object, E.Expr | float]:
    """``(value, formula or number)`` of an operand: a Sym, a Python number or a one-element
    tensor (a number); any other tensor is not followed."""
    torch = _torch()
    if isinstance(o, Sym):
        return o.value, o.expr
    if isinstance(o, bool):
        raise Untraceable("a boolean operand")
    if isinstance(o, (int, float)):
        return o, float(o)
    if isinstance(o, torch.Tensor) and o.numel() == 1:
        return o, float(o.detach().double().reshape(()))
    raise Untraceable("a tensor that is not an input enters the formula")


def _binary(op: str, a, b) -> Sym:
    torch = _torch()
    va, ea = _operand(a)
    vb, eb = _operand(b)
    log = _log_of(a, b)
    value = {"add": lambda: va + vb, "sub": lambda: va - vb, "mul": lambda: va * vb,
             "div": lambda: va / vb, "matmul": lambda: torch.matmul(va, vb)}[op]()
    if isinstance(ea, float) and isinstance(eb, float):  # pragma: no cover - one side is a Sym
        raise Untraceable("no formula")
    if op == "matmul":
        if isinstance(ea, float) or isinstance(eb, float):
            raise Untraceable("matmul with a number")
        return Sym(value, E.matmul(ea, eb), log)
    if op in ("add", "sub"):
        s = 1.0 if op == "add" else -1.0
        ea = E.scale(E.ONE, ea) if isinstance(ea, float) else ea
        eb = E.scale(E.ONE, eb) if isinstance(eb, float) else eb
        return Sym(value, E.add(ea, eb, coeffs=[1.0, s]), log)
    if op == "mul":
        if isinstance(ea, float):
            return Sym(value, E.scale(eb, ea), log)
        if isinstance(eb, float):
            return Sym(value, E.scale(ea, eb), log)
        return Sym(value, E.mul(ea, eb), log)
    # div
    if isinstance(eb, float):
        if eb == 0:
            raise Untraceable("division by zero")
        return Sym(value, E.scale(ea, 1.0 / eb), log)
    inv = E.power(eb, -1.0)
    return Sym(value, E.scale(inv, ea) if isinstance(ea, float) else E.mul(ea, inv), log)


def _pow(a: Sym, p) -> Sym:
    if isinstance(p, Sym):
        raise Untraceable("a tensor exponent")
    _, pe = _operand(p)
    return a._new(a.value ** p, E.power(a.expr, float(pe)))


def _unary(fn: str, a: Sym, params: str = "", value=None) -> Sym:
    torch = _torch()
    if not isinstance(a, Sym):
        raise Untraceable("a function of a constant")
    v = value if value is not None else getattr(torch, fn)(a.value)
    return a._new(v, E.Call(fn, a.expr, params))


def _dim_words(dim) -> str:
    if dim is None:
        return ""
    return f"dim={tuple(dim) if isinstance(dim, (list, tuple)) else dim}"


def _softmax(a: Sym, dim, *rest, **k) -> Sym:
    torch = _torch()
    return _unary("softmax", a, _dim_words(dim), torch.softmax(a.value, dim))


def _clamp(a: Sym, lo=None, hi=None, **k) -> Sym:
    lo = k.get("min", lo)
    hi = k.get("max", hi)
    return _unary("clamp", a, f"{lo:g}, {hi:g}" if lo is not None and hi is not None else "", a.value.clamp(lo, hi))


def _reduce(fn: str, a: Sym, dim=None, keepdim=False, **k) -> Sym:
    if not isinstance(a, Sym):
        raise Untraceable("a reduction of a constant")
    v = a.value
    extra = {kk: vv for kk, vv in k.items() if kk in ("unbiased", "correction")}
    if fn == "norm":
        value = v.norm(dim=dim, keepdim=keepdim)
    elif fn == "amax":
        value = v.amax(dim=() if dim is None else dim, keepdim=keepdim)
    elif dim is None:
        value = getattr(v, fn)(**extra)
    else:
        value = getattr(v, fn)(dim=dim, keepdim=keepdim, **extra)
    words = _dim_words(dim)
    if extra.get("unbiased") is False or extra.get("correction") == 0:
        words += ", unbiased=False"
    return a._new(value, E.Call(fn, a.expr, words.lstrip(", ")))


def _cast(a: Sym, how: str, args=(), kwargs=None) -> Sym:
    kwargs = kwargs or {}
    before = a.value.dtype
    if how in _FLOAT_NAMES:
        value = getattr(a.value, how)()
        where = f".{how}()"
    else:
        value = getattr(a.value, how)(*args, **kwargs)
        where = f".{how}(...)"
    if value.dtype != before:
        a.log.casts.append((where, str(before).replace("torch.", ""), str(value.dtype).replace("torch.", "")))
    return a._new(value, a.expr)


def _axis(i: int, n: int) -> int:
    return i if i < 0 else i - n


def _transpose(a: Sym, i: int, j: int) -> Sym:
    n = a.ndim
    value = a.value.transpose(i, j)
    ii, jj = sorted((_axis(i, n), _axis(j, n)))
    if ii == jj:
        return a
    if (ii, jj) == (-2, -1):
        return a._new(value, E.transpose(a.expr))
    return a._new(value, E.permute(a.expr, (f"swap{ii},{jj}",)))


def _permute(a: Sym, dims: tuple) -> Sym:
    n = a.ndim
    value = a.value.permute(*dims)
    rel = tuple(_axis(d, n) for d in dims)
    ident = tuple(range(-n, 0))
    if rel == ident:
        return a
    swapped = ident[:-2] + (-1, -2)
    if rel == swapped:
        return a._new(value, E.transpose(a.expr))
    return a._new(value, E.permute(a.expr, rel))


def _einsum(spec: str, *ops):
    """``torch.einsum`` of two operands whose result is ``a @ b`` or ``a @ b^T`` (batch axes
    ``...`` or named), else not followed."""
    torch = _torch()
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = tuple(ops[0])
    if len(ops) != 2:
        raise Untraceable("einsum of other than two operands")
    a, b = ops
    if not (isinstance(a, Sym) and isinstance(b, Sym)):
        raise Untraceable("einsum of a constant")
    value = torch.einsum(spec, a.value, b.value)
    s = spec.replace(" ", "")
    lhs, out = s.split("->")
    sa, sb = lhs.split(",")
    if len(sa) < 2 or len(sb) < 2 or len(out) < 2 or sa[:-2] != sb[:-2] or out[:-2] != sa[:-2]:
        raise Untraceable("an einsum that is not a batched matrix product")
    i, k1 = sa[-2:]
    x1, x2 = sb[-2:]
    o1, o2 = out[-2:]
    if (o1, o2) == (i, x1) and k1 == x2 and i != x1:  # a[..., i, k] b[..., j, k] -> [..., i, j]
        return a._new(value, E.matmul(a.expr, E.transpose(b.expr)))
    if (o1, o2) == (i, x2) and k1 == x1:  # a[..., i, k] b[..., k, j] -> [..., i, j]
        return a._new(value, E.matmul(a.expr, b.expr))
    raise Untraceable("an einsum that is not a batched matrix product")


def _fn(name: str):
    def handler(a, *rest, **k):
        return _unary(name, a)

    return handler


def _t_sqrt(a, *r, **k):
    return _pow(a, 0.5)


def _t_rsqrt(a, *r, **k):
    return _pow(a, -0.5)


_TORCH_FUNCTIONS: dict[str, Callable] = {
    "add": lambda a, b, alpha=1, **k: _binary("add", a, b if alpha == 1 else b * alpha),
    "sub": lambda a, b, alpha=1, **k: _binary("sub", a, b if alpha == 1 else b * alpha),
    "subtract": lambda a, b, alpha=1, **k: _binary("sub", a, b if alpha == 1 else b * alpha),
    "mul": lambda a, b, **k: _binary("mul", a, b), "multiply": lambda a, b, **k: _binary("mul", a, b),
    "div": lambda a, b, **k: _binary("div", a, b), "divide": lambda a, b, **k: _binary("div", a, b),
    "true_divide": lambda a, b, **k: _binary("div", a, b),
    "matmul": lambda a, b, **k: _binary("matmul", a, b), "bmm": lambda a, b, **k: _binary("matmul", a, b),
    "pow": lambda a, p, **k: _pow(a, p), "square": lambda a, **k: _pow(a, 2),
    "sqrt": _t_sqrt, "rsqrt": _t_rsqrt, "reciprocal": lambda a, **k: _pow(a, -1),
    "tanh": _fn("tanh"), "sigmoid": _fn("sigmoid"), "exp": _fn("exp"), "abs": _fn("abs"),
    "relu": _fn("relu"), "neg": lambda a, **k: -a, "negative": lambda a, **k: -a,
    "softmax": lambda a, dim=None, *r, **k: _softmax(a, dim),
    "clamp": lambda a, min=None, max=None, **k: _clamp(a, min, max),
    "clip": lambda a, min=None, max=None, **k: _clamp(a, min, max),
    "hardtanh": lambda a, min_val=-1.0, max_val=1.0, **k: _clamp(a, min_val, max_val),
    "mean": lambda a, dim=None, keepdim=False, **k: _reduce("mean", a, dim, keepdim, **k),
    "sum": lambda a, dim=None, keepdim=False, **k: _reduce("sum", a, dim, keepdim, **k),
    "var": lambda a, dim=None, unbiased=True, keepdim=False, **k: _reduce("var", a, dim, keepdim,
                                                                          unbiased=unbiased, **k),
    "std": lambda a, dim=None, unbiased=True, keepdim=False, **k: _reduce("std", a, dim, keepdim,
                                                                          unbiased=unbiased, **k),
    "amax": lambda a, dim=None, keepdim=False, **k: _reduce("amax", a, dim, keepdim),
    "norm": lambda a, p="fro", dim=None, keepdim=False, **k: _reduce("norm", a, dim, keepdim),
    "transpose": lambda a, i, j: _transpose(a, i, j), "swapaxes": lambda a, i, j: _transpose(a, i, j),
    "permute": lambda a, dims: _permute(a, tuple(dims)), "einsum": _einsum,
    "clone": lambda a, **k: a, "detach": lambda a, **k: a,
    # a real tensor's operator with a stand-in on the other side (torch dispatches it here)
    "__add__": lambda a, b: _binary("add", a, b), "__radd__": lambda a, b: _binary("add", b, a),
    "__sub__": lambda a, b: _binary("sub", a, b), "__rsub__": lambda a, b: _binary("sub", b, a),
    "__mul__": lambda a, b: _binary("mul", a, b), "__rmul__": lambda a, b: _binary("mul", b, a),
    "__truediv__": lambda a, b: _binary("div", a, b), "__rtruediv__": lambda a, b: _binary("div", b, a),
    "__matmul__": lambda a, b: _binary("matmul", a, b), "__rmatmul__": lambda a, b: _binary("matmul", b, a),
}
