"""The leaderboard site and figures, built from realistic fixture cards (the protocol runner's schema).

``make_model_info`` is the fixture generator, shared with ``test_browser.py``: CIFAR-10 L-inf and L2 boards of
ResNet-20 models with white-box and black-box attacks, an eps sweep, and adversarial-example npz files cut from the
real CIFAR-10 test set when it is present (synthetic images otherwise).
"""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from arbibench.leaderboard import CardError, LeaderboardError, build_site, load_cards
from arbibench.leaderboard.cli import leaderboard_app
from arbibench.leaderboard.site import MARKER
from arbibench.models.zoo import ZOO

DATA = Path(os.environ.get("ARBIBENCH_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
WHITE_BOX = ("fgsm", "pgd", "apgd_ce", "apgd_dlr")
BLACK_BOX = ("square", "transfer_fp")
FLAG_TEXT = {
    "zero_gradient": "The cross-entropy gradient w.r.t. the input is exactly zero on many correctly classified "
    "samples: gradient attacks get no signal there.",
    "gradient_free_stronger": "A gradient-free attack beat every gradient attack: the gradients are masked.",
}
# name, method, authors, venue, clean ACC, white-box survival, black-box survival, flags
MODELS = [
    ("resnet20_fp", "fp", "He et al.", "CVPR 2016", 89.6, 0.00, 0.05, ()),
    ("resnet20_bnn", "bnn", "Hubara et al.", "NeurIPS 2016", 68.04, 0.02, 0.30, ("zero_gradient",)),
    ("resnet20_xnor", "xnor", "Rastegari et al.", "ECCV 2016", 71.3, 0.04, 0.26, ("zero_gradient",)),
    ("resnet20_bireal", "bireal", "Liu et al.", "ECCV 2018", 78.9, 0.01, 0.12, ()),
    ("resnet20_irnet", "irnet", "Qin et al.", "CVPR 2020", 80.2, 0.03, 0.15, ()),
    ("resnet20_reactnet", "reactnet", "Liu et al.", "ECCV 2020", 82.7, 0.06, 0.21, ("gradient_free_stronger",)),
]
SWEEP_EPS = ((1, "1/255"), (2, "2/255"), (4, "4/255"), (8, "8/255"), (16, "16/255"))


EPS_FLOOR = 1e-3 / 255


def _descent(method: str, wb: float) -> dict[str, Any]:
    """The descent search's fields of an eps* record: resnet20_bnn's median is censored (fooled at the floor)."""
    median = EPS_FLOOR if method == "bnn" else round((0.02 + 3 * wb) / 255, 9)
    found = {"search": "descent", "eps_floor": EPS_FLOOR, "probe_draws": 50, "n_correct": 380, "censored": 12.5,
             "median_correct": median, "median_correct_ci95": [EPS_FLOOR, round(2 * median, 9)]}
    if method in CERTIFIED:  # a verifier's lower end, below the attacks' floor: a measurement, never "<= floor"
        found["median_certified"] = CERTIFIED[method]
    return found


# the certified median radius of the fixture models a verifier ran on (the others: not verified)
CERTIFIED = {"bnn": 4e-4 / 255, "reactnet": 2e-3 / 255}


def _bracket_cell(card: Any, method: str, scale: float, unit: str) -> str:
    """What a table shows for the [certified, attacked] bracket of a fixture card's median eps*."""
    lower = f"{CERTIFIED[method] * scale:.3g}{unit}" if method in CERTIFIED else "not verified"
    return f"[{lower}, {_eps_cell(card, scale, unit)}]"


def _eps_cell(card: Any, scale: float, unit: str) -> str:
    """What a table shows for the correct-image median of a fixture card."""
    return _eps_cell_at(card.eps_star.median_correct, scale, unit)


def _eps_cell_at(value: float, scale: float, unit: str) -> str:
    return f"\u2264 {EPS_FLOOR * scale:.3g}{unit}" if value <= EPS_FLOOR else f"{value * scale:.3g}{unit}"


def _card(name: str, method: str, authors: str, venue: str, clean: float, wb: float, bb: float,
          flags: tuple[str, ...], threat: str, rng: np.random.Generator) -> dict[str, Any]:
    attacks: dict[str, dict[str, Any]] = {}
    for family, names, keep in (("white-box", WHITE_BOX, wb), ("black-box", BLACK_BOX, bb)):
        for k, attack in enumerate(names):
            survive = float(np.clip(keep * (1.6 - 0.4 * k) + rng.uniform(0, 0.02), 0, 1))
            acc = round(clean * survive, 2)
            n = 1000 if family == "white-box" else 500
            half = round(1.96 * 100 * np.sqrt(max(acc / 100 * (1 - acc / 100), 1e-4) / n), 2)
            attacks[attack] = {
                "family": family, "acc_star": acc, "acc_norm": round(acc / clean, 4),
                "ci_low": max(0.0, round(acc - half, 2)), "ci_high": min(100.0, round(acc + half, 2)),
                "n_examples": n, "median_queries": None if family == "white-box" else float(rng.integers(80, 900)),
            }
    rs = {f: round(sum(a["acc_norm"] for a in attacks.values() if a["family"] == f), 4)
          for f in ("white-box", "black-box")}
    rs["all"] = round(sum(rs.values()), 4)
    rs_mean = {"white-box": round(rs["white-box"] / len(WHITE_BOX), 4),
               "black-box": round(rs["black-box"] / len(BLACK_BOX), 4), "all": round(rs["all"] / len(attacks), 4)}
    eps, eps_text = (8 / 255, "8/255") if threat == "Linf" else (0.5, "0.5")
    sweep = [{"attack": "apgd_ce", "eps": e / 255, "eps_text": t,
              "acc_star": round(clean * float(np.exp(-e * (1.2 - 10 * wb))), 2)} for e, t in SWEEP_EPS]
    return {
        "name": name, "link": "https://arxiv.org/abs/1602.02830", "authors": authors, "additional_data": False,
        "number_forward_passes": 1, "dataset": "cifar10", "venue": venue, "architecture": "resnet20",
        "eps": eps, "eps_text": eps_text, "threat_model": threat, "clean_acc": clean, "reported": None,
        "autoattack_acc": min(a["acc_star"] for a in attacks.values()), "unreliable": False, "footnote": None,
        "median_eps_star": round((0.5 + 30 * wb) / 255, 6),
        "eps_star": {
            "attacks": ["apgd_ce"], "eps_max": 16 / 255, "search_rounds": 3, "n_examples": 500,
            "not_fooled_up_to_eps_max": 0.0,
            "curve": [{"eps": e / 255, "robust_acc": round(clean * float(np.exp(-e / (0.5 + 30 * wb))), 2),
                       # the BNNs' cards hold the curve's low end (the search's brackets), the FP twin's do not
                       **({} if method == "fp" else
                          {"robust_acc_low": round(clean * float(np.exp(-(e + 1) / (0.5 + 30 * wb))), 2)})}
                      for e in range(0, 17, 2)],
            **_descent(method, wb),
        },
        "method": method, "method_paper": f"{authors}, {venue}", "bits_weights": 32 if method == "fp" else 1,
        "bits_activations": 32 if method == "fp" else 1, "protocol": "cifar10", "quick": True,
        "attacks": attacks, "rs": rs, "rs_mean": rs_mean,
        "worst_case_acc": min(a["acc_star"] for a in attacks.values()),
        "flags": {f: FLAG_TEXT[f] for f in flags}, "fp_twin": None if method == "fp" else "resnet20_fp",
        "sweep": sweep if threat == "Linf" else [],
    }


def _examples_npz(path: Path, n: int, seed: int) -> None:
    """A few adversarial examples: real CIFAR-10 test images with a +-8/255 sign perturbation."""
    rng = np.random.default_rng(seed)
    test = DATA / "cifar10" / "test.npz"
    if test.is_file():
        with np.load(test) as d:
            x = d["x"][:n].transpose(0, 3, 1, 2).copy()
            y = d["y"][:n].astype(np.int64)
    else:
        grid = np.linspace(0, 255, 32, dtype=np.float64)
        x = np.stack([np.stack([np.add.outer(grid, grid) / 2] * 3) for _ in range(n)]).astype(np.uint8)
        y = rng.integers(0, 10, n).astype(np.int64)
    delta = rng.choice([-8, 8], size=x.shape)
    x_adv = np.clip(x.astype(np.int16) + delta, 0, 255).astype(np.uint8)
    pred_adv = np.where(np.arange(n) % 3 == 2, y, (y + 1 + rng.integers(0, 8, n)) % 10)
    np.savez_compressed(path, x_clean=x, x_adv=x_adv, y=y, pred_clean=y.copy(), pred_adv=pred_adv.astype(np.int64),
                        attack=np.array("apgd_ce"))


def make_model_info(root: Path, examples: bool = True) -> Path:
    """Write realistic cards to ``root/model_info/cifar10/{Linf,L2}/<name>.json``; return the model_info folder."""
    model_info = root / "model_info"
    rng = np.random.default_rng(0)
    for threat, models in (("Linf", MODELS), ("L2", MODELS[:3])):
        folder = model_info / "cifar10" / threat
        folder.mkdir(parents=True, exist_ok=True)
        for i, spec in enumerate(models):
            card = _card(*spec, threat=threat, rng=rng)
            if threat == "L2":
                card["quick"] = False
            if examples and threat == "Linf" and spec[0] in ("resnet20_bnn", "resnet20_fp"):
                card["examples"] = f"{spec[0]}_examples.npz"
                _examples_npz(folder / card["examples"], 6, i)
            (folder / f"{spec[0]}.json").write_text(json.dumps(card, indent=2))
    return model_info


class _Tables(HTMLParser):
    """Rows of every ``table.board`` in a page: the text of each cell."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.names: dict[str, list[str]] = {}
        self.scripts = 0
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        if tag == "table" and "board" in (a.get("class") or ""):
            self._table = a["id"]
            self.tables[self._table] = []
            self.names[self._table] = []
        elif tag == "tr" and self._table and "empty" not in (a.get("class") or ""):
            self._row = []
            if a.get("data-name") is not None:
                self.names[self._table].append(a["data-name"] or "")
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table:
            if self._row:
                self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _parse(html_text: str) -> _Tables:
    parser = _Tables()
    parser.feed(html_text)
    return parser


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lb")
    build_site(make_model_info(root), root / "site", "png,svg")
    return root / "site"


def test_build_writes_expected_files(built: Path) -> None:
    assert (built / "index.html").is_file() and (built / MARKER).is_file()
    for name in ("acc_vs_rs", "heatmap_cifar10_Linf", "heatmap_cifar10_L2", "eps_curves_cifar10_Linf"):
        for fmt in ("png", "svg"):
            assert (built / "figures" / f"{name}.{fmt}").stat().st_size > 1000, name
    assert not (built / "figures" / "eps_curves_cifar10_L2.svg").exists()  # the L2 cards have no sweep
    for name, *_ in MODELS:
        assert (built / "models" / "cifar10_Linf" / f"{name}.html").is_file()
        assert json.loads((built / "models" / "cifar10_Linf" / f"{name}.json").read_text())["name"] == name
    pngs = sorted((built / "models" / "cifar10_Linf" / "resnet20_bnn").glob("*.png"))
    assert len(pngs) == 18  # 6 examples x clean / adversarial / perturbation
    from PIL import Image

    with Image.open(pngs[0]) as img:
        assert img.size == (128, 128)
    page = (built / "models" / "cifar10_Linf" / "resnet20_bnn.html").read_text()
    assert "resnet20_bnn/00_clean.png" in page and "Adversarial examples" in page
    assert 'href="resnet20_fp.html"' in page  # the fp twin links to its page
    # No leftovers beside the site: the temp build folder was renamed into place.
    assert [p.name for p in built.parent.iterdir() if p.name.startswith(".")] == []


def test_self_contained(built: Path) -> None:
    """Nothing is fetched from the network: no http(s) src, stylesheet or script URL anywhere."""
    for page in [built / "index.html", *built.glob("models/*/*.html")]:
        text = page.read_text()
        assert not re.search(r"""(src|href)=["'](https?:)?//(?!arxiv\.org)""", text), page
        assert "<link" not in text
        assert "@import" not in text


def test_rows_sorted_by_rs_with_ranks(built: Path) -> None:
    parsed = _parse((built / "index.html").read_text())
    assert set(parsed.tables) == {"board-cifar10_Linf", "board-cifar10_L2"}
    rows = parsed.tables["board-cifar10_Linf"]
    cards = {c.name: c for c in load_cards(built.parent / "model_info") if c.threat_model == "Linf"}
    names = parsed.names["board-cifar10_Linf"]
    assert all(r[1].startswith(n) for r, n in zip(rows, names, strict=True))
    assert sorted(names) == sorted(cards)
    rs = [cards[n].rs["all"] for n in names]
    assert rs == sorted(rs, reverse=True)
    assert [int(r[0].split()[0]) for r in rows] == list(range(1, len(rows) + 1))
    rs_col = [float(r[-5]) for r in rows]  # RS, AutoAttack, median eps*, worst case, flags are the last columns
    assert rs_col == sorted(rs_col, reverse=True)


def test_board_shows_eps_star_and_marks_masked_models_in_the_ranking(built: Path) -> None:
    html_text = (built / "index.html").read_text()
    parsed = _parse(html_text)
    rows = parsed.tables["board-cifar10_Linf"]
    names = parsed.names["board-cifar10_Linf"]
    cards = {c.name: c for c in load_cards(built.parent / "model_info") if c.threat_model == "Linf"}
    for row, name in zip(rows, names, strict=True):
        card = cards[name]
        assert row[-3] == _eps_cell(card, 255, "/255")  # correct-image median eps*, in 1/255
        assert row[-4] == f"{card.autoattack_acc:.2f}" or row[-4].startswith(f"{card.autoattack_acc:.1f}")
        assert ("\u26a0" in row[0]) == bool(card.flags), name  # the masking mark sits in the rank cell
    assert 'data-col="eps-star"' in html_text and 'data-col="aa"' in html_text


def test_a_card_of_the_earlier_eps_star_search_reads_and_says_all_images(tmp_path: Path) -> None:
    # cards written before the descent search hold only the all-image median (misclassified images at 0)
    model_info = make_model_info(tmp_path, examples=False)
    path = model_info / "cifar10" / "Linf" / "resnet20_xnor.json"
    card = json.loads(path.read_text())
    card["eps_star"] = {k: v for k, v in card["eps_star"].items() if k not in _descent("xnor", 0.0)}
    old = {"median_eps_star": 0.25 / 255, "median_eps_star_ci95": [0.25 / 255, 0.5 / 255]}
    path.write_text(json.dumps({**card, **old}))
    read = next(c for c in load_cards(model_info) if c.name == "resnet20_xnor" and c.threat_model == "Linf")
    assert read.eps_star is not None and read.eps_star.search is None and read.eps_star.median_correct is None
    assert read.eps_star_median == (0.25 / 255, (0.25 / 255, 0.5 / 255), False)
    result = CliRunner().invoke(leaderboard_app, ["table", "--model-info", str(model_info), "--no-per-attack"])
    assert result.exit_code == 0, result.output
    rows = {r[1]: r for r in _markdown_rows(result.output.split("### ")[1])}
    assert rows["`resnet20_xnor`"][-4] == "0.25/255 [0.25/255, 0.5/255] (all images)"
    assert rows["`resnet20_xnor`"][-3] == "-"  # no bracket without the correct-image median of the descent search
    assert rows["`resnet20_bnn`"][-4] == "\u2264 0.001/255 [\u2264 0.001/255, 0.002/255]"  # censored: never "0.001"
    # the certified end lies below the attacks' floor and is a measurement there, never "<= floor"
    assert rows["`resnet20_bnn`"][-3] == "[0.0004/255, \u2264 0.001/255]"


def test_model_pages_plot_the_eps_star_curve_against_the_fp_twin(built: Path) -> None:
    figures = built / "figures"
    for name, method, *_ in MODELS:
        stem = f"eps_star_cifar10_Linf_{name}"
        svg = (figures / f"{stem}.svg").read_text()
        assert (figures / f"{stem}.png").stat().st_size > 1000
        page = next(built.glob(f"**/{name}.html")).read_text()
        assert f"figures/{stem}.svg" in page and 'id=\'eps-star\'' in page
        # a BNN's figure names its twin; the FP model's figure has no twin line
        assert ("resnet20_fp (FP twin)" in svg) == (method != "fp"), name
        # the band between the curve and its low end, where the card holds the low end
        assert ('PolyCollection_' in svg) == (method != "fp"), name
        # the median's bracket: the verifier's certified end where one ran, else "not verified"
        assert "[certified, attacked]" in page, name
        lower = f"[{CERTIFIED[method] * 255:.3g}/255, " if method in CERTIFIED else "[not verified, "
        assert lower in page, name
    index = (built / "index.html").read_text()
    assert "eps_star_cifar10_Linf" not in index  # per-model figures stay on the model pages


def test_tied_rs_share_a_rank() -> None:
    from arbibench.leaderboard.ranking import rank_cards

    base = _card(*MODELS[1], threat="Linf", rng=np.random.default_rng(1))
    made = []
    for name, rs in (("a", 2.0), ("b", 1.0), ("c", 2.0), ("d", 0.5)):
        data = dict(base, name=name, rs=dict(base["rs"], all=rs))
        from arbibench.leaderboard.cards import parse_card

        made.append(parse_card(Path(f"{name}.json"), data))
    ranked = rank_cards(made)
    assert [(r.rank, r.card.rs["all"]) for r in ranked] == [(1, 2.0), (1, 2.0), (3, 1.0), (4, 0.5)]


def test_html_escaping(tmp_path: Path) -> None:
    model_info = make_model_info(tmp_path, examples=False)
    path = model_info / "cifar10" / "Linf" / "resnet20_bnn.json"
    card = json.loads(path.read_text())
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)> $\\frac{$'
    card.update(name=evil, authors='"><b>bold</b>', method="bnn<i>", link="javascript:alert(1)",
                flags={"zero<gradient>": 'meaning "quoted" <em>'}, footnote="<u>f</u>", unreliable=True)
    path.write_text(json.dumps(card))
    site = tmp_path / "site"
    build_site(model_info, site, "svg")
    index = (site / "index.html").read_text()
    assert _parse(index).scripts == 1  # only the page's own table script
    assert "<script>alert" not in index and "<img src=x" not in index and "<b>bold" not in index
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in index and "$\\frac{$" in index
    assert "zero&lt;gradient&gt;" in index and "meaning &quot;quoted&quot; &lt;em&gt;" in index
    pages = list((site / "models" / "cifar10_Linf").glob("script*.html"))
    assert len(pages) == 1  # the file name is sanitised too
    page = pages[0].read_text()
    assert _parse(page).scripts == 0 and "<script>alert" not in page and "javascript:" not in page
    assert "<u>f</u>" not in page and "&lt;u&gt;f&lt;/u&gt;" in page
    assert "script-src &#x27;none&#x27;" in page  # and no script could run there anyway (CSP)


def _broken(tmp_path: Path, edit: Any) -> Path:
    model_info = make_model_info(tmp_path, examples=False)
    path = model_info / "cifar10" / "Linf" / "resnet20_irnet.json"
    card = json.loads(path.read_text())
    edit(card, path)
    path.write_text(json.dumps(card))
    return model_info


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (lambda c, p: c.update(clean_acc="68.04"), "clean_acc", "expected a number, got string"),
        (lambda c, p: c.update(clean_acc=136.08), "clean_acc", "outside [0.0, 100.0] (accuracies are in percent)"),
        (lambda c, p: c.pop("rs"), "rs", "is missing"),
        (lambda c, p: c["rs"].pop("all"), "rs", "no 'all' entry"),
        (lambda c, p: c["attacks"]["pgd"].update(acc_star=None), "attacks.pgd.acc_star", "expected a number, got null"),
        (lambda c, p: c["attacks"]["square"].pop("family"), "attacks.square.family", "is missing"),
        (lambda c, p: c["sweep"][2].update(eps="4/255"), "sweep[2].eps", "expected a number"),
        (lambda c, p: c.update(flags={"zero_gradient": 1}), "flags.zero_gradient", "expected a non-empty string"),
        (lambda c, p: c.update(unreliable="no"), "unreliable", "expected true or false"),
        (lambda c, p: c.update(examples="../../etc/passwd"), "examples", "must be a file name beside the card"),
        (lambda c, p: c.update(examples="gone.npz"), "examples", "does not exist"),
        (lambda c, p: c.update(name="resnet20_bnn"), "name", "also the name of"),
    ],
)
def test_bad_card_names_file_and_field(tmp_path: Path, edit: Any, field: str, words: str) -> None:
    model_info = _broken(tmp_path, edit)
    with pytest.raises(CardError) as info:
        build_site(model_info, tmp_path / "site")
    assert info.value.field == field
    assert info.value.path.name == "resnet20_irnet.json"
    assert f"resnet20_irnet.json: field '{field}'" in str(info.value) and words in str(info.value)
    assert not (tmp_path / "site").exists() and not any(p.name.startswith(".site") for p in tmp_path.iterdir())


