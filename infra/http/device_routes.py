"""A device manages its own user's devices: add a sibling, list, revoke."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, status

from turnledger.infra.devices import Device
from turnledger.infra.http.errors import ERROR_RESPONSES
from turnledger.infra.http.service import Service, current_device, get_service
from turnledger.infra.wire.schemas import (
    DeviceIn,
    DeviceIssuedOut,
    DeviceListOut,
    DeviceOut,
)

router = APIRouter(prefix="/v1/devices", tags=["devices"], responses=ERROR_RESPONSES)

CurrentDevice = Annotated[Device, Depends(current_device)]
CurrentService = Annotated[Service, Depends(get_service)]


def device_out(device: Device) -> DeviceOut:
    return DeviceOut(
        device_id=device.device_id,
        name=device.name,
        created_at=device.created_at,
        revoked_at=device.revoked_at,
        added_by=device.added_by,
    )


@router.get("", response_model=DeviceListOut)
def list_devices(device: CurrentDevice, service: CurrentService) -> DeviceListOut:
    return DeviceListOut(
        devices=[device_out(each) for each in service.registry.list(device.user_id)]
    )


@router.post("", status_code=status.HTTP_201_CREATED, response_model=DeviceIssuedOut)
def add_device(
    request: DeviceIn, device: CurrentDevice, service: CurrentService
) -> DeviceIssuedOut:
    """Add another device for the caller's user; its token is shown only here.
    Revoking the caller later revokes this device too."""
    issued = service.registry.add(
        device.user_id, request.name, added_by=device.device_id
    )
    return DeviceIssuedOut(device=device_out(issued.device), token=issued.token)


@router.delete("/{device_id}", response_model=DeviceOut)
def revoke_device(
    device_id: Annotated[str, Path(min_length=1, max_length=100)],
    device: CurrentDevice,
    service: CurrentService,
) -> DeviceOut:
    """Revoke one of the user's devices (the caller's own included), and every
    device it added, so a stolen token cannot leave devices of its own behind."""
    revoked = service.registry.revoke(device_id, user_id=device.user_id)
    # Release the revoked devices' long-polls in this process at once (other
    # processes hear of it from the database).
    service.signals.fire([device.user_id])
    return device_out(revoked)
