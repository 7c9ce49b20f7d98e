"""`turnledger demo`: the ledger and its windows, end to end, on the default store.

Two turns are stored (the first gives a fictional project code), a narrow
window leaves the code out, a third turn is confirmed, the store is closed and
reopened, a wide window brings the code back, and an oversized question is
rejected with the stored history byte-for-byte unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
from pathlib import Path
from typing import Any
from uuid import UUID

from rich.console import Console
from rich.table import Table

from turnledger.domain.errors import MandatoryInputTooLargeError
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations, ProjectedWindow
from turnledger.infra.settings import Settings, default_data_dir

OWNER = "demo-user"
MODEL = "demo-model"
SYSTEM = "You are a concise assistant for a software team."
PROJECT_CODE = "ORCHID-17"
TURNS = [
    (
        "turn-1",
        f"Our project code is {PROJECT_CODE}. Please remember it.",
        f"Noted: the project code is {PROJECT_CODE}.",
    ),
    (
        "turn-2",
        "We target Java 8 — “no newer APIs”, please. 谢谢!",
        "Understood: Java 8 only, so no var and no records. 👍",
    ),
]
THIRD_QUESTION = "Which Java version do we target?"
THIRD_ANSWER = "Java 8."
FINAL_QUESTION = "What is our project code, and which Java version?"
NARROW_BYTES = 400
WIDE_BYTES = 2_000


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the ledger and window scenario on a demo store of its own",
        description="Store a short conversation and project windows from it, on "
        "an SQLite store of its own ($XDG_DATA_HOME/turnledger-demo), never the "
        "configured one unless --configured-store is given. Prints the "
        "conversation, its owner and a command to look at it.",
    )
    parser.add_argument(
        "--configured-store",
        action="store_true",
        help="write into the store the TURNLEDGER_* settings name instead",
    )
    parser.set_defaults(handler=run)


def demo_data_dir() -> Path:
    return default_data_dir().with_name("turnledger-demo")


def demo_settings(configured: Settings) -> Settings:
    """The configured settings, with a private SQLite store of the demo's own."""
    return configured.model_copy(
        update={
            "persistence": "sqlite",
            "data_dir": demo_data_dir(),
            "master_key": None,
            "master_key_file": None,
            "postgres_replica_host": None,
            # Its deletion record beside it, out of the configured store's way.
            "deletion_record_dir": demo_data_dir() / "deletion-record",
        }
    )


Rows = list[tuple[str, ...]]
Checks = list[tuple[str, bool]]


def run(arguments: argparse.Namespace) -> int:
    configured = Settings()
    settings = configured if arguments.configured_store else demo_settings(configured)
    console = Console()
    console.print(f"[bold]turnledger demo[/] on the {_describe(settings)} store\n")
    rows: Rows = []
    checks: Checks = []
    conversation_id = _first_session(settings, rows, checks)
    _after_reopening(settings, conversation_id, rows, checks)
    _print_table(console, conversation_id, rows, checks)
    # Plain prints: ids and the command must come out unwrapped, to copy.
    print(f"\nconversation {conversation_id}, owner {OWNER}; look at it with:")
    print(
        f"  {_environment_for(settings, arguments.configured_store)}turnledger window "
        f'{conversation_id} --owner {OWNER} --question "{FINAL_QUESTION}"'
    )
    return 0 if all(passed for _, passed in checks) else 1


def _first_session(settings: Settings, rows: Rows, checks: Checks) -> UUID:
    """Store two turns, project a narrow window, confirm the reply with it."""
    ledger = open_conversations(settings)
    conversation_id = ledger.start_conversation(OWNER)
    for turn_id, question, answer in TURNS:
        ledger.confirm_turn(
            OWNER, conversation_id, turn_id=turn_id, question=question, answer=answer
        )
    rows.append(_stored_row("Store two turns", ledger, conversation_id))

    narrow = _window(ledger, conversation_id, THIRD_QUESTION, NARROW_BYTES)
    rows.append(_window_row("Narrow window", narrow, NARROW_BYTES))
    checks.append(
        (
            "narrow window keeps only the newest turn",
            narrow.window.kept_turn_ids == ("turn-2",),
        )
    )
    checks.append(("narrow window omits the project code", not _mentions_code(narrow)))

    ledger.confirm_turn(
        OWNER,
        conversation_id,
        turn_id="turn-3",
        question=THIRD_QUESTION,
        answer=THIRD_ANSWER,
        window=narrow,  # keeps the receipt of what was sent
    )
    rows.append(_stored_row("Confirm the reply", ledger, conversation_id))
    ledger.close()
    return conversation_id


