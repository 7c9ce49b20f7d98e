"""`turnledger purge`: complete pending deletions (also done at every start-up)."""

from __future__ import annotations

import argparse
from typing import Any

from turnledger.infra.exit_codes import EXIT_PENDING
from turnledger.infra.persistence import open_conversations
from turnledger.infra.progress import note
from turnledger.infra.purge_retry import server_findings
from turnledger.infra.settings import Settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "purge",
        help="complete pending deletions: destroy their keys, compact the key store",
        description=(
            "Run the purge to the head of the log: destroy the keys named by every "
            "HistoryDeleted event not yet purged, then rewrite the key store's files. "
            "Start-up and every deletion do this too; run it to retry a compaction "
            "that was deferred. Exit status 0 when nothing of a destroyed key is "
            "left (files and WAL, verified), 3 when compaction is still pending; "
            "the output says what holds it."
        ),
    )
    parser.set_defaults(handler=run)


CHECKPOINT_WAIT_SECONDS = 60.0


def run(arguments: argparse.Namespace) -> int:
    settings = Settings()
    note(
        "purging: destroying deleted turns' keys, then compacting the key store "
        f"(may wait up to {CHECKPOINT_WAIT_SECONDS:.0f} s for a checkpoint)..."
    )
    ledger = open_conversations(settings)  # start-up runs the purge once
    try:
        view = ledger.vault.purge_view
        if hasattr(view, "checkpoint_wait_seconds"):
            # A command may wait for the CHECKPOINT a deletion does not.
            view.checkpoint_wait_seconds = CHECKPOINT_WAIT_SECONDS
        report = ledger.purge_deleted_history()
    finally:
        ledger.close()
    print(
        f"purged to log position {report.position}; "
        f"compaction {'pending' if report.compaction_pending else 'complete'}"
    )
    for reason in report.pending_reasons:
        print(f"  pending: {reason}")
    for finding in server_findings(settings):
        print(f"  server: {finding} (docs/deletion.md)")
    return EXIT_PENDING if report.compaction_pending else 0
