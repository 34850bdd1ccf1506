"""Held-out answers to the numpy questions: `layer_norm` (release/layernorm) and
`layer_norm_backward` (release/layernorm_backward).

Written from the lesson text and the assignments' instructions only (issue 31 item 5), without
reading the checkers. Each function has the signature the assignment asks; the `wrong_*` ones
contain one mistake a student makes, the `ok_*` ones are correct but written unusually.
`tests/corpus/heldout.py` lists them with one sentence each.
"""
import numpy as np

# ---------------------------------------------------------------- layer_norm, wrong answers


def wrong_ln_ddof1(x, weight, bias, eps=1e-5):
    xf = x.astype(np.float32)
    mu = xf.mean(axis=-1, keepdims=True)
    var = xf.var(axis=-1, ddof=1, keepdims=True)
    return (weight * (xf - mu) / np.sqrt(var + eps) + bias).astype(x.dtype)


def wrong_ln_eps_outside(x, weight, bias, eps=1e-5):
    xf = x.astype(np.float32)
    mu = xf.mean(axis=-1, keepdims=True)
    std = np.sqrt(((xf - mu) ** 2).mean(axis=-1, keepdims=True))
    return (weight * (xf - mu) / (std + eps) + bias).astype(x.dtype)


def wrong_ln_no_keepdims(x, weight, bias, eps=1e-5):
    xf = x.astype(np.float32)
    mu = xf.mean(axis=-1)
    var = xf.var(axis=-1)
    return (weight * (xf - mu) / np.sqrt(var + eps) + bias).astype(x.dtype)


def wrong_ln_batch_axis(x, weight, bias, eps=1e-5):
    xf = x.astype(np.float32)
    mu = xf.mean(axis=0, keepdims=True)
    var = xf.var(axis=0, keepdims=True)
    return (weight * (xf - mu) / np.sqrt(var + eps) + bias).astype(x.dtype)


def wrong_ln_float16_arith(x, weight, bias, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (weight * (x - mu) / np.sqrt(var + eps) + bias).astype(x.dtype)


def wrong_ln_float32_out(x, weight, bias, eps=1e-5):
    x = x.astype(np.float32)
    mu = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return weight * (x - mu) / np.sqrt(var + eps) + bias


def wrong_ln_inplace(x, weight, bias, eps=1e-5):
    xf = np.asarray(x, dtype=np.float32)
    xf -= xf.mean(axis=-1, keepdims=True)
    xf /= np.sqrt((xf ** 2).mean(axis=-1, keepdims=True) + eps)
    return (weight * xf + bias).astype(x.dtype)


def wrong_ln_bias_then_weight(x, weight, bias, eps=1e-5):
    xf = x.astype(np.float32)
    mu = xf.mean(axis=-1, keepdims=True)
    var = xf.var(axis=-1, keepdims=True)
    xhat = (xf - mu) / np.sqrt(var + eps)
    return ((xhat + bias) * weight).astype(x.dtype)


def wrong_ln_var_uncentered(x, weight, bias, eps=1e-5):
    xf = x.astype(np.float32)
    mu = xf.mean(axis=-1, keepdims=True)
    var = (xf ** 2).mean(axis=-1, keepdims=True)
    return (weight * (xf - mu) / np.sqrt(var + eps) + bias).astype(x.dtype)


def wrong_ln_no_eps(x, weight, bias, eps=1e-5):
    xf = x.astype(np.float32)
    mu = xf.mean(axis=-1, keepdims=True)
    var = xf.var(axis=-1, keepdims=True)
    return (weight * (xf - mu) / np.sqrt(var) + bias).astype(x.dtype)


def wrong_ln_divide_by_var(x, weight, bias, eps=1e-5):
    xf = x.astype(np.float32)
    mu = xf.mean(axis=-1, keepdims=True)
    var = xf.var(axis=-1, keepdims=True)
    return (weight * (xf - mu) / (var + eps) + bias).astype(x.dtype)


def wrong_ln_no_bias(x, weight, bias, eps=1e-5):
    xf = x.astype(np.float32)
    mu = xf.mean(axis=-1, keepdims=True)
    var = xf.var(axis=-1, keepdims=True)
    return (weight * (xf - mu) / np.sqrt(var + eps)).astype(x.dtype)


# ---------------------------------------------------------------- layer_norm, correct answers


def ok_ln_float64_einsum(x, weight, bias, eps=1e-5):
    x64 = np.asarray(x, dtype=np.float64)
    d = x64.shape[-1]
    mu = np.einsum("...d,d->...", x64, np.full(d, 1.0 / d))[..., None]
    c = x64 - mu
    var = np.einsum("...d,...d->...", c, c)[..., None] / d
    return (c / np.sqrt(var + eps) * weight + bias).astype(x.dtype)


def ok_ln_row_loop(x, weight, bias, eps=1e-5):
    xf = x.astype(np.float32)
    rows = xf.reshape(-1, xf.shape[-1])
    out = np.empty_like(rows)
    for i, row in enumerate(rows):
        c = row - row.sum() / row.size
        out[i] = weight * c / np.sqrt(np.dot(c, c) / row.size + eps) + bias
    return out.reshape(x.shape).astype(x.dtype)


def ok_ln_hypot(x, weight, bias, eps=1e-5):
    xf = x.astype(np.float32)
    centred = np.subtract(xf, np.mean(xf, axis=-1, keepdims=True))
    denom = np.hypot(np.std(xf, axis=-1, keepdims=True), np.float32(np.sqrt(eps)))
    return np.add(np.multiply(weight, centred / denom), bias).astype(x.dtype)


# ------------------------------------------------------- layer_norm_backward, shared forward


def _forward(x, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    r = 1.0 / np.sqrt(var + eps)
    return (x - mu) * r, r


def _param_sums(dy, xhat):
    d = dy.shape[-1]
    return (dy * xhat).reshape(-1, d).sum(axis=0), dy.reshape(-1, d).sum(axis=0)


# ------------------------------------------------------- layer_norm_backward, wrong answers


def wrong_lnb_no_mean_term(dy, x, weight, eps=1e-5):
    xhat, r = _forward(x, eps)
    g = dy * weight
    dx = r * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return (dx, *_param_sums(dy, xhat))


def wrong_lnb_no_var_term(dy, x, weight, eps=1e-5):
    xhat, r = _forward(x, eps)
    g = dy * weight
    dx = r * (g - g.mean(axis=-1, keepdims=True))
    return (dx, *_param_sums(dy, xhat))


def wrong_lnb_no_gamma(dy, x, weight, eps=1e-5):
    xhat, r = _forward(x, eps)
    g = dy
    dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return (dx, *_param_sums(dy, xhat))


def wrong_lnb_params_not_summed(dy, x, weight, eps=1e-5):
    xhat, r = _forward(x, eps)
    g = dy * weight
    dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, dy * xhat, dy


def wrong_lnb_sum_axis0(dy, x, weight, eps=1e-5):
    xhat, r = _forward(x, eps)
    g = dy * weight
    dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def wrong_lnb_sum_last_axis(dy, x, weight, eps=1e-5):
    xhat, r = _forward(x, eps)
    g = dy * weight
    dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, (dy * xhat).sum(axis=-1), dy.sum(axis=-1)


def wrong_lnb_dbias_mean(dy, x, weight, eps=1e-5):
    xhat, r = _forward(x, eps)
    g = dy * weight
    dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    d = dy.shape[-1]
    return dx, (dy * xhat).reshape(-1, d).sum(axis=0), dy.reshape(-1, d).mean(axis=0)


def wrong_lnb_ddof1(dy, x, weight, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, ddof=1, keepdims=True)
    r = 1.0 / np.sqrt(var + eps)
    xhat = (x - mu) * r
    g = dy * weight
    dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return (dx, *_param_sums(dy, xhat))


def wrong_lnb_var_term_sum(dy, x, weight, eps=1e-5):
    xhat, r = _forward(x, eps)
    g = dy * weight
    dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).sum(axis=-1, keepdims=True))
    return (dx, *_param_sums(dy, xhat))


