"""The questions the diagnosis knows: each declared once, by its signature and its reference.

A checker module declares its question (:func:`declare`) where it defines its checker; the
diagnosis (:mod:`.diagnose`) then gives every failing case what the shared mechanisms find:
the formula the answer computes beside the reference's (:mod:`.trace`, :mod:`.compose`,
:mod:`.explain`) for a question whose answer takes callables, and what was measured
(:mod:`.probes`, :mod:`.measure`) for one that computes a norm. Nothing here is written per
question but the declaration::

    declare(Question("peri_ln", "peri_ln(x, sublayer, norm, out_norm)", peri_ln, "Peri-LN",
                     args=lambda c: ((c.x, c.sublayer, c.norm, c.out_norm), {}),
                     names={"sublayer": "F"}, models=peri_models))
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Output", "Question", "declare", "declared", "QUESTIONS"]


@dataclass(frozen=True)
class Output:
    """One output of an answer, as sentences name it.

    Attributes:
        name: its name in sentences, ``"dx"``, ``"dweight"``, ``"new_running_mean"``; a question
            with one output calls it ``"output"`` ("your output is the reference's times 2").
        tokens: its last axis' rows belong to tokens (``[..., D]`` like ``x``, one row per token;
            attention logits ``[..., T, T]``, one row per query): per-row statistics ("your
            tokens' outputs have RMS ...") are said of it; False for a parameter's gradient or a
            running statistic (``[D]``).
        rows: what one row is, in sentences: ``"token"``, ``"query"``.
        plural: the name is a plural ("your logits are ...").
        average_of: a running average's parameter (``"running_mean"``): this output is that
            parameter updated, ``a * old + b * statistic``; the diagnosis fits ``a`` and ``b`` to
            the answer's values and to the reference's and says both (:mod:`.averages`).
        statistics: ``statistics(args, kwargs) -> [(words, values), ...]``: the statistics of
            one call's inputs the average may take in (the reference's among them), each in this
            output's shape, with the words that name it ("the batch's variance divided by
            n - 1 = 5 (unbiased)"); the fit says the one whose weights make an average.
    """

    name: str = "output"
    tokens: bool = True
    rows: str = "token"
    plural: bool = False
    average_of: str | None = None
    statistics: Callable | None = None


@dataclass
class Question:
    """One graded question, as the diagnosis needs it.

    Attributes:
        checker: the checker's name (``CheckResult.name``), e.g. ``"peri_ln"``.
        signature: the answer's signature as the assignment writes it,
            ``"peri_ln(x, sublayer, norm, out_norm)"`` (its parameter names name the formula's
            parts; ``eps=1e-6`` style defaults are allowed).
        reference: ``reference(*args, **kwargs)``, the reference output (numeric).
        title: what the reference is called in sentences ("Peri-LN", "RMSNorm", "DyT").
        args: ``args(case) -> (args, kwargs)``, the call of one battery case (None for a case
            that is no call of the answer, e.g. a build case).
        formula: a plain composition computing the reference (traced for its formula);
            default ``reference``.
        names: the notation of a parameter where it is not its name (``{"sublayer": "F"}``).
        products: the binary products the numeric identification generates beside sums
            (``("matmul_t",)``: ``a b^T``).
        models: the checker's fault models, ``models(*args) -> (fault, output, hint)...``, run
            on the stand-ins: an answer whose formula is a model's gets that fault's words.
        norm: ``"rms"`` or ``"layer"`` for a norm question (its invariances are probed, its
            divisor is read), else None.
        probes: the probes made (:data:`normref.diagnosis.probes.PROBES`); None: by the
            signature (:func:`normref.diagnosis.probes.probes_for`); ``()``: none.
        call: ``call(answer, args, kwargs)`` where the answer is not called as ``answer(*args)``
            (a class: built, then called); None: a plain call.
        traceable: trace the answer (False: its calls need real tensors, e.g. numpy).
        identify: identify an untraced answer's formula from its outputs (:mod:`.compose`).
        search: run the checker's grammar search first, where one is registered.
        forms: ``forms(S, R) -> (fault, hint) | None``: families of formulas the models do not
            list one by one (DeepNorm's ``Norm(alpha x + F(x))`` for every ``alpha``).
        facts: ``facts(args, kwargs, observed) -> [sentence, ...]``: what the outputs of one
            case show that the generic measurements do not read (a gradient's invariants).
        outputs: the answer's outputs in order (:class:`Output`); a question with several
            (a tuple returned) has its checker record each case with their names
            (:func:`normref.diagnosis.outputs.observe`), and every measured sentence is about
            one of them, by its name, with indices in its own shape.
        mask: the parameter that marks real tokens (``[B, T]``, True real, False padding), e.g.
            ``"mask"``: the diagnosis measures where the outputs differ (only at the padded
            positions?) and whether moving the padded tokens' values changes the answer's
            outputs at the real ones (the ``pad`` probe: does padding enter the statistics?).
        formula_is_answer: the reference's formula is what the question asks the student to
            derive (the LayerNorm backward): no message states it, or any term of it; a
            difference is said instead (what the student's outputs show, or the variant's
            phrase without the reference's).
    """

    checker: str
    signature: str
    reference: Callable
    title: str
    args: Callable
    formula: Callable | None = None
    names: dict = field(default_factory=dict)
    products: tuple = ()
    models: Callable | None = None
    norm: str | None = None
    probes: tuple | None = None
    call: Callable | None = None
    traceable: bool = True
    identify: bool = True
    search: bool = True
    forms: Callable | None = None
    facts: Callable | None = None
    outputs: tuple = (Output(),)
    mask: str | None = None
    formula_is_answer: bool = False

    @property
    def function(self) -> str:
        """The answer's name, ``"peri_ln"``."""
        return self.signature.split("(", 1)[0].strip()

    @property
    def params(self) -> tuple:
        """The parameter names, in order: ``("x", "sublayer", "norm", "out_norm")``."""
        inside = self.signature.split("(", 1)[1].rsplit(")", 1)[0]
        return tuple(re.split(r"\s*=", p.strip())[0] for p in inside.split(",") if p.strip())

    def value(self, param: str, args: tuple, kwargs: dict, default=None):
        """The value one call gives the parameter named ``param`` (by position or keyword)."""
        if param in kwargs:
            return kwargs[param]
        params = self.params
        if param in params and params.index(param) < len(args):
            return args[params.index(param)]
        return default

    def notation(self, param: str) -> str:
        """How the formula writes a parameter (``sublayer`` -> ``F``)."""
        return self.names.get(param, param)

    def output(self, name: str | None) -> Output | None:
        """The declared output named ``name``; None (an unnamed record): the only output, or None
        when there are several. An undeclared name has no tokens."""
        if name is None:
            return self.outputs[0] if len(self.outputs) == 1 else None
        return next((o for o in self.outputs if o.name == name), Output(name, tokens=False))

    def invoke(self, answer, args: tuple, kwargs: dict):
        """The answer called on one case's ``args``."""
        if self.call is not None:
            return self.call(answer, args, kwargs)
        return answer(*args, **kwargs)


#: Every declared question, by checker name.
QUESTIONS: dict[str, Question] = {}


def declare(question: Question) -> Question:
    """Register ``question`` (a checker module does this once, beside its checker); returns it."""
    QUESTIONS[question.checker] = question
    return question


def declared(checker: str) -> Question | None:
    """The question of the checker named ``checker``, if one was declared."""
    return QUESTIONS.get(checker)
