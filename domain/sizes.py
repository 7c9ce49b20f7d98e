"""The sizes the read side keeps of a turn, so a window can plan it unread.

Measured before the texts are sealed (projections/turn_sizes.py), kept in the
turn's row and erased with its text; never part of an event.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TurnSizes:
    """Sizes of a turn's texts, measured before they are sealed."""

    question_json_bytes: int
    answer_json_bytes: int
    question_chars: int
    answer_chars: int
    # The sizes of the turn's attachments and steps (None: a text-only turn).
    parts: PartsSizes | None = None


@dataclass(frozen=True, slots=True)
class PartsSizes:
    """What a window needs to plan a turn with parts without reading it.

    Measured before sealing, like the texts' sizes, with the char/4 estimate
    and no trimming: the whole turn's bytes and its steps' and attachments'
    tokens in each wire format (in the order of formats.WIRE_FORMATS), the
    code points of the step texts, and the longest text a trim could cut.
    """

    chars: int
    longest_chars: int
    turn_bytes: tuple[int, ...]
    tokens: tuple[int, ...]

    def encode(self) -> str:
        """One short text column: "chars,longest,bytes...,tokens..."."""
        return ",".join(
            str(n)
            for n in (self.chars, self.longest_chars, *self.turn_bytes, *self.tokens)
        )

    @classmethod
    def decode(cls, text: str) -> PartsSizes:
        numbers = [int(n) for n in text.split(",")]
        half = (len(numbers) - 2) // 2
        return cls(
            numbers[0],
            numbers[1],
            tuple(numbers[2 : 2 + half]),
            tuple(numbers[2 + half :]),
        )
