"""Every place turnledger relies on a library's internals: the one module to
read when eventsourcing (pinned in pyproject.toml) or uvicorn (pinned to a
minor version) is upgraded.

Everywhere else the code uses the libraries' documented seams: an
`Application` subclass whose `save` calls the library's, an `EventStore` and
a `Mapper` subclass (infra/service_layer/chain_mapper.py), recorders built by
the library's factories. What cannot be done through those is here:

- the recorders' hook into the events' own transaction. The library's
  recorders write a batch in `_insert_events`, the method its
  searchable-content example overrides to add rows; each class below
  overrides it once and calls a public hook of ours instead.
- PostgreSQL's one-statement write. The library's write is several
  statements (lock timeout, table lock, NOTIFY, insert); the ledger sends the
  same transaction as one function call (`write_function_ddl`,
  `begin_lock_and_notify`), so it must keep the library's guarantees:
  notification ids in commit order without gaps, the NOTIFY that its
  `subscribe()` listens for, and its lock timeout.
- the PostgreSQL pool's check: the library's datastore makes its pool with a
  check of its own choosing; `replace_pool_check` remakes it with ours.
- uvicorn's keep-alive timer, which a refused request head must stop.

tests/integration/test_library_compat.py checks each of these against the
library's own behaviour, side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import (
    ConnectionPool as LibraryConnectionPool,
)
from eventsourcing.postgres import (
    PostgresApplicationRecorder,
    PostgresDatastore,
)
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor
from psycopg import sql
from psycopg.rows import DictRow
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class PostgresRecorderWithRows(PostgresApplicationRecorder):
    """The library's PostgreSQL recorder; `write_rows` runs in the events'
    transaction, before the events are inserted (and locked)."""

    def write_rows(
        self,
        curs: psycopg.Cursor[DictRow],
        stored_events: Sequence[StoredEvent],
        **kwargs: Any,
    ) -> None:
        """Write what goes with `stored_events` (the save's keyword arguments)."""

    def _insert_events(
        self,
        curs: psycopg.Cursor[DictRow],
        stored_events: Sequence[StoredEvent],
        **kwargs: Any,
    ) -> None:
        self.write_rows(curs, stored_events, **kwargs)
        super()._insert_events(curs, stored_events, **kwargs)

    @property
    def events_table(self) -> sql.Identifier:
        return sql.Identifier(self.datastore.schema, self.events_table_name)

    @property
    def lock_wait(self) -> str:
        """The library's lock timeout (POSTGRES_LOCK_TIMEOUT, seconds; 0 waits
        forever), as a `lock_timeout` setting."""
        return f"{self.datastore.lock_timeout}s"

    def write_function_ddl(
        self,
        *,
        function: sql.Identifier,
        arguments: str,
        checks: sql.Composable,
        statement: sql.Composable,
    ) -> sql.Composed:
        """A function that runs the library's write transaction in one call.

        Its body does what the library's insert does, in its order: the
        library's lock timeout (from the call's `lock_wait` argument) and its
        table lock, which gives notification ids in commit order without gaps;
        the NOTIFY on the channel its `subscribe()` listens to (the call's
        `wake` argument is the payload); then `statement`, which inserts the
        events (and anything else) and returns their notification ids.
        `checks` runs first (PL/pgSQL statements). `arguments` must declare
        `lock_wait text` and `wake text`.
        """
        return sql.SQL(
            "CREATE OR REPLACE FUNCTION {function}({arguments})"
            " RETURNS SETOF bigint LANGUAGE plpgsql AS $body$ BEGIN"
            " {checks}"
            " PERFORM set_config('lock_timeout', lock_wait, true);"
            " LOCK TABLE {events} IN EXCLUSIVE MODE;"
            " PERFORM pg_notify({channel}, wake);"
            " RETURN QUERY {statement};"
            " END $body$"
        ).format(
            function=function,
            arguments=sql.SQL(arguments),
            checks=checks,
            events=self.events_table,
            channel=sql.Literal(self.channel_name),
            statement=statement,
        )

    def begin_lock_and_notify(self, first: Sequence[bytes], wake: str) -> bytes:
        """BEGIN, `first`, the library's lock statements and its NOTIFY (with
        `wake` as payload): the start of a write sent as several statements."""
        statements = [b"BEGIN", *first]
        statements.extend(_as_bytes(s) for s in self.lock_table_statements)
        notify = sql.SQL("NOTIFY {}, {}").format(
            sql.Identifier(self.channel_name), sql.Literal(wake)
        )
        return b"; ".join([*statements, notify.as_bytes(None)])


class SQLiteRecorderWithRows(SQLiteApplicationRecorder):
    """The library's SQLite recorder; `write_rows` runs in the events'
    transaction, after the events are inserted."""

    def write_rows(
        self,
        c: SQLiteCursor,
        ids: Sequence[int],
        stored_events: Sequence[StoredEvent],
        **kwargs: Any,
    ) -> None:
        """Write what goes with `stored_events`, stored at positions `ids`
        (the save's keyword arguments)."""

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        ids = super()._insert_events(c, stored_events, **kwargs)
        self.write_rows(c, ids or (), stored_events, **kwargs)
        return ids


def _as_bytes(statement: Any) -> bytes:
    """A statement of the library's (str, bytes or composed SQL) as bytes."""
    if isinstance(statement, bytes):
        return statement
    if isinstance(statement, str):
        return statement.encode()
    return bytes(statement.as_bytes(None))


def replace_pool_check(
    datastore: PostgresDatastore,
    check: Callable[[psycopg.Connection[Any]], None],
    *,
    connection: Mapping[str, Any] | None = None,
    **options: Any,
) -> None:
    """Give the library's datastore a pool that checks connections with
    `check`, with more libpq `connection` parameters (e.g.
    `target_session_attrs`) and psycopg_pool `options` (`reconnect_timeout`).

    The library offers the pool's full ping (POSTGRES_PRE_PING) or none; its
    pool takes the check only when it is made. So the datastore's pool, made
    but not yet opened, is replaced by one made with the same settings, this
    check and these options.
    """
    built = datastore.pool
    parameters = built.kwargs
    assert isinstance(parameters, dict)  # the library gives its pool a dict
    datastore.pool = LibraryConnectionPool(
        get_password_func=built.get_password_func,
        connection_class=built.connection_class,
        kwargs={**parameters, **(connection or {})},
        min_size=built.min_size,
        max_size=built.max_size,
        open=False,
        configure=datastore.after_connect_func(),
        timeout=options.pop("timeout", built.timeout),
        max_waiting=built.max_waiting,
        max_lifetime=built.max_lifetime,
        check=check,
        **options,
    )


def stop_keep_alive(protocol: HttpToolsProtocol) -> None:
    """Cancel the keep-alive timer of a connection about to be closed."""
    protocol._unset_keepalive_if_required()
