"""Windows from the ledger with call ids a provider refuses or sees twice.

Turns recorded with ids such as ``functions.f:0`` (several OpenAI-compatible
servers) and ``call_0`` in every turn are sent with provider-valid, unique
wire ids in every format, on every store; the ledger keeps the ids as given,
and the windows' receipts re-derive byte for byte in an audit.
"""

from __future__ import annotations

import uuid

import pytest

from tests.provider_rules import violations
from turnledger.domain.parts import ToolCall, ToolResult, TurnParts
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.audit import Auditor
from turnledger.projections.formats import WIRE_FORMATS
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.window import WindowTurn, select_window

OWNER = "alice"
IDS = ["functions.f:0", "call_0", "call@1", "call_0", "x" * 100]


def turn(call_id: str, index: int) -> TurnParts:
    return TurnParts(
        question=f"question {index}",
        steps=(
            ToolCall(call_id, "lookup", f'{{"n":{index}}}'),
            ToolCall("call_1", "lookup", "{}"),
            ToolResult("call_1", "second"),
            ToolResult(call_id, f"result {index}"),
        ),
        answer=f"answer {index}",
    )


def history(ledger: Conversations) -> uuid.UUID:
    conversation_id = ledger.start_conversation(OWNER)
    for index, call_id in enumerate(IDS):
        ledger.confirm_turn(
            OWNER, conversation_id, turn_id=f"t{index}", parts=turn(call_id, index)
        )
    return conversation_id


@pytest.mark.parametrize("wire_format", WIRE_FORMATS)
def test_ledger_windows_send_valid_unique_ids_and_audit_clean(
    ledger: Conversations, wire_format: str
) -> None:
    conversation_id = history(ledger)
    policy = WindowPolicy(wire_format=wire_format, max_bytes=100_000)  # type: ignore[arg-type]
    projected = ledger.project_window(
        OWNER, conversation_id, question="Next?", system="sys", model="m", policy=policy
    )
    window = projected.window
    assert window.kept_turn_ids == tuple(f"t{i}" for i in range(len(IDS)))
    assert violations(wire_format, window.body) == []
    in_memory = select_window(
        model="m",
        system="sys",
        turns=[WindowTurn.of(f"t{i}", turn(c, i)) for i, c in enumerate(IDS)],
        question="Next?",
        policy=policy,
    )
    assert window.body == in_memory.body
    stored = ledger.get_history(OWNER, conversation_id).items
    assert [item.parts.steps[0].call_id for item in stored if item.parts] == IDS
    ledger.confirm_turn(
        OWNER,
        conversation_id,
        turn_id="t-last",
        question="Next?",
        answer="ok",
        window=projected,
    )
    report = Auditor(ledger).audit()
    assert report.ok, report.failures
    assert report.conversation(conversation_id).receipts_verified == 1


@pytest.mark.parametrize("wire_format", WIRE_FORMATS)
def test_a_window_that_grows_with_its_wire_ids_drops_its_oldest_turn(
    wire_format: str,
) -> None:
    """Planned with stored ids, a body at its exact limit that must map ids
    leaves its oldest turn out (for bytes) and never goes over the limit."""
    turns = [WindowTurn.of(f"t{i}", turn("a", i)) for i in range(3)]
    roomy = WindowPolicy(wire_format=wire_format, max_bytes=100_000)  # type: ignore[arg-type]
    whole = select_window(model="m", system="", turns=turns, question="?", policy=roomy)
    assert whole.kept_turn_ids == ("t0", "t1", "t2")
    # Just under the whole body: the stored ids ("a") would have fit it.
    tight = roomy.model_copy(update={"max_bytes": len(whole.body) - 1})
    window = select_window(
        model="m", system="", turns=turns, question="?", policy=tight
    )
    assert len(window.body) <= tight.max_bytes
    assert window.kept_turn_ids == ("t1", "t2")
    assert window.report()["dropped"] == [{"turn_id": "t0", "reason": "bytes"}]
    assert violations(wire_format, window.body) == []
