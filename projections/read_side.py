"""What queries and commands read from the read side, and an in-memory one.

Every store (SQLite, in a file or in memory, and PostgreSQL) answers these
with indexed lookups; none of them loads an aggregate. Answers are immutable
values. Queries that take `as_of` answer for that ledger version, which never
changes once written, so a window reports exactly the version its turns were
read at.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from typing import Protocol
from uuid import UUID

from turnledger.projections.ledger_rows import (
    ConversationRow,
    FoldRow,
    RowChanges,
    TurnRow,
)


class ReadSide(Protocol):
    def conversations(self, ids: Collection[UUID]) -> dict[UUID, ConversationRow]:
        """The rows of these conversations that exist."""
        ...

    def conversations_of(self, owner_id: str) -> list[ConversationRow]:
        """The owner's conversations, oldest first."""
        ...

    def heads_and_turns(
        self, turn_ids: Mapping[UUID, Collection[str]]
    ) -> tuple[dict[UUID, ConversationRow], dict[UUID, dict[str, TurnRow]]]:
        """What a batch of writes reads, in one round trip: the rows of these
        conversations, and of the named turns of each."""
        ...

    def turns_by_id(
        self, conversation_id: UUID, turn_ids: Collection[str]
    ) -> dict[str, TurnRow]:
        """The rows of those turns that exist."""
        ...

    def deleted_turns(
        self, turn_ids: Mapping[UUID, Collection[str]]
    ) -> set[tuple[UUID, str]]:
        """Which of the named turns of each conversation are deleted by now, as
        (conversation, turn) pairs: what the sync feed checks after opening
        their texts, without reading whole rows (one statement on
        PostgreSQL)."""
        ...

    def turns_page(
        self, conversation_id: UUID, *, offset: int, limit: int, as_of: int
    ) -> list[TurnRow]:
        """Turns recorded by `as_of`, oldest first, from position `offset`."""
        ...

    def eligible_newest_first(
        self, conversation_id: UUID, *, below: int, above: int, as_of: int, limit: int
    ) -> list[TurnRow]:
        """Turns eligible at `as_of` with `above < position < below`, newest first."""
        ...

    def eligible_ids(
        self, conversation_id: UUID, *, first: int, last: int, as_of: int
    ) -> tuple[str, ...]:
        """Ids of the turns eligible at `as_of` in positions first..last, in order."""
        ...

    def folds(self, conversation_id: UUID) -> list[FoldRow]:
        """Every fold of the conversation, oldest first."""
        ...

    def undeleted_turns(self, conversation_id: UUID) -> list[TurnRow]:
        """Every turn not deleted yet, oldest first (whole-history deletion)."""
        ...


def current_fold(folds: Iterable[FoldRow], as_of: int) -> FoldRow | None:
    """The newest fold live at `as_of`, if any."""
    live = [fold for fold in folds if fold.live_at(as_of)]
    return max(live, key=lambda fold: fold.version) if live else None


