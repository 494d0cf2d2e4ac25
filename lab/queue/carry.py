"""What of a long job survives a lost checkout: small gzip'd copies on the branch, hourly and on request.

A job's resume point (:mod:`lab.queue.resume_point`) is a ref of this repository: it carries a job from one session
to the next on the same clone, but a fresh clone, or a checkout rebuilt from the branch after a lost session, starts
without it, and a training or a full-protocol run would start again from nothing. So the queue also commits to the
branch, at most every :data:`CARRY_EVERY_S` of a job (``python -m lab queue run --carry-every MINUTES``), when a job
ends, and when a session about to end asks for it (``python -m lab queue carry``):

* a training's run folder as ``zoo_runs/carry/<job>.tar.gz`` (about 4 MB for a ResNet-20 BNN: weights, Adam state,
  the best epoch's weights, the history), deleted from the branch when the job ends, since its exported checkpoint
  is committed then;
* a protocol job's outcomes, only the rows of its own models (``evaluations``, ``batches``, ``outcomes``, ``flags``),
  as ``zoo_runs/carry/<job>.db.gz`` (a few MB for a model on the full protocol). These stay: every job that shares the
  store merges them back before it starts, so a findings job finds every finished model's outcomes in a fresh clone.

At one copy an hour a lost checkout costs at most an hour of a job, and the branch grows by a few MB per job-hour
instead of the ~4 MB per epoch that committing every checkpoint would cost.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import sqlite3
import tarfile
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arbibench.files import atomic_write_bytes
from lab.queue import resume_point

CARRY_DIR = "zoo_runs/carry"
CARRY_EVERY_S = 3600.0
_TABLES = ("evaluations", "batches", "outcomes", "flags")  # arbibench.evaluation.store's, parents first
_OPTIONAL_TABLES = ("batch_machines",)  # newer stores' (what computed each batch); older copies lack it


def _slug(job_name: str) -> str:
    return resume_point.job_ref(job_name).removeprefix(resume_point.REF_PREFIX)


def run_folder_copy(job_name: str) -> str:
    """The branch path of a training job's run folder copy."""
    return f"{CARRY_DIR}/{_slug(job_name)}.tar.gz"


def rows_copy(job_name: str) -> str:
    """The branch path of a protocol job's outcome rows."""
    return f"{CARRY_DIR}/{_slug(job_name)}.db.gz"


