"""An attacker with write access to the database who has read domain/chain.py.

Every edit is plain SQL on the events table; edits that change an event's
content re-seal it and every later event of its conversation with
`seal_state`, so the hash chain verifies afterwards and only a commitment
held outside the database (a signed checkpoint) can show the change.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from turnledger.domain.chain import (
    ENVELOPE_MAGIC,
    GENESIS,
    decode_envelope,
    encode_envelope,
    read_link_parts,
    seal_state,
)
from turnledger.infra.settings import Settings

# ,"previous_digest":"<64 hex>","digest":"<64 hex>"}
_SEAL_LENGTH = len(',"previous_digest":"') + 64 + len('","digest":"') + 64 + 2


def unsealed(state: bytes) -> bytes:
    """The event's JSON: an envelope's JSON part, or a first-release event's
    JSON as it was before the chain keys were added."""
    if state.startswith(ENVELOPE_MAGIC):
        return decode_envelope(state).json
    body = state[:-_SEAL_LENGTH]
    return b"{}" if body == b"" or body == b"{" else body + b"}"


def reseal(
    conversation_id: UUID,
    version: int,
    topic: str,
    template: bytes | None,
    body: bytes,
    previous: str,
) -> tuple[bytes, str]:
    """Seal `body` as the event's JSON, in the format of `template` (an
    envelope, keeping its timestamp and sealed texts, or first-release JSON);
    a new event (no template) is sealed in the envelope."""
    if template is not None and not template.startswith(ENVELOPE_MAGIC):
        return seal_state(
            originator_id=conversation_id,
            version=version,
            topic=topic,
            state=body,
            previous_digest=previous,
        )
    envelope = None if template is None else decode_envelope(template)
    return encode_envelope(
        originator_id=conversation_id,
        version=version,
        topic=topic,
        previous_digest=previous,
        timestamp=datetime.now(UTC) if envelope is None else envelope.timestamp,
        blobs={} if envelope is None else envelope.blobs,
        json=body,
        class_version=1 if envelope is None else envelope.class_version,
    )


class Forger:
    def __init__(self, settings: Settings) -> None:
        self.kind = settings.persistence
        if self.kind == "sqlite":
            self._sqlite = sqlite3.connect(settings.sqlite_events_path)
            self._sqlite.text_factory = bytes
            self.id_column = "rowid"
        else:
            self._postgres = psycopg.connect(
                settings.postgres_conninfo(), autocommit=True
            )
            self._table = sql.Identifier(
                settings.postgres_schema, "conversations_events"
            )
            self.id_column = "notification_id"

    def execute(self, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """`EVENTS` names the table, `ID` the notification id, %s the parameters."""
        statement = statement.replace("ID", self.id_column)
        if self.kind == "sqlite":
            cursor = self._sqlite.execute(
                statement.replace("EVENTS", "stored_events").replace("%s", "?"), params
            )
            rows = cursor.fetchall()
            self._sqlite.commit()
            return rows
        query = sql.SQL(statement.replace("EVENTS", "{}")).format(self._table)
        cursor = self._postgres.execute(query, params)
        return cursor.fetchall() if cursor.description else []

    def key(self, conversation_id: UUID) -> Any:
        return conversation_id.hex if self.kind == "sqlite" else conversation_id

    def events(self, conversation_id: UUID) -> list[tuple[int, int, str, bytes]]:
        """(notification id, version, topic, state) in version order."""
        rows = self.execute(
            "SELECT ID, originator_version, topic, state FROM EVENTS "
            "WHERE originator_id = %s ORDER BY originator_version",
            (self.key(conversation_id),),
        )
        return [(row[0], row[1], _text(row[2]), bytes(row[3])) for row in rows]

    def ids(self) -> list[int]:
        return [row[0] for row in self.execute("SELECT ID FROM EVENTS ORDER BY ID")]

    def rewrite(self, conversation_id: UUID, old: bytes, new: bytes) -> int:
        """Replace `old` with `new` in the first event holding it, re-seal the
        rest of the conversation; return the version edited."""
        edited: int | None = None
        previous = GENESIS
        for _, version, topic, state in self.events(conversation_id):
            body = unsealed(state)
            if edited is None and old in body:
                body = body.replace(old, new, 1)
                edited = version
            sealed, previous = reseal(
                conversation_id, version, topic, state, body, previous
            )
            if edited is not None:
                self.execute(
                    "UPDATE EVENTS SET state = %s WHERE originator_id = %s "
                    "AND originator_version = %s",
                    (sealed, self.key(conversation_id), version),
                )
        assert edited is not None, "nothing to rewrite"
        return edited

    def truncate(self, conversation_id: UUID, keep: int) -> None:
        self.execute(
            "DELETE FROM EVENTS WHERE originator_id = %s AND originator_version > %s",
            (self.key(conversation_id), keep),
        )

    def delete_conversation(self, conversation_id: UUID) -> None:
        self.execute(
            "DELETE FROM EVENTS WHERE originator_id = %s", (self.key(conversation_id),)
        )

    def append(
        self, conversation_id: UUID, body: bytes, *, notification_id: int | None
    ) -> int:
        """A validly sealed event at head + 1; return its version."""
        events = self.events(conversation_id)
        _, head, topic, state = events[-1]
        previous = read_link_parts(
            originator_id=conversation_id, version=head, topic=topic, state=state
        ).recorded_digest
        sealed, _ = reseal(conversation_id, head + 1, topic, None, body, previous)
        columns = "originator_id, originator_version, topic, state"
        values: tuple[Any, ...] = (self.key(conversation_id), head + 1, topic, sealed)
        if notification_id is not None:
            columns += ", ID"
            values += (notification_id,)
        marks = ", ".join(["%s"] * len(values))
        self.execute(f"INSERT INTO EVENTS ({columns}) VALUES ({marks})", values)
        return head + 1

    def make_room(self, after: int) -> None:
        """Renumber every event after `after` one up, newest first."""
        for notification_id in sorted(
            (i for i in self.ids() if i > after), reverse=True
        ):
            self.execute(
                "UPDATE EVENTS SET ID = %s WHERE ID = %s",
                (notification_id + 1, notification_id),
            )

    def swap_ids(self, first: int, second: int) -> None:
        self.execute("UPDATE EVENTS SET ID = %s WHERE ID = %s", (-999_999, first))
        self.execute("UPDATE EVENTS SET ID = %s WHERE ID = %s", (first, second))
        self.execute("UPDATE EVENTS SET ID = %s WHERE ID = %s", (second, -999_999))

    def set_cell(self, notification_id: int, column: str, value: Any) -> None:
        self.execute(
            f"UPDATE EVENTS SET {column} = %s WHERE ID = %s", (value, notification_id)
        )

    def close(self) -> None:
        if self.kind == "sqlite":
            self._sqlite.close()
        else:
            self._postgres.close()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
