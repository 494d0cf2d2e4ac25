"""The fused path of a binary model: what a black-box attack queries thousands of times per image.

A trained BNN's reference forward re-binarizes every kernel at every call (sign, per-channel scale, IR-Net's
standardisation) and binarizes each activation with a chain of four small elementwise kernels. None of the kernel
work changes between queries. :func:`fuse` builds, once, an inference-only copy of the model (a ``torch.fx`` graph,
no autograd state) in which every binary convolution

1. holds its binarized kernel ``W_q`` (scale and sign applied once), stored doubled;
2. binarizes its input with one comparison written straight into a float buffer and one in-place shift:
   ``1{x >= t} - 1/2`` (``t`` is 0, or RSign's per-channel threshold: ``x >= t`` is the same test as the
   reference's ``x - t >= 0`` in IEEE arithmetic with subnormals, PyTorch's default).

Every product of the convolution, ``(+-1/2) * 2 W_q``, equals the reference's ``(+-1) * W_q`` exactly, so the fused
model's logits are the reference's bit for bit (``tests/test_fused.py`` checks the whole CIFAR-10 test set for every
zoo model). BatchNorm is not folded into the convolution: folding changes the rounding of each pre-activation, and a
sign downstream then flips for the few pre-activations within rounding of their threshold; measured on the zoo, that
changed the predicted class of some test images, so a fold is exact nowhere here. Adversarial examples are still
confirmed on the reference model before they count (:class:`arbibench.attacks.query.QueryModel`), so even a
disagreement could only cost queries.

What it refuses (:class:`FusionError`, then :func:`fused_path` falls back to the reference with a note): a
model with no binary layer, one in training mode, one it cannot trace, a padding other than zeros, and an activation
quantizer without an exact comparison form (``torch.sign``'s three levels of the imported presets, a per-sample
centring, a user-defined quantizer).
"""

from __future__ import annotations

import copy
import weakref

import torch
import torch.nn.functional as F
from torch import fx, nn

from arbibench.nn.activations import RPReLU
from arbibench.nn.layers import BinaryConv2d, BinaryLinear
from arbibench.nn.quantizers import EDESign, Quantizer, RSign, SignQuantizer
from arbibench.nn.zero_sign import ZeroSign

__all__ = ["FusedBinaryConv2d", "FusionError", "fuse", "fused_path"]


class FusionError(ValueError):
    """The model has a part the fused path cannot compute exactly; use the reference model."""


def _input_threshold(q: Quantizer | None) -> torch.Tensor:
    """The threshold ``t`` of an activation quantizer that computes ``+1 if x >= t else -1``; FusionError if none."""
    if q is None:
        raise FusionError("a binary convolution without an activation quantizer has real-valued inputs")
    if isinstance(q, ZeroSign) or (isinstance(q, RSign) and isinstance(q.sign, ZeroSign)):
        raise FusionError(
            f"{type(q).__name__} follows torch.sign (sign(0) = 0): three levels, no single comparison computes it"
        )
    if isinstance(q, SignQuantizer) and type(q).forward in (SignQuantizer.forward, EDESign.forward):
        return torch.zeros(())
    if type(q) is RSign and type(q.sign).forward is SignQuantizer.forward:
        return q.threshold.detach().clone()
    raise FusionError(f"activation quantizer {type(q).__name__} has no exact fused form")


