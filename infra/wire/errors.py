"""The error codes of the HTTP API: which library error leaves as which status
and code. The service renders them (infra/http/errors.py); the client turns
each code back into its class (infra/client/errors.py)."""

from __future__ import annotations

from turnledger.domain.errors import (
    ConversationNotFoundError,
    CursorExpiredError,
    DeviceNotFoundError,
    FoldConflictError,
    InvalidInputError,
    LongPollLimitError,
    PurgeIncompleteError,
    ReadSideMismatchError,
    SealMismatchError,
    TextUnavailableError,
    TurnConflictError,
    TurnDeletedError,
    TurnKeyDamagedError,
    TurnLedgerError,
    TurnNotFoundError,
    TurnTooLargeError,
    UnauthenticatedError,
    VersionConflictError,
    WindowError,
)

# Most specific first: the first matching class decides.
ERROR_STATUS: list[tuple[type[TurnLedgerError], int, str]] = [
    (TurnTooLargeError, 413, "turn_too_large"),
    (CursorExpiredError, 422, "cursor_expired"),
    (InvalidInputError, 422, "invalid_input"),
    (UnauthenticatedError, 401, "unauthenticated"),
    (ConversationNotFoundError, 404, "conversation_not_found"),
    (TurnNotFoundError, 404, "turn_not_found"),
    (DeviceNotFoundError, 404, "device_not_found"),
    (TurnDeletedError, 409, "turn_deleted"),
    (TurnConflictError, 409, "turn_conflict"),
    (VersionConflictError, 409, "version_conflict"),
    (TurnKeyDamagedError, 410, "turn_key_damaged"),
    (SealMismatchError, 410, "seal_mismatch"),
    (TextUnavailableError, 410, "text_unavailable"),
    (PurgeIncompleteError, 503, "purge_incomplete"),
    (ReadSideMismatchError, 503, "read_side_mismatch"),
    (FoldConflictError, 409, "fold_conflict"),
    (WindowError, 422, "window_error"),
    (LongPollLimitError, 429, "too_many_long_polls"),
]
