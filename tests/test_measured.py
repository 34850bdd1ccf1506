"""Issue 31 items 2 and 3: norms and their parameters are measured, and "the values differ" is
never the whole message.

- Each norm question names a measured property in the student's words: the weight's role per
  feature, what each token is divided by, the response to shifting a token, to each parameter,
  to alpha against x, where the output levels off, the float16 values in float32 (and a false
  overflow claim is withdrawn when the float32 answer is wrong too), a gradient's invariants and
  a constant factor with the count that gives it.
- Every wrong answer the suite knows (the answer banks of grader/demo, the checkers' fault models
  played as answers, the tests' wrong answers, the corpus) gets, on every failing case that
  returned a value, at least one measured difference.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from torch import nn

from grader.scoring.questions import assignment_module
from normref import checks
from normref.diagnosis.measure import factor_words
from normref.diagnosis.probes import probe_facts, run_probes

_grader_backward = assignment_module("layernorm_backward", "reference")  # the backward's grammar, as grading has it


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class Opaque:
    """An answer the tracer cannot be given (as grading's replay of the outputs)."""

    def __init__(self, f):
        self.f = f

    def __call__(self, *a, **k):
        return self.f(*a, **k)


def failing(r):
    return [c for c in r.cases if not c.passed]


def _rms(x, weight, eps, scale=None):
    h = x.float()
    out = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return out * (weight if scale is None else scale)


# ------------------------------------------------------------------ norms


def test_a_weight_used_as_gemmas_offset_is_read_per_feature():
    r = checks.check_rms_norm(lambda x, w, eps=1e-6: _rms(x, w, eps, 1 + w).to(x.dtype))
    assert failing(r) and all("per feature, your output is the reference's times 1 + weight" in c.message
                              for c in failing(r)), r.report()


def test_what_each_token_is_divided_by_is_read_from_the_outputs():
    def std_n_minus_1(x, w, eps=1e-6):
        h = x.float()
        return (h / (h.std(-1, keepdim=True) + eps) * w).to(x.dtype)

    r = checks.check_rms_norm(std_n_minus_1)
    said = [c for c in failing(r) if "you divide each token by its standard deviation with n-1" in c.message]
    assert len(said) >= 4 and r.faults == ["measured"], r.report()

    def uncentred(x, w, b, eps=1e-5):
        h = x.astype(np.float32)
        m = h.mean(-1, keepdims=True)
        return ((h - m) / np.sqrt((h * h).mean(-1, keepdims=True) + eps) * w + b).astype(x.dtype)

    r = checks.check_layer_norm(uncentred, "numpy")
    assert "you divide each token by sqrt(mean(x**2)) of x itself, not of x - mean" in r.cases[0].message
    assert "adding 5 to every feature of one token changes your output for it, where LayerNorm's stays the " \
           "same" in r.cases[3].message, r.report()
    # the float16 row of mean 1900 comes out wrong; its float32 values do too: no overflow is claimed
    f16 = next(c for c in r.cases if c.name.startswith("float16"))
    assert f16.fault == "measured" and "float16 is not what fails here" in f16.message, f16.message


def test_the_float16_step_that_overflowed_is_named_when_float32_is_right():
    def stats_in_float16(x, w, b, eps=1e-5):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + eps) * w.astype(x.dtype) + b.astype(x.dtype)

    from normref.checks.norms import battery
    from normref.functional import layer_norm

    cases = battery("layer", "numpy")
    probed = run_probes(("upcast",), ("x", "weight", "bias", "eps"), cases,
                        lambda c: ((c.x, c.weight, c.bias), {"eps": c.eps}),
                        lambda a, k: stats_in_float16(*a, **k), layer_norm)
    facts = probe_facts(probed, "LayerNorm", "layer", ("x", "weight", "bias", "eps"))
    assert "(x - mean)**2 (up to 90000) overflows float16, whose largest number is 65504" in facts["upcast"][0]


@pytest.mark.parametrize("student, probe, words", [
    (lambda x, w, eps=1e-6: (x.float() * torch.rsqrt(x.float().pow(2).mean() + eps) * w).to(x.dtype), "element",
     "changes your outputs of other tokens too (along axis 0 (the batch), axis 1 (the sequence))"),
    (lambda x, w, eps=1e-6: (x.float() / (x.float().pow(2).mean(-1, keepdim=True) + eps) * w).to(x.dtype), "scale",
     "multiplying one token by 3 multiplies your output for it by 0.333 = 3^-1: you divide by the square"),
    (lambda x, w, eps=1e-6: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w).to(x.dtype),
     "eps", "changing eps does not change your output: the eps you are given is not used"),
    (lambda x, w, eps=1e-6: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps) + w).to(x.dtype),
     "weight", "the weight is added, where RMSNorm multiplies by it"),
])
def test_each_probe_says_how_the_output_responds(student, probe, words):
    from normref.checks.norms import battery
    from normref.functional import rms_norm

    params = ("x", "weight", "eps")
    probed = run_probes((probe,), params, battery("rms", "torch"), lambda c: ((c.x, c.weight), {"eps": c.eps}),
                        lambda a, k: student(*a, **k), rms_norm)
    facts = probe_facts(probed, "RMSNorm", "rms", params)
    assert probe in facts and words in facts[probe][0], facts


