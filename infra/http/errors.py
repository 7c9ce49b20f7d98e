"""Every error leaves the service as JSON: `{"error": {"code", "message", ...}}`.

Ledger errors map to 4xx statuses here, at the edge, and nowhere else. Error
bodies never echo the input (it may be conversation text, or an unpaired
surrogate that cannot even be encoded) and are rendered ASCII-only so that
whatever a message contains, the response itself can always be sent.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from turnledger.domain.errors import (
    TokenizerUnavailableError,
    TurnLedgerError,
)
from turnledger.infra.wire.errors import ERROR_STATUS
from turnledger.infra.wire.schemas import ErrorResponse

logger = logging.getLogger(__name__)


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in [
        (400, "a body the JSON parser gives up on (not UTF-8, nesting, huge numbers)"),
        (401, "missing, unknown or revoked device token"),
        (404, "no such conversation, turn or device for this user"),
        (409, "turn id reused, turn deleted, or a stale expected_version"),
        (
            410,
            "a turn's text whose key was destroyed meanwhile, whose stored key "
            "is damaged, or whose seal does not open for this owner",
        ),
        (413, "request body or turn over the size limit"),
        (422, "malformed JSON, wrong types, invalid values, NUL in a text"),
        (429, "too many long-polls of this device or user are waiting"),
        (
            503,
            "the database is unavailable (Retry-After), or a deletion's purge "
            "must be re-run: send the same request again",
        ),
    ]
}


class ErrorJSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode()


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> ErrorJSONResponse:
    body: dict[str, Any] = {"code": code, "message": message}
    body.update({key: value for key, value in extra.items() if value is not None})
    return ErrorJSONResponse({"error": body}, status_code=status, headers=headers)


def ledger_error_response(error: TurnLedgerError) -> ErrorJSONResponse:
    status, code = next(
        (
            (status, code)
            for kind, status, code in ERROR_STATUS
            if isinstance(error, kind)
        ),
        (400, "bad_request"),
    )
    headers: dict[str, str] | None = {
        401: {"WWW-Authenticate": "Bearer"},
        429: {"Retry-After": "1"},
    }.get(status)
    return error_response(
        status,
        code,
        str(error),
        headers=headers,
        field=getattr(error, "field", None),
        current_version=getattr(error, "current_version", None),
    )


def _unparsable_body(cause: BaseException | None) -> str:
    """Why the JSON parser gave up on a body, without quoting it."""
    if isinstance(cause, UnicodeDecodeError):
        return (
            "the request body is not UTF-8 (JSON must be): invalid byte at "
            f"offset {cause.start}"
        )
    if isinstance(cause, RecursionError):
        return "the request body could not be parsed as JSON: nested too deeply"
    if isinstance(cause, ValueError) and "digits" in str(cause):
        return "the request body could not be parsed as JSON: a number too long"
    return "the request body could not be parsed as JSON"


def install_error_handlers(app: FastAPI) -> None:
    async def on_ledger_error(_: Request, error: Exception) -> Response:
        assert isinstance(error, TurnLedgerError)
        return ledger_error_response(error)

    async def on_validation_error(_: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        details = [
            {
                "location": [
                    str(part) if not isinstance(part, int) else part
                    for part in item.get("loc", ())
                ],
                "message": str(item.get("msg", "")),
                "type": str(item.get("type", "")),
            }
            for item in error.errors()
        ]
        json_error = any(detail["type"] == "json_invalid" for detail in details)
        return error_response(
            422,
            "malformed_json" if json_error else "invalid_request",
            "the request body is not valid JSON"
            if json_error
            else "the request does not match the API schema: see details",
            details=details,
        )

    async def on_http_error(_: Request, error: Exception) -> Response:
        assert isinstance(error, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(
            error.status_code, "http_error"
        )
        message = str(error.detail)
        if error.status_code == 400:
            # FastAPI's own answer when json.loads fails on something it did not
            # classify; the parser's exception says which it was.
            code = "malformed_json"
            message = _unparsable_body(error.__cause__)
        return error_response(error.status_code, code, message, headers=error.headers)

    async def on_tokenizer_unavailable(_: Request, error: Exception) -> Response:
        return error_response(503, "tokenizer_unavailable", str(error))

    async def on_unexpected(_: Request, error: Exception) -> Response:
        logger.exception("unexpected error", exc_info=error)
        return error_response(500, "internal_error", "internal error")

    app.add_exception_handler(TurnLedgerError, on_ledger_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(TokenizerUnavailableError, on_tokenizer_unavailable)
    app.add_exception_handler(Exception, on_unexpected)
