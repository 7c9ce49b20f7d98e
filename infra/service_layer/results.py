"""What the ledger's commands return: immutable values (queries: see
projections/results.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from turnledger.domain.conversation import TurnStatus
from turnledger.domain.parts import TurnParts
from turnledger.infra.service_layer.purge import PurgeReport

if TYPE_CHECKING:
    from turnledger.infra.service_layer.window_requests import WindowRequest


@dataclass(frozen=True, slots=True)
class TurnReceipt:
    """Result of recording a turn; a retried request returns the same receipt."""

    conversation_id: UUID
    turn_id: str
    status: TurnStatus
    version: int
    recorded_at: datetime


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """One turn for `Conversations.record_turns`: what `confirm_turn` (status
    confirmed) or `record_abandoned_turn` (failed or stopped) is given, with
    `answer` in the role of the partial answer for the latter."""

    owner_id: str
    conversation_id: UUID
    turn_id: str
    status: TurnStatus | str = TurnStatus.CONFIRMED
    question: str | None = None
    answer: str | None = None
    parts: TurnParts | None = None
    expected_version: int | None = None
    # The id of the writer's credential (the HTTP service: its device), which
    # the store checks is still valid in the transaction that writes the
    # turn; None: no check. Only for ledgers whose store `checks_credentials`.
    credential: str | None = None
    # The window a confirmed turn's answer replied to, named by its request
    # (infra/service_layer/window_requests.py): its receipt is kept with the
    # turn, as `confirm_turn(..., window=...)` keeps it. None: no receipt.
    window: WindowRequest | None = None


@dataclass(frozen=True, slots=True)
class DeletionReceipt:
    conversation_id: UUID
    deleted_turn_ids: tuple[str, ...]
    version: int
    purge: PurgeReport | None = None


@dataclass(frozen=True, slots=True)
class FoldReceipt:
    conversation_id: UUID
    fold_id: str
    covers_through_turn_id: str
    version: int