class LedgerView:
    """The read side in Python objects: a rebuild's and an audit's.

    No store keeps its rows here (the memory store is SQLite in memory): the
    audit and `rebuild` replay the log into a `LedgerView`
    (projections/log_replay.py, infra/service_layer/audit_receipts.py), so the
    rows they compare with, or write, come from code that shares no query
    with the stores' SQL.

    Thread-safe; `apply` takes a whole `RowChanges` at once, so a reader never
    sees half of a save.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._conversations: dict[UUID, ConversationRow] = {}
        self._turns: dict[UUID, list[TurnRow]] = {}
        self._positions: dict[tuple[UUID, str], int] = {}
        self._folds: dict[UUID, dict[str, FoldRow]] = {}

    # Writing ------------------------------------------------------------------

    def check(self, changes: RowChanges) -> None:
        """Raise ValueError if applying `changes` would break a unique key."""
        with self._lock:
            seen: set[tuple[UUID, str]] = set()
            for turn in changes.new_turns:
                key = (turn.conversation_id, turn.turn_id)
                if key in self._positions or key in seen:
                    raise ValueError(f"turn {turn.turn_id} is already recorded")
                seen.add(key)

    def apply(self, changes: RowChanges) -> None:
        with self._lock:
            self.check(changes)
            for conversation in changes.conversations:
                self._conversations[conversation.conversation_id] = conversation
            for turn in changes.new_turns:
                turns = self._turns.setdefault(turn.conversation_id, [])
                if turn.position != len(turns):
                    raise ValueError(f"turn {turn.turn_id} is out of position")
                turns.append(turn)
                self._positions[(turn.conversation_id, turn.turn_id)] = turn.position
            for deletion in changes.deletions:
                turns = self._turns[deletion.conversation_id]
                position = self._positions[(deletion.conversation_id, deletion.turn_id)]
                turns[position] = replace(
                    turns[position],
                    deleted_version=deletion.deleted_version,
                    deleted_at=deletion.deleted_at,
                    sizes=None,
                )
            for fold in changes.new_folds:
                self._folds.setdefault(fold.conversation_id, {})[fold.fold_id] = fold
            for withdrawal in changes.withdrawals:
                folds = self._folds[withdrawal.conversation_id]
                folds[withdrawal.fold_id] = replace(
                    folds[withdrawal.fold_id],
                    withdrawn_version=withdrawal.withdrawn_version,
                    summary_json_bytes=None,
                    summary_chars=None,
                )

    def rows(
        self,
    ) -> tuple[list[ConversationRow], list[TurnRow], list[FoldRow]]:
        """Every row, for writing a rebuilt read side or comparing two."""
        with self._lock:
            return (
                sorted(self._conversations.values(), key=lambda r: r.conversation_id),
                [turn for key in sorted(self._turns) for turn in self._turns[key]],
                [
                    fold
                    for key in sorted(self._folds)
                    for fold in sorted(
                        self._folds[key].values(), key=lambda f: f.version
                    )
                ],
            )

    # Reading ------------------------------------------------------------------

    def conversations(self, ids: Collection[UUID]) -> dict[UUID, ConversationRow]:
        with self._lock:
            return {i: self._conversations[i] for i in ids if i in self._conversations}

    def heads_and_turns(
        self, turn_ids: Mapping[UUID, Collection[str]]
    ) -> tuple[dict[UUID, ConversationRow], dict[UUID, dict[str, TurnRow]]]:
        with self._lock:
            return self.conversations(turn_ids.keys()), {
                conversation_id: self.turns_by_id(conversation_id, ids)
                for conversation_id, ids in turn_ids.items()
                if ids
            }

    def deleted_turns(
        self, turn_ids: Mapping[UUID, Collection[str]]
    ) -> set[tuple[UUID, str]]:
        with self._lock:
            return {
                (conversation_id, turn_id)
                for conversation_id, ids in turn_ids.items()
                for turn_id, row in self.turns_by_id(conversation_id, ids).items()
                if row.deleted
            }

    def conversations_of(self, owner_id: str) -> list[ConversationRow]:
        with self._lock:
            mine = [r for r in self._conversations.values() if r.owner_id == owner_id]
        return sorted(mine, key=lambda r: (r.created_at, r.conversation_id))

    def turns_by_id(
        self, conversation_id: UUID, turn_ids: Collection[str]
    ) -> dict[str, TurnRow]:
        with self._lock:
            turns = self._turns.get(conversation_id, [])
            found = {}
            for turn_id in turn_ids:
                position = self._positions.get((conversation_id, turn_id))
                if position is not None:
                    found[turn_id] = turns[position]
            return found

    def turns_page(
        self, conversation_id: UUID, *, offset: int, limit: int, as_of: int
    ) -> list[TurnRow]:
        with self._lock:
            turns = self._turns.get(conversation_id, [])
            return [t for t in turns[offset : offset + limit] if t.version <= as_of]

    def eligible_newest_first(
        self, conversation_id: UUID, *, below: int, above: int, as_of: int, limit: int
    ) -> list[TurnRow]:
        found: list[TurnRow] = []
        with self._lock:
            turns = self._turns.get(conversation_id, [])
            position = min(below, len(turns)) - 1
            while position > above and len(found) < limit:
                turn = turns[position]
                if turn.eligible_at(as_of):
                    found.append(turn)
                position -= 1
        return found

    def eligible_ids(
        self, conversation_id: UUID, *, first: int, last: int, as_of: int
    ) -> tuple[str, ...]:
        with self._lock:
            turns = self._turns.get(conversation_id, [])
            return tuple(
                t.turn_id for t in turns[first : last + 1] if t.eligible_at(as_of)
            )

    def folds(self, conversation_id: UUID) -> list[FoldRow]:
        with self._lock:
            folds = self._folds.get(conversation_id, {})
            return sorted(folds.values(), key=lambda f: f.version)

    def undeleted_turns(self, conversation_id: UUID) -> list[TurnRow]:
        with self._lock:
            return [t for t in self._turns.get(conversation_id, []) if not t.deleted]
