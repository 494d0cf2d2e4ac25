"""``deployed(model)``: the deployed form of a model, built once and rebuilt when the model's tensors change.

For the evaluation's inference option: every clean pass and every black-box query can go to ``deployed(model)``
while white-box attacks differentiate the simulation (``model`` itself).
"""

from __future__ import annotations

import weakref

from torch import nn

from arbibench.deploy.convert import DeployedModel, deploy

_Key = tuple[object, ...]
_CACHE: weakref.WeakKeyDictionary[nn.Module, dict[tuple[object, ...], tuple[_Key, DeployedModel]]] = (
    weakref.WeakKeyDictionary()
)


def _tensor_identity(model: nn.Module) -> _Key:
    # data pointer and in-place version counter of every tensor: an optimiser step or load_state_dict changes one
    return tuple((t.data_ptr(), t._version) for t in model.state_dict(keep_vars=True).values())


def deployed(
    model: nn.Module, *, backend: str = "auto", pad: int = 0, threads: int | None = None, fold_batchnorm: bool = True
) -> DeployedModel:
    """:func:`deploy` of ``model``, cached per model and options; DeployError when the model cannot be deployed."""
    options = (backend, pad, threads, fold_batchnorm)
    key = _tensor_identity(model)
    per_model = _CACHE.setdefault(model, {})
    hit = per_model.get(options)
    if hit is not None and hit[0] == key:
        return hit[1]
    out = deploy(model, backend=backend, pad=pad, threads=threads, fold_batchnorm=fold_batchnorm)
    per_model[options] = (key, out)
    return out
