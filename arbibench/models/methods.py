"""BNN method presets: a method is a handful of choices, not a subclass tree.

A preset names the quantizers of the binary convolutions (activation and kernel, by alias, see ``arbibench.nn``),
the activation after each batch norm, where the real-valued shortcuts go, and how a down-sampling shortcut is
built. Every backbone builds every preset from these fields alone.

What stays full precision, for every preset and backbone (as in all the papers ARBiBench compares): the first
convolution, the last linear layer, batch norms, activations and shortcuts. ``downsample="real"`` adds a real-valued
1x1 convolution on the down-sampling shortcut (Bi-Real, ReActNet); ``"option_a"`` is He et al.'s parameter-free
shortcut (subsample, pad channels with zeros).

Presets (one paragraph each, the paper first):

``fp``: He et al., *Deep Residual Learning*, CVPR 2016. The full-precision twin: ordinary convolutions, ReLU.

``bnn``: Hubara et al., *Binarized Neural Networks*, NeurIPS 2016. sign on weights and activations, clipped
straight-through estimator, no weight scaling; hardtanh after each batch norm keeps activations in the estimator's
non-zero range. Shortcut around every two convolutions.

``xnor``: Rastegari et al., *XNOR-Net*, ECCV 2016. As ``bnn`` but the binary kernel is scaled by the mean absolute
weight of each output channel. The activation scaling K of the paper is left out, as in most re-implementations
(its effect is absorbed by the batch norm that follows).

``dorefa``: Zhou et al., *DoReFa-Net*, arXiv 2016, with 1-bit weights and activations: weights
``mean|W| * sign(W)`` with one scale per layer and the identity straight-through estimator; activations sign with
the clipped estimator (the 1-bit setting used by BNN benchmarks such as BiBench).

``bireal``: Liu et al., *Bi-Real Net*, ECCV 2018. ApproxSign (piecewise-quadratic derivative) on activations,
per-channel scaled sign on weights, a real-valued shortcut around *every* binary convolution, a real-valued
down-sampling shortcut (average pool + 1x1 conv + batch norm), no activation besides the sign.

``irnet``: Qin et al., *IR-Net*, CVPR 2020. Libra-PB on weights (per-channel standardisation, power-of-two scale),
the Error Decay Estimator with its training-time schedule on weights and activations, shortcut around every binary
convolution (Bi-Real structure, as in IR-Net's CIFAR code), hardtanh.

``reactnet``: Liu et al., *ReActNet*, ECCV 2020, applied to a Bi-Real-style ResNet: RSign (learnable threshold per
channel) and RPReLU (learnable shifts around a PReLU), per-channel scaled sign on weights, shortcut around every
binary convolution, real-valued down-sampling. The distributional (teacher) loss of the paper is not used.

``xnorpp``: Bulat & Tzimiropoulos, *XNOR-Net++*, BMVC 2019. sign activations with the clipped estimator; the weight
and activation scales fused into one factor per output channel learned by back-propagation; a shortcut around every
binary convolution and PReLU.

The presets below are the forward passes of published checkpoints, for ``arbibench import`` (see
``arbibench.models.importers``): each follows its paper's reference code in eval mode, with ``torch.sign`` (sign(0) =
0, ``arbibench.nn.zero_sign``), a BatchNorm1d before the classifier where the CIFAR code has one, and the weights the
method derives (rotations, ``sin``) baked in at import. Trained with arbibench they train the binarizer written here,
not the paper's training-time machinery (rotation updates, periodic surrogates, tau schedules).

``recu``: Xu et al., *ReCU*, ICCV 2021. sign activations; weights centred per output channel, then sign, times a
learned scale per output channel (the standardisation and the tau clamp of ReCU do not change a sign); shortcut around
every binary convolution, down-sampling by 2x2 average pool and zero-padded channels, hardtanh.

``rbnn``: Lin et al., *Rotated Binary Neural Network*, NeurIPS 2020, its ``resnet20_1w1a``. Activations: the sign
of each sample's input minus its mean; weights: the rotated, standardised weights (R1^T W R2 blended with W by
|sin(theta_c)|) baked at import, sign, learned scale; shortcut around two convolutions, option A, hardtanh.

``rbnn_bireal``: Lin et al., RBNN, NeurIPS 2020, its ``resnet20_bireal_1w1a``: ``rbnn`` with a shortcut around
every binary convolution.

``siman``: Lin et al., *SiMaN*, TPAMI 2022. As ``rbnn_bireal`` but the binary weights are SiMaN's stored codes
(2B - 1, baked at import) and PReLU follows each block's batch norm; ReLU after the stem.

``biper``: Vargas et al., *BiPer*, CVPR 2024. sign activations; weights sign(sin(omega W)) baked at import (omega is
an import option: the file does not hold it), learned scale; ReCU's backbone (average-pool-and-pad down-sampling).

``irnet_official``: Qin et al., IR-Net, CVPR 2020, as its CIFAR ResNet-20 code builds it: ``irnet`` with
``torch.sign`` and a BatchNorm1d before the classifier.

``reactnet_official``: Liu et al., ReActNet, ECCV 2020, its released ReAct-ResNet-18 (Bi-Real-18 layout): ``reactnet``
with ``torch.sign`` and no activation after the stem (7x7 convolution, batch norm, max pool).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str
    input_quantizer: str | None
    kernel_quantizer: str | None
    activation: str  # see arbibench.nn.activations.ACTIVATIONS
    paper: str
    shortcut: str = "block"  # "block": around every two convs (ResNet); "per_conv": around every conv (Bi-Real)
    # "option_a": strided subsample + zero-padded channels; "avgpool_pad": 2x2 average pool + zero-padded channels
    # (ReCU, BiPer); "real": avgpool + full-precision 1x1 conv + BN
    downsample: str = "option_a"
    bits_weights: int = 1
    bits_activations: int = 1
    stem_activation: str | None = None  # after the stem's batch norm; None: ``activation``; "identity": none
    classifier_bn: bool = False  # BatchNorm1d on the pooled features before the classifier (RBNN/ReCU CIFAR code)

    @property
    def is_binary(self) -> bool:
        return self.kernel_quantizer is not None

    @property
    def authors(self) -> str:
        """The paper's authors as ``paper`` cites them ("Liu et al."): the text before the first comma."""
        return self.paper.partition(", ")[0]

    @property
    def venue(self) -> str:
        """Where the paper appeared ("ECCV 2020", "arXiv:1606.06160"): the text after the last comma."""
        return self.paper.rpartition(", ")[2]


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("fp", None, None, "relu", "He et al., Deep Residual Learning, CVPR 2016", bits_weights=32,
               bits_activations=32),
        Method("bnn", "ste_sign", "ste_sign", "hardtanh", "Hubara et al., Binarized Neural Networks, NeurIPS 2016"),
        Method("xnor", "ste_sign", "channel_scaled_sign", "hardtanh", "Rastegari et al., XNOR-Net, ECCV 2016"),
        Method("dorefa", "ste_sign", "layer_scaled_sign", "hardtanh", "Zhou et al., DoReFa-Net, arXiv:1606.06160"),
        Method("bireal", "approx_sign", "channel_scaled_sign", "identity", "Liu et al., Bi-Real Net, ECCV 2018",
               shortcut="per_conv", downsample="real"),
        Method("irnet", "ede_sign", "libra_pb_sign", "hardtanh", "Qin et al., IR-Net, CVPR 2020", shortcut="per_conv"),
        Method("reactnet", "rsign", "channel_scaled_sign", "rprelu", "Liu et al., ReActNet, ECCV 2020",
               shortcut="per_conv", downsample="real"),
        Method("xnorpp", "ste_sign", "learned_scale_sign", "prelu", "Bulat & Tzimiropoulos, XNOR-Net++, BMVC 2019",
               shortcut="per_conv"),
        # forward passes of published checkpoints (arbibench import)
        Method("recu", "zero_sign", "centred_learned_scale_sign", "hardtanh", "Xu et al., ReCU, ICCV 2021",
               shortcut="per_conv", downsample="avgpool_pad", classifier_bn=True),
        Method("rbnn", "centred_sign", "zero_learned_scale_sign", "hardtanh",
               "Lin et al., Rotated Binary Neural Network, NeurIPS 2020", classifier_bn=True),
        Method("rbnn_bireal", "centred_sign", "zero_learned_scale_sign", "hardtanh",
               "Lin et al., Rotated Binary Neural Network, NeurIPS 2020", shortcut="per_conv", classifier_bn=True),
        Method("siman", "centred_sign", "zero_learned_scale_sign", "prelu", "Lin et al., SiMaN, TPAMI 2022",
               shortcut="per_conv", stem_activation="relu", classifier_bn=True),
        Method("biper", "zero_sign", "zero_learned_scale_sign", "hardtanh", "Vargas et al., BiPer, CVPR 2024",
               shortcut="per_conv", downsample="avgpool_pad", classifier_bn=True),
        Method("irnet_official", "zero_ede_sign", "zero_libra_pb_sign", "hardtanh", "Qin et al., IR-Net, CVPR 2020",
               shortcut="per_conv", classifier_bn=True),
        Method("reactnet_official", "zero_rsign", "zero_channel_scaled_sign", "rprelu",
               "Liu et al., ReActNet, ECCV 2020", shortcut="per_conv", downsample="real", stem_activation="identity"),
    )
}


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(sorted(METHODS))}")
    return METHODS[name]
