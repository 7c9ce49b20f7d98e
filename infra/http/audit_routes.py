"""The transparency log seen by a device: the newest signed checkpoint and the
inclusion proof of one of its user's events, so that a browser can check the
server's claim itself (docs/transparency.md, docs/web.md).

Both answer 404 `proof_unavailable` when the service writes no checkpoints
(TURNLEDGER_AUDIT_CHECKPOINT_DIR unset), none is written yet, or the event
is newer than the newest checkpoint; the proof answers 409
`log_inconsistent` when the stored rows no longer match the signed root.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path
from fastapi.responses import Response

from turnledger.domain.errors import CheckpointError
from turnledger.infra.checkpoint import (
    Checkpoint,
    LogInconsistentError,
    newest_checkpoint,
)
from turnledger.infra.devices import Device
from turnledger.infra.http.errors import ERROR_RESPONSES, error_response
from turnledger.infra.http.service import Service, current_device, get_service
from turnledger.infra.proofs import prove_event
from turnledger.infra.signing import trusted_public_key
from turnledger.infra.wire.audit import CheckpointOut, InclusionProofOut

router = APIRouter(prefix="/v1", tags=["audit"], responses=ERROR_RESPONSES)

CurrentDevice = Annotated[Device, Depends(current_device)]
CurrentService = Annotated[Service, Depends(get_service)]
UNAVAILABLE = "proof_unavailable"


def _newest(service: Service) -> Checkpoint:
    directory = service.settings.audit_checkpoint_dir
    if directory is None:
        raise CheckpointError("this service writes no checkpoints")
    return newest_checkpoint(directory, trusted_public_key(service.settings))


def _unavailable(error: CheckpointError) -> Response:
    return error_response(404, UNAVAILABLE, str(error))


@router.get("/audit/checkpoint", response_model=CheckpointOut)
def get_checkpoint(device: CurrentDevice, service: CurrentService) -> Any:
    """The newest signed checkpoint of the service's checkpoint directory."""
    try:
        return CheckpointOut.model_validate(_newest(service).to_json())
    except CheckpointError as error:
        return _unavailable(error)


@router.get(
    "/conversations/{conversation_id}/events/{version}/proof",
    response_model=InclusionProofOut,
)
def get_inclusion_proof(
    conversation_id: Annotated[UUID, Path(description="the conversation's id")],
    version: Annotated[int, Path(ge=1, le=2**53, description="the event's version")],
    device: CurrentDevice,
    service: CurrentService,
) -> Any:
    """The inclusion proof of one event of the caller's conversation (the
    `version` of a sync change) in the newest checkpoint, checked before it
    is given out."""
    # Answers 404 conversation_not_found for another user's conversation.
    service.ledger.get_conversation(device.user_id, conversation_id)
    try:
        proof = prove_event(
            service.ledger,
            service.settings,
            conversation_id,
            version,
            _newest(service),
        )
    except LogInconsistentError as error:
        # The stored event or the tree cache no longer matches the signed
        # root: no proof is given out, and the operator's audit names why.
        return error_response(409, "log_inconsistent", str(error))
    except CheckpointError as error:
        return _unavailable(error)
    return InclusionProofOut.model_validate(proof)
