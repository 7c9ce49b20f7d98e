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
from typing import Any

from eventsourcing.domain import Aggregate, event

from domain.errors import (
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


class Conversation(Aggregate):
    """One user's conversation with an assistant."""

    class Started(Aggregate.Created):
        owner_id: str

    class TurnConfirmed(Aggregate.Event):
        """A completed exchange; its texts are sealed with the turn's key."""

        turn_id: str
        sealed_question: bytes
        sealed_answer: bytes
        question_json_bytes: int
        answer_json_bytes: int
        question_chars: int
        answer_chars: int

        def apply(self, aggregate: Aggregate) -> None:
            assert isinstance(aggregate, Conversation)
            aggregate._add_turn(self, TurnStatus.CONFIRMED)

    class TurnAbandoned(Aggregate.Event):
        """An exchange whose reply failed or was stopped: shown, never sent."""

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

        turn_ids: list[str]
        whole_history: bool
        deleted_by: str

        def apply(self, aggregate: Aggregate) -> None:
            assert isinstance(aggregate, Conversation)
            for turn_id in self.turn_ids:
                entry = aggregate.turns[turn_id]
                aggregate.turns[turn_id] = replace(entry, deleted_at=self.timestamp)

    @event(Started)
    def __init__(self, owner_id: str) -> None:
        self.owner_id = owner_id
        # Insertion order is turn order; JSON objects keep it through snapshots.
        self.turns: dict[str, TurnEntry] = {}

    # Commands -----------------------------------------------------------------

    def confirm_turn(
        self,
        *,
        turn_id: str,
        sealed_question: bytes,
        sealed_answer: bytes,
        sizes: TurnSizes,
        expected_version: int | None = None,
    ) -> None:
        self._check_new_turn(turn_id, expected_version)
        self.trigger_event(
            self.TurnConfirmed,
            turn_id=turn_id,
            sealed_question=sealed_question,
            sealed_answer=sealed_answer,
            **sizes.as_fields(),
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
        return targets

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

    def _add_turn(
        self,
        recorded: Conversation.TurnConfirmed | Conversation.TurnAbandoned,
        status: TurnStatus,
    ) -> None:
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
