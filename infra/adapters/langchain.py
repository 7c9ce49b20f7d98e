"""LangChain's chat message history over a turnledger conversation, and the
window as LangChain messages.

    history = TurnLedgerChatHistory(ledger, "alice", conversation_id)
    history.add_messages([HumanMessage("Weather in Paris?"), ai_with_tool_calls,
                          ToolMessage("18", tool_call_id="call_1"),
                          AIMessage("It is 18 °C.")])
    messages = window_messages(ledger, "alice", conversation_id,
                               question="And tomorrow?", model="gpt-4o-mini")

Needs the `langchain` extra (`langchain-core`). Semantics (docs/adapters.md):

- `add_messages`: a `HumanMessage` begins a turn; an `AIMessage`'s text and
  `tool_calls`, and each `ToolMessage`, are its steps; an `AIMessage` without
  tool calls, once every call has its `ToolMessage`, is the final answer and
  confirms the turn. A `HumanMessage` while a turn is open records that turn
  as abandoned (`stopped`) first. A message's `id`, `name`,
  `response_metadata` and `usage_metadata`, and each `SystemMessage` whole,
  are kept in the turn's metadata (langchain_metadata.py): sealed, deleted
  with the turn, never sent in a window.
- `messages`: without a policy, every confirmed turn that is not deleted,
  oldest first, with its system messages, then the open turn; with
  `policy=`, the window's history under it (whole turns that fit, the fold
  first as a `SystemMessage`; the window's instructions are its `system`, so
  stored system messages are not in it). Either way an `AIMessage` with
  `tool_calls` is followed by the `ToolMessage` of each call.
- `clear()`: deletes every turn (purged like any deletion).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
)

from turnledger.domain.conversation import TurnStatus
from turnledger.domain.errors import InvalidInputError
from turnledger.domain.parts import (
    AssistantStep,
    AssistantText,
    Attachment,
    Refusal,
    ToolCall,
    ToolResult,
    TurnParts,
)
from turnledger.infra.adapters import langchain_metadata
from turnledger.infra.adapters.turns import (
    STAND_IN_QUESTION,
    TurnRecorder,
    text_of,
    url_attachment,
)
from turnledger.infra.service_layer.application import Conversations
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.results import MAX_HISTORY_PAGE
from turnledger.projections.tokens import TokenCounter
from turnledger.projections.turn_shapes import openai_chat_turn


def window_messages(
    ledger: Conversations,
    owner_id: str,
    conversation_id: UUID,
    *,
    question: str,
    model: str,
    system: str = "",
    policy: WindowPolicy | None = None,
    token_counter: TokenCounter | None = None,
) -> list[BaseMessage]:
    """The window for `question` as LangChain messages, ready for `invoke`:
    the system message, the fold (if any), the whole turns that fit, and the
    question last. It is the window's OpenAI chat body (docs/window.md)
    converted by LangChain's own `convert_to_messages`."""
    messages, _ = _window(
        ledger,
        owner_id,
        conversation_id,
        question=question,
        model=model,
        system=system,
        policy=policy,
        token_counter=token_counter,
        read_all=False,
    )
    return messages


def _window(
    ledger: Conversations,
    owner_id: str,
    conversation_id: UUID,
    *,
    question: str,
    model: str,
    system: str,
    policy: WindowPolicy | None,
    token_counter: TokenCounter | None,
    read_all: bool,
) -> tuple[list[BaseMessage], list[TurnParts] | None]:
    """The window's messages, and the parts of its turns when they were read
    (always with `read_all`, else when a result's status needs them)."""
    chat_policy = (policy or WindowPolicy()).model_copy(
        update={"wire_format": "openai-chat"}
    )
    projected = ledger.project_window(
        owner_id,
        conversation_id,
        question=question,
        system=system,
        model=model,
        policy=chat_policy,
        token_counter=token_counter,
    )
    messages = convert_to_messages(json.loads(projected.window.body)["messages"])
    if not (read_all or any(isinstance(m, ToolMessage) for m in messages)):
        return messages, None
    turn_ids = projected.window.kept_turn_ids
    kept = _turns_by_id(ledger, owner_id, conversation_id, turn_ids)
    if not all(turn_id in kept for turn_id in turn_ids):  # one deleted since
        return messages, None
    turns = [kept[turn_id] for turn_id in turn_ids]
    _restore_results(messages, turns)
    return messages, turns