def _after_reopening(
    settings: Settings, conversation_id: UUID, rows: Rows, checks: Checks
) -> None:
    """Reopen the store: a wide window, then an oversized question refused
    with the stored history unchanged."""
    ledger = open_conversations(settings)
    wide = _window(ledger, conversation_id, FINAL_QUESTION, WIDE_BYTES)
    rows.append(_window_row("Reopen, wide window", wide, WIDE_BYTES))
    checks.append(("wide window brings the project code back", _mentions_code(wide)))
    checks.append(
        ("wide window keeps all three turns", len(wide.window.kept_turn_ids) == 3)
    )

    before = _fingerprint(ledger, conversation_id, settings)
    huge_question = "Please review this pasted file: " + "x" * WIDE_BYTES
    try:
        _window(ledger, conversation_id, huge_question, WIDE_BYTES)
    except MandatoryInputTooLargeError as error:
        rows.append(
            (
                "Oversized question",
                str(WIDE_BYTES),
                str(error.required_bytes),
                "-",
                "-",
                "rejected: mandatory input over budget",
            )
        )
        checks.append(("oversized question is rejected", True))
    else:
        checks.append(("oversized question is rejected", False))
    unchanged = _fingerprint(ledger, conversation_id, settings) == before
    checks.append(("stored history unchanged after the rejection", unchanged))
    rows.append(_stored_row("History after rejection", ledger, conversation_id))
    ledger.close()


def _print_table(
    console: Console, conversation_id: UUID, rows: Rows, checks: Checks
) -> None:
    table = Table(
        title=f"conversation {conversation_id}",
        caption="budget and body in UTF-8 bytes",
    )
    for column in ("step", "budget", "body", "kept", "dropped", "note"):
        table.add_column(
            column, justify="right" if column in ("budget", "body") else "left"
        )
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for label, passed in checks:
        console.print(f"{'[green]ok[/]' if passed else '[red]FAILED[/]'}  {label}")


def _environment_for(settings: Settings, configured: bool) -> str:
    """What the next command needs to reach the demo's store, as a shell prefix."""
    if configured:
        return ""
    unset = "".join(
        f"-u {name} "
        for name in ("TURNLEDGER_MASTER_KEY", "TURNLEDGER_MASTER_KEY_FILE")
        if name in os.environ
    )
    prefix = f"env {unset}" if unset else ""
    if os.environ.get("TURNLEDGER_PERSISTENCE", "sqlite") != "sqlite":
        prefix += "TURNLEDGER_PERSISTENCE=sqlite "
    return prefix + f"TURNLEDGER_DATA_DIR={shlex.quote(str(settings.data_dir))} "


def _window(
    ledger: Conversations, conversation_id: Any, question: str, max_bytes: int
) -> ProjectedWindow:
    return ledger.project_window(
        OWNER,
        conversation_id,
        question=question,
        system=SYSTEM,
        model=MODEL,
        max_bytes=max_bytes,
    )


def _mentions_code(projected: ProjectedWindow) -> bool:
    return PROJECT_CODE.encode() in projected.window.body


def _window_row(step: str, projected: ProjectedWindow, budget: int) -> tuple[str, ...]:
    window = projected.window
    code = "with" if _mentions_code(projected) else "without"
    return (
        step,
        str(budget),
        str(window.byte_length),
        ", ".join(window.kept_turn_ids) or "(none)",
        ", ".join(window.dropped_turn_ids) or "(none)",
        f"{code} {PROJECT_CODE}",
    )


def _stored_row(
    step: str, ledger: Conversations, conversation_id: Any
) -> tuple[str, ...]:
    page = ledger.get_history(OWNER, conversation_id)
    stored = ", ".join(item.turn_id for item in page.items)
    return (step, "", "", "", "", f"ledger v{page.version}: {stored}")


def _fingerprint(
    ledger: Conversations, conversation_id: Any, settings: Settings
) -> str:
    """A digest of the conversation as read back, plus its files on SQLite."""
    digest = hashlib.sha256(repr(ledger.get_history(OWNER, conversation_id)).encode())
    if settings.persistence == "sqlite":
        for path in (settings.sqlite_events_path, settings.sqlite_keys_path):
            digest.update(Path(path).read_bytes())
    return digest.hexdigest()


def _describe(settings: Settings) -> str:
    match settings.persistence:
        case "sqlite":
            return f"SQLite ({settings.data_dir})"
        case "postgres":
            return (
                f"PostgreSQL ({settings.postgres_host}:{settings.postgres_port}/"
                f"{settings.postgres_dbname}, schema {settings.postgres_schema})"
            )
        case _:
            return "in-memory"
