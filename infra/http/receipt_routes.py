"""A turn's stored window receipt, as the ledger keeps it (docs/web.md).

A turn confirmed with the window it replied to (`confirm_turn(...,
window=...)`) keeps that window's receipt in its event: the policy, the
ledger version, the turns sent and a MAC of the body, never any text. This
route hands it to the turn's owner, so a page can show what was stored rather
than what it works out itself.

Answers, besides the usual 401 and 422:
- 404 `conversation_not_found`: no such conversation *for this user*;
  another user's conversation is answered exactly like a missing one, so a
  device can not confirm a guessed id;
- 404 `turn_not_found`: the conversation holds no such turn;
- 404 `receipt_not_found`: the turn was recorded without a window (a PUT
  without `window`, or an abandoned turn), so no receipt was stored.

A PUT of a turn keeps a receipt when it names its window (`TurnIn.window`):
`requested_window` reads that part of the request as `POST .../window` reads
its own, and the ledger projects the window again before keeping its receipt
(infra/service_layer/window_requests.py).
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Response

from turnledger.domain.errors import TurnNotFoundError
from turnledger.infra.devices import Device
from turnledger.infra.http.errors import ERROR_RESPONSES, error_response
from turnledger.infra.http.service import (
    ClientPosition,
    Service,
    current_device,
    get_service,
)
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.window_requests import WindowRequest
from turnledger.infra.wire.schemas import (
    StoredReceiptOut,
    TurnWindowIn,
    WindowReceiptOut,
)
from turnledger.projections.receipt import WindowReceipt

router = APIRouter(prefix="/v1/conversations", tags=["conversations"])

RECEIPT_NOT_FOUND = "receipt_not_found"

CurrentDevice = Annotated[Device, Depends(current_device)]
CurrentService = Annotated[Service, Depends(get_service)]
TurnId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$",
        description="the client's id for the turn",
    ),
]


def requested_window(
    service: Service, window: TurnWindowIn | None
) -> WindowRequest | None:
    """A turn write's `window` as the ledger takes it: the policy and token
    counter resolved exactly as `POST .../window` resolves its request's
    (conversation_routes.project_window), so the same request names the same
    window. Loads the token counter: call off the event loop."""
    if window is None:
        return None
    policy = window.policy
    if policy is None and window.max_bytes is None:
        policy = service.settings.window_policy()
    return WindowRequest(
        system=window.system,
        model=window.model,
        policy=policy,
        max_bytes=window.max_bytes,
        token_counter=service.token_counter(
            window.tokenizer or service.settings.window_tokenizer
        ),
        ledger_version=window.ledger_version,
        body_sha256=window.body_sha256,
    )


def stored_receipt(
    ledger: Conversations, owner_id: str, conversation_id: UUID, turn_id: str
) -> StoredReceiptOut | None:
    """The receipt stored with the owner's turn; None when it has none.

    Raises ConversationNotFoundError for another owner's conversation and
    TurnNotFoundError for a turn the conversation does not hold (yet).
    """
    head = ledger.get_conversation(owner_id, conversation_id)
    rows = ledger.queries.read_side.turns_by_id(conversation_id, [turn_id])
    row = rows.get(turn_id)
    if row is None or row.version > head.version:
        raise TurnNotFoundError(conversation_id, [turn_id])
    document = next(
        (
            getattr(event, "window_receipt", None)
            for event in ledger.events.get(
                conversation_id, gt=row.version - 1, lte=row.version
            )
            if getattr(event, "turn_id", None) == turn_id
        ),
        None,
    )
    if document is None:
        return None
    receipt = WindowReceipt.from_document(document)
    return StoredReceiptOut(
        conversation_id=conversation_id,
        turn_id=turn_id,
        version=row.version,
        deleted=row.deleted,
        receipt=WindowReceiptOut.model_validate(receipt.to_document()),
    )


@router.get(
    "/{conversation_id}/turns/{turn_id}/receipt",
    response_model=StoredReceiptOut,
    responses={
        **ERROR_RESPONSES,
        404: {
            **ERROR_RESPONSES[404],
            "description": "conversation_not_found (also for another user's "
            "conversation), turn_not_found, or receipt_not_found: the turn was "
            "recorded without a window",
        },
    },
)
def get_stored_receipt(
    conversation_id: Annotated[UUID, Path(description="the conversation's id")],
    turn_id: TurnId,
    device: CurrentDevice,
    service: CurrentService,
    response: Response,
    position: ClientPosition = None,
) -> Any:
    """The window receipt stored with a turn: the policy, ledger version and
    turns of the window its answer replied to, and the body's MAC. Reads only."""
    stored, at = service.reads.read(
        service.required_position(device, position),
        lambda source: stored_receipt(
            source.ledger, device.user_id, conversation_id, turn_id
        ),
    )
    headers = service.position_headers(device, at)
    if stored is None:
        return error_response(
            404,
            RECEIPT_NOT_FOUND,
            f"turn {turn_id} was recorded without a window: no receipt is stored",
            headers=headers,
        )
    response.headers.update(headers)
    return stored
