"""`specwatch report --format html`: one self-contained page (issue 32), written by the real CLI
from the dashboard's fixture store (sample logs ingested + a hand-made sweep with repeats, a failed
run, doctor findings) plus GPU energy and /metrics samples set here by hand.

Checks: nothing in the page points elsewhere (no scripts, links, images, fonts or url()), the
verdict table carries every config with its verdict, the energy cells carry the mJ/token and
ratios worked out here from the energy and token counts put in, doctor's reasons and the
environment are there, the size fits an attachment; then the page opened in the real browser
(Debian chromium through Playwright) with every request other than the file itself refused,
checking that each plot drew (visible SVG with marks, its title) and nothing was fetched.
"""
from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from test_dashboard_app import ROOT, SWEEP, SWEEP_CONFIGS, build_fixture_db, sweep_run_id

from specwatch.db import query, store

CHROMIUM = Path("/usr/bin/chromium")
# (config, concurrency) -> (GPU energy J per repeat, output tokens per repeat): mJ/token by hand
ENERGY = {("baseline", 1): (40.0, 400), ("eagle3-s3k1", 1): (25.0, 500),
          ("baseline", 4): (90.0, 1200), ("eagle3-s3k1", 4): (60.0, 1200)}
WANT_MJ = {k: 1000 * j / n for k, (j, n) in ENERGY.items()}           # 100, 50, 75, 50 mJ/token
WANT_RATIO = {1: WANT_MJ[("eagle3-s3k1", 1)] / WANT_MJ[("baseline", 1)],  # 0.50
              4: WANT_MJ[("eagle3-s3k1", 4)] / WANT_MJ[("baseline", 4)]}  # 0.67


def _add_energy_and_samples(db: Path) -> None:
    t0 = dt.datetime(2026, 11, 1, 12, 0, 0)
    with store.writer(db) as con:
        for (cfg, conc), (joules, tokens) in ENERGY.items():
            for rep in range(3):
                con.execute("UPDATE runs SET gpu_energy_j = ?, output_tokens = ?, gpu_energy_gpus = "
                            "'[0]', gpu_energy_method = 'nvml_energy_counter' WHERE run_id = ?",
                            [joules, tokens, sweep_run_id(cfg, conc, rep)])
        rows = []
        for cfg in SWEEP_CONFIGS:
            for conc in (1, 4):
                for k in range(6):
                    at = t0 + dt.timedelta(seconds=k)
                    rows.append((sweep_run_id(cfg, conc), "nvml", at, float(k), "nvml:gpu_power_w",
                                 '{"gpu": "0"}', 300.0 + 10 * k))
                    rows.append((sweep_run_id(cfg, conc), "http://127.0.0.1:30000", at, float(k),
                                 "sglang:spec_accept_length", '{"dp_rank": "0"}', 2.0 + 0.1 * k))
        cols = ["run_id", "endpoint", "sampled_at", "t_s", "name", "labels", "value"]
        store.insert(con, "metric_samples", {c: [r[i] for r in rows] for i, c in enumerate(cols)})


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html")
    db = build_fixture_db(tmp / "fix.duckdb")
    _add_energy_and_samples(db)
    out = tmp / "verdict.html"
    proc = subprocess.run([sys.executable, "-m", "specwatch.cli", "report", "--db", str(db),
                           "--format", "html", "-o", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"wrote .*verdict\.html \(\d+ KB\)", proc.stderr)
    return db, out


class _Refs(HTMLParser):
    """Every tag and every attribute that could load something."""

    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href", "xlink:href", "srcset", "data", "action", "poster") and v \
                    and not v.startswith("#"):
                self.refs.append((tag, k, v))


def test_page_is_self_contained_and_small(page_file):
    _, out = page_file
    text = out.read_text(encoding="utf-8")
    p = _Refs()
    p.feed(text)
    assert p.refs == []
    assert not {"script", "link", "img", "iframe", "object", "embed", "image"} & set(p.tags)
    assert not re.search(r"url\(\s*['\"]?(?!#)", text) and "@import" not in text  # url(#id) only
    assert p.tags.count("svg") >= 6
    assert 20_000 < len(text.encode()) < 600_000


def _table_rows(text: str, sweep: str) -> list[list[str]]:
    section = text.split(f"<h2>sweep {sweep}</h2>", 1)[1].split("</table>", 1)[0]
    rows = []
    for tr in re.findall(r"<tr>(.*?)</tr>", section, re.S):
        rows.append([re.sub(r"<[^>]+>", "", c).strip()
                     for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr, re.S)])
    return rows


