"""The dashboard in a real browser: `specwatch dashboard` serving the sample-logs fixture database,
driven by Playwright in Debian's /usr/bin/chromium (no browser download).

It checks the comparison table and the charts show the expected config names and numbers, the CSV
download, live refresh while a writer adds a run, and that a writer holding the lock never surfaces
as an error. Screenshots of every view go to screenshots/ (git-ignored).

Without chromium this skips locally, but fails under CI (env CI set), where scripts/test.sh
installs it.
"""
from __future__ import annotations

import csv
import io
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from specwatch import store
from test_dashboard_app import ROOT, SWEEP, build_fixture_db, sweep_run_id

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = ROOT / "screenshots"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.browser


def _need(ok: bool, why: str) -> None:
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"{why} (CI installs it: scripts/test.sh)")
        pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="module", autouse=True)
def chromium_present():
    """Before anything starts: skip (locally) or fail (CI) without chromium or playwright."""
    _need(CHROMIUM.exists(), f"{CHROMIUM} not installed (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _need(False, "the playwright package is not installed (pip install -e '.[dev]')")


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    """`specwatch dashboard` on a fresh fixture DB: yields (url, db); stops it with SIGTERM."""
    db = build_fixture_db(tmp_path_factory.mktemp("browser") / "dash.duckdb")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "specwatch.cli", "dashboard", "--db", str(db),
                             "--port", str(port)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _healthy(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"dashboard did not start (rc={proc.poll()}):\n"
                                     f"{proc.stdout.read() if proc.poll() is not None else ''}")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}", db
    finally:
        proc.terminate()            # the launcher forwards SIGTERM to streamlit
        rc = proc.wait(20)
        stopped = time.monotonic() + 10
        while _healthy(port) and time.monotonic() < stopped:
            time.sleep(0.2)
    assert rc == 0, proc.stdout.read()
    assert not _healthy(port), "streamlit outlived the launcher"


@pytest.fixture(scope="module")
def page(dashboard):
    from playwright.sync_api import sync_playwright
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        ctx = browser.new_context(viewport={"width": 1400, "height": 1600}, accept_downloads=True)
        pg = ctx.new_page()
        pg.set_default_timeout(20_000)
        yield pg
        browser.close()


def _open(page, url: str, view: str, ready: str = "refreshes every") -> None:
    """Load one view (tab) by its URL and wait until its closing caption is drawn."""
    page.goto(f"{url}/?view={view.replace(' ', '+')}")
    page.get_by_role("tab", name=view, selected=True).wait_for()
    page.locator("[data-testid=stCaptionContainer]", has_text=ready).first.wait_for()


def _chart_texts(page) -> str:
    """Every text drawn in the page's charts (Streamlit renders Vega-Lite as SVG)."""
    loc = page.locator("[data-testid=stVegaLiteChart] svg text")
    loc.first.wait_for()
    return "\n".join(loc.all_text_contents())


def _cells(page) -> list[str]:
    """The visible cells of the page's data grids (glide's accessible table)."""
    return page.locator("[data-testid=stDataFrame] [role=gridcell]").all_text_contents()


def _wait_cell(page, text: str, timeout_ms: int = 20_000) -> None:
    """Wait until a grid cell reads exactly `text` (glide's accessible table is hidden: attached)."""
    page.locator("[data-testid=stDataFrame] [role=gridcell]", has_text=text).filter(
        has_text=re.compile(f"^{re.escape(text)}$")
    ).first.wait_for(state="attached", timeout=timeout_ms)


def _no_error_on_page(page) -> None:
    assert page.locator("[data-testid=stException]").count() == 0
    text = page.locator("[data-testid=stMain]").inner_text()
    assert "lock" not in text.lower() and "Traceback" not in text


def test_compare_view_renders_table_and_chart(dashboard, page):
    url, _ = dashboard
    _open(page, url, "Compare")
    _wait_cell(page, "eagle3-s3k1")
    cells = _cells(page)
    assert "baseline" in cells and "eagle3-s5k4" in cells
    texts = _chart_texts(page)
    for label in ("eagle3-s3k1 @c1", "eagle3-s5k4 @c1", "eagle3-wrong-aux @c1",
                  "baseline @c1: 100 output tok/s", "accept rate (accepted / proposed drafts)"):
        assert label in texts
    page.screenshot(path=str(SHOTS / "dashboard-compare.png"), full_page=True)

    # Filter in the browser: the s3k1 rows with the fixture's client numbers remain.
    box = page.get_by_label("Filter")
    box.fill("eagle3-s3k1")
    box.press("Enter")
    page.wait_for_function("""() => {
        const cells = [...document.querySelectorAll('[data-testid=stDataFrame] [role=gridcell]')];
        return cells.length && !cells.some(c => c.textContent === 'eagle3-s5k4');
    }""")
    cells = _cells(page)
    assert "190" in cells and "560" in cells                      # output tok/s at c1, c4
    assert any(c.startswith("1.9") for c in cells)                # speedup 190/100
    assert any(c.startswith("1.47") for c in cells)               # speedup 560/380

    with page.expect_download() as dl:
        page.get_by_role("button", name="Download CSV").click()
    rows = list(csv.DictReader(io.StringIO(Path(dl.value.path()).read_text())))
    assert {r["config"] for r in rows} == {"sglang-0.5.23-llama8b-eagle3-s3k1.log", "eagle3-s3k1"}
    assert sorted(float(r["output_tok_s"]) for r in rows if r["output_tok_s"]) == [190.0, 560.0]
    box.fill("")
    box.press("Enter")


