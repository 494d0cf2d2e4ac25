"""The leaderboard as GitHub markdown, for a README or a paper's supplement: the same ranking as the site.

RobustBench keeps its leaderboards as markdown tables beside the code; ``arbibench leaderboard table`` prints one
per (dataset, threat model) from the model cards, so a README's numbers are regenerated rather than retyped.
``arbibench leaderboard markdown`` writes the whole ``LEADERBOARD.md``: these tables, the zoo table and where the
numbers come from. Like the rest of the leaderboard this reads cards only: which checkpoints the zoo pins now comes in
as a plain mapping, never from the zoo registry (which loads torch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from arbibench.cards import CheckpointCard, CorruptionCard, DeployCheckCard, GridCheckCard
from arbibench.leaderboard.cards import ModelCard, order_families
from arbibench.leaderboard.deploy import deploy_markdown
from arbibench.leaderboard.eps_star import eps_star_bracket_text, eps_star_median_text, eps_star_separation_text
from arbibench.leaderboard.grid import GRID_TITLE, grid_markdown
from arbibench.leaderboard.ranking import Board, protocol_size

DASH = "-"


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{value:.1f}%"


def _ratio(value: float | None, digits: int = 3) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def summary_markdown(board: Board) -> str:
    """One row per model in rank order: ACC, RS per family and overall, AutoAttack, median eps* with its interval and
    its [certified, attacked] bracket, worst case, flags.

    A model the gradient-masking checks flagged gets a warning sign beside its rank, as on the site."""
    families = board.families
    header = ["rank", "model", "method", "protocol", "ACC", *[f"RS {f}" for f in families], "RS all", "RS_mean all",
              "AutoAttack", "median eps*, correct images [95% CI]", "median eps* [certified, attacked]", "worst case",
              "flags"]
    lines = [_row(header), _row(["---", "---", "---", "---", *["---:"] * (len(header) - 5), "---"])]
    mixed = len(board.sizes) > 1
    for ranked in board.rows:
        card = ranked.card
        size = protocol_size(card)
        aa = card.autoattack_acc
        if aa is None and "autoattack" in card.attacks:
            aa = card.attacks["autoattack"].acc_star
        lines.append(_row([
            f"{ranked.rank}{' ⚠' if card.flags else ''}{' †' if mixed and size != board.sizes[0] else ''}",
            f"`{card.name}`",
            card.method or DASH,
            size,
            _pct(card.clean_acc),
            *[_ratio(card.rs.get(f)) for f in families],
            _ratio(card.rs.get("all")),
            _ratio(card.rs_mean.get("all")),
            _pct(aa),
            eps_star_median_text(card),
            eps_star_bracket_text(card),
            _pct(card.worst_case_acc),
            ", ".join(card.flags) or DASH,
        ]))
    return "\n".join(lines)


def acc_norm_markdown(board: Board) -> str:
    """ACC_norm per attack (columns grouped by family), one row per model in rank order."""
    attacks = [name for name, _ in board.attacks]
    lines = [_row(["model", *attacks]), _row(["---", *["---:"] * len(attacks)])]
    for ranked in board.rows:
        card = ranked.card
        cells = [_ratio(card.attacks[a].acc_norm, 2) if a in card.attacks else DASH for a in attacks]
        lines.append(_row([f"`{card.name}`", *cells]))
    return "\n".join(lines)


def replaced_checkpoints(board: Board, pins: Mapping[str, str]) -> list[str]:
    """Names of the zoo models whose card records a checkpoint sha256 other than the one the zoo now pins (``pins``:
    model name -> sha256): their numbers describe weights that are no longer shipped."""
    out = []
    for ranked in board.rows:
        card, pinned = ranked.card, pins.get(ranked.card.name)
        if pinned is not None and card.checkpoint_sha256 and card.checkpoint_sha256 != pinned:
            out.append(f"`{card.name}`")
    return out


def board_markdown(board: Board, *, per_attack: bool = True, pins: Mapping[str, str] | None = None) -> str:
    """A titled section for one leaderboard: the ranking, then (optionally) ACC_norm per attack."""
    parts = [f"### {board.title} ({', '.join(board.eps_texts) or 'eps not given'})"]
    if board.sizes == ["quick"]:
        parts.append("Quick-variant results (smaller subsets and query budgets; not the full protocol).")
    elif board.sizes == ["eval"]:
        parts.append("Single evaluations (`arbibench eval`, `benchmark()`), each on the images and attacks its user "
                     "chose; not the protocol, so compare them only where their images and attacks agree.")
    elif len(board.sizes) > 1:
        parts.append(f"This ranking mixes protocol sizes: † marks a card ranked among {board.sizes[0]}-protocol "
                     "cards that measured less: a quick-variant card (smaller subsets, 1000 queries: wider intervals "
                     "and weaker black-box attacks) or an `eval` card (one evaluation on the images and attacks its "
                     "user chose); compare within a size.")
    parts.append(summary_markdown(board))
    if separation := eps_star_separation_text([r.card for r in board.rows]):
        parts.append(separation)
    replaced = replaced_checkpoints(board, pins or {})
    if replaced:
        parts.append(f"Measured on checkpoints the zoo has since replaced (rerun the protocol): {', '.join(replaced)}.")
    if per_attack:
        parts += ["ACC_norm per attack:", acc_norm_markdown(board)]
    return "\n\n".join(parts) + "\n"


GENERATED_BY = "arbibench leaderboard markdown --out LEADERBOARD.md"


def _interval(value: float, interval: tuple[float, float] | None) -> str:
    return f"{value:.1f}%" + ("" if interval is None else f" [{interval[0]:.1f}, {interval[1]:.1f}]")


def corruption_markdown(cards: list[CorruptionCard]) -> str:
    """One row per corruptions card, best mCA first: clean accuracy and mCA with 95% intervals, mCA / clean, mCA /
    FP twin, and where the CIFAR-10-C images came from (official, or regenerated with which seed and size)."""
    header = ["model", "method", "clean [95% CI]", "mCA [95% CI]", "mCA / clean", "mCA / FP twin", "CIFAR-10-C"]
    lines = [_row(header), _row(["---", "---", "---:", "---:", "---:", "---:", "---"])]
    for card in sorted(cards, key=lambda c: (c.dataset, -c.corruptions_acc, c.name)):
        ratio, twin = card.corruptions_acc_norm, card.corruptions_acc_vs_fp_twin
        source = "official" if not card.regenerated else (
            f"regenerated, seed {card.corruptions_generator_seed}, {card.n_per_cell or '?'} images per cell")
        lines.append(_row([
            f"`{card.name}`", card.method or DASH, _interval(card.clean_acc, card.clean_acc_interval),
            _interval(card.corruptions_acc, card.corruptions_acc_interval),
            DASH if ratio is None else f"{ratio.value:.3f} [{ratio.ci_low:.3f}, {ratio.ci_high:.3f}]",
            DASH if twin is None else f"{twin.value:.3f} [{twin.ci_low:.3f}, {twin.ci_high:.3f}]",
            source,
        ]))
    return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _protocol_size(cards: list[ModelCard]) -> str:
    """What the cards measured, in their own words: protocol, variant, images per attack family, eps."""
    sizes = sorted({
        (c.protocol or "-", bool(c.quick), tuple((f, c.n_examples[f]) for f in order_families(list(c.n_examples))),
         c.eps_text or "-", c.threat_model)
        for c in cards
    })
    parts = []
    for protocol, quick, n_examples, eps_text, threat in sizes:
        images = ", ".join(f"{n:,} {family}" for family, n in n_examples) or "images not recorded"
        parts.append(f"`{protocol}`{' --quick' if quick else ''} at {threat} {eps_text} ({images} images)")
    return "; ".join(parts)


def _machines(places: Sequence[object], noun: str) -> str:
    """Each machine named in ``places`` (None: not recorded) with how many ``noun`` name it."""
    counts: dict[str, int] = {}
    for where in places:
        key = str(where or "machine not recorded")
        counts[key] = counts.get(key, 0) + 1
    return "; ".join(f"{where} ({_count(n, noun)})" for where, n in sorted(counts.items()))


def _checkpoints(cards: Sequence[ModelCard | CorruptionCard], pins: Mapping[str, str]) -> str:
    """Each result card's checkpoint sha256 (first 12 hex digits) and whether the zoo still pins those bytes."""
    parts = []
    for card in sorted(cards, key=lambda c: c.name):
        sha = card.checkpoint_sha256
        if not sha:
            parts.append(f"`{card.name}` (no sha256 recorded)")
        elif pins.get(card.name, sha) == sha:
            parts.append(f"`{card.name}` {sha[:12]}")
        else:
            parts.append(f"`{card.name}` {sha[:12]} (replaced: the zoo now pins {pins[card.name][:12]})")
    return ", ".join(parts)


