"""The change feed: every event of one user's conversations after a log position.

Devices keep a position in the application's notification log (the order in
which events were committed) and ask for everything after it. The log holds
every user's events, so the feed filters it by owner, read for each page of
the log from the read side's conversation rows (written with the events, so
any process, however new, sees the owner of every event it reads).

Text is never cached here. A turn's text is decrypted when a change is served,
and any turn that is deleted by then is served without text, so a device whose
position is older than a deletion never receives the deleted words.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification
from eventsourcing.utils import get_topic

from turnledger.domain.conversation import Conversation, TurnStatus
from turnledger.domain.errors import InvalidInputError
from turnledger.domain.parts import TurnParts
from turnledger.infra.service_layer.application import Conversations
from turnledger.projections.results import MAX_CHANGES_PER_READ
from turnledger.projections.turn_texts import open_turns

_LOG_PAGE = 250
# A read stops adding changes once their stored events (sealed text included)
# pass this many bytes, so a batch of large turns cannot exhaust memory.
_MAX_STORED_BYTES_PER_READ = 8 * 1_048_576
# A read stops after scanning this many notifications of the whole log even if
# none was the caller's, and hands back a position past them, so one request
# never walks an unbounded stretch of other users' events.
_MAX_SCANNED_PER_READ = 20_000

STARTED_TOPIC = get_topic(Conversation.Started)


@dataclass(frozen=True, slots=True)
class ConversationStartedChange:
    conversation_id: UUID
    version: int
    at: datetime


@dataclass(frozen=True, slots=True)
class TurnRecordedChange:
    """A turn, with its text unless the turn is deleted (then both are None)."""

    conversation_id: UUID
    version: int
    at: datetime
    turn_id: str
    status: TurnStatus
    question: str | None
    answer: str | None
    deleted: bool
    # The whole turn (attachments, steps); None when deleted.
    parts: TurnParts | None = None


@dataclass(frozen=True, slots=True)
class HistoryDeletedChange:
    """The device must purge these turns' text from its local copy."""

    conversation_id: UUID
    version: int
    at: datetime
    turn_ids: tuple[str, ...]
    whole_history: bool
    deleted_by: str


@dataclass(frozen=True, slots=True)
class OtherChange:
    """An event type this feed does not describe; it still takes a version."""

    conversation_id: UUID
    version: int
    at: datetime
    event_type: str


Change = (
    ConversationStartedChange | TurnRecordedChange | HistoryDeletedChange | OtherChange
)


@dataclass(frozen=True, slots=True)
class ChangeBatch:
    changes: tuple[Change, ...]
    position: int
    """The log position to resume from: past everything this read looked at."""
    caught_up: bool
    """True when the read reached the head of the log."""


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    conversation_id: UUID
    started_at: datetime


