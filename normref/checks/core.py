"""What every checker shares: the results, calling student code safely, and the seeded input
helpers (comparing arrays is :mod:`normref.checks.compare`).

A student function that raises, loops, returns the wrong kind/shape/dtype, returns NaN or
modifies its input gets a clear message; the checker itself never raises because of it.
While the student's code runs, warnings and anything written to ``sys.stderr`` are swallowed
(nbgrader scores a test cell 0 if anything reaches stderr) and torch's default dtype is
restored afterwards.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .. import faults as _faults
from .._torch import import_if_named, loaded
from ..calling import CALL_TIMEOUT_S, seeded  # noqa: F401 - the checkers' seeded, from here
from ..calling import Timeout as _Timeout
from ..calling import call_with_timeout as _call_with_timeout
from ..wire import snapshot as _copy
from ..wire import unchanged as _same
from .verdict import rule_lines, source_findings  # noqa: F401 - the checkers' rule lines, from here


def msg(kind: str, backend: str = "torch", norm: str = "layer") -> str:
    """The registry's sentence for fault ``kind`` in ``backend``'s (and ``norm``'s) words."""
    return _faults.message(kind, backend, norm)


def backend_of(x) -> str:
    """``"numpy"`` for a numpy array (or anything not a torch tensor), else ``"torch"``."""
    return "numpy" if isinstance(x, np.ndarray) else "torch"


#: What a case name's head phrase may not end with, a sign or a word: it would be cut mid-phrase ("q =").
_OPEN_SIGNS = ("=", "+", "-", "*", "/", "<", ">", ":", ",", "(")
_OPEN_WORDS = {"with", "of", "on", "and", "at", "to", "by", "in", "for", "from", "a", "an", "the"}


def case_label(name: str) -> str:
    """A case's name as a short label: its head phrase, cut at the first ``": "``, ``", "`` or
    ``" ("`` outside brackets where the head is a whole phrase, never mid-phrase; the whole name
    when there is no such place.

    ``"B = T = D [4, 4, 4] (a wrong axis still broadcasts)"`` -> ``"B = T = D [4, 4, 4]"``;
    ``"the seed token: q = ((1, 2, 3), ...), k = ..."`` -> ``"the seed token"`` (never
    ``"the seed token: q ="``); ``"x = (1, 2)"`` stays whole.
    """
    depth = 0
    for i, ch in enumerate(name):
        if depth == 0 and (name.startswith((": ", ", "), i) or name.startswith(" (", i)):
            head = name[:i].rstrip()
            if head and not head.endswith(_OPEN_SIGNS) and head.split()[-1] not in _OPEN_WORDS:
                return head
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
    return name


# --------------------------------------------------------------------------- results


@dataclass
class CaseResult:
    """Outcome of one checker case: ``passed``, the error sizes and, if failed, the fault."""

    name: str
    passed: bool
    message: str = ""
    fault: str | None = None
    max_abs_err: float = float("nan")
    max_rel_err: float = float("nan")
    #: ``(got, want, rtol, atol)``, float64, when the student's output was compared by value
    #: (read by :func:`normref.diagnosis.refine`, the search behind the generic diagnosis).
    observed: tuple | None = field(default=None, repr=False, compare=False)
    #: the variant id :func:`normref.diagnosis.refine` named (with fault ``found_variant``).
    variant: str | None = None


@dataclass
class CheckResult:
    """Outcome of a ``check_*`` call.

    The text a student reads (:meth:`report`, ``str()``, the notebook display) names each
    failing case and its likely cause, never an internal fault tag; the fault kinds travel in
    the displayed output's metadata (:func:`normref.faults.output_metadata`), where the class
    report reads them (:func:`normref.faults.parse_tags`) and the student does not see them.

    Attributes:
        name: what was checked, e.g. ``"rms_norm"``.
        cases: one :class:`CaseResult` per case, in order.
        breaches: rules that cost points (:mod:`normref.rules`), one line per violation, e.g.
            ``"0 points: calls F.rms_norm — implement it with tensor operations"``: only a
            reference seen running inside the student's call
            (:func:`normref.rules.observed_reference`); any breach makes the score 0, as grading
            will, and is all the report says besides the reviews.
        reviews: what is flagged for the instructor's review and costs nothing, one line each
            (:func:`normref.rules.review_message`: a reference the source spells but no call ran,
            a tamper construct in a cell the answer comes from, a thread of the student's).
        unchecked: a quick check's battery cases it did not run (their short names): a quick
            check that passes says which kinds of input are still to come, never "all correct".
        passed: True when every case passed and no rule is broken.
        score: fraction of cases passed, 0..1 (nbgrader partial credit is ``points * score``);
            0 when a rule is broken.
        faults: the distinct fault kinds diagnosed, in order of first appearance
            (``reference_call`` first for a broken rule).
        variants: the variant ids the search of :mod:`normref.diagnosis` named.
        messages: one line per failing case.
    """

    name: str
    cases: list[CaseResult] = field(default_factory=list)
    breaches: list[str] = field(default_factory=list)
    reviews: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases) and not self.breaches

    @property
    def score(self) -> float:
        if not self.cases or self.breaches:
            return 0.0
        return sum(c.passed for c in self.cases) / len(self.cases)

    @property
    def faults(self) -> list[str]:
        out: list[str] = ["reference_call"] if self.breaches else []
        for c in self.cases:
            if c.fault and c.fault not in out:
                out.append(c.fault)
        return out

    @property
    def variants(self) -> list[str]:
        return list(dict.fromkeys(c.variant for c in self.cases if c.variant))

    @property
    def messages(self) -> list[str]:
        return [c.message for c in self.cases if not c.passed]

    def head(self, n: int) -> "CheckResult":
        """The first ``n`` cases as a result of their own (a visible check's quick part), with
        the same rule breaches and reviews; the other cases are its :attr:`unchecked`."""
        rest = [case_label(c.name) for c in self.cases[n:]]
        return CheckResult(self.name, self.cases[:n], list(self.breaches), list(self.reviews),
                           rest + list(self.unchecked))

    @property
    def problem(self) -> str:
        """What grading would hold against this result first, for an error message: the broken
        rules' lines (each its own, as :meth:`report` says them), else the first failing case's
        diagnosis (without the case name and the
        raw error it explains, e.g. ``"use keepdim=True ..."`` rather than ``"raised
        RuntimeError: The size of tensor a (8) ..."``); ``""`` when passed. Wrapped for
        ``nbgrader validate``, which cuts every line of an error at 80 columns: the first line
        at 60 (``assert quick.passed, quick.problem`` shows it after ``"AssertionError: "``),
        the others at 76."""
        import textwrap

        if self.breaches:
            whys = list(self.breaches)
        else:
            whys = [""]
            for c in self.cases:
                if not c.passed:  # a code case's "case '<name>': raised ...; <hint>": the hint
                    whys = [c.message.split("': ", 1)[-1].split("; ", 1)[-1]
                            if c.message.startswith("case '") else c.message]
                    break
        # one wrap of each text, the first line 16 columns shorter: words are never cut
        # (cutting the text after a first wrap, whose whitespace it had collapsed, broke
        # "torch.float16" into "t" / "orch.float16")
        pad = " " * 16
        lines = []
        for why in whys:
            lines += textwrap.wrap(why, 76, initial_indent=pad if not lines else "",
                                   break_long_words=False, break_on_hyphens=False)
        return "\n".join([lines[0][len(pad):], *lines[1:]] if lines else [])

    def _verdict(self) -> list[str]:
        """The report's lines before the reviews: a broken rule's lines alone, else the cases."""
        if self.breaches:  # a broken rule costs the question whatever the cases say: its line alone
            return list(self.breaches)
        n_ok = sum(c.passed for c in self.cases)
        head = f"{self.name}: {n_ok}/{len(self.cases)} cases passed (score {self.score:.2f})"
        if self.unchecked and not self.passed:  # a quick check (a visible check's): no part marks
            head = f"{self.name}: {n_ok}/{len(self.cases)} cases passed (a visible check's point needs all of them)"
        if self.passed and self.unchecked:
            return [head + f"; still to check by the full battery (its own test cell): "
                    f"{'; '.join(self.unchecked)}."]
        if self.passed:
            return [head + " - all correct."]
        return [head] + ["  x " + m for m in self.messages]

    def report(self) -> str:
        """The human summary shown in self-check and grader cells (no internal tags): the
        cases passed and each failing case's diagnosis; for a broken rule, its line alone
        (``"0 points: calls F.rms_norm — implement it with tensor operations"``); then each
        line flagged for the instructor's review (``"For the instructor's review (no points
        taken): ..."``). A quick check that passed says what it did not run ("still to check");
        only a full battery says "all correct"."""
        return "\n".join(self._verdict() + list(self.reviews))

    __str__ = report

    def __repr__(self) -> str:
        return self.report()

    def _repr_mimebundle_(self, include=None, exclude=None):
        """What ``display(result)`` (or a cell ending in it) shows: the report as plain text,
        wrapped at spaces (:func:`wrapped`), with the fault kinds in the output's metadata
        (JupyterLab and nbconvert's HTML do not render metadata)."""
        return {"text/plain": self.displayed()}, _faults.output_metadata(self.faults, self.variants)

    def displayed(self) -> str:
        """The report as a student reads it (the self-check's display, the feedback): wrapped at
        spaces (:func:`wrapped`), but a broken rule's line stays one line (the self-check,
        Validate and the feedback say it alike)."""
        verdict = "\n".join(self._verdict())
        shown = verdict if self.breaches else wrapped(verdict)
        return "\n".join([shown] + [wrapped(r) for r in self.reviews])

    def show(self) -> None:
        """Display the report with its fault kinds in the output metadata (as
        ``display(result)`` does), so the class report can count them; outside IPython (a
        script, a console), print the report."""
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:  # pragma: no cover - IPython ships with the course environment
            get_ipython = None
        if get_ipython is None or get_ipython() is None:
            print(self.displayed())
            return
        display({"text/plain": self.displayed()}, raw=True,
                metadata=_faults.output_metadata(self.faults, self.variants))


