"""One pre-norm transformer block: :func:`check_pre_ln_block` (MiniMind's wiring and names)."""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from ..diagnosis.questions import Question, declare
from ..functional import rms_norm
from ..rules import BLOCK_REFERENCE
from .compare import compare_array, diagnose_by_models, to_f64
from .core import (CaseResult, CheckResult, fail, msg, quick_cut, run, seeded, seeded_module, seeded_randn,
    single_threaded, student_call)
from .module import build
from .placement import alpha_words, deep_models

_BLOCK_ATTRS = ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")
_PART_ATTRS = ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")


def _block_reference(x, A, M, N1, N2):
    h = x + A(N1(x))  # [B, T, D]
    return h + M(N2(h))


def _fresh_rms(v):
    """A student's own extra norm, freshly built: an RMSNorm of weight 1 (the block checker swaps
    in only ``input_layernorm`` and ``post_attention_layernorm``)."""
    return rms_norm(v)


def block_models(x, A, M, N1, N2, got=None):
    """``(fault, output, hint)`` for each miswiring of a pre-norm block on input ``x``, and each
    other known placement of its two sublayers (``got``: the student's output, float64, for the
    fitted DeepNorm block)."""
    h = N1(x) + A(N1(x))
    yield "residual_from_normed", N2(h) + M(N2(h)), None
    h = N1(x + A(x))
    yield "pre_post_swapped", N2(h + M(h)), ("that is a Post-LN block, Norm(x + F(x)) twice; "
                                             "a Pre-LN block adds F(Norm(x)) to x.")
    h = x + A(N2(x))
    yield "norms_swapped", h + M(N1(h)), None
    h = A(N1(x))
    yield "missing_residual", M(N2(h)), "both residual adds are missing: h = x + attn(...), out = h + mlp(...)."
    yield "missing_residual", h + M(N2(h)), ("the first residual add is missing: "
                                             "h = x + self_attn(input_layernorm(x)).")
    h = x + A(N1(x))
    yield "missing_residual", M(N2(h)), ("the second residual add is missing: "
                                         "out = h + mlp(post_attention_layernorm(h)).")
    yield "mlp_reads_x", h + M(N2(x)), None
    yield "shared_norm", h + M(N1(h)), ("input_layernorm was used twice: the feed-forward "
                                        "sublayer has its own post_attention_layernorm.")
    pre = "a Pre-LN block adds each sublayer's output as it is: h = x + self_attn(input_layernorm(x))."
    h = x + N1(A(x))
    yield "norm_on_sublayer_output", h + N2(M(h)), ("that is an Output-LN block (OLMo 2's), x + Norm(F(x)) "
                                                    f"for each sublayer: the norms went after the sublayers; {pre}")
    peri = "that is a Peri-LN block (Gemma 2's), x + Norm(F(Norm(x))) for each sublayer"
    h = x + N1(A(N1(x)))
    yield "is_peri_ln", h + N2(M(N2(h))), (f"{peri}, each sublayer's norm used on its output too; {pre}")
    R = _fresh_rms
    h = x + R(A(N1(x)))
    yield "is_peri_ln", h + R(M(N2(h))), (f"{peri}: your extra norms normalize the sublayers' outputs; {pre}")
    h = x + N2(A(N1(x)))
    yield "is_peri_ln", h + R(M(R(h))), (f"{peri}, with Gemma 2's names: there post_attention_layernorm "
                                         "normalizes attention's output, in MiniMind's block it is the "
                                         f"feed-forward net's input norm; {pre}")

    def deep(a):
        h = N1(a * x + A(x))
        return N2(a * h + M(h))

    yield from deep_models(x, deep, got, "a Pre-LN block adds F(Norm(x)) to x", block=True)


@dataclass
class _BlockCase:
    name: str
    x: object = None  # the build case: forward's input (None: the build is checked by its attributes only)
    parts: object = None  # None: the build case; (attention, feed-forward, norm 1, norm 2), or "own"
    #: the build case: each norm of the freshly built block is called on this large input and
    #: must normalise it (None: not checked)
    norm_x: object = None
    #: the own-submodules case as observed (``CaseResult.observed_case``): ``parts`` are the
    #: student's own four submodules, which the diagnosis traces (never the grammar search: grading
    #: replays only the calls its kernel made on them)
    own: bool = False


