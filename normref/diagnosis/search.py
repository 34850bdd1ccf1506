"""The search: match a student's wrong outputs against every variant a grammar generates.

A *grammar* (:class:`Grammar`) lists, for one checker, the dimensions along which an
implementation can deviate from the reference (which axis is reduced, where eps sits, how the
residual is wired, ...), each with its values (:class:`Choice`). A *variant* is the reference
with one choice changed (a single) or two choices of different dimensions changed (a pair).

:func:`search` evaluates the variants on the checker's battery and keeps those that reproduce
the student's output on **every** case where the student's output is known: within twice the
checker's tolerance on each case, and themselves wrong (outside the tolerance) on every case
the student failed. Singles are tried first; pairs only when no single reproduces the output.
A name is given only then; otherwise :func:`normref.diagnosis.measure.describe` says what was
measured.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

__all__ = ["Choice", "Observation", "Grammar", "Finding", "search", "close"]


@dataclass(frozen=True)
class Choice:
    """One value of one dimension of a grammar.

    Attributes:
        dim: the dimension, e.g. ``"axis"``, ``"eps_place"``, ``"residual"``.
        value: the value, e.g. ``0``, ``"outside"``, ``"normed"`` (hashable).
        phrase: what a student who made this choice did, in their words, as a clause after
            "you": ``"divided by the largest |x| of the token"``.
        known: the fault kind of ``normref.checks`` this single choice is, or None when the
            fault list does not have it.
    """

    dim: str
    value: object
    phrase: str
    known: str | None = None

    @property
    def key(self) -> str:
        return f"{self.dim}={self.value}"


#: A variant: the reference with these choices changed (one or two, different dimensions).
Variant = tuple[Choice, ...]


def variant_id(v: Variant) -> str:
    """``"dim=value"`` of each choice, joined by ``+`` (stable, for tags and tests)."""
    return "+".join(c.key for c in v)


def variant_known(v: Variant) -> str | None:
    """The fault kind a single variant already has in the fault list, else None."""
    return v[0].known if len(v) == 1 else None


@dataclass
class Observation:
    """One battery case as the search sees it.

    Attributes:
        case: the checker's inputs for this case, in the form the grammar's ``evaluate`` takes.
        got: the student's output as float64 numpy (several outputs flattened into one
            vector), or None when the student's function gave no comparable output (raised,
            wrong type or shape).
        want: the reference output, float64, same shape as ``got``.
        rtol, atol: the checker's tolerance for this case.
        passed: whether the checker passed this case.
    """

    case: object
    got: np.ndarray | None
    want: np.ndarray
    rtol: float
    atol: float
    passed: bool


@dataclass
class Grammar:
    """The variants of one checker's reference.

    Attributes:
        checker: the checker's name (``CheckResult.name``), e.g. ``"rms_norm"``.
        reference: what the reference does, as the end of a sentence ("divides by the root
            mean square"), used in messages.
        dims: ``dims(cases) -> [[Choice, ...] per dimension]``: the choices that apply to
            this battery.
        evaluate: ``evaluate(choices: dict[dim, value], case) -> float64 array or None``
            (None: this variant raises or has the wrong shape on this case). The empty dict
            is the reference.
        compatible: ``compatible(a, b) -> bool``: whether two choices of different dimensions
            make a meaningful pair (default: always).
    """

    checker: str
    reference: str
    dims: Callable[[Sequence[object]], list[list[Choice]]]
    evaluate: Callable[[dict, object], np.ndarray | None]
    compatible: Callable[[Choice, Choice], bool] = lambda a, b: True

    def singles(self, cases: Sequence[object]) -> list[Variant]:
        return [(c,) for dim in self.dims(cases) for c in dim]

    def pairs(self, cases: Sequence[object]) -> list[Variant]:
        dims = self.dims(cases)
        out: list[Variant] = []
        for i, j in itertools.combinations(range(len(dims)), 2):
            for a in dims[i]:
                for b in dims[j]:
                    if a.dim != b.dim and self.compatible(a, b):
                        out.append((a, b))
        return out

    def variants(self, cases: Sequence[object]) -> Iterator[Variant]:
        """Every single, then every pair."""
        yield from self.singles(cases)
        yield from self.pairs(cases)


def close(a: np.ndarray | None, b: np.ndarray | None, rtol: float, atol: float) -> bool:
    """``np.allclose`` with equal shapes required; NaN equals NaN and inf equals inf (a variant
    that returns NaN where the student does reproduces them)."""
    if a is None or b is None or a.shape != b.shape:
        return False
    return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))


@dataclass
class Finding:
    """What the search found.

    Attributes:
        variants: the variants that reproduce the student's output on every case, all of the
            lowest order (singles, else pairs), closest first.
        checker: the checker's name.
        reference: the grammar's reference phrase.
    """

    variants: list[Variant]
    checker: str
    reference: str
    evaluated: int = 0

    @property
    def best(self) -> Variant:
        return self.variants[0]

    @property
    def ids(self) -> list[str]:
        return [variant_id(v) for v in self.variants]

    def sentence(self, reference: bool = True) -> str:
        """The diagnosis in the student's words, e.g. "you divided by the largest |x| of the
        token where RMSNorm divides by the root mean square"; ``reference=False``: without what
        the reference does (a question whose reference is its answer, the backward)."""
        best = self.best
        clauses = [c.phrase for c in best]
        text = "you " + (clauses[0] if len(clauses) == 1 else f"{clauses[0]}, and {clauses[1]}")
        if reference:
            text += f", where {self.reference}"
        others = [v for v in self.variants[1:] if {c.key for c in v} != {c.key for c in best}]
        if others:
            o = others[0]
            alt = o[0].phrase if len(o) == 1 else f"{o[0].phrase}, and {o[1].phrase}"
            text += f"; on these inputs that is the same as if you {alt}"
        return text + "."


def _evaluator(grammar: Grammar):
    cache: dict[tuple[str, int], np.ndarray | None] = {}

    def run(v: Variant, i: int, case) -> np.ndarray | None:
        key = (variant_id(v), i)
        if key not in cache:
            try:
                with np.errstate(all="ignore"):
                    cache[key] = grammar.evaluate({c.dim: c.value for c in v}, case)
            except (ValueError, IndexError, ZeroDivisionError, RuntimeError, FloatingPointError):
                cache[key] = None
        return cache[key]

    return run


def reproduces(grammar: Grammar, v: Variant, obs: Sequence[Observation], run=None) -> bool:
    """Whether variant ``v`` reproduces the student's output on every case with an output:
    within twice the case's tolerance, and wrong (outside it) wherever the student failed."""
    run = run or _evaluator(grammar)
    order = sorted(range(len(obs)), key=lambda i: obs[i].passed)  # failing cases first
    seen = False
    for i in order:
        o = obs[i]
        if o.got is None:
            continue
        out = run(v, i, o.case)
        if out is None or not close(o.got, out, 2 * o.rtol, 2 * o.atol):
            return False
        if not o.passed and close(out, o.want, o.rtol, o.atol):
            return False
        seen = seen or not o.passed
    return seen


def search(grammar: Grammar, obs: Sequence[Observation], *, pairs: bool = True) -> Finding | None:
    """The variants of ``grammar`` that reproduce the student's outputs ``obs``.

    Args:
        grammar: the checker's grammar.
        obs: one :class:`Observation` per battery case, in battery order.
        pairs: also try pairs of choices when no single reproduces the outputs.

    Returns:
        A :class:`Finding` (singles if any single reproduces the outputs, else pairs), or None
        when no variant does or no failing case has an output to compare.
    """
    if not any(o.got is not None and not o.passed for o in obs):
        return None
    cases = [o.case for o in obs]
    run = _evaluator(grammar)
    evaluated = 0
    for group in (grammar.singles, grammar.pairs) if pairs else (grammar.singles,):
        found = []
        for v in group(cases):
            evaluated += 1
            if reproduces(grammar, v, obs, run):
                found.append((_distance(v, obs, run), v))
        if found:
            found.sort(key=lambda t: t[0])
            return Finding([v for _, v in found], grammar.checker, grammar.reference, evaluated)
    return None


def _distance(v: Variant, obs: Sequence[Observation], run) -> float:
    d = 0.0
    for i, o in enumerate(obs):
        if o.got is None:
            continue
        out = run(v, i, o.case)
        with np.errstate(all="ignore"):
            diff = np.abs(np.nan_to_num(o.got - out, nan=0.0, posinf=0.0, neginf=0.0))
        d = max(d, float(diff.max()) if diff.size else 0.0)
    return d


def count_variants(grammar: Grammar, cases: Iterable[object]) -> tuple[int, int]:
    """(singles, pairs) the grammar generates on this battery."""
    cases = list(cases)
    return len(grammar.singles(cases)), len(grammar.pairs(cases))
