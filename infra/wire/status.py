"""Wire models of the service's status, purge and fold routes."""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, Field

from turnledger.infra.wire.schemas import Identifier, RequestModel

# The response header that carries a write's log position, for read-your-writes
# on a replica (docs/sync.md).
POSITION_HEADER = "TurnLedger-Position"


class HealthOut(BaseModel):
    status: Literal["ok"]


class ReadyOut(BaseModel):
    status: Literal["ready", "unavailable"]
    database: Literal["available", "unavailable"]
    database_since: datetime = Field(description="when the database was last found so")
    reason: str | None = Field(description="why the database is unavailable")


class PurgeStateOut(BaseModel):
    state: Literal["complete", "pending"] = Field(
        description="pending: destroyed keys may still be in the database's files "
        "or WAL; the service retries until they are not (docs/deletion.md)"
    )
    position: int | None = Field(description="log position the purge has followed")
    pending_reasons: list[str] = Field(description="what holds a pending compaction")
    server_findings: list[str] = Field(
        description="server settings that keep purges pending (checked at start)"
    )


class FoldIn(RequestModel):
    covers_through_turn_id: Identifier
    summary: str
    summarized_version: int = Field(
        ge=1,
        description="the ledger version of the history the summary was made from: "
        "refused if a turn it covers was deleted since",
    )
    fold_id: Identifier | None = Field(
        default=None, description="default: a new random id"
    )
    expected_version: int | None = Field(default=None, ge=1)


class FoldOut(BaseModel):
    conversation_id: UUID
    fold_id: str
    covers_through_turn_id: str
    version: int


class FoldStatusOut(BaseModel):
    fold_id: str | None
    covers_through_turn_id: str | None
    summary: str | None = Field(description="the current fold's text, if any")
    unfolded_tokens: int
    threshold_tokens: int
    due: bool = Field(description="true: the turns after the fold call for a new one")
