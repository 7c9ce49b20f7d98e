"""HTTP error bodies turned back into the exceptions the library raises.

The service answers every ledger error with `{"error": {"code", "message",
...}}` (infra/http/errors.py). Each code names one class of the library's
tree (domain/errors.py), and here it becomes that class again, built by its
own constructor with the identifiers the request named (conversation, turn,
fold, device) and what the body carries (`field`, `current_version`). So
`except VersionConflictError` catches the same failure whether the ledger was
called in process or over HTTP.

Codes the library has no class for (an unknown route, a request head over the
limit, an internal error) become `ServiceError`, a `TurnLedgerError` too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from turnledger.domain.errors import (
    ConversationNotFoundError,
    CursorExpiredError,
    DatabaseUnavailableError,
    DeviceNotFoundError,
    FoldConflictError,
    InvalidInputError,
    LongPollLimitError,
    MandatoryInputOverContextError,
    MandatoryInputTooLargeError,
    PurgeIncompleteError,
    ReadSideMismatchError,
    SealMismatchError,
    TextUnavailableError,
    TokenizerUnavailableError,
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

_NIL = UUID(int=0)


class ServiceError(TurnLedgerError):
    """An HTTP error the library has no class for (500, an unknown route, a
    request head refused by the server, a code this client does not know)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        super().__init__(f"HTTP {status} {code}: {message}")


@dataclass(frozen=True, slots=True)
class Context:
    """What the request named, to rebuild an error's attributes from."""

    conversation_id: UUID | None = None
    turn_id: str | None = None
    fold_id: str | None = None
    device_id: str | None = None
    expected_version: int | None = None
    turn_ids: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class ErrorBody:
    status: int
    code: str
    message: str
    field: str | None = None
    current_version: int | None = None


