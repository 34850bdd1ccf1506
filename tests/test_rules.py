"""normref.rules: the rule that costs points (implement it, do not call a reference norm) is
found the same way in the student's self-check and in the grader's tamper scan."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import normref
from normref import check_layer_norm, check_rms_norm, check_rms_norm_module
from normref.rules import reference_calls, reference_calls_in

# (source, the lines a reference is called or imported on)
SOURCES = [
    ("def rms_norm(x, w, eps=1e-6):\n    return F.rms_norm(x, (x.shape[-1],), w, eps)\n", [2]),
    ("y = torch.nn.functional.layer_norm(x, (8,))\n", [1]),
    ("y = torch.rms_norm(x, (8,))\n", [1]),
    ("from torch.nn.functional import rms_norm as rn\ny = rn(x, (8,))\n", [1, 2]),
    ("norm = nn.RMSNorm(8)\n", [1]),
    ("y = normref.pre_ln(x, f, n)\n", [1]),
    # implemented by hand: nothing to flag
    ("def rms_norm(x, w, eps=1e-6):\n    rms = x.float().pow(2).mean(dim=-1, keepdim=True)\n"
     "    return (x.float() * (rms + eps).rsqrt() * w).to(x.dtype)\n", []),
    ("import torch.nn.functional as G\ny = G.rms_norm(x, (8,))\n", [2]),  # an alias in the source
    ("y = np.linalg.norm(x, axis=-1)\nz = rms_norm(x, w)\n", []),  # its own rms_norm
    ("def f(:\n", []),  # does not parse
]


@pytest.mark.parametrize("source, lines", SOURCES)
def test_reference_calls_in_source(source, lines):
    assert [line for line, _ in reference_calls(source)] == lines


def test_what_is_named_is_the_call_as_written():
    assert reference_calls("y = F.rms_norm(x, (3,))") == [(1, "calls F.rms_norm")]
    assert reference_calls("from normref import layer_norm") == [
        (1, "imports the reference normref.layer_norm")]


def test_a_bound_alias_is_resolved():
    # the grader passes what the locked cells import; the checker the student's globals
    assert reference_calls("y = ln(x)", {"ln": "normref.functional.layer_norm"}) == [(1, "calls ln")]
    assert reference_calls("y = Fn.rms_norm(x)", {"Fn": "torch.nn.functional"}) == [(1, "calls Fn.rms_norm")]
    assert reference_calls("y = ln(x)", {"ln": "__main__.ln"}) == []
    # an import in the source rebinds what the scope had
    assert reference_calls("import torch.nn.functional as F\ny = F.rms_norm(x)", {"F": "__main__.F"}) == [
        (2, "calls F.rms_norm")]


@pytest.mark.parametrize("source, lines", SOURCES[:-1])
def test_the_grader_tamper_scan_flags_the_same_lines(source, lines):
    from grader.tamper import scan

    flagged = sorted({f.line for f in scan(source) if f.kind == "reference"})
    assert flagged == lines


# ------------------------------------------------------------------ the self-check says the rule

def calls_f_rms_norm(x, weight, eps=1e-6):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def calls_torch_layer_norm(x, weight, bias, eps=1e-5):
    return torch.nn.functional.layer_norm(torch.as_tensor(x), (x.shape[-1],), torch.as_tensor(weight),
                                          torch.as_tensor(bias), eps).numpy()


class ModuleCallingF(torch.nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight, self.eps).to(x.dtype)


def test_a_reference_call_passes_every_case_but_the_self_check_gives_what_grading_gives():
    r = check_rms_norm(calls_f_rms_norm)
    assert all(c.passed for c in r.cases)  # the values are right: F.rms_norm is correct
    assert r.score == 0 and not r.passed and r.faults[0] == "reference_call"
    assert r.breaches == ["calls F.rms_norm: grading gives this question 0 \u2014 implement it "
                          "with tensor operations"]
    assert r.breaches[0] in r.report()


def test_the_rule_speaks_numpy_to_a_numpy_answer_and_reads_a_module_class():
    r = check_layer_norm(calls_torch_layer_norm)
    assert r.score == 0 and r.breaches == [
        "calls torch.nn.functional.layer_norm: grading gives this question 0 \u2014 implement it "
        "with array operations"]
    r = check_rms_norm_module(ModuleCallingF)
    assert r.score == 0 and r.breaches[0].startswith("calls F.rms_norm:")


def test_the_reference_itself_and_an_own_implementation_break_no_rule():
    assert reference_calls_in(normref.rms_norm) == [] and reference_calls_in(normref.RMSNorm) == []

    def own(x, weight, eps=1e-6):
        return (x.float() * x.float().pow(2).mean(-1, keepdim=True).add(eps).rsqrt() * weight).to(x.dtype)

    r = check_rms_norm(own)
    assert r.passed and r.score == 1 and r.breaches == []
    assert reference_calls_in(np.mean) == []  # no readable source: nothing claimed
