"""Folds: the summary an application service records to stand in for older
turns (docs/window.md), and whether a new one is due."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query, Response, status

from turnledger.infra.devices import Device
from turnledger.infra.http.errors import ERROR_RESPONSES
from turnledger.infra.http.service import (
    ClientPosition,
    Service,
    current_device,
    get_service,
)
from turnledger.infra.wire.status import FoldIn, FoldOut, FoldStatusOut

router = APIRouter(
    prefix="/v1/conversations", tags=["folds"], responses=ERROR_RESPONSES
)

ConversationId = Annotated[UUID, Path(description="the conversation's id")]
CurrentDevice = Annotated[Device, Depends(current_device)]
CurrentService = Annotated[Service, Depends(get_service)]


@router.post(
    "/{conversation_id}/folds",
    status_code=status.HTTP_201_CREATED,
    response_model=FoldOut,
)
def record_fold(
    conversation_id: ConversationId,
    request: FoldIn,
    device: CurrentDevice,
    service: CurrentService,
    response: Response,
) -> FoldOut:
    """Record a summary of every turn up to `covers_through_turn_id`. A fold id
    already recorded is a 409 `fold_conflict`."""
    receipt = service.ledger.record_fold(
        device.user_id,
        conversation_id,
        covers_through_turn_id=request.covers_through_turn_id,
        summary=request.summary,
        summarized_version=request.summarized_version,
        fold_id=request.fold_id,
        expected_version=request.expected_version,
    )
    service.hand_back(response, device, service.reads.primary_position())
    service.signals.fire([device.user_id])
    return FoldOut(
        conversation_id=receipt.conversation_id,
        fold_id=receipt.fold_id,
        covers_through_turn_id=receipt.covers_through_turn_id,
        version=receipt.version,
    )


@router.get("/{conversation_id}/fold", response_model=FoldStatusOut)
def get_fold(
    conversation_id: ConversationId,
    device: CurrentDevice,
    service: CurrentService,
    response: Response,
    threshold_tokens: Annotated[int | None, Query(ge=1, le=2**31)] = None,
    position: ClientPosition = None,
) -> FoldStatusOut:
    """The current fold and whether a new one is due (default threshold:
    TURNLEDGER_FOLD_THRESHOLD_TOKENS)."""
    threshold = threshold_tokens or service.settings.fold_threshold_tokens
    (fold, summary), at = service.reads.read(
        service.required_position(device, position),
        lambda source: (
            source.ledger.get_fold_status(
                device.user_id, conversation_id, threshold_tokens=threshold
            ),
            source.ledger.get_fold_summary(device.user_id, conversation_id),
        ),
    )
    service.hand_back(response, device, at)
    return FoldStatusOut(
        fold_id=fold.fold_id,
        covers_through_turn_id=fold.covers_through_turn_id,
        summary=summary,
        unfolded_tokens=fold.unfolded_tokens,
        threshold_tokens=fold.threshold_tokens,
        due=fold.due,
    )
