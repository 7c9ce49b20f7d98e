"""Every route of the HTTP API as a `Call`: what to send and how to read the answer.

No I/O here. `Client` and `AsyncClient` send the same `Call`s, each with its
own transport, so the two never differ in a path, a body or a parsed field.
Responses are parsed into the service's own response models
(infra/wire/schemas.py and the route modules), so a field the service renames
fails here at once instead of reaching the application as a missing key.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from uuid import UUID

import httpx
from pydantic import BaseModel

from turnledger.domain.parts import TurnParts
from turnledger.infra.client.errors import (
    Context,
    ServiceError,
    error_from_body,
    parse_error_body,
)
from turnledger.infra.wire.schemas import (
    ConversationCreatedOut,
    ConversationListOut,
    ConversationOut,
    DeletionOut,
    DeviceIssuedOut,
    DeviceListOut,
    DeviceOut,
    HistoryItemOut,
    HistoryPageOut,
    SyncOut,
    TurnReceiptOut,
    TurnRecordedOut,
    WindowOut,
)
from turnledger.infra.wire.status import (
    FoldOut,
    FoldStatusOut,
    HealthOut,
    PurgeStateOut,
    ReadyOut,
)
from turnledger.projections.policy import WindowPolicy

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

TurnStatusName = Literal["confirmed", "failed", "stopped"]

# A long-poll is answered within its timeout; the read deadline leaves room
# for the database round trips around the wait.
_LONG_POLL_SLACK_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and the reading of its response.

    `idempotent`: sending it again after an answer was lost cannot change the
    outcome (a turn id, a client key, a read), so it may be retried after a
    503 or a connection that broke mid-request. Any call is retried when the
    connection could not even be made: then nothing was sent.
    """

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    json: Any = None
    params: Mapping[str, Any] | None = None
    idempotent: bool = True
    context: Context = field(default_factory=Context)
    expected: tuple[int, ...] = (200,)
    read_timeout: float | None = None

    def result(self, response: httpx.Response) -> T:
        """The parsed answer, or the library's exception for an error body."""
        if response.status_code in self.expected:
            return self.read(response)
        try:
            payload = response.json()
        except ValueError:
            payload = response.text
        raise error_from_body(
            parse_error_body(response.status_code, payload), self.context
        )


def _model(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: model.model_validate_json(response.content)


def _body(**fields: Any) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not None}


def _conversation_path(conversation_id: UUID, *rest: str) -> str:
    return "/".join(["/v1/conversations", str(conversation_id), *rest])


def health() -> Call[HealthOut]:
    return Call("GET", "/v1/health", _model(HealthOut))


def ready() -> Call[ReadyOut]:
    # 503 is an answer here ("the database is down"), not a failure to retry.
    return Call("GET", "/v1/ready", _model(ReadyOut), expected=(200, 503))


def start_conversation(client_key: str | None) -> Call[ConversationCreatedOut]:
    # Always keyed, so that a retry names the same conversation instead of
    # starting a second one.
    key = client_key if client_key is not None else uuid.uuid4().hex
    return Call(
        "POST",
        "/v1/conversations",
        _model(ConversationCreatedOut),
        json={"client_key": key},
        expected=(201,),
    )


def list_conversations() -> Call[ConversationListOut]:
    return Call("GET", "/v1/conversations", _model(ConversationListOut))


def get_conversation(conversation_id: UUID) -> Call[ConversationOut]:
    return Call(
        "GET",
        _conversation_path(conversation_id),
        _model(ConversationOut),
        context=Context(conversation_id=conversation_id),
    )


def get_history(
    conversation_id: UUID, *, offset: int, limit: int
) -> Call[HistoryPageOut]:
    return Call(
        "GET",
        _conversation_path(conversation_id, "turns"),
        _model(HistoryPageOut),
        params={"offset": offset, "limit": limit},
        context=Context(conversation_id=conversation_id),
    )


def put_turn(
    conversation_id: UUID,
    turn_id: str,
    *,
    question: str | None,
    answer: str,
    parts: TurnParts | None,
    status: TurnStatusName,
    expected_version: int | None,
) -> Call[TurnReceiptOut]:
    """The turn id is the idempotency key: the same PUT again returns the
    first receipt and writes nothing. With `parts`, the question and answer
    are the parts' own."""
    if parts is not None:
        question, answer = parts.question, parts.answer
    return Call(
        "PUT",
        _conversation_path(conversation_id, "turns", turn_id),
        _model(TurnReceiptOut),
        json=_body(
            question=question,
            answer=answer,
            parts=parts.part_documents() if parts is not None else None,
            status=status,
            expected_version=expected_version,
        ),
        context=Context(
            conversation_id=conversation_id,
            turn_id=turn_id,
            expected_version=expected_version,
        ),
    )


