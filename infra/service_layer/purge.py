"""The purge: a follower of the event log that destroys deleted turns' keys.

`HistoryDeleted` is recorded first. The purge then reads the log from its own
tracked position and, for each `HistoryDeleted`, destroys the turns' data keys
(and, for each `FoldWithdrawn` recorded with it, the withdrawn folds' keys)
in the same key-store transaction that records the event's position. A crash
between the event and the purge therefore leaves a deletion that the next run
(the next deletion, or start-up) completes; the keys of turns that were not
deleted are never touched. Re-running is harmless: destroying a missing key
deletes nothing.

After destroying keys, the purge compacts the key store (rewrites its files),
because deleted rows otherwise stay readable on disk until the database
reuses the space. Compaction is tracked too, so it also completes after a crash.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import singledispatchmethod
from typing import Any

from eventsourcing.application import Application
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection
from eventsourcing.utils import get_topic

from turnledger.domain.conversation import Conversation, fold_key_id
from turnledger.domain.ports import KeyPurgeView

# Notifications read per page while catching up.
_PAGE = 1000


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """What one run of the purge did."""

    deletions_processed: int
    keys_destroyed: int
    position: int | None
    compacted: bool
    compaction_pending: bool
    # While pending: what holds it (an older transaction, a lock, WAL
    # retention...), as the key store reports it.
    pending_reasons: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        """'complete', or 'pending: <reasons>'."""
        if not self.compaction_pending:
            return "complete"
        return "pending: " + ("; ".join(self.pending_reasons) or "deferred")


class HistoryPurge(Projection[KeyPurgeView]):
    """Destroys the keys named by each `HistoryDeleted` event, tracking its position."""

    name = "history_purge"
    topics = (
        get_topic(Conversation.HistoryDeleted),
        get_topic(Conversation.FoldWithdrawn),
    )

    def __init__(self, view: KeyPurgeView) -> None:
        super().__init__(view)
        self.deletions_processed = 0
        self.keys_destroyed = 0

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)

    @process_event.register
    def _(self, domain_event: Conversation.HistoryDeleted, tracking: Tracking) -> None:
        self.keys_destroyed += self.view.destroy_keys(
            domain_event.originator_id, list(domain_event.turn_ids), tracking
        )
        self.deletions_processed += 1

    @process_event.register
    def _(self, domain_event: Conversation.FoldWithdrawn, tracking: Tracking) -> None:
        # A fold's summary was derived from the turns it covered: when they are
        # deleted, its key goes the same way (recorded in the same save).
        self.keys_destroyed += self.view.destroy_keys(
            domain_event.originator_id,
            [fold_key_id(fold_id) for fold_id in domain_event.fold_ids],
            tracking,
        )


class PurgeRunner:
    """Runs the purge to the head of the log, one run at a time per process."""

    def __init__(self, app: Application[Any], view: KeyPurgeView) -> None:
        self._app = app
        self._purge = HistoryPurge(view)
        self._lock = threading.Lock()

    @property
    def view(self) -> KeyPurgeView:
        return self._purge.view

    def run(self) -> PurgeReport:
        """Process every `HistoryDeleted` not yet purged, then compact if needed."""
        with self._lock:
            return self._run()

    def _run(self) -> PurgeReport:
        name = self._app.name
        view = self._purge.view
        recorder = self._app.recorder
        head = recorder.max_notification_id()
        position = view.max_tracking_id(name)
        processed_before = self._purge.deletions_processed
        destroyed_before = self._purge.keys_destroyed
        if head is not None and (position is None or position < head):
            start = position or 0
            while True:
                page = recorder.select_notifications(
                    start=start,
                    limit=_PAGE,
                    stop=head,
                    topics=self._purge.topics,
                    inclusive_of_start=False,
                )
                for notification in page:
                    self._purge.process_event(
                        self._app.mapper.to_domain_event(notification),
                        Tracking(name, notification.id),
                    )
                    start = notification.id
                if len(page) < _PAGE:
                    break
            # Everything up to the head has been seen: start there next time,
            # so start-up does not rescan a log with no deletions in it.
            view.insert_tracking(Tracking(name, head))
            position = head
        compacted = False
        if view.needs_compaction(name):
            compacted = view.compact(name)
        pending = view.needs_compaction(name)
        return PurgeReport(
            deletions_processed=self._purge.deletions_processed - processed_before,
            keys_destroyed=self._purge.keys_destroyed - destroyed_before,
            position=position,
            compacted=compacted,
            compaction_pending=pending,
            pending_reasons=view.compaction_holds(name) if pending else (),
        )

    def state(self) -> PurgeReport:
        """Where the purge stands, without running it (for status reports)."""
        return purge_state(self._purge.view, self._app.name)


def purge_state(view: KeyPurgeView, application_name: str) -> PurgeReport:
    """The purge's position and whether compaction is pending, read only."""
    pending = view.needs_compaction(application_name)
    return PurgeReport(
        deletions_processed=0,
        keys_destroyed=0,
        position=view.max_tracking_id(application_name),
        compacted=False,
        compaction_pending=pending,
        pending_reasons=view.compaction_holds(application_name) if pending else (),
    )