def quick_cut(cases: list, quick: bool, n: int = 2) -> tuple[list, list[str]]:
    """A quick check's cases (the first ``n``) and the short names of the others
    (:attr:`CheckResult.unchecked`); the whole battery and ``[]`` when not ``quick``."""
    cases = list(cases)
    if not quick:
        return cases, []
    return cases[:n], [case_label(c.name) for c in cases[n:]]


#: Columns a displayed report wraps at, at spaces: JupyterLab breaks a long output line anywhere,
#: mid-word ("it only r" / "escales by the RMS"; its CSS for outputs has ``word-break: break-all``).
DISPLAY_COLUMNS = 88


def wrapped(text: str, width: int = DISPLAY_COLUMNS) -> str:
    """``text`` with each line longer than ``width`` wrapped at spaces, its continuation lines
    indented under the line's text (a case's ``  x `` line: under what follows the ``x``); a word
    longer than ``width`` is kept whole. The words are the text's, in order."""
    import textwrap

    out = []
    for line in text.splitlines():
        if len(line) <= width:
            out.append(line)
            continue
        body = line.lstrip()
        hang = " " * (len(line) - len(body) + (2 if body.startswith("x ") else 0))
        out.append(textwrap.fill(line, width, subsequent_indent=hang, break_long_words=False,
                                 break_on_hyphens=False))
    return "\n".join(out)


