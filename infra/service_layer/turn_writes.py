"""A turn checked, sealed and made into one write for the group committer.

Confirmed and abandoned turns take the same path: the input is checked and the
texts sealed in the caller's thread; the write's `run`, called by the batch's
leader with the conversation at its head, applies the rules that need the
read side (a retried turn id, a deleted turn, the expected version, the window
the answer replied to) and adds the turn's rows and key to the batch.
"""

from __future__ import annotations

from typing import Any, Protocol
from uuid import UUID

from turnledger.domain.conversation import Conversation, TurnStatus
from turnledger.domain.errors import (
    InvalidInputError,
    TurnConflictError,
    TurnDeletedError,
    WindowMismatchError,
)
from turnledger.domain.parts import TurnParts, encode_parts
from turnledger.domain.ports import NewKey, TextVault
from turnledger.domain.text import (
    check_expected_version,
    check_identifier,
    check_text,
    check_turn_size,
)
from turnledger.infra.service_layer.batch import Batch, Write
from turnledger.infra.service_layer.results import TurnReceipt
from turnledger.projections.ledger_rows import TurnRow
from turnledger.projections.queries import ConversationQueries
from turnledger.projections.receipt import receipt_key_ids
from turnledger.projections.results import ProjectedWindow
from turnledger.projections.turn_sizes import turn_sizes


class Ledger(Protocol):
    """What a turn write needs of the ledger (read when each write is made:
    tests swap the vault)."""

    @property
    def vault(self) -> TextVault: ...

    max_turn_bytes: int
    queries: ConversationQueries