def provenance_markdown(boards: list[Board], checkpoint_cards: Mapping[str, CheckpointCard],
                        pins: Mapping[str, str], date: str,
                        corruption_cards: list[CorruptionCard] | None = None, model_info: str = "model_info") -> str:
    """One dated paragraph: which cards, which protocol size, which checkpoints (sha256), trained on what."""
    corruption_cards = corruption_cards or []
    cards = [r.card for b in boards for r in b.rows]
    replaced = [c for c in cards if c.checkpoint_sha256 and pins.get(c.name, c.checkpoint_sha256)
                != c.checkpoint_sha256]
    current = ("every card measured the checkpoint the zoo pins now" if not replaced else
               f"{_count(len(replaced), 'card')} measured a checkpoint the zoo has since replaced (rerun the protocol)")
    minutes = sum(c.seconds or 0.0 for c in cards) / 60
    return (
        f"Generated on {date} by `{GENERATED_BY}` from {_count(len(cards), 'result card')} in `{model_info}/` and "
        f"{_count(len(checkpoint_cards), 'checkpoint card')} in `arbibench/models/checkpoints/`. "
        f"Protocol: {_protocol_size(cards) or 'no cards'}. "
        f"Checkpoints measured (sha256, first 12 hex digits; the cards hold all 64): {_checkpoints(cards, pins)}; "
        f"{current}. The result cards record {minutes:.0f} min of attack time in all, computed on: "
        f"{_machines([c.machine for c in cards], 'card') or '-'}; the checkpoint cards record where each model was "
        f"trained: {_machines([c.trained_on for c in checkpoint_cards.values()], 'model') or '-'}."
        + ("" if not corruption_cards else
           f" Common corruptions: {_count(len(corruption_cards), 'card')} in `{model_info}/`, checkpoints "
           f"{_checkpoints(corruption_cards, pins)}.")
    )


