"""`turnledger conversations` and `turnledger delete`: find and remove a user's data."""

from __future__ import annotations

import argparse
from typing import Any
from uuid import UUID

from rich.console import Console
from rich.table import Table

from turnledger.domain.errors import InvalidInputError
from turnledger.infra.exit_codes import EXIT_PENDING
from turnledger.infra.persistence import open_conversations
from turnledger.infra.progress import note
from turnledger.infra.service_layer.export import conversation_ids_of
from turnledger.infra.settings import Settings


def register(subparsers: Any) -> None:
    listing = subparsers.add_parser(
        "conversations", help="list an owner's conversations, oldest first"
    )
    listing.add_argument("--owner", required=True, help="the owner id")
    listing.add_argument(
        "--ids", action="store_true", help="print only the ids, one a line"
    )
    listing.set_defaults(handler=run_list)

    delete = subparsers.add_parser(
        "delete",
        help="delete turns of a conversation (or its whole history) and purge them",
        description="Record the deletion, then destroy the deleted turns' keys "
        "(docs/deletion.md). Exit status 3 when the purge is still pending: "
        "`turnledger purge` says what holds it.",
    )
    delete.add_argument("conversation_id", help="the conversation's UUID")
    delete.add_argument("--owner", required=True, help="the conversation's owner id")
    which = delete.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--turn", action="append", metavar="TURN_ID", help="a turn to delete (repeat)"
    )
    which.add_argument(
        "--all", action="store_true", help="delete every turn of the conversation"
    )
    delete.add_argument("--by", help="who deletes (default: the owner)")
    delete.set_defaults(handler=run_delete)


def run_list(arguments: argparse.Namespace) -> int:
    ledger = open_conversations(Settings(), read_only=True)
    try:
        rows = [
            ledger.get_conversation(arguments.owner, conversation_id)
            for conversation_id in conversation_ids_of(ledger, arguments.owner)
        ]
    finally:
        ledger.close()
    if arguments.ids:
        for row in rows:
            print(row.conversation_id)
        return 0
    table = Table(title=f"conversations of {arguments.owner}")
    for column in ("conversation", "started", "turns", "version"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            str(row.conversation_id),
            f"{row.created_at:%Y-%m-%d %H:%M:%S}",
            str(row.turn_count),
            str(row.version),
        )
    Console(width=120).print(table)
    return 0


def run_delete(arguments: argparse.Namespace) -> int:
    conversation_id = _conversation_id(arguments.conversation_id)
    ledger = open_conversations(Settings())
    try:
        note("deleting, then destroying the deleted turns' keys...")
        receipt = ledger.delete_history(
            arguments.owner,
            conversation_id,
            turn_ids=None if arguments.all else arguments.turn,
            deleted_by=arguments.by,
        )
    finally:
        ledger.close()
    deleted = ", ".join(receipt.deleted_turn_ids) or "(none)"
    purge = "complete" if receipt.purge is None else receipt.purge.state
    print(
        f"deleted from conversation {receipt.conversation_id} at version "
        f"{receipt.version}: {deleted}; purge {purge}"
    )
    pending = receipt.purge is not None and receipt.purge.compaction_pending
    return EXIT_PENDING if pending else 0


def _conversation_id(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise InvalidInputError("conversation_id", "expected a UUID") from None
