"""Window receipts: a content-free record of what was sent to the model.

A receipt names the policy a window was projected with (complete, so it can be
applied again), the ledger version it was projected from, the turns it
included, and a keyed MAC of the body. The window is a pure function of
(ledger at that version, policy, question), so an audit replays the ledger to
that version, re-projects, and compares the MAC.

The MAC key is derived (HKDF-SHA256) from the data keys of every turn whose
text is in the body: the receipt's own turn (question, system instructions),
each turn it sent and the fold it sent. Deleting any of them destroys a key
the MAC needs, so nothing kept after a deletion lets anyone confirm a guess of
the deleted text (an unkeyed hash of the body would). The first receipts
(format 1) carry the body's length and unkeyed SHA-256; they are still read
and verified, and are the one place 0.1 data can confirm a guess.

The receipt itself holds no conversation text, so deleting turns never has to
touch it. The system instructions are needed to re-apply the policy but are
not user text and may still be sensitive; they are stored beside the turn's
question and answer, sealed with the same per-turn key, so they are readable
exactly as long as the turn is, and shredded with it (see docs/audit.md).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from turnledger.domain.errors import InvalidInputError
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import CHAR_ESTIMATE

RECEIPT_FORMAT = 2
"""Version of the receipt document; readers accept this one and older."""

OPENAI_CHAT = "openai-chat"
"""The first policy document: a chat-completions body limited by bytes only."""

WINDOW_POLICY = "window-policy"
"""A full `WindowPolicy` (projections/policy.py), its model and token counter."""

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_COMMON_FIELDS = frozenset({"receipt_format", "policy", "ledger_version", "turn_ids"})
_FIELDS_BY_FORMAT = {
    1: _COMMON_FIELDS | {"body_bytes", "body_sha256"},
    2: _COMMON_FIELDS | {"body_mac"},
}


def receipt_key_ids(
    turn_id: str, kept_turn_ids: tuple[str, ...], fold_id: str | None
) -> list[str]:
    """The vault keys a receipt's MAC key is derived from, in their order."""
    ids = [turn_id, *kept_turn_ids]
    if fold_id is not None:
        ids.append(f"fold/{fold_id}")
    return ids


@dataclass(frozen=True, slots=True)
class WindowReceipt:
    """What a window was: policy, source version, included turns, body MAC."""

    policy: dict[str, Any]
    ledger_version: int
    turn_ids: tuple[str, ...]
    body_mac: str | None = None  # format 2: HMAC-SHA256 under the derived key
    fold_id: str | None = None  # the summary sent in place of older turns, if any
    receipt_format: int = RECEIPT_FORMAT
    body_bytes: int | None = None  # format 1 only
    body_sha256: str | None = None  # format 1 only

    @classmethod
    def of_body(
        cls,
        *,
        policy: dict[str, Any],
        ledger_version: int,
        turn_ids: tuple[str, ...],
        body: bytes,
        mac_key: bytes | None,
        fold_id: str | None = None,
    ) -> WindowReceipt:
        return cls(
            policy=dict(policy),
            ledger_version=ledger_version,
            turn_ids=tuple(turn_ids),
            body_mac=None
            if mac_key is None
            else hmac.new(mac_key, body, hashlib.sha256).hexdigest(),
            fold_id=fold_id,
        )

    def matches(
        self,
        body: bytes,
        turn_ids: tuple[str, ...],
        fold_id: str | None = None,
        *,
        mac_key: bytes | None = None,
    ) -> bool:
        """Whether `body` is the body this receipt describes. Format 2 needs the
        MAC key (`TextVault.receipt_key`); without it nothing can be confirmed."""
        if tuple(turn_ids) != self.turn_ids or fold_id != self.fold_id:
            return False
        if self.receipt_format == 1:
            return (
                len(body) == self.body_bytes
                and hashlib.sha256(body).hexdigest() == self.body_sha256
            )
        if mac_key is None or self.body_mac is None:
            return False
        expected = hmac.new(mac_key, body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, self.body_mac)

    def to_document(self) -> dict[str, Any]:
        """Plain JSON types only, as stored in the `TurnConfirmed` event."""
        document: dict[str, Any] = {
            "receipt_format": self.receipt_format,
            "policy": dict(self.policy),
            "ledger_version": self.ledger_version,
            "turn_ids": list(self.turn_ids),
            "fold_id": self.fold_id,
        }
        if self.receipt_format == 1:
            document.update(body_bytes=self.body_bytes, body_sha256=self.body_sha256)
        else:
            document["body_mac"] = self.body_mac
        return document

    @classmethod
    def from_document(cls, document: Any) -> WindowReceipt:
        """Read a stored receipt; InvalidInputError names what is malformed."""
        if not isinstance(document, dict):
            raise InvalidInputError("window_receipt", "expected a JSON object")
        version = document.get("receipt_format")
        if not _is_int(version) or version not in _FIELDS_BY_FORMAT:
            raise InvalidInputError(
                "window_receipt", f"unknown receipt_format {version!r}"
            )
        missing = sorted(_FIELDS_BY_FORMAT[version] - document.keys())
        if missing:
            raise InvalidInputError("window_receipt", f"missing {', '.join(missing)}")
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
        fold_id = document.get("fold_id")  # absent in the first receipts
        if fold_id is not None and not isinstance(fold_id, str):
            raise InvalidInputError("window_receipt", "fold_id must be a string")
        common: dict[str, Any] = {
            "policy": dict(policy),
            "ledger_version": ledger_version,
            "turn_ids": tuple(turn_ids),
            "fold_id": fold_id,
            "receipt_format": version,
        }
        if version == 1:
            body_bytes = document["body_bytes"]
            if not _is_int(body_bytes) or body_bytes < 0:
                raise InvalidInputError("window_receipt", "body_bytes must be >= 0")
            body_sha256 = document["body_sha256"]
            if not isinstance(body_sha256, str) or not _SHA256_HEX.fullmatch(
                body_sha256
            ):
                raise InvalidInputError(
                    "window_receipt", "body_sha256 must be SHA-256 hex"
                )
            return cls(**common, body_bytes=body_bytes, body_sha256=body_sha256)
        body_mac = document["body_mac"]  # None: a turn it sent was deleted first
        if body_mac is not None and (
            not isinstance(body_mac, str) or not _SHA256_HEX.fullmatch(body_mac)
        ):
            raise InvalidInputError("window_receipt", "body_mac must be 64 hex digits")
        return cls(**common, body_mac=body_mac)


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
