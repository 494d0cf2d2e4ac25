"""ImageNet loading on 100 real ImageNet JPEGs: both folder layouts, RobustBench's presets, subsets and errors."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from arbibench.data import DataFormatError, load_imagenet

GRAYSCALE = "n03908714_pencil_sharpener.JPEG"
SMALL = "n02095889_Sealyham_terrier.JPEG"  # 170 x 170
WOLFHOUND = "n02090721_Irish_wolfhound.JPEG"  # 250 x 206


@pytest.fixture(scope="module")
def sample_dir(data_dir: Path) -> Path:
    path = data_dir / "imagenet-sample"
    assert (path / "labels.csv").is_file(), f"{path}/labels.csv is missing from the real data folder"
    return path


@pytest.fixture(scope="module")
def rows(sample_dir: Path) -> list[tuple[str, int, str]]:
    """labels.csv as (filename, class_index, wnid), in file-name order."""
    with open(sample_dir / "labels.csv", newline="", encoding="utf-8") as f:
        return sorted((r["filename"], int(r["class_index"]), r["wnid"]) for r in csv.DictReader(f))


@pytest.fixture(scope="module")
def full(sample_dir: Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return load_imagenet(None, sample_dir)


def _to_tensor(img: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1).float() / 255


def _flat(folder: Path, sample_dir: Path, entries: list[tuple[str, object]], source: str | None = None) -> Path:
    """A flat folder of symlinks to real JPEGs with a labels.csv of (filename, class_index)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "labels.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["filename", "class_index"])
        for name, label in entries:
            writer.writerow([name, label])
            if not (folder / name).exists():
                (folder / name).symlink_to(sample_dir / (source or name))
    return folder


def test_shapes_dtypes_range(full):
    x, y, idx = full
    assert x.shape == (100, 3, 224, 224) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and idx.dtype == torch.int64
    assert torch.equal(idx, torch.arange(100))
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert float(x.std()) > 0.1  # real pictures, not a blank tensor


def test_labels_follow_labels_csv(full, rows):
    _, y, _ = full
    assert y.tolist() == [label for _, label, _ in rows]
    assert y.tolist() == list(range(0, 1000, 10))


def test_grayscale_jpeg_loads_as_three_equal_channels(full, rows, sample_dir):
    with Image.open(sample_dir / GRAYSCALE) as img:
        assert img.mode == "L"
    k = [name for name, _, _ in rows].index(GRAYSCALE)
    x = full[0][k]
    assert x.shape == (3, 224, 224)
    assert torch.equal(x[0], x[1]) and torch.equal(x[1], x[2])


def test_res256crop224_geometry(full, rows, sample_dir):
    """torchvision's Resize(256) truncates the long side; CenterCrop rounds the offsets: 250x206 -> 310x256 -> crop."""
    with Image.open(sample_dir / WOLFHOUND) as img:
        expected = _to_tensor(img.convert("RGB").resize((310, 256), Image.Resampling.BILINEAR).crop((43, 16, 267, 240)))
    k = [name for name, _, _ in rows].index(WOLFHOUND)
    assert torch.equal(full[0][k], expected)


def test_crop288_pads_small_images_and_does_not_resize(tmp_path, sample_dir):
    folder = _flat(tmp_path, sample_dir, [(SMALL, 0), ("n01440764_tench.JPEG", 0)])
    x, _, _ = load_imagenet(None, folder, "Crop288")
    assert x.shape == (2, 3, 288, 288)
    with Image.open(sample_dir / SMALL) as img:
        small = _to_tensor(img)
    with Image.open(sample_dir / "n01440764_tench.JPEG") as img:  # 500 x 375
        tench = _to_tensor(img)
    assert torch.equal(x[1, :, 59:229, 59:229], small)  # (288 - 170) // 2 = 59 pixels of zeros on each side
    assert float(x[1, :, :59].abs().max()) == 0.0 and float(x[1, :, 229:].abs().max()) == 0.0
    assert torch.equal(x[0], tench[:, 44:332, 106:394])  # round(87 / 2) = 44, round(212 / 2) = 106


def test_none_preset_keeps_the_image_and_refuses_mixed_sizes(tmp_path, sample_dir):
    folder = _flat(tmp_path, sample_dir, [(SMALL, 0), (WOLFHOUND, 1)])
    x, _, _ = load_imagenet(1, folder, "none")
    assert x.shape == (1, 3, 206, 250)
    with pytest.raises(ValueError, match="different sizes"):
        load_imagenet(None, folder, "none")


def test_unknown_preset_lists_the_known_ones(sample_dir):
    with pytest.raises(ValueError, match="Res256Crop224.*Crop288"):
        load_imagenet(5, sample_dir, "Res299")


def test_first_n_and_seeded_subsets(sample_dir, full):
    x, y, idx = load_imagenet(5, sample_dir)
    assert torch.equal(idx, torch.arange(5)) and torch.equal(x, full[0][:5]) and torch.equal(y, full[1][:5])
    xs, ys, idx_s = load_imagenet(8, sample_dir, seed=3)
    _, _, idx_again = load_imagenet(8, sample_dir, seed=3)
    _, _, idx_other = load_imagenet(8, sample_dir, seed=4)
    assert torch.equal(idx_s, idx_again) and not torch.equal(idx_s, idx_other)
    assert len(torch.unique(idx_s)) == 8 and torch.all(idx_s[1:] > idx_s[:-1])
    assert torch.equal(xs, full[0][idx_s]) and torch.equal(ys, full[1][idx_s])
    with pytest.raises(ValueError, match="only 100 samples"):
        load_imagenet(101, sample_dir)