_BLOCK_DIM, _BLOCK_HEADS = 8, 2
#: torch's global seed while the student's block is built (the global RNG state is put back after):
#: the own-submodules case's random weights, its numbers and its diagnosis are the same every run
BUILD_SEED = 19
#: The build case: a block built as the assignment says (normref's CausalSelfAttention and
#: FeedForward, two norms) changes a [2, 3, 8] input by 16% to 52% of its size at initialisation
#: (500 random inits); below this fraction, forward has (nearly) returned its input.
MIN_BLOCK_CHANGE = 0.05
#: The build case's norms, at init (weight ones, bias zeros), on a large input: each row of an
#: RMSNorm's output has RMS 1, a LayerNorm's mean 0 and std 1 (so RMS 1 too); a norm whose rows'
#: RMS is off 1 by more than this does not normalise.
NORM_RMS_TOL = 0.1
#: The build case's norm input: ``randn * NORM_X_SCALE + NORM_X_SHIFT`` (rows of RMS ~30).
NORM_X_SCALE, NORM_X_SHIFT = 30.0, 5.0
_NORM_ATTRS = ("input_layernorm", "post_attention_layernorm")


def _block_battery() -> list[_BlockCase]:
    """The public battery of :func:`check_pre_ln_block` (fixed seeds: inputs and gammas from one
    generator, the sublayers' weights from another, never the global RNG)."""
    import torch

    from ..blocks import CausalSelfAttention, FeedForward
    from ..modules import LayerNorm, RMSNorm

    rnd = seeded_randn(19)
    init = torch.Generator().manual_seed(19)  # the sublayers' weights, drawn in turn

    def sublayers():
        return seeded_module(init, CausalSelfAttention, 8, 2), seeded_module(init, FeedForward, 8, 16)

    def norms(cls):  # two norms with different, trained gammas (and betas)
        n1, n2 = cls(8), cls(8)
        with torch.no_grad():
            for n in (n1, n2):
                n.weight.copy_(1 + 0.5 * rnd(8))
                if getattr(n, "bias", None) is not None:
                    n.bias.copy_(0.3 * rnd(8))
        return n1, n2

    return [
        _BlockCase("build: block_cls(8, 2) has input_layernorm, self_attn, post_attention_layernorm, mlp "
                   "(two norms that normalise), and its forward changes a [2, 3, 8] input as a block does",
                   seeded_randn(21)(2, 3, 8),
                   norm_x=seeded_randn(23)(2, 3, 8, scale=NORM_X_SCALE, shift=NORM_X_SHIFT)),
        _BlockCase("wiring [2, 3, 8]: known attention, feed-forward and two RMSNorms with different gammas",
                   rnd(2, 3, 8, scale=2.0), (*sublayers(), *norms(RMSNorm))),
        _BlockCase("wiring [4, 5, 8]: two LayerNorms with different gammas and betas",
                   rnd(4, 5, 8, scale=2.0, shift=0.5), (*sublayers(), *norms(LayerNorm))),
        _BlockCase("your own block on [2, 3, 8]: shape kept, and out = h + mlp(ln2(h)) with your modules",
                   rnd(2, 3, 8), "own"),
    ]


def _build_block(case: str, block_cls):
    if isinstance(block_cls, nn.Module):  # a built block: work on a copy, never on theirs
        m, failed = student_call(case, copy.deepcopy, (block_cls,), record=False)
    else:
        with seeded():
            torch.manual_seed(BUILD_SEED)
            m, failed = build(case, block_cls, (_BLOCK_DIM, _BLOCK_HEADS), {})
    if failed:
        return None, failed
    missing = [a for a in _BLOCK_ATTRS if not callable(getattr(m, a, None))]
    if missing:
        return None, fail(case, f"no {', '.join(missing)}; {msg('missing_attribute')}",
                          "missing_attribute")
    return m, None


#: The own-submodules case's diagnosis when no wiring case named a miswiring: that case is diagnosed
#: by what the wiring cases, with the checker's known submodules, found. Grading replays only the
#: calls the kernel made (the reference wiring over the student's submodules,
#: ``grader.scoring.replay.ReplayClass``), so the other wirings a search of fault models would try cannot
#: be run there: the self-check says what grading can say, whatever its own kernel could run.
OWN_WIRING = ("with your own submodules the output is not h + mlp(post_attention_layernorm(h)), h = x + "
              "self_attn(input_layernorm(x)); the wiring cases name what differs.")


