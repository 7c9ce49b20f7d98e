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

from collections.abc import Mapping, Sequence
from dataclasses import replace
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
    Conversation,
    TurnFacts,
    TurnStatus,
    fold_key_id,
)
from turnledger.domain.errors import (
    InvalidInputError,
    PurgeIncompleteError,
)
from turnledger.domain.parts import TurnParts
from turnledger.domain.ports import TextVault
from turnledger.domain.text import (
    DEFAULT_MAX_TURN_BYTES,
    TextMetrics,
    check_expected_version,
    check_identifier,
    check_text,
    check_turn_size,
)
from turnledger.domain.transcodings import register_legacy_transcodings
from turnledger.infra.service_layer.batch import Batch, BatchWriter, Write
from turnledger.infra.service_layer.chain_mapper import (
    ChainedEventStore,
    ChainSealingMapper,
    Event,
)
from turnledger.infra.service_layer.group_commit import GroupCommitter
from turnledger.infra.service_layer.purge import PurgeReport, PurgeRunner
from turnledger.infra.service_layer.results import (
    DeletionReceipt,
    FoldReceipt,
    TurnReceipt,
    TurnRequest,
)
from turnledger.infra.service_layer.turn_writes import (
    TurnWrites,
    check_conversation_id,
    check_window,
    turn_parts,
)
from turnledger.infra.service_layer.window_requests import project_requested
from turnledger.projections.ledger_rows import (
    ConversationRow,
    RowChanges,
    SummarySize,
    project_events,
)
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.queries import ConversationQueries, FoldStatus
from turnledger.projections.read_side import ReadSide, current_fold
from turnledger.projections.results import (
    MAX_HISTORY_PAGE,
    HistoryItem,
    HistoryPage,
    ProjectedWindow,
)
from turnledger.projections.tokens import TokenCounter

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


