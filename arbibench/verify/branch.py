"""A bounded branch-and-bound over the undecided signs of a binary network.

Interval bounds alone fail once one sign is undecided: its layer's output then spans both values and every later
sign it reaches becomes undecided too. Splitting that sign into its values (+1 / -1, and 0 under ``torch.sign``)
gives sub-problems that cover every input of the box between them, each with that sign fixed; a sub-problem is
*proven* when its bounds put the label above every other class, or when a fixed sign contradicts its own bounds (no
input reaches it). The box is verified when every sub-problem is proven. Nodes are evaluated breadth first, in
batches, and the search stops as *unknown* when the nodes left to evaluate exceed the budget, when the root's first
undecided layer alone holds more undecided signs than the budget's doublings (forcing a sign leaves the others of
its layer as they were, so each must be split in turn), or when a node whose signs are all decided is still not
proven (the intervals of the real-valued paths are then too loose).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from arbibench.verify.network import FREE, NetworkBounds

Assignment = tuple[tuple[int, int, int], ...]  # (site, unit, value) of each forced sign


@dataclass(frozen=True)
class Search:
    """How a branch-and-bound ended: ``proven``, the nodes it evaluated, the undecided signs at its root."""

    proven: bool
    nodes: int
    undecided: int


def _forced(batch: list[Assignment], sizes: list[int], device: torch.device) -> dict[int, torch.Tensor]:
    forced: dict[int, torch.Tensor] = {}
    for row, assignment in enumerate(batch):
        for site, unit, value in assignment:
            if site not in forced:
                forced[site] = torch.full((len(batch), sizes[site]), FREE, dtype=torch.int8, device=device)
            forced[site][row, unit] = value
    return forced


def branch_and_bound(bounds: NetworkBounds, lo: torch.Tensor, hi: torch.Tensor, label: int, max_nodes: int,
                     batch_size: int = 32) -> Search:
    """Whether every input in ``[lo, hi]`` (float64, one image, batch dimension 1) is classified ``label``, within
    ``max_nodes`` bound passes of one node each."""
    queue: list[Assignment] = [()]
    nodes, root_undecided = 0, -1
    sizes: list[int] = []
    while queue:
        if len(queue) > max_nodes - nodes:
            return Search(False, nodes, root_undecided)
        batch, queue = queue[:batch_size], queue[batch_size:]
        n = len(batch)
        p = bounds.run(lo.expand(n, *lo.shape[1:]), hi.expand(n, *hi.shape[1:]), _forced(batch, sizes, bounds.device))
        sizes = p.site_sizes
        nodes += n
        if root_undecided < 0:
            root_undecided = int(p.undecided[0])
            if int(p.split_count[0]) > math.log2(max_nodes):
                return Search(False, nodes, root_undecided)
        proven = p.infeasible | (bounds.margins(p.features, label).amin(dim=1) > 0)
        for row in (~proven).nonzero().flatten().tolist():
            site = int(p.split_site[row])
            if site < 0:
                return Search(False, nodes, root_undecided)
            unit = int(p.split_unit[row])
            values = [v for v, allowed in zip((-1, 0, 1), p.split_values[row].tolist(), strict=True) if allowed]
            queue.extend(batch[row] + ((site, unit, v),) for v in values)
    return Search(True, nodes, root_undecided)