def _own_reference(case: _BlockCase, parts):
    """The reference wiring over the student's own submodules: ``(want f64, None)`` or
    ``(None, failing CaseResult)`` when those submodules alone already fail."""
    want_t, failed = student_call(case.name, _block_reference, (case.x, *parts))
    if failed:
        failed.message = failed.message.replace(
            f"case '{case.name}': ", f"case '{case.name}': your submodules alone: ", 1)
        return None, failed
    if not hasattr(want_t, "shape") or tuple(want_t.shape) != tuple(case.x.shape):
        return None, fail(case.name, "your submodules do not map [B, T, D] to [B, T, D] "
                          f"(got {getattr(want_t, 'shape', type(want_t).__name__)}); "
                          f"{msg('wrong_shape')}", "wrong_shape")
    want = to_f64(want_t)
    change = _change(want, case.x)
    if change < MIN_BLOCK_CHANGE:
        return None, fail(case.name, f"with your own submodules the block changes x by {change:.1%} "
                          f"of its size (a block with CausalSelfAttention and FeedForward: 16% to 52%); "
                          f"{msg('sublayers_add_nothing')}", "sublayers_add_nothing")
    return want, None


def _change(out, x) -> float:
    """How far ``out`` is from ``x``, as a fraction of ``x``'s size (float64; inf when ``out``
    is not finite)."""
    out, x = to_f64(out), to_f64(x)
    if not np.all(np.isfinite(out)):
        return float("inf")
    return float(np.linalg.norm(out - x) / max(np.linalg.norm(x), 1e-30))


def _row_rms(t) -> np.ndarray:
    a = to_f64(t)
    return np.sqrt(np.mean(a * a, axis=-1))


def _norm_case(case: _BlockCase, m) -> CaseResult | None:
    """Each norm of the freshly built block (weight ones, bias zeros) on ``case.norm_x``: its
    rows must come out with RMS 1 (an RMSNorm; a LayerNorm's rows, mean 0 and std 1, too).
    None when both normalise, else the failing case."""
    x = case.norm_x
    rin = _row_rms(x)
    for attr in _NORM_ATTRS:
        with torch.no_grad():
            got, failed = student_call(case.name, getattr(m, attr), (x,), watch=(x,))
        if failed:
            failed.message = failed.message.replace(f"case '{case.name}': ", f"case '{case.name}': {attr}: ", 1)
            return failed
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(x.shape):
            what = list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            return fail(case.name, f"{attr} maps {list(x.shape)} to {what}; a norm keeps the shape",
                        "wrong_shape")
        r = _row_rms(got)
        if np.all(np.isfinite(r)) and np.all(np.abs(r - 1) <= NORM_RMS_TOL):
            continue
        if np.all(np.isfinite(r)) and np.all(np.abs(r / rin - 1) <= NORM_RMS_TOL):
            why = f"its output has the RMS of its input (about {float(np.mean(rin)):.3g})"
        else:
            why = f"its output's rows have RMS {float(np.min(r)):.3g} to {float(np.max(r)):.3g}"
        return fail(case.name, f"{attr} does not normalise: {why}. Freshly built (weight ones, bias "
                    f"zeros), on a [{', '.join(map(str, x.shape))}] input of RMS ~{float(np.mean(rin)):.0f}, "
                    "an RMSNorm gives rows of RMS 1 (a LayerNorm: mean 0, std 1). Use your RMSNorm "
                    "for both norms.", "missing_norm")
    return None


def _build_case(case: _BlockCase, m) -> CaseResult:
    """The build case: two separate norms that normalise (:func:`_norm_case`), and
    ``forward(x)`` with the block's own submodules keeps the shape and changes ``x`` as a block
    does (not its input back)."""
    if m.input_layernorm is m.post_attention_layernorm:
        return fail(case.name, "input_layernorm and post_attention_layernorm are the same "
                    f"object; {msg('shared_norm')}", "shared_norm")
    if case.norm_x is not None:
        failed = _norm_case(case, m)
        if failed:
            return failed
    if case.x is None:
        return CaseResult(case.name, True, f"case '{case.name}': ok")
    with torch.no_grad():
        got, failed = student_call(case.name, m, (case.x,), watch=(case.x,))
    if failed:
        return failed
    if not isinstance(got, torch.Tensor):
        return fail(case.name, f"forward returned {type(got).__name__}; {msg('wrong_type')}", "wrong_type")
    if tuple(got.shape) != tuple(case.x.shape):
        return fail(case.name, f"forward maps {list(case.x.shape)} to {list(got.shape)}; {msg('wrong_shape')}",
                    "wrong_shape")
    change = _change(got, case.x)
    if change == float("inf"):
        return fail(case.name, f"forward's output has NaN or inf; {msg('returns_nan')}", "returns_nan")
    if change < MIN_BLOCK_CHANGE:
        return fail(case.name, f"forward changes x by {change:.1%} of its size (a block with "
                    f"CausalSelfAttention and FeedForward: 16% to 52%); {msg('block_returns_input')}",
                    "block_returns_input")
    return CaseResult(case.name, True, f"case '{case.name}': ok")


