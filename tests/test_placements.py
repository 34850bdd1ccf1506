"""normref.placements (Peri-LN, Output-LN, DeepNorm, QK-norm logits), DyT, and the block/stack
options that name them: each against an implementation written here, differently (float64 numpy,
token by token), on the seed token by hand, and on [B, T, D] batches."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import normref
from normref import (DyT, TransformerBlock, TransformerStack, deep_norm, deepnorm_constants, dyt, output_ln,
                     peri_ln, qk_norm_logits)


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


S = 1 / math.sqrt(2 / 3)  # the seed: LN(1, 2, 3) = (-1, 0, 1) / sqrt(2/3) = (-S, 0, S)
SEED = np.array([1.0, 2.0, 3.0])


def ln64(v, gamma=None, beta=None, eps=0.0):
    """LayerNorm, one token at a time, in float64 (the reference written out)."""
    v = np.asarray(v, np.float64)
    out = np.empty_like(v)
    for idx in np.ndindex(v.shape[:-1]):
        row = v[idx]
        mu = sum(row) / len(row)
        var = sum((r - mu) ** 2 for r in row) / len(row)
        out[idx] = [(r - mu) / math.sqrt(var + eps) for r in row]
    if gamma is not None:
        out = out * np.asarray(gamma, np.float64)
    if beta is not None:
        out = out + np.asarray(beta, np.float64)
    return out


def rms64(v, gamma=None, eps=0.0):
    v = np.asarray(v, np.float64)
    out = v / np.sqrt(np.einsum("...d,...d->...", v, v)[..., None] / v.shape[-1] + eps)
    return out if gamma is None else out * np.asarray(gamma, np.float64)


def roll(v):
    return torch.roll(v, 1, dims=-1) if isinstance(v, torch.Tensor) else np.roll(v, 1, axis=-1)


# ----------------------------------------------------------------------------- the seed token, by hand


def test_peri_output_and_deep_norm_on_the_seed_token_by_hand():
    ln = lambda v: normref.layer_norm(v, eps=0.0)  # noqa: E731
    two = lambda v: 2 * v  # noqa: E731
    # Peri-LN, F(v) = 2v: x + LN(2 LN(x)) = x + LN(x) (LN is scale-invariant) = (1 - S, 2, 3 + S)
    np.testing.assert_allclose(peri_ln(SEED, two, ln), [1 - S, 2, 3 + S], atol=1e-12)
    # F = roll: LN(x) = (-S, 0, S) -> (S, -S, 0), already mean 0, variance 2 S^2 / 3 = 1: x + (S, -S, 0)
    np.testing.assert_allclose(peri_ln(SEED, roll, ln), [1 + S, 2 - S, 3], atol=1e-12)
    # Output-LN, F(v) = 2v: x + LN(2x) = x + LN(x); F = roll: x + LN(3, 1, 2) = x + (S, -S, 0)
    np.testing.assert_allclose(output_ln(SEED, two, ln), [1 - S, 2, 3 + S], atol=1e-12)
    np.testing.assert_allclose(output_ln(SEED, roll, ln), [1 + S, 2 - S, 3], atol=1e-12)
    # DeepNorm, alpha 2, F(v) = 2v: LN(4x) = LN(x); F = roll: LN(2 (1, 2, 3) + (3, 1, 2)) = LN(5, 5, 8)
    # = (-1, -1, 2) / sqrt(2)
    np.testing.assert_allclose(deep_norm(SEED, two, ln, 2.0), [-S, 0, S], atol=1e-12)
    np.testing.assert_allclose(deep_norm(SEED, roll, ln, 2.0), np.array([-1, -1, 2]) / math.sqrt(2), atol=1e-12)
    # alpha = 1 is Post-LN
    np.testing.assert_allclose(deep_norm(SEED, roll, ln, 1.0), normref.post_ln(SEED, roll, ln), atol=0)


def test_qk_norm_logit_of_the_seed_token_is_sqrt_3():
    # RMSNorm(1, 2, 3) = (0.463, 0.926, 1.389), whose squares sum to d = 3; divided by sqrt(3): sqrt(3)
    q = torch.tensor([[[1.0, 2.0, 3.0]]])  # [B=1, T=1, d=3]
    rms = normref.RMSNorm(3, eps=0.0)
    got = qk_norm_logits(q, q, rms, rms)
    assert got.shape == (1, 1, 1)
    assert got.item() == pytest.approx(math.sqrt(3), abs=1e-6)
    # without QK-norm: (1 + 4 + 9) / sqrt(3) = 8.083
    assert qk_norm_logits(q, q).item() == pytest.approx(14 / math.sqrt(3), abs=1e-5)


def test_dyt_of_the_seed_token():
    # alpha 0.5: tanh(0.5, 1.0, 1.5) = (0.4621, 0.7616, 0.9051); gamma (1, 2, 3), beta 0.5
    want = np.tanh([0.5, 1.0, 1.5])
    np.testing.assert_allclose(dyt(SEED, 0.5), want, atol=1e-15)
    np.testing.assert_allclose(dyt(torch.tensor(SEED), 0.5, torch.tensor([1.0, 2, 3]), torch.full((3,), 0.5)),
                               want * [1, 2, 3] + 0.5, atol=1e-15)
    assert np.allclose(want, [0.46211716, 0.76159416, 0.90514825])


# ----------------------------------------------------------------------------- [B, T, D] batches, float64


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_placements_match_a_float64_token_by_token_reference(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 8, generator=g, dtype=torch.float64) * 2 + 0.5
    W = torch.randn(8, 8, generator=g, dtype=torch.float64) / math.sqrt(8)
    r = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    gamma, beta = 1 + 0.5 * r(8), 0.3 * r(8)
    gamma2 = 1 + 0.5 * torch.randn(8, generator=g, dtype=torch.float64)
    Fx = lambda v: torch.tanh(v @ W)  # noqa: E731
    N = lambda v: normref.layer_norm(v, gamma, beta)  # noqa: E731
    N2 = lambda v: normref.rms_norm(v, gamma2)  # noqa: E731
    xn = x.numpy()
    F64 = lambda v: np.tanh(v @ W.numpy())  # noqa: E731
    ln = lambda v: ln64(v, gamma.numpy(), beta.numpy(), eps=1e-5)  # noqa: E731
    rms = lambda v: rms64(v, gamma2.numpy(), eps=1e-6)  # noqa: E731
    np.testing.assert_allclose(peri_ln(x, Fx, N, N2).numpy(), xn + rms(F64(ln(xn))), atol=1e-12)
    np.testing.assert_allclose(peri_ln(x, Fx, N).numpy(), xn + ln(F64(ln(xn))), atol=1e-12)
    np.testing.assert_allclose(output_ln(x, Fx, N).numpy(), xn + ln(F64(xn)), atol=1e-12)
    a = 1.7
    np.testing.assert_allclose(deep_norm(x, Fx, N, a).numpy(), ln(a * xn + F64(xn)), atol=1e-12)
    assert torch.equal(x, x.clone())


def test_placements_leave_x_alone_and_refuse_a_bad_alpha():
    x = torch.randn(2, 3, 8)
    before = x.clone()
    lin, norm = torch.nn.Linear(8, 8), normref.RMSNorm(8)
    for y in (peri_ln(x, lin, norm), output_ln(x, lin, norm), deep_norm(x, lin, norm, 2.0)):
        assert y.shape == (2, 3, 8)
    assert torch.equal(x, before)
    for bad in (0, -1.0, float("nan"), float("inf"), "2"):
        with pytest.raises(ValueError, match="alpha must be a positive number"):
            deep_norm(x, lin, norm, bad)


def test_deepnorm_constants_are_wang_et_al_decoder_only():
    for n in (1, 6, 100, 1000):
        a, b = deepnorm_constants(n)
        assert a == pytest.approx(math.sqrt(math.sqrt(2 * n)))
        assert b == pytest.approx(1 / math.sqrt(math.sqrt(8 * n)))
    assert deepnorm_constants(6) == pytest.approx((1.8612, 0.3799), abs=1e-4)
    with pytest.raises(ValueError, match="n_layers"):
        deepnorm_constants(0)


def attention_logits64(q, k, q_norm=None, k_norm=None):
    """One logit at a time: sum_c qn[i, c] kn[j, c] / sqrt(d), float64."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    qn = q if q_norm is None else q_norm(q)
    kn = k if k_norm is None else k_norm(k)
    *lead, T, d = q.shape
    out = np.zeros((*lead, T, T))
    for idx in np.ndindex(*lead):
        for i in range(T):
            for j in range(T):
                out[idx + (i, j)] = sum(qn[idx + (i, c)] * kn[idx + (j, c)] for c in range(d)) / math.sqrt(d)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_qk_norm_logits_on_b_t_d_in_every_dtype(dtype):
    # B = T = D: a logit taken over the wrong axis has the right shape and the wrong values
    g = torch.Generator().manual_seed(4)
    q, k = (torch.randn(4, 4, 4, generator=g) * 3).to(dtype), (torch.randn(4, 4, 4, generator=g) * 3).to(dtype)
    gq, gk = 1 + 0.3 * torch.randn(4, generator=g), 1 + 0.3 * torch.randn(4, generator=g)
    qn, kn = normref.RMSNorm(4), normref.RMSNorm(4)
    with torch.no_grad():
        qn.weight.copy_(gq)
        kn.weight.copy_(gk)
        got = qk_norm_logits(q, k, qn, kn)
    assert got.shape == (4, 4, 4) and got.dtype == dtype
    want = attention_logits64(q.double().numpy(), k.double().numpy(),
                              lambda v: rms64(v, gq.numpy(), 1e-6), lambda v: rms64(v, gk.numpy(), 1e-6))
    tol = {torch.float32: 1e-5, torch.float16: 2e-2, torch.bfloat16: 8e-2}[dtype]
    np.testing.assert_allclose(got.double().numpy(), want, atol=tol, rtol=tol)
    with pytest.raises(ValueError, match="same shape"):
        qk_norm_logits(q, k[:, :3])


