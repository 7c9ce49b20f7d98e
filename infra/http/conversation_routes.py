"""Conversations: create, list, read history, confirm turns, windows, deletions.

Route functions are plain `def`: FastAPI runs them in its thread pool, so the
ledger's blocking database calls never stall the event loop. A device only
ever names conversations of its own user; any other id is answered exactly
like one that does not exist.
"""

from __future__ import annotations

from typing import Annotated
from uuid import UUID, uuid5

from fastapi import APIRouter, Depends, Path, Query, Response, status

from turnledger.infra.devices import Device
from turnledger.infra.http import turn_route
from turnledger.infra.http.errors import ERROR_RESPONSES
from turnledger.infra.http.service import (
    ClientPosition,
    Service,
    bearer_token,
    current_device,
    get_service,
)
from turnledger.infra.service_layer.application import MAX_HISTORY_PAGE
from turnledger.infra.wire.schemas import (
    ConversationCreatedOut,
    ConversationIn,
    ConversationListOut,
    ConversationOut,
    ConversationSummaryOut,
    DeletionIn,
    DeletionOut,
    HistoryItemOut,
    HistoryPageOut,
    TurnIn,
    TurnReceiptOut,
    WindowIn,
    WindowOut,
    parts_out,
)

router = APIRouter(
    prefix="/v1/conversations", tags=["conversations"], responses=ERROR_RESPONSES
)

# Namespace of conversation ids derived from (user, client key).
_CLIENT_KEYS = UUID("6f1f3c52-9a53-4d0c-8a43-2b8f3f6c1e27")

ConversationId = Annotated[UUID, Path(description="the conversation's id")]
TurnId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$",
        description="the client's id for this turn: the idempotency key",
    ),
]
CurrentDevice = Annotated[Device, Depends(current_device)]
CurrentService = Annotated[Service, Depends(get_service)]
BearerToken = Annotated[str | None, Depends(bearer_token)]


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=ConversationCreatedOut
)
def start_conversation(
    device: CurrentDevice,
    service: CurrentService,
    response: Response,
    request: ConversationIn | None = None,
) -> ConversationCreatedOut:
    """Start a conversation. With a `client_key`, the same request sent again
    returns the same conversation and creates nothing."""
    chosen = None
    if request is not None and request.client_key is not None:
        # Scoped by user, so one user's key can never name another's conversation.
        chosen = uuid5(_CLIENT_KEYS, f"{device.user_id}/{request.client_key}")
    conversation_id = service.ledger.start_conversation(
        device.user_id, conversation_id=chosen
    )
    service.hand_back(response, device, service.reads.primary_position())
    service.signals.fire([device.user_id])
    version = 1
    if chosen is not None:
        # A retried keyed start finds the conversation as it is now, perhaps
        # with turns on it: report that version, the one to build on.
        version = service.ledger.get_conversation(device.user_id, chosen).version
    return ConversationCreatedOut(conversation_id=conversation_id, version=version)


@router.get("", response_model=ConversationListOut)
def list_conversations(
    device: CurrentDevice,
    service: CurrentService,
    response: Response,
    position: ClientPosition = None,
) -> ConversationListOut:
    summaries, at = service.reads.read(
        service.required_position(device, position),
        lambda source: source.feed.list_conversations(device.user_id),
    )
    service.hand_back(response, device, at)
    return ConversationListOut(
        conversations=[
            ConversationSummaryOut(
                conversation_id=summary.conversation_id, started_at=summary.started_at
            )
            for summary in summaries
        ]
    )


@router.get("/{conversation_id}", response_model=ConversationOut)
def get_conversation(
    conversation_id: ConversationId,
    device: CurrentDevice,
    service: CurrentService,
    response: Response,
    position: ClientPosition = None,
) -> ConversationOut:
    conversation, at = service.reads.read(
        service.required_position(device, position),
        lambda source: source.ledger.get_conversation(device.user_id, conversation_id),
    )
    service.hand_back(response, device, at)
    return ConversationOut(
        conversation_id=conversation.id,
        version=conversation.version,
        total_turns=conversation.turn_count,
    )