# --------------------------------------------------------------------------- calling student code


def single_threaded(checker: Callable) -> Callable:
    """Run a checker with one torch thread (restored afterwards): its tensors are tiny, and on
    a loaded machine (parallel autograde, 2 cores) two intra-op threads made a check 10x slower
    (measured: 0.06 s vs 0.8-1.0 s for check_pre_ln_block)."""

    @functools.wraps(checker)
    def wrapper(*args, **kwargs):
        torch = loaded()
        if torch is None:  # a numpy check: no torch threads to limit (and no torch to import)
            return checker(*args, **kwargs)
        n = torch.get_num_threads()  # the calling thread's setting (OpenMP keeps one per thread)
        torch.set_num_threads(1)
        try:
            return checker(*args, **kwargs)
        finally:
            torch.set_num_threads(n)

    return wrapper


def fail(case: str, text: str, fault: str, max_abs=float("nan"), max_rel=float("nan")) -> CaseResult:
    """A failing case: ``case '<case>': <text>`` with its fault kind. The message carries the
    kind as a ``[fault: ...]`` tag only until :func:`run` has let :mod:`normref.diagnosis` read
    it; :func:`run` removes it before anyone reads the text."""
    return CaseResult(case, False, f"case '{case}': {text} {_faults.format_tag(fault)}", fault,
                      max_abs, max_rel)


