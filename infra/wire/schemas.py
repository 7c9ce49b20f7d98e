"""Request and response bodies of the HTTP API (version 1).

Request models are strict (no "5" for 5) and forbid unknown fields, so a typo
is reported instead of silently ignored. No text may hold NUL (PostgreSQL
cannot store it), which is refused here, before anything runs. Texts are
checked again by the ledger, which rejects unpaired surrogates, NUL and empty
questions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Self
from uuid import UUID

from pydantic import (
    BaseModel,
    Field,
    model_validator,
)

from turnledger.domain.parts import TurnParts
from turnledger.infra.wire.base import Identifier, RequestModel
from turnledger.infra.wire.parts import (
    MAX_PARTS,
    AssistantTextPart,
    AttachmentPart,
    ReasoningPart,
    RefusalPart,
    ToolCallPart,
    ToolResultPart,
    TurnPart,
    parts_out,
)
from turnledger.infra.wire.sync import (
    SYNC_LIMIT_MAX,
    ChangeOut,
    ConversationStartedOut,
    HistoryDeletedOut,
    OtherChangeOut,
    SyncOut,
    TurnRecordedOut,
)
from turnledger.infra.wire.turn import PartsOut, TurnStatusName, TurnTextOut, Unreadable
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.results import MAX_HISTORY_PAGE
from turnledger.projections.tokens import TokenizerName

# The turn's parts (parts.py) and the sync answer (sync.py) are imported from
# here too, with the rest of the API's bodies.
__all__ = [
    "MAX_PARTS",
    "SYNC_LIMIT_MAX",
    "AssistantTextPart",
    "AttachmentPart",
    "ChangeOut",
    "ConversationStartedOut",
    "HistoryDeletedOut",
    "Identifier",
    "OtherChangeOut",
    "ReasoningPart",
    "RefusalPart",
    "RequestModel",
    "SyncOut",
    "ToolCallPart",
    "ToolResultPart",
    "TurnPart",
    "TurnRecordedOut",
    "parts_out",
]

# Errors -------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    location: list[str | int]
    message: str
    type: str


class ErrorBody(BaseModel):
    code: str = Field(
        description="stable machine-readable code, e.g. 'version_conflict'"
    )
    message: str
    field: str | None = None
    current_version: int | None = Field(
        default=None, description="on version_conflict: the conversation's version now"
    )
    details: list[ErrorDetail] | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


# Devices ------------------------------------------------------------------------


class DeviceIn(RequestModel):
    name: str = Field(min_length=1, max_length=100)


class DeviceOut(BaseModel):
    device_id: str
    name: str
    created_at: datetime
    revoked_at: datetime | None
    added_by: str | None = Field(
        description="the device that added this one; revoking it revokes this too"
    )


class DeviceIssuedOut(BaseModel):
    device: DeviceOut
    token: str = Field(
        description="the bearer token; shown this once, stored only hashed"
    )


class DeviceListOut(BaseModel):
    devices: list[DeviceOut]


# Conversations ------------------------------------------------------------------


class ConversationIn(RequestModel):
    client_key: Identifier | None = Field(
        default=None,
        description="makes creation idempotent: the same key (for the same user) "
        "always names the same conversation, so a retried request creates nothing",
    )


class ConversationCreatedOut(BaseModel):
    conversation_id: UUID
    version: int


class ConversationSummaryOut(BaseModel):
    conversation_id: UUID
    started_at: datetime


class ConversationListOut(BaseModel):
    conversations: list[ConversationSummaryOut]


class ConversationOut(BaseModel):
    conversation_id: UUID
    version: int
    total_turns: int


class TurnWindowIn(RequestModel):
    """The window a confirmed turn's answer replied to, so that its receipt is
    kept with the turn (docs/web.md): what was sent to `POST .../window`
    (but the question, which is this turn's), the `ledger_version` its answer
    named, and the SHA-256 of the body sent to the model. The service projects
    that window again at that version and keeps its receipt only if the body
    matches (422 `invalid_input`, field `window`, otherwise); the digest is
    compared, never stored."""

    system: str = ""
    model: str
    max_bytes: int | None = Field(
        default=None, ge=1, le=2**53, description="as sent to POST .../window"
    )
    policy: WindowPolicy | None = Field(
        default=None, description="as sent to POST .../window"
    )
    tokenizer: TokenizerName | None = Field(
        default=None, description="as sent to POST .../window"
    )
    ledger_version: int = Field(
        ge=1, le=2**53, description="the window answer's ledger_version"
    )
    body_sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="hex SHA-256 of the UTF-8 bytes of the body that was sent",
    )


class TurnIn(RequestModel):
    question: str
    answer: str = Field(
        default="", description="required for 'confirmed'; the partial reply otherwise"
    )
    status: TurnStatusName = "confirmed"
    parts: list[TurnPart] | None = Field(
        default=None,
        max_length=MAX_PARTS,
        description="attachments, then the assistant's steps in order (text, "
        "tool calls, tool results, refusals); a failed or stopped turn may end "
        "with calls that have no result",
    )
    expected_version: int | None = Field(
        default=None,
        ge=1,
        description="the version this device last saw; a stale one gets 409",
    )
    window: TurnWindowIn | None = Field(
        default=None,
        description="the window this confirmed turn's answer replied to: its "
        "receipt is kept with the turn (GET .../turns/{turn_id}/receipt)",
    )

    @model_validator(mode="before")
    @classmethod
    def _confirmed_turns_send_their_answer(cls, data: Any) -> Any:
        # A missing answer is not an empty one: say which it is.
        if (
            isinstance(data, dict)
            and data.get("status", "confirmed") == "confirmed"
            and "answer" not in data
        ):
            raise ValueError("answer is missing: a confirmed turn needs its answer")
        return data

    def turn_parts(self) -> TurnParts | None:
        """The parts as the ledger takes them (InvalidInputError if malformed)."""
        if self.parts is None:
            return None
        turn = TurnParts.from_documents(
            question=self.question,
            answer=self.answer,
            parts=[part.model_dump(exclude_none=True) for part in self.parts],
        )
        if self.status == "confirmed":
            turn.check_complete_parts()  # errors name parts[i], as sent
        return turn


class TurnReceiptOut(BaseModel):
    conversation_id: UUID
    turn_id: str
    status: TurnStatusName
    version: int
    recorded_at: datetime


class HistoryItemOut(BaseModel):
    position: int
    turn_id: str
    status: TurnStatusName
    recorded_at: datetime
    deleted: bool
    deleted_at: datetime | None
    question: TurnTextOut
    answer: TurnTextOut
    unreadable: Unreadable = None
    parts: PartsOut = None


class HistoryPageOut(BaseModel):
    conversation_id: UUID
    version: int
    total_turns: int
    items: list[HistoryItemOut]
    next_offset: int | None


class DeletionIn(RequestModel):
    turn_ids: list[Identifier] | None = Field(
        default=None, max_length=MAX_HISTORY_PAGE * 20
    )
    whole_history: bool = False
    expected_version: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        if self.turn_ids is not None and self.whole_history:
            raise ValueError("give either turn_ids or whole_history=true, not both")
        if self.turn_ids is None and not self.whole_history:
            raise ValueError(
                "say what to delete: turn_ids, or whole_history=true for every turn"
            )
        return self


class DeletionOut(BaseModel):
    conversation_id: UUID
    deleted_turn_ids: list[str]
    version: int


class WindowIn(RequestModel):
    """What the window is built from, and under which policy."""

    question: str
    system: str = ""
    model: str
    max_bytes: int | None = Field(
        default=None,
        ge=1,
        le=2**53,
        description="hard limit on the body's UTF-8 bytes; overrides the policy's. "
        "Given alone (no policy): only this limit applies",
    )
    policy: WindowPolicy | None = Field(
        default=None,
        description="every option of the window policy, integers strictly (no "
        'true, "4096" or 4096.0); with neither policy nor max_bytes, the '
        "service's configured policy (TURNLEDGER_WINDOW_*) applies",
    )
    tokenizer: TokenizerName | None = Field(
        default=None,
        description="token counter for the soft budgets; default "
        "TURNLEDGER_WINDOW_TOKENIZER",
    )


class WindowOut(BaseModel):
    conversation_id: UUID
    ledger_version: int
    body: str = Field(description="the request body; its UTF-8 bytes are what to send")
    byte_length: int
    max_bytes: int
    wire_format: str
    token_counter: str
    estimated_tokens: int
    history_tokens: int
    kept_turn_ids: list[str]
    dropped_turn_ids: list[str]
    omitted: bool
    fold_id: str | None
    fold_sent: bool
    fold_due: bool
    report: dict[str, Any] = Field(
        description="what was kept, dropped or trimmed and why; never message text"
    )


# Stored window receipts -----------------------------------------------------------


class WindowReceiptOut(BaseModel):
    """A window receipt as stored with its turn (projections/receipt.py): the
    policy, the ledger version and the turns of the window the answer replied
    to, and a MAC of its body. Never any message text."""

    receipt_format: int = Field(description="1: body_bytes + body_sha256; 2: body_mac")
    policy: dict[str, Any] = Field(
        description="the complete policy document, so the window can be re-derived"
    )
    ledger_version: int
    turn_ids: list[str] = Field(description="the turns the window sent, oldest first")
    fold_id: str | None
    body_mac: str | None = Field(
        default=None,
        description="format 2: HMAC-SHA256 of the body under a key derived from "
        "the keys of every turn in it; null when one was deleted before the answer "
        "was recorded",
    )
    body_bytes: int | None = Field(default=None, description="format 1 only")
    body_sha256: str | None = Field(default=None, description="format 1 only")


class StoredReceiptOut(BaseModel):
    conversation_id: UUID
    turn_id: str
    version: int = Field(description="the version of the event that recorded the turn")
    deleted: bool = Field(
        description="true: the turn was deleted since; the receipt stays, but "
        "its body can no longer be checked"
    )
    receipt: WindowReceiptOut
