"""The converter: a trained BNN (simulation) becomes its deployed form, binary convolutions on packed bits.

:func:`deploy` traces an eval-mode copy of the model (``torch.fx``, binary layers, quantizers and RPReLU kept
whole), replaces every binary convolution by a :class:`DeployedConv2d` and, where that convolution's only consumer
is a BatchNorm2d, folds the BatchNorm into the convolution's epilogue (``fold_batchnorm=True``, the engines' way;
see :mod:`arbibench.deploy.semantics` for the order). Everything else (first convolution, shortcuts, residual adds,
activations, RPReLU, pooling, classifier) stays the float32 torch code it was.

What it refuses, with one :class:`DeployError` naming the layer and why, before anything is built: a model in
training mode, not float32 or not on the CPU, or without a binary convolution; a binary convolution with real-valued
inputs or weights, groups, dilation or a padding mode other than zeros; an activation quantizer with no exact
comparison form; a kernel quantizer whose output is not ``scale_c * sign`` with one magnitude per output channel; a
binary linear layer (no preset has one); a binary convolution wider than the chosen backend holds (the C kernel:
256 words of 64 bits per patch, e.g. a 3x3 kernel over more than 1,813 channels).
"""

from __future__ import annotations

import copy
import operator

import torch
from torch import fx, nn

from arbibench.deploy.conv_kernels import ConvKernel, get_conv_kernel
from arbibench.deploy.pooling import AvgPool2x2, is_plain_2x2, matches_torch
from arbibench.deploy.semantics import PM1, PM1_ZERO, BinaryConvSpec, Glue, fold_epilogue, glue_of
from arbibench.nn.activations import RPReLU
from arbibench.nn.layers import BinaryConv2d, BinaryLinear
from arbibench.nn.quantizers import EDESign, Quantizer, RSign, SignQuantizer
from arbibench.nn.zero_sign import CentredSign, ZeroSign

__all__ = ["DeployError", "DeployedConv2d", "DeployedModel", "deploy"]


class DeployError(ValueError):
    """The model has a layer the deployed form cannot express exactly."""


# How a binary convolution's input becomes the sign's argument d.
SIGN = "sign"  # d = x
THRESHOLD = "threshold"  # d = x - t_c (RSign)
CENTRED = "centred"  # d = x - mean over (C, H, W) of each sample (RBNN, SiMaN)


def _sign_alphabet(q: Quantizer, layer: str) -> str:
    """pm1 for arbibench's sign (0 -> +1), pm1_zero for torch.sign (0 -> 0); DeployError for anything else."""
    forward = type(q).forward
    if isinstance(q, ZeroSign) and forward is ZeroSign.forward:
        return PM1_ZERO
    if isinstance(q, SignQuantizer) and forward in (SignQuantizer.forward, EDESign.forward):
        return PM1
    raise DeployError(
        f"layer {layer}: activation quantizer {type(q).__name__} has no exact packed form (deployed kernels "
        "compute sign(x - t) for a threshold t; a custom forward is not one)"
    )


def input_rule(q: Quantizer | None, layer: str) -> tuple[str, str]:
    """``(kind, alphabet)`` of a binary convolution's activation quantizer; DeployError if it has no packed form."""
    if q is None:
        raise DeployError(f"layer {layer}: its weights are binary but its inputs are real-valued; no packed form")
    if type(q).forward is CentredSign.forward and isinstance(q, CentredSign):
        return CENTRED, _sign_alphabet(q.sign, layer)
    if isinstance(q, RSign) and type(q).forward is RSign.forward:
        return THRESHOLD, _sign_alphabet(q.sign, layer)
    return SIGN, _sign_alphabet(q, layer)


