"""The OpenAI Agents SDK's `Session` protocol over a turnledger conversation.

    session = TurnLedgerSession(ledger, "alice", conversation_id, policy=policy)
    result = await Runner.run(agent, "What's the weather in Paris?", session=session)

Needs the `agents` extra (`openai-agents`). Semantics (docs/adapters.md):

- `add_items`: a user message begins a turn; function calls, their outputs
  and the assistant's messages are its steps; a batch that ends with an
  assistant message while every call has its output confirms the turn (that
  message is the final answer). Reasoning items are kept as reasoning parts
  of the turn, sent back in windows for the session's model. A user message
  after an answered exchange confirms it; while a turn is still open it is
  recorded as abandoned first.
- `get_items()`: turnledger's window under the session's policy, in the
  OpenAI Responses shape (the fold first, if any, then whole turns, newest
  last), followed by the open turn's items as they were added. The window is
  projected for a one-character stand-in question, so leave the room your
  own question and instructions need in the policy's budgets.
  `get_items(limit=n)` is the newest n of those items, as the protocol says
  (the SDK uses it to read back what it wrote); it may start inside a turn.
- `pop_item()`: the newest item of the open turn; with no open turn, the
  newest confirmed turn is deleted (a real deletion: its text is destroyed
  and every device syncs the deletion), its final answer is returned and the
  rest of it becomes the open turn, to be answered again.
- `clear_session()`: deletes every turn of the conversation (purged like any
  deletion) and drops the open turn.
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from uuid import UUID

from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from turnledger.domain.errors import InvalidInputError
from turnledger.domain.parts import (
    AssistantStep,
    AssistantText,
    Attachment,
    Reasoning,
    Refusal,
    ToolCall,
    ToolResult,
    TurnParts,
)
from turnledger.infra.adapters.turns import (
    STAND_IN_QUESTION,
    TurnRecorder,
    text_of,
    url_attachment,
)
from turnledger.infra.service_layer.application import Conversations
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import TokenCounter
from turnledger.projections.turn_shapes import openai_responses_turn

_T = TypeVar("_T")


class TurnLedgerSession:
    """A `Session` (agents.memory.Session) keeping its history in turnledger."""

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        ledger: Conversations,
        owner_id: str,
        conversation_id: UUID,
        *,
        policy: WindowPolicy | None = None,
        model: str = "gpt-4o-mini",
        system: str = "",
        token_counter: TokenCounter | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self.session_id = str(conversation_id)
        # As SQLiteSession: a dict is checked and made SessionSettings (an
        # unknown key is a TypeError), and no settings are SessionSettings().
        self.session_settings = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(session_settings)
        )
        self.conversation_id = conversation_id
        self.policy = (policy or WindowPolicy()).model_copy(
            update={"wire_format": "openai-responses"}
        )
        self.model = model
        self.system = system
        self.token_counter = token_counter
        self.turns: TurnRecorder[Any] = TurnRecorder(ledger, owner_id, conversation_id)
        # A thread lock, taken in the worker thread each call runs in: the SDK
        # may call one session from several threads, each with its own event
        # loop (an asyncio lock belongs to one loop), and a batch of items
        # must go into the open turn whole.
        self._lock = threading.Lock()

    @property
    def ledger(self) -> Conversations:
        return self.turns.ledger

    async def get_items(self, limit: int | None = None) -> list[Any]:
        items = await self._locked(
            lambda: self.window_items() + self.turns.pending_items()
        )
        # As the SDK's own sessions: an explicit limit, else the settings'.
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is None:
            return items
        return items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[Any]) -> None:
        await self._locked(lambda: self._add(items))

    async def pop_item(self) -> Any | None:
        return await self._locked(lambda: self.turns.pop(_responses_items))

    async def clear_session(self) -> None:
        await self._locked(self.turns.clear)

    async def _locked(self, work: Callable[[], _T]) -> _T:
        """`work` in a worker thread, holding the session's lock there."""

        def run() -> _T:
            with self._lock:
                return work()

        return await asyncio.to_thread(run)

    def window_items(self) -> list[Any]:
        """The window's history items: the body's `input` without the question."""
        projected = self.ledger.project_window(
            self.turns.owner_id,
            self.conversation_id,
            question=STAND_IN_QUESTION,
            system=self.system,
            model=self.model,
            policy=self.policy,
            token_counter=self.token_counter,
        )
        history: list[Any] = json.loads(projected.window.body)["input"]
        assert history[-1] == {"role": "user", "content": STAND_IN_QUESTION}
        return history[:-1]

    def _add(self, items: list[Any]) -> None:
        for raw in items:
            item = _as_dict(raw)
            kind = item.get("type", "message")
            if kind == "reasoning":
                # Kept as it came, for this session's model (docs/tools.md).
                payload = json.dumps(item, ensure_ascii=False)
                self.turns.add([Reasoning("openai", self.model, payload)], raw)
            elif kind == "message" and item.get("role") == "user":
                question, attachments = _user_input(item.get("content", ""))
                if self.turns.can_confirm():
                    # An exchange answered earlier in this batch (a session
                    # seeded with prior messages): its last text is its answer.
                    self.turns.confirm()
                self.turns.begin(question, attachments, raw)
            elif kind == "message" and item.get("role") == "assistant":
                self.turns.add(_assistant_steps(item.get("content", "")), raw)
            elif kind == "function_call":
                call = ToolCall(
                    call_id=item["call_id"],
                    name=item["name"],
                    arguments=item.get("arguments") or "{}",
                )
                self.turns.add([call], raw)
            elif kind == "function_call_output":
                result = ToolResult(
                    call_id=item["call_id"], content=_output_text(item.get("output"))
                )
                self.turns.add([result], raw)
            else:
                raise InvalidInputError(
                    "items",
                    f"an item of type {kind!r} (role {item.get('role')!r}) cannot be "
                    "stored: turns hold user and assistant messages, function calls "
                    "and their outputs",
                )
        if self.turns.can_confirm():
            self.turns.confirm()


