"""Shared by the before/after benchmarks of issue 15: the "before" model, store rows to compare, machine info.

"Before" is arbibench without the issue's two speed-ups: the query oracle answers from the reference model (not the
fused path) and the runner computes the black-box store batches one after the other (``pool=False``).
The library has no switch for the fused path, and needs none: :func:`reference_only` wraps the model in a module
that ``torch.fx`` cannot trace, so :func:`arbibench.nn.fused.fuse` refuses it and
:func:`arbibench.nn.fused.fused_path` hands the reference model back with its note, exactly as for any model
it cannot fuse. The wrapper's forward is the model's forward, so its logits are the same bit for bit; its state
dict keys differ (``model.`` prefix), hence its store keys, which is why :func:`store_rows` compares rows without
model hashes and keys. :func:`before_chunking` also restores the oracle's chunk of that time (256 images per model
call; 64 since it was measured, ``forward_chunk.py``).
"""

from __future__ import annotations

import io
import os
import platform
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from rich.console import Console
from torch import fx, nn

from arbibench.attacks import query
from arbibench.nn.fused import fused_path

REFUSED = "fused path refused"
BEFORE_QUERY_CHUNK = 256  # images per model call of the query oracle before the chunk was measured


@contextmanager
def before_chunking(before: bool = True) -> Iterator[None]:
    """While active (and ``before``), the query oracle calls the model with up to 256 images at once, as before."""
    saved = query.QUERY_CHUNK
    if before:
        query.QUERY_CHUNK = BEFORE_QUERY_CHUNK
    try:
        yield
    finally:
        query.QUERY_CHUNK = saved


class ReferenceOnly(nn.Module):
    """``model``'s forward behind a guard that torch.fx cannot trace: the fused path is refused, the reference
    model answers every query."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(x, fx.Proxy):
            raise TypeError("ReferenceOnly is not traceable: it stands for arbibench without the fused path")
        return self.model(x)


def reference_only(model: nn.Module) -> tuple[ReferenceOnly, str]:
    """``model`` wrapped so that the query oracle answers from the reference model, and the oracle's note saying so
    (checked: the fused path is refused)."""
    wrapped = ReferenceOnly(model).eval()
    answering, note = fused_path(wrapped)
    if answering is not wrapped or note is None or not note.startswith(REFUSED):
        raise RuntimeError(f"the fused path was not refused for the 'before' model (note: {note!r})")
    return wrapped, note


class Notes:
    """A console for :func:`~arbibench.evaluation.runner.evaluate`'s notes: the expected refusal of the 'before'
    model is dropped, any other note (e.g. fused answers the reference contradicted) is printed to stderr."""

    def __init__(self) -> None:
        self.buffer = io.StringIO()
        self.console = Console(file=self.buffer, width=10_000)

    def flush(self) -> None:
        text = self.buffer.getvalue()
        self.buffer.seek(0)
        self.buffer.truncate()
        for line in text.splitlines():
            if line.strip() and REFUSED not in line:
                print(line, file=sys.stderr, flush=True)


def check_fused(model: nn.Module) -> None:
    """The 'after' model really gets the fused path (and the fused copy is built now, outside any timing)."""
    answering, note = fused_path(model.eval())
    if answering is model or note is not None:
        raise RuntimeError(f"the fused path is not used for the 'after' model (note: {note!r})")


def warm_up(model: nn.Module, x: torch.Tensor) -> None:
    """One forward of the reference and of the fused copy, so that neither timing pays the first call's setup."""
    with torch.no_grad():
        model(x[:2])
        fused_path(model)[0](x[:2])


def store_rows(path: Path) -> list[tuple]:
    """Every outcome row of a store with its evaluation's attack and spec, and every flag: what must be equal
    before and after (no model hash, no keys, no timings)."""
    conn = sqlite3.connect(path)
    try:
        outcomes = conn.execute(
            "SELECT e.attack, e.spec, o.batch_index, o.sample_index, o.clean_correct, o.adv_correct, o.perturbation, "
            "o.queries FROM outcomes o JOIN evaluations e USING (eval_key) ORDER BY e.attack, e.spec, o.sample_index"
        ).fetchall()
        flags = conn.execute(
            "SELECT e.attack, e.spec, f.flag, f.detail FROM flags f JOIN evaluations e USING (eval_key) "
            "ORDER BY e.attack, e.spec, f.flag"
        ).fetchall()
    finally:
        conn.close()
    return outcomes + flags


def assert_same_rows(before: Path, after: Path, what: str) -> int:
    """Assert the two stores hold the same rows; returns how many."""
    a, b = store_rows(before), store_rows(after)
    assert a, f"{what}: the store {before} is empty"
    if a != b:
        diff = sum(1 for r, s in zip(a, b, strict=False) if r != s) + abs(len(a) - len(b))
        raise AssertionError(f"{what}: stored rows differ before vs after ({diff} of {max(len(a), len(b))} rows)")
    return len(a)


def machine_info(threads: int) -> str:
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [line.split(":", 1)[1] for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        cpu = names[0].strip() if names else cpu
    return (
        f"{platform.platform()}, {cpu}, {os.cpu_count()} CPU(s), {torch.get_num_threads()} torch thread(s) "
        f"(--threads {threads}), torch {torch.__version__}, Python {platform.python_version()}"
    )
