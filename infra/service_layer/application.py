"""The ledger for application services: commands here, queries on the read side.

Every write goes through one group committer (infra/service_layer/group_commit.py): the
writes queued by concurrent callers are checked one after another against
constant-size aggregates and saved in one transaction, together with the
read-side rows and the new turns' keys (where the store allows). A write
that breaks a rule fails alone; a failed transaction is retried write by
write, so one bad write never rejects another's turn.

Queries (history, windows, folds) read only the read side and the events of
the turns they return (projections/queries.py), never an aggregate.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID, uuid4

from eventsourcing.application import Application
from eventsourcing.persistence import (
    EventStore,
    JSONTranscoder,
    Mapper,
    Recording,
)

from turnledger.domain.conversation import (
    TurnStatus,
)
from turnledger.domain.errors import (
    InvalidInputError,
    PurgeIncompleteError,
)
from turnledger.domain.parts import TurnParts
from turnledger.domain.ports import TextVault
from turnledger.domain.text import (
    DEFAULT_MAX_TURN_BYTES,
    check_expected_version,
    check_identifier,
    check_text,
    check_turn_size,
)
from turnledger.domain.transcodings import register_legacy_transcodings
from turnledger.infra.service_layer.application_reads import ConversationReads
from turnledger.infra.service_layer.batch import (
    Batch,
    BatchWriter,
    Write,
    recorded_with,
)
from turnledger.infra.service_layer.chain_mapper import (
    ChainedEventStore,
    ChainSealingMapper,
)
from turnledger.infra.service_layer.group_commit import GroupCommitter
from turnledger.infra.service_layer.history_edits import deletion_run, fold_run
from turnledger.infra.service_layer.purge import PurgeReport, PurgeRunner
from turnledger.infra.service_layer.results import (
    DeletionReceipt,
    FoldReceipt,
    TurnReceipt,
    TurnRequest,
)
from turnledger.infra.service_layer.turn_requests import TurnRequests
from turnledger.infra.service_layer.turn_writes import (
    TurnWrites,
    check_conversation_id,
    turn_parts,
)
from turnledger.projections.queries import ConversationQueries
from turnledger.projections.read_side import ReadSide
from turnledger.projections.results import (
    MAX_HISTORY_PAGE,
    HistoryItem,
    HistoryPage,
    ProjectedWindow,
)

if TYPE_CHECKING:  # infra.restore imports this module
    from turnledger.infra.restore import RestoreReport

__all__ = [
    "MAX_HISTORY_PAGE",
    "Conversations",
    "DeletionReceipt",
    "FoldReceipt",
    "HistoryItem",
    "HistoryPage",
    "ProjectedWindow",
    "TurnReceipt",
]


class Conversations(ConversationReads, Application[UUID]):
    """The conversation ledger, for application services."""

    name = "Conversations"
    # The aggregate is rebuilt from its read-side row (a snapshot written in
    # the same transaction as every event), never from library snapshots.
    is_snapshotting_enabled = False
    # Reading the log in pages larger than the library default of 10.
    log_section_size = 1000

    def __init__(
        self,
        env: dict[str, str] | None = None,
        *,
        vault: TextVault,
        max_turn_bytes: int = DEFAULT_MAX_TURN_BYTES,
        max_batch: int = 64,
        max_batches_in_flight: int = 1,
    ) -> None:
        """`max_batches_in_flight` above one lets a batch be prepared while the
        previous one commits: for a store whose transactions can overlap."""
        self._vault = vault
        self.max_turn_bytes = max_turn_bytes
        super().__init__(env)
        if not _is_read_side(self.recorder):
            raise TypeError(
                "the ledger needs a recorder that keeps the read side "
                "(turnledger.infra.persistence chooses one)"
            )
        self.read_side: ReadSide = cast(ReadSide, self.recorder)
        self.queries = ConversationQueries(
            read_side=self.read_side,
            events=self.events,
            vault=vault,
        )
        # Snapshots the first release wrote: never loaded, still audited.
        self.legacy_snapshots: EventStore[UUID] | None = EventStore(
            mapper=self.mapper, recorder=self.factory.aggregate_recorder("snapshots")
        )
        self._writes = BatchWriter(
            read_side=self.read_side,
            save=self.save,
            stored_digest=self.chained_events.stored_digest,
        )
        self._committer: GroupCommitter[Write] = GroupCommitter(
            self._writes.commit_batch,
            key=lambda write: write.conversation_id,
            max_batch=max_batch,
            max_in_flight=max_batches_in_flight,
        )
        self.purge = PurgeRunner(self, vault.purge_view)
        # Set by the composition root: how the store compared with the
        # deletion record when it was opened (infra/restore.py).
        self.restore_report: RestoreReport | None = None
        self._turns = TurnWrites(self)
        self._requests = TurnRequests(self._turns, self)

    @property
    def chained_events(self) -> ChainedEventStore:
        """The event store (`construct_event_store`), typed as what it is."""
        assert isinstance(self.events, ChainedEventStore)
        return self.events

    @property
    def vault(self) -> TextVault:
        return self._vault

    @vault.setter
    def vault(self, vault: TextVault) -> None:
        # Queries decrypt through the same vault (tests wrap it to count reads).
        self._vault = vault
        if hasattr(self, "queries"):
            self.queries.vault = vault

    @property
    def checks_credentials(self) -> bool:
        """Whether the store checks each write's `TurnRequest.credential` in
        the write's own transaction (PostgreSQL's does; see its recorder)."""
        return bool(getattr(self.recorder, "checks_credentials", False))

    # Persistence hooks ----------------------------------------------------------

    def construct_mapper(self) -> Mapper[UUID]:
        base = super().construct_mapper()
        return ChainSealingMapper(
            transcoder=base.transcoder, compressor=base.compressor, cipher=base.cipher
        )

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_legacy_transcodings(transcoder)

    def construct_event_store(self) -> EventStore[UUID]:
        assert isinstance(self.mapper, ChainSealingMapper)
        return ChainedEventStore(mapper=self.mapper, recorder=self.recorder)

    def save(
        self, *objs: Any, batch: Batch | None = None, **kwargs: Any
    ) -> list[Recording[UUID]]:
        """The library's save: the aggregates' new events, each chained to the
        one before it by the event store (`ChainedEventStore`); with `batch`,
        the recorder also writes the read-side rows, keys and credential
        checks the batch gathered, in the events' transaction."""
        if batch is not None:
            kwargs["heads"] = {
                conversation_id: (row.version, row.head_digest)
                for conversation_id, row in batch.heads.items()
            }
            kwargs["with_digests"] = partial(recorded_with, batch)
        return super().save(*objs, **kwargs)

    def close(self) -> None:
        super().close()
        self.vault.close()

    # Commands -----------------------------------------------------------------

    def start_conversation(
        self, owner_id: str, *, conversation_id: UUID | None = None
    ) -> UUID:
        """Start a conversation; with `conversation_id`, retrying is a no-op.

        A caller that chooses the id (e.g. derived from a client's request key)
        can retry safely: if the owner already has that conversation, its id is
        returned and nothing is written.
        """
        check_identifier("owner_id", owner_id)
        if conversation_id is not None and not isinstance(conversation_id, UUID):
            raise InvalidInputError("conversation_id", "expected a UUID")
        chosen = conversation_id or uuid4()
        self._submit(
            Write(owner_id, chosen, lambda conversation, batch: None, creates=True)
        )
        return chosen

    def confirm_turn(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        turn_id: str,
        question: str | None = None,
        answer: str | None = None,
        parts: TurnParts | None = None,
        expected_version: int | None = None,
        window: ProjectedWindow | None = None,
    ) -> TurnReceipt:
        """Record a completed exchange. Retrying with the same content is a no-op.

        Give `question` and `answer` (a text-only turn), or `parts`: the
        question with its attachments, the assistant's steps (text, tool
        calls and their results, refusals) and the final answer
        (domain/parts.py). Every tool call of a confirmed turn has its result.
        `window` is the projected window this answer replied to: its receipt
        is kept with the turn so an audit can prove what was sent.
        """
        receipt: TurnReceipt = self._submit(
            self._requests.confirmed(
                owner_id,
                conversation_id,
                turn_id=turn_id,
                question=question,
                answer=answer,
                parts=parts,
                expected_version=expected_version,
                window=window,
            )
        )
        return receipt

    def record_turns(
        self, requests: Sequence[TurnRequest]
    ) -> list[TurnReceipt | Exception]:
        """Many turns, of any owners and conversations, each written exactly
        as `confirm_turn` or `record_abandoned_turn` writes it, in shared
        transactions; writes of one conversation in the order given.

        Each request's outcome is in its place: its receipt, or the error that
        refused it, which refused nothing else. For services that gather
        concurrent requests into one call (the HTTP service's turn writes).
        """
        outcomes: list[TurnReceipt | Exception | None] = []
        writes: list[Write] = []
        places: list[int] = []
        for request in requests:
            try:
                writes.append(self._requests.request(request))
            except Exception as error:  # this request's refusal, in its place
                outcomes.append(error)
            else:
                places.append(len(outcomes))
                outcomes.append(None)  # filled in once committed
        for place, pending in zip(
            places, self._committer.submit_many(writes), strict=True
        ):
            try:
                outcomes[place] = pending.outcome()
            except Exception as error:
                outcomes[place] = error
        assert all(outcome is not None for outcome in outcomes)
        return cast(list[TurnReceipt | Exception], outcomes)

    def confirm_turns(
        self,
        owner_id: str,
        conversation_id: UUID,
        turns: Sequence[tuple[str, str, str] | tuple[str, TurnParts]],
    ) -> list[TurnReceipt]:
        """Record many completed exchanges in order: (turn id, question, answer)
        or (turn id, TurnParts) each.

        For importing a history: the turns are saved in shared transactions
        (up to 64 a transaction), each checked like `confirm_turn` and recorded
        or refused on its own; once all were tried, the first refusal is raised.
        Input that is malformed is refused before anything is written.
        """
        writes = []
        for index, item in enumerate(turns):
            if (
                isinstance(item, str)
                or not isinstance(item, Sequence)
                or len(item) not in (2, 3)
            ):
                raise InvalidInputError(
                    f"turns[{index}]",
                    "expected (turn_id, question, answer) or (turn_id, TurnParts)",
                )
            if len(item) == 3:
                turn = turn_parts(item[1], item[2], None, answer_field="answer")
            else:
                turn = turn_parts(None, None, item[1], answer_field="answer")
            turn.check_complete()
            writes.append(
                self._turns.write(
                    owner_id,
                    conversation_id,
                    turn_id=item[0],
                    status=TurnStatus.CONFIRMED,
                    turn=turn,
                    expected_version=None,
                )
            )
        return [request.outcome() for request in self._committer.submit_many(writes)]

    def record_abandoned_turn(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        turn_id: str,
        outcome: TurnStatus | str,
        question: str | None = None,
        partial_answer: str | None = None,
        parts: TurnParts | None = None,
        expected_version: int | None = None,
    ) -> TurnReceipt:
        """Record an exchange whose reply failed or was stopped: never sent.

        Give `question` (and any `partial_answer`), or `parts`, which may end
        mid-tool: calls without results, an empty answer.
        """
        receipt: TurnReceipt = self._submit(
            self._requests.abandoned(
                owner_id,
                conversation_id,
                turn_id=turn_id,
                outcome=outcome,
                question=question,
                partial_answer=partial_answer,
                parts=parts,
                expected_version=expected_version,
            )
        )
        return receipt

    def delete_history(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        turn_ids: Sequence[str] | None = None,
        deleted_by: str | None = None,
        expected_version: int | None = None,
    ) -> DeletionReceipt:
        """Delete the chosen turns, or the whole history when turn_ids is None."""
        check_identifier("owner_id", owner_id)
        check_conversation_id(conversation_id)
        check_expected_version(expected_version)
        actor = check_identifier("deleted_by", deleted_by or owner_id)
        wanted: list[str] | None = None
        if turn_ids is not None:
            if isinstance(turn_ids, str) or not isinstance(turn_ids, Sequence):
                raise InvalidInputError(
                    "turn_ids", "expected a list of turn ids or None"
                )
            wanted = [check_identifier("turn_id", turn_id) for turn_id in turn_ids]

        run = deletion_run(
            self.read_side,
            wanted=wanted,
            deleted_by=actor,
            expected_version=expected_version,
        )
        deleted, version = self._submit(
            Write(owner_id, conversation_id, run, turn_ids=tuple(wanted or ()))
        )
        # The event is saved: from here the deletion stands. The purge destroys
        # the keys as a tracked follower of the log, so if it fails or the
        # process dies now, the next purge run (or start-up) completes it.
        try:
            report = self.purge_deleted_history()
        except Exception as error:
            raise PurgeIncompleteError(conversation_id) from error
        return DeletionReceipt(conversation_id, tuple(deleted), version, purge=report)

    def purge_deleted_history(self) -> PurgeReport:
        """Destroy the keys of every deleted turn not yet purged; compact the store."""
        return self.purge.run()

    def record_fold(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        covers_through_turn_id: str,
        summary: str,
        summarized_version: int,
        fold_id: str | None = None,
        expected_version: int | None = None,
    ) -> FoldReceipt:
        """Record a summary that stands in for every turn up to the given one.

        Written by the application service that made the summary; windows send
        it instead of the turns it covers. `summarized_version` is the ledger
        version of the history the summary was made from: the fold is refused
        if a turn it covers was deleted after it. Deleting any covered turn
        later withdraws the fold and destroys its text.
        """
        check_identifier("owner_id", owner_id)
        check_conversation_id(conversation_id)
        check_identifier("covers_through_turn_id", covers_through_turn_id)
        check_text("summary", summary)
        check_turn_size(summary, limit=self.max_turn_bytes)
        check_expected_version(expected_version)
        if (
            isinstance(summarized_version, bool)
            or not isinstance(summarized_version, int)
            or summarized_version < 1
        ):
            raise InvalidInputError(
                "summarized_version",
                "the ledger version the summary was made from (a positive integer)",
            )
        fold_id = check_identifier("fold_id", fold_id or uuid4().hex)

        run = fold_run(
            self.read_side,
            self.vault,
            fold_id=fold_id,
            covers_through_turn_id=covers_through_turn_id,
            summary=summary,
            summarized_version=summarized_version,
            expected_version=expected_version,
        )
        result: FoldReceipt = self._submit(
            Write(owner_id, conversation_id, run, turn_ids=(covers_through_turn_id,))
        )
        return result

    def _submit(self, write: Write) -> Any:
        return self._committer.submit(write)


def _is_read_side(recorder: object) -> bool:
    return all(
        callable(getattr(recorder, name, None))
        for name in ("conversations", "turns_by_id", "eligible_newest_first")
    )
