"""One diagnosis for every declared question: what the answer computes, said beside what was
asked, on every failing case.

For a question whose answer takes callables (a placement, a block, QK-norm's logits) or whose
formula is a composition (DyT), the answer's formula is traced (:mod:`.trace`; where the code
cannot be traced, identified from its outputs over a generated space, :mod:`.compose`), and each
failing case reads ``your peri_ln computes norm(x + F(norm(x))); Peri-LN is
x + out_norm(F(norm(x))): out_norm belongs on F's output, ...``: the checker's own words where
the formula *is* one of its fault models (matched canonically, so a coincidence on one case is
never named), else the differences (:mod:`.explain`). For a norm, what the probes and the
outputs show (:mod:`.probes`, :mod:`.measure`): the axes the statistics span, the invariances,
the response to each parameter, the divisor per token, a constant factor and the statistic
that gives it, the step that overflowed.

Every failing case that returned a value ends with at least one measured difference; the
known fault kinds' messages are kept where the formula agrees with them.
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

import numpy as np

from .. import faults as _faults
from . import expr as E
from .explain import differences
from .measure import (describe, divisor_words, factor_words, per_token_factors, token_stats_words)
from .declared import declared_facts
from .probes import dtype_advice, probe_facts, probes_for, run_probes, upcast_contradicts
from .outputs import split
from .questions import Output, Question
from .trace import parts_of as _parts, rebuild as _rebuild

__all__ = ["diagnose", "GENERIC", "KEEP"]

#: Fault kinds that say nothing specific: always rewritten with what was found.
GENERIC = ("wrong_values", "returns_nan", "found_variant")
#: Fault kinds about something else than the values (types, shapes, dtypes, the input changed):
#: never rewritten.
KEEP = ("wrong_type", "wrong_shape", "wrong_dtype", "mutates_input", "timeout", "missing_keepdim", "wrong_axis",
        "nan_on_constant_row", "missing_attribute", "shared_norm", "module_weight", "block_returns_input",
        "sublayers_add_nothing", "wrong_eps", "bwd_not_summed")

_WHERE = re.compile(r"max abs error \S+ \(rel [^)]*\)(?: at index \([^)]*\))?")


def _head(message: str, backend: str) -> str:
    """A failing case's message up to its hint: ``case '...': max abs error ... at index (..)``,
    or ``case '...': raised ValueError: ...``."""
    text = _faults.split_tags(message)[0]
    i = text.rfind("max abs error")
    if i >= 0:
        m = _WHERE.match(text, i)
        if m:
            return text[:m.end()]
    hint = "; " + _faults.message("raises", backend)
    if text.endswith(hint):
        return text[: -len(hint)]
    return text.rsplit("; ", 1)[0]


def _f64(a) -> np.ndarray | None:
    from .probes import _f64 as f

    return f(a)


def _is_tensor(a) -> bool:
    from .._torch import is_tensor

    return is_tensor(a)


def _case_of(result, case):
    return getattr(result, "observed_case", None) or case


def _sizes(args: tuple) -> dict:
    x = next((a for a in args if _is_tensor(a) or isinstance(a, np.ndarray)), None)
    if x is None or not getattr(x, "shape", None):
        return {}
    shape = tuple(x.shape)
    out = {"d": shape[-1]}
    if len(shape) >= 2:
        out["T"] = shape[-2]
        out["tokens"] = int(np.prod(shape[:-1]))
    return out


# --------------------------------------------------------------------------- formulas


def _trace_case(q: Question, fn, args: tuple, kwargs: dict):
    from .trace import trace_answer

    return trace_answer(q, fn, args, kwargs)


def _reference_formula(q: Question, args: tuple, kwargs: dict):
    from ..calling import Timeout
    from .trace import trace

    inputs, callables = _parts(q, args)
    ref = q.formula or q.reference
    try:
        t = trace(lambda syms, stands: ref(*_rebuild(q, args, syms, stands), **kwargs), inputs, callables)
    except Timeout:
        return None
    return None if t is None else t.expr


def _model_formulas(q: Question, args: tuple) -> list[tuple[str, E.Expr, str]]:
    """The checker's fault models on the stand-ins: ``(fault, formula, hint)`` each that traces."""
    from .sym import Sym, Untraceable, _Log
    from .trace import StandIn

    if q.models is None:
        return []
    import torch

    inputs, callables = _parts(q, args)
    log = _Log()
    syms = {n: Sym(v.detach().clone(), E.Atom(n), log) for n, v in inputs.items()}
    stands = {n: StandIn(n, f) for n, f in callables.items()}
    out = []
    gen = q.models(*_rebuild(q, args, syms, stands))
    with torch.no_grad():
        while True:
            try:
                fault, value, hint = next(gen)
            except StopIteration:
                break
            except (Untraceable, Exception):  # noqa: BLE001 - a model the stand-ins do not follow
                break
            if isinstance(value, Sym):
                out.append((fault, value.expr, hint or _faults.message(fault)))
    return out


