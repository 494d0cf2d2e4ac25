"""Quantizers, weight binarizers, RPReLU and binary layers against hand-computed values of their formulas.

Every expected number below is worked out by hand from the paper's formula (the comments show the arithmetic), so a
change of sign convention, surrogate, scale or schedule fails here rather than silently changing trained models.
"""

import math

import pytest
import torch

from arbibench.models.resnet import resnet20
from arbibench.nn import (
    QUANTIZERS,
    ApproxSign,
    BinaryConv2d,
    BinaryLinear,
    EDESign,
    RPReLU,
    RSign,
    SignQuantizer,
    SteSign,
    build_activation,
    get_quantizer,
    set_training_progress,
    use_surrogate,
)

X = torch.tensor([-2.0, -1.0, -0.5, 0.0, 0.3, 1.0, 1.5])
SIGN_X = [-1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 1.0]  # sign(0) = +1


def grad_of(q, x, upstream=None):
    x = x.clone().requires_grad_(True)
    out = q(x)
    out.backward(torch.ones_like(out) if upstream is None else upstream)
    return x.grad


# -- sign quantizers -----------------------------------------------------------------------------------------------


def test_forward_is_exact_sign_with_zero_mapped_to_plus_one():
    for q in (SteSign(), ApproxSign(), SignQuantizer("identity"), EDESign(), SignQuantizer("tanh:5")):
        assert q(X).tolist() == SIGN_X
        assert q(X.clone().requires_grad_(True)).tolist() == SIGN_X  # the surrogate never leaks into the value


def test_clipped_ste_gradient_is_indicator_of_unit_interval():
    # d/dx clip(x, -1, 1) = 1 on [-1, 1] (boundaries included), else 0
    assert grad_of(SteSign(), X).tolist() == [0, 1, 1, 1, 1, 1, 0]


def test_approx_sign_gradient_is_two_minus_two_abs_x():
    # Bi-Real: d/dx = 2 - 2|x| inside (-1, 1), 0 outside: x=-0.5 -> 1, x=0 -> 2, x=0.3 -> 1.4
    expected = [0.0, 0.0, 1.0, 2.0, 1.4, 0.0, 0.0]
    assert torch.allclose(grad_of(ApproxSign(), X), torch.tensor(expected))


def test_identity_surrogate_passes_gradient_everywhere():
    assert grad_of(SignQuantizer("identity"), X).tolist() == [1.0] * len(X)


def ede_grad(t, x):
    """d/dx k tanh(t x) = k t sech^2(t x) with k = max(1/t, 1), written with cosh (not tanh) as a cross-check."""
    return max(1.0 / t, 1.0) * t / math.cosh(t * x) ** 2


@pytest.mark.parametrize(
    ("t", "at_zero"),
    [(0.1, 1.0), (1.0, 1.0), (10.0, 10.0)],  # k t = 10 * 0.1 = 1, 1 * 1 = 1, 1 * 10 = 10
)
def test_ede_gradient_is_k_t_sech_squared(t, at_zero):
    q = SignQuantizer(f"ede:{t}")
    got = grad_of(q, X)
    assert got[3].item() == pytest.approx(at_zero)
    assert torch.allclose(got, torch.tensor([ede_grad(t, v) for v in X.tolist()]), rtol=1e-5, atol=1e-6)
    assert q(X).tolist() == SIGN_X


def test_ede_early_is_nearly_identity_and_late_is_sharp():
    early, late = grad_of(SignQuantizer("ede:0.1"), X), grad_of(SignQuantizer("ede:10"), X)
    # t = 0.1: 1 - tanh(0.2)^2 = 0.96104 at |x| = 2: the gradient reaches every input, like the identity
    assert early[0].item() == pytest.approx(1 - math.tanh(0.2) ** 2, rel=1e-5) and early.min() > 0.96
    # t = 10: 10 (1 - tanh(3)^2) = 0.09866 at x = 0.3, 10 at x = 0, ~0 at |x| >= 1
    assert late[4].item() == pytest.approx(0.0986604, rel=1e-4)
    assert late[1].item() < 1e-6 and late[0].item() < 1e-12


