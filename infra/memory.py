"""The in-memory store: the library's, with the read side kept beside the events.

Rows are applied under the recorder's own lock, in the same step as the
events, so the memory store keeps the same contract as SQLite and
PostgreSQL: a reader never sees events without their rows, or rows without
their events.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.persistence import ApplicationRecorder, IntegrityError
from eventsourcing.popo import POPOFactory

from turnledger.infra.library_compat import MemoryRecorderWithRows
from turnledger.projections.ledger_rows import RowChanges
from turnledger.projections.read_side import LedgerView


class MemoryReadSideRecorder(MemoryRecorderWithRows, LedgerView):
    def __init__(self) -> None:
        MemoryRecorderWithRows.__init__(self)
        LedgerView.__init__(self)

    def check_rows(self, **kwargs: Any) -> None:
        changes: RowChanges | None = kwargs.get("read_side")
        if changes is not None:
            try:
                self.check(changes)
            except ValueError as error:
                raise IntegrityError(str(error)) from None

    def apply_rows(self, **kwargs: Any) -> None:
        changes: RowChanges | None = kwargs.get("read_side")
        if changes is not None:
            self.apply(changes)

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


class MemoryFactory(POPOFactory):
    def application_recorder(self) -> ApplicationRecorder:
        return MemoryReadSideRecorder()
