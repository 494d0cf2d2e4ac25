"""HTML for the site: the leaderboard index and one page per model, as self-contained strings.

Every piece of card text passes through :func:`esc` on its way in, and links from cards are kept only when they are
http(s); the single inline script is pinned by hash in a Content-Security-Policy, so even a missed escape could not
run a script injected through a card.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import re
from importlib import resources
from urllib.parse import urlsplit

from arbibench.cards import shipped_sha256, stale_checkpoint
from arbibench.leaderboard.cards import ModelCard
from arbibench.leaderboard.eps_star import eps_star_bracket_text, eps_star_median_text, eps_star_separation_text
from arbibench.leaderboard.examples import ExampleSet
from arbibench.leaderboard.figures import FigureFile
from arbibench.leaderboard.ranking import Board, Ranked, protocol_size, slug

SIZE_LABELS = {"full": "full protocol", "quick": "quick protocol", "eval": "single evaluations"}

FAMILY_HINTS = {
    "white-box": "attacks that use the model's gradients",
    "black-box": "attacks that only query the model's outputs",
    "transfer": "adversarial examples made on another model",
}


def esc(value: object) -> str:
    """Text (or a number) made safe for HTML content and quoted attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


def safe_url(url: str | None) -> str | None:
    """The link if it is http(s) — never ``javascript:`` or ``data:`` from a card."""
    if not url:
        return None
    parts = urlsplit(url.strip())
    return url.strip() if parts.scheme in ("http", "https") and parts.netloc else None


def _static(name: str) -> str:
    return resources.files("arbibench.leaderboard").joinpath("static").joinpath(name).read_text(encoding="utf-8")


def page(title: str, body: str, script: str | None = None) -> str:
    """A complete HTML document with inline CSS (and optional inline script); nothing is loaded from the network."""
    csp = "object-src 'none'; base-uri 'none'; form-action 'none'; "
    if script:
        digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
        csp += f"script-src 'sha256-{digest}'"
    else:
        csp += "script-src 'none'"
    tail = f"<script>{script}</script>\n" if script else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{esc(csp)}\">\n"
        f"<title>{esc(title)}</title>\n<style>\n{_static('style.css')}</style>\n</head>\n<body>\n"
        f"{body}\n{tail}</body>\n</html>\n"
    )


NONE = "<span class='none'>\u2013</span>"


def pct(value: float | None) -> str:
    return "<span class=\"none\">\u2013</span>" if value is None else f"{value:.2f}"


def ratio(value: float | None, digits: int = 3) -> str:
    return "<span class=\"none\">\u2013</span>" if value is None else f"{value:.{digits}f}"


def tip(label: str, text: str, cls: str = "tag") -> str:
    """A label that shows ``text`` on hover or keyboard focus (already-escaped inputs)."""
    return (
        f"<span class=\"{cls} tip\" tabindex=\"0\">{label}"
        f"<span class=\"tip-text\" role=\"tooltip\">{text}</span></span>"
    )


@functools.cache
def _shipped() -> dict[str, str]:
    return shipped_sha256()


def stale_note(card: ModelCard) -> str | None:
    """Why the card may describe weights other than the checkpoint shipped under its name (None: it does not)."""
    return stale_checkpoint(card, _shipped())


def badges(card: ModelCard) -> str:
    """Flags with their meaning, plus the stale-checkpoint / unreliable / quick / extra-data marks."""
    out = []
    stale = stale_note(card)
    if stale:
        out.append(tip("stale checkpoint", esc(stale), "tag unreliable"))
    if card.unreliable:
        out.append(tip("unreliable", esc(card.footnote or "The evaluation of this model is marked unreliable."),
                       "tag unreliable"))
    for name, meaning in card.flags.items():
        out.append(tip(esc(name), esc(meaning), "tag flag"))
    if card.quick:
        out.append(tip("quick", "Evaluated with the quick protocol (fewer images or attack iterations): the "
                       "numbers are noisier and may overstate robustness."))
    if card.additional_data:
        out.append(tip("extra data", "Trained with data beyond the dataset's own training set."))
    return "".join(out) or "<span class=\"none\">\u2013</span>"


def model_href(board: Board, card: ModelCard) -> str:
    """Site-relative path of a model page."""
    return f"models/{board.key}/{slug(card.name)}.html"


