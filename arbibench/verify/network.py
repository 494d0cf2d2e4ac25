"""Sound bounds of a whole network over an input box: every layer kind of the zoo and the importers, each sign tracked.

:class:`NetworkBounds` walks the model the way its ``forward`` does (ResNet and its basic blocks, VGG-small, or an
``nn.Sequential`` whose last layer is linear) and maps an input box to a box of the features the classifier reads,
with :mod:`arbibench.verify.intervals`' margins for float32 rounding. A layer kind it does not know is refused by
name (:class:`UnsupportedLayerError`): a bound for a layer it cannot read would be a guess.

Each binary activation quantizer is a *sign site*. Its argument ``d`` (``x``, ``x - t_c`` for RSign, ``x`` minus
each sample's mean for RBNN's centring) gets an interval; the sign is decided where the whole interval lies on one
side of 0 (``d >= 0`` gives +1, arbibench's sign(0) = +1; ``torch.sign`` presets map 0 to 0, a third value) and
undecided otherwise. The sign of ``fl(x - t)`` is the sign of ``x - t`` for float32 ``x`` and ``t`` (gradual
underflow), so comparing the interval of ``x`` with ``t`` is exact. A branch-and-bound node *forces* some
undecided signs to one value; a forced value outside what the interval allows marks the node infeasible.

Semantics (``arbibench.deploy.semantics``): ``deployed`` (default) bounds the deployed network with exact zero
padding, whose binary convolutions accumulate exact integers; ``simulation`` bounds the float model arbibench
attacks, whose binary convolutions are float32 sums of the scaled kernel, with the float32 sum's margin there too.
For bnn and irnet (power-of-two kernel scales) the simulation's sums are exact as well, so both bound both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from arbibench.deploy.convert import CENTRED, THRESHOLD, input_rule
from arbibench.deploy.semantics import DEPLOYED, PM1, SIMULATION
from arbibench.models.resnet import BasicBlock, Normalize, ResNet, ShortcutA, ShortcutAvgPad
from arbibench.models.vgg import VGGSmall
from arbibench.nn.activations import RPReLU
from arbibench.nn.fused import has_binary_layer
from arbibench.nn.layers import BinaryConv2d, BinaryLinear
from arbibench.nn.quantizers import Quantizer, RSign
from arbibench.verify import intervals as iv
from arbibench.verify.intervals import Box

SEMANTICS = (DEPLOYED, SIMULATION)
FREE = 2  # a sign no branch has forced (forced values are -1, 0, +1)


class UnsupportedLayerError(ValueError):
    """The model holds a layer whose bounds arbibench cannot compute soundly."""


@dataclass
class Pass:
    """One bound pass over a batch of branch-and-bound nodes (batch dimension first everywhere).

    ``split_site``/``split_unit``: the first undecided sign in forward order (-1 where none), ``split_values``
    the values (-1, 0, +1) it can take, ``split_count`` the undecided signs of that site; ``undecided``: how many
    signs are undecided in all.
    """

    features: Box
    infeasible: torch.Tensor
    split_site: torch.Tensor
    split_unit: torch.Tensor
    split_values: torch.Tensor
    split_count: torch.Tensor
    undecided: torch.Tensor
    site_sizes: list[int] = field(default_factory=list)


@dataclass
class _State:
    forced: dict[int, torch.Tensor]
    infeasible: torch.Tensor
    split_site: torch.Tensor
    split_unit: torch.Tensor
    split_values: torch.Tensor
    split_count: torch.Tensor
    undecided: torch.Tensor
    site: int = 0
    site_sizes: list[int] = field(default_factory=list)


def _channel_shape(t: torch.Tensor) -> tuple[int, ...]:
    return (1, -1, *([1] * (t.dim() - 2)))


class NetworkBounds:
    """Interval bounds of ``model``'s classifier input over an input box, for one of :data:`SEMANTICS`."""

    def __init__(self, model: nn.Module, semantics: str = DEPLOYED, device: str | torch.device | None = None) -> None:
        if semantics not in SEMANTICS:
            raise ValueError(f"unknown semantics {semantics!r}; known: {', '.join(SEMANTICS)}")
        if any(m.training for m in model.modules()):
            raise ValueError("the model is in training mode: call model.eval() first (BatchNorm must use its "
                             "running statistics)")
        if semantics == DEPLOYED and not has_binary_layer(model):
            raise ValueError("the model has no binary layer, so there is no deployed network to verify (arbibench "
                             "deploys BNNs): verify its float model with semantics 'simulation' "
                             "(--semantics simulation)")
        self.model, self.semantics = model, semantics
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.names = {id(m): name or "model" for name, m in model.named_modules()}
        self._cache: dict[tuple[int, str], Any] = {}
        self._handlers: dict[type, Callable[[Any, Box, _State], Box]] = {
            nn.Sequential: self._sequential, Normalize: self._normalize, nn.Conv2d: self._conv,
            BinaryConv2d: self._conv, nn.Linear: self._linear, BinaryLinear: self._linear,
            nn.BatchNorm2d: self._batchnorm, nn.BatchNorm1d: self._batchnorm, nn.Hardtanh: self._hardtanh,
            nn.ReLU: self._relu, nn.PReLU: self._prelu, RPReLU: self._rprelu, nn.Identity: self._identity,
            ShortcutA: self._shortcut_a, ShortcutAvgPad: self._shortcut_avg_pad, nn.AvgPool2d: self._avg_pool,
            nn.MaxPool2d: self._max_pool, nn.Flatten: self._flatten, BasicBlock: self._basic_block,
        }
        self.head_weight, self.head_bias, self.head_fan_in = self._head()

    # -- the public pass ----------------------------------------------------------------------------------------
    def run(self, lo: torch.Tensor, hi: torch.Tensor, forced: dict[int, torch.Tensor] | None = None) -> Pass:
        """Bounds of the classifier's input for every input in ``[lo, hi]`` (float64, batch first), each node's
        forced signs applied (``forced[site]``: int8, (B, units), :data:`FREE` where not forced)."""
        b = lo.shape[0]
        zeros = torch.zeros(b, dtype=torch.long, device=self.device)
        st = _State(forced or {}, torch.zeros(b, dtype=torch.bool, device=self.device), zeros - 1, zeros.clone(),
                     torch.zeros(b, 3, dtype=torch.bool, device=self.device), zeros.clone(), zeros.clone())
        box = self._features(self.model, (lo.to(self.device, torch.float64), hi.to(self.device, torch.float64)), st)
        return Pass(box, st.infeasible, st.split_site, st.split_unit, st.split_values, st.split_count, st.undecided,
                    st.site_sizes)

    def margins(self, features: Box, label: int) -> torch.Tensor:
        """Lower bounds of ``logit[label] - logit[j]`` (B, classes), +inf at ``label``: the classifier's rows are
        subtracted before the bound, and each logit's own float32 rounding is subtracted after it."""
        w, bias = self.head_weight, self.head_bias
        diff_w, diff_b = w[label] - w, bias[label] - bias
        lo, hi = features
        mid, rad = (lo + hi) * 0.5, (hi - lo) * 0.5
        centre = mid @ diff_w.T + diff_b
        spread = rad @ diff_w.abs().T
        err = iv.gamma(self.head_fan_in + 1) * ((mid.abs() + rad) @ w.abs().T + bias.abs()) + iv.ABS
        out = centre - spread - err - err[:, label : label + 1]
        out[:, label] = torch.inf
        return out

    # -- structure ------------------------------------------------------------------------------------------------
    def _head(self) -> tuple[torch.Tensor, torch.Tensor, int]:
        head = self._head_module(self.model)
        w = self._weight(head)
        bias = torch.zeros(w.shape[0], dtype=torch.float64, device=self.device) if head.bias is None else (
            head.bias.detach().to(self.device, torch.float64))
        return w, bias, int(w.shape[1])

    def _head_module(self, model: nn.Module) -> nn.Linear:
        if type(model) is ResNet or type(model) is VGGSmall:
            return model.fc
        if type(model) is nn.Sequential and len(model) > 0 and type(model[-1]) in (nn.Linear, BinaryLinear):
            last = model[-1]
            assert isinstance(last, nn.Linear)
            return last
        raise UnsupportedLayerError(
            f"cannot bound a {type(model).__name__}: arbibench verify reads ResNet, VGGSmall and an nn.Sequential "
            "ending in a linear layer (the zoo's and the importers' networks)")

    def _features(self, model: nn.Module, box: Box, st: _State) -> Box:
        if type(model) is ResNet:
            box = self._sequential([model.normalize, model.conv1, model.bn1, model.act1, model.pool, model.layers],
                                   box, st)
            box = iv.global_average(box)
            return box if model.classifier_bn is None else self._module(model.classifier_bn, box, st)
        if type(model) is VGGSmall:
            box = self._sequential([model.normalize, model.features, nn.Flatten()], box, st)
            return box
        assert isinstance(model, nn.Sequential)
        box = self._sequential(list(model)[:-1], box, st)
        head = model[-1]
        if isinstance(head, BinaryLinear) and head.input_quantizer is not None:
            box = self._site(head, head.input_quantizer, box, st)
        return box

    def _module(self, m: nn.Module, box: Box, st: _State) -> Box:
        handler = self._handlers.get(type(m))
        if handler is None:
            raise UnsupportedLayerError(
                f"layer {self.names.get(id(m), '?')!r} is a {type(m).__name__}, which arbibench verify cannot bound; "
                f"it bounds {', '.join(sorted(t.__name__ for t in self._handlers))}")
        return handler(m, box, st)

    def _sequential(self, modules: Any, box: Box, st: _State) -> Box:
        for m in modules:
            box = self._module(m, box, st)
        return box

    def _basic_block(self, m: BasicBlock, box: Box, st: _State) -> Box:
        if m.per_conv:
            out = self._module(m.act1, iv.add(self._sequential([m.conv1, m.bn1], box, st),
                                              self._module(m.shortcut, box, st)), st)
            return self._module(m.act2, iv.add(self._sequential([m.conv2, m.bn2], out, st), out), st)
        out = self._sequential([m.conv1, m.bn1, m.act1, m.conv2, m.bn2], box, st)
        return self._module(m.act2, iv.add(out, self._module(m.shortcut, box, st)), st)

    # -- layers ---------------------------------------------------------------------------------------------------
    def _tensor(self, t: torch.Tensor) -> torch.Tensor:
        return t.detach().to(self.device, torch.float64)

    def _weight(self, m: nn.Conv2d | nn.Linear) -> torch.Tensor:
        """The kernel the layer multiplies by: its kernel quantizer's float32 output, held in float64."""
        key = (id(m), "weight")
        if key not in self._cache:
            q = getattr(m, "kernel_quantizer", None)
            with torch.no_grad():
                w = m.weight if q is None else q(m.weight)
            self._cache[key] = self._tensor(w.to(torch.float32))
        weight: torch.Tensor = self._cache[key]
        return weight

    def _conv(self, m: nn.Conv2d, box: Box, st: _State) -> Box:
        if m.padding_mode != "zeros" or isinstance(m.padding, str):
            raise UnsupportedLayerError(f"layer {self.names[id(m)]!r}: padding {m.padding!r} / "
                                        f"{m.padding_mode!r}; arbibench verify bounds numeric zero padding")
        q = getattr(m, "input_quantizer", None)
        if q is not None:
            box = self._site(m, q, box, st)
        w = self._weight(m)
        bias = None if m.bias is None else self._tensor(m.bias)
        exact = w.abs().sum(dim=(1, 2, 3)) if q is not None and self._exact_sum(m, w) else None

        def op(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            return F.conv2d(x, k, None, m.stride, m.padding, m.dilation, m.groups)

        return iv.linear(box, w, bias, op, int(w[0].numel()), exact)

    def _exact_sum(self, m: nn.Module, w: torch.Tensor) -> bool:
        """Whether a binary convolution's sum of +-1 (0) inputs times its kernel is exact in the semantics: always
        when deployed (integer accumulation); in the simulation when every channel's kernel is +-s_c (0) with s_c a
        power of two (bnn, irnet), so that every partial sum is a multiple of s_c far below 2**24 s_c."""
        if getattr(m, "kernel_quantizer", None) is None:
            return False
        if self.semantics == DEPLOYED:
            return True
        scale = w.abs().flatten(1).amax(dim=1)
        uniform = bool(((w.abs() == scale.view(-1, 1, 1, 1)) | (w == 0)).all())
        return uniform and bool((torch.frexp(scale).mantissa == 0.5).all()) and w[0].numel() < 2**20

    def _linear(self, m: nn.Linear, box: Box, st: _State) -> Box:
        q = getattr(m, "input_quantizer", None)
        if q is not None:
            box = self._site(m, q, box, st)
        w = self._weight(m)
        return iv.linear(box, w, None if m.bias is None else self._tensor(m.bias), F.linear, int(w.shape[1]))

    def _batchnorm(self, m: nn.BatchNorm1d | nn.BatchNorm2d, box: Box, st: _State) -> Box:
        if m.running_mean is None or m.running_var is None:
            raise UnsupportedLayerError(f"layer {self.names[id(m)]!r}: a BatchNorm without running statistics")
        a = 1.0 / torch.sqrt(self._tensor(m.running_var) + m.eps)
        if m.weight is not None:
            a = a * self._tensor(m.weight)
        beta = torch.zeros_like(a) if m.bias is None else self._tensor(m.bias)
        return iv.affine(box, a, self._tensor(m.running_mean), beta)

    def _normalize(self, m: Normalize, box: Box, st: _State) -> Box:
        std = self._tensor(m.std).flatten()
        if not bool((std > 0).all()):
            raise UnsupportedLayerError(f"layer {self.names[id(m)]!r}: a standard deviation <= 0")
        return iv.normalize(box, self._tensor(m.mean).flatten(), std)

    def _hardtanh(self, m: nn.Hardtanh, box: Box, st: _State) -> Box:
        return box[0].clamp(m.min_val, m.max_val), box[1].clamp(m.min_val, m.max_val)

    def _relu(self, m: nn.ReLU, box: Box, st: _State) -> Box:
        return box[0].clamp_min(0), box[1].clamp_min(0)

    def _identity(self, m: nn.Module, box: Box, st: _State) -> Box:
        return box

    def _prelu(self, m: nn.PReLU, box: Box, st: _State) -> Box:
        return iv.prelu(box, self._tensor(m.weight).flatten())

    def _rprelu(self, m: RPReLU, box: Box, st: _State) -> Box:
        shift_in, shift_out = self._tensor(m.shift_in).flatten(), self._tensor(m.shift_out).flatten()
        shape = _channel_shape(box[0])
        box = iv.rounded((box[0] - shift_in.view(shape), box[1] - shift_in.view(shape)))
        box = iv.prelu(box, self._tensor(m.prelu.weight).flatten())
        return iv.rounded((box[0] + shift_out.view(shape), box[1] + shift_out.view(shape)))

    def _shortcut_a(self, m: ShortcutA, box: Box, st: _State) -> Box:
        def f(t: torch.Tensor) -> torch.Tensor:
            return F.pad(t[:, :, :: m.stride, :: m.stride], (0, 0, 0, 0, m.pad, m.pad))

        return f(box[0]), f(box[1])

    def _shortcut_avg_pad(self, m: ShortcutAvgPad, box: Box, st: _State) -> Box:
        lo, hi = iv.average(box, lambda t: F.avg_pool2d(t, 2), 4)
        return F.pad(lo, (0, 0, 0, 0, m.pad, m.pad)), F.pad(hi, (0, 0, 0, 0, m.pad, m.pad))

    def _avg_pool(self, m: nn.AvgPool2d, box: Box, st: _State) -> Box:
        k = m.kernel_size if isinstance(m.kernel_size, int) else int(torch.tensor(m.kernel_size).prod())
        count = k * k if isinstance(m.kernel_size, int) else k
        if m.padding not in (0, (0, 0)) or m.ceil_mode or m.divisor_override is not None:
            raise UnsupportedLayerError(f"layer {self.names[id(m)]!r}: an average pool with padding, ceil_mode or "
                                        "a divisor override")
        return iv.average(box, lambda t: F.avg_pool2d(t, m.kernel_size, m.stride), count)

    def _max_pool(self, m: nn.MaxPool2d, box: Box, st: _State) -> Box:
        def f(t: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = F.max_pool2d(t, m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode)
            return out

        return f(box[0]), f(box[1])

    def _flatten(self, m: nn.Flatten, box: Box, st: _State) -> Box:
        return box[0].flatten(m.start_dim, m.end_dim), box[1].flatten(m.start_dim, m.end_dim)

    # -- sign sites -----------------------------------------------------------------------------------------------
    def _argument(self, layer: nn.Module, q: Quantizer, box: Box) -> tuple[Box, str]:
        """The interval of the sign's argument ``d`` and the alphabet (pm1: 0 -> +1; pm1_zero: 0 -> 0)."""
        kind, alphabet = input_rule(q, self.names.get(id(layer), "?"))
        lo, hi = box
        if kind == THRESHOLD:
            assert isinstance(q, RSign)
            t = self._tensor(q.threshold).flatten().view(_channel_shape(lo))
            return (lo - t, hi - t), alphabet
        if kind == CENTRED:
            dims = tuple(range(1, lo.dim()))
            n = lo[0].numel()
            s_lo, s_hi = lo.sum(dims, keepdim=True), hi.sum(dims, keepdim=True)
            e = iv.sum_error(n, iv.magnitude(box).mean(dims, keepdim=True))
            # d_i = x_i (1 - 1/n) - (sum of the others) / n, then the computed mean's rounding
            return (lo * (1 - 1 / n) - (s_hi - hi) / n - e, hi * (1 - 1 / n) - (s_lo - lo) / n + e), alphabet
        return box, alphabet

    def _site(self, layer: nn.Module, q: Quantizer, box: Box, st: _State) -> Box:
        (d_lo, d_hi), alphabet = self._argument(layer, q, box)
        shape, b = d_lo.shape, d_lo.shape[0]
        d_lo, d_hi = d_lo.reshape(b, -1), d_hi.reshape(b, -1)
        can_neg = d_lo < 0
        if alphabet == PM1:
            can_pos, can_zero = d_hi >= 0, torch.zeros_like(can_neg)
        else:
            can_pos, can_zero = d_hi > 0, (d_lo <= 0) & (d_hi >= 0)
        index = st.site
        st.site += 1
        st.site_sizes.append(int(d_lo.shape[1]))
        forced = st.forced.get(index)
        if forced is not None:
            chosen = forced != FREE
            allowed = torch.where(forced == 1, can_pos, torch.where(forced == -1, can_neg, can_zero))
            st.infeasible |= (chosen & ~allowed).any(dim=1)
            can_neg = torch.where(chosen, forced == -1, can_neg)
            can_zero = torch.where(chosen, forced == 0, can_zero)
            can_pos = torch.where(chosen, forced == 1, can_pos)
        one = torch.ones_like(d_lo)
        v_lo = torch.where(can_neg, -one, torch.where(can_zero, 0 * one, one))
        v_hi = torch.where(can_pos, one, torch.where(can_zero, 0 * one, -one))
        undecided = v_lo < v_hi
        st.undecided += undecided.sum(dim=1)
        first = (st.split_site < 0) & undecided.any(dim=1)
        if bool(first.any()):
            score = torch.where(undecided, torch.minimum(-d_lo, d_hi), torch.full_like(d_lo, -torch.inf))
            unit = score.argmax(dim=1)
            st.split_site = torch.where(first, torch.full_like(st.split_site, index), st.split_site)
            st.split_unit = torch.where(first, unit, st.split_unit)
            values = torch.stack([can_neg, can_zero, can_pos], dim=2)[torch.arange(b, device=unit.device), unit]
            st.split_values = torch.where(first.unsqueeze(1), values, st.split_values)
            st.split_count = torch.where(first, undecided.sum(dim=1), st.split_count)
        return v_lo.view(shape), v_hi.view(shape)