def test_a_module_is_measured_on_its_outputs():
    class GemmaWeight(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return _rms(x, self.weight, self.eps, 1 + self.weight).to(x.dtype)

    r = checks.check_rms_norm_module(GemmaWeight)
    assert r.cases[0].passed and failing(r), r.report()
    assert all("1 + weight" in c.message for c in failing(r)), r.report()


# ------------------------------------------------------------------ DyT (as grading sees it) and the backward


@pytest.mark.parametrize("student, words", [
    (lambda x, a, w, b: torch.tanh(a * x.float()).to(x.dtype),
     "changing the weight (gamma) does not change your output: yours does not use it"),
    (lambda x, a, w, b: (torch.tanh(a * w * x.float()) + b).to(x.dtype),
     "your output levels off at +-1 around the bias, where DyT's levels off at +-weight"),
    (lambda x, a, w, b: (w * torch.tanh(x.float() / a) + b).to(x.dtype),
     "doubling alpha does to your output what halving x does: your alpha divides x"),
    (lambda x, a, w, b: (w * torch.tanh(x.float()) + b).to(x.dtype) if False else
     (w * torch.tanh(0.5 * x.float()) + b).to(x.dtype), "changing alpha does not change your output"),
])
def test_dyt_is_measured_where_it_cannot_be_traced(student, words):
    r = checks.check_dyt(Opaque(student))
    said = [c for c in failing(r) if c.fault == "measured"]
    assert said and all(words in c.message for c in said), r.report()


def _bwd(dy, x, w, eps, mean_dbias=False, flip=False, sums=False, ddof=0, var_sum=False):
    xc = x - x.mean(-1, keepdims=True)
    r = 1 / np.sqrt((xc**2).sum(-1, keepdims=True) / (x.shape[-1] - ddof) + eps)
    xhat, g = xc * r, dy * w
    red = np.sum if sums else np.mean
    var_red = np.sum if var_sum or sums else np.mean
    dx = r * (g - red(g, -1, keepdims=True)
              - (-1 if flip else 1) * xhat * var_red(g * xhat, -1, keepdims=True))
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xhat).sum(lead), dy.mean(lead) if mean_dbias else dy.sum(lead)


@pytest.mark.parametrize("kw, words", [
    ({"mean_dbias": True}, "your dbias is the true one times 0.1667 = 1/6 = 1/(number of tokens): you averaged"),
    ({"flip": True}, "the gradient through the variance in your dx has the wrong sign"),
    ({"sums": True}, "the gradient through the mean in your dx is 8 = d times the true one: a sum over the d "
                     "features where a mean belongs; the gradient through the variance in your dx is 8 = d times"),
])
def test_a_gradient_is_measured_by_its_own_properties(kw, words):
    r = checks.check_layer_norm_backward(lambda dy, x, w, eps=1e-5: _bwd(dy, x, w, eps, **kw))
    assert r.faults == ["measured"] and any(words in c.message for c in failing(r)), r.report()


@pytest.mark.parametrize("kw, words", [
    # the recomputed forward's variance with ddof=1, the rest of the derivation right
    ({"ddof": 1}, "your dx and dweight are those of a variance {k} = d/(d-1) times LayerNorm's, as if you divided "
                  "the sum of squares by n-1 (the unbiased variance) instead of n"),
    ({"var_sum": True}, "the gradient through the variance in your dx is {d} = d times the true one: a sum over the d "
                        "features where a mean belongs"),
])
def test_a_backward_slip_is_named_by_the_factor_of_its_term(kw, words):
    """Held-out class 3: the cause, measured term by term (dx fitted on g, 1 and xhat per token),
    not the symptom ('the gradient through the variance is missing or wrong')."""
    r = checks.check_layer_norm_backward(lambda dy, x, w, eps=1e-5: _bwd(dy, x, w, eps, **kw))
    assert len(failing(r)) == 4, r.report()
    for c, case in zip(r.cases, _backward_battery()):
        d = case.x.shape[-1]
        assert words.format(d=d, k=f"{d / (d - 1):.4g}") in c.message, c.message
        assert "missing or wrong" not in c.message, c.message