@pytest.mark.parametrize(
    ("progress", "surrogate", "grad_at_zero", "grad_at_two"),
    [
        (0.0, "ede:0.1", 1.0, 1 - math.tanh(0.2) ** 2),  # t = 0.1 * 10^0 = 0.1, k = 10
        (0.5, "ede:1", 1.0, 1 - math.tanh(2.0) ** 2),  # t = 0.1 * 10^(0.5 * 2) = 1, k = 1
        (1.0, "ede", 10.0, 10 * (1 - math.tanh(20.0) ** 2)),  # t = 0.1 * 10^2 = 10, k = 1 (bare "ede")
    ],
)
def test_ede_schedule(progress, surrogate, grad_at_zero, grad_at_two):
    q = EDESign()
    q.set_progress(progress)
    assert q.surrogate == surrogate
    g = grad_of(q, torch.tensor([0.0, 2.0]))
    assert g[0].item() == pytest.approx(grad_at_zero, rel=1e-5)
    assert g[1].item() == pytest.approx(grad_at_two, rel=1e-4, abs=1e-6)


def test_ede_starts_at_the_end_of_training_and_rejects_bad_progress():
    assert EDESign().surrogate == "ede"  # a freshly built (deployed) quantizer stands at t = 10
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        EDESign().set_progress(1.5)


def test_set_training_progress_reaches_activation_and_weight_quantizers():
    model = resnet20("irnet")
    set_training_progress(model, 0.0)
    eds = [m for m in model.modules() if isinstance(m, EDESign)]
    assert len(eds) == 36  # 18 binary convs, each with an EDE on its input and one inside Libra-PB on its kernel
    assert {m.surrogate for m in eds} == {"ede:0.1"}
    set_training_progress(model, 0.5)
    assert {m.surrogate for m in eds} == {"ede:1"}


def test_use_surrogate_swaps_and_restores():
    layer = BinaryLinear(3, 2)
    with use_surrogate(layer, "identity"):
        assert layer.input_quantizer.surrogate == "identity"
        assert grad_of(layer.input_quantizer, X).tolist() == [1.0] * len(X)
    assert layer.input_quantizer.surrogate == "ste"


def test_aliases_and_errors():
    assert isinstance(get_quantizer("approx_sign"), ApproxSign)
    assert isinstance(get_quantizer("ede_sign"), EDESign)
    assert get_quantizer(None) is None
    with pytest.raises(ValueError, match="known"):
        get_quantizer("ternary")
    with pytest.raises(ValueError, match="surrogate"):
        SignQuantizer("magic")


# -- RSign (ReActNet) ----------------------------------------------------------------------------------------------


def test_rsign_threshold_shifts_the_sign_and_learns():
    q = RSign(2)
    q.threshold.data = torch.tensor([0.5, -0.5]).view(1, 2, 1, 1)
    x = torch.tensor([[[[0.4, 0.5, 0.6]], [[-0.6, -0.5, -0.4]]]])  # (1, 2, 1, 3); x - alpha = [-0.1, 0, 0.1] both
    assert SteSign()(x).flatten().tolist() == [1, 1, 1, -1, -1, -1]  # without the threshold
    x.requires_grad_(True)
    out = q(x)
    assert out.flatten().tolist() == [-1, 1, 1, -1, 1, 1]
    out.sum().backward()
    # ApproxSign backward at u = x - alpha = [-0.1, 0, 0.1]: 2 - 2|u| = [1.8, 2, 1.8]; d/d alpha = -(1.8 + 2 + 1.8)
    assert torch.allclose(x.grad.flatten(), torch.tensor([1.8, 2.0, 1.8] * 2), atol=1e-5)
    assert torch.allclose(q.threshold.grad.flatten(), torch.tensor([-5.6, -5.6]), atol=1e-5)
    assert x.grad.shape == x.shape and q.threshold.grad.shape == q.threshold.shape


def test_rsign_needs_the_channel_count():
    with pytest.raises(ValueError, match="per-channel parameters: pass channels="):
        get_quantizer("rsign")
    assert get_quantizer("rsign", channels=5).threshold.shape == (1, 5, 1, 1)
    conv = BinaryConv2d(3, 4, 3, input_quantizer="rsign")  # a layer passes its input channels itself
    assert conv.input_quantizer.threshold.shape == (1, 3, 1, 1)


