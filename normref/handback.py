"""The grading kernel's half of trusted scoring: run the student's code on the grader's inputs
and hand the outputs back, unjudged.

While ``make grade`` autogrades, a question's hidden test is one line,
``hand_back("<grade_id>", rms_norm)``. The grader has drawn that question's inputs from a
secret seed (new every grading run), as the exact calls its checker makes
(:func:`grader.scoring.inputs.prepare_inputs`); an nbgrader preprocessor outside the kernel
(``HandbackInputs`` in ``nbgrader_config.py``) writes them into that cell, just before it
runs, as text (:func:`normref.wire.dump_inputs`) given to the hand-back that :func:`seal` kept at
kernel start, and rewrites the line into a call of that hand-back; it takes them out again
right after. No answer cell can read the inputs beforehand: they are not in the kernel, nor in
any file it can open, until the hidden test runs. This module makes each call in the kernel and
shows the outputs (arrays and tensors with their dtype and shape, or the exception:
:mod:`normref.wire`) as one output of MIME type :data:`normref.wire.MIME`. The grader's own
process reads that output from the autograded notebook and judges it with the same checker,
outside the student's process (:mod:`grader.scoring.inputs`): nothing here decides a score, so
patching it can only change the outputs handed back, which the student's code could have
returned itself.

A class question hands back the record of the grader's plan instead (:func:`normref.plan.run_plan`:
construct, report, load weights, swap in known submodules, call ``forward``), and a short
answer its values (:func:`normref.wire.encode_answer`); both are judged by the grader the same way.

Outside autograde (a student's own kernel, ``nbgrader validate``), :func:`hand_back` does
nothing. In autograde, as written (without the grader's inputs), it fails its cell.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from . import calling, plan
from ._torch import directory, import_if_named, is_tensor, loaded
from .recorder import allowed_codes, grader_objects, recorder_for, recorder_intact
from .reference_code import reference_codes, reference_prints
from .threads import watch_threads
from .wire import MIME, encode, encode_answer, encode_exception, load_inputs, snapshot, unchanged


def _arrays(args) -> list[tuple[int, object]]:
    return [(i, a) for i, a in enumerate(args) if isinstance(a, np.ndarray) or is_tensor(a)]


#: Seconds of calls one hidden test makes; later calls are not made (handed back as raised). The
#: checker's own calls come first and fit (at most 7 of at most ``CALL_TIMEOUT_S`` each), so only
#: the diagnosis' probes (:mod:`normref.diagnosis.probes`) of a slow answer are left out: the cell
#: stays under nbgrader's 60 s (``Execute.timeout``) and the score is the battery's.
CALLS_BUDGET_S = 40.0


def run_calls(fn, calls: list, reference: dict | None = None, sealed: dict | None = None,
              trace: str | None = None) -> list[dict] | dict:
    """Make each call ``(args, kwargs, grad_enabled)`` of ``fn``, as the checker would; one
    record per call: ``{"out": encode(output)}``, ``{"raised": [type, message]}`` or
    ``{"timeout": True}``, plus ``"after"`` for inputs the call modified and ``"references"``
    for the reference normalizations it executed (``reference``: the keyword arguments of
    :class:`normref.recorder.ReferenceRecorder`; ``sealed``: what :func:`seal` captured at
    kernel start). Without torch loaded (a numpy question) autograd's mode is not set: nothing
    uses it. ``trace``: the checker's name; after every call is made, each that returned is
    traced as the self-check traces it, into its record's ``"traced"``
    (:func:`normref.diagnosis.handing.trace_into`)."""
    import contextlib

    if not callable(fn):
        return {"not_callable": type(fn).__name__[:80]}
    import_if_named(fn)  # an answer that imports torch does it here, not inside a timed call
    records = []
    start = time.monotonic()
    for args, kwargs, grad in calls:
        if time.monotonic() - start > CALLS_BUDGET_S:  # the diagnosis' probes, after the battery's calls
            records.append({"raised": ["RuntimeError", "not made: the hidden test's time was spent"]})
            continue
        before = [(i, snapshot(a)) for i, a in _arrays(args)]
        rec: dict = {}
        recorder = recorder_for(reference, grader_objects(args, kwargs), sealed)
        torch = loaded()
        grad_mode = torch.set_grad_enabled(grad) if torch is not None else contextlib.nullcontext()
        try:
            with grad_mode, recorder:
                out = calling.call_with_timeout(fn, tuple(args), dict(kwargs), calling.CALL_TIMEOUT_S)
                # encoded inside the record: a returned object whose conversion runs code
                # (a tensor subclass, say) runs it where the recorder sees it
                rec["out"] = encode(out)
        except calling.Timeout:
            rec["timeout"] = True
        except Exception as e:  # noqa: BLE001 - the student's error is handed back as it is
            rec["raised"] = encode_exception(e)
        if not recorder_intact():
            recorder.found.append("changed the grader's call recorder (its class was patched)")
        if recorder.found:
            rec["references"] = recorder.found
        changed = {str(i): encode(args[i]) for i, b in before if not unchanged(args[i], b)}
        if changed:
            rec["after"] = changed
        records.append(rec)
    if trace:  # each call that returned, traced as the self-check traces it, into its record's "traced"
        from .diagnosis.handing import trace_into

        trace_into(trace, fn, [(a, k, r) for (a, k, _), r in zip(calls, records) if "out" in r],
                   start + CALLS_BUDGET_S)
    return records


def probe(check, *args, **kwargs) -> list[tuple[tuple, dict, bool]]:
    """The calls a checker makes of the student's function: ``check(probe_fn, *args,
    **kwargs)`` with a stand-in that records each call (copies of its arguments, and whether
    autograd was on) and raises. Returns ``[(args, kwargs, grad enabled)]`` in order."""
    import copy

    calls = []

    def stand_in(*a, **k):
        torch = loaded()  # without torch (a numpy check) autograd is on, as torch starts
        calls.append((copy.deepcopy(a), copy.deepcopy(k), torch.is_grad_enabled() if torch is not None else True))
        raise RuntimeError("probe")

    check(stand_in, *args, **kwargs)
    return calls



def hand_back(grade_id: str, fn, *more) -> float | None:
    """Run ``fn`` on the grader's inputs for ``grade_id`` and show the outputs (autograde only).

    What is handed back depends on the question (the grader's inputs say which): a
    function's outputs on the checker's calls (:func:`run_calls`); a class's record of the
    grader's plan (:func:`normref.plan.run_plan`: ``fn`` is the class); a short answer's values
    (:func:`normref.wire.encode_answer`: ``fn`` and ``more`` are the answers, e.g.
    ``hand_back("<grade_id>", mean_1357, var_1357)``).

    In ``make grade`` this line of the hidden test is not what runs: the grader's nbgrader
    preprocessor (``HandbackInputs`` in ``nbgrader_config.py``) replaces it, just before
    autograde executes the cell, with the question's inputs given to the hand-back :func:`seal`
    captured when the kernel started and a call of it. Called as written, in autograde, it has
    no inputs: the cell fails, naming ``make grade`` (an ``nbgrader autograde`` without the
    run's inputs is refused before it runs anything: ``GradedByMakeGrade`` in
    ``nbgrader_config.py``).

    Returns:
        None outside autograde (no output: Validate judges the visible part of the cell).

    Raises:
        RuntimeError: in autograde (as written, without its inputs), e.g. ``<grade_id>: this
            hidden test ran without its inputs: it is graded by `make grade` ...``.
    """
    if os.environ.get("NBGRADER_EXECUTION") != "autograde":
        return None  # nothing to hand back; and validate must not read a score of 0 here
    raise RuntimeError(f"{grade_id}: this hidden test ran without its inputs: it is graded by `make grade` "
                       "(python -m grader), not by nbgrader autograde alone; its score here is not a grade")


def _outputs(grade_id: str, inputs: dict, fn, more: tuple, sealed: dict | None) -> tuple[dict, float | None]:
    """The hand-back of one question (``{"grade_id", "values"|"cases"|"calls"}``) and what the
    hidden test returns to nbgrader until the grader's score replaces it."""
    kind = inputs.get("kind", "function")
    if kind == "values":
        return {"grade_id": grade_id, "values": [encode_answer(v) for v in (fn, *more)]}, 0.0
    if kind == "class":
        cases = plan.run_plan(fn, inputs["plan"], inputs.get("reference"), sealed, inputs.get("trace"))
        return {"grade_id": grade_id, "cases": cases}, None if inputs.get("visible") else 0.0
    calls = inputs.get("calls")
    if calls is None:  # a visible check: its public cases, made here by the course's checker
        from . import checks

        name, args, kwargs = inputs["public"]
        calls = probe(getattr(checks, name), *args, **kwargs)
    bundle = {"grade_id": grade_id, "calls": run_calls(fn, calls, inputs.get("reference"), sealed,
                                                       inputs.get("trace"))}
    # A visible check keeps nbgrader's pass/fail of its cell until the grader's score
    # replaces it (the grader compares the two); a battery scores 0 until then.
    return bundle, None if inputs.get("public") else 0.0


def _hand_back(grade_id: str, fn, more: tuple, text: str | None, sealed: dict | None, display) -> float | None:
    """What the sealed hand-back does (:func:`seal`): read the question's inputs, run, show."""
    if text is None:
        print(f"{grade_id}: the grader left no inputs for this question: 0 points for now")
        return 0.0
    try:
        inputs = load_inputs(text)  # written by the grader into this cell, just before it ran
    except Exception as e:  # noqa: BLE001 - inputs that do not read are the grader's fault: 0 for now
        print(f"{grade_id}: the grader's inputs could not be read ({type(e).__name__}): 0 points for now")
        return 0.0
    changed = sealed["changed"]() if sealed else []
    bundle, retval = _outputs(grade_id, inputs, fn, more, sealed)
    if sealed:
        changed = sorted(set(changed) | set(sealed["changed"]()))
        if changed:
            bundle["changed"] = changed
    display({MIME: bundle, "text/plain": f"{grade_id}: outputs handed to the grader"}, raw=True)
    return retval


#: The modules the hand-back runs: :func:`seal` watches every function and class they define, and
#: every normref function, class or module they bind (an alias patched in place of one).
SEALED_MODULES = ("normref.handback", "normref.plan", "normref.wire", "normref.recorder",
                  "normref.reference_code", "normref.calling", "normref._torch", "normref.threads")


def _normref_object(v) -> bool:
    import types

    if isinstance(v, types.ModuleType):
        return v.__name__.split(".")[0] == "normref"
    return isinstance(v, (types.FunctionType, type)) and str(getattr(v, "__module__", "")).split(".")[0] == "normref"


def _watched(owner) -> dict:
    """What ``owner`` (a module) binds of normref: ``{name: (object, code, (class dict, method
    codes))}``; code and methods for what it defines itself, the object alone for what it imports."""
    import types

    out = {}
    for k, v in list(vars(owner).items()):
        if not _normref_object(v):
            continue
        if getattr(v, "__module__", None) != owner.__name__:
            out[k] = (v, None, None)  # imported (or a module): its own module watches its code
        elif isinstance(v, types.FunctionType):
            out[k] = (v, v.__code__, None)
        elif isinstance(v, type):
            members = dict(vars(v))
            codes = {a: getattr(getattr(m, "__func__", m), "__code__", None) for a, m in members.items()}
            out[k] = (v, None, (members, codes))
    return out


def _changes(watched: list) -> list[str]:
    """What of ``watched`` (``[(module, _watched(module))]``) was replaced since: ``"module.name"``,
    with ``" (its code)"``, ``" (its methods)"`` or ``" (a method's code)"``."""
    out = []
    for owner, items in watched:
        now = vars(owner)
        for k, (v, code, cls) in items.items():
            where = f"{owner.__name__}.{k}"
            if now.get(k) is not v:
                out.append(where)
            elif code is not None and v.__code__ is not code:
                out.append(f"{where} (its code)")
            elif cls is not None:
                members, codes = cls
                if set(vars(v)) != set(members) or any(vars(v)[a] is not m for a, m in members.items()):
                    out.append(f"{where} (its methods)")
                elif any(c is not None and getattr(getattr(m, "__func__", m), "__code__", None) is not c
                         for a, (m, c) in ((a, (members[a], codes[a])) for a in members)):
                    out.append(f"{where} (a method's code)")
    return out


def seal(torch: bool = True):
    """The hand-back as it is now, kept from later changes: what the grading kernel runs first.

    ``make grade``'s preprocessor puts ``<name> = normref.handback.seal()`` (a fresh random
    name per run) in a cell of its own before every cell of the notebook, and each hidden test
    gives ``<name>.inputs(grade_id, text)`` the question's inputs and calls
    ``<name>(grade_id, fn, *more)``. The returned function keeps the references and state it
    needs: the course references' code objects (:func:`normref.reference_code.reference_codes`),
    the kernel's threads and IPython's ``display``; and every hand-back it makes says which
    function, class or method of the hand-back's modules (:data:`SEALED_MODULES`), or which
    normref object they bind, was replaced since (``"changed"``, scored 0 and flagged by the
    grader). Patching ``normref.handback`` after this (through any alias) changes no hand-back
    unnoticed.

    Args:
        torch: import torch and the references that need it (``normref.modules``,
            ``normref.blocks``) now. False for a kernel whose questions are numpy or short
            answers (their inputs need no torch, :func:`normref.wire.needs_torch`;
            ``HandbackInputs`` in ``nbgrader_config.py``): those references'
            code is then known by its fingerprint from their source
            (:func:`normref.reference_code.source_prints`) and, once imported, by its file
            ("calls the course's own ..."); a call that imports torch is followed by the
            recorder (:class:`normref.recorder.ReferenceRecorder`).
    """
    from IPython.display import display

    state = seal_state(torch)
    hand, given = _hand_back, {}

    def sealed(grade_id: str, fn, *more):
        return hand(grade_id, fn, more, given.get(grade_id), state, display)

    def inputs(grade_id: str, text: str) -> None:
        """The question's inputs (:func:`normref.wire.dump_inputs`), for the call that follows."""
        given[str(grade_id)] = text

    sealed.inputs = inputs
    return sealed


def seal_state(torch: bool = True) -> dict:
    """What :func:`seal` keeps for the hand-back, read now: the references' code objects and
    fingerprints, the code an answer may run, torch's folder, the kernel's threads (and, from
    now on, those the notebook's code starts: :func:`normref.threads.watch_threads`), and a watch
    on the hand-back's modules (``"changed"``)."""
    watched = [(sys.modules[m], _watched(sys.modules[m])) for m in SEALED_MODULES]
    changes = _changes
    codes = reference_codes(torch=torch)
    return {"torch_dir": directory(), "codes": codes, "prints": reference_prints(codes),
            "allowed": frozenset(allowed_codes()), "started": watch_threads(),
            "threads": frozenset(sys._current_frames()), "changed": lambda: changes(watched)}


def as_graded(result, grade_id: str, points: float) -> None:
    """In ``nbgrader validate`` (and the toolbar's Validate), fail a question whose battery is
    not fully passed, saying what grading would give; elsewhere (JupyterLab, autograde) do
    nothing, so autograde still gives partial credit.

    Args:
        result: the question's :class:`normref.checks.CheckResult`.
        grade_id: the test cell's ``grade_id``, e.g. ``"<assignment>_battery"``.
        points: the cell's points.

    Raises:
        AssertionError: in validate, when ``result`` is not fully passed, e.g.
            ``<grade_id>: 5/6 cases, 3.33 of 4 points:`` then one line ``- <cause>``
            per distinct failing cause (wrapped at 76 columns); for a broken rule, its line
            alone, ``<grade_id>: 0 of 4 points: calls F.rms_norm — implement it with
            tensor operations``: a :class:`PointsLost`, shown without a traceback frame.
    """
    if os.environ.get("NBGRADER_EXECUTION") != "validate" or result.passed:
        return
    if result.breaches:
        raise PointsLost(_broken_rules(result.breaches, grade_id, points))
    n_ok = sum(c.passed for c in result.cases)
    earned = round(points * result.score, 2)
    # validate shows each line of an error up to 80 characters: every cause is wrapped
    raise PointsLost(f"{grade_id}: {n_ok}/{len(result.cases)} cases, {earned:g} of {points:g} points:\n"
                     + _every_cause(result))


def _broken_rules(breaches: list[str], grade_id: str, points: float) -> str:
    """Validate's message for a question that breaks a rule (:func:`as_graded`): one line
    (wrapped at 76 columns, the first 16 shorter for ``"AssertionError: "``), or a bullet per
    violation when there are several."""
    import textwrap

    from .rules import RULE_PREFIX

    head = f"{grade_id}: 0 of {points:g} points:"
    whys = [b.removeprefix(RULE_PREFIX) for b in breaches]
    if len(whys) == 1:
        pad = " " * 16
        lines = textwrap.wrap(f"{head} {whys[0]}", 76, initial_indent=pad, break_long_words=False,
                              break_on_hyphens=False)
        return "\n".join([lines[0][len(pad):], *lines[1:]])
    return "\n".join([head] + [textwrap.fill(w, 76, initial_indent="- ", subsequent_indent="  ",
                                              break_long_words=False, break_on_hyphens=False) for w in whys])


class PointsLost(AssertionError):
    """What :func:`as_graded` raises in validate: an ``AssertionError`` that IPython shows as
    its message alone (``_render_traceback_``, IPython's hook for exceptions that render
    themselves), with no frame of the course's code (``normref/handback.py:... in as_graded``)."""

    def _render_traceback_(self) -> list[str]:
        return [f"AssertionError: {self}"]


def _every_cause(result) -> str:
    """Each distinct reason ``result`` loses points, once, in order (the broken rules, then each
    failing case's diagnosis), each wrapped at spaces to 76 columns as ``- ...``: a student
    fixing the first learns of the others too (bfloat16's dtype after float16's overflow). The
    cases a diagnosis explains are named by their labels (:func:`normref.checks.core.case_label`,
    whole phrases), at most two, then "and N more cases": shortened by whole cases, never cut."""
    import textwrap

    from .checks.core import case_label

    causes: dict[str, list[str]] = {}  # hint -> the cases it explains
    for why in result.breaches:
        causes.setdefault(" ".join(why.split()), [])
    for c in result.cases:
        if c.passed:
            continue
        if c.message.startswith("case '"):  # a code case, "case '<name>': <what>; <hint>": the hint
            hint = " ".join(c.message.split("': ", 1)[-1].split("; ", 1)[-1].split())
            causes.setdefault(hint, []).append(case_label(c.name))  # a whole phrase, never cut mid-way
        else:  # a short answer's message, whole: it names its answer ("variance: you gave 3: ...")
            causes.setdefault(" ".join(c.message.split()), [])

    def said(hint: str, cases: list[str]) -> str:  # "float16 row [...] and bfloat16 [2, 3, 8]: <hint>"
        if not cases:
            return hint
        if len(cases) <= 2:
            return f"{' and '.join(cases)}: {hint}"
        return f"{cases[0]} and {len(cases) - 1} more cases: {hint}"

    return "\n".join(textwrap.fill(said(hint, cases), 76, initial_indent="- ", subsequent_indent="  ",
                                    break_long_words=False, break_on_hyphens=False)
                      for hint, cases in causes.items() if hint)
