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


# --- a second new user: every mistake refused before any work, not after it ---


def _no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any model or image loaded fails the test: the refusal must come before them."""
    import arbibench.data.datasets as datasets
    import arbibench.evaluation.benchmark as benchmark_module
    import arbibench.models.zoo as zoo
    import arbibench.protocol.grid_check as grid_check
    import arbibench.protocol.run as protocol_run

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("work began before the refusal")

    for module, name in ((benchmark_module, "load_dataset"), (benchmark_module, "load_model"), (zoo, "load_model"),
                         (datasets, "load_dataset"), (grid_check, "run_grid_check"), (protocol_run, "run_protocol")):
        monkeypatch.setattr(module, name, refuse)


def test_an_output_path_that_is_a_folder_is_refused_before_any_work(env: None, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``--json /tmp`` used to crash with a traceback after all the work, advising to free disk space."""
    _no_work(monkeypatch)
    store, folder = tmp_path / "s.db", tmp_path / "out"
    folder.mkdir()
    _refused(["eval", "-m", "resnet20_bnn", "-n", "5", "--attacks", "fgsm", "--store", str(store), "--json",
              str(folder)], "--json", "is a folder, not a file")
    _refused(["verify", "-m", "resnet20_bnn", "-n", "2", "--json", str(folder)], "--json", "is a folder")
    _refused(["protocol", "grid-check", "--models", "resnet20_bnn", "-n", "10", "--eps", "2/255", "--attack", "pgd",
              "--json", str(folder)], "--json", "is a folder")
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    _refused(["eval", "-m", "resnet20_bnn", "-n", "5", "--attacks", "fgsm", "--store", str(store), "--model-info",
              str(a_file)], "--model-info", "is a file, not a folder")
    _refused(["protocol", "grid-check", "--models", "resnet20_bnn", "--json", str(a_file / "sub" / "g.json")],
             "--json", "is a file, not a folder")
    demo = tmp_path / "demo.db"
    demo.write_bytes(b"")
    for option in ("--json", "--markdown"):
        _refused(["protocol", "report", "cifar10", "--demo", "--store", str(demo), "--stored-only", option,
                  str(folder)], option, "is a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "demo.db", "out"]


@pytest.mark.parametrize(
    ("args", "words"),
    [(["--attacks", "fgsm,cw_l2"], ("attack 'cw_l2' supports the L2 threat model, not Linf",)),
     (["--attacks", "fgsm,rays", "-t", "L2", "--eps", "0.5"], ("attack 'rays' supports the Linf", "not L2")),
     (["--attacks", "transfer(attack=cw_l2)"], ("'transfer' runs 'cw_l2'", "not Linf")),
     (["--attacks", "fgsm", "--eps-star", "cw_l2"], ("--eps-star", "'cw_l2' supports the L2"))],
    ids=["second-attack", "black-box-L2", "transfer-inner", "eps-star"],
)
def test_an_attack_of_another_threat_model_is_refused_before_the_attacks_ahead_of_it(
        env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], words: tuple[str, ...]) -> None:
    """``--attacks fgsm,cw_l2`` used to run and store the clean pass and fgsm, then refuse cw_l2 at its turn."""
    _no_work(monkeypatch)
    _refused(["eval", "-m", "resnet20_bnn", "-n", "5", "--no-checks", "--store", str(tmp_path / "s.db"), *args],
             *words)
    assert not (tmp_path / "s.db").exists()


