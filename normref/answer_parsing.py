"""Reading a student's short answer (:mod:`normref.answers`): numbers, vectors, yes/no, shapes,
axes and Pre-LN formulas, each parsed tolerantly from what a student types (``"2/3"``,
``"sqrt(12.5)"``, ``"(-1, 0, 1)"``, ``torch.Size([2, 3, 1])``, ``"last"``, ``"X + Attn(LN(X))"``
...). Anything else raises :class:`AnswerFormatError`, whose message says what form is expected;
the checkers turn it into a failing case. The accepted forms are listed in :mod:`normref.answers`,
which re-exports every name here.
"""
from __future__ import annotations

import ast
import math
import operator
import re

import numpy as np

from ._syntax import parse

__all__ = ["AnswerFormatError", "SUBLAYER_KINDS", "parse_number", "parse_vector", "parse_yes_no", "parse_shape",
           "parse_axis", "parse_formula", "refuse_float_axis"]


class AnswerFormatError(ValueError):
    """An answer could not be parsed; the message says what form is expected."""


# --------------------------------------------------------------------------- parsing

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_FUNCS = {"sqrt": math.sqrt}


def _eval_arith(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval_arith(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval_arith(node.left), _eval_arith(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise AnswerFormatError("exponent too large")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval_arith(node.operand))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in _FUNCS and len(node.args) == 1 and not node.keywords:
        return _FUNCS[node.func.id](_eval_arith(node.args[0]))
    raise AnswerFormatError("only numbers, + - * / **, parentheses and sqrt(...) are understood")


def _clean_number_text(s: str) -> str:
    s = s.strip().lower()
    s = re.sub(r"^(about|approx\.?|approximately|roughly)\s+", "", s)
    s = s.lstrip("≈~= ").replace("…", "").replace("...", "")
    s = re.sub(r"√\s*([0-9.]+)", r"sqrt(\1)", s).replace("√", "sqrt")
    s = s.replace("^", "**").replace("×", "*").replace("−", "-")
    return s.strip()


def parse_number(value, *, what: str = "the answer") -> float:
    """Read one real number from what a student typed.

    Args:
        value: an int, float, numpy scalar, one-element array or tensor, or a string of
            arithmetic (``"2/3"``, ``"sqrt(12.5)"``, ``"≈ 3.536"``).
        what: how messages name the answer, e.g. ``"var_2244"``.

    Returns:
        The number as a Python float.

    Raises:
        AnswerFormatError: None, ``...``, a bool, text that is not arithmetic, several
            numbers, or a number that is not finite.
    """
    if value is None or value is Ellipsis:
        raise AnswerFormatError(f"{what} is not answered yet: set it to a number")
    if isinstance(value, (bool, np.bool_)):
        raise AnswerFormatError(f"{what} should be a number, got {value!r}")
    if isinstance(value, str):
        text = _clean_number_text(value)
        try:
            out = _eval_arith(parse(text, mode="eval"))
        except (SyntaxError, AnswerFormatError, ZeroDivisionError, OverflowError, ValueError,
                RecursionError):
            raise AnswerFormatError(f"{what}: could not read {value!r} as a number; write "
                                    "e.g. 0.5, 2/3 or sqrt(2)") from None
    else:
        try:
            arr = np.asarray(_detach(value), dtype=np.float64)
        except (TypeError, ValueError):
            raise AnswerFormatError(f"{what} should be a number, got "
                                    f"{type(value).__name__}") from None
        if arr.size != 1:
            raise AnswerFormatError(f"{what} should be one number, got {arr.size} values")
        out = float(arr.reshape(()))
    if not math.isfinite(out):
        raise AnswerFormatError(f"{what} should be a finite number, got {out}")
    return out


def _detach(value):
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        return value.detach().cpu().double().numpy()
    return value


def parse_vector(value, *, what: str = "the answer") -> np.ndarray:
    """Read a vector of numbers.

    Args:
        value: a tuple, list, numpy array or tensor of numbers, or a string such as
            ``"(-1, 0, 1)"`` / ``"[-1 0 1]"`` whose entries :func:`parse_number` can read.
        what: how messages name the answer.

    Returns:
        A 1-D float64 numpy array.

    Raises:
        AnswerFormatError: not answered, not a flat sequence of numbers, or an entry that
            cannot be read.
    """
    if value is None or value is Ellipsis:
        raise AnswerFormatError(f"{what} is not answered yet: set it to a tuple of numbers")
    if isinstance(value, str):
        body = value.strip().strip("()[]{} ")
        parts = [p for p in re.split(r"[,;]\s*|\s+", body) if p] if body else []
        if not parts:
            raise AnswerFormatError(f"{what}: could not read {value!r}; write e.g. (0.5, -1, 2)")
        return np.array([parse_number(p, what=f"{what} entry {i}") for i, p in enumerate(parts)])
    if isinstance(value, (list, tuple)):
        return np.array([parse_number(v, what=f"{what} entry {i}") for i, v in enumerate(value)])
    try:
        arr = np.asarray(_detach(value), dtype=np.float64)
    except (TypeError, ValueError):
        raise AnswerFormatError(f"{what} should be a tuple of numbers, got "
                                f"{type(value).__name__}") from None
    if arr.ndim != 1:
        raise AnswerFormatError(f"{what} should be a flat tuple of numbers, got an array of "
                                f"shape {list(arr.shape)}")
    return arr


_YES = {"yes", "y", "true", "t", "it does", "yes it does", "yes, it does"}
_NO = {"no", "n", "false", "f", "it does not", "it doesn't", "does not", "doesn't",
       "no it does not", "no, it does not", "no it doesn't", "no, it doesn't", "not"}


def parse_yes_no(value, *, what: str = "the answer") -> bool:
    """Read a yes/no answer: ``True``/``False`` or ``"yes"``/``"no"``/``"true"``/``"false"``.

    Raises:
        AnswerFormatError: not answered, or anything else (including 0 and 1).
    """
    if value is None or value is Ellipsis:
        raise AnswerFormatError(f"{what} is not answered yet: set it to True or False")
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str):
        s = re.sub(r"[.!]+$", "", value.strip().lower())
        if s in _YES:
            return True
        if s in _NO:
            return False
    raise AnswerFormatError(f"{what} should be True or False (or \"yes\"/\"no\"), got {value!r}")


def parse_shape(value, *, what: str = "the answer") -> tuple[int, ...]:
    """Read a tensor shape: a tuple/list of ints, ``torch.Size``, a tensor or array (its
    ``.shape`` is used), or a string such as ``"[2, 3, 1]"`` or ``"2x3x1"``.

    Raises:
        AnswerFormatError: not answered, or not a sequence of non-negative integers.
    """
    if value is None or value is Ellipsis:
        raise AnswerFormatError(f"{what} is not answered yet: set it to a shape like (4, 5)")
    if hasattr(value, "shape") and not isinstance(value, (tuple, list)) \
            and getattr(value, "ndim", 0) > 0 and not _is_int_vector(value):
        value = tuple(value.shape)
    if isinstance(value, str):
        nums = re.findall(r"-?\d+", value)
        if not nums or re.search(r"\d\.\d", value):
            raise AnswerFormatError(f"{what}: could not read {value!r} as a shape; "
                                    "write e.g. (4, 5)")
        out = tuple(int(n) for n in nums)
    else:
        try:
            out = tuple(int(v) for v in value)
            ok = all(float(v) == int(v) for v in value)
        except (TypeError, ValueError):
            raise AnswerFormatError(f"{what} should be a shape like (4, 5), got "
                                    f"{type(value).__name__}") from None
        if not ok:
            raise AnswerFormatError(f"{what}: a shape holds whole numbers, got {value!r}")
    if any(n < 0 for n in out):
        raise AnswerFormatError(f"{what}: axis lengths cannot be negative, got {out}")
    return out


def _is_int_vector(value) -> bool:
    """A 1-D integer array/tensor is read as the shape itself, not as a tensor to measure."""
    dt = str(getattr(value, "dtype", ""))
    return getattr(value, "ndim", 0) == 1 and "int" in dt


_AXIS_WORDS = [  # checked in order: "the feature axis of one token" is the feature axis
    ("feature", ("feature", "last", "hidden", "channel", "embedding", "d_model", "model dim",
                 "dim=-1", "axis=-1", "dim -1", "axis -1", "width")),
    ("batch", ("batch",)),
    ("sequence", ("sequence", "seq", "token", "time", "position", "length")),
]
_AXIS_LETTERS = {"d": "feature", "-1": "feature", "2": "feature", "b": "batch", "0": "batch",
                 "-3": "batch", "t": "sequence", "1": "sequence", "-2": "sequence",
                 "n": "sequence", "l": "sequence"}


def refuse_float_axis(value, what: str) -> None:
    """An axis number is an int, as ``dim=`` takes it (``x.mean(dim=1.0)`` raises): a float,
    even a whole one, is told so, in the self-check and in grading alike (both run this)."""
    if isinstance(value, (float, np.floating)):
        if float(value).is_integer():
            raise AnswerFormatError(f"{what} is the float {value!r}: an axis number is an int, as dim= "
                                    f"takes it ({int(value)}, not {value!r})")
        raise AnswerFormatError(f"{what} is {value!r}: an axis number is a whole number, an int")


def parse_axis(value, *, what: str = "the answer") -> str:
    """Name the axis of a ``[B, T, D]`` tensor an answer means: ``"feature"``, ``"sequence"``
    or ``"batch"``.

    Args:
        value: an int axis of ``[B, T, D]`` (``-1``/``2`` feature, ``1``/``-2`` sequence,
            ``0``/``-3`` batch) or words (``"the last axis"``, ``"features"``, ``"D"``,
            ``"dim=-1"``, ``"across tokens"``, ``"batch"`` ...).

    Raises:
        AnswerFormatError: not answered, or no axis could be recognised.
    """
    if value is None or value is Ellipsis:
        raise AnswerFormatError(f"{what} is not answered yet: name an axis (a word or an int)")
    if isinstance(value, (bool, np.bool_)):
        raise AnswerFormatError(f"{what} should name an axis, got {value!r}")
    refuse_float_axis(value, what)
    if isinstance(value, (int, np.integer)):
        key = str(int(value))
        if key in _AXIS_LETTERS:
            return _AXIS_LETTERS[key]
        raise AnswerFormatError(f"{what}: a [B, T, D] tensor has axes 0, 1, 2 (or -3, -2, -1), "
                                f"got {value}")
    if isinstance(value, str):
        s = value.strip().lower()
        bare = re.sub(r"^(the|axis|dim|dimension)\s*[=:]?\s*", "", s).strip(" .")
        if bare in _AXIS_LETTERS:
            return _AXIS_LETTERS[bare]
        for name, words in _AXIS_WORDS:
            if any(w in s for w in words):
                return name
    raise AnswerFormatError(f"{what}: could not tell which axis {value!r} means; answer with "
                            "a word (batch, sequence, feature) or an axis number of [B, T, D]")


_NORM_NAMES = {"norm", "ln", "layernorm", "layer_norm", "rmsnorm", "rms_norm", "normalize",
               "normalise", "normalization", "normalisation", "rmsn", "n",
               # a block's two norms, by number or by MiniMind's / nanoGPT's names
               "norm1", "norm2", "ln1", "ln2", "ln_1", "ln_2", "input_layernorm",
               "post_attention_layernorm"}
_ATTENTION_NAMES = {"attention", "attn", "selfattention", "self_attention", "self_attn", "mha",
                    "mhsa", "multiheadattention", "sa", "a", "att"}
_GENERIC_SUBLAYER_NAMES = {"sublayer", "f"}
_SUBLAYER_NAMES = _ATTENTION_NAMES | _GENERIC_SUBLAYER_NAMES
_FFN_NAMES = {"ffn", "mlp", "feedforward", "feed_forward", "ff", "fnn", "feedforwardnetwork"}
SUBLAYER_KINDS = {"attention": (_ATTENTION_NAMES, _FFN_NAMES),
                   "ffn": (_FFN_NAMES, _ATTENTION_NAMES)}
_INPUT_NAMES = {"x", "h", "hidden", "hidden_states", "residual", "x_l", "xl", "input"}


def parse_formula(value, *, what: str = "the answer", sublayer: str = "attention") -> str:
    """Reduce a residual-block formula to a canonical string over ``X``, ``N()`` (any norm)
    and ``A()`` (the question's sublayer), e.g. ``"Y = x + attn(LN(x))"`` -> ``"X+A(N(X))"``.

    Args:
        value: the student's string.
        what: how messages name the answer.
        sublayer: the question's sublayer, ``"attention"`` (the seed's) or ``"ffn"`` (the
            feed-forward network): its names and the generic ``F``/``sublayer`` become ``A()``;
            the other sublayer's names (``MLP``/``FFN`` in an attention question, ``Attention``
            in a feed-forward one) become ``W()``, a wrong sublayer.

    Raises:
        AnswerFormatError: not a string, not answered, or a name that is not recognised.
        ValueError: an unknown ``sublayer`` (an author's mistake).
    """
    if sublayer not in SUBLAYER_KINDS:
        raise ValueError(f"sublayer is 'attention' or 'ffn', got {sublayer!r}")
    asked, other = SUBLAYER_KINDS[sublayer]
    if value is None or value is Ellipsis:
        raise AnswerFormatError(f"{what} is not answered yet: write the formula as a string")
    if not isinstance(value, str):
        raise AnswerFormatError(f"{what} should be a string such as \"Y = ...\", got "
                                f"{type(value).__name__}")
    s = value.strip().strip("$").replace("\\left", "").replace("\\right", "")
    s = re.sub(r"\\(operatorname|mathrm|mathbf|text|mathit|boldsymbol)", "", s)
    s = s.replace("{", "").replace("}", "").replace("[", "(").replace("]", ")")
    s = s.replace("\\", "").replace("·", "").replace("−", "-")
    if s.count("=") > 1:  # a chain of equal formulas is one answer; two different ones hedge
        rhs = {parse_formula(part, what=what, sublayer=sublayer) if part.strip() else ""
               for part in s.split("=")[1:]} if _parses(s.split("=")[1:], sublayer) else set()
        if len(rhs) != 1 or "" in rhs:
            raise AnswerFormatError(f"{what} holds more than one formula ({value!r}): give one, "
                                    "such as \"Y = ...\"")
        return rhs.pop()
    if "=" in s:  # drop "Y =" / "x_{l+1} ="
        s = s.split("=")[-1]
    out = []
    for tok in re.findall(r"[A-Za-z_][A-Za-z0-9_]*|[()+]|\S", s):
        low = tok.lower()
        if low in _INPUT_NAMES:
            out.append("X")
        elif low in _NORM_NAMES:
            out.append("N")
        elif low in asked or low in _GENERIC_SUBLAYER_NAMES:
            out.append("A")
        elif low in other:
            out.append("W")
        elif tok in "()+":
            out.append(tok)
        elif tok == "*":
            continue
        else:
            names = "Attention(...)" if sublayer == "attention" else "FFN(...)"
            raise AnswerFormatError(f"{what}: did not recognise {tok!r} in {value!r}; use X, "
                                    f"Norm(...), {names} (or F(...)), + and parentheses")
    return "".join(out)


def _parses(parts: list[str], sublayer: str) -> bool:
    """Does every one of ``parts`` read as a formula on its own?"""
    try:
        for part in parts:
            parse_formula(part, sublayer=sublayer)
    except AnswerFormatError:
        return False
    return True
