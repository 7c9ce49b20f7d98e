"""`turnledger device add|list|revoke`: manage the devices that may call the service."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

from turnledger.infra.devices import open_device_registry
from turnledger.infra.settings import Settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("device", help="add, list or revoke sync devices")
    commands = parser.add_subparsers(dest="device_command", required=True)

    add = commands.add_parser("add", help="add a device; prints its token once")
    add.add_argument("--user", required=True, help="the user the device acts for")
    add.add_argument("--name", required=True, help="a label, e.g. 'phone'")
    add.set_defaults(handler=run_add)

    listing = commands.add_parser("list", help="list devices")
    listing.add_argument("--user", help="only this user's devices")
    listing.set_defaults(handler=run_list)

    revoke = commands.add_parser("revoke", help="revoke a device's token at once")
    revoke.add_argument("device_id")
    revoke.set_defaults(handler=run_revoke)


def run_add(arguments: argparse.Namespace) -> int:
    registry = open_device_registry(Settings())
    try:
        issued = registry.add(arguments.user, arguments.name)
    finally:
        registry.close()
    console = Console()
    console.print(f"device {issued.device.device_id} for user {issued.device.user_id}")
    console.print("token (shown only now; send it as 'Authorization: Bearer <token>'):")
    # Plain print: the token must come out on one line, unwrapped and unstyled.
    print(issued.token)
    return 0


def run_list(arguments: argparse.Namespace) -> int:
    registry = open_device_registry(Settings())
    try:
        devices = registry.list(arguments.user)
    finally:
        registry.close()
    table = Table(title="devices")
    for column in ("device", "user", "name", "added", "added by", "revoked"):
        table.add_column(column)
    for device in devices:
        table.add_row(
            device.device_id,
            device.user_id,
            device.name,
            f"{device.created_at:%Y-%m-%d %H:%M:%S}",
            device.added_by or "(cli)",
            f"{device.revoked_at:%Y-%m-%d %H:%M:%S}" if device.revoked_at else "",
        )
    Console(width=160).print(table)
    return 0


def run_revoke(arguments: argparse.Namespace) -> int:
    registry = open_device_registry(Settings())
    try:
        device = registry.revoke(arguments.device_id)
    finally:
        registry.close()
    print(
        f"revoked device {device.device_id} of user {device.user_id}, "
        "and any device it added"
    )
    return 0