def _raised(case: str, e: BaseException, keepdim_hint: bool, backend: str) -> CaseResult:
    # "; " separates the raised error from the hint (problem() keeps the hint): not inside the error
    said = str(e).replace("; ", ", ")
    text = f"{type(e).__name__}: {said}" if said.strip() else type(e).__name__  # not "NotImplementedError:;"
    hint, fault = msg("raises", backend), "raises"
    if isinstance(e, NotImplementedError):
        hint = "not implemented yet: replace the `raise NotImplementedError(...)` line with your code."
    elif keepdim_hint and ("size of tensor" in str(e) or "broadcast" in str(e)):
        hint, fault = msg("missing_keepdim", backend), "missing_keepdim"
    elif keepdim_hint and isinstance(e, IndexError) and ("out of range" in str(e) or "out of bounds" in str(e)):
        hint, fault = msg("wrong_axis", backend), "wrong_axis"  # e.g. dim=1 of a 1-D token
    return fail(case, f"raised {text[:300]}; {hint}", fault)


#: While a checker runs (:func:`run`), in its own thread: ``_RECORDING.stack``, ``[(reference,
#: found)]``, what counts as running a reference (:class:`normref.recorder.ReferenceRecorder`'s
#: arguments, :mod:`normref.rules`) and what the student's calls ran so far. Empty: calls are not
#: recorded. One stack per thread: checkers running in two threads at once record apart.
_RECORDING = threading.local()


def _recording_stack() -> list[tuple[dict, list[str]]]:
    stack = getattr(_RECORDING, "stack", None)
    if stack is None:
        stack = _RECORDING.stack = []
    return stack


@contextlib.contextmanager
def recording(reference: dict | None):
    """Record, in every :func:`student_call` made inside, which reference normalizations the
    student's code runs, with grading's own recorder (:class:`normref.recorder.ReferenceRecorder`)
    and grading's lists of names (``reference``, e.g. :data:`normref.rules.NORM_REFERENCE`).
    Yields the list of what was found (``["calls torch's rms_norm"]``). ``None``: nothing is
    recorded."""
    if reference is None:
        yield []
        return
    found: list[str] = []
    reference = dict(reference)
    try:  # the course references' code objects, read once per check (a recorder reads them otherwise)
        from ..reference_code import reference_codes

        if reference.get("normref_names") and _recorder_takes("codes"):
            reference["codes"] = reference_codes()
    except ImportError:  # a recorder that finds normref's references by their files
        pass
    stack = _recording_stack()
    stack.append((reference, found))
    try:
        yield found
    finally:
        stack.pop()


def _recorder_takes(name: str) -> bool:
    """Does :class:`normref.recorder.ReferenceRecorder` take this keyword argument?"""
    import inspect as _inspect

    from ..recorder import ReferenceRecorder

    return name in _inspect.signature(ReferenceRecorder).parameters


