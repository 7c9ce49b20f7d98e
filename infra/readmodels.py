"""Read models: tables derived from the event log, each a tracked follower of it.

Every read model records the position (notification id) of the last event it
has applied, in the same transaction as the rows that event changed, so it
can be dropped and rebuilt from the log at any time, and a rebuild that is
interrupted resumes from its tracked position instead of starting over.

To add one: write its pure fold under `projections/`, a `ReadModelStore`
here (or in its own module), and register a factory in `READ_MODELS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from eventsourcing.persistence import Notification

from turnledger.domain.application import Conversations
from turnledger.infra.settings import Settings


@dataclass(frozen=True, slots=True)
class Tracking:
    """Where a read model is in the log, and whether a rebuild is under way."""

    position: int
    rebuilding: bool


class ReadModelStore(Protocol):
    """One read model's tables, written only by its follower."""

    name: str

    def tracking(self) -> Tracking:
        """The tracked position (0: nothing applied) and rebuild state."""
        ...

    def reset(self) -> None:
        """Drop every row, track position 0 and mark a rebuild as under way."""
        ...

    def apply(
        self, notifications: Sequence[Notification], ledger: Conversations
    ) -> None:
        """Apply events in log order and track the last one, in one transaction."""
        ...

    def finish_rebuild(self) -> None:
        """Mark the rebuild as complete."""
        ...

    def close(self) -> None: ...


ReadModelFactory = Callable[[Settings], ReadModelStore]


def _conversation_index(settings: Settings) -> ReadModelStore:
    from turnledger.infra.conversation_index import open_conversation_index

    return open_conversation_index(settings)


READ_MODELS: dict[str, ReadModelFactory] = {
    "conversation_index": _conversation_index,
}
"""Every read model `turnledger rebuild` knows, by name."""


def catch_up(
    ledger: Conversations,
    store: ReadModelStore,
    *,
    page_size: int = 1000,
    max_pages: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Apply every event after the tracked position; return how many were applied.

    `max_pages` bounds the work done in this call (the rest is left for the
    next one), which is also how tests interrupt a rebuild part way.
    """
    applied = 0
    pages = 0
    position = store.tracking().position
    while max_pages is None or pages < max_pages:
        page = ledger.recorder.select_notifications(
            position, page_size, inclusive_of_start=False
        )
        if not page:
            break
        store.apply(page, ledger)
        position = page[-1].id
        applied += len(page)
        pages += 1
        if progress is not None:
            progress(len(page))
    return applied


def rebuild(
    ledger: Conversations,
    store: ReadModelStore,
    *,
    restart: bool = False,
    page_size: int = 1000,
    max_pages: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> bool:
    """Drop and rebuild `store` from the log; True when it is complete.

    A rebuild left unfinished (interrupted, or stopped by `max_pages`) is
    resumed from its tracked position unless `restart` is set.
    """
    if restart or not store.tracking().rebuilding:
        store.reset()
    catch_up(ledger, store, page_size=page_size, max_pages=max_pages, progress=progress)
    latest = ledger.recorder.max_notification_id() or 0
    if store.tracking().position >= latest:
        store.finish_rebuild()
        return True
    return False


def conversation_id_of(notification: Notification) -> UUID:
    return UUID(str(notification.originator_id))