def _num_cell(value: float | None, text: str, bar: float | None = None) -> str:
    data = "" if value is None else f"{value:.6g}"
    style = f" style=\"--p:{max(0.0, min(100.0, bar)):.1f}%\"" if bar is not None else ""
    cls = "num bar" if bar is not None else "num"
    return f"<td class=\"{cls}\" data-value=\"{data}\"{style}>{text}</td>"


def masking_mark(card: ModelCard) -> str:
    """A mark beside the rank of a model the gradient-masking checks flagged: its rank may reflect masking."""
    if not card.flags:
        return ""
    names = ", ".join(card.flags)
    return (f" <span class=\"masking\" title=\"Gradient-masking checks raised {esc(names)}: this rank may reflect "
            f"masked gradients rather than robustness.\" aria-label=\"flagged: {esc(names)}\">\u26a0</span>")


def _row(board: Board, ranked: Ranked, families: list[str], show_aa: bool, max_rs: float,
         show_eps_star: bool = False) -> str:
    card = ranked.card
    size = protocol_size(card)
    mixed_mark = (f" <span class=\"mixed\" title=\"A card that measured less than the {board.sizes[0]}-protocol "
                  "cards it is ranked among (quick: smaller subsets and query budgets; eval: one evaluation on the "
                  "images and attacks its user chose), so compare it within its size.\">\u2020</span>"
                  if len(board.sizes) > 1 and size != board.sizes[0] else "")
    medal = f"<span class=\"medal m{ranked.rank}\">{ranked.rank}</span>" if ranked.rank <= 3 else str(ranked.rank)
    medal += masking_mark(card)
    who = ", ".join(esc(x) for x in (card.authors, card.venue) if x)
    bits = (f"W{card.bits_weights}/A{card.bits_activations}" if card.bits_weights and card.bits_activations else "")
    search = " ".join(x for x in (card.name, card.method, card.architecture, card.authors, card.venue) if x)
    who_html = f"<span class='who'>{who}</span>" if who else ""
    bits_html = f" <span class='tag'>{bits}</span>" if bits else ""
    cells = [
        f"<td class=\"rank\" data-value=\"{ranked.rank}\">{medal}</td>",
        f"<td class=\"model\" data-value=\"{esc(card.name)}\"><a href=\"{esc(model_href(board, card))}\">"
        f"{esc(card.name)}</a>{who_html}</td>",
        f"<td data-value=\"{esc(card.method)}\">{esc(card.method) or NONE}</td>",
        f"<td data-value=\"{esc(card.architecture)}\">{esc(card.architecture)}{bits_html}</td>",
        f"<td class=\"size\" data-value=\"{size}\">{size}{mixed_mark}</td>",
        _num_cell(card.clean_acc, pct(card.clean_acc), card.clean_acc),
    ]
    for fam in families:
        value = card.rs_mean.get(fam)
        cells.append(_num_cell(value, ratio(value)))
    rs = card.rs["all"]
    cells.append(_num_cell(rs, f"<strong>{rs:.2f}</strong>", 100.0 * rs / max_rs if max_rs > 0 else 0.0))
    if show_aa:
        cells.append(_num_cell(card.autoattack_acc, pct(card.autoattack_acc)))
    if show_eps_star:
        cells.append(_num_cell(card.eps_star_median[0], eps_star_median_text(card, interval=False)))
    cells.append(_num_cell(card.worst_case_acc, pct(card.worst_case_acc)))
    cells.append(f"<td class=\"flags\" data-value=\"{len(card.flags)}\">{badges(card)}</td>")
    return (f"<tr data-search=\"{esc(search)}\" data-name=\"{esc(card.name)}\" data-size=\"{size}\">"
            f"{''.join(cells)}</tr>")


def _label(text: str) -> str:
    """``"ACC_norm|white-box mean"`` -> a header with a small second line."""
    head, _, sub = text.partition("|")
    return esc(head) + (f"<small>{esc(sub)}</small>" if sub else "")