def test_rsign_and_rprelu_on_linear_inputs_keep_the_batch_shape():
    # (N, C) inputs: the per-channel parameters broadcast over dim 1, not into extra dimensions
    linear = BinaryLinear(4, 3, input_quantizer="rsign")
    assert linear(torch.randn(2, 4)).shape == (2, 3)
    assert RPReLU(4)(torch.randn(2, 4)).shape == (2, 4)


# -- RPReLU (ReActNet) ---------------------------------------------------------------------------------------------


def test_rprelu_hand_values_on_both_sides_of_the_shift():
    act = RPReLU(2)
    with torch.no_grad():
        act.shift_in.copy_(torch.tensor([0.5, -1.0]).view(1, 2, 1, 1))
        act.prelu.weight.copy_(torch.tensor([0.25, 0.1]))
        act.shift_out.copy_(torch.tensor([1.0, -2.0]).view(1, 2, 1, 1))
    x = torch.tensor([[[[0.0, 0.5, 2.5]], [[-3.0, -1.0, 1.0]]]])
    # channel 0: x - 0.5 = [-0.5, 0, 2] -> PReLU(0.25) = [-0.125, 0, 2] -> + 1 = [0.875, 1, 3]
    # channel 1: x + 1 = [-2, 0, 2] -> PReLU(0.1) = [-0.2, 0, 2] -> - 2 = [-2.2, -2, 0]
    expected = torch.tensor([0.875, 1.0, 3.0, -2.2, -2.0, 0.0])
    assert torch.allclose(act(x).flatten(), expected, atol=1e-6)
    assert torch.allclose(act(x[:, :, 0, 0]), expected.view(2, 3)[:, 0].view(1, 2), atol=1e-6)  # (N, C) input
    out = act(x.requires_grad_(True))
    out.sum().backward()
    # slope 0.25 / 0.1 left of the shift, 1 right of it (at the shift itself PReLU takes the negative-side slope)
    assert torch.allclose(x.grad.flatten(), torch.tensor([0.25, 0.25, 1.0, 0.1, 0.1, 1.0]))
    for p in (act.shift_in, act.shift_out, act.prelu.weight):
        assert p.grad is not None and p.grad.abs().sum() > 0


def test_build_activation_names():
    assert isinstance(build_activation("rprelu", 3), RPReLU)
    assert isinstance(build_activation("hardtanh", 3), torch.nn.Hardtanh)
    with pytest.raises(ValueError, match="known: relu"):
        build_activation("gelu", 3)


# -- weight binarizers ---------------------------------------------------------------------------------------------

# two output channels of four weights, shaped as a conv kernel (out, in, kh, kw)
W = torch.tensor([[0.5, -1.5, 2.0, 0.0], [-0.2, -0.4, 0.2, 0.6]]).view(2, 1, 1, 4)


def test_channel_scaled_sign_is_mean_abs_per_output_channel():
    q = get_quantizer("channel_scaled_sign")
    # channel 0: mean(|0.5|, |-1.5|, |2|, |0|) = 1.0; channel 1: mean(0.2, 0.4, 0.2, 0.6) = 0.35
    expected = torch.tensor([[1.0, -1.0, 1.0, 1.0], [-0.35, -0.35, 0.35, 0.35]])
    assert torch.allclose(q(W).view(2, 4), expected)
    g = grad_of(q, W)
    # the scale is a constant in the backward, the sign takes the clipped STE: scale * 1{|w| <= 1}
    assert g.shape == W.shape
    assert torch.allclose(g.view(2, 4), torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.35, 0.35, 0.35, 0.35]]))


def test_layer_scaled_sign_is_one_mean_for_the_whole_tensor():
    q = get_quantizer("layer_scaled_sign")
    scale = (0.5 + 1.5 + 2.0 + 0.0 + 0.2 + 0.4 + 0.2 + 0.6) / 8  # 0.675
    expected = scale * torch.tensor([[1.0, -1.0, 1.0, 1.0], [-1.0, -1.0, 1.0, 1.0]])
    assert torch.allclose(q(W).view(2, 4), expected)
    g = grad_of(q, W)
    assert g.shape == W.shape
    assert torch.allclose(g, torch.full_like(W, scale))  # identity STE times the constant scale


