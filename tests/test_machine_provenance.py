"""A card names what computed its batches: one machine, or each one's share of the batch seconds."""

from __future__ import annotations

import pytest

from arbibench.machine import UNRECORDED, provenance


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [({}, None), ({None: 5.0}, None), ({"CPU A": 5.0}, "CPU A"),
     ({"CPU A": 1.0, "GPU B (cuda)": 3.0}, "GPU B (cuda): 75% of batch seconds; CPU A: 25% of batch seconds"),
     ({None: 9.0, "CPU A": 1.0}, f"{UNRECORDED}: 90% of batch seconds; CPU A: 10% of batch seconds")],
)  # fmt: skip
def test_provenance(seconds: dict, expected: str | None) -> None:
    assert provenance(seconds) == expected


def test_a_gpu_is_told_from_a_cpu_by_the_name_computed_on_gives_it():
    from arbibench.machine import describe, on_gpu

    assert on_gpu("NVIDIA H200 (cuda)") and on_gpu("NVIDIA A100-SXM4-80GB (cuda:1)")
    assert not on_gpu(describe(2)) and not on_gpu(None)
    assert not on_gpu("a CPU named (cuda) somewhere, 2 threads")