class ConversationFeed:
    """Reads one user's changes from the ledger's notification log."""

    def __init__(self, ledger: Conversations) -> None:
        self._ledger = ledger

    # Queries ------------------------------------------------------------------

    def head_position(self) -> int:
        return self._ledger.recorder.max_notification_id() or 0

    def list_conversations(self, owner_id: str) -> list[ConversationSummary]:
        """The owner's conversations, oldest first."""
        return [
            ConversationSummary(row.conversation_id, row.created_at)
            for row in self._ledger.read_side.conversations_of(owner_id)
        ]

    def owner_of(self, conversation_id: UUID) -> str | None:
        row = self._ledger.read_side.conversations([conversation_id]).get(
            conversation_id
        )
        return None if row is None else row.owner_id

    def changes_since(
        self, owner_id: str, position: int, *, limit: int = MAX_CHANGES_PER_READ
    ) -> ChangeBatch:
        """The owner's changes after `position`, in log order, at most `limit`."""
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise InvalidInputError("position", "must be a non-negative integer")
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not (1 <= limit <= MAX_CHANGES_PER_READ)
        ):
            raise InvalidInputError(
                "limit", f"must be an integer from 1 to {MAX_CHANGES_PER_READ}"
            )
        mine: list[Notification] = []
        mine_bytes = 0
        scanned = 0
        full = caught_up = False
        while not full and scanned < _MAX_SCANNED_PER_READ:
            page = self._ledger.recorder.select_notifications(
                start=position + 1, limit=_LOG_PAGE
            )
            owners = self._owners(page)
            for notification in page:
                if owners.get(_as_uuid(notification.originator_id)) == owner_id:
                    # A batch always takes one change, however large, so a
                    # device can never get stuck behind a big turn.
                    mine_bytes += len(notification.state)
                    if mine and mine_bytes > _MAX_STORED_BYTES_PER_READ:
                        full = True
                        break
                    mine.append(notification)
                position = notification.id
                if len(mine) == limit:
                    full = True
                    break
            scanned += len(page)
            if not full and len(page) < _LOG_PAGE:
                caught_up = True
                break
        if not mine and caught_up and position > self.head_position():
            # Only possible when the store went back in time (a restore from an
            # older backup): events after the head would be missed unseen.
            raise InvalidInputError(
                "position",
                "is past the end of the log (was the store restored from an older "
                "backup?); sync again from the beginning",
            )
        return ChangeBatch(tuple(self._describe(mine)), position, caught_up)

    # Internals ----------------------------------------------------------------

    def _owners(self, page: Sequence[Notification]) -> dict[UUID, str]:
        ids = {_as_uuid(notification.originator_id) for notification in page}
        rows = self._ledger.read_side.conversations(ids)
        return {conversation_id: row.owner_id for conversation_id, row in rows.items()}

    def _decode(self, notification: Notification) -> Any:
        """The domain event; typed loosely, as its class depends on the topic."""
        return self._ledger.mapper.to_domain_event(notification)

    def _describe(self, notifications: Sequence[Notification]) -> Iterable[Change]:
        events = [self._decode(n) for n in notifications]
        texts = self._open_texts(events)
        for recorded in events:
            conversation_id = _as_uuid(recorded.originator_id)
            common: dict[str, Any] = {
                "conversation_id": conversation_id,
                "version": recorded.originator_version,
                "at": recorded.timestamp,
            }
            if isinstance(recorded, Conversation.Started):
                yield ConversationStartedChange(**common)
            elif isinstance(
                recorded, Conversation.TurnConfirmed | Conversation.TurnAbandoned
            ):
                status = (
                    TurnStatus.CONFIRMED
                    if isinstance(recorded, Conversation.TurnConfirmed)
                    else TurnStatus(recorded.outcome)
                )
                text = texts.get((conversation_id, recorded.turn_id))
                yield TurnRecordedChange(
                    **common,
                    turn_id=recorded.turn_id,
                    status=status,
                    question=text.question if text else None,
                    answer=text.answer if text else None,
                    deleted=text is None,
                    parts=text,
                )
            elif isinstance(recorded, Conversation.HistoryDeleted):
                yield HistoryDeletedChange(
                    **common,
                    turn_ids=tuple(recorded.turn_ids),
                    whole_history=recorded.whole_history,
                    deleted_by=recorded.deleted_by,
                )
            else:
                yield OtherChange(**common, event_type=type(recorded).__name__)

    def _open_texts(self, events: Sequence[Any]) -> dict[tuple[UUID, str], TurnParts]:
        """Decrypt the turns, then drop those of turns deleted by now.

        The order matters: deletion records its event before destroying keys,
        so checking the current state *after* decrypting catches a deletion
        that lands between the two steps.
        """
        by_conversation: dict[UUID, list[Any]] = {}
        for recorded in events:
            if isinstance(
                recorded, Conversation.TurnConfirmed | Conversation.TurnAbandoned
            ):
                by_conversation.setdefault(_as_uuid(recorded.originator_id), []).append(
                    recorded
                )
        texts: dict[tuple[UUID, str], TurnParts] = {}
        for conversation_id, recorded_turns in by_conversation.items():
            opened = open_turns(self._ledger.vault, conversation_id, recorded_turns)
            for turn_id, turn in opened.items():
                texts[(conversation_id, turn_id)] = turn
        for conversation_id, recorded_turns in by_conversation.items():
            rows = self._ledger.read_side.turns_by_id(
                conversation_id, {recorded.turn_id for recorded in recorded_turns}
            )
            for turn_id, row in rows.items():
                if row.deleted:
                    texts.pop((conversation_id, turn_id), None)
        return texts


def _as_uuid(value: UUID | str) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))
