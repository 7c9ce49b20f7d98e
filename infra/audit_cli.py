"""`turnledger audit`, `turnledger history` and `turnledger rebuild`.

`turnledger audit` exits 0 when the store is clean, 1 on an integrity failure
(EXIT_INTEGRITY) and 2 when it could not run at all (EXIT_CANNOT_RUN: invalid
settings, an unreadable --against or --checkpoint file, a bad key, an
unreachable store), so a script can tell "tampered" from "not checked".
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from turnledger.domain.errors import InvalidInputError, TurnLedgerError
from turnledger.domain.merkle import ProofError
from turnledger.infra.checkpoint import newest_checkpoint
from turnledger.infra.persistence import open_conversations
from turnledger.infra.read_side import compare_read_sides, live_rows, replay_log
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.audit import Anchor, AuditReport
from turnledger.infra.service_layer.replay import history_at
from turnledger.infra.settings import Settings
from turnledger.infra.signing import trusted_public_key
from turnledger.infra.transparency_audit import audit_store

EXIT_INTEGRITY = 1
EXIT_CANNOT_RUN = 2


def register(subparsers: Any) -> None:
    audit = subparsers.add_parser(
        "audit",
        help="verify versions, hash chains and window receipts; non-zero on failure",
    )
    audit.add_argument(
        "--conversation", type=_uuid, help="audit only this conversation"
    )
    audit.add_argument("--json", type=Path, metavar="PATH", help="write a JSON report")
    audit.add_argument(
        "--no-receipts", action="store_true", help="check chains and versions only"
    )
    audit.add_argument(
        "--against",
        type=Path,
        metavar="REPORT",
        help="an earlier JSON report: its heads must still be in the log",
    )
    audit.add_argument(
        "--checkpoint",
        type=Path,
        metavar="DIR_OR_FILE",
        help="a signed checkpoint (or a directory of them: the newest is used); "
        "the log must extend it",
    )
    audit.add_argument(
        "--no-index",
        action="store_true",
        help="do not check heads against the read side's conversation rows",
    )
    audit.set_defaults(handler=run_audit)

    history = subparsers.add_parser(
        "history", help="a conversation as it stood at a past version or time"
    )
    history.add_argument("conversation", type=_uuid)
    history.add_argument("--owner", required=True)
    history.add_argument(
        "--at",
        required=True,
        metavar="VERSION|TIME",
        help="a version number, or an ISO 8601 time with its zone",
    )
    history.set_defaults(handler=run_history)

    rebuild_parser = subparsers.add_parser(
        "rebuild",
        help="replay the log into fresh read-side tables; report what differed",
    )
    rebuild_parser.add_argument(
        "--check",
        action="store_true",
        help="only compare the replay with the live tables (exit 1 if they differ)",
    )
    rebuild_parser.set_defaults(handler=run_rebuild)


def _uuid(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a conversation id: {value!r}") from None


@contextmanager
def _progress(console: Console, label: str, total: int) -> Iterator[Any]:
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(label, total=max(total, 1))
        yield lambda count: progress.advance(task, count)
        progress.update(task, completed=max(total, 1))


def run_audit(arguments: argparse.Namespace) -> int:
    console = Console()
    try:
        report = _audit(arguments, console)
    # Database errors go on to the CLI's shared handler (infra/cli.py): one
    # line naming the database, exit 2.
    except (TurnLedgerError, ProofError, OSError) as error:
        print(f"turnledger: could not run the audit: {error}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    _print_summary(console, report)
    if arguments.json is not None:
        try:
            arguments.json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
        except OSError as error:
            print(f"turnledger: cannot write the report: {error}", file=sys.stderr)
            # A failure found outranks a report not written.
            return EXIT_CANNOT_RUN if report.ok else EXIT_INTEGRITY
        console.print(f"report written to {arguments.json}")
    return 0 if report.ok else EXIT_INTEGRITY


def _audit(arguments: argparse.Namespace, console: Console) -> AuditReport:
    settings = Settings()
    anchors: dict[UUID, Anchor] = {}
    checkpoint = None
    if arguments.checkpoint is not None:
        trusted = trusted_public_key(settings)
        checkpoint = newest_checkpoint(arguments.checkpoint, trusted)
        if trusted is None:
            console.print(
                "[yellow]no audit key configured: the checkpoint's own public key "
                "was used; pin one with TURNLEDGER_AUDIT_PUBLIC_KEY[/]"
            )
    if arguments.against is not None:
        anchors.update(anchors_from_report(arguments.against))
    ledger = open_conversations(settings, read_only=True)
    try:
        if not arguments.no_index:
            anchors = {**_read_side_anchors(ledger), **anchors}
        return audit_store(
            ledger,
            settings,
            conversation_id=arguments.conversation,
            receipts=not arguments.no_receipts,
            anchors=anchors,
            read_side=not arguments.no_index,
            checkpoint=checkpoint,
            checkpoint_location=arguments.checkpoint,
            progress=lambda label, total: _progress(console, label, total),
        )
    finally:
        ledger.close()


def _age(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{max(0.0, seconds):.0f} s"


def anchors_from_report(path: Path) -> dict[UUID, Anchor]:
    """The heads an earlier `turnledger audit --json` report recorded."""
    try:
        document = json.loads(path.read_text())
        return {
            UUID(item["conversation_id"]): (
                int(item["head_version"]),
                str(item["head_digest"]),
            )
            for item in document["conversation_details"]
            if item["events"]
        }
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InvalidInputError(
            "--against", f"{path} is not a turnledger audit report ({error})"
        ) from None


def _read_side_anchors(ledger: Conversations) -> dict[UUID, Anchor]:
    """Heads the read side recorded with the events (its conversation rows)."""
    conversations, _, _ = live_rows(ledger)
    return {
        row.conversation_id: (row.version, row.head_digest) for row in conversations
    }


def _print_summary(console: Console, report: AuditReport) -> None:
    summary = report.to_json()
    table = Table(title="audit summary")
    table.add_column("check")
    table.add_column("result", justify="right")
    table.add_row("conversations", str(summary["conversations"]))
    table.add_row("events verified", str(summary["events_verified"]))
    table.add_row("broken chains", _red_if(summary["chains_broken"]))
    table.add_row("receipts verified", str(summary["receipts"]["verified"]))
    table.add_row(
        "receipts not re-derivable (turns deleted)",
        str(summary["receipts"]["not_rederivable"]),
    )
    table.add_row("receipts failed", _red_if(summary["receipts"]["failed"]))
    table.add_row("deleted turns", str(summary["deleted_turns"]))
    if report.checkpoint is not None:
        table.add_row(
            "newest checkpoint",
            f"{report.checkpoint['tree_size']} events, "
            f"{report.checkpoint['timestamp']}, "
            f"{_age(report.checkpoint['age_seconds'])} old; "
            f"{report.checkpoint['events_after']} events since, covered by none",
        )
    table.add_row("integrity failures", _red_if(len(report.failures)))
    console.print(table)
    if report.failures:
        failures = Table(title="integrity failures")
        for column in ("conversation", "version", "id", "kind", "detail"):
            failures.add_column(column)
        for finding in report.failures:
            failures.add_row(
                "(log)"
                if finding.conversation_id is None
                else str(finding.conversation_id),
                "" if finding.version is None else str(finding.version),
                "" if finding.notification_id is None else str(finding.notification_id),
                finding.kind,
                escape(finding.detail),
            )
        console.print(failures)
    verdict = "[green]audit passed[/]" if report.ok else "[red]audit FAILED[/]"
    console.print(verdict)


def _red_if(count: int) -> str:
    return f"[red]{count}[/]" if count else "0"


def run_history(arguments: argparse.Namespace) -> int:
    settings = Settings()
    console = Console()
    version, at = _parse_at(arguments.at)
    ledger = open_conversations(settings, read_only=True)
    try:
        page = history_at(
            ledger, arguments.owner, arguments.conversation, version=version, at=at
        )
    finally:
        ledger.close()
    table = Table(
        title=f"conversation {page.conversation_id} at version {page.version}"
    )
    for column in ("#", "turn", "status", "recorded", "question", "steps", "answer"):
        table.add_column(column)
    for item in page.items:
        deleted = (
            f"[dim](deleted {item.deleted_at:%Y-%m-%d %H:%M:%S})[/]"
            if item.deleted_at is not None
            else ""
        )
        table.add_row(
            str(item.position + 1),
            escape(item.turn_id),
            item.status.value,
            f"{item.recorded_at:%Y-%m-%d %H:%M:%S}",
            deleted if item.deleted else escape(item.question or ""),
            "" if item.parts is None else escape(item.parts.summary()),
            deleted if item.deleted else escape(item.answer or ""),
        )
    console.print(table)
    return 0


def _parse_at(value: str) -> tuple[int | None, datetime | None]:
    if value.isdigit():
        return int(value), None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInputError(
            "at", "expected a version number or an ISO 8601 time"
        ) from None
    if moment.tzinfo is None:
        raise InvalidInputError("at", "the time needs a zone, e.g. 2026-01-31T12:00Z")
    return None, moment


def run_rebuild(arguments: argparse.Namespace) -> int:
    settings = Settings()
    console = Console()
    # --check only reads; a rebuild replaces the rows.
    ledger = open_conversations(settings, read_only=arguments.check)
    try:
        latest = ledger.recorder.max_notification_id() or 0
        damaged: set[tuple[UUID, str]] = set()
        with _progress(console, "replaying the log", latest) as advance:
            replayed = replay_log(ledger, progress=advance, damaged=damaged)
        differences = compare_read_sides(live_rows(ledger), replayed.rows(), damaged)
        for conversation_id, key_id in sorted(damaged, key=str)[:20]:
            # Replayed as if its key were gone: no sizes, its text unreadable.
            console.print(f"damaged key: conversation {conversation_id} {key_id}")
        for line in differences[:20]:
            console.print(f"differs: {line}")
        if arguments.check:
            console.print(
                "read side matches the log"
                if not differences
                else f"{len(differences)} rows differ from the log"
            )
            return 1 if differences else 0
        recorder: Any = ledger.recorder
        recorder.replace_read_side(replayed)
        conversations, turns, folds = replayed.rows()
        console.print(
            f"read side rebuilt from {latest} events: {len(conversations)} "
            f"conversations, {len(turns)} turns, {len(folds)} folds "
            f"({len(differences)} rows had differed)"
        )
    finally:
        ledger.close()
    return 0
