"""The procedural frost textures match the published generator's frost photos where it counts for CIFAR-10-C.

The reference numbers below were measured once on the first five frost photos that ``imagecorruptions`` 1.1.2 ships
(the published generator's own), shrunk to a fifth as the generator does, and on the same photos put through
arbibench's ``frost`` corruption (``a * image + b * ice``) on the first 250 real CIFAR-10 test images with seed 0.
The photos are not in the repository, so the numbers are; the textures must land near them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from arbibench.data.cifar10 import read_cifar10_arrays
from arbibench.data.corruptions import corrupt
from arbibench.data.corruptions.frost import N_TEXTURES, frost_texture

PHOTO_MEAN_GREY = 164.0  # the five photos' mean grey level (130.8, 206.9, 206.9, 151.9, 123.5)
PHOTO_GREY_RANGE = (123.5, 206.9)
PHOTO_IN_CROP_STD = (10.7, 23.2)  # per photo, the mean grey-level std inside a random 32x32 crop
# Severity 1..5 on the first 250 test images (mean 123.5), photos in place of the textures:
PHOTO_OUTPUT_MEAN = (153.2, 167.5, 172.5, 167.2, 164.3)  # mean pixel value of the frosted images
PHOTO_ABS_CHANGE = (29.7, 44.0, 49.0, 44.0, 42.5)  # mean |frosted - clean| per pixel value


def _in_crop_std(texture: np.ndarray, n: int = 200) -> float:
    rng = np.random.default_rng(0)
    grey = texture.astype(np.float64).mean(axis=2)
    rows = rng.integers(0, grey.shape[0] - 32, n)
    cols = rng.integers(0, grey.shape[1] - 32, n)
    return float(np.mean([grey[r : r + 32, c : c + 32].std() for r, c in zip(rows, cols, strict=True)]))


@pytest.fixture(scope="module")
def textures() -> list[np.ndarray]:
    return [frost_texture(i) for i in range(N_TEXTURES)]


def test_textures_are_as_bright_as_the_photos(textures: list[np.ndarray]) -> None:
    greys = [float(t.astype(np.float64).mean()) for t in textures]
    assert abs(np.mean(greys) - PHOTO_MEAN_GREY) < 8, greys
    low, high = PHOTO_GREY_RANGE
    assert all(low - 10 <= g <= high + 10 for g in greys), greys


def test_textures_have_the_photos_bluish_haze(textures: list[np.ndarray]) -> None:
    for t in textures:
        r, g, b = t.reshape(-1, 3).astype(np.float64).mean(axis=0)
        assert b > g > r and b / r < 1.4, (r, g, b)  # tinted blue, not coloured


def test_textures_have_the_photos_structure(textures: list[np.ndarray]) -> None:
    """Smooth ice with visible detail: neither flat nor the dark-gapped speckle of strokes on black."""
    low, high = PHOTO_IN_CROP_STD
    for t in textures:
        assert low - 3 <= _in_crop_std(t) <= high + 3
        assert np.percentile(t.mean(axis=2), 10) > 80  # a layer of ice everywhere, not strokes on a dark ground
    assert len({t.tobytes() for t in textures}) == N_TEXTURES


def test_frost_changes_real_images_as_much_as_the_photos(data_dir: Path) -> None:
    x, _ = read_cifar10_arrays("test", data_dir)
    clean = np.ascontiguousarray(x[:250].transpose(0, 2, 3, 1))  # NCHW -> the NHWC of the corruption functions
    assert abs(clean.mean() - 123.5) < 0.1  # the images the reference numbers were measured on
    for severity in range(1, 6):
        out = corrupt(clean, "frost", severity, seed=0).astype(np.float64)
        change = float(np.abs(out - clean).mean())
        reference = PHOTO_ABS_CHANGE[severity - 1]
        assert abs(change - reference) < 0.1 * reference, (severity, change, reference)
        assert abs(out.mean() - PHOTO_OUTPUT_MEAN[severity - 1]) < 6, (severity, out.mean())


def test_site_says_frost_is_procedural_and_claims_no_closeness() -> None:
    """The leaderboard's hover text for regenerated data must not present frost as close to the official files."""
    from arbibench.leaderboard.corruptions import REGENERATED_HINT

    assert "frost" in REGENERATED_HINT and "procedural" in REGENERATED_HINT
    assert "close to" not in REGENERATED_HINT
