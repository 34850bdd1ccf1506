"""A held-out corpus of answers for issue 31 item 5: realistic wrong answers and unusual correct
answers to every code question students answer, written by an author who had not read the
course's checkers, diagnoses or the other corpus (only the lessons, the seed, the assignments'
student notebooks, README.md and the papers).

The code lives in three sibling modules (numpy norms; torch norms and the block; callables and
lesson 04), so none is over 600 lines; this module lists each answer once, with the question it
answers and one sentence on what it does. `tests/corpus/heldout_figures.py` runs them through
the public checkers; `tests/test_heldout.py` asserts what must hold; `tests/corpus/HELDOUT.md`
records the hand verdicts.
"""
from dataclasses import dataclass
from typing import Callable

from . import heldout_numpy as n
from . import heldout_torch as t
from . import heldout_wirings as w


@dataclass(frozen=True)
class Answer:
    question: str   # one of: "layer_norm", "layer_norm_backward", "rms_norm", "RMSNorm module", "pre-LN block",
    #                 "pre_ln", "post_ln", "peri_ln", "qk_norm_logits", "dyt"
    name: str       # a short id
    code: Callable  # the function (or class) as the student would write it, with the signature asked
    what: str       # one sentence: what the student did wrong (or how the correct one is unusual)


LN, LNB, RMS, MOD, BLK = "layer_norm", "layer_norm_backward", "rms_norm", "RMSNorm module", "pre-LN block"
PRE, POST, PERI, QK, DYT = "pre_ln", "post_ln", "peri_ln", "qk_norm_logits", "dyt"

