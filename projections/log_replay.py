"""Derive the read side from the log alone: what `turnledger rebuild` writes,
what an audit compares with, and how a store of the first release is upgraded.

The log is read in pages in commit order. Each turn's sizes are measured again
from its text (decrypted in one call per page and conversation), because
events do not record them; a turn whose key is gone (deleted) has none, and
needs none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any
from uuid import UUID

from turnledger.domain.conversation import Conversation, TurnSizes, fold_key_id
from turnledger.domain.parts import decode_parts
from turnledger.domain.text import TextMetrics
from turnledger.projections.ledger_rows import SummarySize, TurnRow, project_events
from turnledger.projections.read_side import LedgerView
from turnledger.projections.turn_sizes import turn_sizes

# (conversation id, [(key id, field, sealed)], owner id) -> texts, None where
# the key is gone; the owner is the one the conversation's Started event names
OpenTexts = Callable[
    [UUID, Sequence[tuple[str, str, bytes]], str | None], list[str | None]
]


def replay_events(
    pages: Iterable[Sequence[tuple[Any, str]]],
    open_texts: OpenTexts,
    view: LedgerView | None = None,
) -> LedgerView:
    """Apply (domain event, chain digest) pairs, page by page, to a view."""
    view = view or LedgerView()
    for page in pages:
        sizes = _measure(page, open_texts, view)
        for domain_event, digest in page:
            conversation_id = domain_event.originator_id
            head = view.conversations([conversation_id]).get(conversation_id)
            view.apply(
                project_events(
                    head=head,
                    events=[domain_event],
                    digests=[digest],
                    sizes=sizes.get(conversation_id, {}),
                    known_turns=_turns_named(view, domain_event),
                )
            )
    return view


def _turns_named(view: LedgerView, domain_event: Any) -> dict[str, TurnRow]:
    conversation_id = domain_event.originator_id
    if isinstance(domain_event, Conversation.HistoryDeleted):
        return view.turns_by_id(conversation_id, domain_event.turn_ids)
    if isinstance(domain_event, Conversation.FoldRecorded):
        return view.turns_by_id(conversation_id, [domain_event.covers_through_turn_id])
    return {}


def _measure(
    page: Sequence[tuple[Any, str]], open_texts: OpenTexts, view: LedgerView
) -> dict[UUID, dict[str, TurnSizes | SummarySize]]:
    items, owners = _sealed_texts(page)
    unknown = [c for c in items if c not in owners]
    for conversation_id, row in view.conversations(unknown).items():
        owners[conversation_id] = row.owner_id
    sizes: dict[UUID, dict[str, TurnSizes | SummarySize]] = {}
    for conversation_id, wanted in items.items():
        opened = dict(
            zip(
                ((key_id, field) for key_id, field, _ in wanted),
                open_texts(conversation_id, wanted, owners.get(conversation_id)),
                strict=True,
            )
        )
        sizes[conversation_id] = _sizes_of(opened)
    return sizes


def _sealed_texts(
    page: Sequence[tuple[Any, str]],
) -> tuple[dict[UUID, list[tuple[str, str, bytes]]], dict[UUID, str]]:
    """The sealed texts of the page's turns and folds, by conversation, and the
    owners its Started events name."""
    items: dict[UUID, list[tuple[str, str, bytes]]] = {}
    # Owners from the log itself: Started events of this page, else the heads
    # that earlier pages' Started events made.
    owners: dict[UUID, str] = {}
    for domain_event, _ in page:
        conversation_id = domain_event.originator_id
        if isinstance(domain_event, Conversation.Started):
            owners[conversation_id] = str(domain_event.owner_id)
        if isinstance(
            domain_event, Conversation.TurnConfirmed | Conversation.TurnAbandoned
        ):
            items.setdefault(conversation_id, []).extend(
                [
                    (domain_event.turn_id, "question", domain_event.sealed_question),
                    (domain_event.turn_id, "answer", domain_event.sealed_answer),
                ]
            )
            if domain_event.sealed_parts is not None:
                items[conversation_id].append(
                    (domain_event.turn_id, "parts", domain_event.sealed_parts)
                )
        elif isinstance(domain_event, Conversation.FoldRecorded):
            items.setdefault(conversation_id, []).append(
                (
                    fold_key_id(domain_event.fold_id),
                    "summary",
                    domain_event.sealed_summary,
                )
            )
    return items, owners


def _sizes_of(
    opened: dict[tuple[str, str], str | None],
) -> dict[str, TurnSizes | SummarySize]:
    """The sizes of one conversation's opened texts: a turn's once its question,
    answer and parts (if it has them) all opened, a summary's once it opened."""
    found: dict[str, TurnSizes | SummarySize] = {}
    for (key_id, field), text in opened.items():
        if text is None:
            continue
        if field == "summary":
            metrics = TextMetrics.of(text)
            found[key_id] = SummarySize(metrics.json_bytes, metrics.chars)
        elif field == "question":
            answer = opened.get((key_id, "answer"))
            parts_text = opened.get((key_id, "parts"))
            has_parts = (key_id, "parts") in opened
            if answer is not None and (parts_text is not None or not has_parts):
                found[key_id] = turn_sizes(
                    decode_parts(question=text, answer=answer, parts_text=parts_text)
                )
    return found