def _as_dict(item: Any) -> Mapping[str, Any]:
    if isinstance(item, Mapping):
        return item
    dump = getattr(item, "model_dump", None)  # an SDK pydantic item
    if dump is None:
        raise InvalidInputError("items", f"not an input item: {type(item).__name__}")
    result: Mapping[str, Any] = dump(exclude_unset=True)
    return result


def _user_input(content: Any) -> tuple[str, tuple[Attachment, ...]]:
    if isinstance(content, str):
        return content, ()
    question = text_of(content, ("input_text",))
    attachments = tuple(
        _attachment(part)
        for part in content
        if part.get("type") in {"input_image", "input_file"}
    )
    return question, attachments


def _attachment(part: Mapping[str, Any]) -> Attachment:
    name = part.get("filename")
    if part.get("file_id"):
        media = "image/png" if part["type"] == "input_image" else "application/pdf"
        guessed = mimetypes.guess_type(name)[0] if name else None
        return Attachment(
            media_type=guessed or media, byte_size=0, file_id=part["file_id"], name=name
        )
    url = part.get("image_url") or part.get("file_url") or part.get("file_data")
    if not isinstance(url, str):
        raise InvalidInputError("items", "an attachment without file_id or url")
    return url_attachment(url, name=name)


def _assistant_steps(content: Any) -> list[AssistantStep]:
    if isinstance(content, str):
        return [AssistantText(content)]
    steps: list[AssistantStep] = [
        Refusal(part["refusal"]) for part in content if part.get("type") == "refusal"
    ]
    text = text_of(content, ("output_text", "text"))
    if text or not steps:
        steps.append(AssistantText(text))
    return steps


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return text_of(output, ("input_text", "output_text", "text"))
    return json.dumps(output, ensure_ascii=False)


def _responses_items(parts: TurnParts) -> list[tuple[Any, int]]:
    """A recorded turn as the items the SDK sees, each with its step count."""
    items = openai_responses_turn(parts)
    return [(items[0], 0), *((item, 1) for item in items[1:])]
