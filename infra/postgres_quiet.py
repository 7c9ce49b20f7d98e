"""Keeping key bytes out of the PostgreSQL server's log, on the recorder's
connections: the write function's call carries the new turns' wrapped keys
as parameters, which the server logs with statement logging on. These set
its parameter logging to nothing where the role may (QUIET_KEY_SESSION,
infra/key_session.py, as the key store's own pool does)."""

from __future__ import annotations

import weakref
from typing import Any

import psycopg
from eventsourcing.postgres import PostgresDatastore
from psycopg import sql

from turnledger.infra.key_session import QUIET_KEY_SESSION


class QuietKeyStatements:
    """The recorder's statements that quiet the server's log, for the
    settings its role may change (checked once)."""

    datastore: PostgresDatastore
    _quiet: list[tuple[str, str]] | None = None
    _quiet_connections: weakref.WeakSet[psycopg.Connection[Any]]

    def _quiet_key_statements(self, *, session: bool = False) -> list[bytes]:
        """One statement that keeps key bytes out of the server log, for the
        settings this role may change (checked once): for the transaction, or
        with `session` for the connection's whole session."""
        if self._quiet is None:
            allowed = []
            with self.datastore.get_connection() as conn:
                for name, value in QUIET_KEY_SESSION.items():
                    row = conn.execute(
                        "SELECT has_parameter_privilege(%s, 'SET') AS allowed",
                        (name,),
                    ).fetchone()
                    if row is not None and row["allowed"]:
                        allowed.append((name, value))
            self._quiet = allowed
        if not self._quiet:
            return []
        local = sql.Literal(not session)
        return [
            (
                sql.SQL("SELECT ")
                + sql.SQL(", ").join(
                    sql.SQL("set_config({}, {}, {})").format(
                        sql.Literal(name), sql.Literal(value), local
                    )
                    for name, value in self._quiet
                )
            ).as_bytes(None)
        ]

    def _quiet_session(self, conn: psycopg.Connection[Any]) -> None:
        """Make `conn` log no parameter values, once per connection: the write
        function's call carries the wrapped keys as parameters, and statement
        logging would write them out before the function could say otherwise."""
        if conn in self._quiet_connections:
            return
        for statement in self._quiet_key_statements(session=True):
            conn.execute(statement)
        self._quiet_connections.add(conn)
