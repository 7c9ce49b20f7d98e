"""JSON transcodings for the types our events and snapshots hold."""

from __future__ import annotations

import base64
from typing import Any

from eventsourcing.persistence import Transcoding

from domain.conversation import TurnEntry, TurnStatus


class BytesAsBase64(Transcoding):
    type = bytes
    name = "bytes_b64"

    def encode(self, obj: bytes) -> str:
        return base64.b64encode(obj).decode("ascii")

    def decode(self, data: str) -> bytes:
        return base64.b64decode(data)


class TurnEntryAsList(Transcoding):
    """A positional list: snapshots of long conversations stay compact."""

    type = TurnEntry
    name = "turn_entry"

    def encode(self, obj: TurnEntry) -> list[Any]:
        return [
            obj.turn_id,
            obj.status.value,
            obj.version,
            obj.recorded_at,
            obj.question_json_bytes,
            obj.answer_json_bytes,
            obj.question_chars,
            obj.answer_chars,
            obj.deleted_at,
        ]

    def decode(self, data: list[Any]) -> TurnEntry:
        (
            turn_id,
            status,
            version,
            recorded_at,
            q_bytes,
            a_bytes,
            q_chars,
            a_chars,
            deleted_at,
        ) = data
        return TurnEntry(
            turn_id=turn_id,
            status=TurnStatus(status),
            version=version,
            recorded_at=recorded_at,
            question_json_bytes=q_bytes,
            answer_json_bytes=a_bytes,
            question_chars=q_chars,
            answer_chars=a_chars,
            deleted_at=deleted_at,
        )
