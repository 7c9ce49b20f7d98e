"""The change feed: every event of one user's conversations after a log position.

Devices keep a position in the application's notification log (the order in
which events were committed) and ask for everything after it. The store keeps
a per-user index of that log, written in the events' own transaction
(infra/owner_feed.py), so a read walks only the caller's own events: its cost
follows what the user changed, however much other users write.

Text is never cached here. A turn's text is decrypted when a change is served,
and any turn that is deleted by then is served without text, so a device whose
position is older than a deletion never receives the deleted words.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast
from uuid import UUID

from eventsourcing.persistence import Notification
from eventsourcing.utils import get_topic

from turnledger.domain.conversation import Conversation, TurnStatus
from turnledger.domain.errors import InvalidInputError
from turnledger.domain.parts import TurnParts
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.feed_texts import (
    OwnerTurnLog,
    TurnState,
    open_read_texts,
    open_texts,
)
from turnledger.projections.dropped import KEY_DAMAGED
from turnledger.projections.results import MAX_CHANGES_PER_READ

# Index rows read per query: a read of `limit` changes takes ceil(limit/100)
# queries, each of at most this many events.
_FEED_PAGE = 100
# A read stops adding changes once their stored events (sealed text included)
# pass this many bytes, so a batch of large turns cannot exhaust memory.
_MAX_STORED_BYTES_PER_READ = 8 * 1_048_576


class OwnerLog(Protocol):
    """The per-user feed index every store of the ledger keeps."""

    def select_owner_notifications(
        self, owner_id: str, after: int, limit: int, topics: Sequence[str] = ()
    ) -> Sequence[Notification]:
        """The owner's events after log position `after`, oldest first."""
        ...


