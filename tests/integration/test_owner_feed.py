"""The per-user feed index on every store: a read returns exactly what a scan
of the whole log, filtered by owner, returned (the feed before the index), from
any position a device may hold, including positions issued before the index
existed."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from psycopg import sql

from turnledger.infra.http.app import create_app
from turnledger.infra.migrations import MIGRATIONS_TABLE
from turnledger.infra.owner_feed import RUN_POSITIONS
from turnledger.infra.persistence import open_conversations
from turnledger.infra.read_side import rebuild_read_side
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.feed import Change, ConversationFeed
from turnledger.infra.settings import Settings

USERS = ("ann", "ben", "cat")


def scanned_changes(
    ledger: Conversations, feed: ConversationFeed, owner: str, position: int
) -> list[Change]:
    """The old feed's answer: the whole log after `position`, filtered by the
    owner read from the head rows, described as the feed describes them."""
    mine = []
    while True:
        page = ledger.recorder.select_notifications(start=position + 1, limit=200)
        owners = ledger.read_side.conversations(
            {UUID(str(n.originator_id)) for n in page}
        )
        for notification in page:
            row = owners.get(UUID(str(notification.originator_id)))
            if row is not None and row.owner_id == owner:
                mine.append(notification)
        if len(page) < 200:
            break
        position = page[-1].id
    return list(feed._describe(mine, owner))


def fed_changes(
    feed: ConversationFeed, owner: str, position: int, limit: int
) -> list[Change]:
    """Every change of the owner after `position`, read `limit` at a time."""
    changes: list[Change] = []
    while True:
        batch = feed.changes_since(owner, position, limit=limit)
        assert len(batch.changes) <= limit
        changes.extend(batch.changes)
        assert batch.position >= position
        position = batch.position
        if batch.caught_up:
            # Caught up means caught up: the next read from there is empty.
            assert feed.changes_since(owner, position, limit=limit).changes == ()
            return changes


class FeedMatchesTheLogScan(RuleBasedStateMachine):
    """Random writes and deletions of several users on one ledger; at every
    step, each user's feed from every position seen so far (the log's head at
    each step: what the feed before the index issued as cursors) equals the
    owner-filtered scan of the log."""

    ledger: Conversations

    conversations = Bundle("conversations")

    @initialize()
    def setup(self) -> None:
        # The ledger is shared by the examples: each has users of its own.
        self.prefix = uuid4().hex[:8]
        self.feed = ConversationFeed(self.ledger)
        self.positions = [self.feed.head_position()]
        self.turns: dict[UUID, list[str]] = {}
        self.owner: dict[UUID, str] = {}
        self.counter = 0

    def user(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    @rule(target=conversations, name=st.sampled_from(USERS))
    def start(self, name: str) -> UUID:
        owner = self.user(name)
        conversation = self.ledger.start_conversation(owner)
        self.turns[conversation] = []
        self.owner[conversation] = owner
        return conversation

    @rule(
        conversation=conversations,
        count=st.integers(1, 3),
        abandoned=st.booleans(),
    )
    def write(self, conversation: UUID, count: int, abandoned: bool) -> None:
        owner = self.owner[conversation]
        ids = [self._next_turn_id() for _ in range(count)]
        if abandoned and count == 1:
            self.ledger.record_abandoned_turn(
                owner,
                conversation,
                turn_id=ids[0],
                question=f"q {ids[0]}",
                outcome="failed",
            )
        else:
            self.ledger.confirm_turns(
                owner, conversation, [(i, f"q {i}", f"a {i}") for i in ids]
            )
        self.turns[conversation].extend(ids)

    @rule(conversation=conversations, data=st.data())
    def delete(self, conversation: UUID, data: st.DataObject) -> None:
        owner = self.owner[conversation]
        live = self.turns[conversation]
        if not live or data.draw(st.booleans()):
            self.ledger.delete_history(owner, conversation)
            self.turns[conversation] = []
            return
        chosen = data.draw(st.lists(st.sampled_from(live), min_size=1, unique=True))
        self.ledger.delete_history(owner, conversation, turn_ids=chosen)
        self.turns[conversation] = [t for t in live if t not in chosen]

    @rule(name=st.sampled_from(USERS), limit=st.integers(1, 7), data=st.data())
    def read_from_a_stale_position(
        self, name: str, limit: int, data: st.DataObject
    ) -> None:
        position = data.draw(st.sampled_from(self.positions))
        owner = self.user(name)
        expected = scanned_changes(self.ledger, self.feed, owner, position)
        assert fed_changes(self.feed, owner, position, limit) == expected

    @invariant()
    def every_user_from_the_start_and_from_the_last_head(self) -> None:
        head = self.feed.head_position()
        if head != self.positions[-1]:
            self.positions.append(head)
        for name in USERS:
            owner = self.user(name)
            for position in (0, self.positions[-2] if len(self.positions) > 1 else 0):
                expected = scanned_changes(self.ledger, self.feed, owner, position)
                assert fed_changes(self.feed, owner, position, 100) == expected

    def _next_turn_id(self) -> str:
        self.counter += 1
        return f"t{self.counter}"


def test_the_feed_returns_what_the_log_scan_returned(ledger: Conversations) -> None:
    machine = type("FeedMatchesTheLogScanOnThisStore", (FeedMatchesTheLogScan,), {})
    machine.ledger = ledger
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=15,
            stateful_step_count=15,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_a_read_costs_the_owners_rows_not_the_logs(ledger: Conversations) -> None:
    """The index is read, not the log: a read of one change behind thousands
    of other users' events fetches one event (counted at the recorder's seams,
    where the old feed paged the whole log)."""
    feed = ConversationFeed(ledger)
    mine = ledger.start_conversation("ann")
    position = feed.head_position()
    others = ledger.start_conversation("ben")
    ledger.confirm_turns(
        "ben", others, [(f"b{n}", f"q{n}", f"a{n}") for n in range(1_500)]
    )
    ledger.confirm_turn("ann", mine, turn_id="a1", question="q", answer="a")
    recorder: Any = ledger.recorder
    fetched: list[int] = []
    scanned: list[int] = []
    original_owner_select = recorder.select_owner_notifications
    original_select = recorder.select_notifications

    def counting_owner_select(*args: Any, **kwargs: Any) -> Sequence[Any]:
        rows = original_owner_select(*args, **kwargs)
        fetched.append(len(rows))
        return rows

    def counting_select(*args: Any, **kwargs: Any) -> Sequence[Any]:
        rows = original_select(*args, **kwargs)
        scanned.append(len(rows))
        return rows

    recorder.select_owner_notifications = counting_owner_select
    recorder.select_notifications = counting_select
    # PostgreSQL reads the index with the turns' keys (one statement).
    original_reads = getattr(recorder, "select_owner_reads", None)

    def counting_reads(*args: Any, **kwargs: Any) -> Any:
        assert original_reads is not None
        rows, turns, head = original_reads(*args, **kwargs)
        fetched.append(len(rows))
        return rows, turns, head

    if original_reads is not None:
        recorder.select_owner_reads = counting_reads
    try:
        batch = feed.changes_since("ann", position, limit=100)
    finally:
        del recorder.select_owner_notifications
        del recorder.select_notifications
        if original_reads is not None:
            del recorder.select_owner_reads
    assert [c.version for c in batch.changes] == [2]
    assert batch.caught_up
    assert sum(fetched) == 1
    assert sum(scanned) <= sum(fetched)


def _drop_index(settings: Settings) -> None:
    """Make the store look as the release before the index left it (which
    also predates versioned schema steps)."""
    if settings.persistence == "sqlite":
        with sqlite3.connect(settings.sqlite_events_path) as connection:
            connection.execute("DROP TABLE owner_feed")
            connection.execute(f"DROP TABLE {MIGRATIONS_TABLE}")
        return
    schema = settings.postgres_schema
    with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP TRIGGER turnledger_owner_feed ON {}").format(
                sql.Identifier(schema, "conversations_events")
            )
        )
        connection.execute(
            sql.SQL("DROP TABLE {}").format(sql.Identifier(schema, "owner_feed"))
        )
        connection.execute(
            sql.SQL("DROP TABLE {}").format(sql.Identifier(schema, MIGRATIONS_TABLE))
        )


def _write_some(ledger: Conversations, tag: str) -> None:
    for owner in ("ann", "ben"):
        conversation = ledger.start_conversation(owner)
        ledger.confirm_turns(
            owner,
            conversation,
            [(f"{tag}{n}", f"{owner} {tag}{n}?", f"{tag}{n}.") for n in range(4)],
        )
        ledger.delete_history(owner, conversation, turn_ids=[f"{tag}1"])


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_store_from_before_the_index_gets_it_built_and_old_cursors_work(
    store: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    if store == "postgres":
        settings_: Settings = request.getfixturevalue("postgres_settings")
    else:
        settings_ = Settings(
            _env_file=None, persistence="sqlite", data_dir=tmp_path / "data"
        )
    ledger = open_conversations(settings_)
    _write_some(ledger, "x")
    # Positions the release before issued: the head of the log after a read.
    positions = [0, ledger.recorder.max_notification_id() or 0]
    ledger.close()
    _drop_index(settings_)
    if store == "postgres":
        # Writes of a process of the release before (no index, no trigger).
        ledger = open_conversations(settings_)
        _drop_index(settings_)
        _write_some(ledger, "y")
        positions.append(ledger.recorder.max_notification_id() or 0)
        ledger.close()
    ledger = open_conversations(settings_)
    try:
        _write_some(ledger, "z")
        feed = ConversationFeed(ledger)
        for owner in ("ann", "ben"):
            for position in positions:
                expected = scanned_changes(ledger, feed, owner, position)
                assert expected
                assert fed_changes(feed, owner, position, 3) == expected
    finally:
        ledger.close()


def _indexed_owner(
    connection: psycopg.Connection[Any], schema: str, position: int
) -> list[Any]:
    """The owners whose index rows name `position` (a run holding it)."""
    return connection.execute(
        sql.SQL(
            "SELECT owner_id FROM {} WHERE %s BETWEEN coalesce(first_id, last_id) "
            "AND last_id"
        ).format(sql.Identifier(schema, "owner_feed")),
        (position,),
    ).fetchall()


def test_an_event_inserted_by_any_statement_is_indexed_on_postgres(
    postgres_settings: Settings,
) -> None:
    """The trigger indexes what the library's own insert, or another
    release's write function, inserts: here a plain INSERT of an event, seen
    indexed inside its own transaction and gone with it."""
    ledger = open_conversations(postgres_settings)
    try:
        conversation = ledger.start_conversation("ann")
        ledger.confirm_turn("ann", conversation, turn_id="t1", question="q", answer="a")
        schema = postgres_settings.postgres_schema
        table = sql.Identifier(schema, "conversations_events")
        with psycopg.connect(postgres_settings.postgres_conninfo()) as connection:
            (inserted,) = connection.execute(
                sql.SQL(
                    "INSERT INTO {} (originator_id, originator_version, topic, state) "
                    "SELECT originator_id, 99, topic, state FROM {} "
                    "WHERE originator_id = %s AND originator_version = 2 "
                    "RETURNING notification_id"
                ).format(table, table),
                (conversation,),
            ).fetchone()
            assert _indexed_owner(connection, schema, inserted) == [("ann",)]
            connection.rollback()
            assert _indexed_owner(connection, schema, inserted) == []
    finally:
        ledger.close()


@pytest.mark.postgres
def test_one_statement_of_several_owners_is_indexed_as_each_owners_runs(
    postgres_settings: Settings,
) -> None:
    """Events of several owners interleaved in one statement: each index row
    is a run of one owner's consecutive positions, none longer than
    RUN_POSITIONS, and together they name every event once; a read from any
    position, inside a run or not, returns exactly the owner's events."""
    ledger = open_conversations(postgres_settings)
    schema = postgres_settings.postgres_schema
    try:
        owners = {"ann": ledger.start_conversation("ann")}
        owners["ben"] = ledger.start_conversation("ben")
        ledger.confirm_turn(
            "ann", owners["ann"], turn_id="t1", question="q", answer="a"
        )
        # ann x3, ben, ann, ben x2, then ann for longer than one row's run.
        order = (
            ["ann"] * 3 + ["ben", "ann"] + ["ben"] * 2 + ["ann"] * (RUN_POSITIONS + 5)
        )
        versions = {owner: 100 for owner in owners}
        rows = []
        for owner in order:
            versions[owner] += 1
            rows.append((owners[owner], versions[owner]))
        recorder: Any = ledger.recorder
        earlier = {
            owner: [n.id for n in recorder.select_owner_notifications(owner, 0, 100)]
            for owner in owners
        }
        table = sql.Identifier(schema, "conversations_events")
        with psycopg.connect(postgres_settings.postgres_conninfo()) as connection:
            (topic, state) = connection.execute(
                sql.SQL(
                    "SELECT topic, state FROM {} WHERE originator_id = %s "
                    "AND originator_version = 2"
                ).format(table),
                (owners["ann"],),
            ).fetchone()  # type: ignore[misc]
            # One statement; unnest keeps the order, so positions follow it.
            positions = [
                row[0]
                for row in connection.execute(
                    sql.SQL(
                        "INSERT INTO {} (originator_id, originator_version, topic, "
                        "state) SELECT i, v, %s, %s FROM unnest(%s::uuid[], "
                        "%s::bigint[]) WITH ORDINALITY AS r(i, v, n) ORDER BY n "
                        "RETURNING notification_id"
                    ).format(table),
                    (topic, state, [r[0] for r in rows], [r[1] for r in rows]),
                ).fetchall()
            ]
            connection.commit()
            runs = connection.execute(
                sql.SQL(
                    "SELECT owner_id, coalesce(first_id, last_id), last_id FROM {} "
                    "WHERE last_id >= %s ORDER BY last_id"
                ).format(sql.Identifier(schema, "owner_feed")),
                (min(positions),),
            ).fetchall()
        positions.sort()
        owner_at = dict(zip(positions, order, strict=True))
        named = [p for _, first, last in runs for p in range(first, last + 1)]
        assert named == positions
        for owner, first, last in runs:
            assert {owner_at[p] for p in range(first, last + 1)} == {owner}
            assert last - first < RUN_POSITIONS
        # ann 3, ben 1, ann 1, ben 2, then ann's long run cut where her events
        # in the statement reach RUN_POSITIONS: 60 and 9.
        assert [last - first + 1 for _, first, last in runs] == [3, 1, 1, 2, 60, 9]
        for owner in owners:
            mine = earlier[owner] + [p for p in positions if owner_at[p] == owner]
            for after in [0, positions[0], positions[1], positions[5], mine[-2]]:
                expected = [p for p in mine if p > after]
                for limit in (1, 3, 100):
                    read = [
                        n.id
                        for n in recorder.select_owner_notifications(
                            owner, after, limit
                        )
                    ]
                    assert read == expected[:limit]
    finally:
        ledger.close()


