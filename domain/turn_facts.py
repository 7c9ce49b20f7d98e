"""What the read side tells the aggregate's commands about turns and folds.

The aggregate keeps no per-turn state (domain/conversation.py): a command
that needs to know a turn's status or a fold's span is given these facts,
read inside the write.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class TurnStatus(StrEnum):
    CONFIRMED = "confirmed"
    FAILED = "failed"
    STOPPED = "stopped"


UNSENT_OUTCOMES = frozenset({TurnStatus.FAILED, TurnStatus.STOPPED})


@dataclass(frozen=True, slots=True)
class TurnFacts:
    """What the read side knows about one recorded turn, as a command needs it."""

    turn_id: str
    position: int  # 0-based, in the order turns were recorded
    status: TurnStatus
    version: int  # of the event that holds its sealed text
    recorded_at: datetime
    deleted_version: int | None = None

    @property
    def deleted(self) -> bool:
        return self.deleted_version is not None

    @property
    def eligible(self) -> bool:
        """Whether this turn may be sent in a request window."""
        return self.status is TurnStatus.CONFIRMED and not self.deleted


@dataclass(frozen=True, slots=True)
class FoldFacts:
    """A live fold, as the rules about folds need it."""

    fold_id: str
    covers_through_position: int
    covered_turns: int