def pack_run_folder(repo: Path, watch: str, out: str) -> bool:
    """The files of ``repo/watch`` (temporaries and hidden files left out) as a reproducible tar.gz at ``repo/out``
    (member names are repository paths, no timestamps or owners); False when the folder has no state.json yet."""
    folder = repo / watch
    if not (folder / "state.json").is_file():
        return False
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        files = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".") and p.suffix != ".tmp"]
        for f in sorted(files):
            data = f.read_bytes()
            info = tarfile.TarInfo(f"{watch}/{f.name}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    atomic_write_bytes(buf.getvalue(), repo / out)
    return True


def unpack_run_folder(repo: Path, watch: str, copy: str) -> list[str]:
    """Restore ``repo/watch`` from its branch copy when the copy is at a later epoch than the folder (or there is no
    folder); returns the files written, state.json last."""
    path = repo / copy
    if not path.is_file():
        return []
    with tarfile.open(path, mode="r:gz") as tar:
        return resume_point.restore_from_tar(repo, tar, watch, [])


def _create_tables(conn: sqlite3.Connection, source: str, target: str) -> tuple[str, ...]:
    """Create in schema ``target`` each result-store table of schema ``source`` it lacks, from the source's own
    definitions (the queue reads stores without importing arbibench, and a copy keeps its schema); returns
    the tables the source has, parents first."""
    have = {r[0] for r in conn.execute(f"SELECT name FROM {target}.sqlite_master WHERE type = 'table'")}
    present = []
    for table in _TABLES + _OPTIONAL_TABLES:
        row = conn.execute(f"SELECT sql FROM {source}.sqlite_master WHERE type = 'table' AND name = ?",
                           (table,)).fetchone()
        if row is None:
            if table in _OPTIONAL_TABLES:
                continue
            raise sqlite3.OperationalError(f"no table {table!r}: not an arbibench result store")
        present.append(table)
        if table not in have:
            conn.execute(re.sub(r"^CREATE TABLE (IF NOT EXISTS )?", f"CREATE TABLE {target}.", row[0]))
    return tuple(present)


def copied_state(repo: Path, watch: str, copy: str) -> dict[str, Any] | None:
    """The state.json in a run folder's branch copy (None without a copy), for ``lab queue status`` in a clone."""
    path = repo / copy
    if not path.is_file():
        return None
    with tarfile.open(path, mode="r:gz") as tar:
        try:
            member = tar.extractfile(f"{watch}/state.json")
        except KeyError:
            return None
        return json.loads(member.read()) if member is not None else None


# the bulky tables, keyed per image or batch: a copy leaves out the rows another copy of its store holds
_HELD_KEYS = {"outcomes": "sample_index", "batches": "batch_index", "batch_machines": "batch_index"}


def export_rows(store: Path, models: tuple[str, ...], out: Path, *, held_elsewhere: Sequence[Path] = ()) -> int:
    """The rows of ``models`` (every model when empty) in the SQLite result store ``store``, as a gzip'd SQLite file
    at ``out``, read in one transaction while the protocol run may be writing; returns the outcome rows copied.

    ``held_elsewhere``: the other jobs' gzip'd copies of the same store. Their outcome and batch rows are left out
    (evaluations and flags stay, a few rows each), so a store's rows are on the branch once: merged together, the
    copies hold what each job measured. Without this a job that rewrote every card copied every earlier job's rows
    again (16.7 MB of the 33.8 MB of row copies on 2026-12-07)."""
    with tempfile.TemporaryDirectory() as tmp:
        part = Path(tmp) / "rows.db"
        src = sqlite3.connect(store, timeout=60)
        try:
            src.execute("ATTACH DATABASE ? AS part", (str(part),))
            tables = _create_tables(src, "main", "part")
            with src:  # one transaction: the tables agree with each other
                where = f"WHERE model_name IN ({','.join('?' * len(models))})" if models else ""
                src.execute(f"INSERT INTO part.evaluations SELECT * FROM main.evaluations {where}", models)
                for table in tables[1:]:
                    src.execute(f"INSERT INTO part.{table} SELECT * FROM main.{table} "
                                "WHERE eval_key IN (SELECT eval_key FROM part.evaluations)")
            src.execute("DETACH DATABASE part")
        finally:
            src.close()
        for i, copy in enumerate(held_elsewhere):
            try:
                _drop_held_rows(part, copy, Path(tmp) / f"held{i}.db")
            except (ValueError, sqlite3.DatabaseError):  # a damaged copy holds nothing for sure: keep those rows
                continue
        conn = sqlite3.connect(part)
        try:
            n = int(conn.execute("SELECT COUNT(*) FROM outcomes").fetchone()[0])
            if held_elsewhere:
                conn.execute("VACUUM")  # the deleted rows' pages out of the file
        finally:
            conn.close()
        buf = io.BytesIO()
        with open(part, "rb") as f, gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
            shutil.copyfileobj(f, gz)
    atomic_write_bytes(buf.getvalue(), out)
    return n


def _gunzip(copy: Path, out: Path) -> None:
    """``copy`` unpacked to ``out``; a truncated or non-gzip copy is a ValueError naming it (gzip's EOFError would
    reach the command line as a bare "Aborted.")."""
    try:
        with gzip.open(copy, "rb") as gz, open(out, "wb") as f:
            shutil.copyfileobj(gz, f)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise ValueError(f"{copy} is truncated or not a gzip'd store ({e}); copy it again from where it was "
                         "written") from None


def _drop_held_rows(part: Path, copy: Path, scratch: Path) -> None:
    """Delete from the store file ``part`` the outcome and batch rows that the gzip'd copy ``copy`` holds."""
    _gunzip(copy, scratch)
    conn = sqlite3.connect(part)
    try:
        conn.execute("ATTACH DATABASE ? AS held", (str(scratch),))
        have = {r[0] for r in conn.execute("SELECT name FROM held.sqlite_master WHERE type = 'table'")}
        mine = {r[0] for r in conn.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'")}
        with conn:
            for table, key in _HELD_KEYS.items():
                if table in have and table in mine:
                    conn.execute(f"DELETE FROM main.{table} WHERE EXISTS (SELECT 1 FROM held.{table} AS h "
                                 f"WHERE h.eval_key = main.{table}.eval_key AND h.{key} = main.{table}.{key})")
        conn.execute("DETACH DATABASE held")
    finally:
        conn.close()
    scratch.unlink()


def compact(copies: Sequence[Path]) -> dict[Path, tuple[int, int]]:
    """Rewrite each gzip'd copy of one store (``copies`` in the order their jobs ran) without the outcome and batch
    rows the others hold now, for copies written before :func:`export_rows` left those out. One copy after the
    other, the last job's first, so each row stays with the first job that carried it and every row stays in some
    copy; returns each copy's size in bytes before and after."""
    sizes = {}
    for copy in reversed(copies):
        before = copy.stat().st_size
        with tempfile.TemporaryDirectory() as tmp:
            whole, rest, check = Path(tmp) / "whole.db", Path(tmp) / "rest.db.gz", Path(tmp) / "rest.db"
            _gunzip(copy, whole)
            export_rows(whole, (), rest, held_elsewhere=[c for c in copies if c != copy and c.is_file()])
            _gunzip(rest, check)
            if _row_counts(check) != _row_counts(whole):  # else the copy stays byte for byte: no churn in git
                atomic_write_bytes(rest.read_bytes(), copy)
        sizes[copy] = (before, copy.stat().st_size)
    return sizes


def _row_counts(store: Path) -> tuple[int, ...]:
    conn = sqlite3.connect(store)
    try:
        have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return tuple(int(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) if t in have else -1
                     for t in _HELD_KEYS)
    finally:
        conn.close()


def merge_rows(copy: Path, store: Path) -> int:
    """Add the rows of a gzip'd copy to the SQLite result store ``store`` (created when missing); rows the store
    already holds stay as they are. Returns the outcome rows that were new."""
    store.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        part = Path(tmp) / "rows.db"
        _gunzip(copy, part)
        conn = sqlite3.connect(store, timeout=60)
        try:
            conn.execute("ATTACH DATABASE ? AS part", (str(part),))
            tables = _create_tables(conn, "part", "main")
            before = int(conn.execute("SELECT COUNT(*) FROM main.outcomes").fetchone()[0])
            with conn:
                if "batch_machines" in tables:  # for the batches this merge adds: one the store holds keeps its own
                    conn.execute("INSERT OR IGNORE INTO main.batch_machines SELECT * FROM part.batch_machines AS p "
                                 "WHERE NOT EXISTS (SELECT 1 FROM main.batches AS b "
                                 "WHERE b.eval_key = p.eval_key AND b.batch_index = p.batch_index)")
                for table in tables:
                    if table != "batch_machines":
                        conn.execute(f"INSERT OR IGNORE INTO main.{table} SELECT * FROM part.{table}")
            after = int(conn.execute("SELECT COUNT(*) FROM main.outcomes").fetchone()[0])
            conn.execute("DETACH DATABASE part")
        finally:
            conn.close()
    return after - before


def merge_models(rows: Path, store: Path, models: tuple[str, ...]) -> int:
    """Merge only the rows of ``models`` in the gzip'd copy ``rows`` into the store ``store`` (see
    :func:`merge_rows`); returns the outcome rows that were new."""
    with tempfile.TemporaryDirectory() as tmp:
        both, part = Path(tmp) / "both.db", Path(tmp) / "part.db.gz"
        merge_rows(rows, both)
        export_rows(both, models, part)
        return merge_rows(part, store)


def add_rows(rows: Path, copy: Path, models: tuple[str, ...]) -> int:
    """Add the rows of ``models`` in the gzip'd copy ``rows`` (a store computed elsewhere: a lent GPU's run) to a
    job's carried copy ``copy``, whose own rows stay; returns the outcome rows the copy gained. The queue merges the
    copy into its store when the job starts, and its run then skips every batch the rows hold."""
    with tempfile.TemporaryDirectory() as tmp:
        both, out = Path(tmp) / "both.db", Path(tmp) / "copy.db.gz"
        before = merge_rows(copy, both) if copy.is_file() else 0
        merge_rows(rows, both)
        after = export_rows(both, models, out)
        if after > before:  # else the copy stays as it was (or absent): nothing of these models was new
            atomic_write_bytes(out.read_bytes(), copy)
    return max(after - before, 0)


def remove(repo: Path, path: str) -> bool:
    """Delete a copy from the work tree; True when there was one."""
    target = repo / path
    if not target.is_file():
        return False
    os.unlink(target)
    return True
