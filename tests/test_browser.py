"""The built site in a real headless Chromium: sorting, searching, tooltips, figures and example images.

Drives Debian's ``chromium`` through Playwright (Playwright's own browser download is not needed). Skips when either
is missing, unless ``ARBIBENCH_REQUIRE_BROWSER`` is set (CI sets it), in which case that is a failure.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from test_leaderboard import make_model_info

from arbibench.leaderboard import build_site
from arbibench.leaderboard.serve import make_server

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


@pytest.fixture(scope="module")
def chromium() -> str:
    """The chromium executable; skip (or fail, under ARBIBENCH_REQUIRE_BROWSER) when it or playwright is absent."""
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright Python package (pip install playwright)")
    names = (os.environ.get("ARBIBENCH_CHROMIUM"), "chromium", "chromium-browser")
    exe = next((found for found in (shutil.which(n) for n in names if n) if found), None)
    if exe is None:
        missing.append("a chromium executable (apt-get install -y chromium)")
    if missing:
        message = f"the browser test needs {' and '.join(missing)}"
        if os.environ.get("ARBIBENCH_REQUIRE_BROWSER"):
            pytest.fail(f"ARBIBENCH_REQUIRE_BROWSER is set but {message}")
        pytest.skip(message)
    return exe


@pytest.fixture(scope="module")
def site_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("browser")
    build_site(make_model_info(root), root / "site", "png,svg")
    server = make_server(root / "site", port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _column(page, table: str, col: str) -> list[float]:  # noqa: ANN001 - playwright Page, imported lazily
    return page.eval_on_selector_all(
        f"#{table} tbody tr:not(.empty):not([hidden])",
        f"""rows => rows.map(r => {{
            const i = [...r.closest('table').tHead.rows[0].cells].findIndex(c => c.dataset.col === '{col}');
            return parseFloat(r.cells[i].dataset.value);
        }})""",
    )


def _visible_names(page, table: str) -> list[str]:  # noqa: ANN001
    return page.eval_on_selector_all(
        f"#{table} tbody tr:not(.empty)", "rows => rows.filter(r => !r.hidden).map(r => r.dataset.name)"
    )


def _check_figures(page) -> None:  # noqa: ANN001 - playwright Page
    """Every figure loaded and has a size; the screenshot shows the page as a visitor first sees it."""
    page.wait_for_function("[...document.images].every(i => i.complete)")
    figures = page.eval_on_selector_all(
        "figure img", "imgs => imgs.map(i => [i.getAttribute('src'), i.naturalWidth, i.clientWidth])"
    )
    srcs = {src for src, *_ in figures}
    assert {"figures/acc_vs_rs.svg", "figures/heatmap_cifar10_Linf.svg",
            "figures/eps_curves_cifar10_Linf.svg"} <= srcs
    assert all(natural > 0 and shown > 0 for _, natural, shown in figures), figures

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "leaderboard.png"), full_page=True)


def _check_sorting(page, table: str) -> None:  # noqa: ANN001 - playwright Page
    """Ranks follow RS; clicking a column header sorts by it, numerically or alphabetically."""
    # Initial order: RS descending, ranks 1..n.
    rs = _column(page, table, "rs")
    assert rs == sorted(rs, reverse=True) and len(rs) == 6
    assert _column(page, table, "rank") == [float(i) for i in range(1, 7)]

    # Clicking RS (already descending) sorts ascending; clicking again restores descending.
    page.click(f"#{table} th[data-col='rs']")
    assert _column(page, table, "rs") == sorted(rs)
    assert page.get_attribute(f"#{table} th[data-col='rs']", "aria-sort") == "ascending"
    page.click(f"#{table} th[data-col='rs']")
    assert _column(page, table, "rs") == sorted(rs, reverse=True)

    # A numeric column sorts numerically (descending first); a text column alphabetically.
    page.click(f"#{table} th[data-col='acc']")
    acc = _column(page, table, "acc")
    assert acc == sorted(acc, reverse=True) and acc != sorted(acc)
    for col in ("aa", "eps-star"):  # RobustBench's headline and median eps* sort like any number
        page.click(f"#{table} th[data-col='{col}']")
        values = _column(page, table, col)
        assert values == sorted(values, reverse=True) and values != sorted(values), col
    page.click(f"#{table} th[data-col='model']")
    names = _visible_names(page, table)
    assert names == sorted(names)


def _check_search(page, table: str) -> None:  # noqa: ANN001 - playwright Page
    """Search keeps only matching rows, and the count says so; clearing restores all."""
    page.fill(f"input.search[data-table='{table}']", "resnet20_bnn")
    assert _visible_names(page, table) == ["resnet20_bnn"]
    assert page.inner_text(f".count[data-table='{table}']") == "1 of 6 models"
    page.fill(f"input.search[data-table='{table}']", "Liu")  # authors match too
    assert sorted(_visible_names(page, table)) == ["resnet20_bireal", "resnet20_reactnet"]
    page.fill(f"input.search[data-table='{table}']", "no such model")
    assert _visible_names(page, table) == [] and page.is_visible(f"#{table} tr.empty")
    page.fill(f"input.search[data-table='{table}']", "")
    assert len(_visible_names(page, table)) == 6


def _check_flag_tip(page, table: str) -> None:  # noqa: ANN001 - playwright Page
    """Flags show their meaning on hover."""
    flag = page.locator(f"#{table} tr[data-name='resnet20_bnn'] .tag.flag").first
    meaning = flag.locator(".tip-text")
    assert not meaning.is_visible()
    flag.hover()
    assert meaning.is_visible() and meaning.inner_text().startswith("The cross-entropy gradient")


def _check_model_page(page, table: str) -> None:  # noqa: ANN001 - playwright Page
    """The model page: card fields, attacks table and clean / adversarial / perturbation images."""
    page.click(f"#{table} tr[data-name='resnet20_bnn'] td.model a")
    page.wait_for_load_state("load")
    assert page.inner_text("h1") == "resnet20_bnn"
    assert page.locator(".example").count() == 6
    page.wait_for_function("[...document.images].every(i => i.complete)")
    sizes = page.eval_on_selector_all(".example img", "imgs => imgs.map(i => i.naturalWidth)")
    assert len(sizes) == 18 and all(w == 128 for w in sizes)
    assert "apgd_dlr" in page.inner_text("main") and "Hubara et al." in page.inner_text("header")
    # the eps*-derived robustness curve against the FP twin's, drawn and loaded
    curve = page.locator("#eps-star figure img")
    assert curve.count() == 1 and curve.evaluate("i => i.naturalWidth") > 100
    page.screenshot(path=str(ARTIFACTS / "leaderboard_model.png"), full_page=True)


def test_site_in_chromium(chromium: str, site_url: str) -> None:
    from playwright.sync_api import sync_playwright

    table = "board-cifar10_Linf"
    outside: list[str] = []
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 900})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("dialog", lambda d: (errors.append(f"dialog: {d.message}"), d.dismiss()))

            def local_only(route):  # noqa: ANN001, ANN202 - the site must need nothing but its own server
                if urlsplit(route.request.url).hostname not in ("127.0.0.1", None, ""):
                    outside.append(route.request.url)
                    return route.abort()
                return route.continue_()

            page.route("**/*", local_only)
            page.goto(site_url, wait_until="load")

            _check_figures(page)
            _check_sorting(page, table)
            _check_search(page, table)
            _check_flag_tip(page, table)
            _check_model_page(page, table)
        finally:
            browser.close()
    assert outside == [], f"the site fetched from outside: {outside}"
    assert errors == [], errors
    assert (ARTIFACTS / "leaderboard.png").stat().st_size > 10_000
