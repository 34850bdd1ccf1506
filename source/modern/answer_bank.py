"""The ``modern`` assignment's part of the answer bank (lesson 04: Peri-LN, QK-norm logits, DyT):
synthetic submissions and the points each must get, merged into :mod:`grader.demo.answer_bank`.

Battery cases the derivations refer to (:mod:`normref.checks.modern`; graded on drawn batteries
of the same kinds, :mod:`grader.modern_batteries`), 0.5 point each in a ``*_battery`` cell:

- ``peri_ln``: 0 a token through F(v) = v^2, a LayerNorm without eps, then a LayerNorm with
  another gamma; 1 ``[B, T, 8]`` float32, two RMSNorms with different trained gammas; 2
  ``B = T = D`` float32, two LayerNorms with gammas and betas; 3 float16 ``[B, T, 8]``; 4
  bfloat16 ``B = T = D``.
- ``qk_logits``: 0 a token's three rotations as queries against (token, ones, flipped token),
  ``T = d = 3``, RMSNorms of weight 1 without eps; 1 ``[B, T, 8]`` (``T`` is 3 or 4); 2
  ``B = T = D`` with LayerNorms; 3 float16 ``[2, T, 8]`` (``T`` 4-6) of RMS 30; 4 bfloat16
  ``B = T = D``.
- ``dyt``: 0 a token, alpha 0.5, weight 1, bias 0; 1 ``[B, T, 8]``, alpha in [0.5, 0.8], trained
  weight and bias; 2 ``B = T = D``, alpha 1.5; 3 float16 ``[B, T, 8]`` of size ~300, alpha 0.01; 4
  bfloat16 ``B = T = D``.

Each ``*_quick`` cell gives its point iff the public battery's cases 0 and 1 pass.
"""
from __future__ import annotations

__all__ = ["ANSWERS", "EXPECTED", "MODERN_MANUAL"]

MODERN_MANUAL = ("peri_bound_why",)

_PERI = "def peri_ln(x, sublayer, norm, out_norm):\n    return {}"
_QK = "def qk_norm_logits(q, k, q_norm, k_norm):\n    return {}"
_DYT = "def dyt(x, alpha, weight, bias):\n    return {}"

_BOUND_WHY = ("Both never normalise the residual stream itself. Pre-LN adds F(Norm(x)) as it is, so when "
              "training makes the weights large each layer adds more and the stream's RMS grows by "
              "orders of magnitude (thousands after 40 steps at lr 0.1). Peri-LN passes each "
              "sublayer's output through its own norm before the add, so every layer adds a vector "
              "of RMS about gamma whatever the weights do, and the stream stays near its starting size.")

_CORRECT = {
    "peri_ln_impl": _PERI.format("x + out_norm(sublayer(norm(x)))"),
    "qk_logits_impl": _QK.format("q_norm(q) @ k_norm(k).transpose(-2, -1) / math.sqrt(q.shape[-1])"),
    "dyt_impl": _DYT.format("(weight * torch.tanh(alpha * x.float()) + bias).to(x.dtype)"),
    "peri_bound_why": _BOUND_WHY,
}


def _m(**changes: str) -> dict[str, str]:
    return {**_CORRECT, **changes}


