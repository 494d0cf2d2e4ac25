"""The defects a new user hits, found by trying each command as one would: every one a single clear error line (no
traceback, no exit 0 on nothing, no file written where none belongs), found early, and the deployed network's
threads and refusals as README states them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from arbibench.cli import app
from arbibench.deploy import DeployedConv2d, DeployError, deploy
from arbibench.deploy.kernel import kernel_available
from arbibench.models.zoo import load_model
from arbibench.nn.layers import BinaryConv2d

runner = CliRunner()


@pytest.fixture
def env(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))
    monkeypatch.setenv("COLUMNS", "200")


def _one_error_line(output: str) -> str:
    """The CLI's answer to a mistake: one ``error:`` line (wrapped by the terminal width), no traceback."""
    assert "Traceback" not in output, output
    assert output.count("error:") == 1 and ("\n" + output).count("\nerror:") == 1, output
    return " ".join(output[output.index("error:") :].split())


def _refused(args: list[str], *words: str) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    line = _one_error_line(result.output)
    for word in words:
        assert word in line, line
    return line


# --- the leaderboard's date ---


def test_leaderboard_markdown_refuses_a_date_that_is_no_day(tmp_path: Path) -> None:
    out = tmp_path / "LEADERBOARD.md"
    _refused(["leaderboard", "markdown", "--date", "2026-13-45", "--out", str(out)], "no calendar date")
    assert not out.exists()


# --- the deployed network's backends and the deploy check ---


