"""Held-out answers to the questions whose answers take callables or are lesson 04's:
`pre_ln`, `post_ln` (release/block), `peri_ln`, `qk_norm_logits`, `dyt` (release/modern).

Written from the lesson text and the assignments' instructions only (issue 31 item 5), without
reading the checkers. `wrong_*` contain one mistake each; `ok_*` are correct but written
unusually. `tests/corpus/heldout.py` lists them with one sentence each.
"""
import math
from functools import reduce

import torch

# ---------------------------------------------------------------- pre_ln, wrong answers


def wrong_pre_is_post(x, sublayer, norm):
    return norm(x + sublayer(x))


def wrong_pre_residual_normed(x, sublayer, norm):
    x = norm(x)
    return x + sublayer(x)


def wrong_pre_no_residual(x, sublayer, norm):
    return sublayer(norm(x))


def wrong_pre_output_ln(x, sublayer, norm):
    return x + norm(sublayer(x))


def wrong_pre_final_norm(x, sublayer, norm):
    return norm(x + sublayer(norm(x)))


def wrong_pre_inplace(x, sublayer, norm):
    x += sublayer(norm(x))
    return x


def wrong_pre_forgot_norm(x, sublayer, norm):
    return x + sublayer(x)


# ---------------------------------------------------------------- pre_ln, correct answers


def ok_pre_clone_add_(x, sublayer, norm):
    out = x.clone()
    out.add_(sublayer(norm(x)))
    return out


def ok_pre_torch_add_alpha(x, sublayer, norm):
    normed = norm(x)
    return torch.add(x, sublayer(normed), alpha=1)


# ---------------------------------------------------------------- post_ln, wrong answers


def wrong_post_is_pre(x, sublayer, norm):
    return x + sublayer(norm(x))


def wrong_post_output_ln(x, sublayer, norm):
    return x + norm(sublayer(x))


def wrong_post_no_residual(x, sublayer, norm):
    return norm(sublayer(x))


def wrong_post_result_dropped(x, sublayer, norm):
    out = x + sublayer(x)
    norm(out)
    return out


def wrong_post_inplace(x, sublayer, norm):
    x += sublayer(x)
    return norm(x)


def wrong_post_norm_first(x, sublayer, norm):
    x = norm(x)
    return x + sublayer(x)


# ---------------------------------------------------------------- post_ln, correct answers


def ok_post_clone_iadd(x, sublayer, norm):
    h = x.clone()
    h += sublayer(x)
    return norm(h)


def ok_post_stack_sum(x, sublayer, norm):
    return norm(torch.stack([x, sublayer(x)]).sum(dim=0))


# ---------------------------------------------------------------- peri_ln, wrong answers


def wrong_peri_norms_swapped(x, sublayer, norm, out_norm):
    return x + norm(sublayer(out_norm(x)))


def wrong_peri_same_norm(x, sublayer, norm, out_norm):
    return x + norm(sublayer(norm(x)))


def wrong_peri_norm_on_stream(x, sublayer, norm, out_norm):
    return out_norm(x + sublayer(norm(x)))


def wrong_peri_no_input_norm(x, sublayer, norm, out_norm):
    return x + out_norm(sublayer(x))


def wrong_peri_no_out_norm(x, sublayer, norm, out_norm):
    return x + sublayer(norm(x))


def wrong_peri_residual_normed(x, sublayer, norm, out_norm):
    h = norm(x)
    return h + out_norm(sublayer(h))


def wrong_peri_float32_out(x, sublayer, norm, out_norm):
    return x.float() + out_norm(sublayer(norm(x))).float()


# ---------------------------------------------------------------- peri_ln, correct answers


def ok_peri_compose(x, sublayer, norm, out_norm):
    branch = reduce(lambda f, g: (lambda v: g(f(v))), (norm, sublayer, out_norm))
    return x + branch(x)


def ok_peri_steps(x, sublayer, norm, out_norm):
    steps = [norm, sublayer, out_norm]
    h = x
    while steps:
        h = steps.pop(0)(h)
    return torch.add(h, x)