WRONG: list[Answer] = [
    # layer_norm (numpy)
    Answer(LN, "ln_ddof1", n.wrong_ln_ddof1, "the variance uses ddof=1 (divides by d - 1, not d)."),
    Answer(LN, "ln_eps_outside", n.wrong_ln_eps_outside,
           "eps is added to the standard deviation, outside the square root."),
    Answer(LN, "ln_no_keepdims", n.wrong_ln_no_keepdims,
           "mean and variance over the last axis without keepdims, so they broadcast against the wrong axis."),
    Answer(LN, "ln_batch_axis", n.wrong_ln_batch_axis,
           "mean and variance over axis 0 (the batch axis, BatchNorm's habit) instead of the last axis."),
    Answer(LN, "ln_float16_arith", n.wrong_ln_float16_arith,
           "no cast to float32: the statistics are computed in the input's dtype, so float16 squares overflow."),
    Answer(LN, "ln_float32_out", n.wrong_ln_float32_out,
           "computes in float32 but returns float32 instead of casting back to x's dtype."),
    Answer(LN, "ln_inplace", n.wrong_ln_inplace,
           "np.asarray(x, float32) is x itself for float32 input, and -= / /= then overwrite the caller's array."),
    Answer(LN, "ln_bias_then_weight", n.wrong_ln_bias_then_weight,
           "adds the bias before multiplying by the weight: (xhat + beta) * gamma."),
    Answer(LN, "ln_var_uncentered", n.wrong_ln_var_uncentered,
           "the variance is the mean of x**2, not of (x - mu)**2 (forgot to centre inside it)."),
    Answer(LN, "ln_no_eps", n.wrong_ln_no_eps,
           "drops eps altogether, as the worked example does (a constant row gives 0/0)."),
    Answer(LN, "ln_divide_by_var", n.wrong_ln_divide_by_var,
           "divides by the variance plus eps, forgetting the square root."),
    Answer(LN, "ln_no_bias", n.wrong_ln_no_bias, "never adds the bias beta."),
    # layer_norm_backward (numpy)
    Answer(LNB, "lnb_no_mean_term", n.wrong_lnb_no_mean_term, "dx omits the -mean(g) term (the path through mu)."),
    Answer(LNB, "lnb_no_var_term", n.wrong_lnb_no_var_term,
           "dx omits the -xhat * mean(g * xhat) term (the path through sigma^2)."),
    Answer(LNB, "lnb_no_gamma", n.wrong_lnb_no_gamma, "dx uses dy where it needs g = dy * gamma."),
    Answer(LNB, "lnb_params_not_summed", n.wrong_lnb_params_not_summed,
           "dweight and dbias are returned per token ([..., D]) instead of summed over the batch and sequence axes."),
    Answer(LNB, "lnb_sum_axis0", n.wrong_lnb_sum_axis0,
           "dweight and dbias are summed over axis 0 only, which is right for [T, D] but leaves [T, D] for [B, T, D]."),
    Answer(LNB, "lnb_sum_last_axis", n.wrong_lnb_sum_last_axis,
           "dweight and dbias are summed over the last (feature) axis instead of the batch and sequence axes."),
    Answer(LNB, "lnb_dbias_mean", n.wrong_lnb_dbias_mean, "dbias averages dy over the tokens instead of summing it."),
    Answer(LNB, "lnb_ddof1", n.wrong_lnb_ddof1, "the recomputed forward uses the unbiased variance (ddof=1)."),
    Answer(LNB, "lnb_var_term_sum", n.wrong_lnb_var_term_sum,
           "the variance term uses sum(g * xhat) where it needs mean(g * xhat) (a missing 1/d)."),
    Answer(LNB, "lnb_dweight_raw_x", n.wrong_lnb_dweight_raw_x, "dweight sums dy * x instead of dy * xhat."),
    Answer(LNB, "lnb_eps_dropped", n.wrong_lnb_eps_dropped, "the recomputed forward ignores eps (r = 1 / sqrt(var))."),
    # rms_norm (torch)
    Answer(RMS, "rms_subtracts_mean", t.wrong_rms_subtracts_mean,
           "subtracts the mean before the RMS, i.e. LayerNorm without its bias."),
    Answer(RMS, "rms_eps_outside", t.wrong_rms_eps_outside, "eps is added to the RMS, outside the square root."),
    Answer(RMS, "rms_fp16_stats", t.wrong_rms_fp16_stats,
           "no x.float(): the squares are computed in the input's dtype and overflow in float16."),
    Answer(RMS, "rms_stays_float32", t.wrong_rms_stays_float32,
           "computes in float32 and never casts back to x's dtype."),
    Answer(RMS, "rms_weight_after_cast", t.wrong_rms_weight_after_cast,
           "multiplies the float32 weight after casting back (Llama's order): float16 input comes back float32."),
    Answer(RMS, "rms_sum_squares", t.wrong_rms_sum_squares, "sums the squares instead of averaging them (no 1/d)."),
    Answer(RMS, "rms_l2_normalize", t.wrong_rms_l2_normalize,
           "divides by the L2 norm x.norm(dim=-1) instead of the RMS (no 1/d, no eps)."),
    Answer(RMS, "rms_dim1", t.wrong_rms_dim1,
           "reduces over dim=1 (the sequence axis of [B, T, D]) instead of the last axis."),
    Answer(RMS, "rms_no_weight", t.wrong_rms_no_weight, "never multiplies by the weight."),
    Answer(RMS, "rms_std", t.wrong_rms_std,
           "divides by x.std(dim=-1) (centred, unbiased) plus eps instead of the RMS."),
    # RMSNorm module
    Answer(MOD, "mod_plain_tensor", t.WrongModPlainTensor, "self.weight is a plain tensor, not an nn.Parameter."),
    Answer(MOD, "mod_eps_hardcoded", t.WrongModEpsHardcoded, "ignores the eps argument and always adds 1e-6."),
    Answer(MOD, "mod_gemma_zeros", t.WrongModGemmaZeros,
           "Gemma's convention: the weight starts at zeros and the output is multiplied by (1 + weight)."),
    Answer(MOD, "mod_float32_out", t.WrongModFloat32Out,
           "returns the float32 result without casting back to x's dtype."),
    Answer(MOD, "mod_low_precision_stats", t.WrongModLowPrecisionStats,
           "computes the statistic in x's dtype (no x.float()), so float16 squares overflow."),
    Answer(MOD, "mod_no_keepdim", t.WrongModNoKeepdim,
           "mean(dim=-1) without keepdim=True, so rms broadcasts against the wrong axis."),
    Answer(MOD, "mod_weight_first", t.WrongModWeightFirst,
           "multiplies by the weight before computing the RMS, so the RMS is of x * weight."),
    Answer(MOD, "mod_centres", t.WrongModCentres, "subtracts the mean first: a LayerNorm without bias, not RMSNorm."),
    # pre-LN block
    Answer(BLK, "blk_shared_norm", t.WrongBlkSharedNorm,
           "one RMSNorm object is assigned to both input_layernorm and post_attention_layernorm."),
    Answer(BLK, "blk_post_ln", t.WrongBlkPostLN, "wires both sublayers Post-LN: Norm(x + F(x))."),
    Answer(BLK, "blk_norms_swapped", t.WrongBlkNormsSwapped,
           "post_attention_layernorm before attention and input_layernorm before the MLP."),
    Answer(BLK, "blk_residual_normed", t.WrongBlkResidualNormed,
           "overwrites the stream with the normalised hidden state, so each residual adds Norm(x), not x."),
    Answer(BLK, "blk_parallel", t.WrongBlkParallel,
           "GPT-J's parallel block: attention and MLP both read the block's input x."),
    Answer(BLK, "blk_mlp_reads_input", t.WrongBlkMlpReadsInput,
           "the MLP's norm reads the block's input x instead of the stream after attention."),
    Answer(BLK, "blk_no_second_residual", t.WrongBlkNoSecondResidual, "returns mlp(norm(h)) without adding h back."),
    Answer(BLK, "blk_mlp_first", t.WrongBlkMlpFirst, "applies the feed-forward sublayer before attention."),
    # pre_ln
    Answer(PRE, "pre_is_post", w.wrong_pre_is_post, "wrote Post-LN, Norm(x + F(x)), for Pre-LN."),
    Answer(PRE, "pre_residual_normed", w.wrong_pre_residual_normed,
           "reassigns x = norm(x), so the residual adds Norm(x): Norm(x) + F(Norm(x))."),
    Answer(PRE, "pre_no_residual", w.wrong_pre_no_residual, "returns F(Norm(x)) without the residual x."),
    Answer(PRE, "pre_output_ln", w.wrong_pre_output_ln, "normalises F's output instead of its input: x + Norm(F(x))."),
    Answer(PRE, "pre_final_norm", w.wrong_pre_final_norm,
           "adds a norm after the residual sum too: Norm(x + F(Norm(x)))."),
    Answer(PRE, "pre_inplace", w.wrong_pre_inplace,
           "x += ... overwrites the caller's tensor (the value returned is right)."),
    Answer(PRE, "pre_forgot_norm", w.wrong_pre_forgot_norm, "never calls norm: x + F(x)."),
    # post_ln
    Answer(POST, "post_is_pre", w.wrong_post_is_pre, "wrote Pre-LN, x + F(Norm(x)), for Post-LN."),
    Answer(POST, "post_output_ln", w.wrong_post_output_ln,
           "normalises only F's output before adding x: x + Norm(F(x))."),
    Answer(POST, "post_no_residual", w.wrong_post_no_residual, "returns Norm(F(x)) without the residual x."),
    Answer(POST, "post_result_dropped", w.wrong_post_result_dropped,
           "calls norm(out) but discards its result and returns the un-normalised x + F(x)."),
    Answer(POST, "post_inplace", w.wrong_post_inplace,
           "x += F(x) overwrites the caller's tensor before normalising it."),
    Answer(POST, "post_norm_first", w.wrong_post_norm_first, "normalises x first and then adds: Norm(x) + F(Norm(x))."),
    # peri_ln
    Answer(PERI, "peri_norms_swapped", w.wrong_peri_norms_swapped,
           "uses out_norm on the input and norm on F's output."),
    Answer(PERI, "peri_same_norm", w.wrong_peri_same_norm,
           "uses norm on both sides; out_norm (with its own weight) is never called."),
    Answer(PERI, "peri_norm_on_stream", w.wrong_peri_norm_on_stream,
           "puts the output norm after the residual add: out_norm(x + F(norm(x)))."),
    Answer(PERI, "peri_no_input_norm", w.wrong_peri_no_input_norm, "F reads the raw x: x + out_norm(F(x)), Output-LN."),
    Answer(PERI, "peri_no_out_norm", w.wrong_peri_no_out_norm, "forgets the output norm: x + F(norm(x)), Pre-LN."),
    Answer(PERI, "peri_residual_normed", w.wrong_peri_residual_normed,
           "the residual adds norm(x) instead of x: norm(x) + out_norm(F(norm(x)))."),
    Answer(PERI, "peri_float32_out", w.wrong_peri_float32_out,
           "adds in float32 and returns float32 for half-precision inputs."),
    # qk_norm_logits
    Answer(QK, "qk_no_transpose", w.wrong_qk_no_transpose,
           "multiplies q_norm(q) @ k_norm(k) without transposing the keys (only runs when T = d)."),
    Answer(QK, "qk_no_scale", w.wrong_qk_no_scale, "forgets the 1/sqrt(d) scale."),
    Answer(QK, "qk_scale_by_T", w.wrong_qk_scale_by_T,
           "scales by 1/sqrt(q.shape[1]), the sequence length, instead of the head width."),
    Answer(QK, "qk_norms_swapped", w.wrong_qk_norms_swapped, "applies k_norm to the queries and q_norm to the keys."),
    Answer(QK, "qk_only_q", w.wrong_qk_only_q, "normalises the queries only; the keys enter raw."),
    Answer(QK, "qk_scale_by_d", w.wrong_qk_scale_by_d, "divides by d instead of sqrt(d)."),
    Answer(QK, "qk_keys_as_rows", w.wrong_qk_keys_as_rows,
           "computes k_norm(k) @ q_norm(q)^T, the transposed logits [b, j, i]."),
    Answer(QK, "qk_float32_out", w.wrong_qk_float32_out,
           "casts the normalised q and k to float32 and returns float32 logits."),
    Answer(QK, "qk_norm_after_dot", w.wrong_qk_norm_after_dot,
           "normalises after the dot product: q_norm applied to the raw logits q k^T (only runs when T = d)."),
    # dyt
    Answer(DYT, "dyt_no_affine", w.wrong_dyt_no_affine, "returns tanh(alpha x) without the weight and bias."),
    Answer(DYT, "dyt_weight_inside", w.wrong_dyt_weight_inside,
           "puts the weight inside tanh: tanh(alpha * weight * x) + bias."),
    Answer(DYT, "dyt_no_alpha", w.wrong_dyt_no_alpha, "never uses alpha: weight * tanh(x) + bias."),
    Answer(DYT, "dyt_alpha_outside", w.wrong_dyt_alpha_outside,
           "multiplies alpha outside tanh: alpha * weight * tanh(x) + bias."),
    Answer(DYT, "dyt_float32_out", w.wrong_dyt_float32_out, "computes in float32 and never casts back to x's dtype."),
    Answer(DYT, "dyt_bias_inside", w.wrong_dyt_bias_inside,
           "puts the bias inside tanh: weight * tanh(alpha x + bias)."),
    Answer(DYT, "dyt_divides_alpha", w.wrong_dyt_divides_alpha,
           "divides by alpha instead of multiplying: tanh(x / alpha)."),
    Answer(DYT, "dyt_standardizes", w.wrong_dyt_standardizes,
           "standardises each token (mean, unbiased std over the last axis) before the tanh, as if DyT normalised."),
]