def _traced_formulas(q: Question, fn, battery: Sequence, results: Sequence) -> dict[int, E.Expr]:
    """``{case index: formula}`` on every case where tracing followed the answer and the traced
    value is what the answer returned there. Traced here (the self-check), or, for a stand-in
    of the student's code that carries the traces made where that code ran (grading's replay,
    :mod:`.handed`), the trace made there of the same call."""
    from ..calling import Timeout
    from .handed import handed_trace
    from .trace import traceable

    handed = getattr(fn, "normref_traced", None) is not None
    if not q.traceable or not (handed or traceable(fn)):
        return {}
    out: dict[int, E.Expr] = {}
    for i, (case, r) in enumerate(zip(battery, results)):
        call = q.args(_case_of(r, case))
        if call is None:
            continue
        args, kwargs = call
        try:
            t = handed_trace(fn, args, kwargs) if handed else _trace_case(q, fn, args, kwargs)
        except Timeout:  # a slow answer is traced no further: the self-check stays quick
            break
        if t is None:
            continue
        seen = getattr(r, "observed", None)
        if seen is not None:
            got, _, rtol, atol = seen
            v = _f64(t.value)
            if v is None or v.shape != got.shape or not np.allclose(v, got, rtol=2 * rtol, atol=2 * atol,
                                                                    equal_nan=True):
                continue  # the stand-ins did not compute what the answer did: not this formula
        out[i] = t.expr
    return out


def _identified_formulas(q: Question, battery: Sequence, results: Sequence) -> dict[int, E.Expr]:
    """The formula the outputs are, from the float32/float64 cases with an output
    (:func:`.compose.identify`), on each of those cases."""
    from .compose import identify

    rows = []
    for i, (case, r) in enumerate(zip(battery, results)):
        seen = getattr(r, "observed", None)
        call = q.args(_case_of(r, case))
        if seen is None or call is None:
            continue
        args, _ = call
        inputs, callables = _parts(q, args)
        x = next(iter(inputs.values()), None)
        if x is None or str(x.dtype).replace("torch.", "") not in ("float32", "float64"):
            continue
        rows.append((i, inputs, callables, seen, not r.passed))
    if not rows or not any(f for *_, f in rows) or not all(r[2] for r in rows):
        return {}
    found = identify([r[1] for r in rows], [r[2] for r in rows], [r[3][0] for r in rows],
                     [(r[3][2], r[3][3]) for r in rows], [r[3][1] for r in rows], [r[4] for r in rows],
                     products=q.products)
    if found is None:
        return {}
    return {i: found.formula(k) for k, (i, *_) in enumerate(rows)}


def _formula_message(q: Question, S: E.Expr, R: E.Expr, models: list, sizes: dict, handed: list) -> tuple:
    """``(fault, text, "your ... computes S", fault kinds of the models that traced)`` for a
    case whose answer computes ``S`` where the reference is ``R``."""
    names = E.intermediates(R, S) if E.size(R) + E.size(S) > 16 else {}
    ctx = {"sizes": sizes, "inputs": tuple(q.notation(p) for p in q.params[:1]), "names": names}

    def said(e: E.Expr) -> str:  # with the names it uses: "... with h = x + self_attn(...)"
        text = E.render(e, sizes, names)
        used = [f"{w} = {E.render(n, sizes)}" for n, w in names.items() if re.search(rf"\b{w}\b", text)]
        return text + (f" with {', '.join(used)}" if used else "")

    head = f"your {q.function} computes {said(S)}"
    kinds = {fault for fault, _, _ in models}
    for fault, formula, hint in models:
        if formula == S:
            return fault, f"{head}; {hint}", head, kinds
    form = q.forms(S, R, sizes) if q.forms is not None else None
    if form is not None:
        return form[0], f"{head}; {form[1]}", head, kinds
    callables = list(handed)
    atoms = [q.notation(p) for p in q.params]
    clauses = differences(S, R, title=q.title, callables=callables, atoms=atoms, ctx=ctx)
    return "other_formula", f"{head}; {q.title} is {said(R)}: " + "; ".join(clauses) + ".", head, kinds