def wrong_lnb_dweight_raw_x(dy, x, weight, eps=1e-5):
    xhat, r = _forward(x, eps)
    g = dy * weight
    dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    d = dy.shape[-1]
    return dx, (dy * x).reshape(-1, d).sum(axis=0), dy.reshape(-1, d).sum(axis=0)


def wrong_lnb_eps_dropped(dy, x, weight, eps=1e-5):
    xhat, r = _forward(x, 0.0)
    g = dy * weight
    dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return (dx, *_param_sums(dy, xhat))


# ------------------------------------------------------- layer_norm_backward, correct answers


def ok_lnb_staged(dy, x, weight, eps=1e-5):
    """Backprop through the computational graph one node at a time (CS231n's staged way)."""
    d = x.shape[-1]
    mu = x.mean(axis=-1, keepdims=True)
    xmu = x - mu
    var = (xmu ** 2).mean(axis=-1, keepdims=True)
    sqrtvar = np.sqrt(var + eps)
    ivar = 1.0 / sqrtvar
    xhat = xmu * ivar
    dxhat = dy * weight
    divar = (dxhat * xmu).sum(axis=-1, keepdims=True)
    dxmu1 = dxhat * ivar
    dsqrtvar = -divar / sqrtvar ** 2
    dvar = 0.5 * dsqrtvar / sqrtvar
    dxmu2 = 2.0 * xmu * dvar / d
    dx1 = dxmu1 + dxmu2
    dmu = -dx1.sum(axis=-1, keepdims=True)
    dx = dx1 + dmu / d
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xhat).sum(axis=lead), dy.sum(axis=lead)


def ok_lnb_jacobian(dy, x, weight, eps=1e-5):
    """The full per-token Jacobian dy_i/dx_j, contracted with dy by einsum."""
    d = x.shape[-1]
    mu = x.mean(axis=-1, keepdims=True)
    r = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat = (x - mu) * r
    jac = weight[:, None] * r[..., None] * (np.eye(d) - 1.0 / d - xhat[..., :, None] * xhat[..., None, :] / d)
    dx = np.einsum("...i,...ij->...j", dy, jac)
    flat_dy, flat_xhat = dy.reshape(-1, d), xhat.reshape(-1, d)
    return dx, np.einsum("nd,nd->d", flat_dy, flat_xhat), np.einsum("nd->d", flat_dy)