def parse_error_body(status: int, payload: Any) -> ErrorBody:
    """The error in a response body; a body that is not one is reported as is."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        return ErrorBody(status, "http_error", f"unexpected body: {payload!r:.200}")
    current = error.get("current_version")
    name = error.get("field")
    return ErrorBody(
        status=status,
        code=error["code"],
        message=str(error.get("message", "")),
        field=name if isinstance(name, str) else None,
        current_version=current if isinstance(current, int) else None,
    )


def _after(prefix: str, message: str) -> str:
    return message[len(prefix) :] if message.startswith(prefix) else message


def _numbers(pattern: str, message: str) -> tuple[int, ...] | None:
    found = re.search(pattern, message)
    return tuple(int(n) for n in found.groups()) if found else None


def _conversation(context: Context) -> UUID:
    return context.conversation_id or _NIL


def _invalid_input(body: ErrorBody, context: Context) -> TurnLedgerError:
    name = body.field or "request"
    return InvalidInputError(name, _after(f"invalid {name}: ", body.message))


def _turn_too_large(body: ErrorBody, context: Context) -> TurnLedgerError:
    sizes = _numbers(
        r"is (\d+) UTF-8 bytes, over the per-turn limit of (\d+)", body.message
    )
    if sizes is None:
        return InvalidInputError("turn", body.message)
    return TurnTooLargeError(*sizes)


def _turn_not_found(body: ErrorBody, context: Context) -> TurnLedgerError:
    _, found, named = body.message.partition(" has no turn(s) ")
    turn_ids = named.split(", ") if found else list(context.turn_ids)
    return TurnNotFoundError(_conversation(context), turn_ids)


def _turn_conflict(body: ErrorBody, context: Context) -> TurnLedgerError:
    reason = body.message.split(": ", 1)[-1]
    return TurnConflictError(_conversation(context), context.turn_id or "", reason)


def _text_unavailable(body: ErrorBody, context: Context) -> TurnLedgerError:
    found = re.search(r"text of turn (\S+) in conversation", body.message)
    turn_id = found.group(1) if found else context.turn_id or ""
    return TextUnavailableError(_conversation(context), turn_id)


def _turn_key_damaged(body: ErrorBody, context: Context) -> TurnLedgerError:
    found = re.search(r"key of turn\(s\) (.+?) in conversation", body.message)
    turn_ids = found.group(1).split(", ") if found else [context.turn_id or ""]
    return TurnKeyDamagedError(_conversation(context), tuple(turn_ids))


def _seal_mismatch(body: ErrorBody, context: Context) -> TurnLedgerError:
    found = re.search(
        r"the sealed (\S+) of turn (\S+) in conversation \S+ does not open here: "
        r"(.*); nothing of it is served",
        body.message,
    )
    if found is None:
        return ServiceError(body.status, body.code, body.message)
    field_name, turn_id, reason = found.groups()
    return SealMismatchError(_conversation(context), turn_id, field_name, reason)


def _fold_conflict(body: ErrorBody, context: Context) -> TurnLedgerError:
    found = re.match(r"fold (\S+) of conversation \S+: (.*)", body.message)
    fold_id, reason = found.groups() if found else (context.fold_id, body.message)
    return FoldConflictError(_conversation(context), fold_id or "", reason)


def _read_side_mismatch(body: ErrorBody, context: Context) -> TurnLedgerError:
    version = _numbers(r"names version (\d+)", body.message)
    return ReadSideMismatchError(_conversation(context), version[0] if version else 0)


def _window_error(body: ErrorBody, context: Context) -> TurnLedgerError:
    too_large = _numbers(r"serialize to (\d+) bytes, over the (\d+)-byte", body.message)
    if too_large is not None:
        return MandatoryInputTooLargeError(*too_large)
    over = re.search(
        r"are (\d+) tokens \((.+?)\); with (\d+) reserved .* model's (\d+)-token",
        body.message,
    )
    if over is not None:
        return MandatoryInputOverContextError(
            input_tokens=int(over.group(1)),
            token_counter=over.group(2),
            reserved_output_tokens=int(over.group(3)),
            context_tokens=int(over.group(4)),
        )
    return WindowError(body.message)


def _long_polls(body: ErrorBody, context: Context) -> TurnLedgerError:
    found = re.search(
        r"this (\w+) already has (\d+) long-polls waiting \((\w+)\)", body.message
    )
    if found is None:
        return ServiceError(body.status, body.code, body.message)
    return LongPollLimitError(found.group(1), int(found.group(2)), found.group(3))


_BUILDERS: dict[str, Callable[[ErrorBody, Context], Exception]] = {
    "turn_too_large": _turn_too_large,
    "invalid_input": _invalid_input,
    "cursor_expired": lambda body, _: CursorExpiredError(),
    "invalid_request": _invalid_input,
    "malformed_json": lambda body, _: InvalidInputError("body", body.message),
    "body_too_large": lambda body, _: InvalidInputError("body", body.message),
    "unauthenticated": lambda body, _: UnauthenticatedError(
        _after("not authenticated: ", body.message)
    ),
    "conversation_not_found": lambda body, context: ConversationNotFoundError(
        _conversation(context)
    ),
    "turn_not_found": _turn_not_found,
    "device_not_found": lambda body, context: DeviceNotFoundError(
        context.device_id or ""
    ),
    "turn_deleted": lambda body, context: TurnDeletedError(
        _conversation(context), context.turn_id or ""
    ),
    "turn_conflict": _turn_conflict,
    "version_conflict": lambda body, context: VersionConflictError(
        _conversation(context),
        context.expected_version or 0,
        body.current_version or 0,
    ),
    "turn_key_damaged": _turn_key_damaged,
    "seal_mismatch": _seal_mismatch,
    "text_unavailable": _text_unavailable,
    "purge_incomplete": lambda body, context: PurgeIncompleteError(
        _conversation(context)
    ),
    "read_side_mismatch": _read_side_mismatch,
    "fold_conflict": _fold_conflict,
    "window_error": _window_error,
    "too_many_long_polls": _long_polls,
    "database_unavailable": lambda body, _: DatabaseUnavailableError(body.message),
    "tokenizer_unavailable": lambda body, _: TokenizerUnavailableError(body.message),
}

ERROR_CODES = frozenset(_BUILDERS)
"""Every code mapped to a class of the library."""


def error_from_body(body: ErrorBody, context: Context) -> Exception:
    """The library's exception for an error body (ServiceError if it has none)."""
    build = _BUILDERS.get(body.code)
    if build is None:
        return ServiceError(body.status, body.code, body.message)
    return build(body, context)