def binary_kernel(conv: BinaryConv2d, layer: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(signs, scale)``: the kernel quantizer's output written as ``scale_c * signs`` exactly; DeployError."""
    if conv.kernel_quantizer is None:
        raise DeployError(f"layer {layer}: its inputs are binary but its weights are real-valued; no packed form")
    with torch.no_grad():
        wq = conv.kernel_quantizer(conv.weight).detach().to(torch.float32)
    scale = wq.abs().amax(dim=(1, 2, 3))
    signs = torch.sign(wq)
    if not torch.equal(wq, scale.view(-1, 1, 1, 1) * signs):
        bad = int((wq != scale.view(-1, 1, 1, 1) * signs).flatten(1).any(dim=1).nonzero()[0])
        raise DeployError(
            f"layer {layer}: kernel quantizer {type(conv.kernel_quantizer).__name__} gives output channel {bad} "
            "more than one magnitude; a packed kernel holds scale_c * sign(W) only"
        )
    return signs.contiguous(), scale


class DeployedConv2d(nn.Module):
    """A binary convolution in deployed form, with the residual add and activation that follow it where fused.

    Holds the :class:`BinaryConvSpec` (unscaled kernel, folded epilogue, geometry), RSign's threshold, and the
    :class:`Glue` (the simulation's activation module). ``forward(x, residual=None)``: the C kernel computes it in
    one call; every other backend computes the sign's argument, the packed convolution, then ``+ residual`` and the
    activation with torch, the same operations in the same order.
    """

    threshold: torch.Tensor | None

    def __init__(self, spec: BinaryConvSpec, kind: str, threshold: torch.Tensor | None, backend: ConvKernel,
                 glue: Glue | None = None) -> None:
        super().__init__()
        self.spec, self.kind, self.backend, self.glue = spec, kind, backend, glue
        self.register_buffer("threshold", threshold)
        self.act = None if glue is None else glue.module

    def argument(self, x: torch.Tensor) -> torch.Tensor:
        """The sign's argument ``d``, computed by the same torch operations as the simulation's quantizer."""
        if self.kind == THRESHOLD and self.threshold is not None:
            return x - self.threshold.view(1, -1, *([1] * (x.dim() - 2)))
        if self.kind == CENTRED:
            return x - x.mean(dim=tuple(range(1, x.dim())), keepdim=True)
        return x

    def sign_threshold(self, x: torch.Tensor) -> torch.Tensor | None:
        """``t`` with ``d >= 0`` iff ``x >= t`` (IEEE, finite values): (1, C), (N, 1) or None for 0."""
        if self.kind == THRESHOLD and self.threshold is not None:
            return self.threshold.reshape(1, -1)
        if self.kind == CENTRED:
            return x.mean(dim=tuple(range(1, x.dim())), keepdim=True).reshape(-1, 1)
        return None

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if self.backend.fused is not None:
            if residual is None or self._fits(x, residual):
                return self.backend.fused(x, self.spec, self.sign_threshold(x), residual, self.glue)
            # a residual that broadcasts (or is not float32): the kernel computes the convolution and its epilogue,
            # torch the add and the activation, the same operations in the same order as the other conv kernels
            y = self.backend.fused(x, self.spec, self.sign_threshold(x), None, None)
        else:
            y = self.backend.conv(self.argument(x).contiguous(), self.spec)
        if residual is not None:
            y = y + residual
        if self.act is not None:
            y = self.act(y)
        return y

    def _fits(self, x: torch.Tensor, residual: torch.Tensor) -> bool:
        """Whether the fused epilogue can add ``residual`` as it is: float32 and exactly the output's shape."""
        out = (x.shape[0], self.spec.signs.shape[0], *self.spec.output_size(x.shape[-2], x.shape[-1]))
        return residual.dtype == torch.float32 and tuple(residual.shape) == out

    def extra_repr(self) -> str:
        o, c, kh, kw = self.spec.signs.shape
        return (f"{c}, {o}, kernel=({kh}, {kw}), stride={self.spec.stride}, padding={self.spec.padding}, "
                f"input={self.kind}/{self.spec.alphabet}, pad={self.spec.pad_value}, backend={self.backend.name!r}")


def _depends_on(node: fx.Node, ancestor: fx.Node) -> bool:
    """Whether ``node``'s value is computed from ``ancestor``'s."""
    seen: set[fx.Node] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n is ancestor:
            return True
        if n not in seen:
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return False


def _glue_chain(node: fx.Node, modules: dict[str, nn.Module], channels: int) -> tuple[
        fx.Node | None, fx.Node | None, Glue | None]:
    """``(add node, activation node, glue)`` directly after ``node`` that the kernel's epilogue can compute."""
    users = list(node.users)
    add_node: fx.Node | None = None
    tail = node
    if (len(users) == 1 and users[0].op == "call_function" and users[0].target in (operator.add, torch.add)
            and len(users[0].args) == 2 and not users[0].kwargs):
        other = users[0].args[1] if users[0].args[0] is node else users[0].args[0]
        if isinstance(other, fx.Node) and other is not node and not _depends_on(other, node):
            add_node = tail = users[0]
    users = list(tail.users)
    if len(users) == 1 and users[0].op == "call_module":
        glue = glue_of(modules[str(users[0].target)], channels)
        if glue is not None:
            return add_node, users[0], glue
    return add_node, None, None


class DeployedModel(nn.Module):
    """The deployed network: takes [0, 1] images like every arbibench model and returns logits; inference only."""

    #: Queried as it is: the fused float path (:func:`arbibench.nn.fused.fused_path`) has nothing to add.
    is_fused_form = True

    def __init__(self, graph: fx.GraphModule, backend: ConvKernel, pad: int, folded: bool) -> None:
        super().__init__()
        self.graph_module = graph
        self.backend = backend.name
        self.backend_note = backend.note
        self.pad = pad
        self.fold_batchnorm = folded

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            out: torch.Tensor = self.graph_module(x)
        return out

    def train(self, mode: bool = True) -> DeployedModel:
        if mode:
            raise DeployError("a deployed model is inference-only; train the simulation and deploy it again")
        return super().train(False)


class _LeafTracer(fx.Tracer):
    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, (BinaryConv2d, BinaryLinear, Quantizer, RPReLU)) or super().is_leaf_module(m, qualname)