# --------------------------------------------------------------------------- measured facts


def _outputs(q: Question, seen: tuple) -> list[tuple[Output, np.ndarray, np.ndarray]]:
    """``[(output, got, want)]``: each output of one case's record in its own shape, as the
    question declares it (:mod:`.outputs`); nothing for a record that cannot be told apart
    (unnamed, of a question with several outputs)."""
    if not getattr(seen, "parts", ()):
        out = q.output(None)
        return [] if out is None else [(out, np.asarray(seen[0]), np.asarray(seen[1]))]
    return [(q.output(name), g, w) for name, g, w in split(seen)]


def _your(out: Output) -> str:
    return "your output" if out.name == "output" else f"your {out.name}"


def _is(out: Output) -> str:
    return "are" if out.plural else "is"


def _output_facts(q: Question, case_args: tuple, kwargs: dict, seen: tuple) -> tuple[list, list, list]:
    """What the outputs of one case show against the reference's, each output that differs said
    by its name: ``(first, summaries, others)``. Where the record names the output the case
    failed on (:attr:`.outputs.Observed.failed`), ``first`` is what that output shows, its
    per-row summaries (``summaries``) wait until the probes have spoken, and the other outputs'
    facts come last (``others``); otherwise every output's facts are ``first``, in order."""
    _, _, rtol, atol = seen
    sizes = _sizes(case_args)
    x = _f64(case_args[0]) if case_args else None
    failed = getattr(seen, "failed", None)
    first: list[str] = []
    summaries: list[str] = []
    others: list[str] = []
    for out, got, want in _outputs(q, seen):
        if got.shape != want.shape or not np.all(np.isfinite(got)) or \
                np.allclose(got, want, rtol=rtol, atol=atol):
            continue
        strong, weak = _one_output_facts(q, out, x, case_args, kwargs, got, want, rtol, atol, sizes)
        if failed is None:
            first += strong + weak
        elif out.name == failed:
            first, summaries = strong, weak
        else:
            others += strong + weak
    return [f for f in first if f], [f for f in summaries if f], [f for f in others if f]


def _one_output_facts(q: Question, out: Output, x, case_args: tuple, kwargs: dict, got, want, rtol: float,
                      atol: float, sizes: dict) -> tuple[list[str], list[str]]:
    """``(facts, summaries)`` of one output that differs: what it is against the reference's
    (declared measurements, a norm's divisor, 0 everywhere, a constant factor), else its per-row
    statistics and regularities (``summaries``)."""
    facts: list[str] = declared_facts(q, out, case_args, kwargs, got, want, rtol, atol)
    like_x = out.tokens and x is not None and x.shape == got.shape
    if not facts and q.norm and like_x:
        facts += _norm_facts(q, x, case_args, kwargs, got, want, rtol)
    if not facts and np.all(np.abs(got) <= atol) and not np.all(np.abs(want) <= atol):
        facts.append(f"{_your(out)} {_is(out)} 0 everywhere")
    if not facts:
        ratio = _constant_ratio(got, want)
        if ratio is not None:
            w = factor_words(ratio, sizes)
            said = f" = {w}" if w and w != f"{ratio:g}" else ""
            facts.append(f"{_your(out)} {_is(out)} the reference's times {ratio:.4g}{said}")
    if facts:
        return facts, []
    summaries: list[str] = []
    if out.tokens:
        t = token_stats_words(got, want, q.title, out.name, out.rows)
        if t:
            summaries.append(t)
    if not summaries and out.tokens:
        t = describe(x if like_x else None, got, want, out.name, out.rows)
        if t:
            summaries.append(t.removeprefix("measured: ").rstrip("."))
    return [], summaries