def _backward_battery():
    from normref.checks.backward import _backward_battery as battery

    return battery()


_INDEX = re.compile(r"where your (\w+) and the reference's differ most, at \(([^)]*)\)")


def _said_of_one_output(message: str, shapes: dict) -> None:
    """Every measured sentence of ``message`` is about one of the answer's outputs, by its name,
    and an index it gives is one of that output's own shape."""
    text = message.split(";", 1)[1] if ";" in message else ""
    assert "your output" not in text and "tokens' outputs" not in text, message
    assert re.search(r"\b(" + "|".join(shapes) + r")\b", text), message
    for name, idx in _INDEX.findall(text):
        at = tuple(int(i) for i in idx.split(",") if i.strip())
        assert len(at) == len(shapes[name]) and all(0 <= i < n for i, n in zip(at, shapes[name])), message


def _dweight_pattern(dy, x, w, eps=1e-5):  # no factor, no sum against anything: a pattern per feature
    dx, dw, db = _bwd(dy, x, w, eps)
    return dx, dw + 0.1 * np.arange(dw.size) ** 2, db


def _dx_noise(dy, x, w, eps=1e-5):  # no combination of g, 1 and xhat
    dx, dw, db = _bwd(dy, x, w, eps)
    return dx + 0.05 * np.cos(np.arange(dx.size)).reshape(dx.shape), dw, db


@pytest.mark.parametrize("student", [_dweight_pattern, _dx_noise, lambda dy, x, w, eps=1e-5: (
    _bwd(dy, x, w, eps)[0], _bwd(dy, x, w, eps)[1], 2 * _bwd(dy, x, w, eps)[2])])
def test_every_measured_sentence_of_the_backward_is_about_one_of_its_outputs(student):
    """Held-out class 1: the backward returns (dx, dweight, dbias); no sentence is about their
    concatenation (no "tokens' outputs", no index 13 of a [5] dweight)."""
    r = checks.check_layer_norm_backward(student)
    assert failing(r), r.report()
    for c, case in zip(r.cases, _backward_battery()):
        if not c.passed:
            d = case.x.shape[-1]
            _said_of_one_output(c.message, {"dx": case.x.shape, "dweight": (d,), "dbias": (d,)})


_TOY = "toy_two_outputs"


def _toy_reference(x):
    """``(y [B, T, D], new_running_mean [D])``: a BatchNorm-like answer of two outputs."""
    m = x.reshape(-1, x.shape[-1]).mean(0)
    return x - m, 0.9 * m


def _toy_check(student, named: bool = True):
    from normref.checks.core import CaseResult, fail, run
    from normref.diagnosis import Output, Question, declare, observe

    declare(Question(_TOY, "toy(x)", _toy_reference, "the toy", lambda c: ((c.x,), {}), traceable=False,
                     probes=(), outputs=(Output("y"), Output("new_running_mean", tokens=False))))
    rng = np.random.default_rng(4)
    cases = [type("Case", (), {"name": f"[2, 3, {d}]", "x": rng.normal(size=(2, 3, d))})() for d in (4, 6)]

    def run_case(c):
        got, want = student(c.x), _toy_reference(c.x)
        ok = all(np.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(got, want))
        r = CaseResult(c.name, True, f"case '{c.name}': ok") if ok else fail(
            c.name, "max abs error 1 (rel 1); the values differ from the reference.", "wrong_values")
        r.observed = (observe({"y": (got[0], want[0]), "new_running_mean": (got[1], want[1])}, 1e-5, 1e-6)
                      if named else (np.concatenate([g.ravel() for g in got]),
                                     np.concatenate([w.ravel() for w in want]), 1e-5, 1e-6))
        return r

    return run(_TOY, cases, run_case, student, backend="numpy")


