"""Ingest never dies on a line, reads compressed rotated logs, and says when a file is no log.

Issue 13 ("one bad line never blocks a file"): values past INT32/INT64, `+3`, `1e999`, a deeply
nested or huge server_args line, `, , ` endings, NUL and invalid UTF-8 lines, interleaved with
valid lines: every valid line is stored exactly once (re-runs too), each bad one is in
rejected_lines with a reason, on both ingest paths, through the real CLI and through the
ingestor `tail` uses. Issue 15: gzip/zstd logs, files with no recognised line.
"""
from __future__ import annotations

import bz2
import gzip
import lzma
import os
import re
import shutil

import duckdb
import pytest
import zstandard

from conftest import SAMPLES, run_cli
from specwatch.logs import ingest, logfile, rows
from specwatch.db import store

OK = ("[2026-03-02 08:15:{s:02d} DP{r} TP{r}] Decode batch, #running-req: {n}, #token: 5120, "
      "token usage: 0.23, accept len: 2.61, accept rate: 0.65, cuda graph: True, "
      "gen throughput (token/s): 3980.12, #queue-req: 2")
BAD = [
    "[2026-03-02 08:15:00 TP0] Decode batch, #running-req: 3000000000, #token: 5, "
    "gen throughput (token/s): 1.0, #queue-req: 0",
    "[2026-03-02 08:15:00 TP0] Decode batch [99999999999999999999999], #running-req: 3, "
    "gen throughput (token/s): 1.0, #queue-req: 0",
    "[2026-03-02 08:15:00 TP0] Decode batch, #running-req: 3, #token: 99999999999999999999999, "
    "gen throughput (token/s): 1.0, #queue-req: 0",
    "[2026-03-02 08:15:00 TP0] Decode batch, #running-req: +3, gen throughput (token/s): 1.0, "
    "#queue-req: 0",
    "[2026-03-02 08:15:00 TP0] Decode batch, #running-req: 3, gen throughput (token/s): 1e999, "
    "#queue-req: 0",
    "[2026-03-02 08:15:00 TP0] Decode batch, #running-req: 3, gen throughput (token/s): 1.0, "
    "#queue-req: 0, , ",
    "[2026-03-02 08:15:00 TP0] Decode batch, #running-req: 3, forward iter: inf, "
    "gen throughput (token/s): 1.0, #queue-req: 0",
    "[2026-03-02 08:15:00 TP0] Prefill batch, #new-seq: 2147483648, #new-token: 1, "
    "#queue-req: 0",
    "[2026-03-02 08:15:00 TP0] server_args={'a': " + "[" * 50_000 + "]" * 50_000 + "}",
    "[2026-03-02 08:15:00 TP0] server_args=ServerArgs(" + "x=(" * 5000 + ")" * 5000 + ")",
]
ODD = ("[2026-03-02 08:15:00 TP0] Decode batch, #running-req: 3, gen throughput (token/s): 1.0, "
       "#queue-req: 0, odd: 1e999")
# Lines that are no record at all (skipped, never stored, never fatal).
NOISE = ["\x00\x01binary\x00 batch", "\xff\xfe Decode batch, #running-req: \xff"]


