"""The per-user feed index: one row (owner, log position) per conversation event.

A device's catch-up reads its user's rows of this index, then the events they
name, so its cost follows the user's own changes, not the whole log's. The
rows are written in the transaction of the events they index, as the read
side's are, so a reader never sees an event without its row:

- PostgreSQL: a statement trigger on the events table inserts the rows of
  every statement that inserts events, whichever code path (or release) wrote
  them, joining the new events to the conversations' owners in
  `conversation_heads` (written by the same statement, or earlier).
- SQLite: the recorder inserts them after the events and the head rows.
- Memory: the recorder appends them under its lock.

A store written before the index existed gets it built from the log once, at
start-up, under the events table's write lock (see docs/sync.md).
"""

from __future__ import annotations

from psycopg import sql

OWNER_FEED_TABLE = "owner_feed"
_TRIGGER_FUNCTION = "turnledger_owner_feed_v1"
_TRIGGER = "turnledger_owner_feed"
_HEADS = "conversation_heads"


def postgres_owner_feed_ddl(schema: str, events_table: str) -> list[sql.Composed]:
    """The index table, its trigger, and its one-time build (run at start-up).

    The build takes the events table's write lock (the one every write takes),
    so no event commits between the rows it copies and the trigger taking
    over. A transaction-scoped advisory lock keeps two starting processes from
    building it twice.
    """
    names = {
        "feed": sql.Identifier(schema, OWNER_FEED_TABLE),
        "feed_name": sql.Literal(f"{_quote(schema)}.{_quote(OWNER_FEED_TABLE)}"),
        "events": sql.Identifier(schema, events_table),
        "heads": sql.Identifier(schema, _HEADS),
        "function": sql.Identifier(schema, _TRIGGER_FUNCTION),
        "trigger": sql.Identifier(_TRIGGER),
        "schema": sql.Literal(schema),
    }
    return [
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {function}() RETURNS trigger "
            "LANGUAGE plpgsql AS $body$ BEGIN "
            "INSERT INTO {feed} (owner_id, notification_id) "
            "SELECT h.owner_id, i.notification_id FROM inserted i "
            "JOIN {heads} h ON h.conversation_id = i.originator_id; "
            "RETURN NULL; END $body$"
        ).format(**names),
        sql.SQL(
            "DO $build$ BEGIN "
            "PERFORM pg_advisory_xact_lock(hashtext('turnledger.owner_feed'), "
            "hashtext({schema})); "
            "IF to_regclass({feed_name}) IS NULL THEN "
            "CREATE TABLE {feed} (owner_id text NOT NULL, "
            "notification_id bigint NOT NULL, "
            "PRIMARY KEY (owner_id, notification_id)); "
            "LOCK TABLE {events} IN EXCLUSIVE MODE; "
            "INSERT INTO {feed} (owner_id, notification_id) "
            "SELECT h.owner_id, e.notification_id FROM {events} e "
            "JOIN {heads} h ON h.conversation_id = e.originator_id; "
            "CREATE TRIGGER {trigger} AFTER INSERT ON {events} "
            "REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT "
            "EXECUTE FUNCTION {function}(); "
            "END IF; END $build$"
        ).format(**names),
    ]


def postgres_rebuild_owner_feed(schema: str, events_table: str) -> list[sql.Composed]:
    """Statements that make the index match the log and the head rows again
    (after the read side is rebuilt, in the rebuild's transaction)."""
    feed = sql.Identifier(schema, OWNER_FEED_TABLE)
    return [
        sql.SQL("DELETE FROM {}").format(feed),
        sql.SQL(
            "INSERT INTO {feed} (owner_id, notification_id) "
            "SELECT h.owner_id, e.notification_id FROM {events} e "
            "JOIN {heads} h ON h.conversation_id = e.originator_id"
        ).format(
            feed=feed,
            events=sql.Identifier(schema, events_table),
            heads=sql.Identifier(schema, _HEADS),
        ),
    ]


def postgres_select_owner_events(
    schema: str, events_table: str, *, with_topics: bool
) -> sql.Composed:
    """The owner's events after a position, oldest first: parameters owner,
    position, [topics,] limit."""
    return sql.SQL(
        "SELECT e.notification_id, e.originator_id, e.originator_version, "
        "e.topic, e.state FROM {feed} f "
        "JOIN {events} e ON e.notification_id = f.notification_id "
        "WHERE f.owner_id = %s AND f.notification_id > %s {topics}"
        "ORDER BY f.notification_id LIMIT %s"
    ).format(
        feed=sql.Identifier(schema, OWNER_FEED_TABLE),
        events=sql.Identifier(schema, events_table),
        topics=sql.SQL("AND e.topic = ANY(%s) " if with_topics else ""),
    )


SQLITE_OWNER_FEED_TABLE = f"""
CREATE TABLE IF NOT EXISTS {OWNER_FEED_TABLE} (
    owner_id TEXT NOT NULL,
    notification_id INTEGER NOT NULL,
    PRIMARY KEY (owner_id, notification_id)
) WITHOUT ROWID
"""


def sqlite_build_owner_feed(events_table: str) -> str:
    """Every indexed row the log and the head rows define."""
    return (
        f"INSERT OR IGNORE INTO {OWNER_FEED_TABLE} (owner_id, notification_id) "
        f"SELECT h.owner_id, e.rowid FROM {events_table} e "
        f"JOIN {_HEADS} h ON h.conversation_id = e.originator_id"
    )


# One event's row: its owner read from the head row (written just before).
SQLITE_INSERT_OWNER_ROW = (
    f"INSERT INTO {OWNER_FEED_TABLE} (owner_id, notification_id) "
    f"SELECT owner_id, ? FROM {_HEADS} WHERE conversation_id = ?"
)


def sqlite_select_owner_events(events_table: str, *, topics: int) -> str:
    """As `postgres_select_owner_events`, with `topics` placeholders."""
    topic_filter = f"AND e.topic IN ({','.join('?' * topics)}) " if topics else ""
    return (
        "SELECT e.rowid AS notification_id, e.originator_id, e.originator_version, "
        f"e.topic, e.state FROM {OWNER_FEED_TABLE} f "
        f"JOIN {events_table} e ON e.rowid = f.notification_id "
        f"WHERE f.owner_id = ? AND f.notification_id > ? {topic_filter}"
        "ORDER BY f.notification_id LIMIT ?"
    )


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
