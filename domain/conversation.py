"""The Conversation aggregate: what was said, in order, and what was deleted.

The aggregate is deliberately lean. It keeps, per turn, the facts its rules and
the request window need (id, order, status, deletion mark, sizes, the version
of the event that holds the sealed text) and never the text itself, so that
snapshots of a long conversation stay small and contain nothing a deletion
would have to chase.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from itertools import islice
from typing import Any

from eventsourcing.domain import Aggregate, event

from turnledger.domain.errors import (
    FoldConflictError,
    TurnConflictError,
    TurnDeletedError,
    TurnNotFoundError,
    VersionConflictError,
)


class TurnStatus(StrEnum):
    CONFIRMED = "confirmed"
    FAILED = "failed"
    STOPPED = "stopped"


UNSENT_OUTCOMES = frozenset({TurnStatus.FAILED, TurnStatus.STOPPED})


@dataclass(frozen=True, slots=True)
class TurnEntry:
    """What the aggregate remembers about one turn."""

    turn_id: str
    status: TurnStatus
    version: int
    recorded_at: datetime
    question_json_bytes: int
    answer_json_bytes: int
    question_chars: int
    answer_chars: int
    deleted_at: datetime | None = None

    @property
    def deleted(self) -> bool:
        return self.deleted_at is not None

    @property
    def eligible(self) -> bool:
        """Whether this turn may ever be sent in a request window."""
        return self.status is TurnStatus.CONFIRMED and not self.deleted

    def __deepcopy__(self, memo: dict[int, Any]) -> TurnEntry:
        # Immutable all the way down: a copied aggregate may share its entries,
        # which makes copies from the aggregate cache cheap for long histories.
        return self


@dataclass(frozen=True, slots=True)
class FoldEntry:
    """A summary recorded by the application, standing in for older turns."""

    fold_id: str
    version: int  # of the event holding the sealed summary
    recorded_at: datetime
    covers_through_turn_id: str
    covered_turns: int  # turns (of any status) up to and including that one
    covered_eligible: int  # of which were eligible when the fold was recorded
    summary_json_bytes: int
    summary_chars: int
    withdrawn_at: datetime | None = None

    @property
    def withdrawn(self) -> bool:
        return self.withdrawn_at is not None

    @property
    def key_id(self) -> str:
        """The vault key of its summary ('/' never occurs in a turn id)."""
        return fold_key_id(self.fold_id)


def fold_key_id(fold_id: str) -> str:
    return f"fold/{fold_id}"


class Conversation(Aggregate):
    """One user's conversation with an assistant."""

    # Stored rows name their classes by topic. These are the topics the first
    # release wrote, when the modules were top-level packages; pinned here, they
    # stay the same wherever the classes live.
    TOPIC = "domain.conversation:Conversation"

    class Created(Aggregate.Created):
        # Never recorded (Started is the creation event); the library asks every
        # event class of an aggregate with a pinned topic to have one too.
        TOPIC = "domain.conversation:Conversation.Created"

    class Started(Aggregate.Created):
        TOPIC = "domain.conversation:Conversation.Started"
        owner_id: str

    class TurnConfirmed(Aggregate.Event):
        """A completed exchange; its texts are sealed with the turn's key."""

        TOPIC = "domain.conversation:Conversation.TurnConfirmed"

        turn_id: str
        sealed_question: bytes
        sealed_answer: bytes
        question_json_bytes: int
        answer_json_bytes: int
        question_chars: int
        answer_chars: int
        # The receipt of the window this turn answered (domain/receipt.py) and
        # that window's system instructions, sealed with the turn's key. Both
        # default to None so turns recorded without a receipt load unchanged.
        window_receipt: dict[str, Any] | None = None
        sealed_system: bytes | None = None

        def apply(self, aggregate: Aggregate) -> None:
            assert isinstance(aggregate, Conversation)
            aggregate._add_turn(self, TurnStatus.CONFIRMED)

    class TurnAbandoned(Aggregate.Event):
        """An exchange whose reply failed or was stopped: shown, never sent."""

        TOPIC = "domain.conversation:Conversation.TurnAbandoned"

        turn_id: str
        outcome: str
        sealed_question: bytes
        sealed_answer: bytes
        question_json_bytes: int
        answer_json_bytes: int
        question_chars: int
        answer_chars: int

        def apply(self, aggregate: Aggregate) -> None:
            assert isinstance(aggregate, Conversation)
            aggregate._add_turn(self, TurnStatus(self.outcome))

    class HistoryDeleted(Aggregate.Event):
        """The owner deleted these turns; their text must never be read again."""

        TOPIC = "domain.conversation:Conversation.HistoryDeleted"

        turn_ids: list[str]
        whole_history: bool
        deleted_by: str

        def apply(self, aggregate: Aggregate) -> None:
            assert isinstance(aggregate, Conversation)
            for turn_id in self.turn_ids:
                entry = aggregate.turns[turn_id]
                aggregate._count_eligible(-1 if entry.eligible else 0)
                aggregate.turns[turn_id] = replace(entry, deleted_at=self.timestamp)

    class FoldRecorded(Aggregate.Event):
        """A summary of every turn up to one turn, written by the application.

        The summary is sealed under its own vault key, destroyed when any turn
        it covers is deleted (its text was derived from theirs).
        """

        TOPIC = "domain.conversation:Conversation.FoldRecorded"

        fold_id: str
        covers_through_turn_id: str
        covered_turns: int
        covered_eligible: int
        sealed_summary: bytes
        summary_json_bytes: int
        summary_chars: int

        def apply(self, aggregate: Aggregate) -> None:
            assert isinstance(aggregate, Conversation)
            aggregate.folds = {
                **aggregate.fold_map(),
                self.fold_id: FoldEntry(
                    fold_id=self.fold_id,
                    version=self.originator_version,
                    recorded_at=self.timestamp,
                    covers_through_turn_id=self.covers_through_turn_id,
                    covered_turns=self.covered_turns,
                    covered_eligible=self.covered_eligible,
                    summary_json_bytes=self.summary_json_bytes,
                    summary_chars=self.summary_chars,
                ),
            }

    class FoldWithdrawn(Aggregate.Event):
        """Folds that may no longer be sent or read (covered turns were deleted)."""

        TOPIC = "domain.conversation:Conversation.FoldWithdrawn"

        fold_ids: list[str]
        reason: str

        def apply(self, aggregate: Aggregate) -> None:
            assert isinstance(aggregate, Conversation)
            folds = dict(aggregate.fold_map())
            for fold_id in self.fold_ids:
                folds[fold_id] = replace(folds[fold_id], withdrawn_at=self.timestamp)
            aggregate.folds = folds

    @event(Started)
    def __init__(self, owner_id: str) -> None:
        self.owner_id = owner_id
        # Insertion order is turn order; JSON objects keep it through snapshots.
        self.turns: dict[str, TurnEntry] = {}
        self.folds: dict[str, FoldEntry] = {}
        self._eligible_count = 0

    # Commands -----------------------------------------------------------------

    def confirm_turn(
        self,
        *,
        turn_id: str,
        sealed_question: bytes,
        sealed_answer: bytes,
        sizes: TurnSizes,
        expected_version: int | None = None,
        window_receipt: dict[str, Any] | None = None,
        sealed_system: bytes | None = None,
    ) -> None:
        self._check_new_turn(turn_id, expected_version)
        self.trigger_event(
            self.TurnConfirmed,
            turn_id=turn_id,
            sealed_question=sealed_question,
            sealed_answer=sealed_answer,
            **sizes.as_fields(),
            window_receipt=window_receipt,
            sealed_system=sealed_system,
        )

    def abandon_turn(
        self,
        *,
        turn_id: str,
        outcome: TurnStatus,
        sealed_question: bytes,
        sealed_answer: bytes,
        sizes: TurnSizes,
        expected_version: int | None = None,
    ) -> None:
        if outcome not in UNSENT_OUTCOMES:
            raise ValueError(f"outcome must be failed or stopped, not {outcome}")
        self._check_new_turn(turn_id, expected_version)
        self.trigger_event(
            self.TurnAbandoned,
            turn_id=turn_id,
            outcome=outcome.value,
            sealed_question=sealed_question,
            sealed_answer=sealed_answer,
            **sizes.as_fields(),
        )

    def delete_history(
        self,
        *,
        turn_ids: list[str] | None,
        deleted_by: str,
        expected_version: int | None = None,
    ) -> list[str]:
        """Record the deletion of `turn_ids` (None: every turn); return them.

        Turns already deleted are left out; when nothing is left to delete no
        event is recorded.
        """
        self.check_version(expected_version)
        if turn_ids is None:
            targets = [
                entry.turn_id for entry in self.turns.values() if not entry.deleted
            ]
        else:
            unknown = [turn_id for turn_id in turn_ids if turn_id not in self.turns]
            if unknown:
                raise TurnNotFoundError(self.id, unknown)
            targets = list(
                dict.fromkeys(
                    turn_id for turn_id in turn_ids if not self.turns[turn_id].deleted
                )
            )
        if targets:
            self.trigger_event(
                self.HistoryDeleted,
                turn_ids=targets,
                whole_history=turn_ids is None,
                deleted_by=deleted_by,
            )
            self._withdraw_folds_covering(targets)
        return targets

    def record_fold(
        self,
        *,
        fold_id: str,
        covers_through_turn_id: str,
        sealed_summary: bytes,
        summary_json_bytes: int,
        summary_chars: int,
        expected_version: int | None = None,
    ) -> None:
        """Record a summary of every turn up to `covers_through_turn_id`."""
        self.check_version(expected_version)
        if fold_id in self.fold_map():
            raise FoldConflictError(self.id, fold_id, "is already recorded")
        entry = self.turns.get(covers_through_turn_id)
        if entry is None:
            raise TurnNotFoundError(self.id, [covers_through_turn_id])
        if entry.deleted:
            raise TurnDeletedError(self.id, covers_through_turn_id)
        covered_turns = list(self.turns).index(covers_through_turn_id) + 1
        current = self.current_fold
        if current is not None and covered_turns < current.covered_turns:
            raise FoldConflictError(
                self.id,
                fold_id,
                f"would cover fewer turns than fold {current.fold_id}, which covers "
                f"through turn {current.covers_through_turn_id}",
            )
        covered_eligible = sum(
            1 for turn in islice(self.turns.values(), covered_turns) if turn.eligible
        )
        self.trigger_event(
            self.FoldRecorded,
            fold_id=fold_id,
            covers_through_turn_id=covers_through_turn_id,
            covered_turns=covered_turns,
            covered_eligible=covered_eligible,
            sealed_summary=sealed_summary,
            summary_json_bytes=summary_json_bytes,
            summary_chars=summary_chars,
        )

    def _withdraw_folds_covering(self, deleted_turn_ids: list[str]) -> None:
        live = [fold for fold in self.fold_map().values() if not fold.withdrawn]
        if not live:
            return
        wanted = set(deleted_turn_ids)
        first_deleted = next(
            position for position, turn_id in enumerate(self.turns) if turn_id in wanted
        )
        covering = [fold.fold_id for fold in live if fold.covered_turns > first_deleted]
        if covering:
            self.trigger_event(
                self.FoldWithdrawn, fold_ids=covering, reason="covered turns deleted"
            )

    # Rules --------------------------------------------------------------------

    def check_version(self, expected_version: int | None) -> None:
        if expected_version is not None and expected_version != self.version:
            raise VersionConflictError(self.id, expected_version, self.version)

    def _check_new_turn(self, turn_id: str, expected_version: int | None) -> None:
        existing = self.turns.get(turn_id)
        if existing is not None:
            if existing.deleted:
                raise TurnDeletedError(self.id, turn_id)
            raise TurnConflictError(self.id, turn_id, "is already recorded")
        self.check_version(expected_version)

    # Mutators (run on every replay: assignment only) --------------------------

    def _count_eligible(self, change: int) -> None:
        if "_eligible_count" in self.__dict__:
            self._eligible_count += change

    def _add_turn(
        self,
        recorded: Conversation.TurnConfirmed | Conversation.TurnAbandoned,
        status: TurnStatus,
    ) -> None:
        self._count_eligible(1 if status is TurnStatus.CONFIRMED else 0)
        self.turns[recorded.turn_id] = TurnEntry(
            turn_id=recorded.turn_id,
            status=status,
            version=recorded.originator_version,
            recorded_at=recorded.timestamp,
            question_json_bytes=recorded.question_json_bytes,
            answer_json_bytes=recorded.answer_json_bytes,
            question_chars=recorded.question_chars,
            answer_chars=recorded.answer_chars,
        )

    # Queries ------------------------------------------------------------------

    def eligible_turns_newest_first(self) -> Iterator[TurnEntry]:
        return (entry for entry in reversed(self.turns.values()) if entry.eligible)

    @property
    def eligible_count(self) -> int:
        """How many turns may be sent: confirmed and not deleted."""
        if "_eligible_count" not in self.__dict__:
            # An aggregate restored from a snapshot taken before the counter.
            self._eligible_count = sum(
                1 for entry in self.turns.values() if entry.eligible
            )
        return self._eligible_count

    def fold_map(self) -> dict[str, FoldEntry]:
        # Snapshots taken before folds existed have no attribute.
        folds: dict[str, FoldEntry] = self.__dict__.get("folds", {})
        return folds

    @property
    def current_fold(self) -> FoldEntry | None:
        """The newest fold that may be sent, if any."""
        for fold in reversed(self.fold_map().values()):
            if not fold.withdrawn:
                return fold
        return None


@dataclass(frozen=True, slots=True)
class TurnSizes:
    """Sizes of a turn's two texts, measured before they are sealed."""

    question_json_bytes: int
    answer_json_bytes: int
    question_chars: int
    answer_chars: int

    def as_fields(self) -> dict[str, int]:
        return {
            "question_json_bytes": self.question_json_bytes,
            "answer_json_bytes": self.answer_json_bytes,
            "question_chars": self.question_chars,
            "answer_chars": self.answer_chars,
        }