class Conversations(Application[UUID]):
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
            kwargs["with_digests"] = partial(_recorded_with, batch)
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
            self._confirmed_write(
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
                writes.append(self._request_write(request))
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

    def _request_write(self, request: TurnRequest) -> Write:
        write = self._uncredentialed_write(request)
        if request.credential is None:
            return write
        if not self.checks_credentials:
            raise InvalidInputError(
                "credential", "this ledger's store does not check credentials"
            )
        return replace(write, credential=request.credential)

    def _uncredentialed_write(self, request: TurnRequest) -> Write:
        if not isinstance(request, TurnRequest):
            raise InvalidInputError("requests", "expected TurnRequest items")
        if request.status == TurnStatus.CONFIRMED:
            return self._confirmed_write(
                request.owner_id,
                request.conversation_id,
                turn_id=request.turn_id,
                question=request.question,
                answer=request.answer,
                parts=request.parts,
                expected_version=request.expected_version,
                window=self._requested_window(request),
            )
        if request.window is not None:
            raise InvalidInputError(
                "window", "only a confirmed turn keeps its window's receipt"
            )
        return self._abandoned_write(
            request.owner_id,
            request.conversation_id,
            turn_id=request.turn_id,
            outcome=request.status,
            question=request.question,
            partial_answer=request.answer,
            parts=request.parts,
            expected_version=request.expected_version,
        )

    def _requested_window(self, request: TurnRequest) -> ProjectedWindow | None:
        """The window a request names, projected again (window_requests.py)."""
        if request.window is None:
            return None
        question = (
            request.parts.question if request.parts is not None else request.question
        )
        if not isinstance(question, str):
            return None  # _confirmed_write refuses the turn itself
        return project_requested(
            self.queries,
            request.owner_id,
            request.conversation_id,
            question,
            request.window,
        )

    def _confirmed_write(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        turn_id: str,
        question: str | None,
        answer: str | None,
        parts: TurnParts | None,
        expected_version: int | None,
        window: ProjectedWindow | None = None,
    ) -> Write:
        turn = turn_parts(question, answer, parts, answer_field="answer")
        turn.check_complete()
        if window is not None:
            check_window(conversation_id, turn.question, window)
        return self._turns.write(
            owner_id,
            conversation_id,
            turn_id=turn_id,
            status=TurnStatus.CONFIRMED,
            turn=turn,
            expected_version=expected_version,
            window=window,
        )

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
            self._abandoned_write(
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

    def _abandoned_write(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        turn_id: str,
        outcome: TurnStatus | str,
        question: str | None,
        partial_answer: str | None,
        parts: TurnParts | None,
        expected_version: int | None,
    ) -> Write:
        try:
            status = TurnStatus(outcome)
        except ValueError:
            status = None
        if status not in (TurnStatus.FAILED, TurnStatus.STOPPED):
            raise InvalidInputError("outcome", "must be 'failed' or 'stopped'")
        assert status is not None
        turn = turn_parts(
            question,
            "" if partial_answer is None and parts is None else partial_answer,
            parts,
            answer_field="partial_answer",
        )
        return self._turns.write(
            owner_id,
            conversation_id,
            turn_id=turn_id,
            status=status,
            turn=turn,
            expected_version=expected_version,
        )

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

        def run(conversation: Conversation, batch: Batch) -> tuple[list[str], int]:
            read = self.read_side
            facts: Mapping[str, TurnFacts]
            if wanted is None:
                rows = read.undeleted_turns(conversation.id)
                facts = {row.turn_id: row.facts() for row in rows}
                batch.turns.setdefault(conversation.id, {}).update(
                    (row.turn_id, row) for row in rows
                )
            else:
                facts = {
                    turn_id: row.facts()
                    for turn_id in wanted
                    if (row := batch.turn(conversation.id, turn_id)) is not None
                }
            head = batch.heads[conversation.id]
            live = [
                fold.facts()
                for fold in read.folds(conversation.id)
                if fold.live_at(head.version)
            ]
            deleted = conversation.delete_history(
                requested=wanted,
                facts=facts,
                live_folds=live,
                deleted_by=actor,
                expected_version=expected_version,
            )
            return deleted, conversation.version

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
        metrics = TextMetrics.of(summary)
        key_id = fold_key_id(fold_id)

        def run(conversation: Conversation, batch: Batch) -> FoldReceipt:
            read = self.read_side
            head_version = conversation.version
            folds = read.folds(conversation.id)
            through = batch.turn(conversation.id, covers_through_turn_id)
            covered_eligible = 0
            deleted_since: list[str] = []
            if through is not None:
                now = set(
                    read.eligible_ids(
                        conversation.id,
                        first=0,
                        last=through.position,
                        as_of=head_version,
                    )
                )
                covered_eligible = len(now)
                if summarized_version is not None:
                    before = read.eligible_ids(
                        conversation.id,
                        first=0,
                        last=through.position,
                        as_of=min(summarized_version, head_version),
                    )
                    deleted_since = [t for t in before if t not in now]
            current = current_fold(folds, head_version)
            data_key, new_key = self.vault.new_data_key(conversation.id, key_id)
            conversation.record_fold(
                fold_id=fold_id,
                through=None if through is None else through.facts(),
                covers_through_turn_id=covers_through_turn_id,
                covered_eligible=covered_eligible,
                current_fold=None if current is None else current.facts(),
                fold_exists=any(f.fold_id == fold_id for f in folds),
                deleted_since_summary=deleted_since,
                sealed_summary=self.vault.seal_with(
                    data_key,
                    conversation.id,
                    key_id,
                    "summary",
                    summary,
                    owner_id=conversation.owner_id,
                ),
                summarized_version=summarized_version,
                expected_version=expected_version,
            )
            if new_key is not None:
                batch.keys.append(new_key)
            batch.sizes.setdefault(conversation.id, {})[key_id] = SummarySize(
                metrics.json_bytes, metrics.chars
            )
            return FoldReceipt(
                conversation.id, fold_id, covers_through_turn_id, conversation.version
            )

        result: FoldReceipt = self._submit(
            Write(owner_id, conversation_id, run, turn_ids=(covers_through_turn_id,))
        )
        return result

    # Queries (the read side; see projections/queries.py) -----------------------

    def get_conversation(self, owner_id: str, conversation_id: UUID) -> ConversationRow:
        """The conversation's row: owner, version, counts (no turns)."""
        return self.queries.get_conversation(owner_id, conversation_id)

    def get_history(
        self, owner_id: str, conversation_id: UUID, *, offset: int = 0, limit: int = 50
    ) -> HistoryPage:
        """One page of turns, oldest first, deleted ones as placeholders."""
        return self.queries.get_history(
            owner_id, conversation_id, offset=offset, limit=limit
        )

    def project_window(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        question: str,
        system: str,
        model: str,
        max_bytes: int | None = None,
        policy: WindowPolicy | None = None,
        token_counter: TokenCounter | None = None,
    ) -> ProjectedWindow:
        """The request for `question` under `policy` (see projections/window.py).

        Without a policy only `max_bytes` applies; with one, `max_bytes`, when
        given, overrides the policy's. Reads only: nothing is written.
        """
        return self.queries.project_window(
            owner_id,
            conversation_id,
            question=question,
            system=system,
            model=model,
            max_bytes=max_bytes,
            policy=policy,
            token_counter=token_counter,
        )

    def get_fold_status(
        self, owner_id: str, conversation_id: UUID, *, threshold_tokens: int
    ) -> FoldStatus:
        """Whether the turns after the current fold exceed `threshold_tokens`."""
        return self.queries.get_fold_status(
            owner_id, conversation_id, threshold_tokens=threshold_tokens
        )

    def get_fold_summary(self, owner_id: str, conversation_id: UUID) -> str | None:
        """The text of the current fold, or None when there is none."""
        return self.queries.get_fold_summary(owner_id, conversation_id)

    def _submit(self, write: Write) -> Any:
        return self._committer.submit(write)


def _recorded_with(
    batch: Batch, events: Sequence[Event], digests: Mapping[UUID, list[str]]
) -> dict[str, Any]:
    """What the recorder writes with a batch's events: the read-side rows
    (projected from the events and the digests they were stored with), the
    new keys and the credentials to check."""
    changes = RowChanges()
    by_conversation: dict[UUID, list[Event]] = {}
    for new_event in events:
        by_conversation.setdefault(new_event.originator_id, []).append(new_event)
    for conversation_id, conversation_events in by_conversation.items():
        changes = changes + project_events(
            head=batch.heads.get(conversation_id),
            events=conversation_events,
            digests=digests[conversation_id],
            sizes=batch.sizes.get(conversation_id, {}),
            known_turns=batch.turns.get(conversation_id, {}),
        )
    batch.new_heads = {row.conversation_id: row for row in changes.conversations}
    recorded: dict[str, Any] = {"read_side": changes}
    if batch.keys:
        recorded["new_keys"] = tuple(batch.keys)
    if batch.credentials:  # only on stores that check them (_request_write)
        recorded["credentials"] = tuple(sorted(batch.credentials))
    return recorded


def _is_read_side(recorder: object) -> bool:
    return all(
        callable(getattr(recorder, name, None))
        for name in ("conversations", "turns_by_id", "eligible_newest_first")
    )
