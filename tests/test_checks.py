"""Checkers: the reference scores 1.0; each purpose-made wrong implementation gets its diagnosis."""
import numpy as np
import pytest
import torch

import normref
from normref import check_layer_norm, check_rms_norm


def seed_rms_norm(x, weight, eps=1e-6):  # the seed's "standard answer", verbatim
    rms = x.float().pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()
    return (x.float() * rms * weight).to(x.dtype)


def rms_n_minus_1(x, weight, eps=1e-6):
    ms = x.float().pow(2).sum(dim=-1, keepdim=True) / (x.shape[-1] - 1)
    return (x.float() * (ms + eps).rsqrt() * weight).to(x.dtype)


def rms_low_precision(x, weight, eps=1e-6):
    return (x * x.pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt() * weight).to(x.dtype)


def rms_axis_0(x, weight, eps=1e-6):
    rms = x.float().pow(2).mean(dim=0, keepdim=True).add(eps).rsqrt()
    return (x.float() * rms * weight).to(x.dtype)


def rms_no_keepdim(x, weight, eps=1e-6):
    rms = x.float().pow(2).mean(dim=-1).add(eps).rsqrt()
    return (x.float() * rms * weight).to(x.dtype)


def rms_eps_outside(x, weight, eps=1e-6):
    rms = 1 / (x.float().pow(2).mean(dim=-1, keepdim=True).sqrt() + eps)
    return (x.float() * rms * weight).to(x.dtype)


def rms_centred(x, weight, eps=1e-6):
    h = x.float() - x.float().mean(dim=-1, keepdim=True)
    return (h * h.pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt() * weight).to(x.dtype)


def rms_float32_out(x, weight, eps=1e-6):
    return x.float() * x.float().pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt() * weight


def rms_in_place(x, weight, eps=1e-6):
    rms = x.float().pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()
    x.mul_(rms.to(x.dtype))
    return (x.float() * weight).to(x.dtype)


def rms_blank(x, weight, eps=1e-6):
    raise NotImplementedError()


def test_reference_and_seed_answer_pass_with_full_score():
    for fn in (normref.rms_norm, seed_rms_norm):
        r = check_rms_norm(fn)
        assert r.passed and r.score == 1.0 and r.faults == []


@pytest.mark.parametrize(
    "fn, fault, score",
    [
        # n-1 changes every case (d >= 3 everywhere): 0 of 6.
        (rms_n_minus_1, "unbiased_variance", 0.0),
        # float16 statistics only break the float16 overflow row: 5 of 6.
        (rms_low_precision, "low_precision_stats", 5 / 6),
        # dim=0 is the last axis only for the 1-D seed case: 1 of 6.
        (rms_axis_0, "wrong_axis", 1 / 6),
        # without keepdim, only the 1-D case (a scalar statistic) is right: 1 of 6.
        (rms_no_keepdim, "missing_keepdim", 1 / 6),
        # eps=1e-6 outside the sqrt is invisible except on the tiny-values eps=1e-4 case: 5 of 6.
        (rms_eps_outside, "eps_outside_sqrt", 5 / 6),
        # subtracting the mean changes every case (no case has a zero-mean row): 0 of 6.
        (rms_centred, "subtracts_mean", 0.0),
        # float32 out is only wrong for the float16 and bfloat16 inputs: 4 of 6.
        (rms_float32_out, "wrong_dtype", 4 / 6),
        (rms_in_place, "mutates_input", 0.0),
        (rms_blank, "raises", 0.0),
    ],
)
def test_each_rms_fault_is_diagnosed(fn, fault, score):
    r = check_rms_norm(fn)
    assert not r.passed
    assert r.faults[0] == fault
    assert r.score == pytest.approx(score)
    assert all(f"[fault: {fault}]" in m for m in r.messages)


def test_n_minus_1_message_names_the_factor():
    msg = check_rms_norm(rms_n_minus_1).messages[1]  # the [2, 3, 8] case, d = 8
    assert "0.935 = sqrt(7/8)" in msg and "n-1" in msg and "max abs error" in msg


def test_a_looping_function_times_out_with_a_message(monkeypatch):
    monkeypatch.setattr(normref.checks, "CALL_TIMEOUT_S", 0.2)

    def loops(x, weight, eps=1e-6):
        while True:
            pass

    r = check_rms_norm(loops, quick=True)
    assert r.score == 0 and r.faults == ["timeout"]


def test_checker_never_raises_on_garbage():
    assert check_rms_norm(42).score == 0
    assert check_rms_norm(lambda x, w, eps=1e-6: "nope").faults == ["wrong_type"]
    assert check_rms_norm(lambda x, w, eps=1e-6: x[..., :1]).faults[0] == "wrong_shape"
    assert check_rms_norm(lambda x, w, eps=1e-6: x * float("nan")).faults[0] == "returns_nan"


def test_numpy_layer_norm_checker():
    def ln(x, w, b, eps=1e-5):
        h = x.astype(np.float32)
        m = h.mean(-1, keepdims=True)
        v = ((h - m) ** 2).mean(-1, keepdims=True)
        return ((h - m) / np.sqrt(v + eps) * w + b).astype(x.dtype)

    def ln_ddof1(x, w, b, eps=1e-5):
        h = x.astype(np.float32)
        m = h.mean(-1, keepdims=True)
        v = h.var(-1, ddof=1, keepdims=True)
        return ((h - m) / np.sqrt(v + eps) * w + b).astype(x.dtype)

    assert check_layer_norm(ln).score == 1.0
    assert check_layer_norm(normref.layer_norm, backend="torch").score == 1.0
    r = check_layer_norm(ln_ddof1)
    assert r.faults[0] == "unbiased_variance"


def test_quick_runs_only_the_seed_cases():
    r = check_rms_norm(seed_rms_norm, quick=True)
    assert [c.name for c in r.cases] == ["seed (1, 2, 3)", "seed shape [2, 3, 8] float32"]


def test_correct_answer_leaves_no_warning(recwarn):
    def noisy_but_right(x, weight, eps=1e-6):
        import warnings
        warnings.warn("student debug warning")
        return seed_rms_norm(x, weight, eps)

    assert check_rms_norm(noisy_but_right).score == 1.0
    assert len(recwarn) == 0
    assert torch.get_default_dtype() == torch.float32
