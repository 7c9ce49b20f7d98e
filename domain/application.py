"""Use cases for application services: each loads, calls one command, saves."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID, uuid4

from eventsourcing.application import (
    AggregateNotFoundError,
    Application,
    ProcessingEvent,
)
from eventsourcing.domain import Snapshot
from eventsourcing.persistence import IntegrityError, JSONTranscoder, Mapper, Recording

from turnledger.domain.chain import (
    GENESIS,
    ChainSealingMapper,
    RecentDigests,
    read_link,
)
from turnledger.domain.conversation import (
    Conversation,
    FoldEntry,
    TurnEntry,
    TurnSizes,
    TurnStatus,
    fold_key_id,
)
from turnledger.domain.errors import (
    ConversationNotFoundError,
    InvalidInputError,
    PurgeIncompleteError,
    TextUnavailableError,
    TurnConflictError,
    TurnDeletedError,
    VersionConflictError,
    WindowMismatchError,
)
from turnledger.domain.ports import TextVault
from turnledger.domain.purge import PurgeReport, PurgeRunner
from turnledger.domain.query_cache import QueryCache
from turnledger.domain.receipt import (
    WindowReceipt,
    parse_receipt_policy,
    receipt_policy,
)
from turnledger.domain.text import (
    DEFAULT_MAX_TURN_BYTES,
    TextMetrics,
    check_expected_version,
    check_identifier,
    check_text,
    check_turn_size,
)
from turnledger.domain.transcodings import (
    BytesAsBase64,
    FoldEntryAsList,
    TurnEntryAsList,
)
from turnledger.domain.windowing import FoldStatus, fold_status, window_for
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import CHAR_ESTIMATE, TokenCounter
from turnledger.projections.window import Window, resolve_policy

T = TypeVar("T")

# How often a write is retried after losing a race to another writer of the
# same conversation. Each retry reloads the aggregate and re-checks every rule.
_WRITE_ATTEMPTS = 50

MAX_HISTORY_PAGE = 500

# Snapshots bound the events replayed to load a conversation. They hold turn
# metadata only (about 100 bytes a turn), never text.
DEFAULT_SNAPSHOT_INTERVAL = 200


@dataclass(frozen=True, slots=True)
class TurnReceipt:
    """Result of recording a turn; a retried request returns the same receipt."""

    conversation_id: UUID
    turn_id: str
    status: TurnStatus
    version: int
    recorded_at: datetime


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """A turn as the owner sees it; text is None once the turn is deleted."""

    position: int
    turn_id: str
    status: TurnStatus
    recorded_at: datetime
    deleted_at: datetime | None
    question: str | None
    answer: str | None

    @property
    def deleted(self) -> bool:
        return self.deleted_at is not None


@dataclass(frozen=True, slots=True)
class HistoryPage:
    conversation_id: UUID
    version: int
    total_turns: int
    items: tuple[HistoryItem, ...]
    next_offset: int | None


@dataclass(frozen=True, slots=True)
class DeletionReceipt:
    conversation_id: UUID
    deleted_turn_ids: tuple[str, ...]
    version: int
    purge: PurgeReport | None = None


@dataclass(frozen=True, slots=True)
class ProjectedWindow:
    """A window plus the ledger version it was derived from.

    Pass it to `confirm_turn(..., window=...)` with the answer it produced to
    keep its receipt. The question and system instructions are held here, in
    memory, only to check that pairing and to seal the instructions.
    """

    conversation_id: UUID
    ledger_version: int
    window: Window
    question: str = field(default="", repr=False)
    system: str = field(default="", repr=False)
    policy: dict[str, Any] = field(default_factory=dict)

    def receipt(self) -> WindowReceipt:
        """The content-free receipt of this window."""
        return WindowReceipt.of_body(
            policy=self.policy,
            ledger_version=self.ledger_version,
            turn_ids=self.window.kept_turn_ids,
            body=self.window.body,
            fold_id=self.window.fold_id if self.window.fold_sent else None,
        )


@dataclass(frozen=True, slots=True)
class FoldReceipt:
    conversation_id: UUID
    fold_id: str
    covers_through_turn_id: str
    version: int


def snapshot_due(version: int, interval: int) -> bool:
    """Whether a snapshot is taken when a conversation reaches `version`.

    Every `interval` events while the conversation is young; from 16 intervals
    on, the spacing doubles with each doubling of the length. A snapshot holds
    the whole turn index, so fixed spacing would make writing a long
    conversation quadratic; this spacing keeps the snapshots' total size linear
    in the length, and a load replays at most about an eighth of the events.
    """
    step = interval
    while version >= step * 16:
        step *= 2
    return version % step == 0


class Conversations(Application[UUID]):
    """The conversation ledger, for application services."""

    name = "Conversations"
    # Snapshots are taken by `save` on the spacing of `snapshot_due`, not by the
    # library's fixed interval, which would rewrite a long conversation's whole
    # turn index every few hundred events.
    is_snapshotting_enabled = True
    # Reading the log in pages larger than the library default of 10.
    log_section_size = 1000

    def __init__(
        self,
        env: dict[str, str] | None = None,
        *,
        vault: TextVault,
        max_turn_bytes: int = DEFAULT_MAX_TURN_BYTES,
        snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL,
        query_cache_size: int = 0,
    ) -> None:
        self.vault = vault
        self.max_turn_bytes = max_turn_bytes
        self._recent_digests = RecentDigests()
        self.snapshot_interval: int | None = snapshot_interval  # None: no snapshots
        super().__init__(env)
        self._query_cache = QueryCache(
            query_cache_size,
            load=self.repository.get,
            newer_events=lambda conversation_id, version: self.events.get(
                conversation_id, gt=version
            ),
        )
        self.purge = PurgeRunner(self, vault.purge_view)

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording[UUID]]:
        recordings = super().save(*objs, **kwargs)
        if self.snapshots is not None and self.snapshot_interval is not None:
            interval = self.snapshot_interval
            due = {
                recording.domain_event.originator_id
                for recording in recordings
                if snapshot_due(recording.domain_event.originator_version, interval)
            }
            for obj in objs:
                if isinstance(obj, Conversation) and obj.id in due:
                    # The aggregate in hand is the state just recorded: no reload.
                    self.snapshots.put([Snapshot.take(obj)])
        return recordings

    def construct_mapper(self) -> Mapper[UUID]:
        base = super().construct_mapper()
        return ChainSealingMapper(
            transcoder=base.transcoder, compressor=base.compressor, cipher=base.cipher
        )

    def _record(self, processing_event: ProcessingEvent[UUID]) -> list[Recording[UUID]]:
        """Link each new event to the digest of the stored event before it.

        The predecessor's digest is the one it was stored with: remembered if
        this process wrote it, else read from its stored row, never taken from
        the aggregate, so the chain is right however the aggregate was loaded
        (cache, snapshot, replay). Events saved together are linked in order.
        """
        sealed: list[tuple[UUID, int, str]] = []
        heads: dict[UUID, str] = {}
        for new_event in processing_event.events:
            originator_id = new_event.originator_id
            version = new_event.originator_version
            previous = heads.get(originator_id)
            if previous is None:
                previous = self._stored_digest(originator_id, version - 1)
            # Events are frozen; the chain field is set once, before mapping.
            object.__setattr__(new_event, "previous_digest", previous)
            stored = self.mapper.to_stored_event(new_event)
            heads[originator_id] = read_link(stored).recorded_digest
            sealed.append((originator_id, version, heads[originator_id]))
        recordings = super()._record(processing_event)
        for originator_id, version, digest in sealed:
            self._recent_digests.put(originator_id, version, digest)
        return recordings

    def _stored_digest(self, originator_id: UUID, version: int) -> str:
        if version < 1:
            return GENESIS
        remembered = self._recent_digests.get(originator_id, version)
        if remembered is not None:
            return remembered
        rows = self.recorder.select_events(originator_id, gt=version - 1, lte=version)
        if not rows:
            # The predecessor is not stored: saving this event will fail the
            # version check, so any link will do; the genesis keeps it well-formed.
            return GENESIS
        return read_link(rows[0]).recorded_digest

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        transcoder.register(BytesAsBase64())
        transcoder.register(TurnEntryAsList())
        transcoder.register(FoldEntryAsList())

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
        if conversation_id is None:
            conversation = Conversation(owner_id=owner_id)
        elif not isinstance(conversation_id, UUID):
            raise InvalidInputError("conversation_id", "expected a UUID")
        else:
            # The library's constructor for a chosen id; same Started event.
            conversation = Conversation._create(
                Conversation.Started, id=conversation_id, owner_id=owner_id
            )
        try:
            self.save(conversation)
        except IntegrityError:
            if conversation_id is None:
                raise
            # Already recorded: the owner's own retry, or somebody else's id,
            # which is answered like a missing conversation.
            self.get_conversation(owner_id, conversation_id)
        return conversation.id

    def confirm_turn(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        turn_id: str,
        question: str,
        answer: str,
        expected_version: int | None = None,
        window: ProjectedWindow | None = None,
    ) -> TurnReceipt:
        """Record a completed exchange. Retrying with the same content is a no-op.

        `window` is the projected window this answer replied to: its receipt is
        kept with the turn so an audit can prove what was sent.
        """
        if window is not None:
            self._check_window(conversation_id, question, window)
        return self._record_turn(
            owner_id,
            conversation_id,
            turn_id=turn_id,
            status=TurnStatus.CONFIRMED,
            question=question,
            answer=answer,
            expected_version=expected_version,
            window=window,
        )

    def record_abandoned_turn(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        turn_id: str,
        question: str,
        outcome: TurnStatus | str,
        partial_answer: str = "",
        expected_version: int | None = None,
    ) -> TurnReceipt:
        """Record an exchange whose reply failed or was stopped: never sent."""
        try:
            status = TurnStatus(outcome)
        except ValueError:
            status = None
        if status not in (TurnStatus.FAILED, TurnStatus.STOPPED):
            raise InvalidInputError("outcome", "must be 'failed' or 'stopped'")
        assert status is not None
        return self._record_turn(
            owner_id,
            conversation_id,
            turn_id=turn_id,
            status=status,
            question=question,
            answer=partial_answer,
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
        check_expected_version(expected_version)
        actor = check_identifier("deleted_by", deleted_by or owner_id)
        wanted = None
        if turn_ids is not None:
            if isinstance(turn_ids, str) or not isinstance(turn_ids, Sequence):
                raise InvalidInputError(
                    "turn_ids", "expected a list of turn ids or None"
                )
            wanted = [check_identifier("turn_id", turn_id) for turn_id in turn_ids]

        def attempt(conversation: Conversation) -> list[str]:
            return conversation.delete_history(
                turn_ids=wanted, deleted_by=actor, expected_version=expected_version
            )

        conversation, deleted = self._write(owner_id, conversation_id, attempt)
        # The event is saved: from here the deletion stands. The purge destroys
        # the keys as a tracked follower of the log, so if it fails or the
        # process dies now, the next purge run (or start-up) completes it.
        try:
            report = self.purge_deleted_history()
        except Exception as error:
            raise PurgeIncompleteError(conversation.id) from error
        return DeletionReceipt(
            conversation.id, tuple(deleted), conversation.version, purge=report
        )

    def purge_deleted_history(self) -> PurgeReport:
        """Destroy the keys of every deleted turn not yet purged; compact the store."""
        return self.purge.run()

    # Queries ------------------------------------------------------------------

    def get_conversation(self, owner_id: str, conversation_id: UUID) -> Conversation:
        check_identifier("owner_id", owner_id)
        if not isinstance(conversation_id, UUID):
            raise InvalidInputError("conversation_id", "expected a UUID")
        return self._owned(
            owner_id, conversation_id, lambda key: self.repository.get(key)
        )

    def get_history(
        self, owner_id: str, conversation_id: UUID, *, offset: int = 0, limit: int = 50
    ) -> HistoryPage:
        """One page of turns, oldest first, deleted ones as placeholders."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError("offset", "must be a non-negative integer")
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not (1 <= limit <= MAX_HISTORY_PAGE)
        ):
            raise InvalidInputError(
                "limit", f"must be an integer from 1 to {MAX_HISTORY_PAGE}"
            )
        conversation = self.get_conversation(owner_id, conversation_id)
        entries = list(conversation.turns.values())[offset : offset + limit]
        items = self.history_items(conversation, entries, first_position=offset)
        end = offset + len(entries)
        return HistoryPage(
            conversation_id=conversation.id,
            version=conversation.version,
            total_turns=len(conversation.turns),
            items=items,
            next_offset=end if end < len(conversation.turns) else None,
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
        given, overrides the policy's. Chooses turns from the sizes recorded
        with them, then reads and decrypts only the turns it keeps. Reads
        only: nothing is written.
        """
        check_text("question", question)
        check_text("system", system, allow_empty=True)
        check_text("model", model)
        if max_bytes is not None and (
            isinstance(max_bytes, bool)
            or not isinstance(max_bytes, int)
            or max_bytes < 1
        ):
            raise InvalidInputError("max_bytes", "must be a positive integer")
        if max_bytes is None and policy is None:
            raise InvalidInputError("max_bytes", "give max_bytes or a policy")
        if policy is not None and not isinstance(policy, WindowPolicy):
            raise InvalidInputError("policy", "expected a WindowPolicy")
        counter = token_counter or CHAR_ESTIMATE
        if not isinstance(counter, TokenCounter):
            raise InvalidInputError("token_counter", "expected a TokenCounter")
        resolved = resolve_policy(policy, max_bytes)
        conversation = self._read_conversation(owner_id, conversation_id)
        window = window_for(
            conversation,
            question=question,
            system=system,
            model=model,
            policy=resolved,
            counter=counter,
            read_texts=lambda entries: self._read_texts(conversation, entries),
            read_fold=lambda fold: self._read_fold(conversation, fold),
        )
        return ProjectedWindow(
            conversation.id,
            conversation.version,
            window,
            question=question,
            system=system,
            policy=receipt_policy(model=model, policy=resolved, counter=counter.name),
        )

    def reapply_policy(
        self,
        conversation: Conversation,
        *,
        policy: dict[str, Any],
        question: str,
        system: str,
        texts: Mapping[str, tuple[str, str]] | None = None,
        token_counters: Mapping[str, TokenCounter] | None = None,
    ) -> Window:
        """The window a receipt's `policy` gives for `question` over this state.

        `conversation` may be a past version (`repository.get(id, version=v)`):
        this is how an audit re-derives a receipt's body. `texts` (turn id ->
        question, answer) saves reading the kept turns' texts again;
        `token_counters` names the counters an application used besides the
        built-in estimate.
        """
        model, window_policy, counter_name = parse_receipt_policy(policy)
        counters = {CHAR_ESTIMATE.name: CHAR_ESTIMATE, **(token_counters or {})}
        counter = counters.get(counter_name)
        if counter is None:
            raise InvalidInputError(
                "policy", f"token counter {counter_name!r} is not available here"
            )

        def read_texts(entries: Sequence[TurnEntry]) -> dict[str, tuple[str, str]]:
            if texts is not None and all(e.turn_id in texts for e in entries):
                return {e.turn_id: texts[e.turn_id] for e in entries}
            return self._read_texts(conversation, entries)

        return window_for(
            conversation,
            question=question,
            system=system,
            model=model,
            policy=window_policy,
            counter=counter,
            read_texts=read_texts,
            read_fold=lambda fold: self._read_fold(conversation, fold),
        )

    def record_fold(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        covers_through_turn_id: str,
        summary: str,
        fold_id: str | None = None,
        expected_version: int | None = None,
    ) -> FoldReceipt:
        """Record a summary that stands in for every turn up to the given one.

        Written by the application service that made the summary; windows send
        it instead of the turns it covers. Deleting any covered turn destroys it.
        """
        check_identifier("covers_through_turn_id", covers_through_turn_id)
        check_text("summary", summary)
        check_turn_size(summary, limit=self.max_turn_bytes)
        check_expected_version(expected_version)
        fold_id = check_identifier("fold_id", fold_id or uuid4().hex)
        metrics = TextMetrics.of(summary)

        def attempt(conversation: Conversation) -> None:
            sealed = self.vault.seal(
                conversation.id, fold_key_id(fold_id), "summary", summary
            )
            conversation.record_fold(
                fold_id=fold_id,
                covers_through_turn_id=covers_through_turn_id,
                sealed_summary=sealed,
                summary_json_bytes=metrics.json_bytes,
                summary_chars=metrics.chars,
                expected_version=expected_version,
            )

        conversation, _ = self._write(owner_id, conversation_id, attempt)
        fold = conversation.fold_map()[fold_id]
        return FoldReceipt(
            conversation.id, fold_id, fold.covers_through_turn_id, fold.version
        )

    def get_fold_status(
        self, owner_id: str, conversation_id: UUID, *, threshold_tokens: int
    ) -> FoldStatus:
        """Whether the turns after the current fold exceed `threshold_tokens`."""
        if (
            isinstance(threshold_tokens, bool)
            or not isinstance(threshold_tokens, int)
            or threshold_tokens < 1
        ):
            raise InvalidInputError("threshold_tokens", "must be a positive integer")
        return fold_status(
            self._read_conversation(owner_id, conversation_id), threshold_tokens
        )

    def get_fold_summary(self, owner_id: str, conversation_id: UUID) -> str | None:
        """The text of the current fold, or None when there is none."""
        conversation = self._read_conversation(owner_id, conversation_id)
        fold = conversation.current_fold
        return None if fold is None else self._read_fold(conversation, fold)

    # Internals ----------------------------------------------------------------

    def _read_conversation(self, owner_id: str, conversation_id: UUID) -> Conversation:
        """For queries only: with a query cache, the cached object itself,
        which queries must not change."""
        return self._owned(owner_id, conversation_id, self._query_cache.get)

    @staticmethod
    def _owned(
        owner_id: str, conversation_id: UUID, load: Callable[[UUID], object]
    ) -> Conversation:
        check_identifier("owner_id", owner_id)
        if not isinstance(conversation_id, UUID):
            raise InvalidInputError("conversation_id", "expected a UUID")
        try:
            conversation = load(conversation_id)
        except AggregateNotFoundError:
            raise ConversationNotFoundError(conversation_id) from None
        # Somebody else's conversation is answered exactly like a missing one.
        if (
            not isinstance(conversation, Conversation)
            or conversation.owner_id != owner_id
        ):
            raise ConversationNotFoundError(conversation_id)
        return conversation

    def history_items(
        self,
        conversation: Conversation,
        entries: Sequence[TurnEntry],
        *,
        first_position: int,
    ) -> tuple[HistoryItem, ...]:
        """These turns as the owner sees them: text for live turns, else None."""
        texts = self._read_texts(conversation, [e for e in entries if not e.deleted])
        return tuple(
            HistoryItem(
                position=first_position + index,
                turn_id=entry.turn_id,
                status=entry.status,
                recorded_at=entry.recorded_at,
                deleted_at=entry.deleted_at,
                question=texts.get(entry.turn_id, (None, None))[0],
                answer=texts.get(entry.turn_id, (None, None))[1],
            )
            for index, entry in enumerate(entries)
        )

    def _read_fold(self, conversation: Conversation, fold: FoldEntry) -> str:
        recorded = next(
            self._events_between(conversation.id, fold.version, fold.version)
        )
        (summary,) = self.vault.open_many(
            conversation.id, [(fold.key_id, "summary", recorded.sealed_summary)]
        )
        if summary is None:
            raise TextUnavailableError(conversation.id, fold.key_id)
        return summary

    def _record_turn(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        turn_id: str,
        status: TurnStatus,
        question: str,
        answer: str,
        expected_version: int | None,
        window: ProjectedWindow | None = None,
    ) -> TurnReceipt:
        check_identifier("turn_id", turn_id)
        check_text("question", question)
        check_text("answer", answer, allow_empty=status is not TurnStatus.CONFIRMED)
        check_turn_size(question, answer, limit=self.max_turn_bytes)
        check_expected_version(expected_version)
        question_metrics, answer_metrics = (
            TextMetrics.of(question),
            TextMetrics.of(answer),
        )
        sizes = TurnSizes(
            question_json_bytes=question_metrics.json_bytes,
            answer_json_bytes=answer_metrics.json_bytes,
            question_chars=question_metrics.chars,
            answer_chars=answer_metrics.chars,
        )

        def attempt(conversation: Conversation) -> TurnReceipt | None:
            existing = conversation.turns.get(turn_id)
            if existing is not None:
                return self._replayed_receipt(
                    conversation,
                    existing,
                    status=status,
                    question=question,
                    answer=answer,
                )
            conversation.check_version(expected_version)
            if window is not None and window.ledger_version > conversation.version:
                raise WindowMismatchError(
                    conversation.id, "it was projected from a later ledger version"
                )
            sealed_question = self.vault.seal(
                conversation.id, turn_id, "question", question
            )
            sealed_answer = self.vault.seal(conversation.id, turn_id, "answer", answer)
            if status is TurnStatus.CONFIRMED:
                conversation.confirm_turn(
                    turn_id=turn_id,
                    sealed_question=sealed_question,
                    sealed_answer=sealed_answer,
                    sizes=sizes,
                    window_receipt=None
                    if window is None
                    else window.receipt().to_document(),
                    sealed_system=None
                    if window is None
                    else self.vault.seal(
                        conversation.id, turn_id, "system", window.system
                    ),
                )
            else:
                conversation.abandon_turn(
                    turn_id=turn_id,
                    outcome=status,
                    sealed_question=sealed_question,
                    sealed_answer=sealed_answer,
                    sizes=sizes,
                )
            return None

        conversation, replayed = self._write(owner_id, conversation_id, attempt)
        if replayed is not None:
            return replayed
        entry = conversation.turns[turn_id]
        return TurnReceipt(
            conversation.id, turn_id, entry.status, entry.version, entry.recorded_at
        )

    @staticmethod
    def _check_window(
        conversation_id: UUID, question: str, window: ProjectedWindow
    ) -> None:
        """A receipt is only kept for the window that asked this question."""
        if not isinstance(window, ProjectedWindow):
            raise InvalidInputError("window", "expected the ProjectedWindow answered")
        if window.conversation_id != conversation_id:
            raise WindowMismatchError(
                conversation_id, "it belongs to another conversation"
            )
        if window.question != question:
            raise WindowMismatchError(
                conversation_id, "it was projected for a different question"
            )

    def _replayed_receipt(
        self,
        conversation: Conversation,
        existing: TurnEntry,
        *,
        status: TurnStatus,
        question: str,
        answer: str,
    ) -> TurnReceipt:
        """A retry of a recorded turn: same content returns the original receipt."""
        if existing.deleted:
            raise TurnDeletedError(conversation.id, existing.turn_id)
        if existing.status is not status:
            raise TurnConflictError(
                conversation.id,
                existing.turn_id,
                f"is already recorded as {existing.status.value}; "
                "record a retried exchange under a new turn id",
            )
        stored = self._read_texts(conversation, [existing]).get(existing.turn_id)
        if stored != (question, answer):
            raise TurnConflictError(
                conversation.id,
                existing.turn_id,
                "is already recorded with different content",
            )
        return TurnReceipt(
            conversation.id,
            existing.turn_id,
            existing.status,
            existing.version,
            existing.recorded_at,
        )

    def _write(
        self,
        owner_id: str,
        conversation_id: UUID,
        command: Callable[[Conversation], T],
    ) -> tuple[Conversation, T]:
        """Load, run `command`, save; on a lost race reload and run it again.

        The command re-checks every rule against the fresh state, so a retry
        can still end in an idempotent replay or a version conflict.
        """
        for _ in range(_WRITE_ATTEMPTS):
            conversation = self.get_conversation(owner_id, conversation_id)
            result = command(conversation)
            try:
                self.save(conversation)
            except IntegrityError:
                continue
            return conversation, result
        current = self.get_conversation(owner_id, conversation_id).version
        raise VersionConflictError(conversation_id, current, current)

    def _read_texts(
        self, conversation: Conversation, entries: Sequence[TurnEntry]
    ) -> dict[str, tuple[str, str]]:
        """Decrypt the texts of these (undeleted) turns from their events."""
        if not entries:
            return {}
        wanted = {entry.turn_id for entry in entries}
        versions = [entry.version for entry in entries]
        items: list[tuple[str, str, bytes]] = []
        for recorded in self._events_between(
            conversation.id, min(versions), max(versions)
        ):
            turn_id = getattr(recorded, "turn_id", None)
            if turn_id in wanted:
                items.append((turn_id, "question", recorded.sealed_question))
                items.append((turn_id, "answer", recorded.sealed_answer))
        opened = self.vault.open_many(conversation.id, items)
        texts: dict[str, tuple[str, str]] = {}
        for index in range(0, len(items), 2):
            turn_id = items[index][0]
            question, answer = opened[index], opened[index + 1]
            if question is None or answer is None:
                raise TextUnavailableError(conversation.id, turn_id)
            texts[turn_id] = (question, answer)
        return texts

    def _events_between(
        self, conversation_id: UUID, first: int, last: int
    ) -> Iterator[Any]:
        return iter(self.events.get(conversation_id, gt=first - 1, lte=last))
