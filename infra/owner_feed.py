"""The per-user feed index: which log positions hold each owner's events.

A device's catch-up reads its user's rows of this index, then the events they
name, so its cost follows the user's own changes, not the whole log's. The
rows are written in the transaction of the events they index, as the read
side's are, so a reader never sees an event without its row:

- PostgreSQL: a statement trigger on the events table inserts the rows of
  every statement that inserts events, whichever code path (or release) wrote
  them, joining the new events to the conversations' owners in
  `conversation_heads` (written by the same statement, or earlier). A row is
  a run of consecutive log positions that all hold one owner's events:
  (owner, last position, first position, NULL when the run is one position),
  at most `RUN_POSITIONS` long. A statement writing one user's turns in a
  group indexes them in one row; one writing a single event of each of
  several users, one row each, as the index's first version did.
- SQLite (a file, or the memory store's database in memory): the recorder
  inserts one row (owner, position) per event, after the events and the head
  rows.

A store written before the index existed gets it built from the log once, at
start-up, under the events table's write lock (see docs/sync.md); on
PostgreSQL a later step turns the rows of the first version into runs.
"""

from __future__ import annotations

from psycopg import sql

OWNER_FEED_TABLE = "owner_feed"
# The trigger's function, by the version of the rows it writes: one row per
# event (step 3 of the ledger's migrations), then runs of positions (step 6).
_TRIGGER_FUNCTION = "turnledger_owner_feed_v1"
_RUNS_FUNCTION = "turnledger_owner_feed_v2"
_TRIGGER = "turnledger_owner_feed"
_HEADS = "conversation_heads"
# The longest run one row names: a read that starts inside a run, or stops
# in one, fetches at most this many events past its page (the sort of one
# run's events is done whole), and a run longer than any page never exists.
RUN_POSITIONS = 64