def leaderboard_document(boards: list[Board], zoo_table: str, checkpoint_cards: Mapping[str, CheckpointCard],
                         pins: Mapping[str, str], date: str,
                         corruption_cards: list[CorruptionCard] | None = None,
                         deploy_cards: list[DeployCheckCard] | None = None,
                         grid_cards: list[GridCheckCard] | None = None, model_info: str = "model_info") -> str:
    """The whole ``LEADERBOARD.md``: every leaderboard, the corruptions, deploy-check and grid-check tables (each
    only where such cards exist), the zoo table and the provenance paragraph, all from cards (read from the folder
    the folder named ``model_info``, as the page names it)."""
    corruptions = [] if not corruption_cards else [
        "## Common corruptions",
        "Accuracy under CIFAR-10-C's 15 corruptions x 5 severities: mCA is the mean over the 75 cells (RobustBench's "
        "`corruptions_acc`); a regenerated set is not the official files, so its numbers are not comparable digit for "
        "digit with RobustBench's.",
        corruption_markdown(corruption_cards),
    ]
    deployed = [] if not deploy_cards else [
        "## The deployed network",
        "Does robustness measured on the float simulation hold for the bit-packed network that ships "
        "(`arbibench protocol deploy-check`, on the quick protocol's images)? Clean agreement: the share of images "
        "both predict alike (zero padding; +1 padding as on hardware without zero padding). Transfer: of the "
        "simulation's successful adversarial examples, the share that also fool the deployed network, for the attack "
        "where it is lowest (Wilson 95%). Direct: Square, HSJA and RayS run against each network on the same images, "
        "ACC* of the deployed minus the simulation in points (paired 95% bootstrap).",
        deploy_markdown(deploy_cards, pins),
    ]
    grid = [] if not grid_cards else [
        f"## {GRID_TITLE}",
        "Does robustness measured on float inputs hold on the 8-bit images (pixels k/255) a camera, a PNG file or a "
        f"deployed first layer gives the network (`arbibench protocol grid-check --model-info {model_info}`, on the "
        "first test images)? Per eps: ACC* in float → on the uint8 grid (robust only if neither the attack run on the "
        "grid nor the float example rounded to 8 bits fools it), the paired difference grid - float in points with "
        "its 95% bootstrap interval, and the share of the float adversarial examples that still fool once rounded to "
        "8 bits (of how many the float attack found).",
        grid_markdown(grid_cards, pins),
    ]
    parts = [
        "# arbibench leaderboard",
        f"<!-- Generated by `{GENERATED_BY}` from the model cards; do not edit by hand. "
        "tests/test_leaderboard_file.py regenerates it and fails when this file differs. -->",
        "Ranked by RS (the sum of ACC_norm over the protocol's attacks). A ⚠ beside the rank marks a model the "
        "gradient-masking checks flagged: its RS may come from attacks that its gradients mislead, so read the "
        "AutoAttack and worst-case columns beside it. The provenance paragraph at the end says which images and "
        "checkpoints the numbers measured.",
        "## Adversarial robustness",
        *[board_markdown(b, pins=pins).rstrip("\n") for b in boards],
        *corruptions,
        *deployed,
        *grid,
        "## Model zoo",
        "Clean accuracy, training time and recipe of every shipped checkpoint, from its card (`arbibench zoo table`); "
        "the goal is the zoo's clean-accuracy target for the method.",
        zoo_table.rstrip("\n"),
        "## Provenance",
        provenance_markdown(boards, checkpoint_cards, pins, date, corruption_cards, model_info),
    ]
    return "\n\n".join(parts) + "\n"