def test_invalid_json_names_file_and_line(tmp_path: Path) -> None:
    model_info = make_model_info(tmp_path, examples=False)
    bad = model_info / "cifar10" / "L2" / "resnet20_xnor.json"
    bad.write_text('{"name": "resnet20_xnor",\n "clean_acc": 71.3,,\n}')
    with pytest.raises(CardError, match=r"resnet20_xnor\.json: is not valid JSON: .*line 2"):
        load_cards(model_info)


def test_bad_examples_npz_names_array(tmp_path: Path) -> None:
    model_info = make_model_info(tmp_path)
    npz = model_info / "cifar10" / "Linf" / "resnet20_bnn_examples.npz"
    with np.load(npz) as d:
        arrays = dict(d)
    arrays["x_adv"] = arrays["x_adv"].astype(np.float32) / 255
    np.savez(npz, **arrays)
    with pytest.raises(CardError, match=r"resnet20_bnn_examples\.npz: field 'x_adv': expected uint8"):
        build_site(model_info, tmp_path / "site")


def test_missing_dir_and_no_cards(tmp_path: Path) -> None:
    with pytest.raises(LeaderboardError, match="model-info folder .*nowhere does not exist"):
        build_site(tmp_path / "nowhere", tmp_path / "site")
    (tmp_path / "empty" / "cifar10").mkdir(parents=True)
    (tmp_path / "empty" / "cifar10" / ".resnet20_bnn.json").write_text("{")  # a writer's half-done temporary
    with pytest.raises(LeaderboardError, match=r"no model cards \(\*\.json\) under"):
        build_site(tmp_path / "empty", tmp_path / "site")