@pytest.mark.postgres
def test_every_event_commits_with_its_index_row_on_postgres(
    postgres_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check run at each event's commit, inside its transaction, finds the
    index row naming it: through the write function, the path that also
    changes rows (a deletion) and the library's own insert. The same check
    refuses a write once the rows stop being written in the event's
    transaction (the trigger disabled)."""
    schema = postgres_settings.postgres_schema
    ledger = open_conversations(postgres_settings)
    names = {
        "events": sql.Identifier(schema, "conversations_events"),
        "feed": sql.Identifier(schema, "owner_feed"),
        "heads": sql.Identifier(schema, "conversation_heads"),
        "check": sql.Identifier(schema, "test_indexed_at_commit"),
    }
    try:
        with psycopg.connect(
            postgres_settings.postgres_conninfo(), autocommit=True
        ) as connection:
            connection.execute(
                sql.SQL(
                    "CREATE FUNCTION {check}() RETURNS trigger LANGUAGE plpgsql AS "
                    "$body$ BEGIN IF NOT EXISTS (SELECT FROM {feed} f JOIN {heads} h "
                    "ON h.owner_id = f.owner_id WHERE h.conversation_id = "
                    "NEW.originator_id AND NEW.notification_id BETWEEN "
                    "coalesce(f.first_id, f.last_id) AND f.last_id) THEN RAISE "
                    "EXCEPTION 'event % committed without its index row', "
                    "NEW.notification_id; END IF; RETURN NULL; END $body$"
                ).format(**names)
            )
            connection.execute(
                sql.SQL(
                    "CREATE CONSTRAINT TRIGGER test_indexed_at_commit AFTER INSERT "
                    "ON {events} DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
                    "EXECUTE FUNCTION {check}()"
                ).format(**names)
            )
            conversation = ledger.start_conversation("ann")
            ledger.confirm_turns(
                "ann", conversation, [(f"t{n}", f"q{n}", f"a{n}") for n in range(5)]
            )
            ledger.delete_history("ann", conversation, turn_ids=["t1"])
            with monkeypatch.context() as patched:
                patched.setattr(type(ledger.recorder), "rows_per_statement", 2)
                ledger.confirm_turns(
                    "ann", conversation, [(f"u{n}", "q", "a") for n in range(5)]
                )
            feed = ConversationFeed(ledger)
            expected = scanned_changes(ledger, feed, "ann", 0)
            assert len(expected) >= 12
            assert fed_changes(feed, "ann", 0, 100) == expected
            connection.execute(
                sql.SQL(
                    "ALTER TABLE {events} DISABLE TRIGGER turnledger_owner_feed"
                ).format(**names)
            )
            with pytest.raises(Exception, match="without its index row"):
                ledger.confirm_turn(
                    "ann", conversation, turn_id="v1", question="q", answer="a"
                )
    finally:
        ledger.close()


def test_a_cursor_the_release_before_issued_resumes_over_http(
    settings: Settings,
) -> None:
    """The release before put the log's head in a cursor after each read;
    such a cursor, sealed the same way, gives exactly the changes after it."""
    app = create_app(settings)
    with TestClient(app) as http:
        service = app.state.service
        token = service.registry.add("ann", "phone").token
        auth = {"Authorization": f"Bearer {token}"}
        ledger = service.ledger
        mine = ledger.start_conversation("ann")
        ledger.confirm_turn("ann", mine, turn_id="a1", question="q", answer="a")
        others = ledger.start_conversation("ben")
        ledger.confirm_turn("ben", others, turn_id="b1", question="q", answer="a")
        old_cursor = service.cursors.encode("ann", service.feed.head_position())
        ledger.confirm_turn("ben", others, turn_id="b2", question="q", answer="a")
        ledger.confirm_turn("ann", mine, turn_id="a2", question="q2", answer="a2")
        answer = http.get("/v1/sync", params={"since": old_cursor}, headers=auth)
        assert answer.status_code == 200
        body = answer.json()
        assert [(c["kind"], c.get("turn_id")) for c in body["changes"]] == [
            ("turn_recorded", "a2")
        ]
        assert body["has_more"] is False
        again = http.get(
            "/v1/sync", params={"since": body["next_cursor"]}, headers=auth
        )
        assert again.json()["changes"] == []


def _empty_index(ledger: Conversations, settings: Settings) -> None:
    if settings.persistence == "memory":  # through the ledger's own pool
        with ledger.recorder.datastore.transaction(commit=True) as c:  # type: ignore[attr-defined]
            c.execute("DELETE FROM owner_feed")
    elif settings.persistence == "sqlite":
        with sqlite3.connect(settings.sqlite_events_path) as connection:
            connection.execute("DELETE FROM owner_feed")
    else:
        with psycopg.connect(settings.postgres_conninfo()) as connection:
            connection.execute(
                sql.SQL("DELETE FROM {}").format(
                    sql.Identifier(settings.postgres_schema, "owner_feed")
                )
            )


def test_rebuilding_the_read_side_rebuilds_the_index(
    ledger: Conversations, settings: Settings
) -> None:
    _write_some(ledger, "r")
    feed = ConversationFeed(ledger)
    before = {owner: fed_changes(feed, owner, 0, 100) for owner in ("ann", "ben")}
    _empty_index(ledger, settings)
    assert fed_changes(feed, "ann", 0, 100) == []
    rebuild_read_side(ledger)
    for owner in ("ann", "ben"):
        after = fed_changes(feed, owner, 0, 100)
        assert after == before[owner] == scanned_changes(ledger, feed, owner, 0)
    # Writes after the rebuild are indexed as before.
    conversation = ledger.start_conversation("ann")
    ledger.confirm_turn("ann", conversation, turn_id="n1", question="q", answer="a")
    assert fed_changes(feed, "ann", 0, 100) == scanned_changes(ledger, feed, "ann", 0)