def _is_binary(m: nn.Module) -> bool:
    return isinstance(m, (BinaryConv2d, BinaryLinear)) and (m.input_quantizer or m.kernel_quantizer) is not None


def _check_model(model: nn.Module) -> None:
    if not isinstance(model, nn.Module):
        raise DeployError(f"deploy takes an nn.Module, got {type(model).__name__}")
    training = [name or "(the model)" for name, m in model.named_modules() if m.training]
    if training:
        raise DeployError(f"layer {training[0]} is in training mode: deploy the eval-mode model (model.eval())")
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.device.type != "cpu":
            raise DeployError(f"{name} is on {t.device}: the deployed form runs on the CPU (model.cpu())")
        if t.is_floating_point() and t.dtype != torch.float32:
            raise DeployError(f"{name} is {t.dtype}: the deployed semantics are defined for float32 models")
    found = False
    for name, m in model.named_modules():
        if not _is_binary(m):
            continue
        found = True
        if isinstance(m, BinaryLinear):
            raise DeployError(f"layer {name}: a binary linear layer is not deployed (no preset has one)")
        assert isinstance(m, BinaryConv2d)
        if m.groups != 1 or tuple(m.dilation) != (1, 1):
            raise DeployError(f"layer {name}: groups={m.groups}, dilation={m.dilation}; the kernel computes dense "
                              "convolutions without dilation")
        if m.padding_mode != "zeros" or isinstance(m.padding, str):
            raise DeployError(f"layer {name}: padding {m.padding!r} ({m.padding_mode}); deployed convolutions take "
                              "integer zero padding")
        input_rule(m.input_quantizer, name)
        binary_kernel(m, name)
    if not found:
        raise DeployError("the model has no binary convolution: nothing to deploy")


def _checked_conv_kernel(model: nn.Module, backend: str, pad: int, threads: int | None, isa: str) -> ConvKernel:
    """The conv kernel to deploy ``model`` on, after every refusal: before any copy, and before the first forward."""
    if pad not in (-1, 0, 1):
        raise DeployError(f"pad={pad!r}: use 0 (exact zero padding), or +1 / -1 (hardware without zero padding)")
    _check_model(model)  # before the backend is built or compiled
    chosen = get_conv_kernel(backend, threads, isa)
    _check_words(model, chosen)  # a layer too wide for the chosen backend, by name
    return chosen


