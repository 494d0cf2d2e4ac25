"""``arbibench import``: the official file formats it reads, one clear error per bad input with nothing written, and
the imported model used by name (load_model, eval, zoo list, protocol) with its card's sha256 checked.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_import_equivalence import (
    cifar_resnet20_forward,
    cifar_resnet20_state,
    no_extras,
    recu_conv,
    recu_extras,
    save_official,
    shortcut_avgpool_pad,
)
from typer.testing import CliRunner

from arbibench.cli import app
from arbibench.evaluation.model_import import import_checkpoint
from arbibench.models.importers import PickleRefusedError, read_torch_checkpoint
from arbibench.models.zoo import ChecksumError, get_entry, load_model, zoo_rows

N = 16  # images of the clean-accuracy check: enough to run it, few enough to stay fast
runner = CliRunner()


@pytest.fixture(scope="module")
def recu_state() -> dict[str, torch.Tensor]:
    return cifar_resnet20_state(recu_extras)


@pytest.fixture
def recu_file(tmp_path, recu_state) -> Path:
    path = tmp_path / "model_best.pth.tar"
    save_official(recu_state, path)
    return path


def _import(path: Path, folder: Path, data_dir: Path, source: str = "recu", name: str = "recu_r20", **kw) -> Path:
    return import_checkpoint(source, path, "resnet20", name, folder, trust_pickle=True, n_examples=N,
                             data_dir=data_dir, **kw)


def _nothing_written(folder: Path) -> bool:
    return not folder.exists() or not any(folder.iterdir())


# -- containers the papers' code writes -----------------------------------------------------------------------------


def test_containers_prefixes_and_suffixes_all_read_the_same(tmp_path, recu_state):
    expected = recu_state.keys()
    plain = tmp_path / "weights.pth"
    torch.save(recu_state, plain)  # a bare state dict, no module. prefix
    nested_model = tmp_path / "checkpoint.pt"
    torch.save({"model": {"module." + k: v for k, v in recu_state.items()}, "epoch": 3}, nested_model)
    legacy = tmp_path / "model.th"  # IR-Net's name; PyTorch < 1.6's non-zip format
    torch.save({"state_dict": recu_state, "best_prec1": 86.5}, legacy, _use_new_zipfile_serialization=False)
    recu_like = tmp_path / "model_best.pth.tar"
    torch.save({"model": "resnet20_1w1a", "state_dict": {"module." + k: v for k, v in recu_state.items()}}, recu_like)
    for path in (plain, nested_model, legacy, recu_like):
        state = read_torch_checkpoint(path, trust_pickle=True)
        assert state.keys() == expected, path.name
        assert all(torch.equal(state[k], recu_state[k]) for k in expected), path.name


def test_a_file_saved_on_a_gpu_loads_on_the_cpu(tmp_path, recu_state, monkeypatch):
    path = tmp_path / "gpu.pth.tar"
    with monkeypatch.context() as m:  # tag every storage as CUDA, as a GPU training run saves it
        m.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        torch.save({"state_dict": {"module." + k: v for k, v in recu_state.items()}}, path)
    assert b"cuda:0" in path.read_bytes()
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(path, weights_only=True)  # what a load without map_location does on this machine
    state = read_torch_checkpoint(path, trust_pickle=True)
    assert all(v.device.type == "cpu" for v in state.values())
    assert torch.equal(state["linear.weight"], recu_state["linear.weight"])


# -- bad input: one clear error each, nothing written ---------------------------------------------------------------


def test_a_pickle_is_never_read_without_the_flag(recu_file, tmp_path, data_dir, monkeypatch):
    def no_load(*args, **kwargs):
        raise AssertionError("torch.load was called without --trust-pickle")

    monkeypatch.setattr(torch, "load", no_load)
    folder = tmp_path / "models"
    with pytest.raises(PickleRefusedError, match="--trust-pickle.*weights_only=True"):
        import_checkpoint("recu", recu_file, "resnet20", "recu_r20", folder, n_examples=N, data_dir=data_dir)
    assert _nothing_written(folder)
    result = runner.invoke(app, ["import", str(recu_file), "--from", "recu", "--arch", "resnet20", "--name", "x",
                                 "--model-dir", str(folder)])
    assert result.exit_code == 2 and "--trust-pickle" in result.output and "Traceback" not in result.output
    assert _nothing_written(folder)


def test_unknown_source_and_architecture(recu_file, tmp_path, data_dir):
    folder = tmp_path / "models"
    with pytest.raises(ValueError, match="unknown source 'xnornet'; supported: recu, rbnn, siman, biper, irnet"):
        _import(recu_file, folder, data_dir, source="xnornet")
    with pytest.raises(ValueError, match="source 'recu' has no architecture 'resnet56'; it publishes: resnet20"):
        import_checkpoint("recu", recu_file, "resnet56", "x", folder, trust_pickle=True)
    assert _nothing_written(folder)


def test_a_file_of_another_method_or_architecture_lists_the_keys(recu_file, tmp_path, data_dir, recu_state):
    folder = tmp_path / "models"
    with pytest.raises(ValueError, match=r"layer1\.0\.conv1 has no R1, R2, rotate: this is not an RBNN state dict"):
        _import(recu_file, folder, data_dir, source="rbnn")  # a ReCU file has no rotations
    irnet_file = tmp_path / "model.th"
    torch.save({"state_dict": cifar_resnet20_state(no_extras)}, irnet_file)
    with pytest.raises(ValueError, match=r"not a recu resnet20_1w1a state dict.*missing: layers\.0\.conv1\.kernel_q"):
        _import(irnet_file, folder, data_dir)  # an IR-Net file has no ReCU scales
    with pytest.raises(ValueError, match=r"unexpected: layer1\.0\.conv1\.alpha"):
        _import(recu_file, folder, data_dir, source="irnet")  # and a ReCU file has more than IR-Net's
    wide = dict(recu_state, **{"linear.weight": torch.zeros(100, 64), "linear.bias": torch.zeros(100)})
    cifar100 = tmp_path / "cifar100.pth.tar"
    save_official(wide, cifar100)
    mismatch = r"shape mismatch: linear\.weight \(file \(100, 64\), resnet20_1w1a \(10, 64\)\)"
    with pytest.raises(ValueError, match=mismatch):
        _import(cifar100, folder, data_dir)
    assert _nothing_written(folder)


def test_truncated_file_and_objects_the_safe_unpickler_refuses(recu_file, tmp_path, data_dir, recu_state):
    folder = tmp_path / "models"
    data = recu_file.read_bytes()
    truncated = tmp_path / "truncated.pth.tar"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated or not a torch.save file"):
        _import(truncated, folder, data_dir)
    legacy = tmp_path / "legacy.pth"
    torch.save(recu_state, legacy, _use_new_zipfile_serialization=False)
    truncated_legacy = tmp_path / "truncated_legacy.pth"
    truncated_legacy.write_bytes(legacy.read_bytes()[:5000])
    with pytest.raises(ValueError, match="truncated or not a torch.save file"):
        _import(truncated_legacy, folder, data_dir)
    with_args = tmp_path / "with_args.pth.tar"
    torch.save({"state_dict": recu_state, "args": argparse.Namespace(lr=0.1)}, with_args)
    with pytest.raises(ValueError, match="objects other than tensors.*torch.save\\(checkpoint\\['state_dict'\\]"):
        _import(with_args, folder, data_dir)
    no_state = tmp_path / "no_state.pth"
    torch.save({"epoch": 3, "best_prec1": 1.0}, no_state)
    with pytest.raises(ValueError, match="not a state dict"):
        _import(no_state, folder, data_dir)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        _import(tmp_path / "absent.pth", folder, data_dir)
    assert _nothing_written(folder)


def test_a_file_that_is_no_checkpoint_is_one_line_naming_it(tmp_path, data_dir, wide):
    folder = tmp_path / "models"
    junk = tmp_path / "junk.pth"
    junk.write_text("garbage\n")
    with pytest.raises(ValueError) as e:
        _import(junk, folder, data_dir)
    assert str(e.value) == f"{junk} is not a readable recu checkpoint: it is truncated or not a torch.save file"
    result = runner.invoke(app, ["import", str(junk), "--from", "recu", "--arch", "resnet20", "--name", "x1",
                                 "--model-dir", str(folder), "--trust-pickle"])
    assert result.exit_code == 2
    # torch's own advice (weights_only=False, "please file an issue") is not for an arbibench user
    assert result.output.strip().splitlines() == [f"error: {e.value}"]
    assert _nothing_written(folder)


@pytest.mark.parametrize("expect_acc", ["nan", "inf", "150", "-5"])
def test_expect_acc_is_a_percentage_checked_before_the_conversion(tmp_path, data_dir, expect_acc):
    folder = tmp_path / "models"
    never_read = tmp_path / "absent.pth"  # refused before the file is even looked at
    with pytest.raises(ValueError, match=r"--expect-acc .*in percent, a number from 0 to 100"):
        _import(never_read, folder, data_dir, expect_acc=float(expect_acc))
    assert _nothing_written(folder)


def test_cli_expect_acc_nan_writes_neither_file(recu_file, tmp_path, data_dir):
    folder = tmp_path / "models"
    args = ["import", str(recu_file), "--from", "recu", "--arch", "resnet20", "--name", "fake3", "--trust-pickle",
            "--model-dir", str(folder), "-n", str(N), "--data-dir", str(data_dir)]
    result = runner.invoke(app, [*args, "--expect-acc", "nan"])
    assert result.exit_code == 2 and "--expect-acc" in result.output and "JSON" not in result.output, result.output
    assert _nothing_written(folder)  # once, fake3.safetensors stayed without fake3.json and blocked the name
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output


def test_a_card_that_cannot_be_written_takes_its_weights_with_it(recu_file, tmp_path, data_dir):
    folder = tmp_path / "models"
    (folder / "recu_r20.json").mkdir(parents=True)  # a folder where the card goes: the second write fails
    with pytest.raises(OSError):
        _import(recu_file, folder, data_dir, overwrite=True)
    assert not (folder / "recu_r20.safetensors").exists()  # no weights without their card
    assert [p.name for p in folder.iterdir()] == ["recu_r20.json"]  # and no temporary


def test_weights_without_a_card_are_named_as_a_failed_imports_leftover(recu_file, tmp_path, data_dir):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "recu_r20.safetensors").write_bytes(b"")  # what an import that failed on its card once left
    with pytest.raises(ValueError, match=r"holds recu_r20\.safetensors \(weights without a card.*--overwrite"):
        _import(recu_file, folder, data_dir)


def test_name_clash_option_and_accuracy_errors(recu_file, tmp_path, data_dir):
    folder = tmp_path / "models"
    with pytest.raises(ValueError, match="'resnet20_bnn' is a zoo model's name"):
        _import(recu_file, folder, data_dir, name="resnet20_bnn")
    with pytest.raises(ValueError, match="model name '../x'"):
        _import(recu_file, folder, data_dir, name="../x")
    with pytest.raises(ValueError, match="needs --freq.*--freq 20.*--freq 30"):
        _import(recu_file, folder, data_dir, source="biper")
    with pytest.raises(ValueError, match="takes no option freq"):
        _import(recu_file, folder, data_dir, options={"freq": 20.0})
    # random weights score about 10%: the paper's 87.5% says the conversion or the file is wrong
    with pytest.raises(ValueError, match=r"points from the expected 87\.5%: the conversion or the file is wrong"):
        _import(recu_file, folder, data_dir, expect_acc=87.5)
    assert _nothing_written(folder)
    card = json.loads(_import(recu_file, folder, data_dir).read_text())
    with pytest.raises(ValueError, match="already holds recu_r20.safetensors, recu_r20.json.*--overwrite"):
        _import(recu_file, folder, data_dir)
    within = 100 * card["clean_acc"] + 1.5
    assert json.loads(_import(recu_file, folder, data_dir, expect_acc=within, overwrite=True).read_text())[
        "expected_acc"] == within
    assert sorted(p.name for p in folder.iterdir()) == ["recu_r20.json", "recu_r20.safetensors"]  # no .tmp left


# -- the card and the imported model by name ------------------------------------------------------------------------


def test_card_records_source_keys_and_accuracy(recu_file, tmp_path, data_dir, recu_state):
    folder = tmp_path / "models"
    card = json.loads(_import(recu_file, folder, data_dir).read_text())
    assert card["source"] == "recu" and card["method"] == "recu" and card["architecture"] == "resnet20"
    assert card["official_model"] == "resnet20_1w1a" and card["paper_acc"] == 87.5
    assert card["source_file"] == "model_best.pth.tar" and len(card["source_sha256"]) == 64
    assert card["normalization"] == {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    assert card["clean_acc_n_examples"] == N and 0.0 <= card["clean_acc"] <= 1.0
    assert "torch.sign" in card["sign_convention"]
    assert set(card["keys"]) == set(recu_state)  # every official key is accounted for
    assert card["keys"]["layer2.0.conv1.alpha"].startswith("-> layers.3.conv1.kernel_quantizer.alpha")
    assert card["keys"]["layer3.2.conv2.tau"].startswith("dropped: clamp threshold tau = 0.99")
    assert card["keys"]["bn2.running_var"] == "-> classifier_bn.running_var"
    stored = load_file(str(folder / "recu_r20.safetensors"))
    assert torch.equal(stored["normalize.std"].flatten(), torch.tensor([0.229, 0.224, 0.225]))


def test_imported_model_loads_by_name_with_its_card_sha256(recu_file, tmp_path, data_dir, recu_state, monkeypatch):
    folder = tmp_path / "models"
    _import(recu_file, folder, data_dir)
    entry = get_entry("recu_r20", "cifar10", folder)
    assert (entry.source, entry.arch, entry.method, entry.shipped) == ("recu", "resnet20", "recu", False)
    model = load_model("recu_r20", folder)
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        official = cifar_resnet20_forward(recu_state, x, recu_conv, shortcut_avgpool_pad, per_conv=True)
        assert torch.allclose(model(x), official, rtol=1e-4, atol=1e-5)
    monkeypatch.setenv("ARBIBENCH_MODELS", str(folder))  # the default user folder
    assert load_model("recu_r20") is not None
    with pytest.raises(ValueError, match="known models: .*recu_r20"):
        load_model("recu_r2", folder)
    tensors = load_file(str(folder / "recu_r20.safetensors"))
    tensors["fc.bias"] = tensors["fc.bias"] + 1
    save_file(tensors, str(folder / "recu_r20.safetensors"))
    with pytest.raises(ChecksumError, match="recu_r20.json.*arbibench import --from recu"):
        load_model("recu_r20", folder)


@pytest.fixture
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "220")  # no truncated cells


def test_cli_import_then_zoo_list_and_eval(recu_file, tmp_path, data_dir, wide):
    folder = tmp_path / "models"
    result = runner.invoke(app, ["import", str(recu_file), "--from", "recu", "--arch", "resnet20", "--name",
                                 "recu_r20", "--model-dir", str(folder), "--trust-pickle", "-n", str(N),
                                 "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    assert "imported recu resnet20_1w1a as recu_r20" in result.output and "(paper: 87.5%)" in result.output

    listed = runner.invoke(app, ["zoo", "list", "--model-dir", str(folder)])
    assert listed.exit_code == 0, listed.output
    line = next(line for line in listed.output.splitlines() if "recu_r20" in line)
    assert "recu" in line.replace("recu_r20", "") and "yes (imported)" in line and "resnet20" in line
    rows = {r["name"]: r for r in zoo_rows(folder)}
    assert rows["recu_r20"]["source"] == "recu" and rows["resnet20_bnn"]["source"] == "arbibench"

    evaluated = runner.invoke(app, ["eval", "--model", "recu_r20", "--model-dir", str(folder), "--attacks", "apgd_ce",
                                    "-n", "8", "--store", str(tmp_path / "runs.db"), "--data-dir", str(data_dir),
                                    "--no-checks"])
    assert evaluated.exit_code == 0, evaluated.output
    assert "apgd_ce" in evaluated.output

    bad = runner.invoke(app, ["import", str(recu_file), "--from", "nope", "--arch", "resnet20", "--name", "y",
                              "--model-dir", str(folder), "--trust-pickle"])
    assert bad.exit_code == 2 and "unknown source 'nope'" in bad.output and "Traceback" not in bad.output
