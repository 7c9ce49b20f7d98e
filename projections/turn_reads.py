"""Reading turns for a query: the conversation's row for its owner, then the
texts of the turns a query returns, from their events, decrypted for the
owner they were sealed for. Nothing here loads an aggregate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol
from uuid import UUID

from turnledger.domain.conversation import Conversation, fold_key_id
from turnledger.domain.errors import (
    ConversationNotFoundError,
    InvalidInputError,
    SealMismatchError,
    TextUnavailableError,
)
from turnledger.domain.parts import TurnParts, decode_many_part_documents
from turnledger.domain.ports import SEAL_BOUND_TO_OWNER, TextVault
from turnledger.domain.text import check_identifier
from turnledger.projections.ledger_rows import ConversationRow, FoldRow, TurnRow
from turnledger.projections.read_side import ReadSide
from turnledger.projections.turn_texts import (
    open_turn_texts,
    open_turns,
    sealed_fields,
)
from turnledger.projections.window_turns import OpenedTurn, WindowTurn


class EventReader(Protocol):
    def get(
        self, originator_id: UUID, *, gt: int | None = None, lte: int | None = None
    ) -> Any: ...


class TurnReads:
    """The reads every query starts from (ConversationQueries builds on it)."""

    def __init__(
        self, *, read_side: ReadSide, events: EventReader, vault: TextVault
    ) -> None:
        self.read_side = read_side
        self.events = events
        self.vault = vault

    def get_conversation(self, owner_id: str, conversation_id: UUID) -> ConversationRow:
        check_identifier("owner_id", owner_id)
        if not isinstance(conversation_id, UUID):
            raise InvalidInputError("conversation_id", "expected a UUID")
        row = self.read_side.conversations([conversation_id]).get(conversation_id)
        # Somebody else's conversation is answered exactly like a missing one.
        if row is None or row.owner_id != owner_id:
            raise ConversationNotFoundError(conversation_id)
        return row

    # Texts --------------------------------------------------------------------

    def open_texts(
        self,
        conversation_id: UUID,
        rows: Sequence[TurnRow],
        *,
        owner_id: str,
        damaged: set[str] | None = None,
    ) -> dict[str, TurnParts | None]:
        """Decrypt these turns from their events for `owner_id`; None where
        the key is gone (and, with `damaged`, where it is damaged: see
        `open_turns`). Raises SealMismatchError where a text was not sealed
        for `owner_id` (see `owned_events`)."""
        if not rows:
            return {}
        opened = open_turns(
            self.vault,
            conversation_id,
            self._turn_events(conversation_id, rows, owner_id),
            owner_id=owner_id,
            damaged=damaged,
        )
        texts: dict[str, TurnParts | None] = dict.fromkeys(row.turn_id for row in rows)
        texts.update(opened)
        return texts

    def _turn_events(
        self, conversation_id: UUID, rows: Sequence[TurnRow], owner_id: str
    ) -> list[Any]:
        """The events that recorded these turns (confirmed or abandoned)."""
        wanted = {row.turn_id for row in rows}
        versions = [row.version for row in rows]
        return self.owned_events(
            conversation_id,
            owner_id,
            [
                recorded
                for recorded in self.events.get(
                    conversation_id, gt=min(versions) - 1, lte=max(versions)
                )
                if getattr(recorded, "turn_id", None) in wanted
                and isinstance(
                    recorded, Conversation.TurnConfirmed | Conversation.TurnAbandoned
                )
            ],
        )

    def owned_events(
        self, conversation_id: UUID, owner_id: str, events: list[Any]
    ) -> list[Any]:
        """`events`, once their texts are known to be `owner_id`'s.

        The read side decides nothing here: a text sealed bound to its owner
        opens only for that owner (the vault checks it), and a text sealed
        before owners were bound is opened only when the conversation's
        `Started` event, which the hash chain covers, names `owner_id`.
        """
        for recorded in events:
            for field_name, sealed in sealed_fields(recorded):
                if sealed[:1] == SEAL_BOUND_TO_OWNER:
                    continue
                if self._started_owner(conversation_id) != owner_id:
                    raise SealMismatchError(
                        conversation_id,
                        recorded.turn_id
                        if hasattr(recorded, "turn_id")
                        else fold_key_id(recorded.fold_id),
                        field_name,
                        "it was sealed before owners were bound, and the "
                        "conversation's Started event names another owner",
                    )
                return events  # one check covers every text of the conversation
        return events

    def _started_owner(self, conversation_id: UUID) -> str | None:
        for recorded in self.events.get(conversation_id, lte=1):
            if isinstance(recorded, Conversation.Started):
                return str(recorded.owner_id)
        return None

    def read_texts(
        self, conversation_id: UUID, rows: Sequence[TurnRow], *, owner_id: str
    ) -> dict[str, TurnParts]:
        """Like `open_texts`, but a turn without its key is an error."""
        texts: dict[str, TurnParts] = {}
        opened = self.open_texts(conversation_id, rows, owner_id=owner_id)
        for turn_id, text in opened.items():
            if text is None:
                raise TextUnavailableError(conversation_id, turn_id)
            texts[turn_id] = text
        return texts

    def open_for_window(
        self, conversation_id: UUID, rows: Sequence[TurnRow], *, owner_id: str
    ) -> dict[str, WindowTurn | OpenedTurn]:
        """These turns as a window sends them untrimmed; a turn without its
        key is an error (TextUnavailableError), as in `read_texts`.

        A turn with parts is kept as the documents its parts text parses to
        (OpenedTurn): the body is written from them, so its step objects are
        never made."""
        opened = open_turn_texts(
            self.vault,
            conversation_id,
            self._turn_events(conversation_id, rows, owner_id),
            owner_id=owner_id,
        )
        turns: dict[str, WindowTurn | OpenedTurn] = {}
        with_parts: list[tuple[str, str, str, str]] = []
        for row in rows:
            texts = opened.get(row.turn_id)
            if texts is None:
                raise TextUnavailableError(conversation_id, row.turn_id)
            question, answer, parts_text = texts
            if parts_text is None:
                turns[row.turn_id] = WindowTurn(row.turn_id, question, answer)
            else:
                with_parts.append((row.turn_id, question, answer, parts_text))
        documents = decode_many_part_documents([turn[3] for turn in with_parts])
        for (turn_id, question, answer, _), parts in zip(
            with_parts, documents, strict=True
        ):
            turns[turn_id] = OpenedTurn(turn_id, question, answer, *parts)
        return turns

    def read_fold(self, conversation_id: UUID, fold: FoldRow, *, owner_id: str) -> str:
        (recorded,) = self.owned_events(
            conversation_id,
            owner_id,
            list(
                self.events.get(conversation_id, gt=fold.version - 1, lte=fold.version)
            ),
        )
        key_id = fold_key_id(fold.fold_id)
        (summary,) = self.vault.open_many(
            conversation_id, [(key_id, "summary", recorded.sealed_summary)], owner_id
        )
        if summary is None:
            raise TextUnavailableError(conversation_id, key_id)
        return str(summary)
