"""What a new user gets wrong, through every command and public function: one clear error, never a traceback.

The first tests pin the defects found by trying arbibench as a new user would (issue 17); the catalogue below is
one table of bad inputs, each with the words its single error line must contain.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn
from typer.testing import CliRunner

from arbibench import benchmark, clean_accuracy, load_cifar10, load_imagenet
from arbibench.cli import app
from arbibench.data.cifar10 import read_cifar10_arrays
from arbibench.evaluation.runner import evaluate
from arbibench.evaluation.store import ResultStore

runner = CliRunner()
# a device this machine does not have: plain "cuda" on a CPU-only torch, else an index past the visible GPUs
ABSENT_DEVICE = "cuda:99" if torch.cuda.is_available() else "cuda"


@pytest.fixture
def env(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))
    monkeypatch.setenv("COLUMNS", "200")


class Constant(nn.Module):
    """Logits computed by ``fn`` from a tiny linear layer: a model whose output a test chooses."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor] = lambda z: z) -> None:
        super().__init__()
        self.linear = nn.Linear(3 * 32 * 32, 10)
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(self.linear(x.flatten(1)))


def _one_error_line(output: str) -> str:
    """The CLI's answer to a mistake ends with one ``error:`` line (wrapped by the terminal width), no traceback."""
    assert "Traceback" not in output, output
    assert output.count("error:") == 1 and ("\n" + output).count("\nerror:") == 1, output
    return " ".join(output[output.index("error:") :].split())


# --- the defects of issue 17, each pinned by a test that failed before the fix ---


def test_absent_cuda_device_is_one_error_line(env: None, tmp_path: Path) -> None:
    for args in (
        ["eval", "--model", "resnet20_bnn", "--device", ABSENT_DEVICE, "--store", str(tmp_path / "s.db")],
        ["sweep", "--model", "resnet20_bnn", "--device", ABSENT_DEVICE, "--store", str(tmp_path / "s.db")],
        ["protocol", "run", "cifar10", "--quick", "--models", "resnet20_bnn", "--device", ABSENT_DEVICE,
         "--store", str(tmp_path / "s.db"), "--model-info", str(tmp_path / "mi")],
    ):  # fmt: skip
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "is not available" in _one_error_line(result.output)
    with pytest.raises(ValueError, match="is not available"):
        benchmark(Constant(), 4, device=ABSENT_DEVICE, store=tmp_path / "s.db")
    assert not (tmp_path / "mi").exists()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_logits_are_a_broken_model(bad: float, data_dir: Path, tmp_path: Path) -> None:
    everywhere = Constant(lambda z: z * bad)
    with pytest.raises(ValueError, match="NaN or infinite logits"):
        benchmark(everywhere, 10, attacks=["fgsm"], data_dir=data_dir, store=tmp_path / "s.db", progress=False)
    x, y, _ = load_cifar10(10, data_dir=data_dir)
    with pytest.raises(ValueError, match="NaN or infinite logits"):
        clean_accuracy(everywhere, x, y)
    # fine on the 8 images the model check sees, NaN on the 10th: the clean pass catches it
    late = Constant(lambda z: torch.where(torch.arange(len(z))[:, None] == 9, bad, z))
    with ResultStore(tmp_path / "late.db") as db, pytest.raises(ValueError, match="1 of 10 images"):
        evaluate(late, x, y, attacks=["fgsm"], threat=_linf(), store=db, progress=False, batch_size=10)


def test_empty_attack_list_is_an_error(env: None, tmp_path: Path) -> None:
    for attacks in (",", " , ,"):
        result = runner.invoke(app, ["eval", "--model", "resnet20_bnn", "--attacks", attacks, "--store",
                                     str(tmp_path / "s.db")])  # fmt: skip
        assert result.exit_code == 2, result.output
        assert "names no attack" in _one_error_line(result.output)
    with pytest.raises(ValueError, match="no attack to run"):
        benchmark(Constant(), 4, attacks=(), store=tmp_path / "s.db")
    assert not (tmp_path / "s.db").exists()


def test_loaders_return_contiguous_nchw(data_dir: Path, tmp_path: Path) -> None:
    for seed in (None, 3):
        x, _, _ = load_cifar10(16, data_dir=data_dir, seed=seed)
        assert x.shape == (16, 3, 32, 32) and x.is_contiguous() and x.dtype == torch.float32
    arrays, _ = read_cifar10_arrays("test", data_dir)
    assert arrays.shape == (10_000, 3, 32, 32) and arrays.flags.c_contiguous
    folder = tmp_path / "imagenet"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(folder / f"img_{i}.png")
    (folder / "labels.csv").write_text("filename,class_index\nimg_0.png,3\nimg_1.png,7\n")
    xi, yi, _ = load_imagenet(2, folder, preprocessing="Res224")
    assert xi.shape == (2, 3, 224, 224) and xi.is_contiguous() and yi.tolist() == [3, 7]