def test_an_answer_of_several_outputs_is_measured_output_by_output():
    """Any tuple-returning answer (BatchNorm's (y, new_running_mean, new_running_var) alike): each
    sentence names its output; per-token statistics only of the output whose rows are tokens; a
    record whose outputs cannot be told apart gets no measured sentence at all."""
    def wrong_running(x):
        y, m = _toy_reference(x)
        return y, m + 0.1 * np.arange(m.size) ** 2

    def wrong_y(x):
        y, m = _toy_reference(x)
        return y * (1 + np.arange(y.shape[0] * y.shape[1]).reshape(y.shape[:2] + (1,))), m

    r = _toy_check(wrong_running)
    for c, d in zip(r.cases, (4, 6)):
        _said_of_one_output(c.message, {"y": (2, 3, d), "new_running_mean": (d,)})
        assert f"where your new_running_mean and the reference's differ most, at ({d - 1},)" in c.message
    r = _toy_check(wrong_y)
    for c, d in zip(r.cases, (4, 6)):
        _said_of_one_output(c.message, {"y": (2, 3, d), "new_running_mean": (d,)})
        assert "your y's rows, one per token, have RMS" in c.message or "each token's row of your y" in c.message, \
            c.message
    r = _toy_check(wrong_y, named=False)
    assert all(c.message.endswith("the values differ from the reference.") for c in r.cases), r.report()
    # a checker comparing one output at a time names it (BatchNorm's checker compares each of the three)
    from normref.checks.compare import compare_array

    m = np.arange(4.0)
    one = compare_array("c", m, m + 1, m, lambda g, rtol, atol: ("wrong_values", "differs"), output="new_running_mean")
    assert one.observed.parts == (("new_running_mean", (4,)),)


_BACKWARD_TERMS = ("mean(g * xhat)", "g - mean(g)", "dy * xhat", "sum(dy)")


def test_the_backwards_formula_is_never_said():
    """Held-out class 5: the backward's reference formula is the assignment's answer. Through the
    grader's grammar (registered by grader.backward, as in grading), no message states it or a
    term of it, for every single variant of that grammar played as an answer and every held-out
    wrong backward; a named variant says the difference instead."""
    from corpus.heldout import WRONG
    from diagnosis_coverage import battery_of, student_from_variant
    from normref.diagnosis import grammar_for

    grammar = grammar_for("layer_norm_backward")
    forbidden = (grammar.reference, *_BACKWARD_TERMS)
    singles = grammar.singles(battery_of("layer_norm_backward"))
    students = [student_from_variant("layer_norm_backward", v) for v in singles]
    students += [a.code for a in WRONG if a.question == "layer_norm_backward"]
    named = 0
    for student in students:
        r = checks.check_layer_norm_backward(student)
        for c in failing(r):
            assert not [t for t in forbidden if t in c.message], c.message
        named += "found_variant" in r.faults
    assert named >= 10


# ------------------------------------------------------------------ held-out class 4: advice that the code contradicts


def _rms_weight_after_cast(x, weight, eps=1e-6):  # Llama's order: the float32 weight after the cast back
    h = x.float()
    return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def test_a_cast_undone_by_the_weight_is_said_so_not_cast_back():
    from grader.scoring.replay import Replay
    from normref.handback import probe, run_calls

    r = checks.check_rms_norm(_rms_weight_after_cast)
    dtype = [c for c in failing(r) if c.fault == "wrong_dtype"]
    assert len(dtype) == 2 and len(failing(r)) == 2, r.report()
    for c in dtype:
        assert ("your result is in x's dtype after your cast back to it, and multiplying by the float32 weight makes "
                "it float32 again: apply the weight before casting back with .to(x.dtype)") in c.message, c.message
        assert "the output dtype must be the input dtype" not in c.message
    graded = checks.check_rms_norm(Replay(run_calls(_rms_weight_after_cast, probe(checks.check_rms_norm))))
    assert graded.messages == r.messages  # grading replays the probe's call: the same words

    def never_cast(x, weight, eps=1e-6):  # computes in float32, never casts back: "cast back" is right
        h = x.float()
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight

    r = checks.check_rms_norm(never_cast)
    assert all("cast back with .to(x.dtype)" in c.message for c in failing(r) if c.fault == "wrong_dtype")

    def no_cast_at_all(x, w, b, eps=1e-5):  # statistics in x's dtype, then the float32 parameters
        m = x.mean(-1, keepdims=True)
        return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps) * w + b

    r = checks.check_layer_norm(no_cast_at_all, "numpy")
    said = [c.message for c in failing(r) if c.fault == "wrong_dtype"]
    assert all("multiplying by the float32 weight and adding the float32 bias make your result float32: cast the "
               "result back with .astype(x.dtype) after applying the weight and bias" in m for m in said), r.report()


def test_a_constant_factor_is_explained_by_the_statistic_that_gives_it():
    assert factor_words(math.sqrt(2 / 3), {"d": 3}) == "sqrt(2/3) = sqrt((d-1)/d)"
    assert factor_words(math.sqrt(8), {"d": 8}) == "sqrt(8) = sqrt(d)"
    assert factor_words(1 / 6, {"d": 8, "tokens": 6}) == "1/6 = 1/(number of tokens)"
    assert factor_words(2.0, {"d": 3}) == "2" and factor_words(1.2345, {"d": 3}) is None


