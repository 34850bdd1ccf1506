"""Diagnosis: name mistakes nobody listed.

Every checker declares its question (:mod:`.questions`: its signature and reference), and
:func:`refine` gives each failing case what the shared mechanisms find (:mod:`.diagnose`): the
formula the answer computes beside the one asked (traced, :mod:`.trace`, or identified from the
outputs, :mod:`.compose`; said by :mod:`.explain`), and what was measured (:mod:`.probes`,
:mod:`.measure`).

Some checkers also have a *grammar* (:mod:`.norms`, the block's :mod:`.wiring`; the backward's is
the grader's, ``grader/backward.py``) that generates implementation variants of its reference
along the reference's natural dimensions,
single changes and pairs. :func:`refine` is what a checker calls once its cases are run: for
the cases that only got the generic diagnosis ("the values differ from the reference"), it
looks for variants that reproduce the student's output on every failing case of the battery
(:func:`.search.search`) and names the variant in the student's words; when none does, it
adds what was measured (:func:`.measure.describe`). The known fault kinds are untouched.

Tags: a named variant is tagged ``[fault: found_variant] [variant: <id>]`` (``<id>`` like
``stat=max_abs`` or ``eps_place=outside+divisor=1``), so the class report can count and group it.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from .gradients import BackwardCase
from .diagnose import diagnose
from .measure import describe
from .outputs import Observed, observe, split
from .norms import NormCase, norm_case, norm_grammar
from .questions import Output, Question, declare, declared
from .search import Choice, Finding, Grammar, Observation, close, count_variants, reproduces, search, variant_id
from .wiring import BlockCase, block_grammar

__all__ = ["BackwardCase", "BlockCase", "NormCase", "DIAGNOSIS_FAULTS", "Observed", "Output",
           "Question", "declare", "declared", "observe", "split",
           "GENERIC_FAULTS", "Choice", "Finding", "Grammar", "Observation", "close",
           "count_variants", "describe", "grammar_for", "observation_case", "refine", "register_grammar",
           "reproduces", "search", "variant_id", "VARIANT_TAG"]

#: The fault kind of a mistake found by the search, with its generic description.
DIAGNOSIS_FAULTS = {
    "found_variant": "a mistake outside the list of known fault kinds, found by trying "
    "variants of the reference: the message names it.",
}

#: Fault kinds the search may refine: the checkers' generic fallbacks.
GENERIC_FAULTS = ("wrong_values", "returns_nan")

VARIANT_TAG = re.compile(r"\[variant: ([A-Za-z0-9_=.+\-]+)\]")

_GRAMMARS = {
    "rms_norm": lambda: norm_grammar("rms", "rms_norm"),
    "layer_norm": lambda: norm_grammar("layer", "layer_norm"),
    "RMSNorm module": lambda: norm_grammar("rms", "RMSNorm module", module=True),
    "pre-LN block": block_grammar,
}


#: torch's words in the grammars' sentences -> numpy's, for a numpy checker's student
_NUMPY_WORDS = (("keepdim=True", "keepdims=True"), ("keepdim lost", "keepdims lost"),
                ("torch.var(dim=-1) style", "np.var(axis=-1) style"), ("(dim=-1)", "(axis=-1)"),
                ("whole tensor", "whole array"))


def numpy_words(sentence: str) -> str:
    """A search sentence in numpy's vocabulary (``keepdims=True``, ``np.var(axis=-1)``)."""
    for torch_word, numpy_word in _NUMPY_WORDS:
        sentence = sentence.replace(torch_word, numpy_word)
    return sentence


def register_grammar(checker: str, make) -> None:
    """Give the checker named ``checker`` a grammar: ``make()`` returns a :class:`Grammar`.
    The grader registers the backward's (``grader/backward.py``), which is not in this package."""
    _GRAMMARS[checker] = make


def grammar_for(checker: str) -> Grammar | None:
    """The grammar of the checker named ``checker`` (``CheckResult.name``), or None."""
    make = _GRAMMARS.get(checker)
    return None if make is None else make()


def observation_case(checker: str, case) -> object | None:
    """The grammar's form of one battery case of ``checker`` (the checker's own case object,
    read by attribute), or None for a case the grammar cannot evaluate (a build or parameter
    case, the block run with the student's own submodules)."""
    if checker in ("rms_norm", "layer_norm"):
        return norm_case(case.x, case.weight, getattr(case, "bias", None), case.eps)
    if checker == "RMSNorm module":
        if getattr(case, "x", None) is None:
            return None
        import torch

        from ..functional import RMS_NORM_EPS

        w = case.weight if case.weight is not None else torch.ones(case.dim)
        return norm_case(case.x, w, None, RMS_NORM_EPS if case.eps is None else case.eps)
    if checker == "pre-LN block":
        if getattr(case, "x", None) is None or case.parts is None or isinstance(case.parts, str) \
                or getattr(case, "own", False):  # the student's own submodules: grading cannot run other wirings
            return None
        A, M, N1, N2 = case.parts
        return BlockCase(case.x, A, M, N1, N2)
    if checker == "layer_norm_backward":
        return BackwardCase(np.asarray(case.dy, np.float64), np.asarray(case.x, np.float64),
                            np.asarray(case.weight, np.float64), float(case.eps))
    return None