def test_libra_pb_sign_standardises_per_channel_and_scales_by_a_power_of_two():
    q = get_quantizer("libra_pb_sign")
    w = torch.tensor([[1.0, 2.0, 3.0, 6.0], [9.0, 9.0, 11.0, 11.0]]).view(2, 1, 1, 4)
    # channel 0: mean 3, centred [-2, -1, 0, 3], std = sqrt(14 / 3) = 2.1602 (unbiased, as torch.std and IR-Net)
    #   standardised [-0.926, -0.463, 0, 1.389], mean abs 0.694, log2 = -0.53 -> round -1 -> scale 1/2
    #   sign of the standardised weights (0 -> +1): [-1, -1, 1, 1]
    # channel 1: mean 10, centred [-1, -1, 1, 1], std = sqrt(4 / 3), standardised +-0.866, log2(0.866) = -0.21 -> 0
    expected = torch.tensor([[-0.5, -0.5, 0.5, 0.5], [-1.0, -1.0, 1.0, 1.0]])
    assert torch.equal(q(w).view(2, 4), expected)
    assert torch.equal(q(3.0 * w - 7.0), q(w))  # standardisation: invariant to an affine change of the weights
    g = grad_of(q, w, torch.tensor([[1.0, -2.0, 0.5, 3.0], [1.0, 2.0, -1.0, 0.5]]).view(2, 1, 1, 4))
    assert g.shape == w.shape and torch.isfinite(g).all() and g.abs().sum() > 0
    assert isinstance(q.sign, EDESign)  # the EDE backward, on the schedule set_training_progress drives


def test_learned_scale_sign_alpha_gets_a_gradient():
    q = get_quantizer("learned_scale_sign", channels=2)
    with torch.no_grad():
        q.alpha.copy_(torch.tensor([2.0, 0.5]).view(2, 1, 1, 1))
    w = torch.tensor([[0.3, -0.2, 0.0], [-1.0, 2.0, 0.5]], requires_grad=True)  # a linear layer's (out, in)
    out = q(w)
    assert torch.equal(out, torch.tensor([[2.0, -2.0, 2.0], [-0.5, 0.5, 0.5]]))
    upstream = torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])
    out.backward(upstream)
    # d/d alpha_c = sum_j upstream_cj sign(w_cj): 1 - 2 + 3 = 2 and -1 + 1 + 1 = 1
    assert torch.allclose(q.alpha.grad.flatten(), torch.tensor([2.0, 1.0]))
    # d/dw = alpha_c * upstream * 1{|w| <= 1}: [2, 4, 6] and [0.5, 0, 0.5]
    assert torch.allclose(w.grad, torch.tensor([[2.0, 4.0, 6.0], [0.5, 0.0, 0.5]]))
    with pytest.raises(ValueError, match="pass channels="):
        get_quantizer("learned_scale_sign")


@pytest.mark.parametrize("alias", sorted(QUANTIZERS))
def test_every_quantizer_keeps_shapes_and_gives_finite_gradients(alias):
    torch.manual_seed(0)
    q = get_quantizer(alias, channels=3)
    x = torch.randn(3, 3, 4, 4, requires_grad=True)  # dim 0 = out channels (kernel), dim 1 = channels (input)
    out = q(x)
    assert out.shape == x.shape
    out.backward(torch.randn_like(out))
    assert x.grad.shape == x.shape and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for p in q.parameters():
        assert p.grad is not None and p.grad.shape == p.shape


# -- binary layers -------------------------------------------------------------------------------------------------


def test_binary_conv_uses_binarized_input_and_weights():
    torch.manual_seed(0)
    conv = BinaryConv2d(2, 3, 3, padding=1)
    x = torch.randn(1, 2, 5, 5)
    ref = torch.nn.functional.conv2d(
        torch.where(x >= 0, 1.0, -1.0), torch.where(conv.weight >= 0, 1.0, -1.0), padding=1
    )
    assert torch.equal(conv(x), ref)
    fp = BinaryConv2d(2, 3, 3, padding=1, input_quantizer=None, kernel_quantizer=None)
    fp.weight.data.copy_(conv.weight.data)
    assert torch.allclose(fp(x), torch.nn.functional.conv2d(x, conv.weight, padding=1))