class TurnLedgerChatHistory(BaseChatMessageHistory):
    """A `BaseChatMessageHistory` keeping its messages as turnledger turns."""

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
    ) -> None:
        self.turns: TurnRecorder[BaseMessage] = TurnRecorder(
            ledger, owner_id, conversation_id, describe=langchain_metadata.describe
        )
        # System messages added while no turn is open: they go with the next.
        self.waiting: list[BaseMessage] = []
        self.policy = policy
        self.model = model
        self.system = system
        self.token_counter = token_counter

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        recorded = (
            self._whole_history() if self.policy is None else self._window_history()
        )
        return recorded + self.turns.pending_items() + self.waiting

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        for message in messages:
            self._add(message)

    def clear(self) -> None:
        self.waiting = []
        self.turns.clear()

    def _add(self, message: BaseMessage) -> None:
        turns = self.turns
        langchain_metadata.entry(message)  # refused now if it cannot be kept
        if isinstance(message, HumanMessage):
            question, attachments = _human_input(message.content)
            TurnParts(question=question, attachments=attachments)  # checked now
            before = self._system_messages_after_the_open_turn() + self.waiting
            turns.begin(question, attachments, message)
            assert turns.pending is not None
            turns.pending.items[0:0] = [(system, 0) for system in before]
            self.waiting = []
        elif isinstance(message, SystemMessage):
            if turns.pending is None:
                self.waiting.append(message)
            else:
                turns.add([], message)
        elif isinstance(message, AIMessage):
            turns.add(_ai_steps(message), message)
            if not message.tool_calls and turns.can_confirm():
                turns.confirm()
        elif isinstance(message, ToolMessage):
            result = ToolResult(
                call_id=message.tool_call_id,
                content=_text(message.content),
                is_error=message.status == "error",
            )
            turns.add([result], message)
        else:
            raise InvalidInputError(
                "messages",
                f"a {type(message).__name__} cannot be stored: turns hold human, "
                "system, AI and tool messages",
            )

    def _system_messages_after_the_open_turn(self) -> list[BaseMessage]:
        """The system messages that end the open turn, taken off it: a new
        question abandons that turn, and they were said before the question."""
        pending = self.turns.pending
        moved: list[BaseMessage] = []
        while (
            pending is not None
            and len(pending.items) > 1
            and isinstance(pending.items[-1][0], SystemMessage)
        ):
            moved.insert(0, pending.items.pop()[0])
        return moved

    def _whole_history(self) -> list[BaseMessage]:
        ledger, owner, conversation = (
            self.turns.ledger,
            self.turns.owner_id,
            self.turns.conversation_id,
        )
        messages: list[BaseMessage] = []
        offset: int | None = 0
        while offset is not None:
            page = ledger.get_history(
                owner, conversation, offset=offset, limit=MAX_HISTORY_PAGE
            )
            for item in page.items:
                if item.status == TurnStatus.CONFIRMED and item.parts is not None:
                    messages += _turn_messages(item.parts)
            offset = page.next_offset
        return messages

    def _window_history(self) -> list[BaseMessage]:
        window, turns = _window(
            self.turns.ledger,
            self.turns.owner_id,
            self.turns.conversation_id,
            question=STAND_IN_QUESTION,
            model=self.model,
            system=self.system,
            policy=self.policy,
            token_counter=self.token_counter,
            read_all=True,
        )
        # An openai-chat body always begins with the system message (empty or
        # not) and ends with the question: the history is what is between.
        history = window[1:-1]
        if turns is None:
            return history
        # Each turn begins at its question (the fold, a SystemMessage, first).
        starts = [i for i, m in enumerate(history) if isinstance(m, HumanMessage)]
        restored = history[: starts[0]] if starts else history
        for parts, start, end in zip(
            turns, starts, [*starts[1:], len(history)], strict=True
        ):
            restored += langchain_metadata.restore(
                history[start:end], parts, system=False
            )
        return restored


def _turn_messages(parts: TurnParts) -> list[BaseMessage]:
    """A recorded turn as the LangChain messages it was added as."""
    messages = convert_to_messages(openai_chat_turn(parts))
    _restore_results(messages, [parts])
    return langchain_metadata.restore(messages, parts, system=True)


def _restore_results(messages: list[BaseMessage], turns: Sequence[TurnParts]) -> None:
    """Give each ToolMessage the status of its result and the name of the tool
    it answers: an OpenAI chat body (what the messages are converted from) has
    neither, but its tool messages are the turns' results in their order."""
    results = iter(
        (step.is_error, _call_names(turn)[step.call_id])
        for turn in turns
        for step in turn.steps
        if isinstance(step, ToolResult)
    )
    for message in messages:
        if isinstance(message, ToolMessage):
            failed, message.name = next(results)
            if failed:
                message.status = "error"


def _call_names(turn: TurnParts) -> dict[str, str]:
    return {s.call_id: s.name for s in turn.steps if isinstance(s, ToolCall)}


def _turns_by_id(
    ledger: Conversations,
    owner_id: str,
    conversation_id: UUID,
    turn_ids: Sequence[str],
) -> dict[str, TurnParts]:
    """The parts of the named turns, read from the newest page of history back
    (a window's turns are the newest)."""
    wanted, found = set(turn_ids), dict[str, TurnParts]()
    end = ledger.get_conversation(owner_id, conversation_id).turn_count
    while wanted - found.keys() and end > 0:
        start = max(0, end - MAX_HISTORY_PAGE)
        page = ledger.get_history(
            owner_id, conversation_id, offset=start, limit=end - start
        )
        for item in page.items:
            if item.turn_id in wanted and item.parts is not None:
                found[item.turn_id] = item.parts
        end = start
    return found


def _text(content: str | list[Any]) -> str:
    if isinstance(content, str):
        return content
    return text_of([_block(part) for part in content], ("text",))


def _block(part: Any) -> dict[str, Any]:
    return part if isinstance(part, dict) else {"type": "text", "text": str(part)}


def _human_input(content: str | list[Any]) -> tuple[str, tuple[Attachment, ...]]:
    if isinstance(content, str):
        return content, ()
    blocks = [_block(part) for part in content]
    attachments = tuple(
        _image(block) for block in blocks if block.get("type") == "image_url"
    )
    return text_of(blocks, ("text",)), attachments


def _image(block: dict[str, Any]) -> Attachment:
    image = block["image_url"]
    return url_attachment(image["url"] if isinstance(image, dict) else str(image))


def _ai_steps(message: AIMessage) -> list[AssistantStep]:
    steps: list[AssistantStep] = []
    refusal = message.additional_kwargs.get("refusal")
    if isinstance(refusal, str) and refusal:
        steps.append(Refusal(refusal))
    text = _text(message.content)
    if text or not (steps or message.tool_calls):
        steps.append(AssistantText(text))
    for call in message.tool_calls:
        if not call.get("id"):
            raise InvalidInputError("tool_calls", "a tool call without an id")
        steps.append(
            ToolCall(
                call_id=str(call["id"]),
                name=call["name"],
                arguments=json.dumps(call["args"], ensure_ascii=False),
            )
        )
    return steps