# ------------------------------------------------------------------ item 3: never "the values differ" alone


def bare(result) -> list:
    """The failing cases that returned a value and name no measured difference."""
    return [c for c in result.cases if not c.passed and getattr(c, "observed", None) is not None
            and (c.fault == "wrong_values" or c.message.rstrip().endswith("the values differ from the reference."))]


_SETUP = ("import math\nimport numpy as np\nimport torch\nfrom torch import nn\n"
          "from normref import CausalSelfAttention, FeedForward\n")
_CELLS = {  # answer cell -> (defined name, checker), in the order a notebook runs them
    "rms_module_impl": ("RMSNorm", checks.check_rms_norm_module),
    "pre_ln_impl": ("pre_ln", checks.check_pre_ln), "post_ln_impl": ("post_ln", checks.check_post_ln),
    "block_impl": ("PreNormBlock", checks.check_pre_ln_block),
    "rms_norm_impl": ("rms_norm", checks.check_rms_norm),
    "layer_norm_impl": ("layer_norm", lambda f: checks.check_layer_norm(f, "numpy")),
    "layer_norm_backward_impl": ("layer_norm_backward", checks.check_layer_norm_backward),
    "peri_ln_impl": ("peri_ln", checks.check_peri_ln),
    "qk_logits_impl": ("qk_norm_logits", checks.check_qk_norm_logits),
    "dyt_impl": ("dyt", checks.check_dyt),
}


def _bank():
    from grader.demo.answer_bank import ANSWERS

    for assignment, variants in ANSWERS.items():
        for variant, cells in variants.items():
            if any(c in _CELLS for c in cells):
                yield f"{assignment}/{variant}", cells


@pytest.mark.parametrize("which, cells", list(_bank()), ids=[w for w, _ in _bank()])
def test_every_answer_bank_answer_names_a_measured_difference(which, cells):
    ns: dict = {}
    exec(_SETUP, ns)  # noqa: S102 - the answer bank's own code
    for cell in _CELLS:
        if cell in cells:
            exec(cells[cell], ns)  # noqa: S102
    for cell in cells:
        if cell in _CELLS:
            name, check = _CELLS[cell]
            r = check(ns[name])
            assert not bare(r), (which, cell, r.report())


def _model_students():
    """The checkers' fault models played as answers: each computes one model's output."""
    from normref.checks.modern import dyt_models, peri_models, qk_models
    from normref.checks.placement import post_models, pre_models

    for check, models, n in ((checks.check_pre_ln, pre_models, 3), (checks.check_post_ln, post_models, 3),
                             (checks.check_peri_ln, peri_models, 4), (checks.check_qk_norm_logits, qk_models, 4),
                             (checks.check_dyt, dyt_models, 4)):
        for k in range(12):
            def student(*a, models=models, k=k, n=n):
                found = list(models(*a[:n]))
                if k >= len(found):
                    raise IndexError("no such model on this case")
                return found[k][1]

            yield check, k, student


@pytest.mark.parametrize("check, k, student", list(_model_students()),
                         ids=[f"{c.__name__}:{k}" for c, k, _ in _model_students()])
def test_every_fault_model_played_as_an_answer_names_a_measured_difference(check, k, student):
    r = check(student)
    assert not bare(r), r.report()


def test_every_wrong_answer_of_the_tests_names_a_measured_difference():
    import test_diagnosis
    import test_modern_checks
    import test_placement_diagnosis

    runs = [(c, f) for c, f, *_ in test_modern_checks.WRONG]
    runs += [(c, f) for c, f, *_ in test_placement_diagnosis.SINGLE]
    runs += [(checks.check_pre_ln_block, cls) for cls, *_ in test_placement_diagnosis.BLOCKS]
    from diagnosis_coverage import run_checker

    for checker, student, *_ in test_diagnosis.UNLISTED:
        r = run_checker(checker, student)
        assert not bare(r), r.report()
    for check, student in runs:
        r = check(student)
        assert not bare(r), r.report()


def test_how_steeply_dyt_rises_near_zero_is_measured():
    from normref.checks.modern import _dyt_battery
    from normref.functional import dyt

    params = ("x", "alpha", "weight", "bias")
    probed = run_probes(("zero", "slope"), params, _dyt_battery(), lambda c: ((c.x, c.alpha, c.weight, c.bias), {}),
                        lambda a, k: (a[2] * torch.tanh(2 * a[1] * a[0].float()) + a[3]).to(a[0].dtype), dyt)
    facts = probe_facts(probed, "DyT", None, params)
    assert "near x = 0 your output rises 2 times as steeply as DyT's" in facts["slope"][0], facts
