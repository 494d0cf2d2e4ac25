"""Which network an evaluation's answers come from: the float *simulation* of a BNN, or its *deployed* bit-packed
form (:mod:`arbibench.deploy`).

One definition for every layer: the evaluation keys its store rows by it, the protocol writes it on the card, the
command line parses ``--inference`` with it, and the leaderboard reads it back, without importing torch. A ``str``
enum, so a value is the very string it replaces: store keys, JSON and card text are byte-identical (``str()`` and
f-strings give the bare value on every Python this package supports, as ``enum.StrEnum`` does from 3.11).
"""

from __future__ import annotations

from enum import Enum


class Inference(str, Enum):
    """The network that answers the clean pass and every black-box query and decides every outcome (white-box
    attacks always take their gradients on the simulation, the only differentiable form)."""

    SIMULATION = "simulation"  # the float model itself, as always
    DEPLOYED = "deployed"  # the bit-packed network of a BNN

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def parse(cls, value: str | Inference) -> Inference:
        """``value`` as an :class:`Inference`; one ValueError naming the choices for anything else."""
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(m.value for m in cls)
            raise ValueError(f"inference must be one of {choices} (--inference {choices.replace(', ', '|')}), "
                             f"got {value!r}") from None


__all__ = ["Inference"]