def project_window(
    conversation_id: UUID,
    *,
    question: str,
    model: str,
    system: str,
    max_bytes: int | None,
    policy: WindowPolicy | None,
    tokenizer: str | None,
) -> Call[WindowOut]:
    return Call(
        "POST",
        _conversation_path(conversation_id, "window"),
        _model(WindowOut),
        json=_body(
            question=question,
            system=system,
            model=model,
            max_bytes=max_bytes,
            policy=policy.model_dump(mode="json") if policy is not None else None,
            tokenizer=tokenizer,
        ),
        context=Context(conversation_id=conversation_id),
    )


def delete_history(
    conversation_id: UUID,
    *,
    turn_ids: list[str] | None,
    expected_version: int | None,
) -> Call[DeletionOut]:
    """Deleting turns already deleted deletes nothing and succeeds, so a retry
    is safe, unless it names an expected version the first attempt moved on."""
    return Call(
        "POST",
        _conversation_path(conversation_id, "deletions"),
        _model(DeletionOut),
        json=_body(
            turn_ids=turn_ids,
            whole_history=True if turn_ids is None else None,
            expected_version=expected_version,
        ),
        idempotent=expected_version is None,
        context=Context(
            conversation_id=conversation_id,
            expected_version=expected_version,
            turn_ids=tuple(turn_ids or ()),
        ),
    )


def record_fold(
    conversation_id: UUID,
    *,
    covers_through_turn_id: str,
    summary: str,
    summarized_version: int,
    fold_id: str | None,
    expected_version: int | None,
) -> Call[FoldOut]:
    """Not retried after an ambiguous failure: a fold recorded by the first
    attempt makes the second a 409 fold_conflict (read `get_fold` then)."""
    return Call(
        "POST",
        _conversation_path(conversation_id, "folds"),
        _model(FoldOut),
        json=_body(
            covers_through_turn_id=covers_through_turn_id,
            summary=summary,
            summarized_version=summarized_version,
            fold_id=fold_id,
            expected_version=expected_version,
        ),
        idempotent=False,
        expected=(201,),
        context=Context(
            conversation_id=conversation_id,
            fold_id=fold_id,
            expected_version=expected_version,
        ),
    )


def get_fold(
    conversation_id: UUID, *, threshold_tokens: int | None
) -> Call[FoldStatusOut]:
    return Call(
        "GET",
        _conversation_path(conversation_id, "fold"),
        _model(FoldStatusOut),
        params=_body(threshold_tokens=threshold_tokens),
        context=Context(conversation_id=conversation_id),
    )


def _export_records(response: httpx.Response) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in response.text.splitlines() if line]
    if not records or records[-1].get("record") != "end":
        # The stream broke off: the `end` record is what says it is complete.
        raise ServiceError(
            response.status_code, "export_incomplete", "the export has no end record"
        )
    return records


def export() -> Call[list[dict[str, Any]]]:
    """Every record of `GET /v1/export` (docs/export.md), `end` included."""
    return Call("GET", "/v1/export", _export_records)


def sync(*, since: str | None, timeout: float, limit: int) -> Call[SyncOut]:
    return Call(
        "GET",
        "/v1/sync",
        _model(SyncOut),
        params=_body(since=since, timeout=timeout, limit=limit),
        read_timeout=timeout + _LONG_POLL_SLACK_SECONDS,
    )


def list_devices() -> Call[DeviceListOut]:
    return Call("GET", "/v1/devices", _model(DeviceListOut))


def add_device(name: str) -> Call[DeviceIssuedOut]:
    # Not idempotent: a retry after a lost answer would mint a second token.
    return Call(
        "POST",
        "/v1/devices",
        _model(DeviceIssuedOut),
        json={"name": name},
        idempotent=False,
        expected=(201,),
    )


def revoke_device(device_id: str) -> Call[DeviceOut]:
    return Call(
        "DELETE",
        f"/v1/devices/{device_id}",
        _model(DeviceOut),
        context=Context(device_id=device_id),
    )


def purge_status() -> Call[PurgeStateOut]:
    return Call("GET", "/v1/purge", _model(PurgeStateOut))


def parts_of(item: HistoryItemOut | TurnRecordedOut) -> TurnParts | None:
    """The whole turn of a history item or a sync change (None once deleted),
    as the library's own `TurnParts`."""
    if item.question is None or item.answer is None:
        return None
    return TurnParts.from_documents(
        question=item.question,
        answer=item.answer,
        parts=[part.model_dump(exclude_none=True) for part in item.parts or []],
    )
