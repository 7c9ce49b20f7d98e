"""Hypothesis strategies shared by the window tests."""

from __future__ import annotations

from hypothesis import strategies as st

# Characters that break naive size accounting: multi-byte UTF-8, astral
# emoji, JSON escapes, control characters, the JS line separators and HTML
# specials (which some serializers escape and ours must not). Not NUL: the
# ledger refuses it, as PostgreSQL cannot store it.
HOSTILE = list(
    "aZ 0\u00e9\u4f60\u597d\u4e16\u754c\u65e5\u672c\u8a9e\ud55c"
    "\U0001f642\U0001f44d\U0001f3fd\"\\\n\r\t\x01\x1f\x7f\u2028\u2029<>&='/"
)

hostile_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(HOSTILE),
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    ),
    max_size=80,
)
# Text the ledger accepts as a question or answer: not only whitespace.
sendable_text = hostile_text.filter(lambda text: bool(text.strip()))


# Turns with tool rounds and attachments --------------------------------------

import json  # noqa: E402

from turnledger.domain.parts import (  # noqa: E402
    REASONING_PROVIDERS,
    AssistantStep,
    AssistantText,
    Attachment,
    Reasoning,
    Refusal,
    ToolCall,
    ToolResult,
    TurnParts,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | hostile_text,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def tool_arguments(draw: st.DrawFn) -> str:
    """JSON text of an object, serialized in any of the styles clients use."""
    value = draw(st.dictionaries(hostile_text, json_values, max_size=3))
    separators = draw(st.sampled_from([(",", ":"), (", ", ": ")]))
    return json.dumps(value, ensure_ascii=draw(st.booleans()), separators=separators)


@st.composite
def attachments(draw: st.DrawFn) -> Attachment:
    media_type = draw(
        st.sampled_from(["image/png", "image/jpeg", "application/pdf", "text/csv"])
    )
    where = draw(st.sampled_from(["data", "uri", "file_id"]))
    size = draw(st.integers(0, 40)) if where == "data" else draw(st.integers(0, 10**7))
    dims = draw(st.none() | st.tuples(st.integers(1, 5000), st.integers(1, 5000)))
    return Attachment(
        media_type=media_type,
        byte_size=size,
        data=bytes(range(size)) if where == "data" else None,
        uri="https://files.example/a%20b/" + str(size) if where == "uri" else None,
        file_id=f"file-{size}" if where == "file_id" else None,
        name=draw(st.none() | sendable_text),
        width=None if dims is None else dims[0],
        height=None if dims is None else dims[1],
    )


tool_names = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)


@st.composite
def reasoning_parts(draw: st.DrawFn, models: tuple[str, ...] = ("m",)) -> Reasoning:
    """A provider's reasoning state, for one of `models` ("m": the tests')."""
    provider = draw(st.sampled_from(REASONING_PROVIDERS))
    text = draw(hostile_text)
    payload: dict[str, object] = {
        "anthropic": draw(
            st.sampled_from(
                [
                    {"type": "thinking", "thinking": text, "signature": "c2ln"},
                    {"type": "redacted_thinking", "data": text or "x"},
                ]
            )
        ),
        "openai": {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": text}],
            "encrypted_content": "ZW5j",
        },
        "gemini": {"thoughtSignature": "c2ln" + str(len(text))},
    }[provider]
    return Reasoning(
        provider,
        draw(st.sampled_from(models)),
        json.dumps(payload, ensure_ascii=draw(st.booleans())),
    )


@st.composite
def tool_steps(draw: st.DrawFn, prefix: str = "") -> tuple[AssistantStep, ...]:
    """Rounds of assistant steps and their results, maybe a closing text;
    a round may begin with the provider's reasoning state."""
    steps: list[AssistantStep] = []
    for round_index in range(draw(st.integers(0, 3))):
        if draw(st.integers(0, 3)) == 0:
            steps.append(draw(reasoning_parts()))
        said: list[AssistantStep] = [
            draw(
                st.builds(AssistantText, sendable_text)
                | st.builds(Refusal, sendable_text)
            )
            for _ in range(draw(st.integers(0, 2)))
        ]
        calls = [
            ToolCall(
                f"{prefix}call_{round_index}_{k}",
                draw(tool_names),
                draw(tool_arguments()),
            )
            for k in range(draw(st.integers(1, 3)))
        ]
        steps += draw(st.permutations(said + calls))
        steps += [
            ToolResult(call.call_id, draw(hostile_text), draw(st.booleans()))
            for call in draw(st.permutations(calls))
        ]
    if draw(st.booleans()):
        steps.append(AssistantText(draw(sendable_text)))
    return tuple(steps)


@st.composite
def tool_turns(
    draw: st.DrawFn, *, with_parts: bool | None = None, prefix: str = ""
) -> TurnParts:
    """A turn that may be confirmed: text-only, or with attachments and steps."""
    if with_parts is None:
        with_parts = draw(st.booleans())
    return TurnParts(
        question=draw(sendable_text),
        answer=draw(sendable_text),
        attachments=tuple(draw(st.lists(attachments(), max_size=2)))
        if with_parts
        else (),
        steps=draw(tool_steps(prefix)) if with_parts else (),
    )


@st.composite
def abandoned_mid_tool(draw: st.DrawFn, prefix: str = "") -> TurnParts:
    """A turn cut off anywhere in its steps, usually after a call."""
    whole = draw(tool_turns(with_parts=True, prefix=prefix))
    calls = [i for i, s in enumerate(whole.steps) if isinstance(s, ToolCall)]
    cut = draw(
        st.sampled_from([i + 1 for i in calls])
        if calls
        else st.integers(0, len(whole.steps))
    )
    return TurnParts(
        question=whole.question,
        answer="",
        attachments=whole.attachments,
        steps=whole.steps[:cut],
    )
