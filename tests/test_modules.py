"""normref.LayerNorm / RMSNorm modules: parameters, agreement with torch and the seed's MiniMind module."""
import pytest
import torch
from torch import nn

import normref
from normref import LayerNorm, RMSNorm


class SeedRMSNorm(nn.Module):  # the seed's "Show the RMSNorm module", verbatim
    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        rms = torch.rsqrt(
            x.float().pow(2).mean(dim=-1, keepdim=True) + self.eps
        )
        return (x.float() * rms * self.weight).to(dtype=x.dtype)


def test_parameters_start_at_gamma_one_beta_zero():
    ln = LayerNorm(8)
    assert isinstance(ln.weight, nn.Parameter) and torch.equal(ln.weight, torch.ones(8))
    assert isinstance(ln.bias, nn.Parameter) and torch.equal(ln.bias, torch.zeros(8))
    assert ln.eps == normref.LAYER_NORM_EPS == 1e-5
    rms = RMSNorm(8)
    assert torch.equal(rms.weight, torch.ones(8)) and rms.eps == normref.RMS_NORM_EPS == 1e-6
    assert [n for n, _ in rms.named_parameters()] == ["weight"]  # no bias at all


def test_layer_norm_without_bias_has_no_bias_parameter():
    ln = LayerNorm(8, bias=False)
    assert ln.bias is None
    assert [n for n, _ in ln.named_parameters()] == ["weight"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rms_norm_module_is_the_seed_minimind_module_bit_for_bit(dtype):
    torch.manual_seed(0)
    x = (torch.randn(2, 3, 8) * 3).to(dtype)
    ours, seed = RMSNorm(8), SeedRMSNorm(8)
    with torch.no_grad():
        w = torch.randn(8)
        ours.weight.copy_(w)
        seed.weight.copy_(w)
    got, want = ours(x), seed(x)
    assert got.dtype == dtype and got.shape == (2, 3, 8)
    assert torch.equal(got, want)


def test_rms_norm_module_gradients_match_the_seed_module():
    torch.manual_seed(1)
    x1 = torch.randn(2, 3, 8, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    ours, seed = RMSNorm(8), SeedRMSNorm(8)
    (ours(x1) * torch.arange(8.0)).sum().backward()
    (seed(x2) * torch.arange(8.0)).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(ours.weight.grad, seed.weight.grad)


@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_module_matches_torch_nn_layer_norm_with_trained_params(bias):
    torch.manual_seed(2)
    ours, ref = LayerNorm(8, eps=1e-3, bias=bias), nn.LayerNorm(8, eps=1e-3, bias=bias)
    with torch.no_grad():
        for p_ours, p_ref in zip(ours.parameters(), ref.parameters()):
            p_ours.copy_(torch.randn_like(p_ours))
            p_ref.copy_(p_ours)
    x = torch.randn(2, 3, 8) * 2 + 1
    torch.testing.assert_close(ours(x), ref(x))


def test_modules_equal_their_functional_forms():
    torch.manual_seed(3)
    x = torch.randn(4, 4, 4).to(torch.bfloat16)
    ln, rms = LayerNorm(4), RMSNorm(4)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.1, 0.1)
        rms.weight.uniform_(0.5, 1.5)
    assert torch.equal(ln(x), normref.layer_norm(x, ln.weight, ln.bias, eps=ln.eps))
    assert torch.equal(rms(x), normref.rms_norm(x, rms.weight, eps=rms.eps))


def test_weight_in_bfloat16_still_multiplies_in_float32():
    # model.to(bfloat16) makes the weight bf16; the seed's module then promotes to float32.
    torch.manual_seed(4)
    ours, seed = RMSNorm(8).to(torch.bfloat16), SeedRMSNorm(8).to(torch.bfloat16)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(8))
        seed.weight.copy_(ours.weight)
    x = torch.randn(2, 3, 8, dtype=torch.bfloat16)
    assert torch.equal(ours(x), seed(x))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="dim must be a positive int"):
        RMSNorm(0)
    with pytest.raises(ValueError, match="eps must be >= 0"):
        LayerNorm(8, eps=-1.0)
    with pytest.raises(ValueError, match=r"RMSNorm\(8\) normalizes a last axis of size 8; got x of shape \[2, 5\]"):
        RMSNorm(8)(torch.randn(2, 5))


def test_repr_names_the_width_and_eps():
    assert repr(RMSNorm(8)) == "RMSNorm(8, eps=1e-06)"
    assert repr(LayerNorm(8, bias=False)) == "LayerNorm(8, eps=1e-05, bias=False)"
