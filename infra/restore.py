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
"""

from __future__ import annotations

import gc
import logging
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
from eventsourcing.persistence import Tracking

from turnledger.infra.deletion_record import (
    DeletionRecord,
    DeletionRecordError,
    DeletionRecordLostError,
    KeyRef,
    RecordState,
)
from turnledger.infra.http.cursor import INITIAL_EPOCH, CursorEpoch
from turnledger.infra.keystore import KeyStore
from turnledger.infra.restore_seen import LogSeen
from turnledger.infra.service_layer.application import Conversations

_log = logging.getLogger(__name__)

# The key store's metadata naming the record it follows.
RECORD_META = "deletion_record_id"
# ... holding the cursor epoch (JSON: current, previous, head).
EPOCH_META = "cursor_epoch"
# Who a deletion redone after a restore is recorded as deleted by.
RESTORE_ACTOR = "turnledger:restore-check"


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """How the store compared with the record, and what was redone."""

    record_path: Path
    # Deletions in the record that the store had not applied (0: not restored
    # from before any deletion), and their keys.
    deletions_behind: int = 0
    keys_behind: int = 0
    turns_deleted_again: int = 0
    keys_destroyed_again: int = 0
    compaction_pending: bool = False
    # The record was started (or caught up) from this store's own list.
    adopted: bool = False
    # Where the restored log ended, and the highest log position a recorded
    # deletion was at: beyond the first, devices' cursors name events the
    # restore lost, and positions later events will reuse.
    log_head: int = 0
    recorded_position: int = 0
    # The cursor epoch the store is in after the check (a new one if it found
    # a restore).
    cursor_epoch: CursorEpoch = INITIAL_EPOCH
    # The highest log position cursors were issued at before this opening, as
    # kept beside the record (infra/restore_seen.py; 0: none kept yet).
    seen_position: int = 0
    # The mark itself, which the sync route advances before each cursor.
    log_seen: LogSeen | None = field(default=None, compare=False, repr=False)

    @property
    def rolled_back(self) -> bool:
        """The log ends below a position already served: restored from an
        older backup (or rolled back), deletions since or not."""
        return self.seen_position > self.log_head

    @property
    def log_rewound(self) -> bool:
        return self.rolled_back or (
            self.deletions_behind > 0 and self.recorded_position > self.log_head
        )

    @property
    def restored(self) -> bool:
        return self.deletions_behind > 0 or self.rolled_back

    def describe(self) -> str:
        if not self.restored:
            return f"the store agrees with the deletion record {self.record_path}"
        pending = " (compaction pending)" if self.compaction_pending else ""
        seen = max(self.seen_position, self.recorded_position)
        return (
            (
                f"the store was restored from before {self.deletions_behind} "
                f"deletion(s) recorded in {self.record_path}: "
                f"{self.keys_destroyed_again} key(s) destroyed again, "
                f"{self.turns_deleted_again} turn(s) deleted again in the log"
                f"{pending}"
                if self.deletions_behind
                else "the store was restored from an older backup or rolled "
                f"back (no deletion since, by {self.record_path})"
            )
            + (
                f"; the restored log ended at position {self.log_head}, "
                f"positions up to {seen} were served or recorded before: devices "
                f"that synced past {self.log_head} must sync again from the "
                "beginning"
                if self.log_rewound
                else ""
            )
            + "; a new cursor epoch began: a cursor from before it past position "
            f"{self.cursor_epoch.head} is answered cursor_expired"
        )


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
            raise DeletionRecordLostError(
                f"the deletion record {record.path} is missing, and this store "
                f"follows record {attached}: put it back, or run `turnledger "
                "restore-check --rebuild-record` to start a new one from the "
                "store's own list (deletions made after this store's backup are "
                "then forgotten: see docs/deletion.md)"
            )
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
    recorded = state.ids
    unrecorded = {key for key in destroyed if key not in recorded}
    adopted = False
    if unrecorded:
        if attached is not None:
            raise DeletionRecordLostError(
                f"the deletion record {record.path} lacks {len(unrecorded)} "
                "destroyed key(s) this store knows: it was rolled back or "
                "replaced. Put the newest copy back, or run `turnledger "
                "restore-check --rebuild-record` (docs/deletion.md)"
            )
        if apply:  # a store from before the record existed
            record.remember_all(unrecorded, position=0)
            state = record.load()
            adopted = True
    if apply:
        store.deletion_record = record  # every later destruction is recorded
    missing = {key for key in state.ids if key not in destroyed}
    behind = state.entries_naming(missing)
    log_head = ledger.recorder.max_notification_id() or 0
    seen = LogSeen(record)
    seen_position = seen.read()
    epoch = read_cursor_epoch(store)
    if (missing or seen_position > log_head) and apply:
        # Before anything is redone: the redone deletions are new events at
        # positions past the restored head, which old cursors may name.
        epoch = next_cursor_epoch(epoch, log_head)
        store.write_meta(EPOCH_META, _epoch_json(epoch))
    report = RestoreReport(
        record.path,
        deletions_behind=behind,
        keys_behind=len(missing),
        adopted=adopted,
        log_head=log_head,
        recorded_position=state.max_position,
        cursor_epoch=epoch,
        seen_position=seen_position,
        log_seen=seen,
    )
    if missing and not apply:
        raise DeletionRecordError(
            f"this store was restored from before {behind} deletion(s) that "
            f"{record.path} remembers: run `turnledger restore-check` (or start "
            "the service) to delete them again before anything is read"
        )
    if missing:
        report = _redo(ledger, store, missing, report)
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
        if report.rolled_back:
            # The new epoch is durable: the mark comes down to the restored
            # head, or every opening would find this restore again.
            seen.lower(log_head)
        else:
            seen.advance(log_head)
    return report


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


def _redo(
    ledger: Conversations,
    store: KeyStore,
    missing: set[KeyRef],
    report: RestoreReport,
) -> RestoreReport:
    by_conversation = _group(missing)
    turns_deleted = present = 0
    rows = ledger.read_side.conversations(list(by_conversation))
    for conversation_id, key_ids in sorted(by_conversation.items()):
        row = rows.get(conversation_id)
        if row is None:
            continue  # written after the backup: nothing of it was restored
        live = sorted(
            turn.turn_id
            for turn in ledger.read_side.undeleted_turns(conversation_id)
            if turn.turn_id in key_ids
        )
        if live:
            # Recorded in the log as any deletion is; its purge destroys the
            # keys and compacts the key store before this returns.
            receipt = ledger.delete_history(
                row.owner_id,
                conversation_id,
                turn_ids=live,
                deleted_by=RESTORE_ACTOR,
            )
            turns_deleted += len(receipt.deleted_turn_ids)
            if receipt.purge is not None:
                present += receipt.purge.keys_destroyed
    # Keys whose turns are not (or no longer) standing in the restored log:
    # a fold's, or one stored just before its event when the copy was taken.
    remaining = missing - store.destroyed_key_ids()
    position = store.max_tracking_id(ledger.name) or 0
    for conversation_id, key_ids in sorted(_group(remaining).items()):
        present += store.destroy_keys(
            conversation_id, key_ids, Tracking(ledger.name, position)
        )
    pending = False
    if remaining:
        pending = not store.compact(ledger.name)
    return RestoreReport(
        report.record_path,
        deletions_behind=report.deletions_behind,
        keys_behind=report.keys_behind,
        turns_deleted_again=turns_deleted,
        keys_destroyed_again=present,
        compaction_pending=pending or store.needs_compaction(ledger.name),
        adopted=report.adopted,
        log_head=report.log_head,
        recorded_position=report.recorded_position,
        cursor_epoch=report.cursor_epoch,
        seen_position=report.seen_position,
        log_seen=report.log_seen,
    )


def read_cursor_epoch(store: KeyStore) -> CursorEpoch:
    """The store's cursor epoch (epoch 0 if it was never found restored)."""
    value = store.read_meta(EPOCH_META)
    if value is None:
        return INITIAL_EPOCH
    try:
        fields = orjson.loads(value)
        return CursorEpoch(
            current=_epoch_number(fields["current"]),
            previous=_epoch_number(fields["previous"]),
            head=_epoch_number(fields["head"]),
        )
    except (ValueError, KeyError, TypeError):
        # Unreadable: refuse every cursor from an epoch it cannot vouch for.
        _log.warning("turnledger: WARNING: the cursor epoch is unreadable")
        return CursorEpoch(current=_new_epoch(), previous=0, head=0)