def test_failed_rebuild_keeps_old_site_and_refuses_foreign_folder(tmp_path: Path) -> None:
    model_info = make_model_info(tmp_path, examples=False)
    site = tmp_path / "site"
    build_site(model_info, site, "svg")
    before = (site / "index.html").read_text()
    # Fails midway (after cards load): an unknown format is refused before anything is written ...
    with pytest.raises(LeaderboardError, match="--format"):
        build_site(model_info, site, "png,gif")
    # ... and an examples file that breaks while pages are written leaves the old site untouched.
    card_path = model_info / "cifar10" / "Linf" / "resnet20_fp.json"
    card = json.loads(card_path.read_text())
    card["examples"] = "broken.npz"
    (card_path.parent / "broken.npz").write_bytes(b"not a zip")
    card_path.write_text(json.dumps(card))
    with pytest.raises(CardError, match="broken.npz"):
        build_site(model_info, site, "svg")
    assert (site / "index.html").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model_info", "site"]
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("keep me")
    with pytest.raises(LeaderboardError, match="refusing to replace"):
        build_site(tmp_path / "model_info", foreign)
    assert (foreign / "thesis.tex").read_text() == "keep me"


def test_figures_in_both_formats(built: Path) -> None:
    for png in (built / "figures").glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    svgs = list((built / "figures").glob("*.svg"))
    assert len(svgs) == 4 + len(MODELS) + 3  # board figures, and one eps* figure per model card (6 Linf, 3 L2)
    import xml.etree.ElementTree as ET

    for svg in svgs:
        root = ET.parse(svg).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg", svg
        assert float(root.get("width", "0").rstrip("pt")) > 100


