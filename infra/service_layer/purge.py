"""The purge: a follower of the event log that destroys deleted turns' keys.

`HistoryDeleted` is recorded first. The purge then reads the log from its own
tracked position and, for each `HistoryDeleted`, destroys the turns' data keys
(and, for each `FoldWithdrawn` recorded with it, the withdrawn folds' keys)
in the same key-store transaction that records the event's position. A crash
between the event and the purge therefore leaves a deletion that the next run
(the next deletion, or start-up) completes; the keys of turns that were not
deleted are never touched. Re-running is harmless: destroying a missing key
deletes nothing.

It is a `Follower` (infra/log_follow.py) made of the library's parts: the
key store is the projection's `TrackingRecorder`, and the run reads the
log's notifications of these two topics up to the head it found.

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
from turnledger.infra.log_follow import (
    Follower,
    NotificationReader,
    ProjectionHandler,
    TrackedPosition,
)

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
            # Read up to the head as it is now: the position then reaches it
            # even past events of other topics, so start-up does not rescan a
            # log with no deletions in it.
            position = Follower(
                position=TrackedPosition(view, name),
                read_page=NotificationReader(
                    recorder, topics=self._purge.topics, stop=head
                ),
                handle=ProjectionHandler(self._purge, self._app.mapper, name),
                page_size=_PAGE,
            ).run()
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