class FusedBinaryConv2d(nn.Module):
    """Inference-only binary convolution: the kernel binarized once, the input sign in two in-place kernels.

    The input becomes ``1{x >= t} - 1/2`` in {-1/2, +1/2} and the kernel is stored as ``2 * W_q``: every product of
    the convolution equals the reference's ``(+-1) * W_q`` exactly (a factor of 2 never rounds), so the output is
    the reference's bit for bit.
    """

    threshold: torch.Tensor  # buffers, declared so that type checkers see tensors
    kernel: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, conv: BinaryConv2d) -> None:
        super().__init__()
        if conv.padding_mode != "zeros":
            raise FusionError(f"padding mode {conv.padding_mode!r}: only zero padding is fused")
        threshold = _input_threshold(conv.input_quantizer)
        with torch.no_grad():
            w = conv.weight if conv.kernel_quantizer is None else conv.kernel_quantizer(conv.weight)
        self.stride, self.padding, self.dilation, self.groups = conv.stride, conv.padding, conv.dilation, conv.groups
        self.register_buffer("threshold", threshold.reshape(1, -1, 1, 1) if threshold.dim() else threshold)
        self.register_buffer("kernel", (2.0 * w.detach()).contiguous())
        self.register_buffer("bias", None if conv.bias is None else conv.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        half = torch.empty_like(x, memory_format=torch.contiguous_format)
        torch.ge(x, self.threshold, out=half).sub_(0.5)  # +-1/2: one comparison, one in-place shift
        if isinstance(self.padding, str):  # "same" / "valid": torch types the two paddings as separate overloads
            return F.conv2d(half, self.kernel, self.bias, self.stride, self.padding, self.dilation, self.groups)
        return F.conv2d(half, self.kernel, self.bias, self.stride, self.padding, self.dilation, self.groups)


class _FusedBinaryLinear(nn.Module):
    """A binary linear layer with its kernel binarized once (exact: the same tensor the reference recomputes)."""

    kernel: torch.Tensor  # buffers, declared so that type checkers see tensors
    bias: torch.Tensor | None

    def __init__(self, linear: BinaryLinear) -> None:
        super().__init__()
        with torch.no_grad():
            w = linear.weight if linear.kernel_quantizer is None else linear.kernel_quantizer(linear.weight)
        self.input_quantizer = linear.input_quantizer
        self.register_buffer("kernel", w.detach().clone())
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_quantizer is not None:
            x = self.input_quantizer(x)
        return F.linear(x, self.kernel, self.bias)


class _LeafTracer(fx.Tracer):
    """Traces through backbones and blocks; binary layers, quantizers and RPReLU stay whole."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, (BinaryConv2d, BinaryLinear, Quantizer, RPReLU)) or super().is_leaf_module(m, qualname)


def has_binary_layer(model: nn.Module) -> bool:
    """Whether any layer binarizes its input or its kernel: a model the fused path is for."""
    return any(isinstance(m, (BinaryConv2d, BinaryLinear)) and (m.input_quantizer or m.kernel_quantizer) is not None
               for m in model.modules())


def fuse(model: nn.Module) -> fx.GraphModule:
    """An inference-only fused copy of ``model`` (eval mode, no parameters); FusionError if it cannot be exact.

    The copy shares nothing with ``model``: retraining the reference does not change it (see
    :func:`fused_path`, which rebuilds it when the reference's tensors change).
    """
    if any(m.training for m in model.modules()):
        raise FusionError("the model is in training mode: fuse the eval-mode model (batch norm uses running stats)")
    if not has_binary_layer(model):
        raise FusionError("the model has no binary layer: nothing to fuse")
    ref = copy.deepcopy(model).cpu()
    try:
        graph = _LeafTracer().trace(ref)
    except Exception as e:  # noqa: BLE001 - any tracing failure means "not fusable", reported with its cause
        raise FusionError(f"the model cannot be traced into a graph ({type(e).__name__}: {e})") from e
    gm = fx.GraphModule(ref, graph)
    modules = dict(gm.named_modules())
    for node in list(gm.graph.nodes):
        if node.op != "call_module":
            continue
        layer = modules[node.target]
        if isinstance(layer, BinaryLinear) and (layer.input_quantizer or layer.kernel_quantizer) is not None:
            gm.add_submodule(node.target, _FusedBinaryLinear(layer))
            continue
        if isinstance(layer, BinaryConv2d) and (layer.input_quantizer or layer.kernel_quantizer) is not None:
            gm.add_submodule(node.target, FusedBinaryConv2d(layer))
    gm.graph.eliminate_dead_code()
    gm.delete_all_unused_submodules()
    gm.recompile()
    for p in gm.parameters():
        p.requires_grad_(False)
    device = next(iter(model.parameters())).device
    return gm.eval().to(device)


# The fused copy of each reference model, with the identity of the reference's tensors it was built from.
_CacheEntry = tuple[tuple[object, ...], nn.Module | None, str | None]
_CACHE: weakref.WeakKeyDictionary[nn.Module, _CacheEntry] = weakref.WeakKeyDictionary()


def _tensor_identity(model: nn.Module) -> tuple[object, ...]:
    # data pointer and in-place version counter of every tensor: any optimiser step or load_state_dict changes one
    return tuple((t.data_ptr(), t._version, t.device.type) for t in model.state_dict(keep_vars=True).values())


def fused_path(model: nn.Module) -> tuple[nn.Module, str | None]:
    """``(model to query, note)``: the fused copy of a binary ``model``, or ``model`` itself with the reason.

    The note is None when the fused path is used, and for a full-precision model, which has nothing to fuse (the
    note is for a BNN whose queries go to the slower reference). The fused copy is cached per model and rebuilt when
    any of its tensors changes.
    """
    if not isinstance(model, nn.Module):
        return model, "not an nn.Module: queried as given"
    if getattr(model, "is_fused_form", False):  # a network that declares itself fused (the deployed one) answers as is
        return model, None
    if not has_binary_layer(model):
        return model, None
    key = _tensor_identity(model)
    hit = _CACHE.get(model)
    if hit is not None and hit[0] == key:
        return (model if hit[1] is None else hit[1]), hit[2]
    try:
        fused: nn.Module = fuse(model)
        note = None
    except FusionError as e:
        fused, note = model, f"fused path refused ({e}); the reference model answers every query"
    _CACHE[model] = (key, None if fused is model else fused, note)  # no strong reference to the key itself
    return fused, note
