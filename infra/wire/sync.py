"""What `GET /v1/sync` answers: the changes after a cursor, each a turn, a
conversation started, a deletion or another event (docs/sync.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import BaseModel, Field

from turnledger.infra.wire.turn import PartsOut, TurnStatusName, TurnTextOut, Unreadable
from turnledger.projections.results import MAX_CHANGES_PER_READ


class _ChangeOut(BaseModel):
    conversation_id: UUID
    version: int
    at: datetime


class ConversationStartedOut(_ChangeOut):
    kind: Literal["conversation_started"] = "conversation_started"


class TurnRecordedOut(_ChangeOut):
    kind: Literal["turn_recorded"] = "turn_recorded"
    turn_id: str
    status: TurnStatusName
    deleted: bool = Field(description="true: the turn is deleted; its text is not sent")
    question: TurnTextOut
    answer: TurnTextOut
    unreadable: Unreadable = None
    parts: PartsOut = None


class HistoryDeletedOut(_ChangeOut):
    kind: Literal["history_deleted"] = "history_deleted"
    turn_ids: list[str] = Field(description="purge these turns' text locally")
    whole_history: bool
    deleted_by: str


class OtherChangeOut(_ChangeOut):
    kind: Literal["other"] = "other"
    event_type: str


ChangeOut = Annotated[
    ConversationStartedOut | TurnRecordedOut | HistoryDeletedOut | OtherChangeOut,
    Field(discriminator="kind"),
]


class SyncOut(BaseModel):
    changes: list[ChangeOut]
    next_cursor: str = Field(description="pass as `since` to get what comes after")
    has_more: bool = Field(
        description="true: more changes are ready, ask again at once"
    )


SYNC_LIMIT_MAX = MAX_CHANGES_PER_READ
