"""normref.layer_norm / rms_norm: the seed's worked numbers and agreement with torch."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from normref import layer_norm, rms_norm


def test_seed_layer_norm_of_1_2_3():
    # mu = 2, var = 2/3 -> (-1, 0, 1) / sqrt(2/3)
    y = layer_norm(np.array([1.0, 2.0, 3.0]), eps=0.0)
    np.testing.assert_allclose(y, [-1.2247449, 0.0, 1.2247449], atol=1e-6)
    assert round(float(y[0]), 3) == -1.225


def test_seed_rms_norm_of_1_2_3():
    # RMS = sqrt(14/3) ~ 2.160
    y = rms_norm(np.array([1.0, 2.0, 3.0]), eps=0.0)
    r = math.sqrt(14 / 3)
    assert round(r, 3) == 2.160
    np.testing.assert_allclose(y, [1 / r, 2 / r, 3 / r], rtol=1e-12)
    assert [round(float(v), 3) for v in y] == [0.463, 0.926, 1.389]
    assert abs(float(np.mean(y))) > 0.9  # unlike LayerNorm, the mean is not forced to zero


def test_seed_practice_layer_norm_of_2_2_4_4():
    x = np.array([2.0, 2.0, 4.0, 4.0])
    assert x.mean() == 3.0 and x.var() == 1.0  # seed: mu = 3, sigma^2 = 1
    np.testing.assert_allclose(layer_norm(x, eps=0.0), [-1, -1, 1, 1], atol=1e-12)


def test_seed_practice_rms_of_3_4():
    # RMS(3, 4) = sqrt(12.5) ~ 3.536, so RMSNorm(3, 4) = (3, 4) / 3.536
    assert round(math.sqrt((9 + 16) / 2), 3) == 3.536
    y = rms_norm(np.array([3.0, 4.0]), eps=0.0)
    np.testing.assert_allclose(y, [3 / 3.5355339, 4 / 3.5355339], rtol=1e-7)


def test_seed_build_challenge_shape():
    y = rms_norm(torch.randn(2, 3, 8), torch.ones(8))
    assert y.shape == (2, 3, 8)


@pytest.mark.parametrize("shape", [(5,), (2, 3, 8), (4, 1, 7), (3, 16)])
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_layer_norm_matches_torch_float64(shape, eps):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g, dtype=torch.float64) * 3 + 1
    w = torch.randn(shape[-1], generator=g, dtype=torch.float64)
    b = torch.randn(shape[-1], generator=g, dtype=torch.float64)
    want = F.layer_norm(x, (shape[-1],), w, b, eps)
    torch.testing.assert_close(layer_norm(x, w, b, eps=eps), want)
    np.testing.assert_allclose(layer_norm(x.numpy(), w.numpy(), b.numpy(), eps=eps), want.numpy(),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(5,), (2, 3, 8), (3, 16)])
@pytest.mark.parametrize("eps", [1e-6, 1e-2])
def test_rms_norm_matches_torch_float64(shape, eps):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    w = torch.randn(shape[-1], generator=g, dtype=torch.float64)
    want = F.rms_norm(x, (shape[-1],), w, eps)
    torch.testing.assert_close(rms_norm(x, w, eps=eps), want)
    np.testing.assert_allclose(rms_norm(x.numpy(), w.numpy(), eps=eps), want.numpy(), rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rms_norm_is_the_seed_formula_bit_for_bit(dtype):
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(2, 3, 8, generator=g) * 4).to(dtype)
    w = torch.randn(8, generator=g)
    seed = (x.float() * x.float().pow(2).mean(dim=-1, keepdim=True).add(1e-6).rsqrt() * w).to(x.dtype)
    got = rms_norm(x, w)
    assert got.dtype == dtype
    assert torch.equal(got, seed)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_input_uses_float32_statistics(dtype):
    # x**2 = 90000 overflows float16 (max 65504); float32 statistics give (1, -1, 1, -1).
    x = torch.tensor([300.0, -300.0, 300.0, -300.0], dtype=dtype)
    assert torch.equal(rms_norm(x), torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=dtype))
    assert torch.equal(layer_norm(x), torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=dtype))


def test_kind_shape_dtype_kept_and_input_untouched():
    xn = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    before = xn.copy()
    for f in (layer_norm, rms_norm):
        out = f(xn)
        assert isinstance(out, np.ndarray) and out.shape == xn.shape and out.dtype == np.float32
        np.testing.assert_array_equal(xn, before)
    xt = torch.arange(24, dtype=torch.bfloat16).reshape(2, 3, 4)
    bt = xt.clone()
    for f in (layer_norm, rms_norm):
        out = f(xt)
        assert isinstance(out, torch.Tensor) and out.shape == xt.shape and out.dtype == torch.bfloat16
        assert torch.equal(xt, bt)


def test_bad_input_is_refused_clearly():
    with pytest.raises(TypeError, match="numpy array or a torch tensor"):
        layer_norm([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"weight must have shape \[3\]"):
        rms_norm(np.ones(3), weight=np.ones(4))
    with pytest.raises(ValueError, match="eps must be >= 0"):
        rms_norm(np.ones(3), eps=-1.0)
    with pytest.raises(TypeError, match="floating dtype .* got int64"):
        layer_norm(np.array([1, 2, 3]))  # the cast back would truncate to (-1, 0, 1)
    with pytest.raises(TypeError, match="floating dtype .* got int32"):
        rms_norm(torch.tensor([1, 2, 3], dtype=torch.int32))


def test_seed_trace_rms_statistic_is_B_T_1_and_rms_norm_divides_by_it():
    # Seed: "For x.shape == [2, 3, 8], what is the shape of rms after keepdim=True?" -> [2, 3, 1]
    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(3))
    rms = x.float().pow(2).mean(dim=-1, keepdim=True).add(1e-6).rsqrt()
    assert rms.shape == (2, 3, 1)
    assert torch.equal(rms_norm(x), x * rms)
    assert rms_norm(x).shape == (2, 3, 8)
