"""What the read side's queries return: immutable values."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from turnledger.domain.conversation import TurnStatus
from turnledger.domain.parts import TurnParts
from turnledger.projections.receipt import WindowReceipt

if TYPE_CHECKING:
    from turnledger.projections.window import Window

MAX_HISTORY_PAGE = 500
# The most changes one read of the sync feed returns.
MAX_CHANGES_PER_READ = 1000


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """A turn as the owner sees it; text is None once the turn is deleted."""

    position: int
    turn_id: str
    status: TurnStatus
    recorded_at: datetime
    deleted_at: datetime | None
    question: str | None
    answer: str | None
    # The whole turn (attachments, assistant steps); None once deleted. A
    # text-only turn's parts hold just its question and answer.
    parts: TurnParts | None = None
    # Why a turn that was not deleted has no text: "key-damaged" when its
    # stored key was altered (TurnKeyDamagedError); None when it has its text.
    unreadable: str | None = None

    @property
    def deleted(self) -> bool:
        return self.deleted_at is not None


@dataclass(frozen=True, slots=True)
class HistoryPage:
    conversation_id: UUID
    version: int
    total_turns: int
    items: tuple[HistoryItem, ...]
    next_offset: int | None


@dataclass(frozen=True, slots=True)
class ProjectedWindow:
    """A window plus the ledger version it was derived from.

    Pass it to `confirm_turn(..., window=...)` with the answer it produced to
    keep its receipt. The question and system instructions are held here, in
    memory, only to check that pairing and to seal the instructions.
    """

    conversation_id: UUID
    ledger_version: int
    window: Window
    question: str = field(default="", repr=False)
    system: str = field(default="", repr=False)
    policy: dict[str, Any] = field(default_factory=dict)

    @property
    def sent_fold_id(self) -> str | None:
        return self.window.fold_id if self.window.fold_sent else None

    def receipt(self, mac_key: bytes | None) -> WindowReceipt:
        """The content-free receipt of this window, its body bound by `mac_key`
        (derived from the keys of every turn in the body: see receipt.py);
        None when one of those turns was deleted meanwhile: the body is then
        not bound at all."""
        return WindowReceipt.of_body(
            policy=self.policy,
            ledger_version=self.ledger_version,
            turn_ids=self.window.kept_turn_ids,
            body=self.window.body,
            mac_key=mac_key,
            fold_id=self.sent_fold_id,
        )