def _no_model_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any model loaded by the deploy check fails the test: the refusal must come first."""
    import arbibench.protocol.deploy_check as deploy_check

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded before the refusal")

    monkeypatch.setattr(deploy_check, "load_model", refuse)


def test_deploy_check_names_a_backend_this_machine_lacks(env: None, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import arbibench.deploy.numba_kernel as numba_kernel

    _no_model_loaded(monkeypatch)
    check = ["protocol", "deploy-check", "cifar10", "--quick", "--models", "resnet20_bnn",
             "--model-info", str(tmp_path / "mi")]  # fmt: skip

    def no_numba() -> None:
        raise numba_kernel.NumbaUnavailableError("numba is not installed (pip install 'arbibench[deploy]')")

    monkeypatch.setattr(numba_kernel, "check_numba", no_numba)
    _refused([*check, "--backend", "numba"], "numba is not installed")
    monkeypatch.setenv("CC", "no-such-compiler")  # and no library compiled before in this cache folder
    monkeypatch.setenv("ARBIBENCH_CACHE", str(tmp_path / "cache"))
    _refused([*check, "--backend", "kernel"], "CC='no-such-compiler' names no compiler")
    assert not (tmp_path / "mi").exists()


def test_deploy_check_refuses_an_unknown_attack_before_any_model(env: None, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _no_model_loaded(monkeypatch)
    _refused(["protocol", "deploy-check", "cifar10", "--quick", "--models", "resnet20_bnn", "--attacks", "nosuch",
              "--model-info", str(tmp_path / "mi")], "['nosuch'] are not in cifar10 (quick)")


def test_a_models_list_that_names_none_is_refused(env: None, tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    store.write_bytes(b"")
    _refused(["protocol", "deploy-check", "cifar10", "--quick", "--models", ",", "--model-info",
              str(tmp_path / "mi")], "--models ',' names no model")
    _refused(["protocol", "progress", "cifar10", "--quick", "--models", " , ", "--store", str(store)],
             "names no model")


# --- the store: read-only where a command only reads, and no empty file after a refusal ---


def test_progress_and_stored_only_report_leave_the_store_as_it_was(env: None, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import arbibench.protocol.run as protocol_run

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was planned although the store holds nothing")

    monkeypatch.setattr(protocol_run, "run_protocol", refuse)
    store = tmp_path / "empty.db"
    store.write_bytes(b"")  # e.g. a store copied before its run began
    _refused(["protocol", "report", "cifar10", "--quick", "--stored-only", "--store", str(store)],
             "empty.db holds no evaluation")
    _refused(["protocol", "progress", "cifar10", "--quick", "--models", "no_such_model", "--store", str(store)],
             "no_such_model")
    assert store.read_bytes() == b"" and sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_a_refused_command_leaves_no_store_behind(env: None, tmp_path: Path) -> None:
    from arbibench import benchmark

    store = tmp_path / "s.db"
    eval_ = ["eval", "--model", "resnet20_bnn", "-n", "8", "--attacks", "fgsm", "--store", str(store)]
    _refused([*eval_, "--batch-size", "0"], "batch_size must be a positive integer")
    _refused([*eval_, "--inference", "bogus"], "inference must be one of")
    _refused(["eval", "--model", "resnet20_fp", "-n", "8", "--attacks", "fgsm", "--store", str(store),
              "--inference", "deployed"], "resnet20_fp cannot be deployed")
    _refused(["protocol", "run", "cifar10", "--quick", "--models", "resnet20_fp", "--inference", "deployed",
              "--store", str(store), "--model-info", str(tmp_path / "mi")], "resnet20_fp cannot be deployed")
    with pytest.raises(ValueError, match="batch_size"):
        benchmark("resnet20_bnn", 8, attacks=["fgsm"], batch_size=0, store=store, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_eps_star_attack_names_are_checked_before_the_evaluation(env: None, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import arbibench.evaluation.benchmark as benchmark_module

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the images were loaded before the refusal")

    monkeypatch.setattr(benchmark_module, "load_dataset", refuse)
    _refused(["eval", "--model", "resnet20_bnn", "-n", "8", "--attacks", "fgsm", "--eps-star", "nope", "--store",
              str(tmp_path / "s.db")], "--eps-star", "nope")
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [("--eps-star-rounds", "0", "--eps-star-rounds"), ("--eps-star-draws", "-1", "--eps-star-draws"),
     ("--eps-star-floor", "nope", "--eps-star-floor"), ("--eps-star-floor", "20/255", "--eps-star-floor"),
     ("--eps-star-max", "0.5/255", "--eps-star-floor")],
    ids=["no-rounds", "negative-draws", "unreadable-floor", "floor-above-max", "max-below-floor"],
)
def test_eps_star_settings_are_checked_before_the_evaluation(env: None, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch, option: str, value: str,
                                                             named: str) -> None:
    """A bad eps* setting used to end the command only after the whole evaluation had run (the search checked its
    settings when it started); now it is one error naming the option, before any image is read or store written."""
    import arbibench.evaluation.benchmark as benchmark_module

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the images were loaded before the refusal")

    monkeypatch.setattr(benchmark_module, "load_dataset", refuse)
    args = ["eval", "--model", "resnet20_bnn", "-n", "8", "--attacks", "fgsm", "--eps-star", "fgsm",
            "--eps-star-max", "16/255", "--store", str(tmp_path / "s.db")]
    if option == "--eps-star-max":
        args[args.index("--eps-star-max") + 1] = value
        args += ["--eps-star-floor", "1/255"]
    else:
        args += [option, value]
    _refused(args, named)
    assert not (tmp_path / "s.db").exists()


def test_eval_says_which_network_answered(env: None, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["eval", "--model", "resnet20_bnn", "-n", "8", "--attacks", "fgsm", "--no-checks",
                                 "--inference", "deployed", "--store", str(tmp_path / "s.db"), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "deployed inference" in " ".join(result.output.split())
    assert json.loads(out.read_text())["inference"] == "deployed"


# --- deploy(): the kernel's threads follow torch's, and a layer it cannot run is refused by name ---

needs_kernel = pytest.mark.skipif(not kernel_available()[0], reason=f"no C kernel here: {kernel_available()[1]}")


@needs_kernel
def test_deployed_threads_follow_set_num_threads_at_each_forward(images: torch.Tensor,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import arbibench.deploy.conv_kernels as conv_kernels

    seen: list[int] = []
    real = conv_kernels.kernel_conv

    def spy(*args: Any, **kwargs: Any) -> torch.Tensor:
        seen.append(args[2])  # kernel_conv(d, spec, threads, ...)
        return real(*args, **kwargs)

    monkeypatch.setattr(conv_kernels, "kernel_conv", spy)
    model = load_model("resnet20_bnn")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        net = deploy(model, backend="kernel")
        torch.set_num_threads(1)  # after deploying: README says it sets the kernel's threads
        want = net(images)
        assert seen and set(seen) == {1}
        seen.clear()
        torch.set_num_threads(2)
        assert torch.equal(net(images), want) and set(seen) == {2}
        seen.clear()
        deploy(model, backend="kernel", threads=3)(images)  # threads given: kept whatever torch's are
        assert set(seen) == {3}
    finally:
        torch.set_num_threads(before)


class _Wide(nn.Module):
    """A 3x3 binary convolution over 3,000 channels: 423 words per packed patch, past the C kernel's 256."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 3000, 1)
        self.wide = BinaryConv2d(3000, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.wide(self.stem(x))


class _Broadcast(nn.Module):
    """A residual that broadcasts: each channel's spatial mean added after the folded BatchNorm, then hardtanh."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.conv = BinaryConv2d(8, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.Hardtanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        return self.act(self.bn(self.conv(h)) + h.mean((2, 3), keepdim=True))


@needs_kernel
def test_deploy_refuses_a_layer_over_the_kernels_word_limit_by_name(images: torch.Tensor) -> None:
    torch.manual_seed(0)
    model = _Wide().eval()
    with pytest.raises(DeployError, match=r"layer wide: a 3x3 kernel over 3000 input channels packs into 423 words"):
        deploy(model, backend="kernel")
    net = deploy(model, backend="emulator")  # the backend the error names runs it
    assert net(images[:1]).shape == (1, 4, 32, 32)


@needs_kernel
def test_a_residual_that_broadcasts_runs_on_the_kernel_as_on_the_emulator(images: torch.Tensor) -> None:
    torch.manual_seed(0)
    model = _Broadcast().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    kernel, emulator = deploy(model, backend="kernel"), deploy(model, backend="emulator")
    assert any(isinstance(m, DeployedConv2d) and m.glue is not None for m in kernel.modules())  # the add was fused
    assert torch.equal(kernel(images), emulator(images))
