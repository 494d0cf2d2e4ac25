"""``load_dataset``: one entry point over a table of datasets, so adding a dataset is one row, not a new branch.

Every loader returns images ``x`` (float32 NCHW in [0, 1]), labels ``y`` (int64) and the dataset ``indices`` of the
evaluated subset: the first ``n_examples`` test images for ``seed=None`` (RobustBench's convention), or
``n_examples`` drawn at random with ``seed``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from arbibench.data.cifar10 import SPLIT_SIZES, load_cifar10
from arbibench.data.imagenet import imagenet_size, load_imagenet

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
Loader = Callable[[int | None, "str | os.PathLike[str] | None", "int | None"], Batch]


def _cifar10(n_examples: int | None, data_dir: str | os.PathLike[str] | None, seed: int | None) -> Batch:
    return load_cifar10(n_examples, "test", data_dir, seed=seed)


def _imagenet(n_examples: int | None, data_dir: str | os.PathLike[str] | None, seed: int | None) -> Batch:
    if data_dir is None:
        raise ValueError("ImageNet has no download; pass data_dir (--data-dir) pointing to your validation images")
    return load_imagenet(n_examples, data_dir, seed=seed)


#: dataset name -> loader of its test split (name, n_examples, data_dir, seed).
DATASETS: dict[str, Loader] = {"cifar10": _cifar10, "imagenet": _imagenet}


def check_dataset(dataset: str) -> None:
    """Raise one ValueError naming the known datasets when ``dataset`` is not one of them."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; known datasets: {', '.join(DATASETS)}")


def count_test_images(dataset: str, data_dir: str | os.PathLike[str] | None) -> int:
    """How many test images ``dataset`` holds: CIFAR-10's 10,000, or what the ImageNet folder holds."""
    check_dataset(dataset)
    if dataset == "cifar10":
        return SPLIT_SIZES["test"]
    if data_dir is None:
        raise ValueError("ImageNet has no download; pass data_dir (--data-dir) pointing to your validation images")
    return imagenet_size(data_dir)


def load_dataset(
    dataset: str, n_examples: int | None, data_dir: str | os.PathLike[str] | None, seed: int | None
) -> Batch:
    """Images, labels and dataset indices of the evaluated test subset of ``dataset``."""
    check_dataset(dataset)
    return DATASETS[dataset](n_examples, data_dir, seed)