STARTED_TOPIC = get_topic(Conversation.Started)
DELETED_TOPIC = get_topic(Conversation.HistoryDeleted)


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
    # "key-damaged": not deleted, but its stored key was altered, so its text
    # cannot be read (the other turns are sent as usual).
    unreadable: str | None = None


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
    positions: tuple[int, ...] = ()
    """Each change's log position (as many as `changes`, in the same order)."""

    def after(self, position: int) -> ChangeBatch:
        """The changes after log `position`: what a read from there would
        have returned of this one (`position` at or before this batch's end)."""
        index = bisect.bisect_right(self.positions, position)
        if index == 0:
            return self
        return ChangeBatch(
            self.changes[index:], self.position, self.caught_up, self.positions[index:]
        )


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
        turns: dict[int, TurnState] | None = None
        if hasattr(self._log, "select_owner_reads"):  # PostgreSQL
            turns = {}
            mine, position, caught_up, head = self._own_reads(
                cast(OwnerTurnLog, self._log), owner_id, position, limit, turns
            )
        else:
            mine, position, caught_up = self._own_notifications(
                owner_id, position, limit
            )
            head = None
        if not mine and position > (self.head_position() if head is None else head):
            # Only possible when the store went back in time (a restore from an
            # older backup): events after the head would be missed unseen.
            raise InvalidInputError(
                "position",
                "is past the end of the log (was the store restored from an older "
                "backup?); sync again from the beginning",
            )
        return ChangeBatch(
            tuple(self._describe(mine, owner_id, turns)),
            position,
            caught_up,
            tuple(notification.id for notification in mine),
        )

    def deletions_of(self, owner_id: str) -> list[HistoryDeletedChange]:
        """Every deletion the owner's conversations recorded, in log order
        (read through the index, decoding only the deletions)."""
        found: list[HistoryDeletedChange] = []
        position = 0
        while True:
            page = self._log.select_owner_notifications(
                owner_id, position, _FEED_PAGE, topics=(DELETED_TOPIC,)
            )
            found.extend(
                change
                for change in self._describe(page, owner_id)
                if isinstance(change, HistoryDeletedChange)
            )
            if len(page) < _FEED_PAGE:
                return found
            position = page[-1].id

    # Internals ----------------------------------------------------------------

    @property
    def _log(self) -> OwnerLog:
        return cast(OwnerLog, self._ledger.recorder)

    def _own_notifications(
        self, owner_id: str, position: int, limit: int
    ) -> tuple[list[Notification], int, bool]:
        """At most `limit` of the owner's events after `position`, the position
        to resume from, and whether nothing of the owner's follows them."""
        mine: list[Notification] = []
        mine_bytes = 0
        while True:
            wanted = min(limit - len(mine), _FEED_PAGE)
            # One more than wanted: whether anything follows, without a query.
            page = self._log.select_owner_notifications(owner_id, position, wanted + 1)
            for notification in page[:wanted]:
                # A batch always takes one change, however large, so a device
                # can never get stuck behind a big turn.
                mine_bytes += len(notification.state)
                if mine and mine_bytes > _MAX_STORED_BYTES_PER_READ:
                    return mine, position, False
                mine.append(notification)
                position = notification.id
            if len(page) <= wanted:
                return mine, position, True
            if len(mine) == limit:
                return mine, position, False

    def _own_reads(
        self,
        log: OwnerTurnLog,
        owner_id: str,
        position: int,
        limit: int,
        turns: dict[int, TurnState],
    ) -> tuple[list[Notification], int, bool, int]:
        """`_own_notifications` through `select_owner_reads`, adding each turn
        event's state to `turns`; and the log's head as of the first page."""
        mine: list[Notification] = []
        mine_bytes = 0
        head: int | None = None
        while True:
            wanted = min(limit - len(mine), _FEED_PAGE)
            page, states, page_head = log.select_owner_reads(
                owner_id, position, wanted + 1
            )
            head = page_head if head is None else head
            turns.update(states)
            for notification in page[:wanted]:
                mine_bytes += len(notification.state)
                if mine and mine_bytes > _MAX_STORED_BYTES_PER_READ:
                    return mine, position, False, head
                mine.append(notification)
                position = notification.id
            if len(page) <= wanted:
                return mine, position, True, head
            if len(mine) == limit:
                return mine, position, False, head

    def _decode(self, notification: Notification) -> Any:
        """The domain event; typed loosely, as its class depends on the topic."""
        return self._ledger.mapper.to_domain_event(notification)

    def _texts(
        self,
        notifications: Sequence[Notification],
        events: list[Any],
        owner_id: str,
        turns: Mapping[int, TurnState] | None,
        damaged: set[tuple[UUID, str]],
    ) -> dict[tuple[UUID, str], TurnParts]:
        """The turns' texts: from the keys and flags read with the events
        when there are (and they match), else read now."""
        if turns is not None:
            read = list(zip(notifications, events, strict=True))
            texts = open_read_texts(self._ledger, read, turns, owner_id, damaged)
            if texts is not None:
                return texts
            damaged.clear()
        return open_texts(self._ledger, events, owner_id, damaged)

    def _describe(
        self,
        notifications: Sequence[Notification],
        owner_id: str,
        turns: Mapping[int, TurnState] | None = None,
    ) -> Iterable[Change]:
        """The changes, texts opened for `owner_id` (bound seals open for it
        alone, however the owner index was edited); with `turns`, from the
        keys and deletion flags read with the events."""
        events = [self._decode(n) for n in notifications]
        damaged: set[tuple[UUID, str]] = set()
        texts = self._texts(notifications, events, owner_id, turns, damaged)
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
                unreadable = (
                    KEY_DAMAGED
                    if (conversation_id, recorded.turn_id) in damaged
                    else None
                )
                yield TurnRecordedChange(
                    **common,
                    turn_id=recorded.turn_id,
                    status=status,
                    question=text.question if text else None,
                    answer=text.answer if text else None,
                    deleted=text is None and unreadable is None,
                    parts=text,
                    unreadable=unreadable,
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


def _as_uuid(value: UUID | str) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))
