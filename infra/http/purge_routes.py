"""Where deletions stand: whether the purge's compaction is complete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from turnledger.infra.devices import Device
from turnledger.infra.http.errors import ERROR_RESPONSES
from turnledger.infra.http.service import Service, current_device, get_service
from turnledger.infra.service_layer.purge import purge_state
from turnledger.infra.wire.status import PurgeStateOut

router = APIRouter(prefix="/v1", tags=["service"], responses=ERROR_RESPONSES)


@router.get("/purge", response_model=PurgeStateOut)
def get_purge_state(
    request: Request,
    _: Annotated[Device, Depends(current_device)],
    service: Annotated[Service, Depends(get_service)],
) -> PurgeStateOut:
    ledger = service.ledger
    report = purge_state(ledger.vault.purge_view, ledger.name)
    retry = getattr(request.app.state, "purge_retry", None)
    return PurgeStateOut(
        state="pending" if report.compaction_pending else "complete",
        position=report.position,
        pending_reasons=list(report.pending_reasons),
        server_findings=list(retry.findings) if retry is not None else [],
    )