def _header(families: list[str], board: Board, show_aa: bool, show_eps_star: bool = False) -> str:
    n = len(board.attacks)
    cols = [
        ("Rank", "num", "ascending", "Rank by RS over all attacks; ties share a rank. \u26a0: the gradient-masking "
         "checks flagged the model, so its rank may reflect masking.", "rank"),
        ("Model", "text", "ascending", "Model name; click for its full card and adversarial examples.", "model"),
        ("Method", "text", "ascending", "Binarization method.", "method"),
        ("Backbone", "text", "ascending", "Architecture, with weight/activation bit widths.", "backbone"),
        ("Protocol", "text", "ascending", "The protocol size the card measured: full (the preset's subsets and "
         "budgets), quick (the laptop variant) or eval (one evaluation, no protocol). \u2020: a card ranked among "
         "cards of a larger size.", "size"),
        ("ACC", "num", "descending", "Clean accuracy (%).", "acc"),
    ]
    for fam in families:
        hint = FAMILY_HINTS.get(fam, f"{fam} attacks")
        cols.append((f"ACC_norm|{fam} mean", "num", "descending",
                     f"Mean ACC_norm = ACC*/ACC over the {fam} attacks ({hint}).", f"norm-{fam}"))
    cols.append(("RS", "num", "descending", f"Robustness score: sum of ACC_norm over all {n} attacks.", "rs"))
    if show_aa:
        cols.append(("Auto|Attack", "num", "descending", "Robust accuracy (%) under standard AutoAttack "
                     "(RobustBench's headline number).", "aa"))
    if show_eps_star:
        cols.append(("median|\u03b5*", "num", "descending", "Median over the correctly classified images of the "
                     "smallest perturbation at which a verified example fooled the image (eps*): separates models "
                     "that all reach 0% at the headline \u03b5. \u2264: fooled even at the search's floor "
                     "(censored); 'all images': an older card's median over every image, misclassified ones at 0.",
                     "eps-star"))
    cols.append(("Worst|case", "num", "descending", "Robust accuracy (%) under the strongest attack for each "
                 "image: an image counts only if it survives every attack.", "worst"))
    cols.append(("Flags", "num", "descending", "Warnings from the gradient-masking checks; hover for meaning.",
                 "flags"))
    out = []
    for label, kind, first, title, key in cols:
        cls = "sortable num" if kind == "num" and key not in ("rank", "flags") else "sortable"
        sort = " aria-sort=\"descending\"" if key == "rs" else ""
        out.append(f"<th class=\"{cls}\" data-type=\"{kind}\" data-first=\"{first}\" data-col=\"{esc(key)}\" "
                   f"title=\"{esc(title)}\"{sort}>{_label(label)}</th>")
    return "<tr>" + "".join(out) + "</tr>"


def _figure(fig: FigureFile, prefix: str = "") -> str:
    shown = "svg" if "svg" in fig.formats else "png"
    links = "".join(f"<a href=\"{prefix}{esc(fig.stem)}.{f}\" download>{f.upper()}</a>" for f in fig.formats)
    return (f"<figure><img src=\"{prefix}{esc(fig.stem)}.{shown}\" alt=\"{esc(fig.caption)}\" loading=\"eager\">"
            f"<figcaption>{esc(fig.caption)} <span class=\"dl\">{links}</span></figcaption></figure>")


def _board_section(board: Board, figures: list[FigureFile]) -> str:
    families = board.families
    show_aa = any(r.card.autoattack_acc is not None for r in board.rows)
    show_eps_star = any(r.card.eps_star_median[1] is not None for r in board.rows)
    max_rs = max(r.card.rs["all"] for r in board.rows)
    table_id = f"board-{board.key}"
    attacks = ", ".join(f"{esc(a)} <span class=\"none\">({esc(f)})</span>" for a, f in board.attacks)
    eps = ", ".join(esc(t) for t in board.eps_texts)
    rows = "\n".join(_row(board, r, families, show_aa, max_rs, show_eps_star) for r in board.rows)
    n_cols = 9 + len(families) + int(show_aa) + int(show_eps_star)
    size_options = "".join(f"<option value=\"{s}\">{SIZE_LABELS[s]}</option>" for s in board.sizes)
    figs = "".join(_figure(f) for f in figures if f.board == board.key and f.model is None)
    eps_html = f" \u00b7 \u03b5 = {eps}" if eps else ""
    separation = eps_star_separation_text([r.card for r in board.rows])
    # the markdown sentence as HTML: `name` as code, the escaped eps\* as eps*
    separation_html = ""
    if separation:
        sentence = re.sub(r"`([^`]+)`", r"<code>\1</code>", esc(separation)).replace("\\*", "*")
        separation_html = f'<p class="lede">{sentence}</p>'
    return f"""<section class="panel" id="{esc(board.key)}">
<h2>{esc(board.title)}{eps_html}</h2>
<p class="lede">{len(board.rows)} model{'s' * (len(board.rows) != 1)}, ranked by RS over {len(board.attacks)} attacks: \
{attacks}.</p>
<div class="toolbar"><input class="search" type="search" placeholder="Search models, methods, backbones\u2026" \
aria-label="Search the {esc(board.title)} leaderboard" data-table="{table_id}">\
<select class="size-filter" data-table="{table_id}" aria-label="Protocol size shown">\
<option value="">all sizes</option>{size_options}</select>\
<span class="count" data-table="{table_id}"></span></div>
<div class="table-scroll board-scroll"><table class="board" id="{table_id}">
<thead>{_header(families, board, show_aa, show_eps_star)}</thead>
<tbody>
{rows}
<tr class="empty" hidden><td colspan="{n_cols}">No model matches the search.</td></tr>
</tbody></table></div>
{separation_html}<div class="figs">{figs}</div>
</section>"""