def _block_case(case: _BlockCase, block_cls, no_norms: list[str], named: list | None = None) -> CaseResult:
    """One case of :func:`check_pre_ln_block`: the build case (records in ``no_norms`` a norm
    that does not normalise; then no other case is scored), or the wiring with the checker's
    parts or the student's own, against the reference wiring."""
    if no_norms:  # not a pre-norm block: the other cases are not scored (0, as in grading)
        return fail(case.name, f"not scored: {no_norms[0]} does not normalise (see the build case), "
                    "so this is not a pre-norm block", "missing_norm")
    m, failed = _build_block(case.name, block_cls)
    if failed:
        return failed
    if case.parts is None:
        result = _build_case(case, m)
        if result.fault == "missing_norm":
            no_norms.append(next((a for a in _NORM_ATTRS if f"{a} does not normalise" in result.message),
                                 "a norm"))
        return result
    if case.parts == "own":
        parts = tuple(getattr(m, a) for a in _PART_ATTRS)
    else:
        parts = case.parts  # the checker's known submodules replace the student's
        for attr, part in zip(_PART_ATTRS, parts):
            setattr(m, attr, part)
    with torch.no_grad():
        if case.parts == "own":
            want, failed = _own_reference(case, parts)
            if failed:
                return failed
        else:
            want = to_f64(_block_reference(case.x, *parts))
        # the checker's own submodules run inside the student's forward: they may run a reference
        handed = () if case.parts == "own" else parts
        got, failed = student_call(case.name, m, (case.x,), watch=(case.x,), handed_in=handed)
        if failed:
            return failed
        named = [] if named is None else named
        if case.parts == "own":  # the wiring cases' diagnosis: this case's calls are the kernel's record alone
            result = compare_array(case.name, case.x, got, want, lambda g, rtol, atol: (
                named[0] if named else ("wrong_values", OWN_WIRING)))
            if not result.passed:  # the self-check's diagnosis traces the wiring on these very parts
                result.observed_case = replace(case, parts=parts, own=True)
            return result

        def diagnose(g, rtol, atol):
            found = diagnose_by_models(g, want, block_models(case.x, *parts, g), rtol, atol)
            if found[0] not in ("wrong_values", "returns_nan"):
                named.append(found)  # the miswiring, named with the checker's known submodules
            return found

        return compare_array(case.name, case.x, got, want, diagnose)


@single_threaded
def check_pre_ln_block(block_cls, quick: bool = False, *, cases: list[_BlockCase] | None = None) -> CheckResult:
    """Check a student's pre-norm transformer block: one block with its two norms, wired as in
    the seed's MiniMind block.

    The contract: ``block_cls(dim, n_heads)``, called as ``block_cls(8, 2)`` (a class or any
    factory; an already built ``nn.Module`` of width 8 is accepted too and copied, never
    modified) gives an ``nn.Module`` with four attributes, MiniMind's names,

    * ``input_layernorm`` and ``post_attention_layernorm``: two separate norms
      (e.g. :class:`normref.RMSNorm`),
    * ``self_attn``: ``[B, T, D] -> [B, T, D]`` (e.g. :class:`normref.CausalSelfAttention`),
    * ``mlp``: ``[B, T, D] -> [B, T, D]`` (e.g. :class:`normref.FeedForward`),

    and ``forward(x)`` for ``x`` of shape ``[B, T, D]``::

        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))

    The checker builds the block, calls each norm on a large input (freshly built, weight ones:
    each row must come out with RMS 1, as an RMSNorm's or a LayerNorm's does; a norm that does
    not normalise fails the build case and the other cases are not scored), and runs
    ``forward`` on its own submodules: it must keep the
    shape and change ``x`` as a block does (by at least :data:`MIN_BLOCK_CHANGE` of its size;
    a block of normref's attention and feed-forward net changes it by 16% to 52%), so a forward
    that returns its input fails the build case. Then on two cases it replaces the four
    submodules with its own (known weights, two norms with different gammas) so the wiring
    alone is graded, and on the last case runs the student's own submodules in the reference
    wiring (which must not leave ``x`` unchanged either).

    The rule (:mod:`normref.rules`): every ``forward`` and every call of the block's own
    submodules runs under grading's recorder with :data:`normref.rules.BLOCK_REFERENCE`; a
    block whose norms are torch's (``nn.RMSNorm``, a subclass of it) or normref's own
    (``RMSNorm = normref.RMSNorm``) scores 0, as in grading. The checker's swapped-in
    submodules are handed in and may run theirs.

    Args:
        block_cls: the student's class, factory or module.
        quick: run only the first two cases (the build, the wiring with two RMSNorms), the
            assignment's visible check.
        cases: the battery (``_BlockCase``: ``x``, ``parts``, ``norm_x``) to run instead of the
            public one (``None``), e.g. the one grading draws for its run.

    Returns:
        :class:`CheckResult` with four cases. Diagnoses missing_attribute, shared_norm (one norm
        object used twice), missing_norm (a norm of the freshly built block does not normalise:
        the other cases are then not scored), block_returns_input, sublayers_add_nothing,
        residual_from_normed, pre_post_swapped (a Post-LN block), norms_swapped, missing_residual,
        mlp_reads_x, norm_on_sublayer_output (an Output-LN block), is_peri_ln (a Peri-LN block,
        with the block's own norms, extra fresh ones, or Gemma 2's names), residual_scaled (a
        DeepNorm block, alpha fitted), mutates_input and the generic faults. Never raises because
        of what the student's code does.

    Raises:
        Nothing: whatever the student's code does (raising, looping, odd return values)
        becomes a failing case with a message.

    Source: the seed's "Engineering bridge · two norms, one block width" (MiniMind's block);
    Xiong et al. 2020, Fig. 1(b).
    """
    cases, rest = quick_cut(_block_battery() if cases is None else cases, quick)

    no_norms: list[str] = []  # the build case found a norm that does not normalise
    named: list = []  # what the wiring cases found (the own-submodules case says it too)
    result = run("pre-LN block", cases, lambda case: _block_case(case, block_cls, no_norms, named), block_cls,
               "a class or module", reference=BLOCK_REFERENCE, unchecked=rest)
    for case, c in zip(cases, result.cases):
        if case.parts == "own" and not c.passed:
            # its outputs (and errors) depend on each student's random weights: recorded by its
            # fault alone (normref.diagnosis.record: two such cases agree when their faults do)
            c.observed = None
    return result


