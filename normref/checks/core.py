"""What every checker shares: the results, calling student code safely, and the one seeded
input helper (comparing arrays is :mod:`normref.checks.compare`).

A student function that raises, loops, returns the wrong kind/shape/dtype, returns NaN or
modifies its input gets a clear message; the checker itself never raises because of it.
While the student's code runs, warnings and anything written to ``sys.stderr`` are swallowed
(nbgrader scores a test cell 0 if anything reaches stderr) and torch's default dtype is
restored afterwards.
"""
from __future__ import annotations

import contextlib
import functools
import io
import signal
import threading
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .. import faults as _faults
from .._torch import import_if_named, is_tensor, loaded
from ..rules import reference_calls_in, rule_message

CALL_TIMEOUT_S = 5.0


def msg(kind: str, backend: str = "torch", norm: str = "layer") -> str:
    """The registry's sentence for fault ``kind`` in ``backend``'s (and ``norm``'s) words."""
    return _faults.message(kind, backend, norm)


def backend_of(x) -> str:
    """``"numpy"`` for a numpy array (or anything not a torch tensor), else ``"torch"``."""
    return "numpy" if isinstance(x, np.ndarray) else "torch"


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
        breaches: rules that cost points (:mod:`normref.rules`), one sentence each, e.g.
            ``"calls F.rms_norm: grading gives this question 0 — implement it with tensor
            operations"``; any breach makes the score 0, as grading will.
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
        the same rule breaches."""
        return CheckResult(self.name, self.cases[:n], list(self.breaches))

    @property
    def problem(self) -> str:
        """What grading would hold against this result first, for an error message: the first
        broken rule, else the first failing case's diagnosis (without the case name and the
        raw error it explains, e.g. ``"use keepdim=True ..."`` rather than ``"raised
        RuntimeError: The size of tensor a (8) ..."``); ``""`` when passed. Wrapped for
        ``nbgrader validate``, which cuts every line of an error at 80 columns: the first line
        at 60 (``assert quick.passed, quick.problem`` shows it after ``"AssertionError: "``),
        the others at 76."""
        import textwrap

        why = ""
        if self.breaches:
            why = self.breaches[0]
        else:
            for c in self.cases:
                if not c.passed:  # a code case's "case '<name>': raised ...; <hint>": the hint
                    why = (c.message.split("': ", 1)[-1].split("; ", 1)[-1]
                           if c.message.startswith("case '") else c.message)
                    break
        # one wrap of the whole text, the first line 16 columns shorter: words are never cut
        # (cutting the text after a first wrap, whose whitespace it had collapsed, broke
        # "torch.float16" into "t" / "orch.float16")
        pad = " " * 16
        lines = textwrap.wrap(why, 76, initial_indent=pad, break_long_words=False, break_on_hyphens=False)
        return "\n".join([lines[0][len(pad):], *lines[1:]] if lines else [])

    def report(self) -> str:
        """The human summary shown in self-check and grader cells (no internal tags)."""
        n_ok = sum(c.passed for c in self.cases)
        head = f"{self.name}: {n_ok}/{len(self.cases)} cases passed (score {self.score:.2f})"
        if self.passed:
            return head + " - all correct."
        return "\n".join([head] + ["  x " + b for b in self.breaches] + ["  x " + m for m in self.messages])

    __str__ = report

    def __repr__(self) -> str:
        return self.report()

    def _repr_mimebundle_(self, include=None, exclude=None):
        """What ``display(result)`` (or a cell ending in it) shows: the report as plain text,
        with the fault kinds in the output's metadata (JupyterLab and nbconvert's HTML do not
        render metadata)."""
        return {"text/plain": self.report()}, _faults.output_metadata(self.faults, self.variants)

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
            print(self.report())
            return
        display({"text/plain": self.report()}, raw=True,
                metadata=_faults.output_metadata(self.faults, self.variants))


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
        n = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return checker(*args, **kwargs)
        finally:
            torch.set_num_threads(n)

    return wrapper


class _Timeout(Exception):
    pass


def _call_with_timeout(fn: Callable, args: tuple, kwargs: dict, timeout: float):
    """Call ``fn`` with warnings and stderr swallowed (nbgrader scores a test cell 0 if anything
    reaches stderr) and torch's default dtype restored; on the main thread of a Unix process,
    stop it after ``timeout`` seconds. A call that imports torch itself (a numpy answer) finds
    its default dtype float32 afterwards, as torch starts."""
    torch = loaded()
    default_dtype = torch.get_default_dtype() if torch is not None else None
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            return _call_alarm(fn, args, kwargs, timeout)
    finally:
        torch = loaded()
        if torch is not None:
            torch.set_default_dtype(default_dtype if default_dtype is not None else torch.float32)


def _call_alarm(fn: Callable, args: tuple, kwargs: dict, timeout: float):
    use_alarm = (
        hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    )
    if not use_alarm:
        return fn(*args, **kwargs)

    def _handler(signum, frame):
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, _handler)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return fn(*args, **kwargs)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _code_names(code) -> set[str]:
    """The global and attribute names a code object reads, its nested functions' included."""
    import types

    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _code_names(c)
    return out


