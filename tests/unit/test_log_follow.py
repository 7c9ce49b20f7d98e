"""The one follower of the log: a position, a page reader, a handler, one
transaction per page (infra/log_follow.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import Tracking
from eventsourcing.popo import POPOApplicationRecorder, POPOTrackingRecorder
from eventsourcing.projection import Projection
from eventsourcing.utils import get_topic

from turnledger.infra.log_follow import (
    Follower,
    MemoryPosition,
    NotificationReader,
    Page,
    ProjectionHandler,
    TrackedPosition,
)


@dataclass
class _Store:
    """A store with transactions: what a page writes, and the position."""

    written: list[int] = field(default_factory=list)
    position: int | None = None
    transactions: int = 0


@dataclass
class _Transaction:
    written: list[int]
    position: int | None


class _StorePosition:
    def __init__(self, store: _Store) -> None:
        self.store = store

    @contextmanager
    def transaction(self) -> Iterator[_Transaction]:
        pending = _Transaction(list(self.store.written), self.store.position)
        yield pending  # an error in the page leaves the store as it was
        self.store.written, self.store.position = pending.written, pending.position
        self.store.transactions += 1

    def get(self, transaction: _Transaction) -> int | None:
        return transaction.position

    def set(self, transaction: _Transaction, position: int) -> None:
        transaction.position = position


def _log(ids: Sequence[int]) -> Any:
    def read(after: int | None, limit: int) -> Page[int]:
        items = [i for i in ids if after is None or i > after][:limit]
        return Page(items, items[-1] if items else None)

    return read


def _write(transaction: _Transaction, items: Sequence[int]) -> None:
    transaction.written.extend(items)


def test_each_page_is_written_with_its_position_in_one_transaction() -> None:
    store = _Store()
    follower = Follower(_StorePosition(store), _log(range(1, 8)), _write, page_size=3)
    assert follower.run() == 7
    assert store.written == [1, 2, 3, 4, 5, 6, 7]
    assert store.position == 7
    assert store.transactions == 3  # pages of 3, 3 and 1
    assert follower.run() == 7  # nothing new: nothing written, same position
    assert store.written == [1, 2, 3, 4, 5, 6, 7]


def test_a_failed_page_leaves_the_last_whole_page_and_the_next_run_resumes() -> None:
    store = _Store()
    failing = True

    def handle(transaction: _Transaction, items: Sequence[int]) -> None:
        _write(transaction, items)
        if failing and 4 in items:
            raise RuntimeError("crash in the second page")

    follower = Follower(_StorePosition(store), _log(range(1, 8)), handle, page_size=3)
    with pytest.raises(RuntimeError):
        follower.run()
    assert (store.written, store.position) == ([1, 2, 3], 3)  # a page boundary
    failing = False
    assert follower.run() == 7
    assert store.written == [1, 2, 3, 4, 5, 6, 7]  # each item once


def test_a_memory_position_starts_where_it_is_told_and_skips_what_came_before() -> None:
    seen: list[int] = []
    ids = [1, 2, 3]
    follower = Follower(
        MemoryPosition(lambda: ids[-1]),
        _log(ids),
        lambda _, items: seen.extend(items),
        page_size=2,
    )
    assert follower.run() == 3
    assert seen == []
    ids += [4, 5, 6]
    assert follower.run() == 6
    assert seen == [4, 5, 6]


class _Note(Aggregate):
    class Kept(Aggregate.Event):
        pass

    class Skipped(Aggregate.Event):
        pass


class _Counted(Projection[POPOTrackingRecorder]):
    topics = (get_topic(_Note.Kept),)

    def __init__(self, view: POPOTrackingRecorder) -> None:
        super().__init__(view)
        self.seen: list[int] = []

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.seen.append(tracking.notification_id)
        self.view.insert_tracking(tracking)  # the view's write, with its position


def test_a_library_projection_followed_by_topic_up_to_a_stop_tracks_the_stop() -> None:
    app: Application[Any] = Application(
        env={"PERSISTENCE_MODULE": "eventsourcing.popo"}
    )
    note = _Note()
    for kind in ("Kept", "Skipped", "Kept", "Skipped", "Skipped"):
        note.trigger_event(getattr(_Note, kind))
    app.save(note)  # ids 1 (created) .. 6
    assert isinstance(app.recorder, POPOApplicationRecorder)
    view = POPOTrackingRecorder()
    projection = _Counted(view)
    head = app.recorder.max_notification_id()
    assert head == 6

    def follower(stop: int | None) -> Follower[None, Any]:
        return Follower(
            TrackedPosition(view, app.name),
            NotificationReader(app.recorder, topics=projection.topics, stop=stop),
            ProjectionHandler(projection, app.mapper, app.name),
            page_size=1,
        )

    assert follower(stop=4).run() == 4  # the events after 4 wait for the next run
    assert projection.seen == [2, 4]
    assert view.max_tracking_id(app.name) == 4
    # Only a skipped event after the last kept one: the position still
    # reaches the stop, so the next run does not read them again.
    assert follower(stop=head).run() == 6
    assert projection.seen == [2, 4]
    assert view.max_tracking_id(app.name) == 6
    note.trigger_event(_Note.Kept)
    app.save(note)
    assert follower(stop=None).run() == 7
    assert projection.seen == [2, 4, 7]
    app.close()


def test_a_run_from_nothing_starts_at_the_first_item() -> None:
    store = _Store()
    assert Follower(_StorePosition(store), _log([]), _write, page_size=2).run() is None
    assert store.position is None
    assert Follower(_StorePosition(store), _log([5]), _write, page_size=2).run() == 5
    assert store.written == [5]
    assert store.position == 5


def test_pages_are_read_after_the_position() -> None:
    reads: list[tuple[int | None, int]] = []
    inner = _log(range(1, 6))

    def read(after: int | None, limit: int) -> Page[int]:
        reads.append((after, limit))
        page: Page[int] = inner(after, limit)
        return page

    Follower(MemoryPosition(lambda: None), read, lambda *_: None, page_size=2).run()
    assert reads == [(None, 2), (2, 2), (4, 2)]


def test_docs_architecture_names_every_follower_of_the_log() -> None:
    """The followers' table in docs/architecture.md lists exactly the modules
    that build a `Follower`."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    users = {
        path.relative_to(root).as_posix()
        for folder in ("infra", "projections", "domain")
        for path in (root / folder).rglob("*.py")
        if path.name != "log_follow.py"
        and re.search(r"\bFollower\(", path.read_text(encoding="utf-8"))
    }
    text = (root / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Followers of the log", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("| the ")]
    first_cells = [line.split("|")[1] for line in table]
    named = {m for cell in first_cells for m in re.findall(r"`([\w/]+\.py)`", cell)}
    expected = {
        "infra/service_layer/purge.py",
        "infra/merkle_follow.py",
        "infra/http/wake_follow.py",
    }
    assert users == named == expected


def test_the_librarys_sqlite_recorder_cannot_be_subscribed_to() -> None:
    """Why the library's `ProjectionRunner` does not run the followers
    (docs/architecture.md): it needs `subscribe()`, which SQLite lacks."""
    app: Application[Any] = Application(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": ":memory:"}
    )
    try:
        with pytest.raises(NotImplementedError):
            app.recorder.subscribe(gt=None)
    finally:
        app.close()
