"""Direct SQL access to the stored events, to tamper with them as an attacker would.

Nothing here goes through the library: rows are changed with UPDATE and DELETE
on the events table of SQLite or PostgreSQL.
"""

from __future__ import annotations

import sqlite3
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from turnledger.infra.settings import Settings


class RawEvents:
    """The events table of one store, edited with plain SQL."""

    def __init__(self, settings: Settings) -> None:
        self.kind = settings.persistence
        if self.kind == "sqlite":
            self._sqlite = sqlite3.connect(settings.sqlite_events_path)
        elif self.kind == "postgres":
            self._postgres = psycopg.connect(
                settings.postgres_conninfo(), autocommit=True
            )
            self._table = sql.Identifier(
                settings.postgres_schema, "conversations_events"
            )
        else:
            raise ValueError(f"no raw SQL access to a {self.kind} store")

    def _id(self, conversation_id: UUID) -> Any:
        return conversation_id.hex if self.kind == "sqlite" else conversation_id

    def _execute(self, statement: str, params: tuple[Any, ...]) -> list[Any]:
        if self.kind == "sqlite":
            cursor = self._sqlite.execute(statement.replace("%s", "?"), params)
            rows = cursor.fetchall()
            self._sqlite.commit()
            return rows
        query = sql.SQL(statement.replace("EVENTS", "{}")).format(self._table)
        cursor = self._postgres.execute(query, params)
        return cursor.fetchall() if cursor.description else []

    def _sql(self, statement: str) -> str:
        return (
            statement
            if self.kind == "postgres"
            else statement.replace("EVENTS", "stored_events")
        )

    def state(self, conversation_id: UUID, version: int) -> bytes:
        rows = self._execute(
            self._sql(
                "SELECT state FROM EVENTS WHERE originator_id = %s "
                "AND originator_version = %s"
            ),
            (self._id(conversation_id), version),
        )
        return bytes(rows[0][0])

    def set_state(self, conversation_id: UUID, version: int, state: bytes) -> None:
        self._execute(
            self._sql(
                "UPDATE EVENTS SET state = %s WHERE originator_id = %s "
                "AND originator_version = %s"
            ),
            (state, self._id(conversation_id), version),
        )

    def flip_byte(self, conversation_id: UUID, version: int, offset: int) -> None:
        """Change one byte of the stored state, to another printable byte."""
        state = bytearray(self.state(conversation_id, version))
        state[offset] = ord("A") if state[offset] != ord("A") else ord("B")
        self.set_state(conversation_id, version, bytes(state))

    def insert(
        self, conversation_id: UUID, version: int, topic: str, state: bytes
    ) -> None:
        """A new event row, as an INSERT by hand would write it."""
        self._execute(
            self._sql(
                "INSERT INTO EVENTS (originator_id, originator_version, topic, state) "
                "VALUES (%s, %s, %s, %s)"
            ),
            (self._id(conversation_id), version, topic, state),
        )

    def delete(self, conversation_id: UUID, version: int) -> None:
        self._execute(
            self._sql(
                "DELETE FROM EVENTS WHERE originator_id = %s"
                " AND originator_version = %s"
            ),
            (self._id(conversation_id), version),
        )

    def renumber(self, conversation_id: UUID, version: int, new_version: int) -> None:
        self._execute(
            self._sql(
                "UPDATE EVENTS SET originator_version = %s WHERE originator_id = %s "
                "AND originator_version = %s"
            ),
            (new_version, self._id(conversation_id), version),
        )

    def swap(self, conversation_id: UUID, first: int, second: int) -> None:
        """Exchange the version numbers of two events (reordering them)."""
        self.renumber(conversation_id, first, -1)
        self.renumber(conversation_id, second, first)
        self.renumber(conversation_id, -1, second)

    def move(
        self,
        conversation_id: UUID,
        version: int,
        to_conversation_id: UUID,
        to_version: int,
    ) -> None:
        """Move an event into another conversation, replacing its event there."""
        self.delete(to_conversation_id, to_version)
        self._execute(
            self._sql(
                "UPDATE EVENTS SET originator_id = %s, originator_version = %s "
                "WHERE originator_id = %s AND originator_version = %s"
            ),
            (
                self._id(to_conversation_id),
                to_version,
                self._id(conversation_id),
                version,
            ),
        )

    def edit_read_side(self, statement: str, params: tuple[Any, ...]) -> None:
        """Run SQL on the read side; TURNS, HEADS and FOLDS name its tables."""
        names = {
            "TURNS": "conversation_turns",
            "HEADS": "conversation_heads",
            "FOLDS": "conversation_folds",
        }
        if self.kind == "sqlite":
            for placeholder, table in names.items():
                statement = statement.replace(placeholder, table)
            self._sqlite.execute(statement.replace("%s", "?"), params)
            self._sqlite.commit()
            return
        schema = self._table.as_string(self._postgres).split(".")[0]
        for placeholder, table in names.items():
            statement = statement.replace(placeholder, f"{schema}.{table}")
        self._postgres.execute(statement.encode(), params)

    def close(self) -> None:
        if self.kind == "sqlite":
            self._sqlite.close()
        else:
            self._postgres.close()
