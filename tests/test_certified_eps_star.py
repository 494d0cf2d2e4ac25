"""The certified lower end of eps* joined to the attacks' eps* on the same images: the card's [certified, attacked]."""

from __future__ import annotations

import numpy as np
import pytest

from arbibench.data.cifar10 import load_cifar10
from arbibench.evaluation.cards import eps_star_fields
from arbibench.evaluation.min_perturbation import minimal_perturbation
from arbibench.evaluation.store import ResultStore
from arbibench.models.zoo import load_model
from arbibench.protocol.certified import attach_certificates

# a small verifier budget: two radii, few nodes; what it certifies is still sound, only smaller
VERIFIER = dict(radius_min=1e-4 / 255, radius_max=1e-3 / 255, steps=0, max_nodes=16, corners=5)


@pytest.fixture(scope="module")
def bnn():
    return load_model("resnet20_bnn", device="cpu")


def test_certified_radii_lie_below_the_attacks_eps_star_on_every_image(bnn, data_dir, tmp_path):
    # the shipped resnet20_bnn on real test images, its eps* by the descent search, then the deployed network's
    # certified radius per image: no image can be certified past an example the attacks found
    x, y, idx = load_cifar10(6, data_dir=data_dir)
    with ResultStore(tmp_path / "s.db") as db:
        found = minimal_perturbation(bnn, x, y, idx, attacks=("fgsm",), eps_max=4 / 255, probe_draws=5,
                                     search_rounds=1, store=db, model_name="bnn", batch_size=6)
    attach_certificates(found, bnn, x, y, semantics="deployed", **VERIFIER)
    assert found.certified is not None and found.certified.shape == found.eps_star.shape
    correct = found.clean_correct
    assert (found.certified[~correct] == 0).all()
    assert (found.certified[correct] <= found.eps_star[correct] + 1e-9).all()
    assert (found.certified[correct] > 0).any()  # resnet20_bnn's images certify at 1e-4/255 (BENCHMARKS: verify)
    summary = found.to_dict()
    assert summary["median_certified_correct"] == pytest.approx(float(np.median(found.certified[correct])))
    assert summary["median_certified_correct"] <= summary["median_eps_star_correct"]
    card = eps_star_fields(found)["eps_star"]
    assert card.median_certified == summary["median_certified_correct"]


def test_certificates_are_refused_for_another_norm_or_other_images(bnn, data_dir, tmp_path):
    x, y, idx = load_cifar10(4, data_dir=data_dir)
    with ResultStore(tmp_path / "s.db") as db:
        found = minimal_perturbation(bnn, x, y, idx, attacks=("fgsm",), eps_max=4 / 255, probe_draws=2,
                                     search_rounds=1, store=db, model_name="bnn", batch_size=4)
        l2 = minimal_perturbation(bnn, x, y, idx, attacks=("fgsm",), threat_model="L2", eps_max=0.5, probe_draws=0,
                                  search_rounds=1, store=db, model_name="bnn", batch_size=4)
    with pytest.raises(ValueError, match="images"):
        attach_certificates(found, bnn, x[:3], y[:3], semantics="deployed", **VERIFIER)
    with pytest.raises(ValueError, match="Linf"):
        attach_certificates(l2, bnn, x, y, semantics="deployed", **VERIFIER)
    assert found.certified is None and l2.certified is None  # nothing half-attached


def test_protocol_run_refuses_certify_on_the_corruptions_preset(tmp_path):
    from typer.testing import CliRunner

    from arbibench.cli import app

    result = CliRunner().invoke(app, ["protocol", "run", "cifar10-c", "--certify", "--store", str(tmp_path / "s.db")])
    assert result.exit_code != 0 and "--certify certifies eps*" in result.output
    assert not (tmp_path / "s.db").exists()  # refused before any store is opened


def test_certificates_are_stored_one_by_one_and_a_rerun_certifies_only_the_missing(bnn, data_dir, tmp_path,
                                                                                    monkeypatch):
    # a full card's 500 eps* images take the verifier hours: a run cut short must resume, not start again
    import arbibench.protocol.certified as certified_module

    x, y, idx = load_cifar10(5, data_dir=data_dir)
    with ResultStore(tmp_path / "s.db") as db:
        found = minimal_perturbation(bnn, x, y, idx, attacks=("fgsm",), eps_max=4 / 255, probe_draws=2,
                                     search_rounds=1, store=db, model_name="bnn", batch_size=5)
        uninterrupted = attach_certificates(found, bnn, x, y, semantics="deployed", **VERIFIER).certified.copy()
        found.certified = None
        attach_certificates(found, bnn, x, y, semantics="deployed", store=db, model_name="bnn", **VERIFIER)
        np.testing.assert_array_equal(found.certified, uninterrupted)
        (key,) = {k for (k,) in db.conn.execute("SELECT cert_key FROM certificates")}
        assert sorted(db.certificates(key)) == sorted(int(i) for i in idx)
        # two certificates lost (a run cut short): the rerun certifies those two alone, to the same radii
        db.conn.execute("DELETE FROM certificates WHERE sample_index IN (?, ?)", (int(idx[1]), int(idx[3])))
        db.conn.commit()
        asked: list[list[int]] = []
        real = certified_module.certify

        def counting(*args, **kwargs):
            asked.append([int(i) for i in kwargs["indices"]])
            return real(*args, **kwargs)

        monkeypatch.setattr(certified_module, "certify", counting)
        found.certified = None
        attach_certificates(found, bnn, x, y, semantics="deployed", store=db, model_name="bnn", **VERIFIER)
        assert asked == [[int(idx[1]), int(idx[3])]]
        np.testing.assert_array_equal(found.certified, uninterrupted)
        # other verifier settings are other certificates: nothing read back
        asked.clear()
        attach_certificates(found, bnn, x, y, semantics="deployed", store=db, model_name="bnn",
                            **{**VERIFIER, "max_nodes": 8})
        assert asked == [[int(i) for i in idx]]