def test_verdict_table_energy_reasons_and_environment(page_file):
    db, out = page_file
    text = out.read_text(encoding="utf-8")
    rows = _table_rows(text, SWEEP)
    head, body = rows[0], rows[1:]
    assert head[:6] == ["config", "load", "n", "accept len", "accept rate", "tok/s ± 95%"]
    assert "mJ/tok (vs baseline)" in head and head[-2:] == ["verdict", "why"]
    # every (config, concurrency) of the sweep, with the verdict config_stats gives it
    want = {(r["config"], str(r["concurrency"])): r["verdict"] for r in query.run_sql(
        db, "SELECT config, concurrency, verdict FROM config_stats WHERE sweep_name = ?",
        [SWEEP]).dicts()}
    got = {(r[0].rstrip(" †"), r[1]): r[head.index("verdict")] for r in body}
    assert got == want and {"pays", "loses", "failed", "baseline"} <= set(got.values())
    e = head.index("mJ/tok (vs baseline)")
    cells = {(r[0].rstrip(" †"), int(r[1])): r[e] for r in body}
    for (cfg, conc), mj in WANT_MJ.items():
        cell = cells[(cfg, conc)]
        assert float(cell.split()[0]) == pytest.approx(mj, rel=5e-3), (cfg, conc, cell)
        if cfg != "baseline":
            assert f"({WANT_RATIO[conc]:.2f}×)" in cell
    assert cells[("eagle3-s5k4", 1)] == ""                   # no energy measured: empty, not 0
    # doctor's reason for the broken draft, once per config and concurrency
    assert "accept_len_near_1" in text and "eagle3-wrong-aux @c1" in text
    assert len(re.findall(r"eagle3-wrong-aux @c1 \(3 runs", text)) == 1
    assert "<h3>Environment</h3>" in text and "nvml_energy_counter" in text
    for title in ("Speedup by load", "Accept length by load", "Latency vs throughput",
                  "Accept length over time", "GPU power", "/metrics spec_accept_length"):
        assert title in text, title


def test_terminal_table_shows_energy_only_when_measured(page_file, tmp_path):
    db, _ = page_file
    got = subprocess.run([sys.executable, "-m", "specwatch.cli", "report", "--db", str(db),
                          "--sweep", SWEEP], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "COLUMNS": "160"})
    assert got.returncode == 0, got.stderr
    line = next(ln for ln in got.stdout.splitlines() if ln.startswith("eagle3-s3k1") and " 1 " in ln)
    assert f"{WANT_MJ[('eagle3-s3k1', 1)]:.1f} ({WANT_RATIO[1]:.2f}×)" in line
    bare = tmp_path / "bare.duckdb"
    build_fixture_db(bare)
    got = subprocess.run([sys.executable, "-m", "specwatch.cli", "report", "--db", str(bare),
                          "--sweep", SWEEP], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "COLUMNS": "160"})
    assert got.returncode == 0 and "mJ/tok" not in got.stdout


def test_empty_store_says_what_to_do(tmp_path):
    db = tmp_path / "empty.duckdb"
    with store.writer(db):
        pass
    got = subprocess.run([sys.executable, "-m", "specwatch.cli", "report", "--db", str(db),
                          "--format", "html"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert got.returncode == 0 and "No runs stored yet" in got.stdout
    assert got.stdout.lstrip().startswith("<!DOCTYPE html>")


@pytest.mark.browser
def test_page_renders_offline_in_the_real_browser(page_file):
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} not installed (CI installs it: scripts/test.sh)")
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    _, out = page_file
    url = out.resolve().as_uri()
    seen, refused = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run"])
        ctx = browser.new_context(viewport={"width": 1300, "height": 1000}, offline=True)

        def route(r):
            seen.append(r.request.url)
            if r.request.url == url:
                r.continue_()
            else:
                refused.append(r.request.url)
                r.abort()
        ctx.route("**/*", route)
        pg = ctx.new_page()
        pg.goto(url)
        pg.wait_for_load_state("load")
        svgs = pg.locator("div.plots > svg")
        n = svgs.count()
        drawn = [svgs.nth(i).evaluate(
            "e => ({w: e.getBoundingClientRect().width, h: e.getBoundingClientRect().height,"
            " marks: e.querySelectorAll('path, use, polyline, line').length,"
            " title: [...e.querySelectorAll('text')].map(t => t.textContent).join(' ')})")
            for i in range(n)]
        (ROOT / "screenshots").mkdir(exist_ok=True)
        pg.screenshot(path=str(ROOT / "screenshots" / "report-html.png"), full_page=True)
        browser.close()
    assert refused == [] and seen == [url]
    assert n >= 6
    for d in drawn:
        assert d["w"] > 200 and d["h"] > 120 and d["marks"] > 20, d
    titles = " ".join(d["title"] for d in drawn)
    for t in ("Speedup by load", "Latency vs throughput", "GPU power", "c=1", "c=4"):
        assert t in titles, t
