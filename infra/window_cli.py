"""`turnledger window`: print a conversation's request window and its report."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from uuid import UUID

from rich.console import Console
from rich.table import Table

from turnledger.domain.errors import InvalidInputError
from turnledger.infra.arguments import positive_int
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings
from turnledger.infra.tokenizers import TOKENIZERS, token_counter
from turnledger.projections.formats import WIRE_FORMATS
from turnledger.projections.window import Window

# Dropped turns listed in the table; JSON output lists them all.
_TABLE_DROPPED_ROWS = 20


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "window",
        help="print the request window of a conversation for a question",
        description="Project the request body that would be sent for QUESTION and "
        "report what was kept, dropped and trimmed. Limits come from the "
        "TURNLEDGER_WINDOW_* settings; the options below override them.",
    )
    parser.add_argument("conversation_id", help="the conversation's UUID")
    parser.add_argument("--owner", required=True, help="the conversation's owner id")
    parser.add_argument("--question", required=True, help="the current question")
    parser.add_argument("--system", default="", help="system instructions")
    parser.add_argument("--model", default="model", help="model name put in the body")
    parser.add_argument("--format", choices=WIRE_FORMATS, help="wire format")
    parser.add_argument("--max-bytes", type=positive_int, help="byte limit of the body")
    parser.add_argument("--tokenizer", choices=TOKENIZERS, help="token counter")
    parser.add_argument(
        "--output",
        choices=("table", "json", "body"),
        default="table",
        help="table; json: the report with the body's exact bytes as its last "
        "member; body: only the body's exact bytes (to send as they are)",
    )
    parser.add_argument(
        "--body", action="store_true", help="with --output table, also print the body"
    )
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    settings = Settings()
    try:
        conversation_id = UUID(arguments.conversation_id)
    except ValueError:
        raise InvalidInputError("conversation_id", "expected a UUID") from None
    policy = settings.window_policy()
    overrides: dict[str, Any] = {}
    if arguments.format:
        overrides["wire_format"] = arguments.format
    if arguments.max_bytes is not None:
        overrides["max_bytes"] = arguments.max_bytes
    if overrides:
        policy = type(policy).model_validate({**policy.model_dump(), **overrides})
    counter = token_counter(arguments.tokenizer or settings.window_tokenizer)
    ledger = open_conversations(settings, read_only=True)
    try:
        projected = ledger.project_window(
            arguments.owner,
            conversation_id,
            question=arguments.question,
            system=arguments.system,
            model=arguments.model,
            policy=policy,
            token_counter=counter,
        )
        window = projected.window
        # The report lists dropped turns' ids, read from the store: before closing.
        if arguments.output == "body":
            sys.stdout.buffer.write(window.body)
            sys.stdout.buffer.flush()
            return 0
        if arguments.output == "json":
            document = {
                "conversation_id": str(projected.conversation_id),
                "ledger_version": projected.ledger_version,
                "report": window.report(),
            }
            _write_json_with_body(document, window.body)
            return 0
        _print_table(
            Console(), projected.conversation_id, projected.ledger_version, window
        )
    finally:
        ledger.close()
    if arguments.body:
        sys.stdout.write(window.body.decode("utf-8") + "\n")
    return 0


def _write_json_with_body(document: dict[str, Any], body: bytes) -> None:
    """The document, then `"body":` and the body's bytes exactly as they are sent.

    Parsing the body and dumping it again would print other bytes than the
    ones the window measured (spacing, escapes): they are spliced in instead.
    """
    head = json.dumps(document, ensure_ascii=False, indent=2)
    sys.stdout.flush()
    out = sys.stdout.buffer
    out.write(head[: head.rindex("}")].rstrip().encode("utf-8"))
    out.write(b',\n  "body": ' + body + b"\n}\n")
    out.flush()


def _print_table(
    console: Console, conversation_id: UUID, version: int, window: Window
) -> None:
    summary = Table(title=f"window of conversation {conversation_id} (v{version})")
    summary.add_column("what")
    summary.add_column("value", justify="right")
    rows = [
        ("wire format", window.wire_format),
        ("body bytes / limit", f"{window.byte_length} / {window.max_bytes}"),
        (f"estimated tokens ({window.token_counter})", str(window.estimated_tokens)),
        ("history tokens", str(window.history_tokens)),
        ("kept turns", str(len(window.kept_turn_ids))),
        ("dropped turns", _counts(window.dropped.counts())),
        ("kept by the floor past the token budget", str(window.floor_over_budget)),
        ("fold", _fold(window)),
        ("fold due", "yes" if window.fold_due else "no"),
        ("anything eligible omitted", "yes" if window.omitted else "no"),
    ]
    for what, value in rows:
        summary.add_row(what, value)
    console.print(summary)

    turns = Table(title="turns")
    for column in ("turn", "sent", "reason / trim"):
        turns.add_column(column)
    trims: dict[str, list[str]] = {}
    for item in window.trimmed:
        trims.setdefault(item.turn_id, []).append(
            f"{item.part} trimmed: {item.omitted_tokens} tokens omitted"
        )
    for turn_id in window.kept_turn_ids:
        turns.add_row(turn_id, "yes", "; ".join(trims.get(turn_id, [])))
    dropped = list(window.dropped)
    shown = dropped[-_TABLE_DROPPED_ROWS:]
    if len(dropped) > len(shown):
        turns.add_row(
            f"… {len(dropped) - len(shown)} older", "no", "(see --output json)"
        )
    for turn in shown:
        turns.add_row(turn.turn_id, "no", turn.reason)
    console.print(turns)


def _counts(counts: dict[str, int]) -> str:
    if not counts:
        return "0"
    return ", ".join(f"{count} ({reason})" for reason, count in counts.items())


def _fold(window: Window) -> str:
    if window.fold_id is None:
        return "none"
    state = "sent" if window.fold_sent else f"not sent ({window.fold_dropped_reason})"
    return f"{window.fold_id}: {state}"