class TurnWrites:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    @property
    def vault(self) -> TextVault:
        return self.ledger.vault

    # Long because: 70 lines are `run`, closing over what is checked and sealed here
    def write(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        turn_id: str,
        status: TurnStatus,
        turn: TurnParts,
        expected_version: int | None,
        window: ProjectedWindow | None = None,
    ) -> Write:
        check_identifier("owner_id", owner_id)
        check_conversation_id(conversation_id)
        check_identifier("turn_id", turn_id)
        check_turn_size(
            *turn.texts(),
            limit=self.ledger.max_turn_bytes,
            extra=turn.inline_bytes() + turn.metadata_bytes(),
        )
        check_expected_version(expected_version)
        question, answer = turn.question, turn.answer
        # A turn with metadata and no parts is sealed with it, and is sent and
        # sized like a text-only turn (the metadata is never sent).
        keeps_parts = not turn.text_only or turn.metadata is not None
        parts_text = encode_parts(turn) if keeps_parts else None
        sizes = turn_sizes(turn)

        # Sealing is the costly part of a turn: done here, in the caller's
        # thread, it runs while the group commit's leader waits on the database.
        # (Where keys are stored apart from the events, a key is made only once
        # the turn is known to be new.)
        # Sealed for `owner_id`: the write refuses a conversation of another
        # owner, so this is the owner the conversation's Started event names.
        sealed = (
            self._seal_turn(
                owner_id, conversation_id, turn_id, question, answer, parts_text
            )
            if self.vault.keys_with_events
            else None
        )

        # Long because: a turn's step in the batch: retry, checks, event, row in order
        def run(conversation: Conversation, batch: Batch) -> TurnReceipt:
            existing = batch.turn(conversation.id, turn_id)
            if existing is not None:
                return self._replayed_receipt(
                    conversation.id,
                    existing,
                    batch,
                    status=status,
                    turn=turn,
                    owner_id=conversation.owner_id,
                )
            conversation.check_version(expected_version)
            if window is not None and window.ledger_version > conversation.version:
                raise WindowMismatchError(
                    conversation.id, "it was projected from a later ledger version"
                )
            data_key, new_key, sealed_question, sealed_answer, sealed_parts = (
                sealed
                or self._seal_turn(
                    owner_id, conversation.id, turn_id, question, answer, parts_text
                )
            )
            if status is TurnStatus.CONFIRMED:
                conversation.confirm_turn(
                    turn_id=turn_id,
                    sealed_question=sealed_question,
                    sealed_answer=sealed_answer,
                    existing=None,
                    window_receipt=None
                    if window is None
                    else self._receipt(conversation.id, turn_id, data_key, window),
                    sealed_system=None
                    if window is None
                    else self.vault.seal_with(
                        data_key,
                        conversation.id,
                        turn_id,
                        "system",
                        window.system,
                        owner_id=owner_id,
                    ),
                    sealed_parts=sealed_parts,
                )
            else:
                conversation.abandon_turn(
                    turn_id=turn_id,
                    outcome=status,
                    sealed_question=sealed_question,
                    sealed_answer=sealed_answer,
                    sealed_parts=sealed_parts,
                    existing=None,
                )
            recorded = conversation.pending_events[-1]
            if new_key is not None:
                batch.keys.append(new_key)
            batch.sizes.setdefault(conversation.id, {})[turn_id] = sizes
            batch.texts[(conversation.id, turn_id)] = (status, turn)
            row = TurnRow(
                conversation_id=conversation.id,
                position=conversation.turn_count - 1,
                turn_id=turn_id,
                status=status,
                version=conversation.version,
                recorded_at=recorded.timestamp,
                sizes=sizes,
            )
            batch.turns.setdefault(conversation.id, {})[turn_id] = row
            return TurnReceipt(
                conversation.id, turn_id, status, row.version, row.recorded_at
            )

        return Write(
            owner_id,
            conversation_id,
            run,
            turn_ids=(turn_id,),
            # A stale head would wrongly refuse an expected version or a window.
            optimistic=expected_version is None and window is None,
        )

    def _seal_turn(
        self,
        owner_id: str,
        conversation_id: UUID,
        turn_id: str,
        question: str,
        answer: str,
        parts_text: str | None,
    ) -> tuple[bytes, NewKey | None, bytes, bytes, bytes | None]:
        """A new data key for the turn and its texts (and parts) sealed under it."""
        data_key, new_key = self.vault.new_data_key(conversation_id, turn_id)

        def seal(field_name: str, text: str) -> bytes:
            return self.vault.seal_with(
                data_key, conversation_id, turn_id, field_name, text, owner_id=owner_id
            )

        return (
            data_key,
            new_key,
            seal("question", question),
            seal("answer", answer),
            None if parts_text is None else seal("parts", parts_text),
        )

    def _receipt(
        self,
        conversation_id: UUID,
        turn_id: str,
        data_key: bytes,
        window: ProjectedWindow,
    ) -> dict[str, Any]:
        key_ids = receipt_key_ids(
            turn_id, window.window.kept_turn_ids, window.sent_fold_id
        )
        mac_key = self.vault.receipt_key(
            conversation_id, key_ids, known={turn_id: data_key}
        )
        # A turn the window sent was deleted before this answer was recorded:
        # the answer is kept, its receipt names what was sent but binds no body
        # (no key is left that could; the audit reports it not re-derivable).
        return window.receipt(mac_key).to_document()

    def _replayed_receipt(
        self,
        conversation_id: UUID,
        existing: TurnRow,
        batch: Batch,
        *,
        status: TurnStatus,
        turn: TurnParts,
        owner_id: str,
    ) -> TurnReceipt:
        """A retry of a recorded turn: same content returns the original receipt."""
        if existing.deleted:
            raise TurnDeletedError(conversation_id, existing.turn_id)
        if existing.status is not status:
            raise TurnConflictError(
                conversation_id,
                existing.turn_id,
                f"is already recorded as {existing.status.value}; "
                "record a retried exchange under a new turn id",
            )
        pending = batch.texts.get((conversation_id, existing.turn_id))
        if pending is not None:
            stored: TurnParts | None = pending[1]
        else:
            stored = self.ledger.queries.read_texts(
                conversation_id, [existing], owner_id=owner_id
            ).get(existing.turn_id)
        if stored != turn:
            raise TurnConflictError(
                conversation_id,
                existing.turn_id,
                "is already recorded with different content",
            )
        return TurnReceipt(
            conversation_id,
            existing.turn_id,
            existing.status,
            existing.version,
            existing.recorded_at,
        )


def turn_parts(
    question: Any, answer: Any, parts: Any, *, answer_field: str
) -> TurnParts:
    """The turn from either its two texts or its parts (never both)."""
    if parts is None:
        if question is None:
            raise InvalidInputError("question", "give question (and answer) or parts")
        check_text("question", question)
        if answer is None:
            raise InvalidInputError(
                answer_field, "expected a string, got NoneType (or give parts)"
            )
        check_text(answer_field, answer, allow_empty=True)
        return TurnParts(question=question, answer=answer)
    if not isinstance(parts, TurnParts):
        raise InvalidInputError("parts", "expected TurnParts")
    if question is not None or answer is not None:
        raise InvalidInputError(
            "parts", f"give either parts or question and {answer_field}, not both"
        )
    return parts


def check_conversation_id(conversation_id: Any) -> None:
    if not isinstance(conversation_id, UUID):
        raise InvalidInputError("conversation_id", "expected a UUID")


def check_window(conversation_id: UUID, question: str, window: Any) -> None:
    """A receipt is only kept for the window that asked this question."""
    if not isinstance(window, ProjectedWindow):
        raise InvalidInputError("window", "expected the ProjectedWindow answered")
    if window.conversation_id != conversation_id:
        raise WindowMismatchError(conversation_id, "it belongs to another conversation")
    if window.question != question:
        raise WindowMismatchError(
            conversation_id, "it was projected for a different question"
        )
