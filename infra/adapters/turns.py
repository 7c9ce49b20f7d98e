"""What the adapters share: a turn assembled message by message, then recorded.

Libraries hand a history over one message (item) at a time: the user's
message, then the assistant's tool calls, the tools' results, more calls, and
the final answer. turnledger records a turn whole, when it is complete
(domain/parts.py). `TurnRecorder` keeps the turn in progress (the pending
turn) and records it with the ledger's public API:

- a user message begins a turn; if one was still pending (the run failed or
  was stopped before its answer), that one is first recorded as abandoned
  (`stopped`): shown in history, never sent in a window;
- calls, results, intermediate text and refusals are its steps, in order;
- the final answer confirms it (`confirm_turn` with the parts).

A pending turn lives in this object only, until it is confirmed or abandoned.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from uuid import UUID

from turnledger.domain.conversation import TurnStatus
from turnledger.domain.errors import InvalidInputError
from turnledger.domain.parts import (
    AssistantStep,
    AssistantText,
    Attachment,
    ToolCall,
    ToolResult,
    TurnParts,
)
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.results import DeletionReceipt, TurnReceipt

Item = TypeVar("Item")

# The question a history-only window is projected for: the smallest one, so
# the window leaves the most room for history.
STAND_IN_QUESTION = "?"

# How far back pop looks for a readable confirmed turn (one history page).
_POP_LOOKBACK = 200


def new_turn_id() -> str:
    return f"turn-{uuid.uuid4().hex}"


@dataclass
class PendingTurn(Generic[Item]):
    question: str
    attachments: tuple[Attachment, ...]
    steps: list[AssistantStep] = field(default_factory=list)
    items: list[tuple[Item, int]] = field(default_factory=list)
    """The library's own messages of this turn, as they were handed over, each
    with the number of steps it holds (a message may hold several calls)."""

    def open_calls(self) -> set[str]:
        called = {s.call_id for s in self.steps if isinstance(s, ToolCall)}
        return called - {s.call_id for s in self.steps if isinstance(s, ToolResult)}


class TurnRecorder(Generic[Item]):
    """The pending turn of one conversation, and the ledger writes it makes."""

    def __init__(
        self,
        ledger: Conversations,
        owner_id: str,
        conversation_id: UUID,
        *,
        turn_ids: Callable[[], str] = new_turn_id,
        describe: Callable[[list[Item]], str | None] | None = None,
    ) -> None:
        self.ledger = ledger
        self.owner_id = owner_id
        self.conversation_id = conversation_id
        self._turn_ids = turn_ids
        # The turn's metadata (TurnParts.metadata) from its messages: what a
        # library keeps of them that is not a part (ids, response metadata).
        self._describe = describe
        self.pending: PendingTurn[Item] | None = None

    def begin(
        self, question: str, attachments: tuple[Attachment, ...], item: Item
    ) -> TurnReceipt | None:
        """Start a turn; the receipt of the pending one abandoned for it, if any."""
        abandoned = self.abandon() if self.pending is not None else None
        TurnParts(question=question, attachments=attachments)  # checked now
        self.pending = PendingTurn(question, attachments, items=[(item, 0)])
        return abandoned

    def add(self, steps: list[AssistantStep], item: Item) -> None:
        """Add one message of the assistant or a tool, holding `steps`; a
        message that cannot be added raises and leaves the turn as it was."""
        pending = self._pending(what="reply")
        # The parts' own rules (a result answers an open call of the run just
        # before it, call ids unique) checked now, so that the turn can always
        # be recorded, confirmed or abandoned.
        TurnParts(
            question=pending.question,
            attachments=pending.attachments,
            steps=(*pending.steps, *steps),
        )
        pending.steps.extend(steps)
        pending.items.append((item, len(steps)))

    def can_confirm(self) -> bool:
        """Whether the pending turn ends in text with every call answered."""
        pending = self.pending
        return (
            pending is not None
            and bool(pending.steps)
            and isinstance(pending.steps[-1], AssistantText)
            and not pending.open_calls()
        )

    def confirm(self) -> TurnReceipt:
        """Record the pending turn; its last text step is the final answer."""
        pending = self._pending(what="final answer")
        if not self.can_confirm():
            raise InvalidInputError(
                "turn", "a turn is confirmed by a final answer after every tool result"
            )
        final = pending.steps[-1]
        assert isinstance(final, AssistantText)
        parts = TurnParts(
            question=pending.question,
            attachments=pending.attachments,
            steps=tuple(pending.steps[:-1]),
            answer=final.text,
            metadata=self._metadata(pending),
        )
        receipt = self.ledger.confirm_turn(
            self.owner_id, self.conversation_id, turn_id=self._turn_ids(), parts=parts
        )
        self.pending = None
        return receipt

    def abandon(self, outcome: str = TurnStatus.STOPPED.value) -> TurnReceipt | None:
        """Record the pending turn as `stopped` or `failed` (never sent)."""
        pending = self.pending
        if pending is None:
            return None
        parts = TurnParts(
            question=pending.question,
            attachments=pending.attachments,
            steps=tuple(pending.steps),
            metadata=self._metadata(pending),
        )
        receipt = self.ledger.record_abandoned_turn(
            self.owner_id,
            self.conversation_id,
            turn_id=self._turn_ids(),
            outcome=outcome,
            parts=parts,
        )
        self.pending = None
        return receipt

    def pop(self, render: Callable[[TurnParts], list[tuple[Item, int]]]) -> Item | None:
        """Remove the newest message: from the pending turn if there is one;
        else the newest confirmed turn is deleted (a real deletion: its text is
        destroyed) and all but its last message become the pending turn again,
        rendered by `render` as the library's messages."""
        if self.pending is None:
            reopened = self._delete_newest_confirmed()
            if reopened is None:
                return None
            items = render(reopened)
            self.pending = PendingTurn(
                reopened.question,
                reopened.attachments,
                steps=[*reopened.steps, AssistantText(reopened.answer)],
                items=items,
            )
        pending = self.pending
        item, held = pending.items.pop()
        del pending.steps[len(pending.steps) - held :]
        if not pending.items:
            self.pending = None  # that was the user's message itself
        return item

    def clear(self) -> DeletionReceipt:
        """Delete every turn of the conversation and drop the pending one."""
        self.pending = None
        return self.ledger.delete_history(
            self.owner_id, self.conversation_id, turn_ids=None
        )

    def pending_items(self) -> list[Item]:
        """The open turn's messages, but for those that hold only calls still
        without a result: a provider refuses a call sent without its result."""
        pending = self.pending
        if pending is None:
            return []
        unanswered = pending.open_calls()
        kept, index = [], 0
        for item, held in pending.items:
            steps = pending.steps[index : index + held]
            index += held
            if steps and all(
                isinstance(s, ToolCall) and s.call_id in unanswered for s in steps
            ):
                continue
            kept.append(item)
        return kept

    def _metadata(self, pending: PendingTurn[Item]) -> str | None:
        if self._describe is None:
            return None
        return self._describe([item for item, _ in pending.items])

    def _pending(self, *, what: str) -> PendingTurn[Item]:
        if self.pending is None:
            raise InvalidInputError(
                "messages", f"a {what} needs a user message before it (no turn is open)"
            )
        return self.pending

    def _delete_newest_confirmed(self) -> TurnParts | None:
        ledger, owner, conversation = self.ledger, self.owner_id, self.conversation_id
        total = ledger.get_conversation(owner, conversation).turn_count
        offset = max(0, total - _POP_LOOKBACK)
        page = ledger.get_history(
            owner, conversation, offset=offset, limit=_POP_LOOKBACK
        )
        for item in reversed(page.items):
            if item.status == TurnStatus.CONFIRMED and item.parts is not None:
                ledger.delete_history(owner, conversation, turn_ids=[item.turn_id])
                return item.parts
        return None


def text_of(parts: list[Any], kinds: tuple[str, ...], key: str = "text") -> str:
    """The texts of the content parts of the given kinds, joined."""
    return "".join(
        str(part.get(key, "")) for part in parts if part.get("type") in kinds
    )


def url_attachment(url: str, *, name: str | None = None) -> Attachment:
    """An attachment given by URL: a data: URL's bytes inline, any other URL
    as a reference (media type guessed from its name; size unknown, so 0)."""
    if url.startswith("data:"):
        header, _, payload = url.partition(",")
        try:
            data = base64.b64decode(payload, validate=True)
        except binascii.Error:
            raise InvalidInputError(
                "attachment", "a data: URL that is not base64"
            ) from None
        media = header.removeprefix("data:").split(";")[0]
        return Attachment(media_type=media, byte_size=len(data), data=data, name=name)
    media = mimetypes.guess_type(url)[0] or "application/octet-stream"
    return Attachment(media_type=media, byte_size=0, uri=url, name=name)
