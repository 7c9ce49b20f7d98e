"""The audit's receipt pass: every window receipt re-derived from the events.

Each conversation is replayed from its events alone (never from a snapshot,
which the chain does not cover) to the version a receipt names; the
receipt's policy is applied again with the turn's own question, and the
body's length and SHA-256 compared. Receipts whose turns were deleted since
are reported as not re-derivable, which is expected, not a failure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from turnledger.domain.errors import (
    InvalidInputError,
    TextUnavailableError,
    TurnKeyDamagedError,
    WindowError,
)
from turnledger.domain.findings import (
    NOT_REDERIVABLE,
    RECEIPT_INVALID,
    RECEIPT_MISMATCH,
    TEXT_MISSING,
    UNREADABLE,
    UNREPLAYABLE,
    ConversationAudit,
    Finding,
)
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.audit_collected import ReceiptToCheck
from turnledger.infra.service_layer.audit_receipt_texts import (
    DAMAGED,
    Texts,
    open_receipt_texts,
    turns_of,
)
from turnledger.projections.ledger_rows import ConversationRow
from turnledger.projections.log_replay import replay_events
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.queries import ConversationQueries
from turnledger.projections.read_side import LedgerView
from turnledger.projections.receipt import (
    WindowReceipt,
    parse_receipt_policy,
    receipt_key_ids,
)
from turnledger.projections.tokens import CHAR_ESTIMATE, TokenCounter
from turnledger.projections.turn_texts import open_noting_damaged
from turnledger.projections.window import Window


def receipt_finding(
    conversation_id: UUID, item: ReceiptToCheck, kind: str, detail: str
) -> Finding:
    return Finding(
        kind, conversation_id, item.version, f"receipt of turn {item.turn_id}: {detail}"
    )


def tally(audit: ConversationAudit, finding: Finding | None) -> None:
    """Count a receipt as verified, failed or not re-derivable."""
    if finding is None:
        audit.receipts_verified += 1
        return
    if finding.failure:
        audit.receipts_failed += 1
    else:
        audit.receipts_not_rederivable += 1
    audit.findings.append(finding)


class ReceiptPass:
    """The receipt pass of `Auditor` (infra/service_layer/audit.py)."""

    ledger: Conversations
    token_counters: Mapping[str, TokenCounter]

    def _check_receipts(
        self, audit: ConversationAudit, receipts: list[ReceiptToCheck]
    ) -> None:
        """Re-derive every receipt of one conversation from one replay.

        The conversation's events are replayed once into a read side of its
        own (never the store's, which the chain does not cover); every fact
        in it names the version that made it, so each receipt's window is
        derived "as of" its ledger version from that one view.
        """
        if not receipts:
            return
        conversation_id = audit.conversation_id
        try:
            events: list[Any] = list(self.ledger.events.get(conversation_id))
            view = self._replay(conversation_id, events)
        except Exception as error:  # noqa: BLE001 - reported, never raised
            audit.findings.append(
                Finding(
                    UNREPLAYABLE,
                    conversation_id,
                    None,
                    f"{type(error).__name__}: the conversation cannot be rebuilt from "
                    "its events, so its receipts cannot be re-derived",
                )
            )
            audit.receipts_failed += len(receipts)
            return
        to_derive: list[tuple[WindowReceipt, ReceiptToCheck]] = []
        for item in receipts:
            checked = self._precheck(conversation_id, view, item)
            if isinstance(checked, Finding):
                tally(audit, checked)
            else:
                to_derive.append((checked, item))
        if to_derive:
            texts = open_receipt_texts(
                self.ledger.vault,
                conversation_id,
                audit.owner_id,
                events,
                [i for _, i in to_derive],
            )
            self._derive_all(audit, view, to_derive, texts)

    def _derive_all(
        self,
        audit: ConversationAudit,
        view: LedgerView,
        to_derive: list[tuple[WindowReceipt, ReceiptToCheck]],
        texts: Texts,
    ) -> None:
        """Re-derive each receipt's window as of its ledger version."""
        conversation_id = audit.conversation_id
        head = view.conversations([conversation_id])[conversation_id]
        queries = ConversationQueries(
            read_side=view, events=self.ledger.events, vault=self.ledger.vault
        )
        if not isinstance(head.version, int):  # a hand-edited version cell
            for _, item in to_derive:
                tally(
                    audit,
                    receipt_finding(
                        conversation_id,
                        item,
                        UNREPLAYABLE,
                        "the conversation's versions are not numbers: its "
                        "receipts cannot be re-derived",
                    ),
                )
            return
        for receipt, item in to_derive:
            if receipt.ledger_version > head.version:
                tally(
                    audit,
                    receipt_finding(
                        conversation_id,
                        item,
                        RECEIPT_INVALID,
                        f"names ledger version {receipt.ledger_version}, beyond the "
                        "log",
                    ),
                )
                continue
            past = head_at(view, head, receipt.ledger_version)
            tally(
                audit,
                self._derive(
                    conversation_id, queries, view, past, receipt, item, texts
                ),
            )

    def _replay(self, conversation_id: UUID, events: list[Any]) -> LedgerView:
        # A damaged key (the key pass reports it) must not stop the replay:
        # its turn is replayed as if its key were gone.
        digests = [str(getattr(e, "digest", "") or "") for e in events]
        return replay_events(
            [list(zip(events, digests, strict=True))],
            open_noting_damaged(self.ledger.vault, set()),
        )

    def _policy_of(
        self, receipt: WindowReceipt
    ) -> tuple[str, WindowPolicy, TokenCounter]:
        model, policy, counter_name = parse_receipt_policy(receipt.policy)
        counter = (
            CHAR_ESTIMATE
            if counter_name == CHAR_ESTIMATE.name
            else self.token_counters.get(counter_name)
        )
        if counter is None:
            raise InvalidInputError(
                "policy", f"token counter {counter_name!r} is not available here"
            )
        return model, policy, counter

    def _precheck(
        self, conversation_id: UUID, view: LedgerView, item: ReceiptToCheck
    ) -> WindowReceipt | Finding:
        """The receipt, or why it cannot or need not be re-derived."""
        try:
            receipt = WindowReceipt.from_document(item.document)
        except InvalidInputError as error:
            return receipt_finding(conversation_id, item, RECEIPT_INVALID, error.reason)
        if receipt.ledger_version >= item.version or item.sealed_system is None:
            return receipt_finding(
                conversation_id,
                item,
                RECEIPT_INVALID,
                f"names ledger version {receipt.ledger_version}, which is not before "
                "its own turn, or has no sealed system instructions",
            )
        involved = dict.fromkeys((item.turn_id, *receipt.turn_ids))
        rows = view.turns_by_id(conversation_id, list(involved))
        deleted = [
            turn_id for turn_id in involved if turn_id in rows and rows[turn_id].deleted
        ]
        if deleted:
            return receipt_finding(
                conversation_id,
                item,
                NOT_REDERIVABLE,
                f"not re-derivable: turns deleted ({', '.join(deleted)})",
            )
        if receipt.fold_id is not None:
            folds = {f.fold_id: f for f in view.folds(conversation_id)}
            fold = folds.get(receipt.fold_id)
            if fold is not None and fold.withdrawn_version is not None:
                return receipt_finding(
                    conversation_id,
                    item,
                    NOT_REDERIVABLE,
                    f"not re-derivable: turns deleted (covered by fold "
                    f"{receipt.fold_id}, since withdrawn)",
                )
        return receipt

    def _derive(
        self,
        conversation_id: UUID,
        queries: ConversationQueries,
        view: LedgerView,
        past: ConversationRow,
        receipt: WindowReceipt,
        item: ReceiptToCheck,
        texts: Texts,
    ) -> Finding | None:
        opened = _question_and_system(conversation_id, item, texts)
        if isinstance(opened, Finding):
            return opened
        question, system = opened
        try:
            model, policy, counter = self._policy_of(receipt)
            window = queries.window_at(
                past,
                question=question,
                system=system,
                model=model,
                policy=policy,
                counter=counter,
                texts=turns_of(texts),
            )
        except Exception as error:  # noqa: BLE001 - e.g. a ciphertext failing its tag
            return _not_derived(conversation_id, view, item, error)
        return self._compare(conversation_id, receipt, item, window)

    def _compare(
        self,
        conversation_id: UUID,
        receipt: WindowReceipt,
        item: ReceiptToCheck,
        window: Window,
    ) -> Finding | None:
        """None if the re-derived window matches the receipt, else why not."""
        sent_fold = window.fold_id if window.fold_sent else None
        mac_key = None
        if receipt.receipt_format >= 2:
            try:
                mac_key = self.ledger.vault.receipt_key(
                    conversation_id,
                    receipt_key_ids(item.turn_id, receipt.turn_ids, receipt.fold_id),
                )
            except TurnKeyDamagedError as error:
                return receipt_finding(
                    conversation_id,
                    item,
                    NOT_REDERIVABLE,
                    f"not re-derivable: the key of {', '.join(error.turn_ids)} is "
                    "damaged (see its damaged-key finding)",
                )
            if mac_key is None:
                return receipt_finding(
                    conversation_id,
                    item,
                    NOT_REDERIVABLE,
                    "not re-derivable: a key its body was bound with is gone",
                )
        if receipt.matches(
            window.body, window.kept_turn_ids, sent_fold, mac_key=mac_key
        ):
            return None
        if tuple(window.kept_turn_ids) != receipt.turn_ids:
            what = (
                f"turns {list(window.kept_turn_ids)} where the receipt says "
                f"{list(receipt.turn_ids)}"
            )
        elif sent_fold != receipt.fold_id:
            what = f"fold {sent_fold!r} where the receipt says {receipt.fold_id!r}"
        else:
            what = "the same turns, but a body whose MAC differs"
        return receipt_finding(
            conversation_id,
            item,
            RECEIPT_MISMATCH,
            f"re-derived {len(window.body)} bytes with {what}",
        )


def _question_and_system(
    conversation_id: UUID, item: ReceiptToCheck, texts: Texts
) -> tuple[str, str] | Finding:
    """The turn's question and system instructions, or why they cannot be read."""

    def finding(kind: str, detail: str) -> Finding:
        return receipt_finding(conversation_id, item, kind, detail)

    question_key, system_key = (item.turn_id, "question"), (item.turn_id, "system")
    if (item.turn_id, DAMAGED) in texts:
        return finding(
            NOT_REDERIVABLE,
            f"not re-derivable: turn {item.turn_id}'s key is damaged "
            "(see its damaged-key finding)",
        )
    if question_key not in texts or system_key not in texts:
        return finding(UNREADABLE, "its sealed text cannot be opened")
    question, system = texts[question_key], texts[system_key]
    if question is None or system is None:
        return finding(TEXT_MISSING, "its key is gone but it was never deleted")
    return question, system


def _not_derived(
    conversation_id: UUID, view: LedgerView, item: ReceiptToCheck, error: Exception
) -> Finding:
    """Why re-deriving the receipt's window raised `error`."""

    def finding(kind: str, detail: str) -> Finding:
        return receipt_finding(conversation_id, item, kind, detail)

    if isinstance(error, InvalidInputError):
        return finding(RECEIPT_INVALID, error.reason)
    if isinstance(error, TurnKeyDamagedError):
        return finding(
            NOT_REDERIVABLE,
            f"not re-derivable: the key of {', '.join(error.turn_ids)} is "
            "damaged (see its damaged-key finding)",
        )
    if isinstance(error, TextUnavailableError):
        gone = view.turns_by_id(conversation_id, [error.turn_id]).get(error.turn_id)
        if gone is not None and gone.deleted:
            # The window read a turn (e.g. at its edge) deleted since.
            return finding(
                NOT_REDERIVABLE, f"not re-derivable: turns deleted ({error.turn_id})"
            )
        return finding(
            TEXT_MISSING, f"turn {error.turn_id}'s key is gone but it was never deleted"
        )
    if isinstance(error, WindowError):
        return finding(RECEIPT_MISMATCH, f"the policy no longer applies: {error}")
    return finding(UNREADABLE, f"{type(error).__name__}: sealed text cannot be opened")


def head_at(view: LedgerView, head: ConversationRow, version: int) -> ConversationRow:
    """The conversation's row as it stood at `version` (for a past window)."""
    conversation_id = head.conversation_id
    eligible = view.eligible_ids(conversation_id, first=0, last=2**62, as_of=version)
    recorded = len(
        view.turns_page(conversation_id, offset=0, limit=2**62, as_of=version)
    )
    return dataclasses.replace(
        head, version=version, turn_count=recorded, eligible_count=len(eligible)
    )
