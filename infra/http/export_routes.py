"""`GET /v1/export`: the caller's user's conversations as JSON Lines.

The records are those of `turnledger export` (docs/export.md): readable turns
with their text, deleted turns as placeholders, the deletions, and an `end`
record with the totals, which tells a client that the stream is complete.
They are streamed as they are read; the service keeps no copy.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from turnledger.infra.devices import Device
from turnledger.infra.http.errors import ERROR_RESPONSES
from turnledger.infra.http.service import (
    ClientPosition,
    Service,
    current_device,
    get_service,
)
from turnledger.infra.service_layer.export import export_records
from turnledger.infra.wire.status import POSITION_HEADER

router = APIRouter(prefix="/v1", tags=["export"], responses=ERROR_RESPONSES)

MEDIA_TYPE = "application/x-ndjson"


@router.get(
    "/export",
    response_class=StreamingResponse,
    responses={200: {"content": {MEDIA_TYPE: {}}, "description": "JSON Lines"}},
)
def export(
    device: Annotated[Device, Depends(current_device)],
    service: Annotated[Service, Depends(get_service)],
    position: ClientPosition = None,
) -> StreamingResponse:
    """Every conversation of the caller's user, one JSON record per line."""
    # The records are read as they are streamed, from the database chosen now.
    records, at = service.reads.read(
        service.required_position(device, position),
        lambda source: export_records(
            source.ledger, device.user_id, exported_at=datetime.now(UTC)
        ),
    )

    def lines() -> Iterator[bytes]:
        for record in records:
            yield (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")

    return StreamingResponse(
        lines(),
        media_type=MEDIA_TYPE,
        headers={
            "Content-Disposition": 'attachment; filename="turnledger-export.jsonl"'
        }
        | (
            {POSITION_HEADER: service.cursors.encode_wal(device.user_id, at)}
            if at
            else {}
        ),
    )
