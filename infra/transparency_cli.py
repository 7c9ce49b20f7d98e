"""`turnledger checkpoint` and `turnledger prove`: the transparency log's commands.

Exit codes, as for `turnledger audit`: 0 done, 1 integrity failure (the log
does not extend a checkpoint), 2 could not run (settings, key, files, store).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from turnledger.domain.errors import TurnLedgerError
from turnledger.domain.merkle import ProofError
from turnledger.infra.audit_cli import EXIT_CANNOT_RUN, EXIT_INTEGRITY, _uuid
from turnledger.infra.checkpoint import (
    LogInconsistentError,
    newest_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from turnledger.infra.progress import note
from turnledger.infra.proofs import prove_consistency, prove_event
from turnledger.infra.settings import Settings
from turnledger.infra.signing import new_signing_key, trusted_public_key


def register(subparsers: Any) -> None:
    checkpoint = subparsers.add_parser(
        "checkpoint",
        help="sign the transparency log's size and root into DIR (outside the DB)",
    )
    checkpoint.add_argument("--out", type=Path, metavar="DIR", help="where to write")
    checkpoint.add_argument(
        "--new-key",
        action="store_true",
        help="print a fresh signing key for TURNLEDGER_AUDIT_SIGNING_KEY and exit",
    )
    checkpoint.set_defaults(handler=run_checkpoint)

    prove = subparsers.add_parser(
        "prove", help="print an inclusion or consistency proof as JSON"
    )
    kinds = prove.add_subparsers(dest="proof", required=True)
    event = kinds.add_parser("event", help="an event is in a checkpoint's tree")
    event.add_argument("conversation", type=_uuid)
    event.add_argument("version", type=int)
    event.add_argument("--checkpoint", type=Path, required=True, metavar="FILE_OR_DIR")
    event.set_defaults(handler=run_prove_event)
    consistency = kinds.add_parser(
        "consistency", help="an older checkpoint's tree is a prefix of a newer one's"
    )
    consistency.add_argument("old", type=Path, metavar="OLD")
    consistency.add_argument("new", type=Path, metavar="NEW")
    consistency.set_defaults(handler=run_prove_consistency)


def guarded(action: Callable[[], int]) -> int:
    """Run a command: integrity failures exit 1, anything that stops it exits 2.

    Database errors go on to the CLI's shared handler (infra/cli.py), which
    says in one line which database could not be reached.
    """
    try:
        return action()
    except LogInconsistentError as error:
        print(f"turnledger: integrity failure: {error}", file=sys.stderr)
        return EXIT_INTEGRITY
    except (
        TurnLedgerError,
        ProofError,
        OSError,
    ) as error:
        print(f"turnledger: could not run: {error}", file=sys.stderr)
        return EXIT_CANNOT_RUN


def run_checkpoint(arguments: argparse.Namespace) -> int:
    if arguments.new_key:
        print(new_signing_key())
        return 0
    if arguments.out is None:
        print("turnledger: could not run: --out DIR is required", file=sys.stderr)
        return EXIT_CANNOT_RUN

    def action() -> int:
        settings = Settings()
        note(
            "checkpoint: hashing the log into its Merkle tree (a store's first "
            "checkpoint reads every event; later ones only what was added)..."
        )
        checkpoint = write_checkpoint(None, settings, arguments.out)
        print(
            f"checkpoint of {checkpoint.tree_size} events, root "
            f"{checkpoint.root_hash.hex()}, written to {checkpoint.path}"
        )
        return 0

    return guarded(action)


def run_prove_event(arguments: argparse.Namespace) -> int:
    def action() -> int:
        settings = Settings()
        checkpoint = newest_checkpoint(
            arguments.checkpoint, trusted_public_key(settings)
        )
        proof = prove_event(
            None, settings, arguments.conversation, arguments.version, checkpoint
        )
        print(json.dumps(proof, indent=2))
        return 0

    return guarded(action)


def run_prove_consistency(arguments: argparse.Namespace) -> int:
    def action() -> int:
        settings = Settings()
        trusted = trusted_public_key(settings)
        old = read_checkpoint(arguments.old, trusted)
        new = read_checkpoint(arguments.new, trusted)
        print(json.dumps(prove_consistency(None, settings, old, new), indent=2))
        return 0

    return guarded(action)
