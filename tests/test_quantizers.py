"""Quantizers and binary layers: exact forward values, surrogate gradients against their formulas."""

import pytest
import torch

from arbibench.nn import ApproxSign, BinaryConv2d, BinaryLinear, SignQuantizer, SteSign, get_quantizer, use_surrogate

X = torch.tensor([-2.0, -1.0, -0.5, 0.0, 0.3, 1.0, 1.5])


def grad_of(q, x):
    x = x.clone().requires_grad_(True)
    q(x).sum().backward()
    return x.grad


def test_forward_is_exact_sign_with_zero_mapped_to_plus_one():
    for q in (SteSign(), ApproxSign(), SignQuantizer("identity")):
        assert q(X).tolist() == [-1, -1, -1, 1, 1, 1, 1]
        assert q(X.clone().requires_grad_(True)).tolist() == [-1, -1, -1, 1, 1, 1, 1]


def test_clipped_ste_gradient_is_indicator_of_unit_interval():
    assert grad_of(SteSign(), X).tolist() == [0, 1, 1, 1, 1, 1, 0]


def test_approx_sign_gradient_is_two_minus_two_abs_x():
    # Bi-Real: d/dx = 2 - 2|x| inside (-1, 1), 0 outside
    expected = [0.0, 0.0, 1.0, 2.0, 2 - 0.6, 0.0, 0.0]
    assert torch.allclose(grad_of(ApproxSign(), X), torch.tensor(expected))


def test_identity_surrogate_passes_gradient_everywhere():
    assert grad_of(SignQuantizer("identity"), X).tolist() == [1.0] * len(X)


def test_use_surrogate_swaps_and_restores():
    layer = BinaryLinear(3, 2)
    with use_surrogate(layer, "identity"):
        assert layer.input_quantizer.surrogate == "identity"
    assert layer.input_quantizer.surrogate == "ste"


def test_aliases_and_errors():
    assert isinstance(get_quantizer("approx_sign"), ApproxSign)
    assert get_quantizer(None) is None
    with pytest.raises(ValueError, match="known"):
        get_quantizer("ternary")
    with pytest.raises(ValueError, match="surrogate"):
        SignQuantizer("magic")


def test_binary_conv_uses_binarized_input_and_weights():
    torch.manual_seed(0)
    conv = BinaryConv2d(2, 3, 3, padding=1)
    x = torch.randn(1, 2, 5, 5)
    ref = torch.nn.functional.conv2d(
        torch.where(x >= 0, 1.0, -1.0), torch.where(conv.weight >= 0, 1.0, -1.0), padding=1
    )
    assert torch.equal(conv(x), ref)
    # zero padding: a corner output sums over 4 of 9 taps per channel, so |value| <= 2 * 4
    assert conv(x)[0, :, 0, 0].abs().max() <= 8
    fp = BinaryConv2d(2, 3, 3, padding=1, input_quantizer=None, kernel_quantizer=None)
    fp.weight.data.copy_(conv.weight.data)
    assert torch.allclose(fp(x), torch.nn.functional.conv2d(x, conv.weight, padding=1))
