"""Window receipts: a content-free record of what was sent to the model.

A receipt names the policy a window was projected with (complete, so it can be
applied again), the ledger version it was projected from, the turns it
included, and the length and SHA-256 of the body. The window is a pure
function of (ledger at that version, policy, question), so an audit replays
the ledger to that version, re-projects, and compares the hash.

The receipt itself holds no conversation text, so deleting turns never has to
touch it. The system instructions are needed to re-apply the policy but are
not user text and may still be sensitive; they are stored beside the turn's
question and answer, sealed with the same per-turn key, so they are readable
exactly as long as the turn is, and shredded with it (see docs/audit.md).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from turnledger.domain.errors import InvalidInputError
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import CHAR_ESTIMATE

RECEIPT_FORMAT = 1
"""Version of the receipt document; readers accept this one and older."""

OPENAI_CHAT = "openai-chat"
"""The first policy document: a chat-completions body limited by bytes only."""

WINDOW_POLICY = "window-policy"
"""A full `WindowPolicy` (projections/policy.py), its model and token counter."""

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_FIELDS = frozenset(
    {
        "receipt_format",
        "policy",
        "ledger_version",
        "turn_ids",
        "body_bytes",
        "body_sha256",
    }
)


@dataclass(frozen=True, slots=True)
class WindowReceipt:
    """What a window was: policy, source version, included turns, body digest."""

    policy: dict[str, Any]
    ledger_version: int
    turn_ids: tuple[str, ...]
    body_bytes: int
    body_sha256: str
    fold_id: str | None = None  # the summary sent in place of older turns, if any

    @classmethod
    def of_body(
        cls,
        *,
        policy: dict[str, Any],
        ledger_version: int,
        turn_ids: tuple[str, ...],
        body: bytes,
        fold_id: str | None = None,
    ) -> WindowReceipt:
        return cls(
            policy=dict(policy),
            ledger_version=ledger_version,
            turn_ids=tuple(turn_ids),
            body_bytes=len(body),
            body_sha256=hashlib.sha256(body).hexdigest(),
            fold_id=fold_id,
        )

    def matches(
        self, body: bytes, turn_ids: tuple[str, ...], fold_id: str | None = None
    ) -> bool:
        return (
            tuple(turn_ids) == self.turn_ids
            and fold_id == self.fold_id
            and len(body) == self.body_bytes
            and hashlib.sha256(body).hexdigest() == self.body_sha256
        )

    def to_document(self) -> dict[str, Any]:
        """Plain JSON types only, as stored in the `TurnConfirmed` event."""
        return {
            "receipt_format": RECEIPT_FORMAT,
            "policy": dict(self.policy),
            "ledger_version": self.ledger_version,
            "turn_ids": list(self.turn_ids),
            "body_bytes": self.body_bytes,
            "body_sha256": self.body_sha256,
            "fold_id": self.fold_id,
        }

    @classmethod
    def from_document(cls, document: Any) -> WindowReceipt:
        """Read a stored receipt; InvalidInputError names what is malformed."""
        if not isinstance(document, dict):
            raise InvalidInputError("window_receipt", "expected a JSON object")
        missing = sorted(_FIELDS - document.keys())
        if missing:
            raise InvalidInputError("window_receipt", f"missing {', '.join(missing)}")
        version = document["receipt_format"]
        if not _is_int(version) or not 1 <= version <= RECEIPT_FORMAT:
            raise InvalidInputError(
                "window_receipt", f"unknown receipt_format {version!r}"
            )
        policy = document["policy"]
        if not isinstance(policy, dict) or not isinstance(policy.get("format"), str):
            raise InvalidInputError("window_receipt", "policy must name its format")
        ledger_version = document["ledger_version"]
        if not _is_int(ledger_version) or ledger_version < 1:
            raise InvalidInputError("window_receipt", "ledger_version must be >= 1")
        turn_ids = document["turn_ids"]
        if not isinstance(turn_ids, list) or not all(
            isinstance(turn_id, str) for turn_id in turn_ids
        ):
            raise InvalidInputError("window_receipt", "turn_ids must be strings")
        body_bytes = document["body_bytes"]
        if not _is_int(body_bytes) or body_bytes < 0:
            raise InvalidInputError("window_receipt", "body_bytes must be >= 0")
        body_sha256 = document["body_sha256"]
        if not isinstance(body_sha256, str) or not _SHA256_HEX.fullmatch(body_sha256):
            raise InvalidInputError("window_receipt", "body_sha256 must be SHA-256 hex")
        fold_id = document.get("fold_id")  # absent in the first receipts
        if fold_id is not None and not isinstance(fold_id, str):
            raise InvalidInputError("window_receipt", "fold_id must be a string")
        return cls(
            policy=dict(policy),
            ledger_version=ledger_version,
            turn_ids=tuple(turn_ids),
            body_bytes=body_bytes,
            body_sha256=body_sha256,
            fold_id=fold_id,
        )


def receipt_policy(*, model: str, policy: WindowPolicy, counter: str) -> dict[str, Any]:
    """The policy document a receipt keeps (the system text is stored sealed)."""
    return {
        "format": WINDOW_POLICY,
        "model": model,
        "token_counter": counter,
        "policy": policy.model_dump(mode="json"),
    }


def parse_receipt_policy(document: dict[str, Any]) -> tuple[str, WindowPolicy, str]:
    """(model, policy, token counter name) of a receipt's policy document."""
    kind = document.get("format")
    try:
        if kind == OPENAI_CHAT and set(document) == {"format", "model", "max_bytes"}:
            return (
                str(document["model"]),
                WindowPolicy.bytes_only(document["max_bytes"]),
                CHAR_ESTIMATE.name,
            )
        if kind == WINDOW_POLICY and set(document) == {
            "format",
            "model",
            "token_counter",
            "policy",
        }:
            return (
                str(document["model"]),
                WindowPolicy.model_validate(document["policy"]),
                str(document["token_counter"]),
            )
    except ValidationError as error:
        raise InvalidInputError(
            "policy", f"not a valid window policy: {error}"
        ) from None
    raise InvalidInputError("policy", f"unknown window policy format {kind!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