def test_a_batch_committed_by_another_writer_is_kept_not_inserted_twice(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "s.db") as first, ResultStore(tmp_path / "s.db") as second:
        key = first.register("m", "model", "fgsm", {"x": 1})
        assert second.register("m", "model", "fgsm", {"x": 1}) == key
        assert first.done_batches(key) == second.done_batches(key) == set()  # both start the batch
        first.commit_batch(key, 0, [0, 1], [True, True], [True, False], [0.0, 0.03])
        assert second.commit_batch(key, 0, [0, 1], [True, True], [True, False], [0.0, 0.03]) is False
        assert second.outcomes(key).sample_index.tolist() == [0, 1]
        assert second.done_batches(key) == {0}


def _linf():  # noqa: ANN202 - a ThreatModel
    from arbibench.attacks import get_threat_model

    return get_threat_model("Linf", 8 / 255)


# --- the catalogue: every command and public function with its bad inputs ---

CLI_CASES: list[tuple[str, list[str], str]] = [
    ("eval eps <= 0", ["eval", "-m", "resnet20_bnn", "--eps", "-1"], "eps"),
    ("eval eps not a number", ["eval", "-m", "resnet20_bnn", "--eps", "eight"], "eps"),
    ("eval unknown model", ["eval", "-m", "resnet21_bnn"], "resnet21_bnn"),
    ("eval unknown attack", ["eval", "-m", "resnet20_bnn", "--attacks", "fgsm,pgdd"], "pgdd"),
    ("eval attack twice", ["eval", "-m", "resnet20_bnn", "--attacks", "fgsm,fgsm", "-n", "4"], "twice"),
    ("eval no attack", ["eval", "-m", "resnet20_bnn", "--attacks", ","], "names no attack"),
    ("eval zero images", ["eval", "-m", "resnet20_bnn", "-n", "0"], "n_examples"),
    ("eval more images than the split", ["eval", "-m", "resnet20_bnn", "-n", "20000"], "10000"),
    ("eval batch size 0", ["eval", "-m", "resnet20_bnn", "-n", "4", "--batch-size", "0"], "batch_size"),
    ("eval unknown threat model", ["eval", "-m", "resnet20_bnn", "-t", "L3"], "L3"),
    ("eval unknown dataset", ["eval", "-m", "resnet20_bnn", "--dataset", "mnist"], "mnist"),
    ("eval absent device", ["eval", "-m", "resnet20_bnn", "--device", ABSENT_DEVICE], "is not available"),
    ("eval unknown device", ["eval", "-m", "resnet20_bnn", "--device", "gpu"], "unknown device"),
    ("eval store is a folder", ["eval", "-m", "resnet20_bnn", "-n", "4", "--store", "{tmp}"], "directory"),
    ("eval store not a store", ["eval", "-m", "resnet20_bnn", "-n", "4", "--store", "{junk}"],
     "not an arbibench result store"),
    ("eval store folder missing", ["eval", "-m", "resnet20_bnn", "-n", "4", "--store", "{tmp}/no/s.db"],
     "does not exist"),
    ("eval data folder without CIFAR-10", ["eval", "-m", "resnet20_bnn", "--data-dir", "{tmp}"], "download"),
    ("protocol show unknown", ["protocol", "show", "cifar100"], "cifar100"),
    ("protocol run unknown", ["protocol", "run", "cifar100"], "cifar100"),
    ("protocol run unknown model", ["protocol", "run", "cifar10", "--models", "resnet21_bnn"], "resnet21_bnn"),
    ("protocol run no model", ["protocol", "run", "cifar10", "--models", ","], "no model"),
    ("protocol run absent device", ["protocol", "run", "--models", "resnet20_fp", "--device", ABSENT_DEVICE],
     "is not available"),
    ("sweep no eps", ["sweep", "-m", "resnet20_bnn", "--eps", ","], "at least one"),
    ("sweep eps <= 0", ["sweep", "-m", "resnet20_bnn", "--eps", "0,1/255"], "eps"),
    ("sweep unknown model", ["sweep", "-m", "resnet21_bnn"], "resnet21_bnn"),
    ("sweep unknown attack", ["sweep", "-m", "resnet20_bnn", "--attack", "pgdd", "-n", "4"], "pgdd"),
    ("leaderboard build no cards", ["leaderboard", "build", "--model-info", "{tmp}/none", "--out", "{tmp}/site"],
     "none"),
    ("train unknown method", ["train", "--method", "xnor2"], "xnor2"),
    ("train unknown recipe", ["train", "--method", "bnn", "--recipe", "distill"], "distill"),
    ("zoo list unknown dataset", ["zoo", "list", "--dataset", "mnist"], "mnist"),
    ("import missing file", ["import", "{tmp}/none.pth", "--from", "recu", "--arch", "resnet20", "--name", "x"],
     "none.pth"),
]