def index_html(
    boards: list[Board], figures: list[FigureFile], n_cards: int, version: str, corruptions: str = "",
    corruption_boards: tuple[tuple[str, str], ...] = (),
) -> str:
    """The leaderboard page: one sortable, searchable table per (dataset, threat model), then the figures.

    ``corruptions`` is the HTML of the common-corruptions panels, ``corruption_boards`` their (anchor, title) pairs.
    """
    nav = "".join(f"<a href=\"#{esc(b.key)}\">{esc(b.title)}</a>" for b in boards)
    nav += "".join(f"<a href=\"#{esc(key)}\">{esc(title)}</a>" for key, title in corruption_boards)
    overview = "".join(_figure(f) for f in figures if f.board is None)
    sections = "\n".join(_board_section(b, figures) for b in boards)
    body = f"""<header class="top"><div class="wrap">
<h1>ARBiBench leaderboard</h1>
<p>Adversarial robustness of binarized neural networks. Each model is attacked with a fixed set of white-box and \
black-box attacks; RS (robustness score) sums, over the attacks, the share of clean accuracy that survives.</p>
<nav class="boards">{nav}<a href="#metrics">Metrics</a></nav>
</div></header>
<main class="wrap">
{sections}
{corruptions}
<section class="panel" id="overview"><h2>Accuracy against robustness</h2>
<p class="lede">Every leaderboard at a glance.</p><div class="figs">{overview}</div></section>
<section class="panel" id="metrics"><h2>Metrics</h2><dl class="metrics">
<div><dt>ACC</dt><dd>Clean accuracy (%) on the evaluated test images.</dd></div>
<div><dt>ACC*</dt><dd>Robust accuracy (%) under one attack at the stated budget \u03b5.</dd></div>
<div><dt>ACC_norm</dt><dd>ACC*/ACC: the share of clean accuracy that survives an attack, comparable across models \
of different accuracy.</dd></div>
<div><dt>RS</dt><dd>Robustness score: the sum of ACC_norm over the N attacks (higher is more robust).</dd></div>
<div><dt>RS_mean</dt><dd>RS/N; shown per attack family in the ACC_norm columns.</dd></div>
<div><dt>Worst case</dt><dd>Robust accuracy (%) when each image faces the attack that breaks it, if any.</dd></div>
</dl></section>
</main>
<footer class="wrap">Built by arbibench {esc(version)} from {n_cards} model card{'s' * (n_cards != 1)}. \
This site works offline: open index.html or run <code>arbibench leaderboard serve</code>.</footer>"""
    return page("ARBiBench leaderboard", body, _static("table.js"))


def _fields(card: ModelCard, board: Board) -> str:
    twin = board.find(card.fp_twin)
    twin_html = (f"<a href=\"{esc(slug_of(twin))}.html\">{esc(twin.name)}</a>" if twin is not None
                 else esc(card.fp_twin))
    bits = (f"weights {card.bits_weights} bit, activations {card.bits_activations} bit"
            if card.bits_weights or card.bits_activations else None)
    rows: list[tuple[str, str | None]] = [
        ("Dataset", esc(card.dataset)),
        ("Threat model", esc(card.threat_model)),
        ("Budget \u03b5", esc(card.eps_text or (f"{card.eps:g}" if card.eps is not None else None)) or None),
        ("Method", esc(card.method) or None),
        ("Method paper", esc(card.method_paper) or None),
        ("Backbone", esc(card.architecture) or None),
        ("Bit widths", esc(bits) or None),
        ("Forward passes", esc(card.number_forward_passes) or None),
        ("Extra training data", "yes" if card.additional_data else "no"),
        ("Protocol", (esc(card.protocol) + (" (quick)" if card.quick else "")) if card.protocol else None),
        ("Reported robust accuracy", pct(card.reported) if card.reported is not None else None),
        ("Full-precision twin", twin_html or None),
        # what the numbers were measured on, for whoever reruns them: the network that answered, the weights, where
        ("Inference", esc(card.inference or "simulation")),
        ("Checkpoint sha256", f"<code>{esc(card.checkpoint_sha256)}</code>" if card.checkpoint_sha256 else None),
        ("Computed on", esc(card.machine) or None),
        ("Attack time", f"{card.seconds / 3600:.2f} h" if card.seconds else None),
    ]
    return "<dl class=\"fields\">" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows if v) + "</dl>"


