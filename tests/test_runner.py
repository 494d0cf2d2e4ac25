"""The runner on real CIFAR-10 images: bad input refused, only correct samples attacked, nothing unverified counted."""

import pytest
import torch
from torch import nn

from arbibench.attacks import Attack, Linf, ThreatModelViolation
from arbibench.attacks.base import NoConfig
from arbibench.data import load_cifar10
from arbibench.evaluation.runner import evaluate
from arbibench.evaluation.store import ResultStore
from arbibench.models.resnet import resnet20


@pytest.fixture(scope="module")
def images(data_dir):
    x, y, idx = load_cifar10(16, data_dir=data_dir)
    return x, y, idx


@pytest.fixture
def model():
    torch.manual_seed(0)
    return resnet20("fp").eval()


@pytest.fixture
def store(tmp_path):
    with ResultStore(tmp_path / "r.db") as s:
        yield s


def _run(model, x, y, store, **kw):
    kw.setdefault("attacks", ["fgsm"])
    return evaluate(model, x, y, threat=Linf(8 / 255), store=store, progress=False, batch_size=8, **kw)


class Recorder(Attack):
    """Returns its input unchanged and remembers how many samples it was handed."""

    name = "recorder"
    Config = NoConfig
    seen: list[int] = []

    def run(self, model, x, y, threat, generator):
        Recorder.seen.append(len(x))
        return x.clone()


class Cheater(Attack):
    """Moves every sample by 2*eps: must never be counted."""

    name = "cheater"
    Config = NoConfig

    def run(self, model, x, y, threat, generator):
        return (x + 2 * threat.eps).clamp(0, 1)


def test_only_correctly_classified_samples_are_attacked(model, images, store):
    x, _, idx = images
    with torch.no_grad():
        pred = model(x).argmax(1)
    y = pred.clone()
    y[::3] = (y[::3] + 1) % 10  # a third of the labels made wrong: those samples must not be attacked
    Recorder.seen = []
    clean, outcomes, _, _ = _run(model, x, y, store, attacks=[Recorder()], indices=idx)
    assert sum(Recorder.seen) == int((pred == y).sum())
    assert clean.clean_correct.tolist() == (pred == y).tolist()
    assert outcomes["recorder"].adv_correct.tolist() == (pred == y).tolist()  # identity attack changes nothing


def test_unverified_batch_is_never_counted(model, images, store):
    x, _, idx = images
    with torch.no_grad():
        y = model(x).argmax(1)
    with pytest.raises(ThreatModelViolation):
        _run(model, x, y, store, attacks=[Cheater()], indices=idx)
    rows = store.conn.execute(
        "SELECT COUNT(*) FROM batches JOIN evaluations USING (eval_key) WHERE attack = 'cheater'"
    ).fetchone()
    assert rows[0] == 0


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda x, y: (x * 255, y), r"\[0, 1\]"),
        (lambda x, y: (x[0], y), "4-D"),
        (lambda x, y: ((x * 255).to(torch.uint8), y), "floating point"),
        (lambda x, y: (x, y[:-1]), "one label per image"),
        (lambda x, y: (x, y + 10), "labels must lie in 0..9"),
        (lambda x, y: (x, y.float()), "integers"),
        (lambda x, y: (x.clone().fill_(float("nan")), y), "NaN"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(model, images, store, mutate, message):
    x, y, _ = images
    bad_x, bad_y = mutate(x, y)
    with pytest.raises(ValueError, match=message):
        _run(model, bad_x, bad_y, store)
    assert store.conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0] == 0


def test_model_output_checks_and_flags(images, store):
    x, y, _ = images

    class Flat(nn.Module):
        def forward(self, x):
            return x.flatten(1)[:, :1]

    with pytest.raises(ValueError, match="at least 2 logits"):
        _run(Flat(), x, y, store)

    torch.manual_seed(0)
    base = resnet20("fp").eval()

    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = base

        def forward(self, x):
            return self.m(x) + 0.01 * torch.randn(len(x), 10)

    class Softmaxed(Noisy):
        def forward(self, x):
            return self.m(x).softmax(1)

    _, _, _, flags = _run(Noisy(), x, y, store)
    assert "randomized_model" in flags
    _, _, _, flags = _run(Softmaxed(), x, y, store)
    assert "probability_outputs" in flags and "randomized_model" not in flags


def test_duplicate_attack_names_and_bad_batch_size(model, images, store):
    x, y, _ = images
    with pytest.raises(ValueError, match="twice"):
        _run(model, x, y, store, attacks=["fgsm", "fgsm"])
    with pytest.raises(ValueError, match="batch_size"):
        evaluate(model, x, y, threat=Linf(8 / 255), store=store, progress=False, batch_size=0)
