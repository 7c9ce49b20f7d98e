"""A window named by the request that asked for it, for a turn written where
the ProjectedWindow object cannot travel (a PUT over HTTP).

A device asks `POST .../window` for a body, sends that body to its model, and
then records the answer. To keep the window's receipt as `confirm_turn(...,
window=...)` does, the turn write names the window: the policy it was asked
with, the ledger version the answer named, and the SHA-256 of the body the
device sent. The window is a pure function of (ledger at that version,
policy, question) — what the audit relies on to re-derive a receipt — so the
service projects it again at that version and keeps its receipt only if the
body is the one the device says it sent. The digest is compared, never
stored: the receipt binds the body with a MAC under the turns' keys (an
unkeyed hash kept after a deletion could confirm a guess of the text).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from dataclasses import dataclass
from uuid import UUID

from turnledger.domain.errors import (
    InvalidInputError,
    TextUnavailableError,
    TurnKeyDamagedError,
    WindowMismatchError,
)
from turnledger.domain.text import check_text
from turnledger.projections.ledger_rows import ConversationRow
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.queries import ConversationQueries
from turnledger.projections.read_side import ReadSide
from turnledger.projections.receipt import receipt_policy
from turnledger.projections.results import ProjectedWindow
from turnledger.projections.tokens import TokenCounter
from turnledger.projections.window import resolve_policy


@dataclass(frozen=True, slots=True)
class WindowRequest:
    """The window a turn's answer replied to, as the device asked for it.

    `policy`, `max_bytes`, `token_counter`, `system` and `model` as given to
    `project_window` (policy already resolved against the service's
    configuration when none was sent); `ledger_version` the version its
    answer named; `body_sha256` the hex SHA-256 of the body's UTF-8 bytes."""

    system: str
    model: str
    policy: WindowPolicy | None
    max_bytes: int | None
    token_counter: TokenCounter
    ledger_version: int
    body_sha256: str


def project_requested(
    queries: ConversationQueries,
    owner_id: str,
    conversation_id: UUID,
    question: str,
    request: WindowRequest,
) -> ProjectedWindow:
    """The window `request` names, projected again at its ledger version for
    `question`; WindowMismatchError when it cannot be that window."""
    check_text("system", request.system, allow_empty=True)
    check_text("model", request.model)
    if request.policy is None and request.max_bytes is None:
        raise InvalidInputError("window.max_bytes", "give max_bytes or a policy")
    head = queries.get_conversation(owner_id, conversation_id)
    if request.ledger_version > head.version:
        raise WindowMismatchError(
            conversation_id, "it was projected from a later ledger version"
        )
    policy = resolve_policy(request.policy, request.max_bytes)
    try:
        window = queries.window_at(
            _head_at(queries.read_side, head, request.ledger_version),
            question=question,
            system=request.system,
            model=request.model,
            policy=policy,
            counter=request.token_counter,
        )
    except (TextUnavailableError, TurnKeyDamagedError):
        raise WindowMismatchError(
            conversation_id,
            "a turn it sent can no longer be read (deleted since it was projected)",
        ) from None
    digest = hashlib.sha256(window.body).hexdigest()
    if not hmac.compare_digest(digest, request.body_sha256):
        raise WindowMismatchError(
            conversation_id,
            "its body is not the one this policy projects at that ledger version",
        )
    return ProjectedWindow(
        conversation_id,
        request.ledger_version,
        window,
        question=question,
        system=request.system,
        policy=receipt_policy(
            model=request.model, policy=policy, counter=request.token_counter.name
        ),
    )


def _head_at(view: ReadSide, head: ConversationRow, version: int) -> ConversationRow:
    """The conversation's row as it stood at `version`, as the audit rebuilds
    it to re-derive a past window (audit_receipts.head_at, which imports the
    application this module is part of)."""
    conversation_id = head.conversation_id
    eligible = view.eligible_ids(conversation_id, first=0, last=2**62, as_of=version)
    recorded = len(
        view.turns_page(conversation_id, offset=0, limit=2**62, as_of=version)
    )
    return dataclasses.replace(
        head, version=version, turn_count=recorded, eligible_count=len(eligible)
    )