# ----------------------------------------------------------------------------- DyT


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dyt_computes_in_float32_and_casts_back(dtype):
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(2, 3, 8, generator=g) * 4).to(dtype)
    w, b = 1 + torch.randn(8, generator=g), torch.randn(8, generator=g)
    got = dyt(x, torch.tensor([0.7]), w, b)
    assert got.dtype == dtype and got.shape == (2, 3, 8)
    want = (np.tanh(0.7 * x.double().numpy()) * w.double().numpy() + b.double().numpy())
    assert torch.equal(got, torch.from_numpy(want).to(torch.float32).to(dtype)) or np.allclose(
        got.double().numpy(), want, atol={torch.float32: 1e-6, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype])
    # numpy in, numpy out, float64 kept
    out = dyt(x.double().numpy(), 0.7, w.numpy(), b.numpy())
    assert isinstance(out, np.ndarray) and out.dtype == np.float64
    np.testing.assert_allclose(out, want, atol=1e-6)
    with pytest.raises(ValueError, match="alpha must be one number"):
        dyt(x, torch.ones(2))


def test_dyt_module_is_zhu_et_al_reference_module():
    torch.manual_seed(6)
    m = DyT(8, alpha_init=0.8)
    assert [n for n, _ in m.named_parameters()] == ["alpha", "weight", "bias"]
    assert m.alpha.shape == (1,) and float(m.alpha) == pytest.approx(0.8)
    assert torch.equal(m.weight, torch.ones(8)) and torch.equal(m.bias, torch.zeros(8))
    assert DyT(8).alpha.item() == 0.5 and DyT(8, bias=False).bias is None
    with torch.no_grad():
        m.weight.copy_(torch.randn(8))
        m.bias.copy_(torch.randn(8))
    x = torch.randn(2, 3, 8, requires_grad=True)
    ref = torch.tanh(m.alpha * x) * m.weight + m.bias  # Zhu et al.'s DyT.forward (channels last)
    torch.testing.assert_close(m(x), ref)
    m(x).sum().backward()
    assert m.alpha.grad is not None and x.grad is not None
    with pytest.raises(ValueError, match=r"DyT\(8\) normalizes a last axis of size 8"):
        m(torch.randn(2, 3, 4))