def _check_words(model: nn.Module, backend: ConvKernel) -> None:
    """DeployError naming the first binary convolution whose packed patch exceeds ``backend``'s word limit."""
    if backend.max_words is None:
        return
    for name, m in model.named_modules():
        if isinstance(m, BinaryConv2d) and _is_binary(m):
            _, c, kh, kw = m.weight.shape
            words = kh * -(-(kw * c) // 64)  # kernel.py's layout: each kernel row's taps in whole 64-bit words
            if words > backend.max_words:
                raise DeployError(
                    f"layer {name}: a {kh}x{kw} kernel over {c} input channels packs into {words} words per patch; "
                    f"the {backend.name} holds {backend.max_words}: deploy it with backend='numba' or 'emulator'"
                )


def deploy(
    model: nn.Module,
    *,
    backend: str = "auto",
    pad: int = 0,
    threads: int | None = None,
    fold_batchnorm: bool = True,
    isa: str = "auto",
) -> DeployedModel:
    """The deployed form of an eval-mode binary ``model``; ``model`` itself is not changed.

    ``backend``: ``"kernel"`` (C, compiled on first use), ``"numba"``, ``"emulator"`` (pure torch, the reference), or
    ``"auto"`` (kernel, else numba, else emulator, said once). ``pad``: 0 for exact zero padding; +1 / -1 for
    hardware without zero padding (a different network). ``threads``: the kernel's threads (default: torch's at each
    forward, so ``torch.set_num_threads`` after deploying sets them too).
    ``fold_batchnorm``: fold each BatchNorm that only follows a binary convolution into its epilogue (the engines'
    way); False keeps torch's BatchNorm, so power-of-two-scaled presets (bnn, irnet) equal the simulation exactly.
    ``isa``: the kernel's popcount, ``"auto"``, ``"avx512"``, ``"avx2"`` or ``"scalar"``. Where a residual add
    and a hardtanh / PReLU / RPReLU follow a folded BatchNorm, they join the convolution's node (the C kernel
    computes them in its epilogue, the other conv kernels with the same torch operations).
    """
    chosen = _checked_conv_kernel(model, backend, pad, threads, isa)
    ref = copy.deepcopy(model)
    try:
        graph = _LeafTracer().trace(ref)
    except Exception as e:  # noqa: BLE001 - any tracing failure is reported with its cause
        raise DeployError(f"the model cannot be traced into a graph ({type(e).__name__}: {e})") from e
    gm = fx.GraphModule(ref, graph)
    modules = dict(gm.named_modules())
    for node in list(gm.graph.nodes):
        if node.op != "call_module" or not _is_binary(modules[node.target]):
            continue
        conv = modules[node.target]
        assert isinstance(conv, BinaryConv2d)
        kind, alphabet = input_rule(conv.input_quantizer, node.target)
        signs, scale = binary_kernel(conv, node.target)
        users = list(node.users)
        bn: nn.BatchNorm2d | None = None
        if fold_batchnorm and len(users) == 1 and users[0].op == "call_module":
            follower = modules[users[0].target]
            if isinstance(follower, nn.BatchNorm2d) and users[0].args[0] is node and len(users[0].args) == 1:
                bn = follower
                users[0].replace_all_uses_with(node)
                gm.graph.erase_node(users[0])
        mul, add = fold_epilogue(scale, conv.bias, bn)
        add_node, act_node, glue = _glue_chain(node, modules, signs.shape[0]) if bn is not None else (None, None, None)
        spec = BinaryConvSpec(
            signs, mul, add,
            stride=(int(conv.stride[0]), int(conv.stride[1])),
            padding=(int(conv.padding[0]), int(conv.padding[1])),  # str refused above
            alphabet=alphabet, pad_value=pad, name=str(node.target),
        )
        q = conv.input_quantizer
        threshold = q.threshold.detach().clone() if kind == THRESHOLD and isinstance(q, RSign) else None
        gm.add_submodule(node.target, DeployedConv2d(spec, kind, threshold, chosen, glue))
        last = act_node or add_node
        if last is not None:  # one node computes conv, epilogue, + residual and the activation
            args: tuple[fx.node.Argument, ...] = (node.args[0],)
            if add_node is not None:
                args = (node.args[0], add_node.args[1] if add_node.args[0] is node else add_node.args[0])
            with gm.graph.inserting_before(last):
                fused = gm.graph.call_module(node.target, args)
            last.replace_all_uses_with(fused)
            for dead in (act_node, add_node, node):  # each one's users already gone
                if dead is not None:
                    gm.graph.erase_node(dead)
    if matches_torch():  # the float glue's 2x2 average pools (real down-sampling), same bits, faster
        for name, m in list(gm.named_modules()):
            if name and is_plain_2x2(m):
                parent, _, leaf = name.rpartition(".")
                setattr(gm.get_submodule(parent) if parent else gm, leaf, AvgPool2x2())
    gm.graph.eliminate_dead_code()
    gm.delete_all_unused_submodules()
    gm.recompile()
    for p in gm.parameters():
        p.requires_grad_(False)
    return DeployedModel(gm.eval(), chosen, pad, fold_batchnorm).eval()