def test_other_views_render(dashboard, page):
    url, _ = dashboard
    _open(page, url, "Concurrency")
    texts = _chart_texts(page)
    assert {"eagle3-s3k1", "eagle3-s5k4", "eagle3-wrong-aux"} <= set(texts.split("\n"))
    assert "baseline (1.0×): below it, speculation loses" in texts
    page.screenshot(path=str(SHOTS / "dashboard-concurrency.png"), full_page=True)

    _open(page, url, "Time series")
    assert "seconds since the run's first window" in _chart_texts(page)
    page.screenshot(path=str(SHOTS / "dashboard-timeseries.png"), full_page=True)

    _open(page, url, "Acceptance")
    assert "draft tokens accepted in a verify step" in _chart_texts(page)
    _wait_cell(page, "270")                                       # wrong-aux: 3 x 90 rejections
    page.screenshot(path=str(SHOTS / "dashboard-acceptance.png"), full_page=True)

    _open(page, url, "Findings")
    alerts = page.locator("[data-testid=stAlert]").all_inner_texts()
    assert any("eagle3-wrong-aux @c1" in a and "accept length 1.11" in a for a in alerts)
    page.screenshot(path=str(SHOTS / "dashboard-findings.png"), full_page=True)

    _open(page, url, "SQL", ready="Read-only, row-capped")
    sql = page.locator("[data-testid=stTextArea] textarea")
    sql.fill("SELECT config_name, output_tok_s FROM runs "
             "WHERE config_name = 'eagle3-s5k4' ORDER BY concurrency")
    sql.press("Control+Enter")      # commit the text before pressing the button
    page.get_by_role("button", name="Run query").click()
    page.locator("[data-testid=stCaptionContainer]", has_text="2 row(s)").wait_for()
    _wait_cell(page, "210")
    _wait_cell(page, "342")
    page.screenshot(path=str(SHOTS / "dashboard-sql.png"), full_page=True)
    _no_error_on_page(page)


def test_live_refresh_while_a_writer_works(dashboard, page):
    """A run added by another process shows up without a reload; a held lock shows no error."""
    url, db = dashboard
    _open(page, url, "Compare")
    assert "eagle3-live" not in _cells(page)
    page.locator("[data-testid=stSidebar] [data-testid=stSelectbox]").filter(
        has_text="Auto-refresh").click()
    page.get_by_role("option", name="2 s").click()
    page.locator("[data-testid=stCaptionContainer]", has_text="refreshes every 2 s").first.wait_for()
    with store.writer(db) as con:
        source = con.execute("SELECT source_id FROM run_sources WHERE run_id = ?",
                             [sweep_run_id("eagle3-s3k1", 1)]).fetchone()[0]
        store.upsert_run(con, {"run_id": f"{SWEEP}/eagle3-live/c1", "run_name": "eagle3-live-c1",
                               "origin": "sweep", "sweep_name": SWEEP, "config_name": "eagle3-live",
                               "concurrency": 1, "status": "ok", "output_tok_s": 250.0})
        store.attach_source(con, f"{SWEEP}/eagle3-live/c1", source)
    # the new run appears in table and chart without a reload
    _wait_cell(page, "eagle3-live", timeout_ms=10_000)
    page.locator("[data-testid=stVegaLiteChart] svg text", has_text="eagle3-live @c1"
                 ).first.wait_for(timeout=10_000)

    # Hold the write lock across refreshes (as a sweep's write burst would, only longer): the
    # page says it waits, quietly, and shows no error; then it reads again.
    with store.writer(db):
        page.get_by_text("Waiting for the writer").first.wait_for(timeout=6_000)
        time.sleep(1)
        _no_error_on_page(page)
    page.locator("[data-testid=stCaptionContainer]", has_text="refreshes every 2 s").first.wait_for()
    page.wait_for_timeout(2_500)    # one more refresh after the writer let go
    _no_error_on_page(page)
    assert "eagle3-live" in _cells(page)
    page.screenshot(path=str(SHOTS / "dashboard-live.png"), full_page=True)
