"""`library_compat.save_aggregates` against the library's `Application.save`.

A batch saves its aggregates through `save_aggregates`, the library's save
without its runtime-Protocol checks of each object: the same events must be
stored at the same positions, the same recordings returned, the aggregates
cached, and the application's hooks told, as the library's own save does.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import Recording

from turnledger.infra.library_compat import save_aggregates


class Counter(Aggregate):
    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0

    @event("Counted")
    def count_up(self, by: int) -> None:
        self.count += by


class Counters(Application[UUID]):
    """Records what its hooks were told."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__(env)
        self.told: list[Any] = []

    def _notify(self, recordings: list[Recording[UUID]]) -> None:
        self.told.append([r.notification.id for r in recordings])

    def notify(self, new_events: list[Any]) -> None:
        self.told.append(len(new_events))


def _app() -> Counters:
    return Counters(
        env={
            "PERSISTENCE_MODULE": "eventsourcing.popo",
            "AGGREGATE_CACHE_MAXSIZE": "10",
        }
    )


def _aggregates() -> list[Counter]:
    first, second = Counter("a"), Counter("b")
    first.count_up(1)
    second.count_up(2)
    first.count_up(3)
    return [first, second]


def _stored(app: Counters) -> list[tuple[int, int, str]]:
    """(position, version, topic) of every stored event, ids left out."""
    return [
        (n.id, n.originator_version, n.topic)
        for n in app.recorder.select_notifications(start=1, limit=100)
    ]


def test_it_stores_and_returns_what_the_library_s_save_does() -> None:
    by_library, by_compat = _app(), _app()
    library_aggregates, compat_aggregates = _aggregates(), _aggregates()

    library_recordings = by_library.save(*library_aggregates)
    compat_recordings = save_aggregates(by_compat, compat_aggregates)

    assert _stored(by_compat) == _stored(by_library)
    assert [
        (r.notification.id, r.notification.originator_version, type(r.domain_event))
        for r in compat_recordings
    ] == [
        (r.notification.id, r.notification.originator_version, type(r.domain_event))
        for r in library_recordings
    ]
    assert by_compat.told == by_library.told == [[1, 2, 3, 4, 5], 5]
    for aggregate in compat_aggregates:
        assert not aggregate.pending_events
        assert by_compat.repository.get(aggregate.id).count == aggregate.count


def test_keyword_arguments_reach_the_event_store() -> None:
    app = _app()
    seen: dict[str, Any] = {}
    put = app.events.put

    def spying_put(events: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return put(events, **{k: v for k, v in kwargs.items() if k == "tracking"})

    app.events.put = spying_put  # type: ignore[method-assign]
    save_aggregates(app, _aggregates(), marker="yes")
    assert seen["marker"] == "yes"
