"""The one-line `error:` of every command prints the problem as it is: no markup, no emoji codes read into it."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from arbibench.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["eval", "--model", ":smile:"], "unknown model ':smile:'"),
        (["eval", "--model", "resnet20_bnn", "--attacks", "pgd@tanh:abc"], "tanh:abc"),
        (["leaderboard", "table", "--model-info", "no[such]:smile:folder"], "no[such]:smile:folder"),
    ],
)
def test_an_error_prints_the_names_it_was_given(tmp_path, args, shown):
    result = runner.invoke(app, [*args, *(["--store", str(tmp_path / "s.db")] if args[0] == "eval" else [])])
    assert result.exit_code == 2, result.output
    assert shown in result.output and "😄" not in result.output and "🔤" not in result.output
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["sweep", "-m", "resnet20_bnn", "--eps", "2/255,1/255,1/255"], "--eps '2/255,1/255,1/255' names 1/255 twice"),
        (["sweep", "-m", "resnet20_bnn", "--eps", "1/255,,2/255"], "has an empty item"),
        (["protocol", "grid-check", "--models", "resnet20_bnn", "--eps", "2/255,2/255"], "names 2/255 twice"),
        (["protocol", "run", "cifar10", "--quick", "--models", "resnet20_bnn,resnet20_bnn"],
         "names resnet20_bnn twice"),
        (["protocol", "progress", "cifar10", "--quick", "--models", "resnet20_bnn,"], "has an empty item"),
        (["eval", "-m", "resnet20_bnn", "--eps-star", "fgsm,fgsm"], "--eps-star 'fgsm,fgsm' names fgsm twice"),
    ],
)
def test_a_list_option_refuses_an_item_twice_or_an_empty_item(tmp_path, args, shown):
    # a model or eps named twice would give two rows of the same thing; an empty item is a typo, not "nothing"
    result = runner.invoke(app, [*args, "--store", str(tmp_path / "s.db")] if args[0] != "protocol" or
                           args[1] != "grid-check" else [*args, "--model-info", str(tmp_path / "mi")])
    assert result.exit_code == 2, result.output
    assert shown in result.output and "Traceback" not in result.output
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "mi").exists()


def test_comma_list_is_the_items_of_the_option():
    from arbibench.terminal import comma_list

    assert comma_list(" a , b ", "--x") == ["a", "b"] and comma_list(",", "--x") == [] and comma_list("", "--x") == []
    with pytest.raises(ValueError, match="--x 'a,b,a' names a twice"):
        comma_list("a,b,a", "--x")


def test_an_attack_list_with_an_empty_item_is_refused(tmp_path):
    result = runner.invoke(app, ["eval", "-m", "resnet20_bnn", "--attacks", "fgsm,,pgd", "--store",
                                 str(tmp_path / "s.db")])
    assert result.exit_code == 2 and "has an empty item" in result.output, result.output
    assert not (tmp_path / "s.db").exists()
