"""The state of one pull through the change feed, shared by both clients.

A pull asks for the changes after the stored cursor, hands each batch to the
application's handler and only then saves the cursor that follows it; it
stops once the service says it has nothing more (`has_more` false). Only the
first request of a pull long-polls: the follow-ups of a `has_more` answer are
ready at once.
"""

from __future__ import annotations

from turnledger.infra.client.cursors import CursorStore
from turnledger.infra.wire.schemas import (
    ConversationStartedOut,
    HistoryDeletedOut,
    OtherChangeOut,
    SyncOut,
    TurnRecordedOut,
)

Change = ConversationStartedOut | TurnRecordedOut | HistoryDeletedOut | OtherChangeOut


class SyncStep:
    def __init__(self, store: CursorStore) -> None:
        self._store = store
        self.cursor = store.load()
        self.wanted = True
        self.handed = 0
        self._first = True

    def wait(self, timeout: float) -> float:
        return timeout if self._first else 0.0

    def done(self, page: SyncOut) -> None:
        """Call after the handler returned for `page.changes`."""
        if page.changes or page.has_more:
            # Without changes the cursor only moved past other users' events:
            # not worth a durable write, the next pull skips them again.
            self._store.save(page.next_cursor)
        self.cursor = page.next_cursor
        self.handed += len(page.changes)
        self._first = False
        self.wanted = page.has_more