def slug_of(card: ModelCard) -> str:
    return slug(card.name)


def _attack_table(card: ModelCard) -> str:
    rows = []
    for a in sorted(card.attacks.values(), key=lambda a: (card.families.index(a.family), a.name)):
        ci = f"{a.ci_low:.2f}\u2013{a.ci_high:.2f}" if a.ci_low is not None and a.ci_high is not None else None
        rows.append(
            f"<tr><td>{esc(a.name)}</td><td>{esc(a.family)}</td><td class=\"num\">{pct(a.acc_star)}</td>"
            f"<td class=\"num\">{esc(ci) if ci else pct(None)}</td><td class=\"num\">{ratio(a.acc_norm)}</td>"
            f"<td class=\"num\">{esc(a.n_examples) or pct(None)}</td>"
            f"<td class=\"num\">{pct(None) if a.median_queries is None else f'{a.median_queries:g}'}</td></tr>"
        )
    return ("<div class=\"table-scroll\"><table><thead><tr><th>Attack</th><th>Family</th>"
            "<th class=\"num\">ACC* (%)</th>"
            "<th class=\"num\">95% CI</th><th class=\"num\">ACC_norm</th><th class=\"num\">Images</th>"
            "<th class=\"num\">Median queries</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def _rs_table(card: ModelCard) -> str:
    keys = [k for k in card.rs if k != "all"] + ["all"]
    rows = "".join(
        f"<tr><td>{esc(k)}</td><td class=\"num\">{ratio(card.rs.get(k), 2)}</td>"
        f"<td class=\"num\">{ratio(card.rs_mean.get(k))}</td></tr>" for k in keys
    )
    return ("<div class=\"table-scroll\"><table><thead><tr><th>Attack family</th><th class=\"num\">RS</th>"
            "<th class=\"num\">RS_mean</th></tr></thead><tbody>" + rows + "</tbody></table></div>")


def _sweep_table(card: ModelCard) -> str:
    rows = "".join(
        f"<tr><td>{esc(p.attack)}</td><td>{esc(p.eps_text or f'{p.eps:g}')}</td><td class=\"num\">{pct(p.acc_star)}"
        "</td></tr>" for p in sorted(card.sweep, key=lambda p: (p.attack, p.eps))
    )
    return ("<div class=\"table-scroll\"><table><thead><tr><th>Attack</th><th>\u03b5</th><th class=\"num\">ACC* (%)"
            "</th></tr></thead><tbody>" + rows + "</tbody></table></div>")


def _examples(examples: ExampleSet, classes: tuple[str, ...] | None, prefix: str) -> str:
    def name(k: int) -> str:
        return esc(classes[k]) if classes and 0 <= k < len(classes) else f"class {k}"

    tiles = []
    for ex in examples.items:
        fooled = ex.pred_adv != ex.label
        verdict = (f"<span class=\"broken\">fooled</span>: {name(ex.pred_clean)} \u2192 {name(ex.pred_adv)}"
                   if fooled else f"<span class=\"ok\">still correct</span>: {name(ex.pred_adv)}")
        tiles.append(
            f"<div class=\"example\"><div class=\"trio\">"
            f"<div><img src=\"{prefix}{esc(ex.clean)}\" alt=\"clean image, label {name(ex.label)}\">"
            f"<div class=\"cap\">clean \u00b7 {name(ex.label)}</div></div>"
            f"<div><img src=\"{prefix}{esc(ex.adv)}\" alt=\"adversarial image\">"
            "<div class=\"cap\">adversarial</div></div>"
            f"<div><img src=\"{prefix}{esc(ex.perturbation)}\" alt=\"perturbation, amplified\">"
            f"<div class=\"cap\">perturbation \u00d7{ex.amplification:.0f}"
            f"</div></div></div><div class=\"verdict\">{verdict} <span class=\"none\">\u00b7 "
            f"\u2016\u03b4\u2016\u221e = {ex.linf_255}/255</span></div></div>"
        )
    more = f" (the first {len(examples.items)} of {examples.total})" if examples.total > len(examples.items) else ""
    return (f"<p class=\"lede\">Attack: <code>{esc(examples.attack)}</code>{more}. The perturbation is shown around "
            f"mid-grey and stretched to full contrast.</p><div class=\"examples\">{''.join(tiles)}</div>")


def model_html(
    board: Board,
    ranked: Ranked,
    examples: ExampleSet | None,
    classes: tuple[str, ...] | None,
    figures: list[FigureFile],
) -> str:
    """A model's page: headline numbers, every card field, per-attack results, sweep, flags and examples."""
    card = ranked.card
    prefix = "../../"
    link = safe_url(card.link)
    who = " \u00b7 ".join(esc(x) for x in (card.authors, card.venue) if x)
    link_html = f" \u00b7 <a href=\"{esc(link)}\" rel=\"noopener noreferrer\">paper / code</a>" if link else ""
    kpis = [
        ("Rank", f"{ranked.rank} / {len(board.rows)}"),
        ("ACC (clean)", f"{card.clean_acc:.2f}%"),
        ("RS", f"{card.rs['all']:.2f}"),
        ("RS_mean", f"{card.rs_mean['all']:.3f}"),
        ("Worst case", f"{card.worst_case_acc:.2f}%"),
    ]
    if card.autoattack_acc is not None:
        kpis.append(("AutoAttack", f"{card.autoattack_acc:.2f}%"))
    if card.eps_star_median[1] is not None:
        correct_only = card.eps_star_median[2]
        kpis.append(("median \u03b5*" + (", correct images" if correct_only else ""), eps_star_median_text(card)))
        if correct_only:
            kpis.append(("median \u03b5* [certified, attacked]", eps_star_bracket_text(card)))
    kpi_html = "".join(f"<div class='kpi'><div class='k'>{k}</div><div class='v'>{v}</div></div>" for k, v in kpis)
    notes = ""
    stale = stale_note(card)
    if stale:
        notes += f"<div class=\"note\"><strong>Stale checkpoint.</strong> {esc(stale)}</div>"
    if card.unreliable:
        notes += f"<div class=\"note\"><strong>Unreliable evaluation.</strong> {esc(card.footnote)}</div>"
    elif card.footnote:
        notes += f"<div class=\"note\">{esc(card.footnote)}</div>"
    flags = "".join(f"<dt><code>{esc(k)}</code></dt><dd>{esc(v)}</dd>" for k, v in card.flags.items())
    flags_html = (f"<h3>Flags</h3><dl class=\"fields\">{flags}</dl>" if flags
                  else "<h3>Flags</h3><p class=\"lede\">No flags on this card.</p>")
    sweep = f"<section class='panel'><h2>Robust accuracy against \u03b5</h2>{_sweep_table(card)}" if card.sweep else ""
    if sweep:
        curve = [f for f in figures if f.board == board.key and f.stem.rsplit("/", 1)[-1].startswith("eps_curves")]
        sweep += "".join(f"<div class=\"figs\">{_figure(f, prefix)}</div>" for f in curve) + "</section>"
    own = [f for f in figures if f.board == board.key and f.model == card.name]
    if own:
        sweep += ("<section class='panel' id='eps-star'><h2>Robust accuracy from ε*</h2>"
                  + "".join(f"<div class=\"figs\">{_figure(f, prefix)}</div>" for f in own) + "</section>")
    ex_html = (f"<section class=\"panel\" id=\"examples\"><h2>Adversarial examples</h2>"
               f"{_examples(examples, classes, prefix)}</section>") if examples else ""
    body = f"""<header class="top"><div class="wrap">
<div class="crumb"><a href="{prefix}index.html#{esc(board.key)}">\u2190 {esc(board.title)} leaderboard</a></div>
<h1>{esc(card.name)}</h1><p>{who}{link_html}</p>
</div></header>
<main class="wrap">
<section class="panel"><div class="kpis">{kpi_html}</div>{notes}</section>
<section class="panel"><div class="cols"><div class="sub"><h3>Card</h3>{_fields(card, board)}</div>
<div class="sub"><h3>Robustness score per attack family</h3>{_rs_table(card)}{flags_html}</div></div></section>
<section class="panel"><h2>Attacks</h2>{_attack_table(card)}</section>
{sweep}
{ex_html}
</main>
<footer class="wrap">Raw card: <a href="{esc(slug_of(card))}.json">{esc(slug_of(card))}.json</a></footer>"""
    return page(f"{card.name} \u2014 ARBiBench", body)