def _image_folder(root: Path, sample_dir: Path, rows: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    chosen = rows[::20]  # 5 images
    for name, _, wnid in chosen:
        (root / wnid).mkdir(parents=True, exist_ok=True)
        (root / wnid / name).symlink_to(sample_dir / name)
    return chosen


def test_image_folder_with_synset_mapping_in_parent(tmp_path, sample_dir, rows, full):
    chosen = _image_folder(tmp_path / "val", sample_dir, rows)
    shutil.copy(sample_dir / "LOC_synset_mapping.txt", tmp_path)
    x, y, _ = load_imagenet(None, tmp_path / "val")
    assert y.tolist() == [label for _, label, _ in chosen]
    assert torch.equal(x, full[0][::20])
    x2, y2, _ = load_imagenet(None, tmp_path)  # RobustBench's data_dir/val layout
    assert torch.equal(x2, x) and torch.equal(y2, y)


def test_image_folder_with_synset_mapping_inside(tmp_path, sample_dir, rows):
    chosen = _image_folder(tmp_path, sample_dir, rows)
    shutil.copy(sample_dir / "LOC_synset_mapping.txt", tmp_path)
    _, y, _ = load_imagenet(None, tmp_path)
    assert y.tolist() == [label for _, label, _ in chosen]


def test_image_folder_without_mapping_needs_all_1000_wnids(tmp_path, sample_dir, rows):
    chosen = _image_folder(tmp_path, sample_dir, rows)
    with pytest.raises(DataFormatError, match="5 class subfolders.*LOC_synset_mapping.txt"):
        load_imagenet(None, tmp_path)
    mapping = (sample_dir / "LOC_synset_mapping.txt").read_text().splitlines()
    for line in mapping:
        (tmp_path / line.split()[0]).mkdir(exist_ok=True)
    _, y, _ = load_imagenet(None, tmp_path)
    assert y.tolist() == [label for _, label, _ in chosen]


def test_image_folder_with_unknown_wnid(tmp_path, sample_dir, rows):
    _image_folder(tmp_path, sample_dir, rows)
    shutil.copy(sample_dir / "LOC_synset_mapping.txt", tmp_path)
    (tmp_path / "n99999999").mkdir()
    with pytest.raises(DataFormatError, match="n99999999"):
        load_imagenet(None, tmp_path)


def test_cmyk_and_odd_file_names(tmp_path, sample_dir):
    with Image.open(sample_dir / "n01440764_tench.JPEG") as img:
        rgb = img.convert("RGB")
    rgb.convert("CMYK").save(tmp_path / "cmyk.jpg", quality=95)
    name = 'n12057211_yellow_lady\'s_slipper, "quoted".JPEG'
    folder = _flat(tmp_path, sample_dir, [("cmyk.jpg", 0), (name, 986)], source=SMALL)
    x, y, _ = load_imagenet(None, folder, "Crop288")
    assert y.tolist() == [0, 986]  # file-name order
    assert x.shape == (2, 3, 288, 288)
    reference = _to_tensor(rgb)[:, 44:332, 106:394]
    assert float((x[0] - reference).abs().mean()) < 0.03  # JPEG noise only


def test_missing_and_empty_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_imagenet(5, tmp_path / "nowhere")
    with pytest.raises(DataFormatError, match="is empty"):
        load_imagenet(5, tmp_path)
    (tmp_path / "notes.txt").write_text("no images here")
    with pytest.raises(DataFormatError, match="neither labels.csv nor wnid class subfolders"):
        load_imagenet(5, tmp_path)


@pytest.mark.parametrize(
    ("label", "message"),
    [(1000, "class_index 1000 .* outside 0..999"), (-1, "outside 0..999"), ("ten", "not an integer")],
)
def test_bad_class_index(tmp_path, sample_dir, label, message):
    folder = _flat(tmp_path, sample_dir, [(SMALL, 0), (WOLFHOUND, label)])
    with pytest.raises(DataFormatError, match=message):
        load_imagenet(None, folder)


def test_bad_labels_csv_header_and_wnid(tmp_path, sample_dir):
    folder = _flat(tmp_path, sample_dir, [(SMALL, 0)])
    (folder / "labels.csv").write_text(f"file,label\n{SMALL},0\n")
    with pytest.raises(DataFormatError, match="header"):
        load_imagenet(None, folder)
    shutil.copy(sample_dir / "LOC_synset_mapping.txt", folder)
    (folder / "labels.csv").write_text(f"filename,class_index,wnid\n{SMALL},0,n02095889\n")
    with pytest.raises(DataFormatError, match="disagrees with class_index 0, which is n01440764"):
        load_imagenet(None, folder)


def test_listed_file_missing(tmp_path, sample_dir):
    folder = _flat(tmp_path, sample_dir, [(SMALL, 0), (WOLFHOUND, 1)])
    (folder / WOLFHOUND).unlink()
    with pytest.raises(FileNotFoundError, match=WOLFHOUND):
        load_imagenet(None, folder)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_undecodable_image_is_named(tmp_path, sample_dir, damage):
    folder = _flat(tmp_path, sample_dir, [(SMALL, 0), ("zz_broken.JPEG", 1)], source=WOLFHOUND)
    data = (sample_dir / WOLFHOUND).read_bytes()
    (folder / "zz_broken.JPEG").unlink()
    broken = b"not a jpeg at all" * 100 if damage == "garbage" else data[: len(data) // 2]
    (folder / "zz_broken.JPEG").write_bytes(broken)
    with pytest.raises(DataFormatError, match=r"zz_broken\.JPEG"):
        load_imagenet(None, folder)
    x, _, _ = load_imagenet(1, folder)  # the intact image before it still loads
    assert x.shape == (1, 3, 224, 224)