def _recorded(fn: Callable, args: tuple, kwargs: dict, timeout: float, handed_in: tuple = ()):
    """:func:`_call_with_timeout`, under grading's reference recorder while :func:`recording`;
    ``handed_in``: the checker's own objects given to the student's code (a norm, a sublayer,
    a block's swapped-in submodules), which may run a reference, as in grading."""
    stack = _recording_stack()
    if not stack:
        return _call_with_timeout(fn, args, kwargs, timeout)
    from ..recorder import ReferenceRecorder, recorder_intact as _recorder_intact

    reference, found = stack[-1]
    if handed_in and _recorder_takes("handed_in"):
        reference = {**reference, "handed_in": tuple(handed_in)}
    elif handed_in:  # a recorder without handed_in lets normref's norms run their own references,
        # but counts a call of one from the student's code: the handed-in norms' own names do not count
        reference = {**reference, "normref_names": tuple(
            n for n in reference.get("normref_names", ())
            if not n.startswith(("normref.modules.", "normref.functional.")))}
    recorder = ReferenceRecorder(**reference)
    try:
        with recorder:
            return _call_with_timeout(fn, args, kwargs, timeout)
    finally:
        if not _recorder_intact():
            recorder.found.append("changed the grader's call recorder (its class was patched)")
        for what in recorder.found:
            if what not in found:
                found.append(what)


def student_call(case: str, fn: Callable, args: tuple, kwargs: dict | None = None,
                 watch: tuple = (), keepdim_hint: bool = False, backend: str = "torch",
                 record: bool = True, handed_in: tuple = ()):
    """Run the student's ``fn``; return ``(output, None)`` or ``(None, failing CaseResult)``.

    ``watch``: inputs that must come back unmodified. ``keepdim_hint``: a shape/broadcasting
    error (torch's "size of tensor", numpy's "could not be broadcast") is diagnosed as a
    missing keepdim, an axis out of range (torch's IndexError, numpy's AxisError) as the wrong
    axis. ``backend``: whose words the messages use. ``record``: inside :func:`recording`,
    record the reference normalizations the call runs (grading records every call of the
    student's functions and every ``forward``, not a module's construction); ``handed_in``: the
    checker's objects among what the call gets, which may run a reference.
    """
    before = [_copy(a) for a in watch]
    import_if_named(fn)  # an answer that imports torch: before the call, neither recorded nor timed
    try:
        if record:
            got = _recorded(fn, args, kwargs or {}, CALL_TIMEOUT_S, tuple(handed_in))
        else:
            got = _call_with_timeout(fn, args, kwargs or {}, CALL_TIMEOUT_S)
    except _Timeout:
        return None, fail(case, f"no result after {CALL_TIMEOUT_S:.0f} s; {msg('timeout', backend)}",
                          "timeout")
    except Exception as e:  # noqa: BLE001 - the student's error becomes a message
        return None, _raised(case, e, keepdim_hint, backend)
    if any(not _same(a, b) for a, b in zip(watch, before)):
        return None, fail(case, msg("mutates_input", backend), "mutates_input")
    return got, None


def run(name: str, cases: list, run_case: Callable, fn=None, what: str = "a function",
        backend: str = "torch", reference: dict | None = None, unchecked: list[str] = ()) -> CheckResult:
    """Run ``run_case(case)`` for every case; a checker bug or an odd student object becomes a
    failing case, never an exception.

    Then: the search of :mod:`normref.diagnosis` refines the generic diagnoses; the internal
    ``[fault: ...]``/``[variant: ...]`` tags leave the messages (the kinds stay in
    ``CaseResult.fault``/``.variant``); and the rules of :mod:`normref.rules` are applied as
    grading applies them (:func:`rule_lines`), worded for ``backend``: a reference the student's
    calls ran (``reference``: grading's recorder and lists of names, see :func:`recording`)
    makes the score 0; what the tamper scan finds in the cells the code comes from
    (:func:`normref.checks.cells.scan_findings`) is flagged for the instructor's review.
    ``unchecked``: a quick check's battery cases not run (:func:`quick_cut`).
    """
    result = CheckResult(name, unchecked=list(unchecked))
    if fn is not None and not callable(fn):
        result.cases = [CaseResult(c.name, False, f"{name} is not {what} (got "
                                   f"{type(fn).__name__})", "raises") for c in cases]
        return result
    with recording(reference) as ran:
        for case in cases:
            try:
                result.cases.append(run_case(case))
            except Exception as e:  # noqa: BLE001 - a checker must never crash on student output
                result.cases.append(CaseResult(case.name, False, f"case '{case.name}': could not be "
                                               f"checked ({type(e).__name__}: {e}) "
                                               f"{_faults.format_tag('wrong_values')}", "wrong_values"))
        _refine(name, cases, result.cases, fn, backend)  # its probes are recorded like the cases
    for c in result.cases:  # the tags were for refine; the student reads the text without them
        c.message, _, variants = _faults.split_tags(c.message)
        c.variant = c.variant or (variants[0] if variants else None)
    result.breaches, result.reviews = rule_lines(source_findings(fn), ran, backend)
    return result


