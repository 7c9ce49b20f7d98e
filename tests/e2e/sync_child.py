"""A device process that follows the change feed into a journal file.

    python -m tests.e2e.sync_child BASE_URL TOKEN CURSOR_FILE JOURNAL DELIVERIES

The journal is the application's state: one line per change applied, written
and fsynced before the handler returns. Changes it already holds (after a
crash, the batch in flight is handed over again) are skipped with a
VersionFilter seeded from it; every change handed over, skipped or not, is
also logged to DELIVERIES. TURNLEDGER_TEST_CRASH_AFTER_BATCH=N ends the
process abruptly right after the handler returns for batch N, before the
cursor is saved; TURNLEDGER_TEST_CHANGE_DELAY slows the handler down.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from uuid import UUID

from turnledger.infra.client import Change, Client, FileCursorStore, VersionFilter


def applied_versions(journal: Path) -> dict[UUID, int]:
    """The versions in the journal; a torn last line (killed mid-write) is cut."""
    if not journal.exists():
        return {}
    data = journal.read_bytes()
    whole = data[: data.rfind(b"\n") + 1]
    if whole != data:
        journal.write_bytes(whole)
    applied: dict[UUID, int] = {}
    for line in whole.decode().splitlines():
        record = json.loads(line)
        applied[UUID(record["conversation_id"])] = record["version"]
    return applied


def main(base_url: str, token: str, cursor: str, journal: str, deliveries: str) -> None:
    journal_path = Path(journal)
    versions = VersionFilter(applied_versions(journal_path))
    crash_after = int(os.environ.get("TURNLEDGER_TEST_CRASH_AFTER_BATCH", "0"))
    delay = float(os.environ.get("TURNLEDGER_TEST_CHANGE_DELAY", "0"))
    batches = 0

    def handle(changes: Sequence[Change]) -> None:
        nonlocal batches
        with (
            journal_path.open("a") as out,
            Path(deliveries).open("a") as delivered,
        ):
            for change in changes:
                record = {
                    "conversation_id": str(change.conversation_id),
                    "version": change.version,
                    "kind": change.kind,
                }
                delivered.write(json.dumps(record) + "\n")
                if versions.is_new(change.conversation_id, change.version):
                    out.write(json.dumps(record) + "\n")
                    out.flush()
                    os.fsync(out.fileno())
                time.sleep(delay)
        batches += 1
        if batches == crash_after:
            os._exit(9)  # handled, cursor not saved: the worst moment to die

    with Client(base_url, token) as client:
        client.pull(FileCursorStore(cursor), handle, limit=3)


if __name__ == "__main__":
    main(*sys.argv[1:6])
