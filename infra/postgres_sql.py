"""SQL building blocks of the PostgreSQL recorder: the read side's tables' names,
many rows as one JSON parameter, several inserts as one statement, and the
NOTIFY channel and payload of a schema's writes."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import orjson
from psycopg import sql

# Their schema is versioned: infra/migrations/ledger.py.
READ_SIDE_TABLES = ("conversation_heads", "conversation_turns", "conversation_folds")


def unchanged(value: Any) -> Any:
    return value


def as_bytes(statement: Any) -> bytes:
    """A statement of the library's (str, bytes or composed SQL) as bytes."""
    if isinstance(statement, bytes):
        return statement
    if isinstance(statement, str):
        return statement.encode()
    return bytes(statement.as_bytes(None))


def json_insert(
    table: sql.Composable, columns: str, *, suffix: str = "", source: str = "%s::json"
) -> sql.Composed:
    """INSERT of many rows in one statement, from one JSON array of objects.

    A batch's rows cost one parse, plan and execution instead of one each,
    and one parameter, encoded in one call (psycopg would dump
    arrays element by element, in Python). `source` is where the JSON comes
    from: a parameter, or an argument of the function the statement is in.
    """
    return sql.SQL(
        "INSERT INTO {table} ({columns}) SELECT {columns} "
        "FROM json_populate_recordset(NULL::{table}, {source})"
    ).format(table=table, columns=sql.SQL(columns), source=sql.SQL(source)) + sql.SQL(
        suffix
    )


HEADS_UPSERT = (
    " ON CONFLICT (conversation_id) "
    "DO UPDATE SET version = EXCLUDED.version, "
    "head_digest = EXCLUDED.head_digest, "
    "turn_count = EXCLUDED.turn_count, "
    "eligible_count = EXCLUDED.eligible_count, "
    "modified_at = EXCLUDED.modified_at"
)
# Named with a version: a later release that changes what a batch writes adds
# a new function instead of changing this one under processes still using it.
WRITE_FUNCTION = "turnledger_write_batch_v3"
# The device store's table (infra/devices.py), in the ledger's schema: a write
# with credentials is refused unless each names a device there not revoked.
DEVICE_TABLE = "devices"
CREDENTIAL_REVOKED = "turnledger: a writer's credential is no longer valid"
# PostgreSQL refuses a NOTIFY payload of 8,000 bytes or more.
_MAX_WAKE_PAYLOAD = 7_999
# Where a batch's inserts take their rows: keys, turns, heads, events.
BATCH_PARAMETERS = (
    "%s::json",
    "%s::json",
    "%s::json",
    "%s::uuid[], %s::bigint[], %s::text[], %b::bytea[]",
)
BATCH_ARGUMENTS = (
    "key_rows",
    "turn_rows",
    "head_rows",
    "ids, versions, topics, states",
)


def in_one_statement(inserts: Sequence[sql.Composed]) -> sql.Composed:
    """Several inserts as one statement (all but the last as data-modifying
    WITH queries, which PostgreSQL always runs to completion)."""
    *first, last = inserts
    queries = sql.SQL(", ").join(
        sql.SQL("{} AS ({})").format(sql.Identifier(f"insert_{index}"), insert)
        for index, insert in enumerate(first)
    )
    return sql.SQL("WITH {} {}").format(queries, last)


def _json_cell(value: Any) -> str:
    # The text each column type reads back exactly: timestamps carry their
    # offset and microseconds; bytea in its hex input form.
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a timestamp without a time zone")
        return value.isoformat()
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    raise TypeError(f"{type(value).__name__} is not a column value")


def json_rows(columns: str, rows: Sequence[Sequence[Any]]) -> str:
    """Rows as the JSON array of objects that json_insert reads.

    orjson, because this is on every batch's path: the standard library's
    encoder calls back into Python for each UUID and timestamp, and cost a
    batch of new turns more than its sealing. UUIDs are written natively (their
    canonical text); timestamps still go through `_json_cell`, which refuses
    one without a time zone.
    """
    names = [name.strip() for name in columns.split(",")]
    return orjson.dumps(
        [dict(zip(names, row, strict=True)) for row in rows],
        default=_json_cell,
        option=orjson.OPT_PASSTHROUGH_DATETIME,
    ).decode()


def schema_channel(schema: str, table: str) -> str:
    """The NOTIFY channel of one schema's events table: the schema's name in
    it, shortened with a digest when the whole would pass PostgreSQL's
    63-byte limit on names."""
    name = f"{schema}_{table}"
    if len(name.encode()) <= 63:
        return name
    digest = hashlib.sha256(schema.encode()).hexdigest()[:16]
    return f"{table[:40]}_{digest}"


def wake_payload(owner_ids: Collection[str]) -> str:
    """The NOTIFY payload of a batch: the owners whose data it changed, so a
    sync listener wakes their long-polls without reading the log back. Empty
    when they do not fit, which tells listeners to wake every waiter."""
    payload = orjson.dumps(sorted(set(owner_ids)))
    return payload.decode() if len(payload) <= _MAX_WAKE_PAYLOAD else ""


def woken_owners(payload: str) -> set[str] | None:
    """The owners named by a batch's NOTIFY payload, or None when it names
    none (a batch too wide, or a write made by the library's own insert)."""
    try:
        owners = orjson.loads(payload) if payload else None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(owners, list) or not all(isinstance(o, str) for o in owners):
        return None
    return set(owners)


# The (conversation, turn) pairs named by `turn_pairs`' parameter, as rows.
TURN_PAIRS = "SELECT c, t FROM json_to_recordset(%s::json) AS p(c uuid, t text)"


def uuid_array(ids: Iterable[UUID]) -> str:
    """A `%s::uuid[]` parameter as one string (a UUID's text needs no quoting):
    psycopg would dump a list element by element, in Python, and a sync read
    sends one per statement."""
    return "{" + ",".join(str(i) for i in ids) + "}"


def bigint_array(values: Iterable[int]) -> str:
    """A `%s::bigint[]` parameter as one string (as `uuid_array`)."""
    return "{" + ",".join(str(int(value)) for value in values) + "}"


def text_array(values: Iterable[str]) -> str:
    """A `%s::text[]` parameter as one string (as `uuid_array`): each element
    double-quoted, its backslashes and double quotes escaped, as the array
    input syntax reads them back."""
    return (
        "{"
        + ",".join(
            '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
            for value in values
        )
        + "}"
    )


def turn_pairs(turn_ids: Mapping[UUID, Collection[str]]) -> str:
    """The named turns of each conversation as the one JSON parameter of
    `TURN_PAIRS` (for the same reason as `uuid_array`)."""
    return orjson.dumps(
        [{"c": str(c), "t": t} for c, ids in turn_ids.items() for t in ids]
    ).decode()


class SchemaTables:
    """Names the tables of the schema a recorder writes in."""

    _schema: sql.Identifier

    def _table(self, name: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(self._schema, sql.Identifier(name))
