"""What the restore check found (infra/restore.py): how the store compared
with the deletion record and the served mark, and what was redone."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from turnledger.infra.http.cursor import INITIAL_EPOCH, CursorEpoch
from turnledger.infra.restore_seen import LogSeen


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
