"""`turnledger export`: a user's conversations as JSON Lines (docs/export.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from turnledger.domain.errors import InvalidInputError
from turnledger.infra.persistence import open_conversations
from turnledger.infra.progress import note
from turnledger.infra.service_layer.export import export_records
from turnledger.infra.settings import Settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write a user's conversations (what is still readable) as JSON Lines",
        description=(
            "Write every conversation of OWNER as JSON Lines: readable turns with "
            "their text, deleted turns as placeholders, and the deletions. The "
            "output holds plaintext: the file is created with mode 0600 and the "
            "server keeps no copy."
        ),
    )
    parser.add_argument("--owner", required=True, help="the owner id to export")
    parser.add_argument(
        "--output", type=Path, help="file to write (default: standard output)"
    )
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    if arguments.output is not None:
        check_output_path(arguments.output)  # before anything is opened or written
    ledger = open_conversations(Settings(), read_only=True)
    progress = _Progress(arguments.owner)
    try:
        with _destination(arguments.output) as out:
            for record in export_records(
                ledger, arguments.owner, exported_at=datetime.now(UTC)
            ):
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                progress.count(record)
    finally:
        ledger.close()
    progress.done()
    return 0


def check_output_path(path: Path) -> None:
    if path.is_dir():
        raise InvalidInputError("--output", f"{path} is a directory: name a file")
    if not path.parent.is_dir():
        raise InvalidInputError(
            "--output", f"the directory {path.parent} does not exist"
        )


class _Progress:
    """Conversations exported so far, on stderr (stdout may be the export)."""

    EVERY_SECONDS = 2.0

    def __init__(self, owner_id: str) -> None:
        self._owner_id = owner_id
        self._conversations = 0
        self._turns = 0
        self._last = time.monotonic()
        note(f"exporting the conversations of {owner_id}...")

    def count(self, record: dict[str, Any]) -> None:
        kind = record.get("record")
        self._conversations += kind == "conversation"
        self._turns += kind == "turn"
        if time.monotonic() - self._last >= self.EVERY_SECONDS:
            self._last = time.monotonic()
            note(f"  {self._summary()} so far")

    def done(self) -> None:
        note(f"exported {self._summary()}")

    def _summary(self) -> str:
        return f"{self._conversations} conversations, {self._turns} turns"


@contextmanager
def _destination(path: Path | None) -> Iterator[TextIO]:
    if path is None:
        yield sys.stdout
        sys.stdout.flush()
        return
    # Written beside the target and renamed into place, so a failed export
    # never leaves a truncated file that looks complete; 0600 from the start.
    partial = path.with_name(path.name + ".partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            yield handle
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
