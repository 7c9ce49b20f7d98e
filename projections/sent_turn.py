"""What a turn renderer reads of a turn: its texts, its parts as objects or as
the documents they are sealed as, and the wire ids its calls are sent with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from turnledger.domain.parts import AssistantStep, Attachment


class TurnContent(Protocol):
    """A turn's texts as they are sent (trimmed where the policy trims)."""

    @property
    def question(self) -> str: ...

    @property
    def answer(self) -> str: ...

    @property
    def attachments(self) -> tuple[Attachment, ...]: ...

    @property
    def steps(self) -> tuple[AssistantStep, ...]: ...


WireIds = Mapping[str, str] | None
"""Stored call id -> the id sent, where they differ (projections/wire_ids.py)."""


class TurnDocuments(Protocol):
    """A turn's texts as they are sent, its attachments and steps as their
    part documents (to_document; sealed in that form)."""

    @property
    def question(self) -> str: ...

    @property
    def answer(self) -> str: ...

    @property
    def attachment_documents(self) -> Sequence[Mapping[str, Any]]: ...

    @property
    def step_documents(self) -> Sequence[Mapping[str, Any]]: ...


class SentTurn(TurnContent, TurnDocuments, Protocol):
    """A turn with parts as a body takes it: as steps and as their documents,
    with its id (wire ids are derived from it, projections/wire_ids.py)."""

    @property
    def turn_id(self) -> str: ...
