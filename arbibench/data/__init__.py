"""Datasets as [0, 1] NCHW float tensors with the dataset indices of every sample."""

from arbibench.data.cifar10 import CIFAR10_CLASSES, DataFormatError, default_data_dir, load_cifar10, read_cifar10_arrays
from arbibench.data.datasets import DATASETS, load_dataset
from arbibench.data.download import DownloadError, download_and_extract
from arbibench.data.imagenet import PREPROCESSINGS, load_imagenet
from arbibench.data.subsets import select_indices

__all__ = [
    "CIFAR10_CLASSES",
    "DATASETS",
    "DataFormatError",
    "DownloadError",
    "PREPROCESSINGS",
    "default_data_dir",
    "download_and_extract",
    "load_cifar10",
    "load_dataset",
    "load_imagenet",
    "read_cifar10_arrays",
    "select_indices",
]
