"""Settings of the key store's PostgreSQL sessions."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

# With statement logging on (log_statement, log_min_duration_statement), the
# server writes each statement's parameters to its log, and so every wrapped
# key the key store inserts. These make the key store's own sessions log no
# parameter values. They need superuser or GRANT SET ON PARAMETER (PostgreSQL
# 15); without it the server's settings apply (docs/deletion.md).
QUIET_KEY_SESSION = {
    "log_parameter_max_length": "0",
    "log_parameter_max_length_on_error": "0",
}


def configure_key_session(connection: psycopg.Connection[Any]) -> None:
    """Pool `configure` callback of the key store: log no parameter values."""
    for name, value in QUIET_KEY_SESSION.items():
        row = connection.execute(
            "SELECT has_parameter_privilege(%s, 'SET')", (name,)
        ).fetchone()
        if row is not None and row[0]:
            connection.execute(
                sql.SQL("SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
            )
    connection.commit()