# ----------------------------------------------------------------------------- QK-norm in attention


def test_attention_with_qk_norm_matches_sdpa_on_normalised_queries_and_keys():
    torch.manual_seed(7)
    attn = normref.CausalSelfAttention(8, 2, qk_norm="rms")
    assert isinstance(attn.q_norm, normref.RMSNorm) and attn.q_norm.normalized_shape == (4,)
    with torch.no_grad():
        attn.q_norm.weight.copy_(torch.randn(4))
        attn.k_norm.weight.copy_(torch.randn(4))
    x = torch.randn(2, 3, 8)

    def heads(t):
        return t.view(2, 3, 2, 4).transpose(1, 2)

    q = normref.rms_norm(heads(attn.q_proj(x)), attn.q_norm.weight)
    k = normref.rms_norm(heads(attn.k_proj(x)), attn.k_norm.weight)
    y = F.scaled_dot_product_attention(q, k, heads(attn.v_proj(x)), is_causal=True)
    torch.testing.assert_close(attn(x), attn.o_proj(y.transpose(1, 2).reshape(2, 3, 8)))
    torch.testing.assert_close(attn.logits(x), qk_norm_logits(heads(attn.q_proj(x)), heads(attn.k_proj(x)),
                                                              attn.q_norm, attn.k_norm))