def fail(case: str, text: str, fault: str, max_abs=float("nan"), max_rel=float("nan")) -> CaseResult:
    """A failing case: ``case '<case>': <text>`` with its fault kind. The message carries the
    kind as a ``[fault: ...]`` tag only until :func:`run` has let :mod:`normref.diagnosis` read
    it; :func:`run` removes it before anyone reads the text."""
    return CaseResult(case, False, f"case '{case}': {text} {_faults.format_tag(fault)}", fault,
                      max_abs, max_rel)


def _raised(case: str, e: BaseException, keepdim_hint: bool, backend: str) -> CaseResult:
    text = f"{type(e).__name__}: {e}".strip()
    hint, fault = msg("raises", backend), "raises"
    if isinstance(e, NotImplementedError):
        hint = "not implemented yet: replace `raise NotImplementedError()` with your code."
    elif keepdim_hint and ("size of tensor" in str(e) or "broadcast" in str(e)):
        hint, fault = msg("missing_keepdim", backend), "missing_keepdim"
    elif keepdim_hint and isinstance(e, IndexError) and ("out of range" in str(e) or "out of bounds" in str(e)):
        hint, fault = msg("wrong_axis", backend), "wrong_axis"  # e.g. dim=1 of a 1-D token
    return fail(case, f"raised {text[:300]}; {hint}", fault)


#: While a checker runs (:func:`run`): ``[(reference, found)]``, what counts as running a
#: reference (:class:`normref.handback.ReferenceRecorder`'s arguments, :mod:`normref.rules`)
#: and what the student's calls ran so far. Empty: calls are not recorded.
_RECORDING: list[tuple[dict, list[str]]] = []


@contextlib.contextmanager
def recording(reference: dict | None):
    """Record, in every :func:`student_call` made inside, which reference normalizations the
    student's code runs, with grading's own recorder (:class:`normref.handback.ReferenceRecorder`)
    and grading's lists of names (``reference``, e.g. :data:`normref.rules.NORM_REFERENCE`).
    Yields the list of what was found (``["calls torch's rms_norm"]``). ``None``: nothing is
    recorded."""
    if reference is None:
        yield []
        return
    found: list[str] = []
    reference = dict(reference)
    try:  # the course references' code objects, read once per check (a recorder reads them otherwise)
        from ..handback import reference_codes

        if reference.get("normref_names") and _recorder_takes("codes"):
            reference["codes"] = reference_codes()
    except ImportError:  # a recorder that finds normref's references by their files
        pass
    _RECORDING.append((reference, found))
    try:
        yield found
    finally:
        _RECORDING.pop()


def _recorder_takes(name: str) -> bool:
    """Does :class:`normref.handback.ReferenceRecorder` take this keyword argument?"""
    import inspect as _inspect

    from ..handback import ReferenceRecorder

    return name in _inspect.signature(ReferenceRecorder).parameters


