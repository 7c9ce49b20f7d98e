"""The in-memory store: the library's, with the read side kept beside the events.

Rows are applied under the recorder's own lock, in the same step as the
events, so the memory store keeps the same contract as SQLite and
PostgreSQL: a reader never sees events without their rows, or rows without
their events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import ApplicationRecorder, IntegrityError, StoredEvent
from eventsourcing.popo import POPOApplicationRecorder, POPOFactory

from turnledger.projections.ledger_rows import RowChanges
from turnledger.projections.read_side import LedgerView


class MemoryReadSideRecorder(POPOApplicationRecorder, LedgerView):
    def __init__(self) -> None:
        POPOApplicationRecorder.__init__(self)
        LedgerView.__init__(self)

    def _insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        changes: RowChanges | None = kwargs.get("read_side")
        with self._database_lock:
            if changes is not None:
                try:
                    self.check(changes)
                except ValueError as error:
                    raise IntegrityError(str(error)) from None
            ids = super()._insert_events(stored_events, **kwargs)
            if changes is not None:
                self.apply(changes)
            return ids

    def read_side_rows(self) -> Any:
        return self.rows()

    def read_side_is_empty(self) -> bool:
        return not self.conversations_of_any()

    def replace_read_side(self, view: LedgerView) -> None:
        """Replace every row with those of `view` (a rebuild from the log)."""
        conversations, turns, folds = view.rows()
        with self._database_lock:
            LedgerView.__init__(self)
            self.apply(
                RowChanges(
                    conversations=tuple(conversations),
                    new_turns=tuple(turns),
                    new_folds=tuple(folds),
                )
            )


class MemoryFactory(POPOFactory):
    def application_recorder(self) -> ApplicationRecorder:
        return MemoryReadSideRecorder()