def test_qk_norm_bounds_the_logits_whatever_the_projections():
    # with RMSNorm (weight 1) every query and key has squared norm d = 4, so |logit| <= 4 / sqrt(4) = 2;
    # scaling W_q by 100 scales plain logits by 100 and leaves QK-normed ones unchanged
    torch.manual_seed(8)
    x = torch.randn(2, 5, 8)
    plain, normed = normref.CausalSelfAttention(8, 2), normref.CausalSelfAttention(8, 2, qk_norm="rms")
    normed.load_state_dict(plain.state_dict(), strict=False)
    before_plain, before_normed = plain.logits(x).detach(), normed.logits(x).detach()
    with torch.no_grad():
        for m in (plain, normed):
            m.q_proj.weight.mul_(100)
    torch.testing.assert_close(plain.logits(x).detach(), 100 * before_plain, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(normed.logits(x).detach(), before_normed, rtol=1e-4, atol=1e-5)
    assert normed.logits(x).abs().max() <= 2 + 1e-5
    assert normref.CausalSelfAttention(8, 2, qk_norm="layer").q_norm.bias is not None
    with pytest.raises(ValueError, match="qk_norm must be None, 'rms' or 'layer'"):
        normref.CausalSelfAttention(8, 2, qk_norm="l2")


# ----------------------------------------------------------------------------- the block and the stack


def _block_ref(blk, x):
    """The block's two sublayers, written from the placement table (not from blk.forward)."""
    A, M, N1, N2 = blk.self_attn, blk.mlp, blk.input_layernorm, blk.post_attention_layernorm
    p = blk.placement
    if p == "peri":
        h = peri_ln(x, A, N1, blk.attn_output_norm)
        return peri_ln(h, M, N2, blk.mlp_output_norm)
    if p == "output":
        return output_ln(output_ln(x, A, N1), M, N2)
    if p == "deep":
        return deep_norm(deep_norm(x, A, N1, blk.alpha), M, N2, blk.alpha)
    f = normref.pre_ln if p == "pre" else normref.post_ln
    return f(f(x, A, N1), M, N2)


@pytest.mark.parametrize("norm", ["rms", "layer", "dyt"])
@pytest.mark.parametrize("placement", list(normref.PLACEMENTS))
def test_every_placement_of_the_block_is_its_formula(placement, norm):
    torch.manual_seed(9)
    blk = TransformerBlock(8, 2, norm=norm, placement=placement, qk_norm="rms")
    x = torch.randn(2, 3, 8) * 2
    with torch.no_grad():
        torch.testing.assert_close(blk(x), _block_ref(blk, x))
    peri = placement == "peri"
    assert (blk.attn_output_norm is not None) == peri and (blk.mlp_output_norm is not None) == peri


def test_peri_ln_block_normalises_each_sublayer_output_before_the_add():
    # With weight-1 RMSNorm output norms, each sublayer adds a vector of RMS 1 to the stream.
    torch.manual_seed(10)
    blk = TransformerBlock(8, 2, norm="rms", placement="peri")
    x = torch.randn(2, 3, 8) * 5
    with torch.no_grad():
        h = x + blk.attn_output_norm(blk.self_attn(blk.input_layernorm(x)))
        added = blk(x) - h
    rms = added.pow(2).mean(-1).sqrt()
    torch.testing.assert_close(rms, torch.ones(2, 3), atol=1e-4, rtol=0)  # float32, a stream of size ~10


def test_deepnorm_block_scales_the_residual_and_the_init():
    a6, b6 = deepnorm_constants(6)
    torch.manual_seed(11)
    stack = TransformerStack(6, 32, 4, norm="layer", placement="deep")
    torch.manual_seed(11)
    post = TransformerStack(6, 32, 4, norm="layer", placement="post")
    assert stack.norm is None and all(b.alpha == pytest.approx(a6) for b in stack.layers)
    for bd, bp in zip(stack.layers, post.layers):
        for name in ("self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            wd, wp = bd.get_submodule(name).weight, bp.get_submodule(name).weight
            torch.testing.assert_close(wd, b6 * wp)  # same draw, times beta
        for name in ("self_attn.q_proj", "self_attn.k_proj"):
            assert torch.equal(bd.get_submodule(name).weight, bp.get_submodule(name).weight)
    blk = TransformerBlock(8, 2, placement="deep", alpha=3.0, beta=0.5)
    assert blk.alpha == 3.0
    with pytest.raises(ValueError, match="alpha and beta are DeepNorm's"):
        TransformerBlock(8, 2, placement="pre", alpha=2.0)
    with pytest.raises(ValueError, match="alpha and beta are DeepNorm's"):
        TransformerStack(2, 8, 2, placement="post", beta=0.5)


def test_stack_final_norm_follows_the_placement():
    for placement in normref.PLACEMENTS:
        torch.manual_seed(12)
        stack = TransformerStack(2, 8, 2, norm="dyt", placement=placement)
        x = torch.randn(2, 3, 8)
        y, hidden = stack(x, return_hidden=True)
        if placement in ("pre", "peri", "output"):
            assert isinstance(stack.norm, DyT)
            torch.testing.assert_close(y, stack.norm(hidden[-1]))
        else:
            assert stack.norm is None and torch.equal(y, hidden[-1])


def test_pre_and_post_blocks_are_unchanged_by_the_new_options():
    # the new options draw no random numbers: a Pre-/Post-LN block has the same weights as before
    for placement in ("pre", "post"):
        torch.manual_seed(13)
        a = TransformerBlock(8, 2, placement=placement)
        torch.manual_seed(13)
        b = TransformerBlock(8, 2, placement=placement, qk_norm="rms")
        theirs = dict(b.named_parameters())
        for n, p in a.named_parameters():
            assert torch.equal(p, theirs[n]), n
        assert sorted(set(theirs) - dict(a.named_parameters()).keys()) == [
            "self_attn.k_norm.weight", "self_attn.q_norm.weight"]
