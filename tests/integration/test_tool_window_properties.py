"""Windows from a ledger holding tool turns and abandoned mid-tool turns.

Random histories are recorded through the public API (confirmed turns with
tool rounds and attachments, turns abandoned mid-tool, text-only turns), and
every window the ledger projects must equal the naive reference over the
confirmed turns, send no abandoned turn and no orphan call or result, and
have its receipt re-derived byte for byte by the audit.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reference_window import naive_window
from tests.strategies import abandoned_mid_tool, sendable_text, tool_turns
from tests.tool_pairing import pairing_problems
from turnledger.domain.errors import WindowError
from turnledger.domain.parts import ToolCall, TurnParts
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.audit import Auditor
from turnledger.infra.settings import Settings
from turnledger.infra.tokenizers import token_counter
from turnledger.projections.formats import WIRE_FORMATS
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import CHAR_ESTIMATE
from turnledger.projections.window import WindowTurn

OWNER = "prop"


@st.composite
def recorded_histories(draw: st.DrawFn) -> list[tuple[str, TurnParts]]:
    """(status, turn) in order: 'confirmed', or 'stopped' cut mid-tool."""
    history = []
    for index in range(draw(st.integers(0, 7))):
        prefix = f"t{index}_"
        if draw(st.integers(0, 3)) == 0:
            history.append(("stopped", draw(abandoned_mid_tool(prefix))))
        else:
            history.append(("confirmed", draw(tool_turns(prefix=prefix))))
    return history


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    history=recorded_histories(),
    question=sendable_text,
    wire_format=st.sampled_from(WIRE_FORMATS),
    max_bytes=st.integers(300, 20_000),
    max_message_tokens=st.none() | st.integers(2, 30),
    use_real_tokenizer=st.booleans(),
)
def test_ledger_windows_equal_the_reference_and_audit_byte_exactly(
    history: list[tuple[str, TurnParts]],
    question: str,
    wire_format: str,
    max_bytes: int,
    max_message_tokens: int | None,
    use_real_tokenizer: bool,
) -> None:
    # char/4 plans from recorded sizes; a real tokenizer reads and measures.
    counter = token_counter("o200k_base") if use_real_tokenizer else CHAR_ESTIMATE
    ledger = open_conversations(Settings(_env_file=None, persistence="memory"))
    try:
        conversation_id = ledger.start_conversation(OWNER)
        for index, (status, turn) in enumerate(history):
            if status == "confirmed":
                ledger.confirm_turn(
                    OWNER, conversation_id, turn_id=f"t{index}", parts=turn
                )
            else:
                ledger.record_abandoned_turn(
                    OWNER,
                    conversation_id,
                    turn_id=f"t{index}",
                    outcome=status,
                    parts=turn,
                )
        policy = WindowPolicy(
            wire_format=wire_format,  # type: ignore[arg-type]
            max_bytes=max_bytes,
            max_tokens=None,
            max_messages=None,
            floor_messages=0,
            max_message_tokens=max_message_tokens,
        )
        confirmed = [
            WindowTurn.of(f"t{index}", turn)
            for index, (status, turn) in enumerate(history)
            if status == "confirmed"
        ]
        try:
            expected = naive_window(
                model="m",
                system="sys",
                turns=confirmed,
                question=question,
                policy=policy,
                counter=counter,
            )
        except WindowError:
            return
        projected = ledger.project_window(
            OWNER,
            conversation_id,
            question=question,
            system="sys",
            model="m",
            policy=policy,
            token_counter=counter,
        )
        window = projected.window
        assert window.body == expected.body
        assert window.kept_turn_ids == expected.kept_turn_ids
        assert len(window.body) <= max_bytes
        assert pairing_problems(wire_format, window.body) == []
        abandoned = [
            f"t{i}" for i, (status, _) in enumerate(history) if status != "confirmed"
        ]
        assert not set(abandoned) & set(window.kept_turn_ids)
        for status, turn in history:
            if status != "confirmed":  # none of its calls or results is sent
                for step in turn.steps:
                    if isinstance(step, ToolCall):
                        assert step.call_id not in window.body.decode()
        ledger.confirm_turn(
            OWNER,
            conversation_id,
            turn_id="next",
            question=question,
            answer="a",
            window=projected,
        )
        report = Auditor(ledger, token_counters={counter.name: counter}).audit()
        assert report.ok, report.failures
        assert report.conversation(conversation_id).receipts_verified == 1
    finally:
        ledger.close()