def _refine(name: str, cases: list, results: list, fn, backend: str) -> None:
    """Name what the generic diagnosis could not (:func:`normref.diagnosis.refine`: the formula
    the answer computes, what was measured); the answer's probes run through
    :func:`student_call`, so grading records and replays them like the battery's calls."""
    try:
        from ..diagnosis import refine

        def call(answer, args, kwargs):
            return student_call("probe", answer, tuple(args), dict(kwargs), backend=backend)[0]

        refine(name, cases, results, answer=fn, call=call, backend=backend)
    except Exception:  # noqa: BLE001 - the diagnosis only adds to a message, never breaks a check
        pass




# --------------------------------------------------------------------------- seeded inputs
# A battery draws from a generator of its own (a fixed seed's for the public battery, the grading
# run's for a drawn one), never from torch's or numpy's global RNG: two checkers, or a checker and
# the student's notebook, never change each other's numbers, in one thread or in several.


def seeded_randn(seed: int) -> Callable:
    """A battery's input maker: ``rnd(*shape, scale=1.0, shift=0.0)`` draws
    ``randn(*shape) * scale + shift`` (float32) from its own ``torch.Generator`` seeded with
    ``seed``, so a battery's inputs never depend on, or change, the global RNG."""
    import torch

    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, scale: float = 1.0, shift: float = 0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    return rnd


def seeded_module(g, factory: Callable, *args, **kwargs):
    """``factory(*args, **kwargs)``, a torch ``nn.Module`` whose parameters are all in
    ``nn.Linear`` layers (:class:`normref.CausalSelfAttention`, :class:`normref.FeedForward`),
    with its weights drawn from the ``torch.Generator`` ``g``: the module
    ``torch.manual_seed(s); factory(*args, **kwargs)`` builds when ``g`` was seeded with ``s``
    (each ``nn.Linear`` in the order it was built, as ``nn.Linear.reset_parameters`` draws),
    without reading or changing torch's global RNG (it is built on the meta device, then its
    weights are drawn). Several modules drawn in turn from one ``g`` are those built in turn
    after one ``torch.manual_seed(s)``.

    Raises:
        ValueError: the module has a parameter or buffer outside its ``nn.Linear`` layers
            (whose initial values this does not know).
    """
    import math

    import torch
    from torch import nn

    with torch.device("meta"):
        m = factory(*args, **kwargs)
    for name, sub in m.named_modules():
        own = [*sub.named_parameters(recurse=False), *sub.named_buffers(recurse=False)]
        if own and not isinstance(sub, nn.Linear):
            raise ValueError(f"{type(m).__name__}: {name or 'the module'} has {own[0][0]} outside an nn.Linear; "
                             "seeded_module draws nn.Linear weights only")
    m = m.to_empty(device="cpu")
    with torch.no_grad():
        for sub in m.modules():
            if isinstance(sub, nn.Linear):
                nn.init.kaiming_uniform_(sub.weight, a=math.sqrt(5), generator=g)
                if sub.bias is not None:
                    bound = 1 / math.sqrt(sub.in_features) if sub.in_features > 0 else 0.0
                    nn.init.uniform_(sub.bias, -bound, bound, generator=g)
    return m

