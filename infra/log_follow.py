"""One way to follow the event log: a position, a page reader, a handler, and
one transaction per page.

A `Follower` reads its position inside a transaction, reads the page of the
log after it, hands the page to its handler, which writes in that same
transaction, and records the position the page was read through in it too;
then the next page, until a short page says it reached the end. A crash
therefore leaves the follower at a page boundary, with the handler's writes
and the position both there or both not, and the next run starts from there.

Every follower of the log uses it (docs/architecture.md, "Followers"): the
purge (`service_layer/purge.py`, with the library's `Projection` and
`TrackingRecorder`: `TrackedPosition`, `NotificationReader`,
`ProjectionHandler`), the transparency log's tree (`merkle_follow.py`, raw
rows and its own tracking row) and the long-polls' wake-ups
(`http/wake_follow.py`, a position in memory that starts at the log's head).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from eventsourcing.persistence import (
    ApplicationRecorder,
    Mapper,
    Notification,
    Tracking,
    TrackingRecorder,
)
from eventsourcing.projection import Projection

Item = TypeVar("Item")
Tx = TypeVar("Tx")


@dataclass(frozen=True, slots=True)
class Page(Generic[Item]):
    """Items after a position, in log order, and how far the reader read.

    `through` is the last item's position, or further when the reader knows it
    passed over items it does not return (a topic filter read up to a stop);
    None when it read nothing.
    """

    items: Sequence[Item]
    through: int | None


class Position(Protocol[Tx]):
    """Where a follower is, kept in the transaction its handler writes in."""

    def transaction(self) -> AbstractContextManager[Tx]:
        """One transaction: the position is read, a page handled, the new
        position recorded, then it commits (or rolls back, all of it)."""
        ...

    def get(self, transaction: Tx) -> int | None:
        """The position reached (None: nothing read yet, start at the first)."""
        ...

    def set(self, transaction: Tx, position: int) -> None: ...


PageReader = Callable[[int | None, int], Page[Item]]
"""`(after, limit)`: up to `limit` items after position `after`, in log order."""

Handler = Callable[[Tx, Sequence[Item]], None]
"""What a page does, written in the page's transaction."""


@dataclass(slots=True)
class Follower(Generic[Tx, Item]):
    """Reads the log after its position, a page per transaction."""

    position: Position[Tx]
    read_page: PageReader[Item]
    handle: Handler[Tx, Item]
    page_size: int

    def run(self) -> int | None:
        """Handle every page after the position; return the position reached."""
        while True:
            with self.position.transaction() as transaction:
                after = self.position.get(transaction)
                page = self.read_page(after, self.page_size)
                if page.items:
                    self.handle(transaction, page.items)
                reached = page.through
                if reached is not None and (
                    page.items or after is None or reached > after
                ):
                    self.position.set(transaction, reached)
                    after = reached
            if len(page.items) < self.page_size:
                return after


class MemoryPosition:
    """A position kept by the process, no transaction: it starts where
    `start()` says the first time it is read (the log's head, for a follower
    that only wants what is new)."""

    def __init__(self, start: Callable[[], int | None]) -> None:
        self._start = start
        self._started = False
        self._position: int | None = None

    def transaction(self) -> AbstractContextManager[None]:
        return nullcontext()

    def get(self, transaction: None) -> int | None:
        if not self._started:
            self._position = self._start()
            self._started = True
        return self._position

    def set(self, transaction: None, position: int) -> None:
        self._position = position
        self._started = True


class TrackedPosition:
    """The position a library `TrackingRecorder` keeps for an application.

    A view of the library records each event's position in the transaction
    that writes what the event asks for (a `Projection` passes `Tracking` to
    it), so a page needs no transaction of its own; `set` records how far the
    reader read past the last event it handed over (a topic filter's skipped
    events up to the stop).
    """

    def __init__(self, view: TrackingRecorder, application_name: str) -> None:
        self._view = view
        self._name = application_name

    def transaction(self) -> AbstractContextManager[None]:
        return nullcontext()

    def get(self, transaction: None) -> int | None:
        return self._view.max_tracking_id(self._name)

    def set(self, transaction: None, position: int) -> None:
        # The handler's writes track their events, and a tracking recorder
        # refuses a position it already holds: record only a further one.
        current = self._view.max_tracking_id(self._name)
        if current is None or position > current:
            self._view.insert_tracking(Tracking(self._name, position))


class NotificationReader:
    """Pages of the library's notification log, optionally of some topics and
    up to a stop (the head when the run started)."""

    def __init__(
        self,
        recorder: ApplicationRecorder,
        *,
        topics: Sequence[str] = (),
        stop: int | None = None,
    ) -> None:
        self._recorder = recorder
        self._topics = topics
        self._stop = stop

    def __call__(self, after: int | None, limit: int) -> Page[Notification]:
        items = self._recorder.select_notifications(
            start=after or 0,
            limit=limit,
            stop=self._stop,
            topics=self._topics,
            inclusive_of_start=False,
        )
        if len(items) < limit and self._stop is not None:
            # Everything up to the stop was read, matching or not.
            return Page(items, self._stop)
        return Page(items, items[-1].id if items else None)


class ProjectionHandler:
    """Hands each notification, decoded, to a library `Projection` with its
    `Tracking`: the projection's view writes both in one transaction."""

    def __init__(
        self, projection: Projection[Any], mapper: Mapper[Any], application_name: str
    ) -> None:
        self._projection = projection
        self._mapper = mapper
        self._name = application_name

    def __call__(self, transaction: object, items: Sequence[Notification]) -> None:
        for notification in items:
            self._projection.process_event(
                self._mapper.to_domain_event(notification),
                Tracking(self._name, notification.id),
            )
