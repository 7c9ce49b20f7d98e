"""The restore check: a store compared with the deletion record kept outside it.

A backup taken before a deletion still holds the deleted turns' keys. When
such a backup is restored, the record (which the backup did not roll back)
names keys the store has not destroyed: they are destroyed again, the turns
that still stand in the restored log are deleted again there (so every read,
device and audit sees them deleted), and the key store is compacted, all
before the store serves anything. A backup restored with no deletion since
is found by the log position kept beside the record (infra/restore_seen.py):
the restored log ends below a position cursors were issued at. Either restore
starts a new cursor epoch (infra/http/cursor.py): devices whose cursors the
restored log no longer extends are told to sync again, however far the log
grows afterwards. docs/deletion.md, "Restores".

The check is made in steps: which record the store follows and whether it
is that one (here), the comparison (here), the report (restore_report.py),
the deletions redone (restore_redo.py) and the cursor epoch
(restore_epoch.py); the names they define are importable from here too.
"""

from __future__ import annotations

import gc
import logging
import secrets
from pathlib import Path

from turnledger.infra.deletion_record import (
    DeletionRecord,
    DeletionRecordError,
    DeletionRecordLostError,
    KeyRef,
    RecordState,
)
from turnledger.infra.keystore import KeyStore
from turnledger.infra.restore_epoch import (
    EPOCH_META,
    advance_served,
    epoch_of,
    mark_served,
    next_cursor_epoch,
    read_cursor_epoch,
    write_cursor_epoch,
)
from turnledger.infra.restore_redo import RESTORE_ACTOR, redo_deletions
from turnledger.infra.restore_report import RestoreReport
from turnledger.infra.restore_seen import LogSeen
from turnledger.infra.service_layer.application import Conversations

__all__ = [
    "EPOCH_META",
    "RECORD_META",
    "RESTORE_ACTOR",
    "RestoreReport",
    "advance_served",
    "check_read_only",
    "check_restore",
    "deletion_record",
    "epoch_of",
    "mark_served",
    "next_cursor_epoch",
    "read_cursor_epoch",
    "rebuild_record",
]

_log = logging.getLogger(__name__)

# The key store's metadata naming the record it follows.
RECORD_META = "deletion_record_id"


def check_restore(
    ledger: Conversations,
    store: KeyStore,
    record: DeletionRecord,
    *,
    apply: bool,
) -> RestoreReport:
    """Compare `store` with `record`; with `apply`, redo what the store lacks.

    Without `apply` (read-only opens), a store behind the record is refused:
    it would serve text whose deletion the record remembers.
    """
    # Hundreds of thousands of small tuples, none of them cyclic: the cyclic
    # collector would walk them again and again while they are made.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _check(ledger, store, record, apply=apply)
    finally:
        if enabled:
            gc.enable()


def _check(
    ledger: Conversations,
    store: KeyStore,
    record: DeletionRecord,
    *,
    apply: bool,
) -> RestoreReport:
    attached = store.read_meta(RECORD_META)
    if attached is not None and attached != record.record_id and not record.exists():
        # `record` was named from a read made before another process, opening
        # the same fresh store at the same time, attached it: follow that one.
        record = _named(record, attached)
    created = False
    if not record.exists():
        if attached is not None:
            raise _lost(record, attached)
        if not apply:
            return RestoreReport(record.path)
        record.create()
        created = True
    state = record.load()
    if attached is not None and attached != state.record_id:
        raise DeletionRecordLostError(
            f"the deletion record {record.path} is record {state.record_id}, "
            f"but this store follows record {attached}: point "
            "TURNLEDGER_DELETION_RECORD_DIR at its own record"
        )
    destroyed = store.destroyed_key_ids()
    state, adopted = _adopt_unrecorded(
        record, state, destroyed, attached=attached, apply=apply
    )
    if apply:
        store.deletion_record = record  # every later destruction is recorded
    missing = {key for key in state.ids if key not in destroyed}
    report = _compare(
        ledger, store, record, state, missing, adopted=adopted, apply=apply
    )
    if missing and not apply:
        raise DeletionRecordError(
            f"this store was restored from before {report.deletions_behind} "
            f"deletion(s) that {record.path} remembers: run `turnledger "
            "restore-check` (or start the service) to delete them again before "
            "anything is read"
        )
    if missing:
        report = redo_deletions(ledger, store, missing, report)
    if apply and attached is None:
        # Attach only if no other opening did meanwhile: the first to attach
        # wins, and a loser follows the winner's record (which holds every
        # key the store had destroyed: the winner adopted them before
        # attaching) instead of leaving the store's record id flapping.
        winner = store.claim_meta(RECORD_META, state.record_id)
        if winner != state.record_id:
            if created:  # never attached, never named anywhere: no one's record
                record.path.unlink(missing_ok=True)
            return _check(ledger, store, _named(record, winner), apply=apply)
    if apply:
        _settle_seen(report)
    return report


