"""JSON transcodings for the types our events and snapshots hold."""

from __future__ import annotations

import base64
from typing import Any

from eventsourcing.persistence import Transcoding

from turnledger.domain.conversation import FoldEntry, TurnEntry, TurnStatus


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


class FoldEntryAsList(Transcoding):
    type = FoldEntry
    name = "fold_entry"

    def encode(self, obj: FoldEntry) -> list[Any]:
        return [
            obj.fold_id,
            obj.version,
            obj.recorded_at,
            obj.covers_through_turn_id,
            obj.covered_turns,
            obj.covered_eligible,
            obj.summary_json_bytes,
            obj.summary_chars,
            obj.withdrawn_at,
        ]

    def decode(self, data: list[Any]) -> FoldEntry:
        (
            fold_id,
            version,
            recorded_at,
            covers_through,
            covered_turns,
            covered_eligible,
            summary_json_bytes,
            summary_chars,
            withdrawn_at,
        ) = data
        return FoldEntry(
            fold_id=fold_id,
            version=version,
            recorded_at=recorded_at,
            covers_through_turn_id=covers_through,
            covered_turns=covered_turns,
            covered_eligible=covered_eligible,
            summary_json_bytes=summary_json_bytes,
            summary_chars=summary_chars,
            withdrawn_at=withdrawn_at,
        )
