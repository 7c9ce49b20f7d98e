"""Where deletions stand: whether the purge's compaction is complete."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from turnledger.domain.purge import purge_state
from turnledger.infra.devices import Device
from turnledger.infra.http.errors import ERROR_RESPONSES
from turnledger.infra.http.service import Service, current_device, get_service

router = APIRouter(prefix="/v1", tags=["service"], responses=ERROR_RESPONSES)


class PurgeStateOut(BaseModel):
    state: Literal["complete", "pending"] = Field(
        description="pending: destroyed keys may still be in the database's files "
        "or WAL; the service retries until they are not (docs/deletion.md)"
    )
    position: int | None = Field(description="log position the purge has followed")
    pending_reasons: list[str] = Field(description="what holds a pending compaction")
    server_findings: list[str] = Field(
        description="server settings that keep purges pending (checked at start)"
    )


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
