"""What the SQLite and PostgreSQL read sides share: columns and row decoding."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from turnledger.domain.conversation import PartsSizes, TurnSizes, TurnStatus
from turnledger.projections.ledger_rows import ConversationRow, FoldRow, TurnRow

CONVERSATION_COLUMNS = (
    "conversation_id, owner_id, version, head_digest, turn_count, eligible_count, "
    "created_at, modified_at"
)
TURN_COLUMNS = (
    "conversation_id, position, turn_id, status, version, recorded_at, "
    "question_json_bytes, answer_json_bytes, question_chars, answer_chars, "
    "deleted_version, deleted_at, parts_sizes"
)
TURN_COLUMN_COUNT = TURN_COLUMNS.count(",") + 1
# Erasing a deleted turn's sizes: nothing of its content stays on the read side.
ERASE_TURN_SIZES = (
    "question_json_bytes = NULL, answer_json_bytes = NULL, "
    "question_chars = NULL, answer_chars = NULL, parts_sizes = NULL"
)
FOLD_COLUMNS = (
    "conversation_id, fold_id, version, recorded_at, covers_through_turn_id, "
    "covers_through_position, covered_turns, covered_eligible, "
    "summary_json_bytes, summary_chars, withdrawn_version"
)


# Statuses are stored as one letter (a turn row is written for every turn).
STATUS_CODES = {
    TurnStatus.CONFIRMED: "c",
    TurnStatus.FAILED: "f",
    TurnStatus.STOPPED: "s",
}
_STATUSES = {code: status for status, code in STATUS_CODES.items()}
CONFIRMED_CODE = STATUS_CODES[TurnStatus.CONFIRMED]


def _uuid(value: Any) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))


def _time(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def conversation_row(row: Mapping[str, Any]) -> ConversationRow:
    return ConversationRow(
        conversation_id=_uuid(row["conversation_id"]),
        owner_id=row["owner_id"],
        version=int(row["version"]),
        head_digest=row["head_digest"],
        turn_count=int(row["turn_count"]),
        eligible_count=int(row["eligible_count"]),
        created_at=_time(row["created_at"]),
        modified_at=_time(row["modified_at"]),
    )


def turn_row(row: Mapping[str, Any]) -> TurnRow:
    sizes = None
    if row["question_json_bytes"] is not None:
        sizes = TurnSizes(
            question_json_bytes=int(row["question_json_bytes"]),
            answer_json_bytes=int(row["answer_json_bytes"]),
            question_chars=int(row["question_chars"]),
            answer_chars=int(row["answer_chars"]),
            parts=None
            if row["parts_sizes"] is None
            else PartsSizes.decode(row["parts_sizes"]),
        )
    return TurnRow(
        conversation_id=_uuid(row["conversation_id"]),
        position=int(row["position"]),
        turn_id=row["turn_id"],
        status=_STATUSES[row["status"]],
        version=int(row["version"]),
        recorded_at=_time(row["recorded_at"]),
        sizes=sizes,
        deleted_version=row["deleted_version"],
        deleted_at=None if row["deleted_at"] is None else _time(row["deleted_at"]),
    )


def fold_row(row: Mapping[str, Any]) -> FoldRow:
    return FoldRow(
        conversation_id=_uuid(row["conversation_id"]),
        fold_id=row["fold_id"],
        version=int(row["version"]),
        recorded_at=_time(row["recorded_at"]),
        covers_through_turn_id=row["covers_through_turn_id"],
        covers_through_position=int(row["covers_through_position"]),
        covered_turns=int(row["covered_turns"]),
        covered_eligible=int(row["covered_eligible"]),
        summary_json_bytes=row["summary_json_bytes"],
        summary_chars=row["summary_chars"],
        withdrawn_version=row["withdrawn_version"],
    )


def turn_values(turn: TurnRow, *, key: Any, time: Any) -> tuple[Any, ...]:
    sizes = turn.sizes
    return (
        key(turn.conversation_id),
        turn.position,
        turn.turn_id,
        STATUS_CODES[turn.status],
        turn.version,
        time(turn.recorded_at),
        None if sizes is None else sizes.question_json_bytes,
        None if sizes is None else sizes.answer_json_bytes,
        None if sizes is None else sizes.question_chars,
        None if sizes is None else sizes.answer_chars,
        turn.deleted_version,
        None if turn.deleted_at is None else time(turn.deleted_at),
        None if sizes is None or sizes.parts is None else sizes.parts.encode(),
    )


def conversation_values(
    row: ConversationRow, *, key: Any, time: Any
) -> tuple[Any, ...]:
    return (
        key(row.conversation_id),
        row.owner_id,
        row.version,
        row.head_digest,
        row.turn_count,
        row.eligible_count,
        time(row.created_at),
        time(row.modified_at),
    )


def fold_values(fold: FoldRow, *, key: Any, time: Any) -> tuple[Any, ...]:
    return (
        key(fold.conversation_id),
        fold.fold_id,
        fold.version,
        time(fold.recorded_at),
        fold.covers_through_turn_id,
        fold.covers_through_position,
        fold.covered_turns,
        fold.covered_eligible,
        fold.summary_json_bytes,
        fold.summary_chars,
        fold.withdrawn_version,
    )
