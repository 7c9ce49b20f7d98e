"""The Conversation aggregate: what was said, in order, and what was deleted.

The aggregate's state is constant-size: its owner and how many turns it has.
Every per-turn fact (which turn ids exist, their order and status, which are
deleted, which folds stand in for which turns) lives on the read side, in rows
written in the same transaction as the events (projections/ledger_rows.py).
Commands that need such facts are given them by the application, read inside
the write, so loading a conversation to write to it costs the same at 10 turns
and at 100,000.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from turnledger.domain.errors import (
    TurnConflictError,
    TurnDeletedError,
    VersionConflictError,
)
from turnledger.domain.history_rules import (
    covered_turns,
    covering_folds,
    deletion_targets,
)
from turnledger.domain.sizes import PartsSizes, TurnSizes
from turnledger.domain.turn_facts import (
    UNSENT_OUTCOMES,
    FoldFacts,
    TurnFacts,
    TurnStatus,
)

# Sizes the first release recorded in each turn's event. They are not recorded
# any more (the read side keeps them, and erases them with the turn's text);
# old events are read without them.
_LEGACY_SIZE_FIELDS = (
    "question_json_bytes",
    "answer_json_bytes",
    "question_chars",
    "answer_chars",
)
_LEGACY_SUMMARY_SIZE_FIELDS = ("summary_json_bytes", "summary_chars")


def _drop(state: dict[str, Any], names: Sequence[str]) -> None:
    for name in names:
        state.pop(name, None)


class Conversation(Aggregate):
    """One user's conversation with an assistant."""

    # Stored rows name their classes by topic. These are the topics the first
    # release wrote, when the modules were top-level packages; pinned here, they
    # stay the same wherever the classes live.
    TOPIC = "domain.conversation:Conversation"
    # Version 1 (the first release) kept an index of every turn in its state
    # and snapshots; version 2 keeps a count.
    class_version = 2

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        turns = state.pop("turns", {})
        state.pop("folds", None)
        state.pop("_eligible_count", None)
        state["turn_count"] = len(turns)

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
        class_version = 2

        turn_id: str
        sealed_question: bytes
        sealed_answer: bytes
        # The receipt of the window this turn answered (projections/receipt.py) and
        # that window's system instructions, sealed with the turn's key.
        window_receipt: dict[str, Any] | None = None
        sealed_system: bytes | None = None
        # The turn's attachments and assistant steps, in order, as one sealed
        # JSON list (domain/parts.py); None for a text-only turn. An optional
        # field at its default is not stored, so text-only turns are stored
        # exactly as before and events without it read as text-only.
        sealed_parts: bytes | None = None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            _drop(state, _LEGACY_SIZE_FIELDS)

        def apply(self, aggregate: Aggregate) -> None:
            assert isinstance(aggregate, Conversation)
            aggregate.turn_count += 1

    class TurnAbandoned(Aggregate.Event):
        """An exchange whose reply failed or was stopped: shown, never sent."""

        TOPIC = "domain.conversation:Conversation.TurnAbandoned"
        class_version = 2

        turn_id: str
        outcome: str
        sealed_question: bytes
        sealed_answer: bytes
        # As in TurnConfirmed; may end mid-tool (calls without results).
        sealed_parts: bytes | None = None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            _drop(state, _LEGACY_SIZE_FIELDS)

        def apply(self, aggregate: Aggregate) -> None:
            assert isinstance(aggregate, Conversation)
            aggregate.turn_count += 1

    class HistoryDeleted(Aggregate.Event):
        """The owner deleted these turns; their text must never be read again."""

        TOPIC = "domain.conversation:Conversation.HistoryDeleted"

        turn_ids: list[str]
        whole_history: bool
        deleted_by: str

    class FoldRecorded(Aggregate.Event):
        """A summary of every turn up to one turn, written by the application.

        The summary is sealed under its own vault key, destroyed when any turn
        it covers is deleted (its text was derived from theirs).
        """

        TOPIC = "domain.conversation:Conversation.FoldRecorded"
        class_version = 2

        fold_id: str
        covers_through_turn_id: str
        covered_turns: int
        covered_eligible: int
        sealed_summary: bytes
        # The ledger version whose history the summary was made from (None in
        # folds recorded before it was asked for).
        summarized_version: int | None = None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            _drop(state, _LEGACY_SUMMARY_SIZE_FIELDS)

    class FoldWithdrawn(Aggregate.Event):
        """Folds that may no longer be sent or read (covered turns were deleted)."""

        TOPIC = "domain.conversation:Conversation.FoldWithdrawn"

        fold_ids: list[str]
        reason: str

    @event(Started)
    def __init__(self, owner_id: str, id: UUID) -> None:  # noqa: A002 - the library's name
        # `id` is the aggregate's id, chosen by the application (a client's
        # request key makes a retried start idempotent); it is not an event field.
        self.owner_id = owner_id
        self.turn_count = 0

    @classmethod
    def at_head(
        cls,
        *,
        id: UUID,  # noqa: A002 - the library's name
        version: int,
        owner_id: str,
        turn_count: int,
        created_on: datetime,
        modified_on: datetime,
    ) -> Conversation:
        """The conversation as it stands at `version`, built from its head.

        The state is constant-size (owner, turn count, the library's id,
        version and times), so what a head records is the whole aggregate:
        the ledger builds it from the conversation's read-side row, written
        in the transaction of every event, instead of replaying the log. As
        the library's creation event does, the object is made, given its
        id, version and creation time by `__base_init__`, then its state.
        """
        aggregate = cls.__new__(cls)
        aggregate.__base_init__(id, version, created_on)
        aggregate.modified_on = modified_on
        aggregate.owner_id = owner_id
        aggregate.turn_count = turn_count
        return aggregate

    # Commands -----------------------------------------------------------------

    def confirm_turn(
        self,
        *,
        turn_id: str,
        sealed_question: bytes,
        sealed_answer: bytes,
        existing: TurnFacts | None,
        expected_version: int | None = None,
        window_receipt: dict[str, Any] | None = None,
        sealed_system: bytes | None = None,
        sealed_parts: bytes | None = None,
    ) -> None:
        """Record a completed exchange. `existing`: the read side's facts of a
        turn with this id, if there is one (a retry is answered before this)."""
        self._check_new_turn(turn_id, existing, expected_version)
        self.trigger_event(
            self.TurnConfirmed,
            turn_id=turn_id,
            sealed_question=sealed_question,
            sealed_answer=sealed_answer,
            window_receipt=window_receipt,
            sealed_system=sealed_system,
            sealed_parts=sealed_parts,
        )

    def abandon_turn(
        self,
        *,
        turn_id: str,
        outcome: TurnStatus,
        sealed_question: bytes,
        sealed_answer: bytes,
        existing: TurnFacts | None,
        expected_version: int | None = None,
        sealed_parts: bytes | None = None,
    ) -> None:
        if outcome not in UNSENT_OUTCOMES:
            raise ValueError(f"outcome must be failed or stopped, not {outcome}")
        self._check_new_turn(turn_id, existing, expected_version)
        self.trigger_event(
            self.TurnAbandoned,
            turn_id=turn_id,
            outcome=outcome.value,
            sealed_question=sealed_question,
            sealed_answer=sealed_answer,
            sealed_parts=sealed_parts,
        )

    def delete_history(
        self,
        *,
        requested: Sequence[str] | None,
        facts: Mapping[str, TurnFacts],
        live_folds: Sequence[FoldFacts],
        deleted_by: str,
        expected_version: int | None = None,
    ) -> list[str]:
        """Record the deletion of `requested` (None: every turn); return them.

        `facts` holds the read side's facts of the requested turns (of every
        undeleted turn when `requested` is None). Turns already deleted are
        left out; when nothing is left to delete no event is recorded. Every
        live fold covering a deleted turn is withdrawn with it.
        """
        self.check_version(expected_version)
        targets = deletion_targets(self.id, requested, facts)
        if not targets:
            return []
        self.trigger_event(
            self.HistoryDeleted,
            turn_ids=[f.turn_id for f in targets],
            whole_history=requested is None,
            deleted_by=deleted_by,
        )
        covering = covering_folds(live_folds, targets)
        if covering:
            self.trigger_event(
                self.FoldWithdrawn, fold_ids=covering, reason="covered turns deleted"
            )
        return [f.turn_id for f in targets]

    def record_fold(
        self,
        *,
        fold_id: str,
        through: TurnFacts | None,
        covers_through_turn_id: str,
        covered_eligible: int,
        current_fold: FoldFacts | None,
        fold_exists: bool,
        deleted_since_summary: Sequence[str],
        sealed_summary: bytes,
        summarized_version: int | None,
        expected_version: int | None = None,
    ) -> None:
        """Record a summary of every turn up to `covers_through_turn_id`.

        `through` are the facts of that turn; `deleted_since_summary` the
        covered turns deleted after `summarized_version` (whose text the
        summary may hold, so it must not be kept).
        """
        self.check_version(expected_version)
        covered = covered_turns(
            self.id,
            self.version,
            fold_id=fold_id,
            through=through,
            covers_through_turn_id=covers_through_turn_id,
            current_fold=current_fold,
            fold_exists=fold_exists,
            deleted_since_summary=deleted_since_summary,
            summarized_version=summarized_version,
        )
        self.trigger_event(
            self.FoldRecorded,
            fold_id=fold_id,
            covers_through_turn_id=covers_through_turn_id,
            covered_turns=covered,
            covered_eligible=covered_eligible,
            sealed_summary=sealed_summary,
            summarized_version=summarized_version,
        )

    # Rules (those of deletions and folds: history_rules.py) ---------------------

    def check_version(self, expected_version: int | None) -> None:
        if expected_version is not None and expected_version != self.version:
            raise VersionConflictError(self.id, expected_version, self.version)

    def _check_new_turn(
        self, turn_id: str, existing: TurnFacts | None, expected_version: int | None
    ) -> None:
        if existing is not None:
            if existing.deleted:
                raise TurnDeletedError(self.id, turn_id)
            raise TurnConflictError(self.id, turn_id, "is already recorded")
        self.check_version(expected_version)


def fold_key_id(fold_id: str) -> str:
    """The vault key of a fold's summary ('/' never occurs in a turn id)."""
    return f"fold/{fold_id}"


# Kept importable from here: the read side's sizes of a turn (domain/sizes.py)
# and the facts a command is given about turns and folds (domain/turn_facts.py).
__all__ = [
    "UNSENT_OUTCOMES",
    "Conversation",
    "FoldFacts",
    "PartsSizes",
    "TurnFacts",
    "TurnSizes",
    "TurnStatus",
    "fold_key_id",
]