README_BEGIN = "<!-- top rows of LEADERBOARD.md -->"
README_END = "<!-- end of top rows -->"


ZOO_BEGIN = "<!-- zoo table of arbibench zoo -->"
ZOO_END = "<!-- end of zoo table -->"
DEPLOY_BEGIN = "<!-- deploy checks of model_info -->"
DEPLOY_END = "<!-- end of deploy checks -->"


def with_block(readme: str, begin: str, end: str, body: str) -> str:
    """``readme`` with the text between the markers ``begin`` and ``end`` replaced by ``body``; unchanged without the
    markers (they are optional, the top-rows markers are not), an error with only one of them or with several."""
    begins, ends = readme.count(begin), readme.count(end)
    if begins == ends == 0:
        return readme
    if begins != 1 or ends != 1:
        raise ValueError(f"README holds {begins} {begin} and {ends} {end}; keep one of each around the generated "
                         "text, or neither")
    head, rest = readme.split(begin)
    return head + begin + "\n" + body.rstrip("\n") + "\n" + end + rest.split(end)[1]


def with_top_rows(readme: str, boards: list[Board], n: int = 3) -> str:
    """``readme`` with the table between its two markers replaced by the header and first ``n`` rows of the first
    leaderboard's ranking, exactly as LEADERBOARD.md holds them; a README without both markers is an error."""
    if readme.count(README_BEGIN) != 1 or readme.count(README_END) != 1:
        raise ValueError(f"README must hold the markers {README_BEGIN} and {README_END} once each, around the "
                         "leaderboard excerpt")
    if not boards:
        raise ValueError("no leaderboard to take top rows from: the card folder holds no attack cards")
    return with_block(readme, README_BEGIN, README_END, "\n".join(summary_markdown(boards[0]).splitlines()[: 2 + n]))