def postgres_owner_feed_ddl(schema: str, events_table: str) -> list[sql.Composed]:
    """The index's first version (one row per event), its trigger, and its
    one-time build: step 3 of the ledger's migrations, kept as it ran.

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


def _runs(feed: sql.Composable, positions: sql.Composable) -> sql.Composed:
    """Insert into `feed` the index's rows for `positions`, a query of
    (owner_id, position) rows: each owner's runs of consecutive positions,
    cut every RUN_POSITIONS.

    Within one owner's positions in order, a run is where position minus rank
    stays the same: any position between two of them that is not the
    owner's (another owner's event, or one never written) ends the run, so a
    row's range holds the owner's events and nothing else.
    """
    return sql.SQL(
        "INSERT INTO {feed} (owner_id, last_id, first_id) "
        "SELECT owner_id, max(position), nullif(min(position), max(position)) "
        "FROM (SELECT owner_id, position, "
        "row_number() OVER (PARTITION BY owner_id ORDER BY position) AS rank "
        "FROM ({positions}) AS p) AS ranked "
        "GROUP BY owner_id, position - rank, (rank - 1) / {run}"
    ).format(feed=feed, positions=positions, run=sql.Literal(RUN_POSITIONS))


def _trigger_rows(schema: str) -> sql.Composed:
    """The trigger's insert: the runs of the statement's new events."""
    return _runs(
        sql.Identifier(schema, OWNER_FEED_TABLE),
        sql.SQL(
            "SELECT h.owner_id, i.notification_id AS position FROM inserted i "
            "JOIN {heads} h ON h.conversation_id = i.originator_id"
        ).format(heads=sql.Identifier(schema, _HEADS)),
    )


def _log_rows(schema: str, events_table: str) -> sql.Composed:
    """Every row the log and the head rows define."""
    return _runs(
        sql.Identifier(schema, OWNER_FEED_TABLE),
        sql.SQL(
            "SELECT h.owner_id, e.notification_id AS position FROM {events} e "
            "JOIN {heads} h ON h.conversation_id = e.originator_id"
        ).format(
            events=sql.Identifier(schema, events_table),
            heads=sql.Identifier(schema, _HEADS),
        ),
    )


def postgres_owner_runs_ddl(schema: str, events_table: str) -> list[sql.Composed]:
    """Step 6 of the ledger's migrations: the index's rows become runs of
    positions, and the trigger writes runs.

    The rows of the first version are turned into runs under the events
    table's write lock, so no event commits between the copy and the new
    trigger. They are copied into a new table (the old one dropped) rather
    than rewritten in place, which would leave every old row behind as a
    dead version. Each statement finds its work done when it is: a store of
    the release before versioned steps applies the steps again from the first.
    """
    staged = f"{OWNER_FEED_TABLE}_runs"
    names = {
        "feed": sql.Identifier(schema, OWNER_FEED_TABLE),
        "feed_name": sql.Literal(f"{_quote(schema)}.{_quote(OWNER_FEED_TABLE)}"),
        "staged": sql.Identifier(schema, staged),
        "staged_key": sql.Identifier(f"{staged}_pkey"),
        "key": sql.Identifier(f"{OWNER_FEED_TABLE}_pkey"),
        "name": sql.Identifier(OWNER_FEED_TABLE),
        "events": sql.Identifier(schema, events_table),
        "old_function": sql.Identifier(schema, _TRIGGER_FUNCTION),
        "function": sql.Identifier(schema, _RUNS_FUNCTION),
        "trigger": sql.Identifier(_TRIGGER),
    }
    copied = _runs(
        names["staged"],
        sql.SQL("SELECT owner_id, notification_id AS position FROM {feed}").format(
            **names
        ),
    )
    return [
        sql.SQL(
            "DO $runs$ BEGIN "
            "IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = "
            "{feed_name}::regclass AND attname = 'last_id' AND NOT attisdropped) "
            "THEN "
            "LOCK TABLE {events} IN EXCLUSIVE MODE; "
            "CREATE TABLE {staged} (owner_id text NOT NULL, "
            "last_id bigint NOT NULL, first_id bigint, "
            "CONSTRAINT {staged_key} PRIMARY KEY (owner_id, last_id)); "
            "{copied}; "
            "DROP TABLE {feed}; "
            "ALTER TABLE {staged} RENAME TO {name}; "
            "ALTER TABLE {feed} RENAME CONSTRAINT {staged_key} TO {key}; "
            "END IF; END $runs$"
        ).format(copied=copied, **names),
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {function}() RETURNS trigger "
            "LANGUAGE plpgsql AS $body$ BEGIN {rows}; RETURN NULL; END $body$"
        ).format(rows=_trigger_rows(schema), **names),
        sql.SQL("DROP TRIGGER IF EXISTS {trigger} ON {events}").format(**names),
        sql.SQL(
            "CREATE TRIGGER {trigger} AFTER INSERT ON {events} "
            "REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT "
            "EXECUTE FUNCTION {function}()"
        ).format(**names),
        sql.SQL("DROP FUNCTION IF EXISTS {old_function}()").format(**names),
    ]


def postgres_rebuild_owner_feed(schema: str, events_table: str) -> list[sql.Composed]:
    """Statements that make the index match the log and the head rows again
    (after the read side is rebuilt, in the rebuild's transaction)."""
    return [
        sql.SQL("DELETE FROM {}").format(sql.Identifier(schema, OWNER_FEED_TABLE)),
        _log_rows(schema, events_table),
    ]


def postgres_select_owner_events(
    schema: str, events_table: str, *, with_topics: bool
) -> sql.Composed:
    """The owner's events after a position, oldest first: parameters owner,
    position, [topics,] limit.

    The runs after the position, in order, each joined to its events (from
    the position on, for a run it starts inside). Runs never overlap, so
    ordering by run and then by position is log order, and a read sorts at
    most one run's events beyond its page.
    """
    return sql.SQL(
        "SELECT e.notification_id, e.originator_id, e.originator_version, "
        "e.topic, e.state "
        "FROM (SELECT %s::text AS owner_id, %s::bigint AS after) AS p "
        "JOIN {feed} f ON f.owner_id = p.owner_id AND f.last_id > p.after "
        "JOIN {events} e ON e.notification_id "
        "BETWEEN greatest(coalesce(f.first_id, f.last_id), p.after + 1) "
        "AND f.last_id {topics}"
        "ORDER BY f.last_id, e.notification_id LIMIT %s"
    ).format(
        feed=sql.Identifier(schema, OWNER_FEED_TABLE),
        events=sql.Identifier(schema, events_table),
        topics=sql.SQL("WHERE e.topic = ANY(%s) " if with_topics else ""),
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