def _norm_facts(q: Question, x: np.ndarray, args: tuple, kwargs: dict, got, want, rtol: float) -> list[str]:
    """A norm's outputs read: the weight's role per feature, what each token is divided by."""
    d = x.shape[-1]
    w = _f64(args[1]) if len(args) > 1 and args[1] is not None else None
    b = _f64(args[2]) if q.norm == "layer" and len(args) > 2 and args[2] is not None else None
    off = 0.0 if b is None else b
    g, r = (got - off).reshape(-1, d), (want - off).reshape(-1, d)
    tol = max(2e-3, 3 * rtol)
    if w is not None and b is not None and w.shape == b.shape == (d,) and np.all(np.abs(w) > 1e-6):
        xhat = r / w  # the reference's normalized values
        if np.allclose(got.reshape(-1, d), xhat * b + w, rtol=tol, atol=tol) and not np.allclose(w, b):
            return [f"your output is xhat * bias + weight: the weight and bias are swapped, where {q.title} "
                    "computes xhat * weight + bias"]
    if w is not None and w.shape == (d,):
        rr = (r * r).sum(0)
        if np.all(rr > 1e-12):
            per = (g * r).sum(0) / rr
            if np.allclose(g, per * r, rtol=tol, atol=1e-6 + tol * np.abs(r).max()):
                for words, f in (("1 + weight: your output is multiplied by (1 + weight) where the weight itself "
                                  "belongs "
                                  "(Gemma's RMSNorm stores its weight as an offset from 1; here weight is gamma)",
                                  (1 + w) / w),
                                 ("1 / weight**2: you divide by the weight where the weight multiplies", 1 / (w * w)),
                                 ("weight: the weight is applied twice", w)):
                    if np.all(np.isfinite(f)) and not np.allclose(f, 1) and np.allclose(per, f, rtol=tol):
                        return [f"per feature, your output is the reference's times {words}"]
    k = per_token_factors(got, want, b)
    if k is None:
        return _offset_fact(q, got, want, b)
    eps = float(kwargs.get("eps", 0.0))
    rows = x.reshape(-1, d)
    if q.norm == "layer":
        centred = rows - rows.mean(-1, keepdims=True)
        ref_div = np.sqrt(rows.var(-1) + eps)
        words = divisor_words(centred, k, ref_div, ("std1", "var", "l2", "mean_abs", "max_abs", "std"), tol, eps)
        if words is None:
            words = divisor_words(rows, k, ref_div, ("rms_c",), tol, eps)
    else:
        ref_div = np.sqrt((rows * rows).mean(-1) + eps)
        words = divisor_words(rows, k, ref_div, ("rms", "std", "std1", "l2", "ms", "mean_abs", "max_abs"), tol, eps)
    lo, hi = float(np.min(k)), float(np.max(k))
    spread = f"{lo:.3g}" if abs(hi - lo) <= 1e-3 * max(1.0, abs(hi)) else f"{lo:.3g} to {hi:.3g}"
    if words:
        div = "sqrt(var + eps)" if q.norm == "layer" else "sqrt(mean(x**2) + eps)"
        return [f"measured per token, your output is the reference's times {spread}: you divide each token by "
                f"{words}, where {q.title} divides by {div}"]
    if abs(hi - lo) > 1e-3 * max(1.0, abs(hi)):
        return [f"each token's output is the reference's times its own factor ({spread}): the number you divide "
                "each token by is off by a different amount per token"]
    return []


def _offset_fact(q: Question, got, want, b) -> list[str]:
    """A shift per feature, the same at every token (what is added after normalizing differs)."""
    d = want.shape[-1]
    delta = (got - want).reshape(-1, d)
    if delta.shape[0] < 2 or not np.allclose(delta, delta[:1], rtol=1e-3, atol=1e-5):
        return []
    o = delta[0]
    said = "per feature, your output is the reference's shifted by the same amount at every token"
    if b is not None:
        for words, f in (("the bias is added twice", b),
                         ("the mean of the bias is added instead of the bias itself", np.mean(b) - b)):
            if np.allclose(o, f, rtol=1e-3, atol=1e-5):
                return [f"{said}: {words}"]
    return [f"{said} ({float(o.min()):.3g} to {float(o.max()):.3g}): what {q.title} adds after normalizing "
            "differs in yours"]


