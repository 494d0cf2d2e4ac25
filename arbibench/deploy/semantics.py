"""The three semantics of a binary network, each with a name, and the per-layer description they share.

``simulation``
    Today's float model (the reference): every binary convolution is a float32 convolution of the binarized input
    with the *pre-scaled* kernel ``W_q = s_c * sign(W)``, then the float BatchNorm and the float glue. This is what
    arbibench trains, attacks and has always evaluated.

``deployed``
    What an inference engine runs (Larq Compute Engine, daBNN, Riptide, FPGA flows). Per binary convolution, in this
    fixed order:

    1. binarize the input: ``d`` is the sign's argument (``x``; ``x - t_c`` for RSign's per-channel threshold;
       ``x - mean(x)`` per sample for RBNN's and SiMaN's centring), and the activation is ``+1 if d >= 0 else -1``
       (alphabet ``pm1``), or torch.sign's three levels ``-1, 0, +1`` (``pm1_zero``: a 0 sets no mask bit and
       contributes nothing), or ``1 if d >= 0 else 0`` (``zero_one``, AND-popcount; no preset uses it);
    2. pack the bits and accumulate the *unscaled* +-1 (or 0) kernel as an exact integer
       ``acc = K - 2 * popcount(a XOR w)`` (or its masked form); exact zero padding: a border tap contributes
       nothing. ``pad=+1`` / ``pad=-1`` fills border taps with that value instead: **hardware without zero
       padding**, a different network, offered to measure what that costs;
    3. the epilogue, per output channel ``c``: ``y = fl32(fl32(acc * mul_c) + add_c)``, two float32 roundings,
       never an FMA, with the kernel scale and the following BatchNorm folded into ``mul_c, add_c`` once, in
       float64, then rounded to float32 (:func:`fold_epilogue`);
    4. the rest (first convolution, shortcuts and residual adds, activations, RPReLU, pooling, classifier) in
       float32, exactly as in the simulation: torch's operations, or, where a residual add and an activation
       (hardtanh, PReLU, RPReLU) directly follow the convolution's BatchNorm, the same IEEE operations in the same
       order inside the kernel's epilogue (:class:`Glue`), which gives the same bits; a plain 2x2 average pool
       (Bi-Real's and ReActNet's real-valued down-sampling) is computed as the same additions in the same order
       (:mod:`arbibench.deploy.pooling`), used only where a check at deploy time found it equal to torch's.

``emulator``
    A pure-torch computation of ``deployed`` (:mod:`arbibench.deploy.emulator`): a float32 convolution of the +-1
    (0) activations with the unscaled +-1 (0) kernel, whose every partial sum is an integer far below ``2**24`` and
    so exact in float32 in any summation order, then the same epilogue with the same two roundings. It needs no
    compiled code and is the reference the C kernel is tested against bit for bit.

Where ``deployed`` and ``simulation`` agree: when every ``s_c`` is a power of two (bnn: 1; irnet: Libra-PB's
``2^round(...)``) the simulation's convolution output is ``acc * s_c`` exactly, since every product and partial sum
is an exactly representable multiple of ``s_c``. With ``fold_batchnorm=False`` the deployed epilogue is that product
alone and the BatchNorm stays torch's, so ``deployed == simulation`` bit for bit for those presets. Folding
BatchNorm (the engines' way, the default) rounds differently from torch's BatchNorm (which on some CPUs uses an FMA
and a vectorised reciprocal square root), so then the two agree only up to float32 rounding; with other scales
(xnor, dorefa, bireal, reactnet, xnorpp, the imported presets' learned scales) they agree up to rounding in the
convolution too.

sign(0), per preset (see :data:`SIGN_CONVENTIONS`): arbibench's own presets map 0 to +1 (``binary_sign``), which a
bit holds; the imported presets follow ``torch.sign`` (0 -> 0) on activations and weights, which the deployed form
computes exactly with a mask bit per input (and per weight where a binarized weight is 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from arbibench.inference import Inference
from arbibench.nn.activations import RPReLU

# the simulation and the deployed form are the two networks an evaluation can ask (arbibench.inference), named once
SIMULATION = Inference.SIMULATION
DEPLOYED = Inference.DEPLOYED
EMULATOR = "emulator"
SEMANTICS = (SIMULATION, DEPLOYED, EMULATOR)

# Input alphabets, numbered as kernel.c numbers them.
PM1 = "pm1"  # {-1, +1}: +1 if d >= 0 (sign(0) = +1), XOR-popcount
PM1_ZERO = "pm1_zero"  # {-1, 0, +1}: torch.sign, a mask bit per input
ZERO_ONE = "zero_one"  # {0, 1}: 1 if d >= 0, AND-popcount
ALPHABETS: dict[str, int] = {PM1: 0, PM1_ZERO: 1, ZERO_ONE: 2}

# How each preset's sign treats 0 in the deployed form (activations; weights alike).
SIGN_CONVENTIONS: dict[str, str] = {
    "bnn": "sign(0) = +1 (binary_sign): alphabet pm1, exact",
    "xnor": "sign(0) = +1: pm1, exact",
    "xnorpp": "sign(0) = +1: pm1, exact (a negative learned scale flips the channel's bits)",
    "dorefa": "sign(0) = +1: pm1, exact",
    "bireal": "sign(0) = +1: pm1, exact",
    "irnet": "sign(0) = +1: pm1, exact",
    "reactnet": "sign(d) with d = x - t_c, sign(0) = +1: pm1, exact",
    "recu": "torch.sign (0 -> 0) on activations and centred weights: pm1_zero with mask bits, exact",
    "rbnn": "torch.sign (0 -> 0) on each sample's centred input and on the weights: pm1_zero, exact",
    "rbnn_bireal": "as rbnn",
    "siman": "as rbnn",
    "biper": "torch.sign (0 -> 0) on activations and weights: pm1_zero, exact",
    "irnet_official": "torch.sign (0 -> 0): pm1_zero, exact",
    "reactnet_official": "torch.sign of x - t_c (0 -> 0): pm1_zero, exact",
}


@dataclass(frozen=True, eq=False)
class BinaryConvSpec:
    """One binary convolution in deployed form: what the emulator and every kernel compute from ``d``.

    ``signs``: the unscaled kernel, float32 ``(O, C, KH, KW)`` of -1, 0, +1; ``mul``/``add``: the float32 epilogue
    per output channel; ``pad_value``: 0 for exact zero padding, +1 / -1 for hardware without it.
    """

    signs: torch.Tensor
    mul: torch.Tensor
    add: torch.Tensor
    stride: tuple[int, int]
    padding: tuple[int, int]
    alphabet: str = PM1
    pad_value: int = 0
    name: str = "conv"

    def __post_init__(self) -> None:
        if self.alphabet not in ALPHABETS:
            raise ValueError(f"{self.name}: unknown alphabet {self.alphabet!r}; known: {', '.join(ALPHABETS)}")
        if self.pad_value not in (-1, 0, 1):
            raise ValueError(f"{self.name}: pad must be 0 (exact zero padding), +1 or -1, got {self.pad_value!r}")
        if self.signs.dim() != 4 or self.signs.dtype != torch.float32:
            raise ValueError(f"{self.name}: signs must be a float32 (O, C, KH, KW) tensor")
        o = self.signs.shape[0]
        if self.mul.shape != (o,) or self.add.shape != (o,):
            raise ValueError(f"{self.name}: mul and add need one float32 value per output channel ({o})")

    @property
    def has_zero_weights(self) -> bool:
        return bool((self.signs == 0).any())

    @property
    def masked(self) -> bool:
        """Whether the masked (two-popcount) form is needed: a 0 in the input alphabet or in the kernel."""
        return self.alphabet != PM1 or self.has_zero_weights

    def output_size(self, h: int, w: int) -> tuple[int, int]:
        kh, kw = self.signs.shape[2:]
        oh = (h + 2 * self.padding[0] - kh) // self.stride[0] + 1
        return oh, (w + 2 * self.padding[1] - kw) // self.stride[1] + 1


@dataclass(frozen=True, eq=False)
class Glue:
    """The activation fused into a deployed convolution's epilogue, after the optional residual add.

    ``code``: 1 clamp (hardtanh), 2 PReLU, 3 RPReLU (kernel.c's numbering); ``params``: float32, clamp ``[lo, hi]``,
    PReLU the slope per output channel, RPReLU ``[shift_in | slope | shift_out]`` per output channel; ``module``:
    the simulation's own module, which every backend but the C kernel calls.
    """

    code: int
    params: torch.Tensor
    module: nn.Module


def glue_of(module: nn.Module, channels: int) -> Glue | None:
    """The :class:`Glue` computing ``module`` exactly on ``channels`` channels, or None if it has none."""
    def per_channel(t: torch.Tensor) -> torch.Tensor:
        flat = t.detach().to(torch.float32).reshape(-1)
        return flat.expand(channels).clone() if flat.numel() == 1 else flat.clone()

    if type(module) is nn.Hardtanh:
        return Glue(1, torch.tensor([module.min_val, module.max_val], dtype=torch.float32), module)
    if type(module) is nn.PReLU and module.weight.numel() in (1, channels):
        return Glue(2, per_channel(module.weight), module)
    if type(module) is RPReLU and module.prelu.weight.numel() in (1, channels):
        shift_in, shift_out = per_channel(module.shift_in), per_channel(module.shift_out)
        if shift_in.numel() == channels and shift_out.numel() == channels:
            return Glue(3, torch.cat([shift_in, per_channel(module.prelu.weight), shift_out]), module)
    return None


def activation_values(d: torch.Tensor, alphabet: str) -> torch.Tensor:
    """The deployed activation of the sign's argument ``d``: +-1 (pm1), -1/0/+1 (pm1_zero) or 0/1 (zero_one)."""
    if alphabet == PM1:
        return (d >= 0).to(torch.float32).mul_(2).sub_(1)
    if alphabet == PM1_ZERO:
        return (d >= 0).to(torch.float32).mul_(2).sub_(1).sub_((d == 0).to(torch.float32))
    if alphabet == ZERO_ONE:
        return (d >= 0).to(torch.float32)
    raise ValueError(f"unknown alphabet {alphabet!r}; known: {', '.join(ALPHABETS)}")


def fold_epilogue(
    scale: torch.Tensor, bias: torch.Tensor | None, bn: nn.BatchNorm2d | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mul, add)`` float32 per output channel: the kernel scale, conv bias and eval BatchNorm folded in float64.

    ``alpha = gamma / sqrt(var + eps)``, ``mul = scale * alpha``, ``add = beta + (bias - mean) * alpha``; without a
    BatchNorm ``mul = scale`` and ``add = bias`` (or 0). Each is rounded to float32 once, at the end.
    """
    s = scale.detach().to(torch.float64)
    b = torch.zeros_like(s) if bias is None else bias.detach().to(torch.float64)
    if bn is None:
        return s.to(torch.float32), b.to(torch.float32)
    if bn.running_mean is None or bn.running_var is None:
        raise ValueError("a BatchNorm without running statistics cannot be folded")
    var = bn.running_var.detach().to(torch.float64)
    mean = bn.running_mean.detach().to(torch.float64)
    alpha = 1.0 / torch.sqrt(var + bn.eps)
    if bn.weight is not None:
        alpha = alpha * bn.weight.detach().to(torch.float64)
    beta = torch.zeros_like(s) if bn.bias is None else bn.bias.detach().to(torch.float64)
    return (s * alpha).to(torch.float32), (beta + (b - mean) * alpha).to(torch.float32)


def epilogue(acc: torch.Tensor, mul: torch.Tensor, add: torch.Tensor) -> torch.Tensor:
    """``fl32(fl32(acc * mul) + add)`` per channel, in place on the float32 accumulator ``acc`` (N, O, H, W)."""
    return acc.mul_(mul.view(1, -1, 1, 1)).add_(add.view(1, -1, 1, 1))
