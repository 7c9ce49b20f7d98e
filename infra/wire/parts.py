"""A turn's parts on the wire (docs/tools.md): attachments, then the
assistant's steps in order, as requests send them and responses show them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, TypeAdapter

from turnledger.domain.parts import TurnParts
from turnledger.infra.wire.base import RequestModel


class AttachmentPart(RequestModel):
    kind: Literal["attachment"]
    media_type: str
    byte_size: int = Field(ge=0)
    uri: str | None = None
    file_id: str | None = None
    data: str | None = Field(
        default=None,
        description="inline bytes, base64 (at most 64 KiB decoded); or give "
        "uri or file_id",
    )
    digest: str | None = Field(default=None, description='"sha256:<64 hex>"')
    name: str | None = None
    width: int | None = Field(default=None, description="pixels, with height")
    height: int | None = None


class AssistantTextPart(RequestModel):
    kind: Literal["assistant_text"]
    text: str


class ToolCallPart(RequestModel):
    kind: Literal["tool_call"]
    call_id: str
    name: str
    arguments: str = Field(description="JSON text of an object, kept as given")


class ToolResultPart(RequestModel):
    kind: Literal["tool_result"]
    call_id: str
    content: str
    is_error: bool = False


class RefusalPart(RequestModel):
    kind: Literal["refusal"]
    text: str


class ReasoningPart(RequestModel):
    kind: Literal["reasoning"]
    provider: Literal["anthropic", "openai", "gemini"]
    model: str = Field(description="the model that produced it")
    payload: str = Field(
        description="JSON text of the provider's own object, kept and sent back "
        "as given: an Anthropic thinking or redacted_thinking block, an OpenAI "
        'Responses reasoning item, or {"thoughtSignature": ...} for Gemini'
    )


TurnPart = Annotated[
    AttachmentPart
    | AssistantTextPart
    | ToolCallPart
    | ToolResultPart
    | RefusalPart
    | ReasoningPart,
    Field(discriminator="kind"),
]
MAX_PARTS = 1_000


def parts_out(turn: TurnParts | None) -> list[TurnPart] | None:
    """A turn's attachments and steps as the API shows them (None: deleted)."""
    if turn is None:
        return None
    return [_PART_ADAPTER.validate_python(d) for d in turn.part_documents()]


_PART_ADAPTER: TypeAdapter[TurnPart] = TypeAdapter(TurnPart)