def _constant_ratio(got: np.ndarray, want: np.ndarray) -> float | None:
    """The one factor between ``got`` and ``want``, read on at least two entries (one entry's
    ratio is no evidence of a factor)."""
    mask = np.abs(want) > 1e-3 * max(1e-12, float(np.max(np.abs(want))))
    if mask.sum() < 2:
        return None
    r = got[mask] / want[mask]
    c = float(np.median(r))
    if abs(c - 1) < 1e-3 or not np.allclose(r, c, rtol=2e-3, atol=1e-6):
        return None
    return c


def _largest_difference(q: Question, seen: tuple) -> str | None:
    """Where the outputs differ most: in the output the case failed on where the record names it
    (:attr:`.outputs.Observed.failed`), else in the output that differs most, at an index of its
    own shape (None when the record's outputs cannot be told apart)."""
    best = None
    failed = getattr(seen, "failed", None)
    for out, got, want in _outputs(q, seen):
        if got.shape != want.shape or not got.size or (failed is not None and out.name != failed):
            continue
        diff = np.abs(np.nan_to_num(got - want, nan=np.inf))
        k = int(np.argmax(diff))
        if best is None or diff.flat[k] > best[0]:
            best = (float(diff.flat[k]), out, got, want, k)
    if best is None:
        return None
    _, out, got, want, k = best
    idx = tuple(int(i) for i in np.unravel_index(k, got.shape))
    g, w = float(got[idx]), float(want[idx])
    if out.name == "output":
        return f"where they differ most, at {idx}, yours is {g:.4g} and the reference's {w:.4g}"
    return (f"where your {out.name} and the reference's differ most, at {idx}, yours is {g:.4g} and the "
            f"reference's {w:.4g}")


# --------------------------------------------------------------------------- the diagnosis


def _rewritable(r, backend: str) -> bool:
    if r.passed or r.fault in KEEP:
        return False
    if getattr(r, "observed", None) is not None:
        return True
    if r.fault in GENERIC and getattr(r, "observed_case", None) is not None:
        return True  # a call the checker names (its output not kept, e.g. on the student's own modules)
    text = _faults.split_tags(r.message)[0]
    return r.fault == "raises" and text.endswith("; " + _faults.message("raises", backend))


