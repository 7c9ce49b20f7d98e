"""Every error the service renders comes back to the client as the same class.

The bodies are made by the service's own renderer (infra/http/errors.py), so
a change to a code or a message there fails here. Errors a test can provoke
on a real server are checked there too (tests/e2e/test_client.py).
"""

from __future__ import annotations

import json
from uuid import uuid4

import pytest

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
from turnledger.infra.client.errors import (
    Context,
    ServiceError,
    error_from_body,
    parse_error_body,
)
from turnledger.infra.http.database import unavailable_response
from turnledger.infra.http.errors import error_response, ledger_error_response

CONVERSATION = uuid4()

# Each error as the ledger raises it, and what the request named.
CASES: list[tuple[TurnLedgerError, Context]] = [
    (TurnTooLargeError(70_000, 65_536), Context()),
    (InvalidInputError("question", "must not be empty"), Context()),
    (UnauthenticatedError("this device token has been revoked"), Context()),
    (
        ConversationNotFoundError(CONVERSATION),
        Context(conversation_id=CONVERSATION),
    ),
    (
        TurnNotFoundError(CONVERSATION, ["t1", "t9"]),
        Context(conversation_id=CONVERSATION),
    ),
    (DeviceNotFoundError("d-1"), Context(device_id="d-1")),
    (
        TurnDeletedError(CONVERSATION, "t1"),
        Context(conversation_id=CONVERSATION, turn_id="t1"),
    ),
    (
        TurnConflictError(CONVERSATION, "t1", "is already recorded"),
        Context(conversation_id=CONVERSATION, turn_id="t1"),
    ),
    (
        VersionConflictError(CONVERSATION, 3, 7),
        Context(conversation_id=CONVERSATION, expected_version=3),
    ),
    (TextUnavailableError(CONVERSATION, "t4"), Context(conversation_id=CONVERSATION)),
    (PurgeIncompleteError(CONVERSATION), Context(conversation_id=CONVERSATION)),
    (ReadSideMismatchError(CONVERSATION, 12), Context(conversation_id=CONVERSATION)),
    (
        FoldConflictError(CONVERSATION, "f1", "is already recorded"),
        Context(conversation_id=CONVERSATION),
    ),
    (MandatoryInputTooLargeError(5_000, 4_000), Context()),
    (
        MandatoryInputOverContextError(
            input_tokens=900,
            reserved_output_tokens=200,
            context_tokens=1_000,
            token_counter="o200k_base",
        ),
        Context(),
    ),
    (WindowError("no window"), Context()),
    (CursorExpiredError(), Context()),
    (
        SealMismatchError(CONVERSATION, "t3", "answer", "it was altered"),
        Context(conversation_id=CONVERSATION),
    ),
    (
        TurnKeyDamagedError(CONVERSATION, ("t2", "t5")),
        Context(conversation_id=CONVERSATION),
    ),
    (
        LongPollLimitError("device", 4, "TURNLEDGER_HTTP_MAX_LONG_POLLS_PER_DEVICE"),
        Context(),
    ),
]


def _round_trip(status: int, body: bytes, context: Context) -> Exception:
    return error_from_body(parse_error_body(status, json.loads(body)), context)


@pytest.mark.parametrize(
    ("raised", "context"), CASES, ids=[type(e).__name__ for e, _ in CASES]
)
def test_each_ledger_error_comes_back_as_its_class_and_attributes(
    raised: TurnLedgerError, context: Context
) -> None:
    response = ledger_error_response(raised)
    rebuilt = _round_trip(response.status_code, response.body, context)
    assert type(rebuilt) is type(raised)
    assert str(rebuilt) == str(raised)
    assert vars(rebuilt) == vars(raised)


def test_every_code_the_ledger_renders_is_mapped() -> None:
    rendered = {
        json.loads(ledger_error_response(error).body)["error"]["code"]
        for error, _ in CASES
    }
    from turnledger.infra.wire.errors import ERROR_STATUS  # the table under test

    assert rendered == {code for _, _, code in ERROR_STATUS}


def test_an_outage_is_a_database_unavailable_error() -> None:
    response = unavailable_response(2)
    rebuilt = _round_trip(503, response.body, Context())
    assert isinstance(rebuilt, DatabaseUnavailableError)


@pytest.mark.parametrize(
    "code", ["malformed_json", "invalid_request", "body_too_large"]
)
def test_a_request_the_service_cannot_take_is_invalid_input(code: str) -> None:
    response = error_response(422, code, "the request body is not valid JSON")
    rebuilt = _round_trip(422, response.body, Context())
    assert type(rebuilt) is InvalidInputError


@pytest.mark.parametrize(
    ("status", "code"),
    [(500, "internal_error"), (404, "not_found"), (431, "headers_too_large")],
)
def test_codes_without_a_library_class_are_service_errors(
    status: int, code: str
) -> None:
    response = error_response(status, code, "whatever")
    rebuilt = _round_trip(status, response.body, Context())
    assert isinstance(rebuilt, ServiceError) and isinstance(rebuilt, TurnLedgerError)
    assert (rebuilt.status, rebuilt.code) == (status, code)


def test_a_body_that_is_not_an_error_document_is_a_service_error() -> None:
    rebuilt = error_from_body(
        parse_error_body(502, "<html>bad gateway</html>"), Context()
    )
    assert isinstance(rebuilt, ServiceError) and rebuilt.status == 502