def _recorded(fn: Callable, args: tuple, kwargs: dict, timeout: float, handed_in: tuple = ()):
    """:func:`_call_with_timeout`, under grading's reference recorder while :func:`recording`;
    ``handed_in``: the checker's own objects given to the student's code (a norm, a sublayer,
    a block's swapped-in submodules), which may run a reference, as in grading."""
    if not _RECORDING:
        return _call_with_timeout(fn, args, kwargs, timeout)
    from ..handback import ReferenceRecorder, _recorder_intact

    reference, found = _RECORDING[-1]
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


def _copy(a):
    if is_tensor(a):
        return a.clone()
    if isinstance(a, np.ndarray):
        return np.array(a, copy=True)
    return a


def _same(a, b) -> bool:
    if is_tensor(a):
        return bool(loaded().equal(a, b))
    if isinstance(a, np.ndarray):
        return bool(np.array_equal(a, b, equal_nan=True))
    return True


def run(name: str, cases: list, run_case: Callable, fn=None, what: str = "a function",
        backend: str = "torch", reference: dict | None = None) -> CheckResult:
    """Run ``run_case(case)`` for every case; a checker bug or an odd student object becomes a
    failing case, never an exception.

    Then: the search of :mod:`normref.diagnosis` refines the generic diagnoses; the internal
    ``[fault: ...]``/``[variant: ...]`` tags leave the messages (the kinds stay in
    ``CaseResult.fault``/``.variant``); and the rule of :mod:`normref.rules` is applied as
    grading applies it (a breach makes the score 0, as grading will), worded for ``backend``:
    to what the student's calls ran (``reference``: grading's recorder and lists of names, see
    :func:`recording`), then to ``fn``'s source (the tamper scan's reading).
    """
    result = CheckResult(name)
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
    try:  # name what the generic diagnosis could not (normref.diagnosis: variants of the reference)
        from ..diagnosis import refine

        refine(name, cases, result.cases)
    except Exception:  # noqa: BLE001 - the search only adds to a diagnosis, never breaks a check
        pass
    for c in result.cases:  # the tags were for refine; the student reads the text without them
        c.message, _, variants = _faults.split_tags(c.message)
        c.variant = c.variant or (variants[0] if variants else None)
    # What grading's recorder saw the calls run first (``calls torch's rms_norm``: the words of
    # grading's feedback, whatever the spelling: ``getattr(F, "rms" + "_norm")``, an alias,
    # ``nn.RMSNorm`` as a base class ...), then what the source shows (``calls F.rms_norm``, as
    # the tamper scan reads it; a call on a path these cases did not take).
    seen = [what_ for _, what_ in reference_calls_in(fn)] if fn is not None else []
    result.breaches = list(dict.fromkeys(rule_message(w, backend) for w in ran + seen))
    # What grading's tamper scan (normref.tamper, the grader's own code) removes: a cell that
    # defined this code and breaks a scan rule is gone before grading runs, so the question
    # earns 0 (said first: grading removes the cell before anything runs).
    if fn is not None:
        try:
            result.breaches = scan_breaches(fn, backend) + result.breaches
        except Exception:  # noqa: BLE001 - reading the student's cells never breaks a check
            pass
    return result


# --------------------------------------------------------------------------- grading's tamper scan

#: What a scan finding is called and how to mend it, after "grading removes that cell (...)".
_SCAN_KIND = {"tamper": "it changes how grading works", "reference": "it calls the reference"}


def _remedy(kind: str, what: str, backend: str) -> str:
    if kind == "reference":
        return "implement it with " + ("array operations" if backend == "numpy" else "tensor operations")
    if what.startswith("imports "):
        return "remove the import"
    if what.startswith("IPython magic"):
        return "remove that line"
    return "remove it"


