"""The ledger for application services: commands beside it, queries on the read side.

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

from turnledger.domain.errors import InvalidInputError
from turnledger.domain.ports import TextVault
from turnledger.domain.text import DEFAULT_MAX_TURN_BYTES, check_identifier
from turnledger.domain.transcodings import register_legacy_transcodings
from turnledger.infra.service_layer.application_history import HistoryCommands
from turnledger.infra.service_layer.application_reads import ConversationReads
from turnledger.infra.service_layer.application_turns import TurnCommands
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
from turnledger.infra.service_layer.purge import PurgeRunner
from turnledger.infra.service_layer.results import (
    DeletionReceipt,
    FoldReceipt,
    TurnReceipt,
)
from turnledger.infra.service_layer.turn_requests import TurnRequests
from turnledger.infra.service_layer.turn_writes import TurnWrites
from turnledger.projections.queries import ConversationQueries
from turnledger.projections.read_side import ReadSide
from turnledger.projections.results import (
    MAX_HISTORY_PAGE,
    HistoryItem,
    HistoryPage,
    ProjectedWindow,
)

if TYPE_CHECKING:  # the restore check imports this module
    from turnledger.infra.restore_report import RestoreReport

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


class Conversations(
    TurnCommands, HistoryCommands, ConversationReads, Application[UUID]
):
    """The conversation ledger, for application services: its turn commands
    (application_turns.py), history edits (application_history.py) and
    queries (application_reads.py) are mixed in; this class builds the
    parts they share and connects the library's persistence hooks."""

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
        self._committer.submit(
            Write(owner_id, chosen, lambda conversation, batch: None, creates=True)
        )
        return chosen


def _is_read_side(recorder: object) -> bool:
    return all(
        callable(getattr(recorder, name, None))
        for name in ("conversations", "turns_by_id", "eligible_newest_first")
    )