# ---------------------------------------------------------------- qk_norm_logits, wrong answers


def wrong_qk_no_transpose(q, k, q_norm, k_norm):
    return q_norm(q) @ k_norm(k) / math.sqrt(q.shape[-1])


def wrong_qk_no_scale(q, k, q_norm, k_norm):
    return q_norm(q) @ k_norm(k).transpose(-2, -1)


def wrong_qk_scale_by_T(q, k, q_norm, k_norm):
    return q_norm(q) @ k_norm(k).transpose(-2, -1) / math.sqrt(q.shape[1])


def wrong_qk_norms_swapped(q, k, q_norm, k_norm):
    return k_norm(q) @ q_norm(k).transpose(-2, -1) / math.sqrt(q.shape[-1])


def wrong_qk_only_q(q, k, q_norm, k_norm):
    return q_norm(q) @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def wrong_qk_scale_by_d(q, k, q_norm, k_norm):
    return q_norm(q) @ k_norm(k).transpose(-2, -1) / q.shape[-1]


def wrong_qk_keys_as_rows(q, k, q_norm, k_norm):
    return k_norm(k) @ q_norm(q).transpose(-2, -1) / math.sqrt(q.shape[-1])


def wrong_qk_float32_out(q, k, q_norm, k_norm):
    qn = q_norm(q).float()
    kn = k_norm(k).float()
    return qn @ kn.transpose(-2, -1) / math.sqrt(q.shape[-1])


def wrong_qk_norm_after_dot(q, k, q_norm, k_norm):
    return q_norm(q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])


# ---------------------------------------------------------------- qk_norm_logits, correct answers


def ok_qk_einsum(q, k, q_norm, k_norm):
    return torch.einsum("bid,bjd->bij", q_norm(q), k_norm(k)) * q.shape[-1] ** -0.5


def ok_qk_prescaled(q, k, q_norm, k_norm):
    s = q.shape[-1] ** -0.25
    return (q_norm(q) * s) @ (k_norm(k) * s).mT


def ok_qk_bmm(q, k, q_norm, k_norm):
    logits = torch.bmm(q_norm(q), k_norm(k).transpose(1, 2))
    return logits.div_(math.sqrt(q.size(-1)))


# ---------------------------------------------------------------- dyt, wrong answers


def wrong_dyt_no_affine(x, alpha, weight, bias):
    return torch.tanh(alpha * x.float()).to(x.dtype)


def wrong_dyt_weight_inside(x, alpha, weight, bias):
    return (torch.tanh(alpha * weight * x.float()) + bias).to(x.dtype)


def wrong_dyt_no_alpha(x, alpha, weight, bias):
    return (weight * torch.tanh(x.float()) + bias).to(x.dtype)


def wrong_dyt_alpha_outside(x, alpha, weight, bias):
    return (alpha * weight * torch.tanh(x.float()) + bias).to(x.dtype)


def wrong_dyt_float32_out(x, alpha, weight, bias):
    return weight * torch.tanh(alpha * x.float()) + bias


def wrong_dyt_bias_inside(x, alpha, weight, bias):
    return (weight * torch.tanh(alpha * x.float() + bias)).to(x.dtype)


def wrong_dyt_divides_alpha(x, alpha, weight, bias):
    return (weight * torch.tanh(x.float() / alpha) + bias).to(x.dtype)


def wrong_dyt_standardizes(x, alpha, weight, bias):
    xf = x.float()
    z = (xf - xf.mean(dim=-1, keepdim=True)) / (xf.std(dim=-1, keepdim=True) + 1e-6)
    return (weight * torch.tanh(alpha * z) + bias).to(x.dtype)


# ---------------------------------------------------------------- dyt, correct answers


def ok_dyt_sigmoid(x, alpha, weight, bias):
    z = alpha * x.float()
    return (weight * (2.0 * torch.sigmoid(2.0 * z) - 1.0) + bias).to(x.dtype)


def ok_dyt_addcmul(x, alpha, weight, bias):
    return torch.addcmul(bias, weight, torch.tanh(x.float().mul(alpha.item()))).to(dtype=x.dtype)