def build_log(path, huge_args: bool = True) -> set[int]:
    """A log with valid lines interleaved among bad ones; returns the valid decode line numbers."""
    lines, valid = [], set()
    for i in range(200):
        lines.append(OK.format(s=i % 60, r=i % 2, n=i + 1).encode())
        valid.add(len(lines))
        if i % 10 == 0:
            lines.append(BAD[(i // 10) % len(BAD)].encode())
        if i % 50 == 0:
            lines.append(NOISE[(i // 50) % 2].encode("latin-1"))
    for bad in BAD:
        lines.append(bad.encode())
    if huge_args:  # a 5 MB server_args line (past the bounded parse), and a 240 KB valid one
        for n in (400_000, 20_000):
            args = ", ".join(f"'k{i}': {i}" for i in range(n))
            lines.append(("[2026-03-02 08:16:00 TP0] server_args={" + args + "}").encode())
    lines.append(OK.format(s=59, r=0, n=999).encode())
    valid.add(len(lines))
    lines.append(ODD.encode())  # an extra key whose value is no finite number: kept as its text
    valid.add(len(lines))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return valid


def decode_lines(db) -> list[int]:
    with store.reader(db) as con:
        return [r[0] for r in con.execute("SELECT line_no FROM decode_windows ORDER BY line_no")
                .fetchall()]


def rejected(db) -> dict[int, tuple[str, str]]:
    with store.reader(db) as con:
        return {r[0]: (r[1], r[2]) for r in con.execute(
            "SELECT line_no, reason, field FROM rejected_lines").fetchall()}


@pytest.mark.parametrize("fast", ["1", "0"], ids=["fast-path", "python-path"])
def test_bad_lines_interleaved_store_every_valid_line_exactly_once(tmp_path, db, fast):
    log = tmp_path / "server.log"
    valid = build_log(log)
    env = {**os.environ, "SPECWATCH_NO_FASTSCAN": "0" if fast == "1" else "1"}
    import subprocess
    import sys
    for _ in range(2):  # a re-run stores nothing twice
        p = subprocess.run([sys.executable, "-m", "specwatch.cli", "ingest", str(log), "--db",
                            str(db)], capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 0, p.stderr
        assert "Traceback" not in p.stderr
        assert decode_lines(db) == sorted(valid)
    rej = rejected(db)
    text = log.read_bytes().split(b"\n")
    for n, line in enumerate(text, 1):
        if any(line == b.encode() for b in BAD) or len(line) > 1 << 20:
            assert n in rej, line[:120]
    reasons = " | ".join(r for r, _ in rej.values())
    assert "running_req" in reasons and "finite" in reasons and "64-bit" in reasons or \
        "BIGINT" in reasons, reasons[:2000]
    with store.reader(db) as con:
        assert con.execute("SELECT fields FROM decode_windows WHERE fields IS NOT NULL"
                           ).fetchall() == [('{"odd":"1e999"}',)]
        # the huge but valid server_args line is a config, stored once
        assert con.execute("SELECT count(*) FROM server_configs").fetchone()[0] == 1
        assert con.execute("SELECT count(*) FROM runs WHERE status = 'ok'").fetchone()[0] == 1


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "python-path"])
def test_a_value_the_store_refuses_falls_back_line_by_line(tmp_path, db, monkeypatch, fast):
    # Every check before the insert switched off: the insert itself must then fail on the
    # out-of-range rows, and the chunk is stored line by line with the offenders rejected.
    monkeypatch.setattr(rows, "row_problem", lambda table, row: None)
    monkeypatch.setenv("SPECWATCH_NO_FASTSCAN", "0" if fast else "1")
    log = tmp_path / "server.log"
    valid = build_log(log, huge_args=False)
    res = ingest.ingest_paths(db, [str(log)])
    assert decode_lines(db) == sorted(valid)
    refused = {n: r for n, (r, _) in rejected(db).items() if r.startswith("the store refused")}
    lines = log.read_bytes().split(b"\n")
    assert refused and all(re.search(rb"3000000000|99999999999999999999999|2147483648|: inf",
                                     lines[n - 1]) for n in refused)
    assert res[0].rejected == len(rejected(db))


@pytest.mark.parametrize("overlap", [False, True], ids=["follower", "one-shot"])
@pytest.mark.parametrize("fast", ["1", "0"], ids=["fast-path", "python-path"])
def test_a_record_held_before_a_line_longer_than_a_chunk_is_read_on(tmp_path, db, overlap, fast):
    # A metric record is held until the next line shows whether it continues it. When that line
    # is longer than what the chunk has left, the chunk holds only the record; reading on must
    # read further each time (it read 2x the record's length, less than before, and spun
    # forever on the same bytes). In a process of its own: a regression hangs, not the suite.
    log = tmp_path / "server.log"
    long = "x" * 9000
    lines = [OK.format(s=1, r=0, n=3), long, OK.format(s=2, r=0, n=4), "y" * 5000,
             OK.format(s=3, r=1, n=5), "short", long, OK.format(s=4, r=0, n=6)]
    log.write_text("\n".join(lines) + "\n")
    code = ("import sys; from specwatch.logs import ingest\n"
            "ing = ingest.FileIngestor(sys.argv[1], sys.argv[2], 'r', chunk_bytes=4096, "
            "overlap=sys.argv[3] == '1')\n"
            "while ing.poll().lines: pass\n"
            "ing.close()\n")
    import subprocess
    import sys
    env = {**os.environ, "SPECWATCH_NO_FASTSCAN": "0" if fast == "1" else "1"}
    ingest.ensure_run(db, "r")
    p = subprocess.run([sys.executable, "-c", code, str(db), str(log), "1" if overlap else "0"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert decode_lines(db) == [1, 3, 5, 8]


def test_the_ingestor_tail_uses_follows_past_bad_lines(tmp_path, db):
    log = tmp_path / "server.log"
    ing = ingest.FileIngestor(db, log, "r")
    log.write_bytes(b"")
    want = set()
    with open(log, "ab") as f:
        for burst in range(6):
            for i in range(30):
                f.write((OK.format(s=i, r=0, n=i + 1) + "\n").encode())
                want.add(burst * 32 + i + 1)
            f.write((BAD[burst % len(BAD)] + "\n").encode())
            f.write((BAD[(burst + 3) % len(BAD)] + "\n").encode())
            f.flush()
            ing.poll()
    ing.close()
    assert decode_lines(db) == sorted(want)
    assert len(rejected(db)) == 12


def _sample(tmp_path):
    src = SAMPLES / "sglang-0.5.9-dp2-tp8-eagle3.log"
    plain = tmp_path / "server.log"
    shutil.copy(src, plain)
    return plain, src.read_bytes()


def test_compressed_and_utf16_logs_store_what_the_plain_log_stores(tmp_path):
    plain, data = _sample(tmp_path)
    text = data.decode()
    made = {"gzip": ("server.log.1.gz", gzip.compress(data)),
            "zstd": ("server.log.2.zst", zstandard.ZstdCompressor().compress(data)),
            "xz": ("server.log.3.xz", lzma.compress(data)),
            "bzip2": ("server.log.4.bz2", bz2.compress(data)),
            # Windows PowerShell 5's `>` / Out-File: UTF-16 LE with its BOM, CRLF line ends
            "utf-16-le": ("ps.log", b"\xff\xfe" + text.encode("utf-16-le")),
            "utf-16-be": ("be.log", b"\xfe\xff" + text.encode("utf-16-be"))}
    files = [plain]
    for kind, (name, blob) in made.items():
        f = tmp_path / name
        f.write_bytes(blob)
        assert logfile.compression(f) == kind, name
        files.append(f)
    assert logfile.compression(plain) is None
    counts = []
    for f in files:
        db = tmp_path / f"{f.name}.duckdb"
        run_cli("ingest", f, "--db", db)
        with duckdb.connect(str(db), read_only=True) as con:
            # (a float sum, rounded: DuckDB stores rows in any order and sums in that order)
            counts.append(con.execute(
                "SELECT count(*), round(sum(accept_len), 6), min(byte_offset), max(line_no) "
                "FROM decode_windows").fetchone())
    assert counts[0][0] > 10 and all(c == counts[0] for c in counts[1:]), counts
    # PowerShell ends lines with CRLF: the same rows, offsets in the text it wrote
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(b"\xff\xfe" + text.replace("\n", "\r\n").encode("utf-16-le"))
    run_cli("ingest", crlf, "--db", tmp_path / "crlf.duckdb")
    with duckdb.connect(str(tmp_path / "crlf.duckdb"), read_only=True) as con:
        got = con.execute("SELECT count(*), round(sum(accept_len), 6), min(byte_offset), "
                          "max(line_no) FROM decode_windows").fetchone()
    first = data.rindex(b"\n", 0, data.index(b"Decode batch")) + 1   # in UTF-8 bytes
    assert got == (counts[0][0], counts[0][1], first + data.count(b"\n", 0, first), counts[0][3])
    assert counts[0][2] == first


def test_a_utf16_log_being_written_is_read_up_to_its_last_complete_line(tmp_path, db):
    _, data = _sample(tmp_path)
    lines = data.decode().splitlines(keepends=True)
    log = tmp_path / "ps.log"
    cut = len(lines) // 2
    part = lines[cut][:len(lines[cut]) // 2]   # a line still being written
    log.write_bytes(b"\xff\xfe" + ("".join(lines[:cut]) + part).encode("utf-16-le"))
    ing = ingest.FileIngestor(db, log, "r", hold_at_eof=True)
    first = ing.poll()
    assert 0 < first.lines <= cut   # never the line still being written
    os.utime(log, ns=(1, 1))   # (the rewrite below changes mtime on any clock)
    log.write_bytes(b"\xff\xfe" + "".join(lines).encode("utf-16-le"))
    ingest.HOLD_QUIET_S, quiet = 0.0, ingest.HOLD_QUIET_S
    try:
        done = [ing.poll()]
        while done[-1].lines:
            done.append(ing.poll())
    finally:
        ingest.HOLD_QUIET_S = quiet
        ing.close()
    assert {r.source_id for r in done} == {first.source_id}
    assert first.lines + sum(r.lines for r in done) == data.count(b"\n")
    with store.reader(db) as con:
        got = con.execute("SELECT count(*), count(DISTINCT line_no) FROM decode_windows").fetchone()
    plain = tmp_path / "plain.duckdb"
    (tmp_path / "plain.log").write_bytes(data)
    ingest.ingest_paths(plain, [str(tmp_path / "plain.log")])
    with store.reader(plain) as con:
        assert got == con.execute("SELECT count(*), count(*) FROM decode_windows").fetchone()


def test_compressed_rotation_continues_the_source_it_came_from(tmp_path, db):
    # logrotate with `compress`: the followed file's unread end ends up in server.log.1.gz
    plain, data = _sample(tmp_path)
    half = data[:data.index(b"\n", len(data) // 2) + 1]
    plain.write_bytes(half)
    ing = ingest.FileIngestor(db, plain, "r")
    first = ing.poll()
    ing.close()
    gz = tmp_path / "server.log.1.gz"
    gz.write_bytes(gzip.compress(data))
    plain.unlink()
    sib = ingest.FileIngestor(db, gz, "r", known_only=True)
    second = sib.poll()
    sib.close()
    assert first.lines + second.lines == data.count(b"\n")
    assert second.source_id == first.source_id
    with store.reader(db) as con:
        assert con.execute("SELECT count(*) FROM sources").fetchone()[0] == 1
        lines = [r[0] for r in con.execute("SELECT line_no FROM decode_windows").fetchall()]
    assert len(lines) == len(set(lines)) > 10


def test_a_broken_compressed_file_is_a_clear_error(tmp_path, db):
    _, data = _sample(tmp_path)
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(gzip.compress(data)[:200])
    with pytest.raises(ingest.IngestError, match=r"cut\.log\.gz: cannot decompress \(gzip\)"):
        ingest.FileIngestor(db, cut, "r").poll()
    p = run_cli("ingest", cut, "--db", db, check=False)
    assert p.returncode == 1 and "cannot decompress" in p.stderr and "Traceback" not in p.stderr
    if db.exists():   # the file read nothing: no run is left for it
        with duckdb.connect(str(db), read_only=True) as con:
            assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


@pytest.mark.parametrize("content", [
    b"# specwatch\n\nLog analysis for speculative decoding.\nSee `specwatch ingest`.\n",
    b"[sweep]\nname = \"x\"\n[[config]]\nname = \"a\"\n",
    bytes(range(256)) * 64,
    b"",
], ids=["readme", "toml", "binary", "empty"])
def test_a_file_with_no_log_line_is_reported_and_creates_no_run(tmp_path, db, content):
    f = tmp_path / "notes.txt"
    f.write_bytes(content)
    p = run_cli("ingest", f, "--db", db, check=False)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert f"no SGLang or vLLM metric or config lines in {f}; is this a server log?" in p.stderr
    if db.exists():
        with duckdb.connect(str(db), read_only=True) as con:
            assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
            assert con.execute("SELECT count(*) FROM sources").fetchone()[0] == 0
    # beside a real log: reported, exit 0, only the real log's run exists
    log, _ = _sample(tmp_path)
    p = run_cli("ingest", f, log, "--db", db)
    assert "is this a server log?" in p.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT run_id, status FROM runs").fetchall() == [("server.log", "ok")]


def test_the_c_scanner_is_built_and_in_step_with_lines_toml():
    # The fast-path tests skip when the scanner is unavailable, and it makes itself unavailable
    # when lines.toml retypes a decode/prefill field it types itself: that must fail loudly here.
    from specwatch.logs import fastscan
    assert fastscan._fastscan is not None, "specwatch.logs._fastscan not built (pip install -e .)"
    assert fastscan.format_drift() == []
    assert fastscan.available() or os.environ.get("SPECWATCH_NO_FASTSCAN") == "1"


@pytest.mark.parametrize("fast", [True, False], ids=["scanner", "python"])
def test_lines_after_a_hole_of_nul_bytes_are_read(tmp_path, monkeypatch, fast):
    # logrotate's copytruncate under a writer without O_APPEND (`... > server.log`): the file is
    # truncated, the writer goes on at its old offset and the first bytes read back as NULs; a
    # crash leaves NULs where data never reached the disk. The text after a NUL run is a line.
    monkeypatch.setenv("SPECWATCH_NO_FASTSCAN", "0" if fast else "1")
    _, data = _sample(tmp_path)
    cut = data.index(b"\n", len(data) // 3) + 1
    rest = data[cut:]
    mid = data.index(b"\n", cut + len(rest) // 2) + 1
    shapes = {"copytruncate": b"\x00" * cut + rest,
              "crash": data[:mid] + b"\x00" * 5000 + data[mid:],
              "torn": data[:mid] + b"\x00" * 700 + b"\n" + data[mid:]}
    want = {}
    for name, part in (("rest", rest), ("whole", data)):
        f = tmp_path / f"{name}.log"
        f.write_bytes(part)
        want[name] = _rows(tmp_path / f"{name}.duckdb", f)
    for name, blob in shapes.items():
        f = tmp_path / f"{name}.log"
        f.write_bytes(blob)
        (res,) = ingest.ingest_paths(tmp_path / f"{name}.duckdb", [str(f)])
        assert any("NUL bytes skipped" in w for w in res.warnings), name
        got = _rows(tmp_path / f"{name}.duckdb", f)
        ref = want["rest"] if name == "copytruncate" else want["whole"]
        assert [r[1:] for r in got] == [r[1:] for r in ref], name
        # each row's offset is where its text starts in the file as it is
        for off, text in ((r[0], r[1]) for r in got):
            assert blob[off:blob.index(b"\n", off)].decode() == text, name


def _rows(db, log) -> list[tuple]:
    """(byte_offset, the line's text, accept_len, running_req) of every decode row, in file order."""
    if not db.exists():
        ingest.ingest_paths(db, [str(log)])
    raw = log.read_bytes()
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT byte_offset, accept_len, running_req FROM decode_windows "
                           "ORDER BY byte_offset").fetchall()
    return [(o, raw[o:raw.index(b"\n", o)].decode(), a, n) for o, a, n in rows]


def test_a_follower_reads_on_after_copytruncate_leaves_a_hole(tmp_path, db):
    # tail during logrotate copytruncate: the follower read the file, logrotate truncated it,
    # the server (no O_APPEND) wrote on at its old offset. Every line written after is stored.
    _, data = _sample(tmp_path)
    cut = data.index(b"\n", len(data) // 2) + 1
    log = tmp_path / "server.log"
    log.write_bytes(data[:cut])
    ing = ingest.FileIngestor(db, log, "r", hold_at_eof=True)
    ingest.HOLD_QUIET_S, quiet = 0.0, ingest.HOLD_QUIET_S
    try:
        while ing.poll().lines:
            pass
        with open(log, "r+b") as f:
            f.truncate(0)
            f.seek(cut)
            f.write(data[cut:])
        while ing.poll().lines:
            pass
    finally:
        ingest.HOLD_QUIET_S = quiet
        ing.close()
    plain = tmp_path / "plain.log"
    plain.write_bytes(data)
    with store.reader(db) as con:   # (the rows of the source before and of the one after)
        got = con.execute("SELECT accept_len, running_req FROM decode_windows").fetchall()
    want = [r[2:] for r in _rows(tmp_path / "plain.duckdb", plain)]
    assert sorted(got) == sorted(want) and len(want) > 10


@pytest.mark.parametrize("kind", ["tar", "tar.gz", "tar.xz", "zip"])
def test_an_archive_of_logs_is_refused_naming_how_to_extract_it(tmp_path, db, kind):
    # a support bundle or a CI artifact: its files read as one log would mix their lines into one
    # source and one run
    import tarfile
    import zipfile
    logs = tmp_path / "logs"
    logs.mkdir()
    for s in ("sglang-0.5.23-llama8b-eagle3-s3k1.log", "vllm-0.11-eagle3.log"):
        shutil.copy(SAMPLES / s, logs / s)
    arc = tmp_path / f"bundle.{kind}"
    if kind == "zip":
        with zipfile.ZipFile(arc, "w", zipfile.ZIP_DEFLATED) as z:
            for f in sorted(logs.iterdir()):
                z.write(f, f"logs/{f.name}")
        how = f"unzip {arc} -d DIR"
    else:
        with tarfile.open(arc, "w" + kind[3:].replace(".", ":")) as t:
            t.add(logs, "logs")
        how = f"tar xf {arc} -C DIR"
    with pytest.raises(ingest.IngestError, match=re.escape(f"{arc}: a ")):
        ingest.FileIngestor(db, arc, "r").poll()
    p = run_cli("ingest", arc, "--db", db, check=False)
    assert p.returncode == 1 and "Traceback" not in p.stderr and f"`{how}`" in p.stderr
    # beside a real log in a directory: reported, the log stored
    d = tmp_path / "dir"
    d.mkdir()
    shutil.copy(arc, d / arc.name)
    shutil.copy(SAMPLES / "sglang-0.5.9-dp2-tp8-eagle3.log", d / "server.log")
    p = run_cli("ingest", d, "--db", db)
    assert f"{d / arc.name}: a " in p.stderr and "server.log: " in p.stdout
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT run_id FROM runs").fetchall() == [("server.log",)]


@pytest.mark.parametrize("fast", [True, False], ids=["scanner", "python"])
def test_a_byte_order_mark_is_no_capture_prefix(tmp_path, monkeypatch, fast):
    # Windows tools (Notepad, PowerShell 7's UTF-8 with BOM) start a UTF-8 file with EF BB BF:
    # the first line's values and prefix are those of the same line without it
    monkeypatch.setenv("SPECWATCH_NO_FASTSCAN", "0" if fast else "1")
    _, data = _sample(tmp_path)
    first = data[:data.index(b"\n") + 1]
    for name, blob in (("bom", b"\xef\xbb\xbf" + first), ("plain", first)):
        f = tmp_path / f"{name}.log"
        f.write_bytes(blob)
        ingest.ingest_paths(tmp_path / f"{name}.duckdb", [str(f)])
    got = {}
    for name in ("bom", "plain"):
        with duckdb.connect(str(tmp_path / f"{name}.duckdb"), read_only=True) as con:
            got[name] = con.execute("SELECT * EXCLUDE (source_id, byte_offset) "
                                    "FROM server_configs").fetchall()
    assert got["bom"] == got["plain"] and len(got["plain"]) == 1