def _user_code(obj, limit: int = 40) -> list:
    """The notebook's own functions (``__main__``'s) that ``obj`` is made of or uses by name:
    itself or its class's methods, then the functions and classes of the notebook that those
    name (a block's ``RMSNorm``, ``pre_ln``), transitively (at most ``limit``)."""
    import types

    def functions(o) -> list:
        if isinstance(o, (types.FunctionType, types.MethodType)):
            return [getattr(o, "__func__", o)]
        if isinstance(o, functools.partial):
            return functions(o.func)
        cls = o if isinstance(o, type) else type(o)
        out = []
        for klass in getattr(cls, "__mro__", ()):
            if getattr(klass, "__module__", None) != "__main__":
                continue
            for v in vars(klass).values():
                v = getattr(v, "__func__", v)
                v = getattr(v, "fget", v)  # a property's getter
                if isinstance(v, types.FunctionType):
                    out.append(v)
        return out

    seen, todo, out = set(), [obj], []
    while todo and len(out) < limit:
        o = todo.pop(0)
        if id(o) in seen:
            continue
        seen.add(id(o))
        for fn in functions(o):
            if fn.__globals__.get("__name__") != "__main__" or fn in out:
                continue
            out.append(fn)
            for n in sorted(_code_names(fn.__code__)):
                v = fn.__globals__.get(n)
                if isinstance(v, (types.FunctionType, type)) and getattr(v, "__module__", None) == "__main__":
                    todo.append(v)
    return out


def _locked_cells(globals_: dict) -> tuple[list[str], str | None]:
    """The notebook's locked cells' sources, as grading reads them (``[]`` when the notebook
    file is not found): the kernel's notebook (JupyterLab's ``JPY_SESSION_NAME``), else the
    only ``.ipynb`` in the working folder (``nbgrader validate`` runs there)."""
    import glob
    import json
    import os

    path = os.environ.get("JPY_SESSION_NAME", "")
    if path.endswith(".ipynb") and not os.path.isfile(path):
        path = os.path.basename(path)  # relative to the server's root; the kernel runs in its folder
    if not (path.endswith(".ipynb") and os.path.isfile(path)):
        found = glob.glob("*.ipynb")
        path = found[0] if len(found) == 1 else None
    if not path:
        return [], None
    try:
        with open(path, encoding="utf-8") as f:
            nb = json.load(f)
        out = []
        for c in nb.get("cells", []):
            if c.get("cell_type") == "code" and c.get("metadata", {}).get("nbgrader", {}).get("locked"):
                src = c.get("source", "")
                out.append("".join(src) if isinstance(src, list) else src)
        return out, path
    except (OSError, ValueError, AttributeError):
        return [], None


def _protected_from(globals_: dict) -> dict:
    """What the locked cells bind, read from the notebook's names when the notebook file is not
    at hand: its modules (``torch``, ``nn``, ``F``) and what it imported from ``normref``."""
    import types

    out: dict = {}
    for k, v in list(globals_.items()):
        if k.startswith("_"):
            continue
        if isinstance(v, types.ModuleType):
            out[k] = v.__name__
        elif str(getattr(v, "__module__", "")).split(".")[0] == "normref" and callable(v):
            import normref
            from .. import handback as _hb

            if getattr(normref, k, None) is v:
                out[k] = f"normref.{k}"
            elif getattr(_hb, k, None) is v:
                out[k] = f"normref.handback.{k}"
            else:
                out[k] = f"{v.__module__}.{k}"
    return out


def _cell_number(source: str, globals_: dict) -> int | None:
    """The execution count of the cell whose code is ``source`` (IPython's ``In``), latest first."""
    hist = globals_.get("In")
    if not isinstance(hist, list):
        try:
            from IPython import get_ipython

            ip = get_ipython()
            hist = ip.user_ns.get("In") if ip is not None else None
        except ImportError:  # pragma: no cover
            hist = None
    if not isinstance(hist, list):
        return None
    want = source.strip()
    for i in range(len(hist) - 1, 0, -1):
        if isinstance(hist[i], str) and hist[i].strip() == want:
            return i
    return None