CORRECT: list[Answer] = [
    Answer(LN, "ln_float64_einsum", n.ok_ln_float64_einsum, "computes in float64 with einsum for both statistics."),
    Answer(LN, "ln_row_loop", n.ok_ln_row_loop,
           "a Python loop over the rows of x.reshape(-1, D), with np.dot for the variance."),
    Answer(LN, "ln_hypot", n.ok_ln_hypot,
           "np.std and np.hypot(std, sqrt(eps)) for sqrt(sigma^2 + eps), ufuncs for the affine."),
    Answer(LNB, "lnb_staged", n.ok_lnb_staged,
           "backprop through the graph node by node (dvar, dmu), CS231n's staged way."),
    Answer(LNB, "lnb_jacobian", n.ok_lnb_jacobian,
           "builds every token's D x D Jacobian and contracts it with dy by einsum."),
    Answer(RMS, "rms_vector_norm", t.ok_rms_vector_norm,
           "the mean square from torch.linalg.vector_norm squared over d."),
    Answer(RMS, "rms_float64", t.ok_rms_float64, "computes in float64 (weight too) and casts back."),
    Answer(RMS, "rms_einsum", t.ok_rms_einsum, "the mean square by einsum, division by sqrt, .type_as(x)."),
    Answer(MOD, "mod_type_as", t.OkModTypeAs,
           "weight from torch.full, x.to(float32), torch.mean(x*x, -1, True), .type_as(x)."),
    Answer(MOD, "mod_eps_buffer", t.OkModEpsBuffer, "eps kept as a non-persistent float32 buffer; sum of squares / D."),
    Answer(BLK, "blk_loop", t.OkBlkLoop, "loops over the (norm, sublayer) pairs."),
    Answer(BLK, "blk_helper", t.OkBlkHelper,
           "defines the attributes in another order and calls a pre_ln helper twice."),
    Answer(PRE, "pre_clone_add_", w.ok_pre_clone_add_, "clones x and adds F(Norm(x)) in place on the clone."),
    Answer(PRE, "pre_torch_add_alpha", w.ok_pre_torch_add_alpha, "torch.add(x, F(Norm(x)), alpha=1)."),
    Answer(POST, "post_clone_iadd", w.ok_post_clone_iadd, "h = x.clone(); h += F(x); return Norm(h)."),
    Answer(POST, "post_stack_sum", w.ok_post_stack_sum,
           "sums torch.stack([x, F(x)]) over its first axis before the norm."),
    Answer(PERI, "peri_compose", w.ok_peri_compose, "composes norm, F, out_norm with functools.reduce."),
    Answer(PERI, "peri_steps", w.ok_peri_steps,
           "pops the three callables from a list in a while loop, then torch.add(h, x)."),
    Answer(QK, "qk_einsum", w.ok_qk_einsum, "einsum('bid,bjd->bij') times d ** -0.5."),
    Answer(QK, "qk_prescaled", w.ok_qk_prescaled,
           "scales both normalised q and k by d ** -0.25 before the product, with .mT."),
    Answer(QK, "qk_bmm", w.ok_qk_bmm, "torch.bmm, then div_ in place on the fresh logits."),
    Answer(DYT, "dyt_sigmoid", w.ok_dyt_sigmoid, "tanh written as 2 sigmoid(2z) - 1."),
    Answer(DYT, "dyt_addcmul", w.ok_dyt_addcmul, "torch.addcmul(bias, weight, tanh(x * alpha.item()))."),
]
