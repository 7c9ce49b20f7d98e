"""Read models rebuilt from the log: complete, resumable, same result every time."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from turnledger.domain.application import Conversations
from turnledger.domain.audit import Auditor
from turnledger.infra.conversation_index import (
    MemoryConversationIndex,
    SQLiteConversationIndex,
)
from turnledger.infra.readmodels import READ_MODELS, ReadModelStore, catch_up, rebuild
from turnledger.infra.settings import Settings
from turnledger.projections.conversation_index import (
    IndexChange,
    LoggedEvent,
    fold_page,
)


@pytest.fixture
def index(settings: Settings) -> Iterator[ReadModelStore]:
    store = READ_MODELS["conversation_index"](settings)
    yield store
    store.close()


def populate(ledger: Conversations) -> dict[str, list]:  # type: ignore[type-arg]
    owned: dict[str, list] = {"alice": [], "bob": []}  # type: ignore[type-arg]
    for round_ in range(4):
        for owner in owned:
            conversation_id = ledger.start_conversation(owner)
            owned[owner].append(conversation_id)
            for turn in range(round_):
                ledger.confirm_turn(
                    owner,
                    conversation_id,
                    turn_id=f"t{turn}",
                    question="q",
                    answer="a",
                )
    return owned


def test_rebuild_indexes_every_conversation_with_its_owner_and_head(
    ledger: Conversations, index: ReadModelStore
) -> None:
    owned = populate(ledger)
    assert rebuild(ledger, index, page_size=3) is True
    assert index.tracking().rebuilding is False
    assert index.tracking().position == ledger.recorder.max_notification_id()
    for owner, conversation_ids in owned.items():
        assert sorted(index.conversations_of(owner), key=str) == sorted(  # type: ignore[attr-defined]
            conversation_ids, key=str
        )
    report = Auditor(ledger).audit()
    for row in index.rows():  # type: ignore[attr-defined]
        audit = report.conversation(row.conversation_id)
        assert (row.version, row.head_digest) == (audit.head_version, audit.head_digest)


def test_an_interrupted_rebuild_resumes_from_its_position(
    ledger: Conversations, index: ReadModelStore, settings: Settings
) -> None:
    populate(ledger)
    total = ledger.recorder.max_notification_id()
    assert rebuild(ledger, index, page_size=4, max_pages=2) is False
    assert index.tracking().rebuilding and index.tracking().position > 0
    stopped_at = index.tracking().position
    if settings.persistence != "memory":
        index.close()  # a new process picks the rebuild up where it stopped
        index = READ_MODELS["conversation_index"](settings)
    applied: list[int] = []
    assert rebuild(ledger, index, page_size=4, progress=applied.append) is True
    assert sum(applied) < total  # resumed: the first pages were not read again
    assert index.tracking().position == total > stopped_at
    resumed = index.rows()  # type: ignore[attr-defined]
    assert rebuild(ledger, index, restart=True) is True
    assert index.rows() == resumed  # type: ignore[attr-defined]


def test_catch_up_follows_new_events_after_a_rebuild(
    ledger: Conversations, index: ReadModelStore
) -> None:
    populate(ledger)
    rebuild(ledger, index)
    conversation_id = ledger.start_conversation("carol")
    ledger.confirm_turn("carol", conversation_id, turn_id="t", question="q", answer="a")
    assert catch_up(ledger, index) == 2
    assert index.conversations_of("carol") == [conversation_id]  # type: ignore[attr-defined]
    assert index.get(conversation_id).version == 2  # type: ignore[attr-defined]
    assert catch_up(ledger, index) == 0


_ids = st.sampled_from([UUID(int=n) for n in range(1, 4)])


@hypothesis_settings(max_examples=40, deadline=None)
@given(st.lists(_ids, max_size=30), st.integers(1, 7))
def test_applying_in_pages_gives_the_same_index_as_applying_at_once(
    steps: list[UUID], page: int
) -> None:
    versions: dict[UUID, int] = {}
    events = []
    for conversation_id in steps:
        version = versions.get(conversation_id, 0) + 1
        versions[conversation_id] = version
        owner = f"o{conversation_id.int}" if version == 1 else None
        events.append(LoggedEvent(conversation_id, version, f"d{version}", owner))

    def indexed(chunks: list[list[LoggedEvent]]) -> list[IndexChange]:
        with tempfile.TemporaryDirectory() as directory:
            stores = [
                MemoryConversationIndex(),
                SQLiteConversationIndex(Path(directory) / "index.sqlite3"),
            ]
            results = []
            for store in stores:
                store.reset()
                for position, chunk in enumerate(chunks, start=1):
                    store.apply_changes(fold_page(chunk), position)
                results.append(store.rows())
                store.close()
        assert results[0] == results[1]  # both stores agree
        return results[0]

    at_once = indexed([events])
    paged = indexed([events[i : i + page] for i in range(0, len(events), page)])
    assert paged == at_once
    assert {row.conversation_id: (row.version, row.owner_id) for row in at_once} == {
        key: (version, f"o{key.int}") for key, version in versions.items()
    }


def test_a_rebuild_killed_mid_page_loses_nothing_and_resumes(
    ledger: Conversations, index: ReadModelStore
) -> None:
    populate(ledger)
    pages = 0
    real_apply = index.apply

    def dying_apply(notifications, ledger):  # type: ignore[no-untyped-def]
        nonlocal pages
        pages += 1
        if pages == 3:
            raise KeyboardInterrupt  # the operator pressed Ctrl-C mid-page
        real_apply(notifications, ledger)

    index.apply = dying_apply  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        rebuild(ledger, index, page_size=3)
    tracking = index.tracking()
    assert tracking.rebuilding and tracking.position == 6  # two whole pages
    index.apply = real_apply  # type: ignore[method-assign]
    assert rebuild(ledger, index, page_size=3) is True
    resumed = index.rows()  # type: ignore[attr-defined]
    assert rebuild(ledger, index, restart=True) is True
    assert index.rows() == resumed  # type: ignore[attr-defined]
