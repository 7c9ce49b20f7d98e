"""A turn's fields as every body that carries a turn spells them, defined
once: the request (`TurnIn`), its receipt, a history item and a sync change."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from turnledger.infra.wire.parts import TurnPart

TurnStatusName = Literal["confirmed", "failed", "stopped"]

# A turn's text as read back: null once it is deleted (or unreadable).
TurnTextOut = str | None

Unreadable = Annotated[
    Literal["key-damaged"] | None,
    Field(
        description="key-damaged: not deleted, but the turn's stored key was "
        "altered, so its text cannot be read (docs/audit.md)",
    ),
]

PartsOut = Annotated[
    list[TurnPart] | None,
    Field(description="attachments and steps in order; null if deleted"),
]
