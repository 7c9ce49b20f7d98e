"""The in-memory store: the library's, with the read side kept beside the events.

Rows are applied under the recorder's own lock, in the same step as the
events, so the memory store keeps the same contract as SQLite and
PostgreSQL: a reader never sees events without their rows, or rows without
their events.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import (
    ApplicationRecorder,
    IntegrityError,
    Notification,
    StoredEvent,
)
from eventsourcing.popo import POPOFactory

from turnledger.infra.library_compat import MemoryRecorderWithRows
from turnledger.projections.ledger_rows import RowChanges
from turnledger.projections.read_side import LedgerView


class MemoryReadSideRecorder(MemoryRecorderWithRows, LedgerView):
    def __init__(self) -> None:
        MemoryRecorderWithRows.__init__(self)
        LedgerView.__init__(self)
        # The per-user feed index (infra/owner_feed.py): each owner's log
        # positions, ascending.
        self._owner_feed: dict[str, list[int]] = {}

    def check_rows(self, **kwargs: Any) -> None:
        changes: RowChanges | None = kwargs.get("read_side")
        if changes is not None:
            try:
                self.check(changes)
            except ValueError as error:
                raise IntegrityError(str(error)) from None

    def apply_rows(
        self, ids: Sequence[int], stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> None:
        changes: RowChanges | None = kwargs.get("read_side")
        if changes is not None:
            self.apply(changes)
        self._index_owners(ids, stored_events)

    def _index_owners(
        self, ids: Sequence[int], stored_events: Sequence[StoredEvent]
    ) -> None:
        heads = self.conversations({_uuid(e.originator_id) for e in stored_events})
        for notification_id, event in zip(ids, stored_events, strict=True):
            head = heads.get(_uuid(event.originator_id))
            if head is not None:
                self._owner_feed.setdefault(head.owner_id, []).append(notification_id)

    def select_owner_notifications(
        self, owner_id: str, after: int, limit: int, topics: Sequence[str] = ()
    ) -> list[Notification]:
        """The owner's events after log position `after`, oldest first."""
        with self.lock:
            positions = self._owner_feed.get(owner_id, [])
            start = bisect.bisect_right(positions, after)
            found: list[Notification] = []
            for position in positions[start:]:
                (notification,) = self.select_notifications(position, 1)
                if not topics or notification.topic in topics:
                    found.append(notification)
                    if len(found) == limit:
                        break
            return found

    def read_side_rows(self) -> Any:
        return self.rows()

    def read_side_is_empty(self) -> bool:
        return not self.conversations_of_any()

    def replace_read_side(self, view: LedgerView) -> None:
        """Replace every row with those of `view` (a rebuild from the log)."""
        conversations, turns, folds = view.rows()
        with self.lock:
            LedgerView.__init__(self)
            self.apply(
                RowChanges(
                    conversations=tuple(conversations),
                    new_turns=tuple(turns),
                    new_folds=tuple(folds),
                )
            )
            self._owner_feed = {}
            every = self.select_notifications(None, self.max_notification_id() or 1)
            self._index_owners(
                [n.id for n in every],
                [
                    StoredEvent(n.originator_id, n.originator_version, n.topic, n.state)
                    for n in every
                ],
            )


class MemoryFactory(POPOFactory):
    def application_recorder(self) -> ApplicationRecorder:
        return MemoryReadSideRecorder()


def _uuid(value: UUID | str) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))