MODERN_ANSWERS = {
    "correct": dict(_CORRECT),
    "blank": {},
    "partial": {k: v for k, v in _CORRECT.items() if k not in ("dyt_impl", "peri_bound_why")},
    "is_pre_ln": _m(peri_ln_impl=_PERI.format("x + sublayer(norm(x))")),
    "is_output_ln": _m(peri_ln_impl=_PERI.format("x + out_norm(sublayer(x))")),
    "two_norms_swapped": _m(peri_ln_impl=_PERI.format("x + norm(sublayer(out_norm(x)))")),
    "wrong_dtype": _m(peri_ln_impl=_PERI.format("x.float() + out_norm(sublayer(norm(x))).float()  # float32 out"),
                      dyt_impl=_DYT.format("weight * torch.tanh(alpha * x.float()) + bias  # not cast back")),
    "missing_norm": _m(qk_logits_impl=_QK.format("q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])")),
    "qk_no_scale": _m(qk_logits_impl=_QK.format("q_norm(q) @ k_norm(k).transpose(-2, -1)")),
    "qk_no_transpose": _m(qk_logits_impl=_QK.format("q_norm(q) @ k_norm(k) / math.sqrt(q.shape[-1])")),
    "dyt_alpha_outside": _m(dyt_impl=_DYT.format("(weight * alpha * torch.tanh(x.float()) + bias).to(x.dtype)")),
    "ignores_bias": _m(dyt_impl=_DYT.format("(weight * torch.tanh(alpha * x.float())).to(x.dtype)")),
    "reference_call": _m(peri_ln_impl="import normref\n\n\n"
                         + _PERI.format("normref.peri_ln(x, sublayer, norm, out_norm)")),
}

_FULL = {"peri_ln_quick": 1.0, "peri_ln_battery": 2.5, "qk_logits_quick": 1.0, "qk_logits_battery": 2.5,
         "dyt_quick": 1.0, "dyt_battery": 2.5,
         "peri_bound_why": 0.0}  # answered: needs manual grade, 0 until graded


def _e(**points: float) -> dict[str, float]:
    return {**_FULL, **points}


MODERN_EXPECTED = {
    "correct": _e(),
    # the stubs raise NotImplementedError in every case; the written cell as released scores 0
    "blank": {k: 0.0 for k in _FULL},
    # dyt left as released (raises everywhere); the written answer left as released
    "partial": _e(dyt_quick=0.0, dyt_battery=0.0),
    # x + F(norm(x)) leaves F's output un-normalised: F's outputs are never already normalised by
    # out_norm (v^2 of a LayerNorm output; tanh(vW + c) against trained gammas): 0 of 5
    "is_pre_ln": _e(peri_ln_quick=0.0, peri_ln_battery=0.0),
    # x + out_norm(F(x)): F reads x, not norm(x): different on every case: 0 of 5
    "is_output_ln": _e(peri_ln_quick=0.0, peri_ln_battery=0.0),
    # the two norms differ on every case (case 0: gamma 1 against a drawn gamma near (2, 1, 0.5);
    # 1-4: two trained gammas): 0 of 5
    "two_norms_swapped": _e(peri_ln_quick=0.0, peri_ln_battery=0.0),
    # peri_ln and dyt give float32 for the float16 (3) and bfloat16 (4) cases, right values:
    # 3 of 5 each; the visible checks (cases 0, 1: float32) pass
    "wrong_dtype": _e(peri_ln_battery=1.5, dyt_battery=1.5),
    # plain logits: on case 0 the logit of the token against itself is |t|^2 / sqrt(3) without
    # the norms and 3 / sqrt(3) with them, and |t|^2 >= 5 (distinct integers, |sum| >= 3);
    # drawn RMSNorms and LayerNorms elsewhere: 0 of 5
    "missing_norm": _e(qk_logits_quick=0.0, qk_logits_battery=0.0),
    # sqrt(d) != 1 on every case: 0 of 5
    "qk_no_scale": _e(qk_logits_quick=0.0, qk_logits_battery=0.0),
    # T = d on cases 0, 2, 4: other values; T != 8 on cases 1 and 3: raises: 0 of 5
    "qk_no_transpose": _e(qk_logits_quick=0.0, qk_logits_battery=0.0),
    # alpha * tanh(x) vs tanh(alpha x), alpha != 1 on every case: 0 of 5
    "dyt_alpha_outside": _e(dyt_quick=0.0, dyt_battery=0.0),
    # bias is 0 on case 0 only: 1 of 5; the visible check needs case 1 too
    "ignores_bias": _e(dyt_quick=0.0, dyt_battery=0.5),
    # normref.peri_ln called: the rule gives the question 0 (both cells)
    "reference_call": _e(peri_ln_quick=0.0, peri_ln_battery=0.0),
}

ANSWERS = MODERN_ANSWERS
EXPECTED = MODERN_EXPECTED
