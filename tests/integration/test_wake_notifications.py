"""A write's NOTIFY names its owners; the sync listener wakes only them.

On PostgreSQL every write transaction of the ledger NOTIFYs the library's
channel with the owners of what it wrote (docs/sync.md, "Who owns a change"),
and the service's listener wakes those users' long-polls without reading the
log back. A notification naming no one wakes every waiter once.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql

from turnledger.infra.http.notifier import PostgresListener, UserSignals
from turnledger.infra.persistence import open_conversations
from turnledger.infra.postgres import schema_channel, wake_payload, woken_owners
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings

# The owners of one batch, spelt any way at all (the ledger allows fewer
# characters; the payload does not rely on it).
owner_ids = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=40,
)


@given(st.lists(owner_ids, max_size=30))
def test_a_payload_names_exactly_the_owners_it_was_made_of(owners: list[str]) -> None:
    payload = wake_payload(owners)
    assert woken_owners(payload) == set(owners)


def test_owners_too_many_for_one_notification_name_no_one() -> None:
    owners = [f"user-{n:05d}" for n in range(1_000)]
    payload = wake_payload(owners)
    assert payload == ""
    assert woken_owners(payload) is None


@pytest.mark.parametrize(
    "payload", ["", "not json", '{"a": 1}', "[1, 2]", '"alice"', "[null]"]
)
def test_a_payload_that_names_no_list_of_users_names_no_one(payload: str) -> None:
    assert woken_owners(payload) is None


# With PostgreSQL ------------------------------------------------------------


@pytest.fixture
def ledger(postgres_settings: Settings) -> Iterator[Conversations]:
    opened = open_conversations(postgres_settings)
    try:
        yield opened
    finally:
        opened.close()


def channel_of(ledger: Conversations) -> str:
    return str(ledger.recorder.channel_name)  # type: ignore[attr-defined]


def notifications_during(
    conninfo: str, channel: str, write: object
) -> list[str | None]:
    """The payloads NOTIFYed on `channel` while `write()` ran."""
    with psycopg.connect(conninfo, autocommit=True) as listening:
        listening.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        write()  # type: ignore[operator]
        return [woken_owners(n.payload) for n in listening.notifies(timeout=1.0)]


@pytest.mark.postgres
def test_every_kind_of_write_notifies_its_owner_by_name(
    ledger: Conversations, postgres_settings: Settings
) -> None:
    """New turns (the one-statement path), a deletion (the several-message
    path) and a fold, for an owner id with every kind of character allowed."""
    owner = "o.brien_2:team@example-1"
    conninfo = postgres_settings.postgres_conninfo()
    conversation = ledger.start_conversation(owner)

    def turns() -> None:
        for n in range(3):
            ledger.confirm_turn(
                owner, conversation, turn_id=f"t{n}", question="q", answer="a"
            )

    def deletion() -> None:
        ledger.delete_history(owner, conversation, turn_ids=["t0"])

    def fold() -> None:
        ledger.record_fold(
            owner,
            conversation,
            fold_id="f1",
            covers_through_turn_id="t2",
            summary="s",
            summarized_version=ledger.get_conversation(owner, conversation).version,
        )

    for write in (turns, deletion, fold):
        payloads = notifications_during(conninfo, channel_of(ledger), write)
        assert payloads and all(p == {owner} for p in payloads), (write, payloads)


@pytest.mark.postgres
def test_one_shared_transaction_names_every_owner_it_wrote(
    ledger: Conversations, postgres_settings: Settings
) -> None:
    owners = [f"user-{n}" for n in range(8)]
    conversations = {o: ledger.start_conversation(o) for o in owners}

    def concurrent_turns() -> None:
        start = threading.Barrier(len(owners))

        def write(owner: str) -> None:
            start.wait()
            for n in range(20):
                ledger.confirm_turn(
                    owner,
                    conversations[owner],
                    turn_id=f"t{n}",
                    question="q",
                    answer="a",
                )

        threads = [threading.Thread(target=write, args=(o,)) for o in owners]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    payloads = notifications_during(
        postgres_settings.postgres_conninfo(), channel_of(ledger), concurrent_turns
    )
    assert all(p is not None for p in payloads)
    named = [p for p in payloads if p is not None]
    assert set().union(*named) == set(owners)
    # Shared transactions: fewer notifications than the 160 turns, some of
    # them naming several owners (each lists exactly its batch's owners).
    assert len(named) < 160


class WaitingUsers:
    """Users with a long-poll waiting on an event loop of their own thread."""

    def __init__(self, users: list[str]) -> None:
        self.signals = UserSignals(per_device=4, per_user=4)
        self.loop = asyncio.new_event_loop()
        self.signals.bind(self.loop)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.events = {u: self._in_loop(self.signals.current, u) for u in users}

    def _in_loop(self, function: object, *arguments: object) -> object:
        async def call() -> object:
            return function(*arguments)  # type: ignore[operator]

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(5)

    def woken(self) -> set[str]:
        def which() -> set[str]:
            return {u for u, event in self.events.items() if event.is_set()}

        return self._in_loop(which)  # type: ignore[return-value]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


def wait_until(condition: object, seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (json.dumps(["alice"]), {"alice"}),
        (json.dumps(["alice", "carol"]), {"alice", "carol"}),
        # An older release, the library's own insert, a batch too wide.
        ("", {"alice", "bob", "carol"}),
        ("garbage", {"alice", "bob", "carol"}),
    ],
)
def test_the_listener_wakes_the_users_a_notification_names_or_all_if_none(
    postgres_conninfo: str, payload: str, expected: set[str]
) -> None:
    channel = f"wake_test_{time.monotonic_ns()}"
    waiting = WaitingUsers(["alice", "bob", "carol"])
    listener = PostgresListener(
        waiting.signals, postgres_conninfo, events_channel=channel, devices_channel=None
    )
    listener.start()
    try:
        with psycopg.connect(postgres_conninfo, autocommit=True) as connection:
            # The listener wakes every waiter once when it connects: wait for
            # that, then take fresh events, as long-polls that looked again do.
            assert wait_until(lambda: waiting.woken() == set(waiting.events))
            waiting.events = {
                u: waiting._in_loop(waiting.signals.current, u) for u in waiting.events
            }
            connection.execute("SELECT pg_notify(%s, %s)", (channel, payload))
            assert wait_until(lambda: waiting.woken() == expected)
            time.sleep(0.3)  # and no one else, a little later
            assert waiting.woken() == expected
    finally:
        listener.stop()
        waiting.close()


@pytest.mark.postgres
def test_a_schemas_notifications_stay_in_that_schema(
    ledger: Conversations, postgres_settings: Settings, postgres_conninfo: str
) -> None:
    """Two stores in one database: a write in one is not heard by the other's
    listeners (the library's channel is named after the table alone)."""
    other_schema = f"{postgres_settings.postgres_schema}_b"
    other_settings = postgres_settings.model_copy(
        update={"postgres_schema": other_schema}
    )
    other = open_conversations(other_settings)
    try:
        assert channel_of(other) != channel_of(ledger)
        assert postgres_settings.postgres_schema in channel_of(ledger)
        conversation = other.start_conversation("alice")

        def write_elsewhere() -> None:
            other.confirm_turn(
                "alice", conversation, turn_id="t1", question="q", answer="a"
            )

        assert (
            notifications_during(postgres_conninfo, channel_of(ledger), write_elsewhere)
            == []
        )
        mine = ledger.start_conversation("alice")

        def write_here() -> None:
            ledger.confirm_turn("alice", mine, turn_id="t1", question="q", answer="a")

        assert notifications_during(
            postgres_conninfo, channel_of(ledger), write_here
        ) == [{"alice"}]
    finally:
        other.close()
        with psycopg.connect(postgres_conninfo, autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(other_schema)
                )
            )


def test_a_long_schema_name_still_gives_a_legal_distinct_channel() -> None:
    long_a, long_b = "a" * 60, "a" * 59 + "b"
    names = {schema_channel(s, "conversations_events") for s in (long_a, long_b)}
    assert len(names) == 2
    assert all(len(name.encode()) <= 63 for name in names)
    assert schema_channel("tenant_1", "conversations_events") == (
        "tenant_1_conversations_events"
    )