def _x64(case) -> np.ndarray | None:
    x = getattr(case, "x", None)
    if isinstance(x, np.ndarray):
        return x.astype(np.float64)
    return None


def refine(checker: str, battery: Sequence[object], results: Sequence[object], answer=None,
           call=None, backend: str | None = None) -> Finding | None:
    """Rewrite the diagnoses of one check run in place; return what the grammar search found.

    A declared question (:mod:`.questions`: every course checker declares its own) gets the
    shared diagnosis (:func:`.diagnose.diagnose`): its formula traced or identified, what the
    probes and outputs measured, after the grammar search where it has one. Otherwise only the
    search runs, on the cases with the generic diagnosis.

    Args:
        checker: ``CheckResult.name``.
        battery: the checker's case objects, in order.
        results: the ``CaseResult`` of each case; a result carries ``observed = (got, want,
            rtol, atol)`` (float64 arrays) when the student's output could be compared.
        answer: the student's function or class (traced when it is code).
        call: ``call(answer, args, kwargs) -> output or None``, the checker's safe call, for the
            probes (None: no probes).
        backend: ``"torch"`` or ``"numpy"``, the words of the messages (None: read from the cases).

    Returns:
        The :class:`Finding` whose best variant names the generic cases, or None.
    """
    numpy = all(isinstance(getattr(c, "x", None), np.ndarray) for c in battery)
    backend = backend or ("numpy" if numpy else "torch")
    q = declared(checker)
    found: list = []

    def search_now() -> None:
        found.append(_search(checker, battery, results, numpy, describe_rest=q is None,
                             reference=q is None or not q.formula_is_answer))

    if q is None:
        search_now()
        return found[0]
    import warnings

    with warnings.catch_warnings(), np.errstate(all="ignore"):  # nothing of the diagnosis reaches stderr
        warnings.simplefilter("ignore")
        diagnose(q, battery, results, answer=answer, call=call, backend=backend,
                 search=search_now if q.search and checker in _GRAMMARS else None)
    return found[0] if found else None


def _search(checker: str, battery, results, numpy: bool, describe_rest: bool = True,
            reference: bool = True) -> Finding | None:
    """The grammar search on the cases with the generic diagnosis: a variant that reproduces
    every output names them (``reference``: with what the reference does; False for a question
    whose reference is its answer, :attr:`Question.formula_is_answer`); else (``describe_rest``)
    what was measured is added."""
    generic = [r for r in results if not r.passed and r.fault in GENERIC_FAULTS
               and getattr(r, "observed", None) is not None]
    grammar = grammar_for(checker)
    if not generic or grammar is None:
        return None
    obs: list[Observation] = []
    for case, r in zip(battery, results):
        seen = getattr(r, "observed", None)
        # a case of several calls observes the one that failed (a checker says which)
        gcase = observation_case(checker, getattr(r, "observed_case", None) or case)
        if gcase is None or seen is None:
            continue
        got, want, rtol, atol = seen
        obs.append(Observation(gcase, got, want, rtol, atol, r.passed))
    found = search(grammar, obs)
    for case, r in zip(battery, results):
        if r not in generic:
            continue
        head = r.message.rsplit("; ", 1)[0] if "; " in r.message else r.message.split(" [fault:")[0]
        if found is not None:
            r.fault = "found_variant"
            sentence = found.sentence(reference=reference)
            sentence = numpy_words(sentence) if numpy else sentence
            r.message = (f"{head}; {sentence} [fault: found_variant] "
                         f"[variant: {variant_id(found.best)}]")
        elif describe_rest:
            x = getattr(case, "x", None)
            x64 = None
            if x is not None:
                try:
                    from .norms import _np

                    x64 = _np(x)[0].astype(np.float64)
                except Exception:  # noqa: BLE001 - a description is optional
                    x64 = None
            # each output by its name; an undeclared question's rows are tokens only when the
            # output is shaped like its input
            texts = [describe(x64, g, w, name) for name, g, w in split(r.observed, default="output")
                     if x64 is not None and g.shape == x64.shape]
            text = "; ".join(t.removeprefix("measured: ").rstrip(".") for t in texts if t)
            if text:
                r.message = r.message.replace(f" [fault: {r.fault}]", f"; measured: {text}. [fault: {r.fault}]")
    return found