def next_cursor_epoch(epoch: CursorEpoch, log_head: int) -> CursorEpoch:
    """The epoch after a restore whose log ended at `log_head`. Random, not
    counted: restoring the same backup twice must not bring back an epoch
    whose cursors the first restore's log issued."""
    return CursorEpoch(current=_new_epoch(), previous=epoch.current, head=log_head)


def mark_served(ledger: Conversations, position: int) -> bool:
    """Whether a cursor at `position` must first advance the mark kept beside
    the deletion record (`advance_served`, off the event loop: it fsyncs)."""
    report: RestoreReport | None = ledger.restore_report
    return report is not None and report.log_seen is not None and (
        report.log_seen.needs(position)
    )


def advance_served(ledger: Conversations, position: int) -> None:
    """Make `position` durable beside the record before a cursor names it."""
    report: RestoreReport | None = ledger.restore_report
    if report is not None and report.log_seen is not None:
        report.log_seen.advance(position)


def epoch_of(ledger: Conversations) -> CursorEpoch:
    """The cursor epoch the opening of `ledger` found or began."""
    report: RestoreReport | None = ledger.restore_report
    return INITIAL_EPOCH if report is None else report.cursor_epoch


def _new_epoch() -> int:
    return 1 + secrets.randbelow(2**64 - 1)


def _epoch_number(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(value)
    if not 0 <= value < 2**64:
        raise ValueError(value)
    return value


def _epoch_json(epoch: CursorEpoch) -> str:
    return orjson.dumps(
        {"current": epoch.current, "previous": epoch.previous, "head": epoch.head}
    ).decode()


def _group(ids: Iterable[KeyRef]) -> dict[UUID, set[str]]:
    grouped: dict[UUID, set[str]] = {}
    for conversation_hex, key_id in ids:
        grouped.setdefault(UUID(hex=conversation_hex), set()).add(key_id)
    return grouped