@pytest.mark.parametrize(("args", "words"), [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_cli_bad_input_is_one_error_line(args: list[str], words: str, env: None, tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("not a database, just text " * 100)
    args = [a.format(tmp=tmp_path, junk=junk) for a in args]
    if "--store" not in args and (args[0] in ("eval", "sweep") or args[:2] == ["protocol", "run"]):
        args += ["--store", str(tmp_path / "s.db")]
    if args[0] == "protocol" and args[1] == "run":
        args += ["--model-info", str(tmp_path / "mi")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert words.lower() in _one_error_line(result.output).lower()


class Dropout(nn.Module):
    """A model with dropout, handed over in train mode: the runner must evaluate it in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.inner, self.drop = Constant(), nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.inner(x))


class OffDevice(Constant):
    """Keeps a tensor outside its parameters and buffers, on another device (``meta``) than the images."""

    def __init__(self) -> None:
        super().__init__()
        self.offset = torch.zeros(10, device="meta")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.offset


def _evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, store: Path) -> dict[str, str]:
    with ResultStore(store) as db:
        return evaluate(model, x, y, attacks=["fgsm"], threat=_linf(), store=db, progress=False, checks=False)[3]


API_CASES: list[tuple[str, Callable[[dict], object], type[Exception], str]] = [
    ("benchmark eps <= 0", lambda c: benchmark(Constant(), 4, eps=-0.1, store=c["store"]), ValueError, "eps"),
    ("benchmark model not a module", lambda c: benchmark(42, 4, store=c["store"]), TypeError, "nn.Module"),
    ("benchmark unknown zoo name", lambda c: benchmark("resnet21_bnn", 4, store=c["store"]), ValueError,
     "resnet21_bnn"),
    ("benchmark unknown attack", lambda c: benchmark(Constant(), 4, attacks=["pgdd"], store=c["store"]),
     ValueError, "pgdd"),
    ("benchmark no attack", lambda c: benchmark(Constant(), 4, attacks=[], store=c["store"]), ValueError,
     "no attack"),
    ("benchmark absent device", lambda c: benchmark(Constant(), 4, device=ABSENT_DEVICE, store=c["store"]),
     ValueError, "is not available"),
    ("benchmark unknown dataset", lambda c: benchmark(Constant(), 4, dataset="mnist", store=c["store"]),
     ValueError, "mnist"),
    ("benchmark unknown threat model", lambda c: benchmark(Constant(), 4, threat_model="L3", store=c["store"]),
     ValueError, "L3"),
    ("load_cifar10 zero images", lambda c: load_cifar10(0, data_dir=c["data_dir"]), ValueError, "n_examples"),
    ("load_cifar10 unknown split", lambda c: load_cifar10(4, "val", data_dir=c["data_dir"]), ValueError, "val"),
    ("model wrong output shape", lambda c: _evaluate(Constant(lambda z: z[:, 0]), c["x"], c["y"], c["store"]),
     ValueError, "[N, classes]"),
    ("model one logit", lambda c: _evaluate(Constant(lambda z: z[:, :1]), c["x"], c["y"], c["store"]),
     ValueError, "at least 2"),
    ("model NaN outputs", lambda c: _evaluate(Constant(lambda z: z * float("nan")), c["x"], c["y"], c["store"]),
     ValueError, "NaN or infinite"),
    ("model inf outputs", lambda c: _evaluate(Constant(lambda z: z * float("inf")), c["x"], c["y"], c["store"]),
     ValueError, "NaN or infinite"),
    ("model on another device", lambda c: _evaluate(OffDevice(), c["x"], c["y"], c["store"]), ValueError,
     "registered parameter or buffer"),
    ("inputs outside [0, 1]", lambda c: _evaluate(Constant(), c["x"] * 255, c["y"], c["store"]), ValueError,
     "[0, 1]"),
    ("labels out of range", lambda c: _evaluate(Constant(), c["x"], c["y"] + 10, c["store"]), ValueError,
     "labels must lie"),
    ("clean_accuracy absent device", lambda c: clean_accuracy(Constant(), c["x"], c["y"], device=ABSENT_DEVICE),
     ValueError, "is not available"),
    ("store is a folder", lambda c: ResultStore(c["tmp"]), IsADirectoryError, "directory"),
]


@pytest.fixture(scope="module")
def four_images(data_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    x, y, _ = load_cifar10(4, data_dir=data_dir)
    return x, y


@pytest.mark.parametrize(("call", "error", "words"), [c[1:] for c in API_CASES], ids=[c[0] for c in API_CASES])
def test_api_bad_input_is_one_clear_error(
    call: Callable[[dict], object], error: type[Exception], words: str, data_dir: Path, tmp_path: Path,
    four_images: tuple[torch.Tensor, torch.Tensor],
) -> None:
    x, y = four_images
    context = {"store": tmp_path / "s.db", "data_dir": data_dir, "x": x, "y": y, "tmp": tmp_path}
    with pytest.raises(error) as info:
        call(context)
    assert words.lower() in str(info.value).lower()


def test_models_that_are_handled_not_refused(data_dir: Path, tmp_path: Path) -> None:
    """Probability outputs are flagged; a dropout model in train mode is evaluated deterministically in eval mode."""
    x, y, _ = load_cifar10(8, data_dir=data_dir)
    assert "probability_outputs" in _evaluate(Constant(lambda z: z.softmax(1)), x, y, tmp_path / "p.db")
    model = Dropout().train()
    assert _evaluate(model, x, y, tmp_path / "d.db") == {}  # no randomized_model flag: dropout was off
    assert not model.training