def test_sweep_checks_its_attack_and_its_card_before_the_sweep(env: None, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _no_work(monkeypatch)
    store, info = tmp_path / "s.db", tmp_path / "emptymi"
    info.mkdir()
    sweep = ["sweep", "-m", "resnet20_bnn", "-n", "8", "--eps", "1/255", "--store", str(store)]
    _refused([*sweep, "--attack", "cw_l2"], "'cw_l2' supports the L2 threat model, not Linf")
    _refused([*sweep, "--attack", "pgd", "--model-info", str(info)], "no card", "resnet20_bnn.json")
    _refused(["protocol", "grid-check", "--models", "resnet20_bnn", "-n", "4", "--eps", "2/255", "--attack", "cw_l2"],
             "'cw_l2' supports the L2 threat model, not Linf")
    assert not store.exists()


def test_a_data_dir_that_does_not_exist_is_named_not_created(env: None, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _no_work(monkeypatch)
    missing = tmp_path / "nonexistent"
    _refused(["eval", "-m", "resnet20_bnn", "-n", "10", "--attacks", "fgsm", "--store", str(tmp_path / "s.db"),
              "--data-dir", str(missing)], f"--data-dir {missing} does not exist")
    _refused(["sweep", "-m", "resnet20_bnn", "-n", "8", "--eps", "1/255", "--attack", "fgsm", "--store",
              str(tmp_path / "s.db"), "--data-dir", str(missing)], "--data-dir", "does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_stored_only_report_downloads_nothing(data_dir: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """--stored-only runs no attack yet reads the test images (the model and masking checks use them): where the data
    folder holds none, one error says so instead of starting the CIFAR-10 download."""
    from arbibench import benchmark

    store = tmp_path / "s.db"
    benchmark("resnet20_bnn", 2, attacks=["fgsm"], data_dir=data_dir, store=store, progress=False, checks=False)
    empty = tmp_path / "no_data"
    empty.mkdir()
    monkeypatch.setenv("ARBIBENCH_DATA", str(empty))
    _refused(["protocol", "report", "cifar10", "--demo", "--models", "resnet20_bnn", "--store", str(store),
              "--stored-only"], "--stored-only reads the CIFAR-10 test images", "downloads nothing", str(empty))
    assert not any(empty.iterdir())


@pytest.mark.parametrize(
    ("args", "words"),
    [(["--subset-seed", "-3"], ("--subset-seed", "non-negative")),
     (["--eps-star-max", "4/255"], ("--eps-star-max apply to --eps-star",)),
     (["--eps-star-rounds", "5", "--eps-star-draws", "0"], ("--eps-star-rounds and --eps-star-draws apply",))],
    ids=["negative-subset-seed", "eps-star-max-alone", "eps-star-rounds-alone"],
)
def test_eval_options_name_themselves_and_need_what_they_set(env: None, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch, args: list[str],
                                                             words: tuple[str, ...]) -> None:
    """An eps* setting without --eps-star is refused as --workers without --backend is, not silently ignored."""
    _no_work(monkeypatch)
    _refused(["eval", "-m", "resnet20_bnn", "-n", "5", "--attacks", "fgsm", "--store", str(tmp_path / "s.db"), *args],
             *words)
    assert not (tmp_path / "s.db").exists()


# --- a third new user: outputs, data folders and options that the command ignored or checked too late ---

ROOT = Path(__file__).resolve().parents[1]


def test_a_table_written_to_a_folder_is_one_error_line(tmp_path: Path) -> None:
    """``leaderboard table --out DIR`` and ``zoo table --out DIR`` used to end in a traceback (exit 1)."""
    folder = tmp_path / "out"
    folder.mkdir()
    _refused(["leaderboard", "table", "--model-info", str(ROOT / "model_info"), "--out", str(folder)], "--out",
             "is a folder, not a file")
    _refused(["zoo", "table", "--out", str(folder)], "--out", "is a folder, not a file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and not any(folder.iterdir())


def test_zoo_curves_refused_leaves_no_figure_behind(tmp_path: Path) -> None:
    """``zoo curves --out DIR`` used to write DIR.png, then refuse the page."""
    folder = tmp_path / "page"
    folder.mkdir()
    _refused(["zoo", "curves", "--out", str(folder)], "is a folder, not a file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page"]


@pytest.mark.parametrize("args", [
    ["leaderboard", "table", "--out"],
    ["leaderboard", "markdown", "--out"],
    ["zoo", "table", "--out"],
    ["zoo", "curves", "--out"],
    ["eval", "--model", "resnet20_bnn", "--json"],
    ["verify", "--model", "resnet20_bnn", "--json"],
    ["protocol", "report", "cifar10", "--json"],
    ["protocol", "report", "cifar10", "--markdown"],
    ["protocol", "grid-check", "cifar10", "--json"],
], ids=lambda args: " ".join(args))
def test_a_file_option_that_names_a_missing_folder_is_refused(args: list[str], tmp_path: Path) -> None:
    """``leaderboard table --out tables/`` (no such folder yet) used to write a file named ``tables``: the trailing
    slash that said "a folder" was lost once the text became a Path."""
    result = runner.invoke(app, [*args, f"{tmp_path / 'tables'}/"], env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and f"'{args[-1]}'" in result.output, result.output
    assert "so it names a folder" in " ".join(result.output.replace("│", " ").split()), result.output
    assert list(tmp_path.iterdir()) == []


def test_deploy_check_checks_its_card_folder_and_data_folder_before_any_model(
        env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file given as --model-info used to end the command with a traceback after the first model's whole check."""
    import arbibench.protocol.deploy_check as deploy_check

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the check ran before the refusal")

    monkeypatch.setattr(deploy_check, "run_deploy_check", refuse)
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    check = ["protocol", "deploy-check", "cifar10", "--quick", "--models", "resnet20_bnn", "--attacks", "fgsm",
             "--backend", "emulator"]  # fmt: skip
    _refused([*check, "--model-info", str(a_file)], "--model-info", "is a file, not a folder")
    _refused([*check, "--model-info", str(tmp_path / "mi"), "--data-dir", str(tmp_path / "nodata")],
             "--data-dir", "does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_a_misspelt_data_dir_is_named_by_every_command_that_reads_data(env: None, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """train, recalibrate, import and corruptions generate used to create the folder and start the download."""
    import arbibench.train as training

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("work began before the refusal")

    monkeypatch.setattr(training, "train", refuse)
    monkeypatch.setattr(training, "recalibrate_checkpoint", refuse)
    missing = tmp_path / "nodata"
    checkpoint = tmp_path / "model.pth"
    checkpoint.write_bytes(b"")
    for args in (
        ["train", "--method", "bnn", "--recipe", "kd", "--out", str(tmp_path / "runs")],
        ["recalibrate", "resnet20_bnn", "--out", str(tmp_path / "recal")],
        ["import", str(checkpoint), "--from", "recu", "--arch", "resnet20", "--name", "mine", "--model-dir",
         str(tmp_path / "models")],
        ["corruptions", "generate", "-n", "4", "--corruptions", "fog", "--out", str(tmp_path / "c" / "CIFAR-10-C")],
    ):  # fmt: skip
        _refused([*args, "--data-dir", str(missing)], f"--data-dir {missing} does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pth"]


@pytest.mark.parametrize(
    ("args", "words"),
    [(["--inference", "deployed"], ("--inference deployed", "cifar10-c")),
     (["--backend", "processes"], ("--backend processes", "cifar10-c"))],
    ids=["inference", "backend"],
)
def test_the_corruption_protocol_refuses_options_it_would_ignore(env: None, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch, args: list[str],
                                                                  words: tuple[str, ...]) -> None:
    """``protocol run cifar10-c --inference deployed`` used to measure the float model and say nothing."""
    import arbibench.protocol.corruptions as corruptions

    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("the corruption protocol ran")

    monkeypatch.setattr(corruptions, "run_corruption_protocol", refuse)
    _refused(["protocol", "run", "cifar10-c", "--quick", "--models", "resnet20_bnn", "--store", str(tmp_path / "s.db"),
              "--model-info", str(tmp_path / "mi"), *args], *words)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_only_attacks_and_corruptions_refuse_an_empty_item(env: None, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``--only-attacks fgsm,`` used to run fgsm and drop the empty item; ``--corruptions fog,`` likewise."""
    _no_work(monkeypatch)
    _refused(["protocol", "run", "cifar10", "--quick", "--models", "resnet20_bnn", "--store", str(tmp_path / "s.db"),
              "--model-info", str(tmp_path / "mi"), "--only-attacks", "fgsm,"], "--only-attacks", "empty item")
    _refused(["corruptions", "generate", "-n", "4", "--corruptions", "fog,", "--out",
              str(tmp_path / "c" / "CIFAR-10-C")], "--corruptions", "empty item")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_every_bracket_in_the_help_is_shown() -> None:
    """Rich read ``[certified, attacked]`` in `protocol run --help` as markup and printed "the bracket ."."""
    import re

    from arbibench.cli import COMMANDS, load_command

    def walk(command: Any, path: list[str]) -> Any:
        yield command, path
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    missing = []
    for name in COMMANDS:
        for command, path in walk(load_command(name), [name]):
            shown = " ".join(runner.invoke(app, [*path, "--help"], env={"COLUMNS": "400"}).output.split())
            for text in [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]:
                missing += [(path, m) for m in re.findall(r"\[[^\]]*\]", text) if m not in shown]
    assert missing == []


def test_api_names_a_bad_batch_size_or_seed(data_dir: Path) -> None:
    from arbibench import clean_accuracy, load_cifar10

    x, y, _ = load_cifar10(4, data_dir=data_dir)
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        clean_accuracy(load_model("resnet20_bnn"), x, y, batch_size=0)
    with pytest.raises(ValueError, match="seed must be a non-negative integer, got -1"):
        load_cifar10(4, data_dir=data_dir, seed=-1)


def test_a_module_s_card_needs_its_name_and_a_seed_is_not_negative(data_dir: Path, tmp_path: Path) -> None:
    # a module handed to benchmark(..., to_disk=True) used to get a card named after its class (ResNet.json)
    from arbibench import benchmark

    kwargs: dict[str, Any] = {"n_examples": 4, "attacks": ("fgsm",), "data_dir": data_dir, "progress": False,
                              "checks": False, "store": tmp_path / "s.db", "model_info": tmp_path / "mi"}
    with pytest.raises(ValueError, match="(?s)class is 'ResNet'.*pass model_name='my_bnn'"):
        benchmark(load_model("resnet20_bnn"), to_disk=True, **kwargs)
    with pytest.raises(ValueError, match=r"seed \(--seed\) must be a non-negative integer, got -1"):
        benchmark("resnet20_bnn", seed=-1, **kwargs)
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "mi").exists()  # refused before any work
    store = tmp_path / "e.db"
    _refused(["eval", "-m", "resnet20_bnn", "-n", "4", "--attacks", "fgsm", "--seed", "-1", "--store", str(store)],
             "--seed", "-1")
    assert not store.exists()


def test_grid_check_and_verify_name_the_one_bad_option(env: None, tmp_path: Path) -> None:
    _refused(["protocol", "grid-check", "--models", "resnet20_bnn", "--eps", "0"], "--eps:", "> 0")
    line = _refused(["verify", "-m", "resnet20_bnn", "-n", "1", "--steps", "-1"], "--steps", "got -1")
    assert "--nodes" not in line and "--corners" not in line
    _refused(["verify", "-m", "resnet20_bnn", "-n", "1", "--nodes", "0"], "--nodes", ">= 1", "got 0")


def test_recalibrate_checks_its_output_folder_before_any_pass(env: None, tmp_path: Path) -> None:
    # `recalibrate NAME --out PATH` where PATH/NAME is a file: refused before the accuracy passes and re-estimation
    (tmp_path / "resnet20_bnn").write_text("not a folder")
    _refused(["recalibrate", "resnet20_bnn", "--out", str(tmp_path)], "--out", "is a file, not a folder")


def test_quick_is_one_plain_flag_on_every_protocol_command() -> None:
    for command in ("run", "deploy-check", "progress", "report"):
        shown = runner.invoke(app, ["protocol", command, "--help"], env={"COLUMNS": "200"}).output
        assert "--quick" in shown and "--no-quick" not in shown, (command, shown)
