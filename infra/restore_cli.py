"""`turnledger restore-check` and `turnledger rotate-master-key`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from turnledger.infra.exit_codes import EXIT_PENDING
from turnledger.infra.persistence import key_store, master_key, open_conversations
from turnledger.infra.restore import deletion_record, rebuild_record
from turnledger.infra.settings import Settings
from turnledger.infra.vault import (
    KeyVault,
    MasterKeyError,
    load_or_create_key_file,
    master_key_id,
    new_master_key,
)


def register(subparsers: Any) -> None:
    check = subparsers.add_parser(
        "restore-check",
        help="compare the store with the deletion record; delete again what a "
        "restored backup brought back",
        description=(
            "Every start-up does this too. Keys the deletion record says were "
            "destroyed are destroyed again, their turns deleted again in the log "
            "and the key store compacted. Exit status 0 when the store agrees "
            "with the record, 3 when compaction is pending, 1 when the record "
            "is missing, altered or behind the store (docs/deletion.md)."
        ),
    )
    check.add_argument(
        "--rebuild-record",
        action="store_true",
        help="the record was lost: keep what is left of it, add every key the "
        "store destroyed, and follow it from now on",
    )
    check.set_defaults(handler=run_restore_check)

    rotate = subparsers.add_parser(
        "rotate-master-key",
        help="rewrap every turn key under a new master key (stop the service first)",
    )
    rotate.add_argument(
        "--new-key-file",
        type=Path,
        required=True,
        help="file holding the new key (base64 of 32 bytes, mode 0600)",
    )
    rotate.add_argument(
        "--generate",
        action="store_true",
        help="write a new random key to --new-key-file first (it must not exist)",
    )
    rotate.set_defaults(handler=run_rotate)


def run_restore_check(arguments: argparse.Namespace) -> int:
    settings = Settings()
    if arguments.rebuild_record:
        keys = key_store(settings)
        try:
            KeyVault(keys, master_key(settings, create=False)).check_master_key(
                remember=False
            )
            record = deletion_record(settings.deletion_record_directory, keys)
            state = rebuild_record(keys, record)
        finally:
            keys.close()
        print(f"deletion record {record.path} rebuilt: {len(state.ids)} key id(s)")
    ledger = open_conversations(settings)
    try:
        report = ledger.restore_report
        purge = ledger.purge.state()
    finally:
        ledger.close()
    if report is not None:
        print(report.describe())
    pending = purge.compaction_pending or bool(report and report.compaction_pending)
    print(f"compaction {'pending' if pending else 'complete'}")
    return EXIT_PENDING if pending else 0


def run_rotate(arguments: argparse.Namespace) -> int:
    settings = Settings()
    path: Path = arguments.new_key_file
    if arguments.generate:
        _write_new_key(path)
    elif not path.is_file():
        raise MasterKeyError(f"--new-key-file {path} is not a file")
    new_key = load_or_create_key_file(path)
    keys = key_store(settings)
    try:
        vault = KeyVault(keys, master_key(settings, create=False))
        vault.check_master_key(remember=False)
        count = vault.rotate_master_key(new_key)
    finally:
        keys.close()
    print(f"{count} turn key(s) rewrapped under master key {master_key_id(new_key)}")
    if _uses_default_key_file(settings):
        _replace_key_file(settings.default_master_key_path, path)
        print(f"{settings.default_master_key_path} now holds the new key")
    else:
        print(
            f"configure the new key now (TURNLEDGER_MASTER_KEY_FILE={path}): the "
            "old one is refused from here on"
        )
    return 0


def _uses_default_key_file(settings: Settings) -> bool:
    return (
        settings.persistence == "sqlite"
        and settings.master_key is None
        and settings.master_key_file is None
    )


def _write_new_key(path: Path) -> None:
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise MasterKeyError(
            f"{path} exists: --generate never overwrites a key"
        ) from None
    with os.fdopen(descriptor, "w") as handle:
        handle.write(new_master_key() + "\n")


def _replace_key_file(target: Path, source: Path) -> None:
    staged = target.with_name(target.name + ".new")
    descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(source.read_text())
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staged, target)
