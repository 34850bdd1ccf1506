"""The modern assignment's checkers (normref.checks.modern): each passes a correct answer with
full score (and honest float32 variants), names each known mistake on every case it fails, keeps
the input's dtype as the rule, and refuses normref's own reference; the drawn batteries of
grading (grader.modern_batteries) have the same kinds of case and pass a correct answer."""
import math

import pytest
import torch

import normref
from grader.scoring import inputs as scoring
from normref import check_dyt, check_peri_ln, check_qk_norm_logits
from normref.faults import FAULTS


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def peri_ok(x, F, N, M):
    return x + M(F(N(x)))


def qk_ok(q, k, a, b):
    return a(q) @ b(k).transpose(-2, -1) / math.sqrt(q.shape[-1])


def dyt_ok(x, a, w, b):
    return (w * torch.tanh(a * x.float()) + b).to(x.dtype)


CORRECT = [
    (check_peri_ln, peri_ok),
    (check_qk_norm_logits, qk_ok),
    (check_qk_norm_logits, lambda q, k, a, b: (torch.einsum("...id,...jd->...ij", a(q).float(), b(k).float())
                                               / math.sqrt(q.shape[-1])).to(q.dtype)),
    (check_dyt, dyt_ok),
    (check_dyt, lambda x, a, w, b: w.to(x.dtype) * torch.tanh(a.to(x.dtype) * x) + b.to(x.dtype)),
]


@pytest.mark.parametrize("check, fn", CORRECT, ids=range(len(CORRECT)))
def test_a_correct_answer_gets_full_score(check, fn):
    r = check(fn)
    assert r.passed and r.score == 1.0 and len(r.cases) == 5 and not r.breaches, r.report()
    assert check(fn, quick=True).passed and len(check(fn, quick=True).cases) == 2


WRONG = [  # (checker, answer, fault on every failing case, how many of the 5 cases pass)
    (check_peri_ln, lambda x, F, N, M: x + F(N(x)), "is_pre_ln", 0),
    (check_peri_ln, lambda x, F, N, M: x + M(F(x)), "is_output_ln", 0),
    (check_peri_ln, lambda x, F, N, M: M(x + F(x)), "is_post_ln", 0),
    (check_peri_ln, lambda x, F, N, M: M(x + F(N(x))), "out_norm_on_sum", 0),
    (check_peri_ln, lambda x, F, N, M: x + N(F(M(x))), "two_norms_swapped", 0),
    (check_peri_ln, lambda x, F, N, M: x + N(F(N(x))), "one_norm_twice", 0),
    (check_peri_ln, lambda x, F, N, M: M(F(N(x))), "missing_residual", 0),
    (check_peri_ln, lambda x, F, N, M: x.float() + M(F(N(x))).float(), "wrong_dtype", 3),
    (check_qk_norm_logits, lambda q, k, a, b: q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), "missing_norm", 0),
    (check_qk_norm_logits, lambda q, k, a, b: a(q) @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), "qk_one_side", 0),
    (check_qk_norm_logits, lambda q, k, a, b: a(q) @ b(k).transpose(-2, -1), "qk_no_scale", 0),
    (check_qk_norm_logits, lambda q, k, a, b: a(q) @ b(k).transpose(-2, -1) / q.shape[-1], "qk_wrong_scale", 0),
    (check_qk_norm_logits, lambda q, k, a, b: b(k) @ a(q).transpose(-2, -1) / math.sqrt(q.shape[-1]),
     "qk_transposed", 0),
    (check_qk_norm_logits, lambda q, k, a, b: qk_ok(q, k, a, b).softmax(-1), "qk_returned_softmax", 0),
    (check_dyt, lambda x, a, w, b: (w * torch.tanh(x.float()) + b).to(x.dtype), "dyt_no_alpha", 0),
    (check_dyt, lambda x, a, w, b: (w * a * torch.tanh(x.float()) + b).to(x.dtype), "dyt_alpha_outside", 0),
    (check_dyt, lambda x, a, w, b: (w * torch.tanh(a * x.float() + b)).to(x.dtype), "dyt_bias_inside", 1),
    (check_dyt, lambda x, a, w, b: (torch.tanh(a * x.float()) + b).to(x.dtype), "ignores_weight", 1),
    (check_dyt, lambda x, a, w, b: (b * torch.tanh(a * x.float()) + w).to(x.dtype), "dyt_weight_bias_swapped", 0),
    (check_dyt, lambda x, a, w, b: (w * normref.layer_norm(x.float()).mul(a).tanh() + b).to(x.dtype),
     "dyt_normalized", 0),
    (check_dyt, lambda x, a, w, b: (w * torch.clamp(a * x.float(), -1, 1) + b).to(x.dtype), "dyt_not_tanh", 0),
    (check_dyt, lambda x, a, w, b: w * torch.tanh(a * x.float()) + b, "wrong_dtype", 3),
]


