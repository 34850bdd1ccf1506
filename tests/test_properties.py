"""Property tests (hypothesis): what LayerNorm and RMSNorm guarantee for every input, not just the seed's.

Closed forms used (biased statistics, eps inside the square root, gamma = 1, beta = 0):
per token, LN(x) has mean 0 and variance var / (var + eps); RMSNorm(x) has mean square
ms / (ms + eps). With eps = 0 both are invariant to scaling x by a > 0, and LN to adding a
constant (Ba et al. 2016, Sec. 5.1; Zhang and Sennrich 2019, Sec. 3).
"""
import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from normref import LayerNorm, RMSNorm, layer_norm, rms_norm

SETTINGS = settings(max_examples=40, deadline=None)

shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6)


def tokens(dtype=np.float64, min_d=2, lo=-100.0, hi=100.0):
    """Arrays [..., D] of finite values whose every token has a spread (no constant rows)."""
    width = {np.float16: 16, np.float32: 32, np.float64: 64}[dtype]
    return hnp.arrays(dtype, hnp.array_shapes(min_dims=1, max_dims=3, min_side=min_d, max_side=6),
                      elements=st.floats(lo, hi, width=width)).filter(
        lambda a: np.all(np.ptp(a.astype(np.float64), axis=-1) > 1e-3 * (hi - lo) / 200))


@SETTINGS
@given(dtype=st.sampled_from([np.float16, np.float32, np.float64]), shape=shapes, data=st.data())
def test_numpy_kind_shape_dtype_kept_and_input_untouched(dtype, shape, data):
    x = data.draw(hnp.arrays(dtype, shape, elements=st.floats(-50, 50, width=16)))
    before = x.copy()
    for f in (layer_norm, rms_norm):
        y = f(x)
        assert isinstance(y, np.ndarray) and y.shape == x.shape and y.dtype == x.dtype
        np.testing.assert_array_equal(x, before)


@SETTINGS
@given(dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]),
       shape=shapes, seed=st.integers(0, 2**16))
def test_torch_kind_shape_dtype_kept_and_input_untouched(dtype, shape, seed):
    x = (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 10).to(dtype)
    before = x.clone()
    for f in (layer_norm, rms_norm, LayerNorm(shape[-1]), RMSNorm(shape[-1])):
        y = f(x)
        assert isinstance(y, torch.Tensor) and y.shape == x.shape and y.dtype == dtype
        assert torch.equal(x, before)


@SETTINGS
@given(x=tokens(), eps=st.sampled_from([0.0, 1e-5, 1e-2]))
def test_layer_norm_tokens_have_mean_0_and_variance_var_over_var_plus_eps(x, eps):
    y = layer_norm(x, eps=eps)
    var = x.var(axis=-1)
    np.testing.assert_allclose(y.mean(axis=-1), 0, atol=1e-9)
    np.testing.assert_allclose(y.var(axis=-1), var / (var + eps), rtol=1e-9)


@SETTINGS
@given(x=tokens(min_d=1), eps=st.sampled_from([0.0, 1e-6, 1e-2]))
def test_rms_norm_tokens_have_mean_square_ms_over_ms_plus_eps(x, eps):
    y = rms_norm(x, eps=eps)
    ms = (x**2).mean(axis=-1)
    np.testing.assert_allclose((y**2).mean(axis=-1), ms / (ms + eps), rtol=1e-9)


@SETTINGS
@given(x=tokens(), a=st.floats(1e-2, 1e2), c=st.floats(-100, 100))
def test_scale_and_shift_invariance_without_eps(x, a, c):
    np.testing.assert_allclose(layer_norm(a * x, eps=0.0), layer_norm(x, eps=0.0), rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(layer_norm(x + c, eps=0.0), layer_norm(x, eps=0.0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(rms_norm(a * x, eps=0.0), rms_norm(x, eps=0.0), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(rms_norm(-x, eps=0.0), -rms_norm(x, eps=0.0))


@SETTINGS
@given(x=tokens(lo=-1e-3, hi=1e-3), eps=st.sampled_from([1e-4, 1e-2]))
def test_eps_makes_tiny_tokens_shrink_rather_than_blow_up(x, eps):
    # var <= 1e-6 << eps: output = (x - mean) / sqrt(var + eps) is at most about 0.1 in size.
    assert np.abs(layer_norm(x, eps=eps)).max() <= np.sqrt(x.shape[-1]) * np.sqrt(1e-6 / (1e-6 + eps)) + 1e-12


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=2, max_side=6),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64]),
       eps=st.sampled_from([1e-6, 1e-5, 1e-3, 0.1]), seed=st.integers(0, 2**16))
def test_agrees_with_torch_functional_and_nn_layer_norm(shape, dtype, eps, seed):
    # D >= 2: with D = 1 the variance is 0 and 1/sqrt(eps) (up to 1000) amplifies torch's
    # float32 rounding of x - mean (float16, eps=1e-6: 14 ulps off beta); ours returns beta exactly.
    g = torch.Generator().manual_seed(seed)
    d = shape[-1]
    x = (torch.randn(*shape, generator=g) * 3 + 1).to(dtype)
    w = (torch.randn(d, generator=g) * 0.5 + 1).to(dtype)
    b = (torch.randn(d, generator=g) * 0.1).to(dtype)
    torch.testing.assert_close(layer_norm(x, w, b, eps=eps), F.layer_norm(x, (d,), w, b, eps))
    torch.testing.assert_close(rms_norm(x, w, eps=eps), F.rms_norm(x, (d,), w, eps))
    ref = torch.nn.LayerNorm(d, eps=eps, dtype=dtype)
    with torch.no_grad():
        ref.weight.copy_(w)
        ref.bias.copy_(b)
        torch.testing.assert_close(layer_norm(x, w, b, eps=eps), ref(x))
