"""The read side's rows, and the pure projector that derives them from events.

Three tables follow the log: one row per turn, one per conversation, one per
fold. Every store writes them in the same transaction as the events that
change them (strongly consistent: nothing to catch up), and `turnledger
rebuild` derives them again from the log alone. Rows only ever gain facts:
a turn row is inserted once, then at most marked deleted (its sizes erased);
a fold row is at most marked withdrawn. Each mark names the ledger version
that made it, so a query "as of version v" reads the same answer forever.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from uuid import UUID

from turnledger.domain.conversation import (
    Conversation,
    FoldFacts,
    TurnFacts,
    TurnSizes,
    TurnStatus,
)


@dataclass(frozen=True, slots=True)
class TurnRow:
    conversation_id: UUID
    position: int  # 0-based, in the order turns were recorded
    turn_id: str
    status: TurnStatus
    version: int  # of the event that holds the sealed text
    recorded_at: datetime
    sizes: TurnSizes | None  # None once deleted: nothing of a deleted turn stays
    deleted_version: int | None = None
    deleted_at: datetime | None = None

    @property
    def deleted(self) -> bool:
        return self.deleted_version is not None

    def eligible_at(self, version: int) -> bool:
        """Whether the turn could be sent in a window at ledger `version`."""
        return (
            self.status is TurnStatus.CONFIRMED
            and self.version <= version
            and (self.deleted_version is None or self.deleted_version > version)
        )

    def facts(self) -> TurnFacts:
        return TurnFacts(
            turn_id=self.turn_id,
            position=self.position,
            status=self.status,
            version=self.version,
            recorded_at=self.recorded_at,
            deleted_version=self.deleted_version,
        )


@dataclass(frozen=True, slots=True)
class ConversationRow:
    conversation_id: UUID
    owner_id: str
    version: int
    head_digest: str  # chain digest of the event at `version`
    turn_count: int
    eligible_count: int  # confirmed and not deleted, at `version`
    created_at: datetime
    modified_at: datetime

    @property
    def id(self) -> UUID:
        return self.conversation_id


@dataclass(frozen=True, slots=True)
class FoldRow:
    conversation_id: UUID
    fold_id: str
    version: int  # of the event holding the sealed summary
    recorded_at: datetime
    covers_through_turn_id: str
    covers_through_position: int
    covered_turns: int
    covered_eligible: int
    summary_json_bytes: int | None  # None once withdrawn
    summary_chars: int | None
    withdrawn_version: int | None = None

    def live_at(self, version: int) -> bool:
        return self.version <= version and (
            self.withdrawn_version is None or self.withdrawn_version > version
        )

    def facts(self) -> FoldFacts:
        return FoldFacts(
            fold_id=self.fold_id,
            covers_through_position=self.covers_through_position,
            covered_turns=self.covered_turns,
        )


@dataclass(frozen=True, slots=True)
class TurnDeletion:
    conversation_id: UUID
    turn_id: str
    deleted_version: int
    deleted_at: datetime


@dataclass(frozen=True, slots=True)
class FoldWithdrawal:
    conversation_id: UUID
    fold_id: str
    withdrawn_version: int


@dataclass(frozen=True, slots=True)
class RowChanges:
    """Everything one save writes to the read side beside its events."""

    conversations: tuple[ConversationRow, ...] = ()  # whole rows, upserted
    new_turns: tuple[TurnRow, ...] = ()
    deletions: tuple[TurnDeletion, ...] = ()
    new_folds: tuple[FoldRow, ...] = ()
    withdrawals: tuple[FoldWithdrawal, ...] = ()

    @staticmethod
    def joined(parts: Sequence[RowChanges]) -> RowChanges:
        """The rows of all `parts` (e.g. each conversation's of a batch), in
        their order, gathered in one pass: adding them pairwise would copy
        every row gathered so far again for each part."""
        if len(parts) == 1:
            return parts[0]
        return RowChanges(
            conversations=tuple(row for part in parts for row in part.conversations),
            new_turns=tuple(row for part in parts for row in part.new_turns),
            deletions=tuple(row for part in parts for row in part.deletions),
            new_folds=tuple(row for part in parts for row in part.new_folds),
            withdrawals=tuple(row for part in parts for row in part.withdrawals),
        )


@dataclass(frozen=True, slots=True)
class SummarySize:
    json_bytes: int
    chars: int


def project_events(
    *,
    head: ConversationRow | None,
    events: Sequence[Any],
    digests: Sequence[str],
    sizes: Mapping[str, TurnSizes | SummarySize],
    known_turns: Mapping[str, TurnRow],
) -> RowChanges:
    """The rows that `events` (new events of one conversation, in order) change.

    `head` is the conversation's row before them (None for a new one);
    `digests` the chain digest each event was stored with; `sizes` the sizes of
    each new turn's texts (by turn id) and each fold's summary (by fold id);
    `known_turns` the rows of every turn the events delete.
    """
    walk = _RowWalk(sizes, known_turns)
    row = head
    for event, digest in zip(events, digests, strict=True):
        row = walk.step(row, event, digest)
    return RowChanges(
        conversations=() if row is None or row is head else (row,),
        new_turns=tuple(walk.new_turns),
        deletions=tuple(walk.deletions),
        new_folds=tuple(walk.new_folds),
        withdrawals=tuple(walk.withdrawals),
    )


class _RowWalk:
    """What `project_events` gathers while it walks the events, one at a time."""

    __slots__ = ("deletions", "new_folds", "new_turns", "sizes", "turns", "withdrawals")

    def __init__(
        self,
        sizes: Mapping[str, TurnSizes | SummarySize],
        known_turns: Mapping[str, TurnRow],
    ) -> None:
        self.sizes = sizes
        self.turns = {**known_turns}  # and the turns recorded on the way
        self.new_turns: list[TurnRow] = []
        self.deletions: list[TurnDeletion] = []
        self.new_folds: list[FoldRow] = []
        self.withdrawals: list[FoldWithdrawal] = []

    def step(
        self, row: ConversationRow | None, event: Any, digest: str
    ) -> ConversationRow:
        """The conversation's row after `event`, noting the rows it adds or marks."""
        version = event.originator_version
        at = event.timestamp
        if isinstance(event, Conversation.Started):
            return ConversationRow(
                conversation_id=event.originator_id,
                owner_id=event.owner_id,
                version=version,
                head_digest=digest,
                turn_count=0,
                eligible_count=0,
                created_at=at,
                modified_at=at,
            )
        if row is None:
            raise ValueError(f"event at version {version} precedes Started")
        turn_count, eligible = row.turn_count, row.eligible_count
        if isinstance(event, Conversation.TurnConfirmed | Conversation.TurnAbandoned):
            confirmed = self._turn_recorded(row, event)
            turn_count += 1
            eligible += confirmed
        elif isinstance(event, Conversation.HistoryDeleted):
            eligible -= self._turns_deleted(row, event)
        elif isinstance(event, Conversation.FoldRecorded):
            self._fold_recorded(row, event)
        elif isinstance(event, Conversation.FoldWithdrawn):
            for fold_id in event.fold_ids:
                self.withdrawals.append(
                    FoldWithdrawal(row.conversation_id, fold_id, version)
                )
        return replace(
            row,
            version=version,
            head_digest=digest,
            turn_count=turn_count,
            eligible_count=eligible,
            modified_at=at,
        )

    def _turn_recorded(self, row: ConversationRow, event: Any) -> bool:
        """Add the turn's row; whether it counts as eligible."""
        status = (
            TurnStatus.CONFIRMED
            if isinstance(event, Conversation.TurnConfirmed)
            else TurnStatus(event.outcome)
        )
        size = self.sizes.get(event.turn_id)
        turn = TurnRow(
            conversation_id=row.conversation_id,
            position=row.turn_count,
            turn_id=event.turn_id,
            status=status,
            version=event.originator_version,
            recorded_at=event.timestamp,
            sizes=size if isinstance(size, TurnSizes) else None,
        )
        self.new_turns.append(turn)
        self.turns[turn.turn_id] = turn
        return status is TurnStatus.CONFIRMED

    def _turns_deleted(self, row: ConversationRow, event: Any) -> int:
        """Mark the turns deleted; how many of them were eligible."""
        version, at = event.originator_version, event.timestamp
        were_eligible = 0
        for turn_id in event.turn_ids:
            known = self.turns[turn_id]
            if known.eligible_at(version):
                were_eligible += 1
            self.deletions.append(
                TurnDeletion(row.conversation_id, turn_id, version, at)
            )
            self.turns[turn_id] = replace(
                known, deleted_version=version, deleted_at=at, sizes=None
            )
        return were_eligible

    def _fold_recorded(self, row: ConversationRow, event: Any) -> None:
        through = self.turns[event.covers_through_turn_id]
        summary = self.sizes.get(f"fold/{event.fold_id}")
        self.new_folds.append(
            FoldRow(
                conversation_id=row.conversation_id,
                fold_id=event.fold_id,
                version=event.originator_version,
                recorded_at=event.timestamp,
                covers_through_turn_id=event.covers_through_turn_id,
                covers_through_position=through.position,
                covered_turns=event.covered_turns,
                covered_eligible=event.covered_eligible,
                summary_json_bytes=(
                    summary.json_bytes if isinstance(summary, SummarySize) else None
                ),
                summary_chars=(
                    summary.chars if isinstance(summary, SummarySize) else None
                ),
            )
        )
