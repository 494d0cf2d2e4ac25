"""The results store: SQLite, one transaction per finished batch, keyed by content hashes.

An *evaluation* is one (model weights, data samples, threat model, attack configuration, seed, batch size); its key
is the sha256 of those. A batch is written together with its per-sample outcomes in a single transaction, so a run
killed at any moment leaves only whole batches behind; a rerun skips them and can never count a sample twice
(``PRIMARY KEY (eval_key, sample_index)`` makes a duplicate an error, not a silent double count). The same
transaction names the machine that computed the batch (``batch_machines``, a table of its own so that a store an
older arbibench is still writing keeps working): a card says where its seconds were measured, also when a run was
resumed on another machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arbibench.faults import fault_point

SCHEMA = """
CREATE TABLE IF NOT EXISTS evaluations (
    eval_key    TEXT PRIMARY KEY,
    model_hash  TEXT NOT NULL,
    model_name  TEXT NOT NULL,
    attack      TEXT NOT NULL,
    spec        TEXT NOT NULL,      -- JSON: everything hashed into eval_key
    created     REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS batches (
    eval_key    TEXT NOT NULL REFERENCES evaluations(eval_key),
    batch_index INTEGER NOT NULL,
    n_samples   INTEGER NOT NULL,
    seconds     REAL NOT NULL,
    PRIMARY KEY (eval_key, batch_index)
);
CREATE TABLE IF NOT EXISTS outcomes (
    eval_key      TEXT NOT NULL REFERENCES evaluations(eval_key),
    sample_index  INTEGER NOT NULL,  -- position in the dataset split
    batch_index   INTEGER NOT NULL,
    clean_correct INTEGER NOT NULL,
    adv_correct   INTEGER NOT NULL,
    perturbation  REAL NOT NULL,     -- norm of x_adv - x in the threat model's norm (0 if not attacked)
    queries       INTEGER,           -- model queries spent on the sample (black-box attacks)
    PRIMARY KEY (eval_key, sample_index)
);
CREATE TABLE IF NOT EXISTS batch_machines (
    eval_key    TEXT NOT NULL,
    batch_index INTEGER NOT NULL,
    machine     TEXT NOT NULL,      -- what computed the batch (arbibench.machine.computed_on): its seconds' clock
    PRIMARY KEY (eval_key, batch_index)
);
CREATE TABLE IF NOT EXISTS flags (
    eval_key TEXT NOT NULL REFERENCES evaluations(eval_key),
    flag     TEXT NOT NULL,
    detail   TEXT NOT NULL,
    PRIMARY KEY (eval_key, flag)
);
CREATE TABLE IF NOT EXISTS certificates (
    cert_key     TEXT NOT NULL,     -- the model's hash and the verifier's settings (protocol.certified)
    sample_index INTEGER NOT NULL,  -- position in the dataset split
    model_name   TEXT NOT NULL,
    record       TEXT NOT NULL,     -- JSON: the image's certificate (certified and attacked radii, verdicts, seconds)
    PRIMARY KEY (cert_key, sample_index)
);
"""


def hash_json(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def evaluation_key(model_hash: str, spec: dict[str, Any]) -> str:
    """The store key of the evaluation of ``spec`` on the weights ``model_hash``."""
    return hash_json({"model_hash": model_hash, **spec})


def hash_model(model: torch.nn.Module) -> str:
    """sha256 of the model class and every tensor of its state dict: the identity of the weights evaluated."""
    h = hashlib.sha256(type(model).__qualname__.encode())
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(str(t.dtype).encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def hash_indices(indices: Sequence[int] | np.ndarray | torch.Tensor) -> str:
    arr = np.asarray(indices.cpu() if isinstance(indices, torch.Tensor) else indices, dtype=np.int64)
    return hashlib.sha256(arr.tobytes()).hexdigest()


@dataclass(frozen=True)
class Outcomes:
    """Per-sample outcome of one evaluation, ordered by sample index."""

    sample_index: np.ndarray
    clean_correct: np.ndarray
    adv_correct: np.ndarray
    perturbation: np.ndarray
    queries: np.ndarray  # -1 where not recorded


class StoreError(RuntimeError):
    """The store cannot be written (disk full, read-only, locked past the timeout); finished batches are kept."""


BUSY_TIMEOUT_S = 120.0  # how long a writer waits for another process's transaction before giving up


@contextmanager
def _store_errors(path: Path, action: str) -> Iterator[None]:
    """Turn SQLite's operational errors into one message naming the store, the cause and the fix."""
    try:
        yield
    except sqlite3.OperationalError as e:
        text = str(e).lower()
        if "full" in text:
            cause = "the disk is full; free space (or pass another --store on a disk with room)"
        elif "readonly" in text or "read-only" in text or "unable to open" in text:
            cause = "the file or its folder is not writable; fix the permissions or pass another --store"
        elif "locked" in text or "busy" in text:
            cause = (f"another process held its write lock for more than {BUSY_TIMEOUT_S:g} s; wait for it to "
                     "finish or use another --store")
        else:
            cause = "pass another --store, or move this file away"
        raise StoreError(
            f"cannot {action} result store {path}: {e}. {cause[0].upper()}{cause[1:]}; the batches committed so far "
            "are kept and a rerun resumes from them."
        ) from e


class ResultStore:
    """SQLite-backed store of per-sample outcomes; safe to reopen after a crash and to share between processes.

    Several processes may write one store at once (WAL journal, a busy timeout, ``BEGIN IMMEDIATE`` writes): when
    two evaluate the same batch, the second finds it committed and reads it back instead of inserting it twice.

    A store that does not exist yet is created by its first write (or the first use of :attr:`conn`), not when it is
    opened: a command refused after opening it (a bad batch size, a model that cannot be deployed, a backend that
    does not start) leaves no empty file behind. ``read_only=True`` opens an existing store for reading and never
    changes it (no schema, no WAL switch): for commands that only report what is stored.
    """

    def __init__(self, path: str | os.PathLike[str] = "arbibench.db", *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        if self.path.exists() and self.path.is_dir():
            raise IsADirectoryError(f"result store {self.path} is a directory; pass a file path such as results.db")
        if not self.path.parent.is_dir():
            raise FileNotFoundError(
                f"the folder of result store {self.path} does not exist (or is not a folder); create it first"
            )
        if read_only and not self.path.is_file():
            raise FileNotFoundError(f"no result store at {self.path}: nothing is stored to read (pass the run's "
                                    "--store)")
        self._pending = False  # True while the store is an empty one in memory, its file not created yet
        if read_only:
            self._conn = self._connect(self._open_read_only)
        elif self.path.exists():
            self._conn = self._connect(self._open_file)
        elif not os.access(self.path.parent, os.W_OK):  # said now, not after the model is loaded and checked
            raise StoreError(f"cannot create result store {self.path}: its folder is not writable; fix the permissions "
                             "or pass another --store")
        else:
            self._pending = True
            self._conn = sqlite3.connect(":memory:")
            self._create_schema(self._conn)

    def _connect(self, opener: Callable[[], sqlite3.Connection]) -> sqlite3.Connection:
        try:
            with _store_errors(self.path, "open"):
                return opener()
        except StoreError:
            raise
        except sqlite3.DatabaseError as e:
            raise ValueError(
                f"{self.path} is not an arbibench result store ({e}); pass another --store path or move the file."
            ) from e

    def _open_file(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._create_schema(conn)
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
        return conn

    def _open_read_only(self) -> sqlite3.Connection:
        conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for statement in SCHEMA.split(";"):  # a table an older store lacks reads as empty, from a temporary table
            name = statement.split("EXISTS", 1)[-1].split("(", 1)[0].strip()
            if statement.strip() and name not in present:
                conn.execute(statement.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
        return conn

    @staticmethod
    def _create_schema(conn: sqlite3.Connection) -> None:
        for statement in SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection, for SQL of the caller's own: the store's file is created now if it does not exist yet."""
        if self._pending:
            self._create_file()
        return self._conn

    @property
    def _db(self) -> sqlite3.Connection:
        """The connection the store reads with: a store not created yet reads as empty, until some process creates
        its file."""
        if self._pending and self.path.exists():
            self._create_file()
        return self._conn

    def _create_file(self) -> None:
        """Replace the empty store in memory by the file (created if no other process has): at the first write."""
        conn = self._connect(self._open_file)
        self._conn.close()
        self._conn, self._pending = conn, False

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction, taking the write lock up front so that a concurrent writer waits, not fails."""
        if self.read_only:
            raise StoreError(f"result store {self.path} is open read-only: this command only reads it")
        if self._pending:
            self._create_file()
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.rollback()
            raise
        self._db.commit()

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def register(self, model_hash: str, model_name: str, attack: str, spec: dict[str, Any]) -> str:
        """Create (or find) the evaluation for ``spec`` and return its key."""
        key = evaluation_key(model_hash, spec)
        if self.read_only:  # reading needs only the key; the evaluation is stored or its batches are missing
            return key
        with _store_errors(self.path, "write"), self._write():
            self._db.execute(
                "INSERT OR IGNORE INTO evaluations VALUES (?, ?, ?, ?, ?, ?)",
                (key, model_hash, model_name, attack, json.dumps(spec, sort_keys=True), time.time()),
            )
        return key

    def model_names(self) -> set[str]:
        """The names of the models with at least one evaluation stored."""
        return {r[0] for r in self._db.execute("SELECT DISTINCT model_name FROM evaluations")}

    def has_batch(self, eval_key: str, batch_index: int) -> bool:
        """Whether the batch is committed (by this process or another one writing the same store)."""
        row = self._db.execute(
            "SELECT 1 FROM batches WHERE eval_key = ? AND batch_index = ?", (eval_key, batch_index)
        ).fetchone()
        return row is not None

    def done_batches(self, eval_key: str) -> set[int]:
        rows = self._db.execute("SELECT batch_index FROM batches WHERE eval_key = ?", (eval_key,))
        return {r[0] for r in rows}

    def commit_batch(
        self,
        eval_key: str,
        batch_index: int,
        sample_index: Iterable[int],
        clean_correct: Iterable[bool],
        adv_correct: Iterable[bool],
        perturbation: Iterable[float],
        queries: Iterable[int | None] | None = None,
        seconds: float = 0.0,
        machine: str | None = None,
    ) -> bool:
        """Write one finished batch and its outcomes atomically; False if it was already committed (and is kept).
        ``machine`` names what computed it (:func:`arbibench.machine.computed_on`), for the card's provenance.

        Another process evaluating the same batch of the same evaluation may commit it first; its rows are the same
        (same weights, samples and per-batch seed), so they are kept and this batch is not written a second time.
        """
        idx = [int(i) for i in sample_index]
        cc = [int(bool(c)) for c in clean_correct]
        ac = [int(bool(a)) for a in adv_correct]
        pert = [float(p) for p in perturbation]
        qs = [None if q is None else int(q) for q in queries] if queries is not None else [None] * len(idx)
        if not (len(idx) == len(cc) == len(ac) == len(pert) == len(qs)):
            raise ValueError("commit_batch: per-sample columns have different lengths")
        if any(a and not c for a, c in zip(ac, cc, strict=True)):
            raise ValueError("commit_batch: a sample misclassified on clean input cannot count as robust")
        fault_point("store.commit.before")
        with _store_errors(self.path, "write a batch to"), self._write():
            if self.has_batch(eval_key, batch_index):
                return False
            self._db.execute(
                "INSERT INTO batches VALUES (?, ?, ?, ?)", (eval_key, batch_index, len(idx), float(seconds))
            )
            self._db.executemany(
                "INSERT INTO outcomes VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(eval_key, i, batch_index, c, a, p, q) for i, c, a, p, q in zip(idx, cc, ac, pert, qs, strict=True)],
            )
            if machine is not None:
                # REPLACE: a row left behind by a batch deleted by hand names the machine of that older computation
                self._db.execute(
                    "INSERT OR REPLACE INTO batch_machines VALUES (?, ?, ?)", (eval_key, batch_index, machine)
                )
            fault_point("store.commit.during")
        fault_point("store.commit.after")
        return True

    def add_flag(self, eval_key: str, flag: str, detail: str) -> None:
        with _store_errors(self.path, "write a flag to"), self._write():
            self._db.execute("INSERT OR REPLACE INTO flags VALUES (?, ?, ?)", (eval_key, flag, detail))

    def flags(self, eval_key: str) -> dict[str, str]:
        rows = self._db.execute("SELECT flag, detail FROM flags WHERE eval_key = ? ORDER BY flag", (eval_key,))
        return dict(rows.fetchall())

    def certificates(self, cert_key: str) -> dict[int, dict[str, Any]]:
        """The verifier's stored certificates of ``cert_key`` by sample index: seconds to tens of seconds an image, so
        kept one by one as they finish, like an attack's batches, and a rerun certifies only the images missing."""
        rows = self._db.execute("SELECT sample_index, record FROM certificates WHERE cert_key = ?", (cert_key,))
        return {int(i): json.loads(record) for i, record in rows.fetchall()}

    def commit_certificate(self, cert_key: str, model_name: str, sample_index: int, record: dict[str, Any]) -> None:
        with _store_errors(self.path, "write a certificate to"), self._write():
            self._db.execute("INSERT OR REPLACE INTO certificates VALUES (?, ?, ?, ?)",
                             (cert_key, int(sample_index), model_name, json.dumps(record, sort_keys=True)))

    def outcomes(self, eval_key: str) -> Outcomes:
        rows = self._db.execute(
            "SELECT sample_index, clean_correct, adv_correct, perturbation, COALESCE(queries, -1) "
            "FROM outcomes WHERE eval_key = ? ORDER BY sample_index",
            (eval_key,),
        ).fetchall()
        arr = np.array(rows, dtype=np.float64).reshape(-1, 5)
        return Outcomes(
            sample_index=arr[:, 0].astype(np.int64),
            clean_correct=arr[:, 1].astype(bool),
            adv_correct=arr[:, 2].astype(bool),
            perturbation=arr[:, 3],
            queries=arr[:, 4].astype(np.int64),
        )

    def machine_seconds(self, eval_keys: Iterable[str]) -> dict[str | None, float]:
        """Batch seconds of ``eval_keys`` by the machine that computed them (None: batches stored without one, by an
        older arbibench)."""
        keys = list(eval_keys)
        totals: dict[str | None, float] = {}
        for i in range(0, len(keys), 500):  # SQLite's limit on bound parameters
            part = keys[i : i + 500]
            rows = self._db.execute(
                "SELECT m.machine, SUM(b.seconds) FROM batches b "
                "LEFT JOIN batch_machines m USING (eval_key, batch_index) "
                f"WHERE b.eval_key IN ({','.join('?' * len(part))}) GROUP BY m.machine",
                part,
            )
            for machine, seconds in rows:
                totals[machine] = totals.get(machine, 0.0) + float(seconds)
        return totals

    def batch_seconds(self, eval_key: str) -> float:
        row = self._db.execute("SELECT COALESCE(SUM(seconds), 0) FROM batches WHERE eval_key = ?", (eval_key,))
        return float(row.fetchone()[0])