def test_rebuild_is_byte_stable(tmp_path: Path) -> None:
    model_info = make_model_info(tmp_path, examples=False)
    build_site(model_info, tmp_path / "a", "svg,png")
    build_site(model_info, tmp_path / "b", "svg,png")
    for f in sorted((tmp_path / "a").rglob("*")):
        if f.is_file():
            assert f.read_bytes() == (tmp_path / "b" / f.relative_to(tmp_path / "a")).read_bytes(), f


def test_cli_build_and_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    model_info = make_model_info(tmp_path, examples=False)
    out = tmp_path / "site"
    result = runner.invoke(leaderboard_app, ["build", "--model-info", str(model_info), "--out", str(out),
                                             "--format", "svg"])
    assert result.exit_code == 0, result.output
    assert "9 model cards on 2 leaderboard(s)" in result.output
    assert (out / "figures" / "acc_vs_rs.svg").is_file() and not (out / "figures" / "acc_vs_rs.png").exists()
    result = runner.invoke(leaderboard_app, ["build", "--model-info", str(tmp_path / "nope"), "--out", str(out)])
    assert result.exit_code == 2 and "does not exist" in result.output
    result = runner.invoke(leaderboard_app, ["serve", "--dir", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "holds no index.html" in result.output


def test_eps_curves_merge_budgets_written_differently(tmp_path: Path) -> None:
    """0.00392 on one card and 1/255 on another are one tick; a sweep point at eps 0 replaces the clean point."""
    from arbibench.leaderboard.figures import eps_curves, method_colours
    from arbibench.leaderboard.ranking import build_boards

    model_info = make_model_info(tmp_path, examples=False)
    path = model_info / "cifar10" / "Linf" / "resnet20_xnor.json"
    card = json.loads(path.read_text())
    card["sweep"] = [{"attack": "apgd_ce", "eps": 0.00392, "eps_text": "1/255", "acc_star": 30.0},
                     {"attack": "apgd_ce", "eps": 0.0, "acc_star": 70.0}]
    path.write_text(json.dumps(card))
    boards = [b for b in build_boards(load_cards(model_info)) if b.threat_model == "Linf"]
    fig = eps_curves(boards[0], method_colours(boards))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1/255", "2/255", "4/255", "8/255", "16/255"]
    xnor = next(line for line in ax.get_lines() if line.get_label() == "resnet20_xnor")
    assert list(xnor.get_xdata()) == [0, 1] and list(xnor.get_ydata()) == [70.0, 30.0]


def test_server_binds_loopback_only(built: Path) -> None:
    from urllib.request import urlopen

    from arbibench.leaderboard.serve import make_server

    server = make_server(built, port=0)
    try:
        assert server.server_address[0] == "127.0.0.1"
        import threading

        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        with urlopen(f"http://127.0.0.1:{server.server_port}/figures/acc_vs_rs.svg", timeout=10) as r:
            assert r.headers["Content-Type"] == "image/svg+xml" and r.read(5) in (b"<?xml", b"<svg ")
    finally:
        server.shutdown()
        server.server_close()


def test_serve_refuses_a_port_outside_the_range_before_binding(tmp_path: Path) -> None:
    for port in ("99999", "-1"):
        result = CliRunner().invoke(leaderboard_app, ["serve", "--dir", str(tmp_path), "--port", port])
        assert result.exit_code == 2 and "Invalid value for '--port'" in result.output, result.output
        assert not isinstance(result.exception, OverflowError)


def _markdown_rows(section: str) -> list[list[str]]:
    """The body rows of the first markdown table in ``section``."""
    lines = [ln for ln in section.splitlines() if ln.startswith("| ")]
    return [[c.strip() for c in ln.strip("| ").split(" | ")] for ln in lines[1:] if not ln.startswith("| ---")]


def test_markdown_table_has_the_sites_ranking_and_numbers(tmp_path: Path) -> None:
    model_info = make_model_info(tmp_path, examples=False)
    out = tmp_path / "board.md"
    result = CliRunner().invoke(leaderboard_app, ["table", "--model-info", str(model_info), "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    cards = load_cards(model_info)
    for threat, unit in (("Linf", "/255"), ("L2", "")):
        section = text.split(f"· {'L∞' if threat == 'Linf' else 'L2'} (")[1].split("### ")[0]
        ranking, per_attack = section.split("ACC_norm per attack:")
        rows = _markdown_rows(ranking)
        board = sorted((c for c in cards if c.threat_model == threat), key=lambda c: -c.rs["all"])
        assert [r[1] for r in rows] == [f"`{c.name}`" for c in board]  # rank order by RS, as on the site
        for row, card in zip(rows, board, strict=True):
            assert row[0].endswith("⚠") == bool(card.flags), card.name
            assert row[3] == ("quick" if card.quick else "full")
            assert row[4] == f"{card.clean_acc:.1f}%" and row[-7] == f"{card.rs['all']:.3f}"
            scale = 255 if threat == "Linf" else 1
            assert row[-4] == f"{_eps_cell(card, scale, unit)} [{_eps_cell_at(EPS_FLOOR, scale, unit)}, " \
                f"{_eps_cell_at(card.eps_star.median_correct_ci95[1], scale, unit)}]"  # L2 not in 1/255
            assert row[-3] == _bracket_cell(card, card.method, scale, unit)
        attack_rows = _markdown_rows(per_attack)
        for row, card in zip(attack_rows, board, strict=True):
            assert row[1] == f"{card.attacks['fgsm'].acc_norm:.2f}"
    result = CliRunner().invoke(leaderboard_app, ["table", "--model-info", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_markdown_table_names_cards_measured_on_replaced_checkpoints(tmp_path: Path) -> None:
    # a card records the sha256 of the weights it measured; once the zoo pins other weights, the table says so
    model_info = make_model_info(tmp_path, examples=False)
    folder = model_info / "cifar10" / "Linf"
    for name, sha in (("resnet20_bnn", "0" * 64), ("resnet20_fp", ZOO["resnet20_fp"].sha256)):
        card = json.loads((folder / f"{name}.json").read_text())
        (folder / f"{name}.json").write_text(json.dumps({**card, "checkpoint_sha256": sha}))
    result = CliRunner().invoke(leaderboard_app, ["table", "--model-info", str(model_info), "--no-per-attack"])
    assert result.exit_code == 0, result.output
    linf = result.output.split("### ")[1]
    note = next(line for line in linf.splitlines() if line.startswith("Measured on checkpoints"))
    assert "`resnet20_bnn`" in note and "resnet20_fp" not in note
    assert "Measured on checkpoints" not in result.output.split("### ")[2]  # the L2 cards record no sha256


def test_markdown_table_of_the_shipped_cards() -> None:
    # the cards of `make protocol` in model_info/: every one ranked, AutoAttack taken from its row
    shipped = Path(__file__).resolve().parents[1] / "model_info"
    result = CliRunner().invoke(leaderboard_app, ["table", "--model-info", str(shipped), "--no-per-attack"])
    assert result.exit_code == 0, result.output
    cards = [c for c in load_cards(shipped) if c.threat_model == "Linf"]
    rows = _markdown_rows(result.output)
    assert sorted(r[1] for r in rows) == sorted(f"`{c.name}`" for c in cards)
    assert "ACC_norm per attack" not in result.output
    for row in rows:
        card = next(c for c in cards if f"`{c.name}`" == row[1])
        assert row[-5] == f"{card.attacks['autoattack'].acc_star:.1f}%"


def test_l2_board_shows_eps_star_in_input_units(built: Path) -> None:
    parsed = _parse((built / "index.html").read_text())
    cards = {c.name: c for c in load_cards(built.parent / "model_info") if c.threat_model == "L2"}
    rows, names = parsed.tables["board-cifar10_L2"], parsed.names["board-cifar10_L2"]
    assert rows
    for row, name in zip(rows, names, strict=True):
        assert row[-3] == _eps_cell(cards[name], 1.0, "")  # an L2 distance, not a count of 1/255 steps


def test_a_ranking_across_protocol_sizes_is_marked_and_filterable(tmp_path: Path) -> None:
    model_info = make_model_info(tmp_path, examples=False)
    folder = model_info / "cifar10" / "Linf"
    card = json.loads((folder / "resnet20_fp.json").read_text())
    card["quick"] = False  # one full-protocol card among the quick ones
    (folder / "resnet20_fp.json").write_text(json.dumps(card))
    out = tmp_path / "board.md"
    result = CliRunner().invoke(leaderboard_app, ["table", "--model-info", str(model_info), "--out", str(out)])
    assert result.exit_code == 0, result.output
    linf = out.read_text().split("· L∞ (")[1].split("### ")[0]
    assert "mixes protocol sizes" in linf
    rows = {r[1]: r for r in _markdown_rows(linf.split("ACC_norm per attack:")[0])}
    assert rows["`resnet20_fp`"][3] == "full" and "†" not in rows["`resnet20_fp`"][0]
    assert all(r[3] == "quick" and r[0].endswith("†") for n, r in rows.items() if n != "`resnet20_fp`")
    l2 = out.read_text().split("· L2 (")[1]
    assert "mixes protocol sizes" not in l2 and "†" not in l2  # all full: nothing to mark
    build_site(model_info, tmp_path / "site", "png")
    page = (tmp_path / "site" / "index.html").read_text()
    assert 'data-size="full"' in page and 'data-size="quick"' in page
    assert '<option value="full">full protocol</option><option value="quick">quick protocol</option>' in page


def test_a_card_of_one_evaluation_is_never_ranked_as_a_protocol_card(tmp_path: Path) -> None:
    # `arbibench eval --model-info` writes a card without a protocol (10 images, one attack, say): it must not read
    # as "full", and ranked among full cards it gets the dagger; the provenance names the folder read
    model_info = make_model_info(tmp_path, examples=False).rename(tmp_path / "cards_of_mine")
    folder = model_info / "cifar10" / "Linf"
    for path in folder.glob("*.json"):
        card = json.loads(path.read_text())
        card["quick"] = False
        path.write_text(json.dumps(card))
    one = json.loads((folder / "resnet20_fp.json").read_text())
    one["protocol"], one["quick"] = None, None
    (folder / "resnet20_fp.json").write_text(json.dumps(one))
    out = tmp_path / "board.md"
    result = CliRunner().invoke(leaderboard_app, ["table", "--model-info", str(model_info), "--out", str(out)])
    assert result.exit_code == 0, result.output
    linf = out.read_text().split("· L∞ (")[1].split("### ")[0]
    rows = {r[1]: r for r in _markdown_rows(linf.split("ACC_norm per attack:")[0])}
    assert rows["`resnet20_fp`"][3] == "eval" and rows["`resnet20_fp`"][0].endswith("†")
    assert all(r[3] == "full" and "†" not in r[0] for n, r in rows.items() if n != "`resnet20_fp`")
    assert "mixes protocol sizes" in linf and "an `eval` card" in linf
    build_site(model_info, tmp_path / "site", "png")
    page = (tmp_path / "site" / "index.html").read_text()
    assert 'data-size="eval"' in page and '<option value="eval">single evaluations</option>' in page
    doc = tmp_path / "LEADERBOARD.md"
    result = CliRunner().invoke(leaderboard_app, ["markdown", "--model-info", str(model_info), "--out", str(doc)])
    assert result.exit_code == 0, result.output
    # the folder by its name (no machine path in a page meant for a repository)
    assert "in `cards_of_mine/` and" in doc.read_text() and "in `model_info/`" not in doc.read_text()


def test_model_page_says_what_the_numbers_were_measured_on(tmp_path: Path) -> None:
    model_info = make_model_info(tmp_path, examples=False)
    path = model_info / "cifar10" / "Linf" / "resnet20_bnn.json"
    card = json.loads(path.read_text())
    card.update(machine="GPU X (cuda): 90% of batch seconds; CPU Y: 10% of batch seconds", seconds=7200.0,
                checkpoint_sha256="ab" * 32)
    path.write_text(json.dumps(card))
    build_site(model_info, tmp_path / "site", "png")
    pages = tmp_path / "site" / "models" / "cifar10_Linf"
    page = (pages / "resnet20_bnn.html").read_text()
    fields = page.split('<dl class="fields">')[1].split("</dl>")[0]
    assert "<dt>Computed on</dt><dd>GPU X (cuda): 90% of batch seconds; CPU Y: 10% of batch seconds</dd>" in fields
    assert "<dt>Attack time</dt><dd>2.00 h</dd>" in fields and "<dt>Inference</dt><dd>simulation</dd>" in fields
    assert f"<code>{'ab' * 32}</code>" in fields
    other = (pages / "resnet20_fp.html").read_text().split('<dl class="fields">')[1]
    assert "<dt>Inference</dt><dd>simulation</dd>" in other and "Computed on" not in other.split("</dl>")[0]


def test_a_median_at_the_floor_is_censored_only_where_images_were() -> None:
    # on the 8-bit grid the floor is one grey level and exact: a search that censored nothing has no "<= floor"
    from arbibench.cards import EpsStar

    grid = EpsStar(eps_floor=1 / 255, censored=0.0, search="descent")
    assert not grid.is_censored(1 / 255)
    assert EpsStar(eps_floor=1 / 255, censored=12.5, search="descent").is_censored(1 / 255)
    assert EpsStar(eps_floor=1 / 255, search="descent").is_censored(1 / 255)  # a card without the share: as before
    assert not EpsStar(eps_floor=1 / 255, censored=12.5, search="descent").is_censored(2 / 255)


def test_the_board_says_whether_median_eps_star_tells_the_bnns_of_one_twin_apart(tmp_path: Path) -> None:
    # the shipped cards without their eps* intervals, three standard BNNs given one (in 1/255)
    import shutil

    shipped = Path(__file__).resolve().parents[1] / "model_info" / "cifar10" / "Linf"
    folder = tmp_path / "model_info" / "cifar10" / "Linf"
    folder.mkdir(parents=True)
    for path in [*shipped.glob("*.json"), *shipped.glob("*_examples.npz")]:
        shutil.copy(path, folder)
    for path in folder.glob("*.json"):  # no interval but the ones this test gives
        card = json.loads(path.read_text())
        if card.get("eps_star"):
            card["eps_star"].pop("median_correct_ci95", None)
            path.write_text(json.dumps(card))

    def board(intervals: dict[str, tuple[float, float]]) -> str:
        for name, (low, high) in intervals.items():
            card = json.loads((folder / f"{name}.json").read_text())
            card["eps_star"].update(search="descent", eps_floor=1e-3 / 255, n_correct=400, censored=0.0,
                                    median_correct=(low + high) / 2 / 255,
                                    median_correct_ci95=[low / 255, high / 255])
            (folder / f"{name}.json").write_text(json.dumps(card))
        result = CliRunner().invoke(leaderboard_app, ["table", "--model-info", str(tmp_path / "model_info"),
                                                      "--no-per-attack"])
        assert result.exit_code == 0, result.output
        return " ".join(result.output.split())

    text = board({"resnet20_bnn": (0.01, 0.03), "resnet20_xnor": (0.02, 0.05), "resnet20_dorefa": (0.04, 0.09)})
    assert ("Median eps\\* tells apart 1 of the 3 pairs of the 3 BNNs that share the FP twin `resnet20_fp` "
            "(95% intervals disjoint: `resnet20_bnn` < `resnet20_dorefa`); the other pairs' intervals overlap.") in text
    build_site(tmp_path / "model_info", tmp_path / "site", "png")  # the site's board says the same
    page = " ".join((tmp_path / "site" / "index.html").read_text().split())
    assert ("Median eps* tells apart 1 of the 3 pairs of the 3 BNNs that share the FP twin <code>resnet20_fp</code> "
            "(95% intervals disjoint: <code>resnet20_bnn</code> &lt; <code>resnet20_dorefa</code>)") in page
    text = board({"resnet20_dorefa": (0.02, 0.04)})  # now every pair overlaps
    assert ("Median eps\\* does not tell apart the 3 BNNs that share the FP twin `resnet20_fp`: their 95% intervals "
            "all overlap.") in text
    assert "resnet20_fp_at" not in text.split("Median eps\\*")[1]  # the AT BNNs' cards hold no interval: not named


def test_an_interval_not_fooled_up_to_eps_max_lies_above_every_finite_one() -> None:
    from arbibench.leaderboard.eps_star import eps_star_separation

    text = eps_star_separation([("a", "fp", 0.01, 0.02), ("b", "fp", None, None), ("c", "fp", 0.015, None)])
    # a < b; c reaches up to "inf", so it overlaps both a and b
    assert "tells apart 1 of the 3 pairs" in text and "disjoint: `a` < `b`)" in text
    assert eps_star_separation([("a", "fp", 0.01, 0.02)]) == ""  # one BNN of a twin: nothing to tell apart
