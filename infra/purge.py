"""`turnledger purge`: complete pending deletions (also done at every start-up)."""

from __future__ import annotations

import argparse
from typing import Any

from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "purge",
        help="complete pending deletions: destroy their keys, compact the key store",
        description=(
            "Run the purge to the head of the log: destroy the keys named by every "
            "HistoryDeleted event not yet purged, then rewrite the key store's files. "
            "Start-up and every deletion do this too; run it to retry a compaction "
            "that was deferred. Exit status 3 when compaction is still pending."
        ),
    )
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    ledger = open_conversations(Settings())  # start-up runs the purge once
    try:
        report = ledger.purge_deleted_history()
    finally:
        ledger.close()
    print(
        f"purged to log position {report.position}; "
        f"compaction {'pending' if report.compaction_pending else 'complete'}"
    )
    return 3 if report.compaction_pending else 0