def _lost(record: DeletionRecord, attached: str) -> DeletionRecordLostError:
    return DeletionRecordLostError(
        f"the deletion record {record.path} is missing, and this store "
        f"follows record {attached}: put it back, or run `turnledger "
        "restore-check --rebuild-record` to start a new one from the "
        "store's own list (deletions made after this store's backup are "
        "then forgotten: see docs/deletion.md)"
    )


def _adopt_unrecorded(
    record: DeletionRecord,
    state: RecordState,
    destroyed: set[KeyRef],
    *,
    attached: str | None,
    apply: bool,
) -> tuple[RecordState, bool]:
    """The record's state once it holds every key the store destroyed, and
    whether it was caught up from the store's list: only a store from before
    the record existed (attached to none) may lack keys in it."""
    unrecorded = {key for key in destroyed if key not in state.ids}
    if not unrecorded:
        return state, False
    if attached is not None:
        raise DeletionRecordLostError(
            f"the deletion record {record.path} lacks {len(unrecorded)} "
            "destroyed key(s) this store knows: it was rolled back or "
            "replaced. Put the newest copy back, or run `turnledger "
            "restore-check --rebuild-record` (docs/deletion.md)"
        )
    if not apply:
        return state, False
    record.remember_all(unrecorded, position=0)
    return record.load(), True


def _compare(
    ledger: Conversations,
    store: KeyStore,
    record: DeletionRecord,
    state: RecordState,
    missing: set[KeyRef],
    *,
    adopted: bool,
    apply: bool,
) -> RestoreReport:
    """Where the store stands against the record and the served mark; with
    `apply`, a restore found begins a new cursor epoch."""
    log_head = ledger.recorder.max_notification_id() or 0
    seen = LogSeen(record)
    seen_position = seen.read()
    epoch = read_cursor_epoch(store)
    if (missing or seen_position > log_head) and apply:
        # Before anything is redone: the redone deletions are new events at
        # positions past the restored head, which old cursors may name.
        epoch = next_cursor_epoch(epoch, log_head)
        write_cursor_epoch(store, epoch)
    return RestoreReport(
        record.path,
        deletions_behind=state.entries_naming(missing),
        keys_behind=len(missing),
        adopted=adopted,
        log_head=log_head,
        recorded_position=state.max_position,
        cursor_epoch=epoch,
        seen_position=seen_position,
        log_seen=seen,
    )


def _settle_seen(report: RestoreReport) -> None:
    """Bring the served mark to the log's head once the check is done."""
    assert report.log_seen is not None
    if report.rolled_back:
        # The new epoch is durable: the mark comes down to the restored
        # head, or every opening would find this restore again.
        report.log_seen.lower(report.log_head)
    else:
        report.log_seen.advance(report.log_head)


def _named(record: DeletionRecord, record_id: str) -> DeletionRecord:
    """The record `record_id` in the same directory as `record`."""
    return DeletionRecord(record.path.parent / _file_name(record_id), record_id)


def _file_name(record_id: str) -> str:
    return f"deletions-{record_id}.log"


def check_read_only(
    ledger: Conversations, store: KeyStore, record: DeletionRecord
) -> None:
    """Refuse to read a store behind its record. A lost record is only warned
    about here: reading changes nothing, and an auditor on another host may
    not hold it; every opening that writes refuses (docs/deletion.md)."""
    try:
        report = check_restore(ledger, store, record, apply=False)
    except DeletionRecordLostError as error:
        _log.warning("turnledger: WARNING: %s", error)
        return
    if report.rolled_back:
        # Nothing deleted comes back (the record has nothing the store
        # lacks); the next opening that writes starts the new cursor epoch.
        _log.warning("turnledger: WARNING: %s", report.describe())


def deletion_record(directory: Path, store: KeyStore) -> DeletionRecord:
    """The record this store follows, or the one it will start, in `directory`."""
    record_id = store.read_meta(RECORD_META) or secrets.token_hex(16)
    return DeletionRecord(directory / _file_name(record_id), record_id)


def rebuild_record(store: KeyStore, record: DeletionRecord) -> RecordState:
    """Make the record agree with the store after the record was lost: keep
    what is left of it (or start a new one), add the store's destroyed keys,
    and attach the store to it. Deletions only the lost record knew are gone."""
    if not record.exists():
        record.create()
    state = record.load()
    record.remember_all(store.destroyed_key_ids() - state.ids.keys(), position=0)
    store.write_meta(RECORD_META, state.record_id)
    return record.load()
