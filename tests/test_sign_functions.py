"""The fused sign autograd.Functions compute what the unfused straight-through chain computes.

The chain ``sign(x) + (s(x) - s(x).detach())`` with ``s`` a surrogate's forward function is the definition; the
fused functions must give the same forward values bit for bit and the same gradients up to float rounding, on the
shipped models and real CIFAR-10 images, in training (IR-Net's EDE mid-schedule) and under attack-time swaps.
"""

from __future__ import annotations

import pytest
import torch

from arbibench.data.cifar10 import load_cifar10
from arbibench.models.zoo import load_model
from arbibench.nn import EDESign, SignQuantizer, reference_surrogates, set_training_progress, use_surrogate
from arbibench.nn.quantizers import SIGN_FUNCTIONS

SPECS = ["identity", "ste", "approx_sign", "tanh", "tanh:5", "ede", "ede:0.1", "ede:1"]


def _input_and_grad(q: SignQuantizer, x: torch.Tensor, upstream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.clone().requires_grad_(True)
    out = q(x)
    (grad,) = torch.autograd.grad(out, x, upstream)
    return out.detach(), grad


@pytest.mark.parametrize("spec", SPECS)
def test_fused_function_matches_the_chain_on_edge_values(spec):
    # values at and around the kinks of every surrogate (0, +-1) and far out, with a signed upstream gradient
    x = torch.tensor([-3.0, -1.0 - 1e-6, -1.0, -0.5, -1e-8, -0.0, 0.0, 1e-8, 0.5, 1.0, 1.0 + 1e-6, 3.0])
    upstream = torch.linspace(-2.0, 2.0, x.numel())
    q = SignQuantizer(spec)
    fused_out, fused_grad = _input_and_grad(q, x, upstream)
    with reference_surrogates():
        ref_out, ref_grad = _input_and_grad(q, x, upstream)
    assert torch.equal(fused_out, ref_out)
    torch.testing.assert_close(fused_grad, ref_grad, rtol=1e-6, atol=1e-7)


def test_every_surrogate_family_has_a_fused_function():
    from arbibench.nn.quantizers import SURROGATES

    assert set(SIGN_FUNCTIONS) == set(SURROGATES)


def test_ede_temperature_is_a_tensor_updated_in_place_and_not_saved():
    q = EDESign()
    buffer = q.temperature
    q.set_progress(0.0)
    assert q.temperature is buffer and float(buffer) == pytest.approx(0.1)
    assert float(q.scale) == pytest.approx(10.0)
    q.set_progress(0.5)
    assert float(buffer) == pytest.approx(1.0) and q.surrogate == "ede:1"
    assert "temperature" not in q.state_dict() and "scale" not in q.state_dict()


def _forward_backward(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    logits = model(x)
    torch.nn.functional.cross_entropy(logits, y).backward()
    grads = {"input": x.grad.clone()}
    grads.update({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    return logits.detach(), grads


def _assert_same(fused: tuple, reference: tuple) -> None:
    (logits, grads), (ref_logits, ref_grads) = fused, reference
    assert torch.equal(logits, ref_logits)  # forward: bit for bit
    assert grads.keys() == ref_grads.keys()
    for name, g in grads.items():
        scale = ref_grads[name].abs().max().clamp_min(1e-30)
        # gradients: equal up to rounding of a differently ordered sum, relative to the tensor's largest entry
        assert (g - ref_grads[name]).abs().max() / scale < 1e-4, name


@pytest.mark.parametrize("name", ["resnet20_bnn", "resnet20_irnet", "resnet20_reactnet", "resnet20_bireal"])
@pytest.mark.parametrize("mode", ["train", "eval", "tanh:5", "identity"])
def test_shipped_models_give_the_chain_s_logits_and_gradients(name, mode, data_dir):
    x, y, _ = load_cifar10(32, data_dir=data_dir)
    model = load_model(name)
    if mode == "train":  # BatchNorm on batch statistics, IR-Net's EDE mid-schedule (the tensor temperature)
        model.train()
        set_training_progress(model, 0.3)
    swap = use_surrogate(model, mode) if mode in ("tanh:5", "identity") else None
    if swap is not None:
        swap.__enter__()
    try:
        fused = _forward_backward(model, x, y)
        with reference_surrogates():
            reference = _forward_backward(model, x, y)
    finally:
        if swap is not None:
            swap.__exit__()
    _assert_same(fused, reference)