def diagnose(q: Question, battery: Sequence, results: Sequence, answer=None, call: Callable | None = None,
             backend: str = "torch", search: Callable | None = None) -> None:
    """Rewrite the failing cases of one check run in place (see the module's docstring).

    Args:
        q: the question.
        battery, results: the checker's cases and their ``CaseResult`` (``observed`` is
            ``(got, want, rtol, atol)`` where the output was compared by value).
        answer: the student's function or class (traced where it is code; never called on the
            stand-ins when it is a grader's replay).
        call: ``call(answer_or_fn, args, kwargs) -> output or None``: the checker's safe call of
            student code, for the probes (recorded like the battery's calls).
        search: ``search(results) -> None``: the grammar search of :func:`normref.diagnosis.refine`,
            run first on a norm question (its names are kept).
    """
    failing = [r for r in results if not r.passed]
    if not failing:
        return
    if search is not None:
        search()
    traced = _traced_formulas(q, answer, battery, results) if answer is not None else {}
    formulas = traced or (_identified_formulas(q, battery, results) if q.identify and q.models is not None else {})
    if q.formula_is_answer:
        formulas = {}  # said beside the reference's formula, which is the answer: never
    facts, probed = _probe_facts(q, battery, answer, call)
    not_precision = upcast_contradicts(probed)
    advice = dtype_advice(probed, q.params, backend)
    for r in results:  # the output's dtype, where it comes from when "cast back" is not the advice
        if advice and r.fault == "wrong_dtype" and not r.passed:
            text = _faults.split_tags(r.message)[0]
            hint = "; " + _faults.message("wrong_dtype", backend)
            if text.endswith(hint):
                r.message = f"{text[: -len(hint)]}; {advice}. {_faults.format_tag('wrong_dtype')}"
    source = next((i for i in formulas if not results[i].passed), next(iter(formulas), None))
    # a fault kind the checker gave every failing case it compared by value: a model that fits the
    # whole battery (one that fits some cases only is a coincidence of those inputs)
    valued = [r.fault for r in results if not r.passed and getattr(r, "observed", None) is not None]
    consistent = set(valued) if len(set(valued)) == 1 else set()
    said: dict[int, tuple] = {}  # a formula's case -> (fault, text), each formula said once

    def formula_text(j: int) -> tuple:
        if j not in said:
            jargs, jkw = q.args(_case_of(results[j], battery[j]))
            R = _reference_formula(q, jargs, jkw)
            S = formulas[j]
            said[j] = (None, None, None, set()) if R is None or S == R else _formula_message(
                q, S, R, _model_formulas(q, jargs), _sizes(jargs), list(_parts(q, jargs)[1]))
        return said[j]

    for i, (case, r) in enumerate(zip(battery, results)):
        contradicted = r.fault == "low_precision_stats" and not_precision is case
        if not (_rewritable(r, backend) or contradicted):
            continue
        c = q.args(_case_of(r, case))
        if c is None:
            continue
        args, kwargs = c
        head = _head(r.message, backend)
        fault, text = (None, None)
        if formulas:  # said on the case's own formula, else on one traced elsewhere (its words)
            fault, text, says, kinds = formula_text(i if i in formulas else source)
            if fault == "other_formula" and r.fault in consistent and r.fault not in GENERIC + tuple(kinds):
                # a known mistake whose model the stand-ins cannot follow: the checker's words stand
                hint = _faults.split_tags(r.message)[0][len(head):].lstrip("; ")
                fault, text = r.fault, f"{says}; {hint}"
        if text is None and r.fault == "found_variant":
            continue  # the grammar search named it
        if text is None and r.fault not in GENERIC and r.fault != "raises" and not contradicted:
            continue  # a known fault kind the formula does not contradict
        if text is None:
            seen = getattr(r, "observed", None)
            found = list(q.facts(args, kwargs, seen) or []) if q.facts is not None and seen is not None else []
            first, summaries, others = (_output_facts(q, args, kwargs, seen) if seen is not None and not found
                                        else ([], [], []))
            found += first
            if contradicted:
                found.insert(0, "on the same values in float32 your output is wrong too, so float16 is not what "
                             "fails here")
            found += [f for f, where in facts.values() if f not in found and (
                where is None or (where is case and (seen is None or _probed_differs(q, seen))))]
            found += summaries + others
            if seen is not None and not found:
                found = [w for w in (_largest_difference(q, seen),) if w]
            if not found:
                continue
            base = _faults.message(r.fault, backend) if r.fault == "returns_nan" else None
            text = "; ".join(([base.rstrip(".")] if base else []) + found[:2]) + "."
            fault = r.fault if r.fault in ("returns_nan", "raises") else "measured"
            if contradicted:
                text = text.replace("float16 is not what fails here; ", "float16 is not what fails here: ", 1)
        r.fault = fault
        r.message = f"{head}; {text} {_faults.format_tag(fault)}"


def _probe_facts(q: Question, battery: Sequence, answer, call) -> tuple[dict, list]:
    """``(facts, probes made)``: :func:`.probes.probe_facts` of the question's probes."""
    probes = probes_for(q.params, q.norm is not None) if q.probes is None else q.probes
    if not probes or answer is None or call is None:
        return {}, []

    def args_of(case):
        c = q.args(case)
        return c if c is not None else ((), {})

    usable = [c for c in battery if q.args(c) is not None]
    index, out = _probed_output(q)
    n = len(q.outputs)

    def pick(o):  # the probed output of an answer of several
        if index is None:
            return _f64(o)
        return _f64(o[index]) if isinstance(o, (tuple, list)) and len(o) == n else None

    probed = run_probes(probes, q.params, usable, args_of, lambda a, k: call(answer, a, k),
                        lambda *a, **k: q.reference(*a, **k), pick=pick, mask=q.mask)
    return probe_facts(probed, q.title, q.norm, q.params, out.name, q.mask), probed


def _probed_differs(q: Question, seen: tuple) -> bool:
    """Whether the output the probes read differs in one case's record (a probe said of that
    case alone, the float16 step that overflowed, is about that output)."""
    name = _probed_output(q)[1].name
    for out, got, want in _outputs(q, seen):
        if out.name == name:
            _, _, rtol, atol = seen
            return got.shape != want.shape or not np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    return True


def _probed_output(q: Question) -> tuple[int | None, Output]:
    """``(index, output)`` the probes read: a question's only output (index None), else the
    first declared output whose rows are tokens."""
    if len(q.outputs) == 1:
        return None, q.outputs[0]
    i = next((i for i, o in enumerate(q.outputs) if o.tokens), 0)
    return i, q.outputs[i]