def scan_breaches(obj, backend: str = "torch") -> list[str]:
    """Grading's tamper scan (:func:`normref.tamper.scan`, the grader's own code) on the cells
    that defined ``obj`` and the notebook code it uses, as the kernel executed them (each
    function's cell, read from ``linecache``, where IPython keeps it).

    Grading removes such a cell before it runs the notebook, so a question that needs it earns
    0; this says so, e.g. ``"cell [3], line 1: imports threading: grading removes that cell (it
    changes how grading works), so grading gives this question 0 — remove the import"``.
    Locked cells are not scanned (as in grading). ``[]`` when nothing is flagged or nothing
    can be read (code outside a notebook).
    """
    import linecache
    import os

    from ..tamper import protected_bindings, scan

    fns = _user_code(obj)
    if not fns:
        return []
    globals_ = fns[0].__globals__
    locked, _ = _locked_cells(globals_)
    locked_set = {s.strip() for s in locked}
    protected = protected_bindings(locked) if locked else _protected_from(globals_)
    out, done = [], set()
    for fn in fns:
        fname = fn.__code__.co_filename
        if fname in done or (os.path.isfile(fname) and "ipykernel_" not in fname):
            continue  # a script or a module file, not a notebook cell: grading scans cells only
        done.add(fname)
        source = "".join(linecache.getlines(fname, fn.__globals__))
        if not source.strip() or source.strip() in locked_set:
            continue
        findings = scan(source, protected)
        if not findings:
            continue
        n = _cell_number(source, fn.__globals__)
        where = f"cell [{n}]" if n is not None else f"the cell that defines {fn.__qualname__.split('.')[0]}"
        out += _say(where, findings, backend)
    # the names these functions use that another cell bound (``import math`` in cell [2]): that
    # cell, as IPython's ``In`` has it (the latest cell that binds the name)
    # (not the names the locked cells bind: grading has those whatever the student's cells do)
    always = set(protected) if locked else {k for k, v in protected.items()
                                            if k in ("torch", "nn", "F", "np") or str(v).startswith("normref")}
    for n, source in _binding_cells(fns, locked_set, always):
        out += _say(f"cell [{n}]", scan(source, protected), backend)
    return list(dict.fromkeys(out))


def _say(where: str, findings: list, backend: str) -> list[str]:
    out = []
    for f in findings:
        out.append(f"{where}, line {f.line}: {f.what}: grading removes that cell ({_SCAN_KIND[f.kind]}), "
                   f"so grading gives this question 0 \u2014 {_remedy(f.kind, f.what, backend)}")
    return out


def _top_bindings(source: str) -> set[str]:
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    return out


def _binding_cells(fns: list, locked: set, always: set) -> list[tuple[int, str]]:
    """``[(execution count, source)]`` of the cells in IPython's ``In`` that last bound a name
    the functions ``fns`` read from the notebook's globals (a module, a constant), other than
    the functions' own cells, the locked cells and the names in ``always`` (the locked cells')."""
    import linecache

    hist = fns[0].__globals__.get("In")
    if not isinstance(hist, list):
        return []
    own = {"".join(linecache.getlines(f.__code__.co_filename, f.__globals__)).strip() for f in fns}

    wanted = set()
    for f in fns:
        wanted |= {n for n in _code_names(f.__code__) if n in f.__globals__ and n not in always}
    out = []
    for i in range(len(hist) - 1, 0, -1):
        if not wanted:
            break
        src = hist[i] if isinstance(hist[i], str) else ""
        if not src.strip() or src.strip() in own:
            continue
        bound = wanted & _top_bindings(src)
        if bound:
            wanted -= bound
            if src.strip() not in locked:
                out.append((i, src))
    return out


# --------------------------------------------------------------------------- seeded inputs


def seeded_randn(seed: int) -> Callable:
    """A battery's input maker: ``rnd(*shape, scale=1.0, shift=0.0)`` draws
    ``randn(*shape) * scale + shift`` (float32) from its own ``torch.Generator`` seeded with
    ``seed``, so a battery's inputs never depend on, or change, the global RNG."""
    import torch

    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, scale: float = 1.0, shift: float = 0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    return rnd


@contextlib.contextmanager
def seeded():
    """Keep the caller's global torch RNG state untouched by the checker's own seeding."""
    import torch

    state = torch.random.get_rng_state()
    try:
        yield
    finally:
        torch.random.set_rng_state(state)