# --------------------------------------------------------------------------- the question, declared
# (normref.diagnosis: the wiring a block computes, traced with stand-ins for its four parts)


def _block_args(case: _BlockCase):
    """A wiring case's call: ``((x, self_attn, mlp, input_layernorm, post_attention_layernorm), {})``
    (the own-submodules case as observed: with the student's own four)."""
    if case.x is None or case.parts is None or isinstance(case.parts, str):
        return None
    return (case.x, *case.parts), {}


def _block_call(block_cls, args: tuple, kwargs: dict):
    """The student's block built (as the checker builds it), its four parts replaced by
    ``args[1:]``, called on ``args[0]``."""
    from ..diagnosis.trace import as_module

    m, failed = _build_block("trace", block_cls)
    if failed:
        raise RuntimeError("the block could not be built")
    for attr, part in zip(_PART_ATTRS, args[1:]):
        setattr(m, attr, as_module(part))
    return m(args[0])


def _deep_block_form(S, R, sizes):
    """A DeepNorm block, ``N2(a h + mlp(h))`` with ``h = N1(a x + self_attn(x))``, any ``a != 1``."""
    from ..diagnosis import expr as E

    def deep(e, norm, sub, inner):
        if not isinstance(e, E.Call) or e.fn != norm:
            return None
        t = E.terms(e.arg)
        f = E.Call(sub, inner)
        if set(t) != {inner, f} or abs(t[f] - 1) > 1e-9 or t[inner] <= 0 or abs(t[inner] - 1) < 1e-6:
            return None
        return t[inner]

    if not isinstance(S, E.Call) or S.fn != "post_attention_layernorm":
        return None
    h = next((k for k in E.terms(S.arg) if isinstance(k, E.Call) and k.fn == "input_layernorm"), None)
    a1 = deep(h, "input_layernorm", "self_attn", E.Atom("x")) if h is not None else None
    a2 = deep(S, "post_attention_layernorm", "mlp", h) if h is not None else None
    if a1 is None or a2 is None or abs(a1 - a2) > 1e-6:
        return None
    a = alpha_words(a1)
    return "residual_scaled", (f"that is Post-LN with the residual scaled by {a}, a DeepNorm block, "
                               f"Norm(alpha x + F(x)) for each sublayer with alpha = {a} (Wang et al. 2022); "
                               "a Pre-LN block adds F(Norm(x)) to x.")


declare(Question("pre-LN block", "block(x, self_attn, mlp, input_layernorm, post_attention_layernorm)",
                 _block_reference, "the pre-norm block", _block_args, models=block_models, probes=(),
                 identify=False, call=_block_call, forms=_deep_block_form))