@router.get("/{conversation_id}/turns", response_model=HistoryPageOut)
def get_history(
    conversation_id: ConversationId,
    device: CurrentDevice,
    service: CurrentService,
    response: Response,
    offset: Annotated[int, Query(ge=0, le=2**53)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_HISTORY_PAGE)] = 50,
    position: ClientPosition = None,
) -> HistoryPageOut:
    page, at = service.reads.read(
        service.required_position(device, position),
        lambda source: source.ledger.get_history(
            device.user_id, conversation_id, offset=offset, limit=limit
        ),
    )
    service.hand_back(response, device, at)
    return HistoryPageOut(
        conversation_id=page.conversation_id,
        version=page.version,
        total_turns=page.total_turns,
        items=[
            HistoryItemOut(
                position=item.position,
                turn_id=item.turn_id,
                status=item.status.value,
                recorded_at=item.recorded_at,
                deleted=item.deleted,
                deleted_at=item.deleted_at,
                question=item.question,
                answer=item.answer,
                parts=parts_out(item.parts),
                unreadable=item.unreadable,  # type: ignore[arg-type]
            )
            for item in page.items
        ],
        next_offset=page.next_offset,
    )


@router.put("/{conversation_id}/turns/{turn_id}", response_model=TurnReceiptOut)
async def record_turn(
    conversation_id: ConversationId,
    turn_id: TurnId,
    turn: TurnIn,
    token: BearerToken,
    service: CurrentService,
    response: Response,
) -> TurnReceiptOut:
    """Record a turn. Sending the same request again returns the same receipt
    and writes nothing; the same turn id with other content is a 409.

    Well-formed requests are taken before routing by the short path
    (`turn_route.TurnWritePath`); both call `turn_route.record_turn`."""
    receipt, headers = await turn_route.record_turn(
        service, token, conversation_id, turn_id, turn
    )
    response.headers.update(headers)
    return receipt


@router.post("/{conversation_id}/window", response_model=WindowOut)
def project_window(
    conversation_id: ConversationId,
    request: WindowIn,
    device: CurrentDevice,
    service: CurrentService,
    response: Response,
    position: ClientPosition = None,
) -> WindowOut:
    """The request body for `question`, built from the newest turns that fit.
    Reads only."""
    policy = request.policy
    if policy is None and request.max_bytes is None:
        policy = service.settings.window_policy()
    counter = service.token_counter(
        request.tokenizer or service.settings.window_tokenizer
    )
    projected, at = service.reads.read(
        service.required_position(device, position),
        lambda source: source.ledger.project_window(
            device.user_id,
            conversation_id,
            question=request.question,
            system=request.system,
            model=request.model,
            max_bytes=request.max_bytes,
            policy=policy,
            token_counter=counter,
        ),
    )
    service.hand_back(response, device, at)
    window = projected.window
    return WindowOut(
        conversation_id=projected.conversation_id,
        ledger_version=projected.ledger_version,
        body=window.body.decode("utf-8"),
        byte_length=window.byte_length,
        max_bytes=window.max_bytes,
        wire_format=window.wire_format,
        token_counter=window.token_counter,
        estimated_tokens=window.estimated_tokens,
        history_tokens=window.history_tokens,
        kept_turn_ids=list(window.kept_turn_ids),
        dropped_turn_ids=list(window.dropped_turn_ids),
        omitted=window.omitted,
        fold_id=window.fold_id,
        fold_sent=window.fold_sent,
        fold_due=window.fold_due,
        report=window.report(),
    )


@router.post("/{conversation_id}/deletions", response_model=DeletionOut)
def delete_history(
    conversation_id: ConversationId,
    request: DeletionIn,
    device: CurrentDevice,
    service: CurrentService,
    response: Response,
) -> DeletionOut:
    """Delete chosen turns (`turn_ids`) or all of them (`whole_history`).
    Every device then pulls a `history_deleted` change naming the turns."""
    receipt = service.ledger.delete_history(
        device.user_id,
        conversation_id,
        turn_ids=request.turn_ids,
        deleted_by=device.device_id,
        expected_version=request.expected_version,
    )
    service.hand_back(response, device, service.reads.primary_position())
    service.signals.fire([device.user_id])
    return DeletionOut(
        conversation_id=receipt.conversation_id,
        deleted_turn_ids=list(receipt.deleted_turn_ids),
        version=receipt.version,
    )