@pytest.mark.parametrize("check, fn, fault, n_pass", WRONG, ids=[f"{c.__name__}:{f}:{i}" for i, (c, _, f, _)
                                                                   in enumerate(WRONG)])
def test_each_mistake_is_named_on_every_case_it_fails(check, fn, fault, n_pass):
    r = check(fn)
    assert sum(c.passed for c in r.cases) == n_pass, r.report()
    assert {c.fault for c in r.cases if not c.passed} == {fault}, r.report()
    assert fault in FAULTS and len(FAULTS[fault].label) <= 48


def test_the_seed_token_case_by_hand():
    # Peri-LN of (1, 2, 3), F(v) = v^2: LN(x) = (-s, 0, s), squared (1.5, 0, 1.5), LN of that
    # (1, -2, 1)/sqrt(2), times gamma (2, 1, 0.5): x + (sqrt 2, -sqrt 2, 0.5/sqrt 2)
    want = torch.tensor([1 + math.sqrt(2), 2 - math.sqrt(2), 3 + 0.5 / math.sqrt(2)])
    seen = []
    check_peri_ln(lambda x, F, N, M: seen.append(peri_ok(x, F, N, M)) or seen[-1], quick=True)
    torch.testing.assert_close(seen[0], want, atol=1e-5, rtol=0)
    # DyT of (1, 2, 3), alpha 0.5: tanh(0.5, 1, 1.5)
    out = []
    check_dyt(lambda *a: out.append(dyt_ok(*a)) or out[-1], quick=True)
    torch.testing.assert_close(out[0], torch.tanh(torch.tensor([0.5, 1.0, 1.5])))


def test_an_answer_that_calls_the_reference_breaks_the_rule():
    for check, ref in ((check_peri_ln, normref.peri_ln), (check_qk_norm_logits, normref.qk_norm_logits),
                       (check_dyt, normref.dyt)):
        r = check(lambda *a, ref=ref: ref(*a))
        assert len(r.breaches) == 1 and r.breaches[0].startswith("0 points: calls "), r.report()
        assert r.score == 0.0


def test_an_input_modified_in_place_is_named():
    def peri_inplace(x, F, N, M):
        x += M(F(N(x)))
        return x

    r = check_peri_ln(peri_inplace)
    assert {c.fault for c in r.cases} == {"mutates_input"}, r.report()


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_grading_draws_the_same_kinds_of_case_and_a_correct_answer_passes(seed):
    for gid, fn, kinds in (("peri_ln_battery", peri_ok, None), ("qk_logits_battery", qk_ok, None),
                           ("dyt_battery", dyt_ok, None)):
        cases = scoring.drawn_cases(gid, seed)
        assert [str(c.x.dtype) for c in cases] == ["torch.float32"] * 3 + ["torch.float16", "torch.bfloat16"]
        n = cases[2].x.shape
        assert n[0] == n[1] == n[2]  # B = T = D
        assert cases[0].x.shape[-1] == 3  # the seed token's kind
        r = scoring.run_check(gid, seed, fn)
        assert r.passed, (gid, seed, r.report())
