"""Queries: history pages, request windows and folds, from the read side.

Nothing here loads an aggregate. A query reads the conversation's row first;
its version is the version every later read is pinned to ("as of"), so the
turns a window keeps and the version its receipt names always agree, however
many writes land meanwhile. Only the texts of the turns a query returns are
read (from their events) and decrypted. A turn deleted after the pinned
version has lost its key: the query then starts again at the new head.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol
from uuid import UUID

from turnledger.domain.conversation import Conversation, TurnStatus, fold_key_id
from turnledger.domain.errors import (
    ConversationNotFoundError,
    InvalidInputError,
    SealMismatchError,
    TextUnavailableError,
    TurnKeyDamagedError,
)
from turnledger.domain.parts import TurnParts, decode_many_part_documents
from turnledger.domain.ports import SEAL_BOUND_TO_OWNER, TextVault
from turnledger.domain.text import check_identifier, check_text
from turnledger.projections.dropped import (
    KEY_DAMAGED,
    DroppedSpan,
    DroppedTurns,
    EligibleTurns,
)
from turnledger.projections.ledger_rows import ConversationRow, FoldRow, TurnRow
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.read_side import ReadSide, current_fold
from turnledger.projections.receipt import receipt_policy
from turnledger.projections.results import (
    MAX_HISTORY_PAGE,
    HistoryItem,
    HistoryPage,
    ProjectedWindow,
)
from turnledger.projections.tokens import (
    CHAR_ESTIMATE,
    CharEstimate,
    TokenCounter,
    char_estimate,
)
from turnledger.projections.turn_texts import (
    open_turn_texts,
    open_turns,
    sealed_fields,
)
from turnledger.projections.window import (
    Frame,
    OpenedTurn,
    PairCandidate,
    Window,
    WindowPlan,
    WindowTurn,
    build_window,
    candidate_from_sizes,
    frame_request,
    measure_pair,
    needs_trim,
    plan_in_frame,
    prepare_fold,
    report_dropped,
    resolve_policy,
    settle_wire_ids,
)

logger = logging.getLogger("turnledger.window")

# A deletion committed while a query reads makes it start again at the new head.
_READ_ATTEMPTS = 5
# Turns fetched per step of a walk back from the newest: small first (most
# windows stop early), doubling up to the largest.
_FIRST_CHUNK = 32
_LARGEST_CHUNK = 1024


class EventReader(Protocol):
    def get(
        self, originator_id: UUID, *, gt: int | None = None, lte: int | None = None
    ) -> Any: ...


@dataclass(frozen=True, slots=True)
class FoldStatus:
    """Whether the turns after the current fold call for a new one.

    `unfolded_tokens` is the char/4 estimate of the eligible turns after the
    fold, counted from the newest back until the threshold is passed (so it is
    exact when `due` is false, and a lower bound when it is true).
    """

    fold_id: str | None
    covers_through_turn_id: str | None
    unfolded_tokens: int
    threshold_tokens: int
    due: bool


class ConversationQueries:
    def __init__(
        self, *, read_side: ReadSide, events: EventReader, vault: TextVault
    ) -> None:
        self.read_side = read_side
        self.events = events
        self.vault = vault

    # Conversations and history -------------------------------------------------

    def get_conversation(self, owner_id: str, conversation_id: UUID) -> ConversationRow:
        check_identifier("owner_id", owner_id)
        if not isinstance(conversation_id, UUID):
            raise InvalidInputError("conversation_id", "expected a UUID")
        row = self.read_side.conversations([conversation_id]).get(conversation_id)
        # Somebody else's conversation is answered exactly like a missing one.
        if row is None or row.owner_id != owner_id:
            raise ConversationNotFoundError(conversation_id)
        return row

    def get_history(
        self, owner_id: str, conversation_id: UUID, *, offset: int = 0, limit: int = 50
    ) -> HistoryPage:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError("offset", "must be a non-negative integer")
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not (1 <= limit <= MAX_HISTORY_PAGE)
        ):
            raise InvalidInputError(
                "limit", f"must be an integer from 1 to {MAX_HISTORY_PAGE}"
            )
        head = self.get_conversation(owner_id, conversation_id)
        rows = self.read_side.turns_page(
            head.conversation_id, offset=offset, limit=limit, as_of=head.version
        )
        end = offset + len(rows)
        return HistoryPage(
            conversation_id=head.conversation_id,
            version=head.version,
            total_turns=head.turn_count,
            items=self.history_items(head.conversation_id, rows, owner_id=owner_id),
            next_offset=end if end < head.turn_count else None,
        )

    def history_items(
        self, conversation_id: UUID, rows: Sequence[TurnRow], *, owner_id: str
    ) -> tuple[HistoryItem, ...]:
        """These turns as the owner sees them: text for live turns, else None.

        A turn whose key is gone is shown as deleted, with the deletion's time
        read again from the read side (it was deleted while we read). A turn
        whose stored key is damaged is shown without text, `unreadable`
        "key-damaged"; the other turns are read as usual.
        """
        damaged: set[str] = set()
        texts = self.open_texts(
            conversation_id,
            [r for r in rows if not r.deleted],
            owner_id=owner_id,
            damaged=damaged,
        )
        missing = [
            r.turn_id
            for r in rows
            if not r.deleted and texts[r.turn_id] is None and r.turn_id not in damaged
        ]
        fresh = self.read_side.turns_by_id(conversation_id, missing) if missing else {}
        items = []
        for row in rows:
            row = fresh.get(row.turn_id, row)
            text = None if row.deleted else texts.get(row.turn_id)
            items.append(
                HistoryItem(
                    position=row.position,
                    turn_id=row.turn_id,
                    status=row.status,
                    recorded_at=row.recorded_at,
                    deleted_at=row.deleted_at,
                    question=None if text is None else text.question,
                    answer=None if text is None else text.answer,
                    parts=text,
                    unreadable=KEY_DAMAGED
                    if row.turn_id in damaged and not row.deleted
                    else None,
                )
            )
        return tuple(items)

    # Texts --------------------------------------------------------------------

    def open_texts(
        self,
        conversation_id: UUID,
        rows: Sequence[TurnRow],
        *,
        owner_id: str,
        damaged: set[str] | None = None,
    ) -> dict[str, TurnParts | None]:
        """Decrypt these turns from their events for `owner_id`; None where
        the key is gone (and, with `damaged`, where it is damaged: see
        `open_turns`). Raises SealMismatchError where a text was not sealed
        for `owner_id` (see `owned_events`)."""
        if not rows:
            return {}
        opened = open_turns(
            self.vault,
            conversation_id,
            self._turn_events(conversation_id, rows, owner_id),
            owner_id=owner_id,
            damaged=damaged,
        )
        texts: dict[str, TurnParts | None] = dict.fromkeys(row.turn_id for row in rows)
        texts.update(opened)
        return texts

    def _turn_events(
        self, conversation_id: UUID, rows: Sequence[TurnRow], owner_id: str
    ) -> list[Any]:
        """The events that recorded these turns (confirmed or abandoned)."""
        wanted = {row.turn_id for row in rows}
        versions = [row.version for row in rows]
        return self.owned_events(
            conversation_id,
            owner_id,
            [
                recorded
                for recorded in self.events.get(
                    conversation_id, gt=min(versions) - 1, lte=max(versions)
                )
                if getattr(recorded, "turn_id", None) in wanted
                and isinstance(
                    recorded, Conversation.TurnConfirmed | Conversation.TurnAbandoned
                )
            ],
        )

    def owned_events(
        self, conversation_id: UUID, owner_id: str, events: list[Any]
    ) -> list[Any]:
        """`events`, once their texts are known to be `owner_id`'s.

        The read side decides nothing here: a text sealed bound to its owner
        opens only for that owner (the vault checks it), and a text sealed
        before owners were bound is opened only when the conversation's
        `Started` event, which the hash chain covers, names `owner_id`.
        """
        for recorded in events:
            for field_name, sealed in sealed_fields(recorded):
                if sealed[:1] == SEAL_BOUND_TO_OWNER:
                    continue
                if self._started_owner(conversation_id) != owner_id:
                    raise SealMismatchError(
                        conversation_id,
                        recorded.turn_id
                        if hasattr(recorded, "turn_id")
                        else fold_key_id(recorded.fold_id),
                        field_name,
                        "it was sealed before owners were bound, and the "
                        "conversation's Started event names another owner",
                    )
                return events  # one check covers every text of the conversation
        return events

    def _started_owner(self, conversation_id: UUID) -> str | None:
        for recorded in self.events.get(conversation_id, lte=1):
            if isinstance(recorded, Conversation.Started):
                return str(recorded.owner_id)
        return None

    def read_texts(
        self, conversation_id: UUID, rows: Sequence[TurnRow], *, owner_id: str
    ) -> dict[str, TurnParts]:
        """Like `open_texts`, but a turn without its key is an error."""
        texts: dict[str, TurnParts] = {}
        opened = self.open_texts(conversation_id, rows, owner_id=owner_id)
        for turn_id, text in opened.items():
            if text is None:
                raise TextUnavailableError(conversation_id, turn_id)
            texts[turn_id] = text
        return texts

    def open_for_window(
        self, conversation_id: UUID, rows: Sequence[TurnRow], *, owner_id: str
    ) -> dict[str, WindowTurn | OpenedTurn]:
        """These turns as a window sends them untrimmed; a turn without its
        key is an error (TextUnavailableError), as in `read_texts`.

        A turn with parts is kept as the documents its parts text parses to
        (OpenedTurn): the body is written from them, so its step objects are
        never made."""
        opened = open_turn_texts(
            self.vault,
            conversation_id,
            self._turn_events(conversation_id, rows, owner_id),
            owner_id=owner_id,
        )
        turns: dict[str, WindowTurn | OpenedTurn] = {}
        with_parts: list[tuple[str, str, str, str]] = []
        for row in rows:
            texts = opened.get(row.turn_id)
            if texts is None:
                raise TextUnavailableError(conversation_id, row.turn_id)
            question, answer, parts_text = texts
            if parts_text is None:
                turns[row.turn_id] = WindowTurn(row.turn_id, question, answer)
            else:
                with_parts.append((row.turn_id, question, answer, parts_text))
        documents = decode_many_part_documents([turn[3] for turn in with_parts])
        for (turn_id, question, answer, _), parts in zip(
            with_parts, documents, strict=True
        ):
            turns[turn_id] = OpenedTurn(turn_id, question, answer, *parts)
        return turns

    def read_fold(self, conversation_id: UUID, fold: FoldRow, *, owner_id: str) -> str:
        (recorded,) = self.owned_events(
            conversation_id,
            owner_id,
            list(
                self.events.get(conversation_id, gt=fold.version - 1, lte=fold.version)
            ),
        )
        key_id = fold_key_id(fold.fold_id)
        (summary,) = self.vault.open_many(
            conversation_id, [(key_id, "summary", recorded.sealed_summary)], owner_id
        )
        if summary is None:
            raise TextUnavailableError(conversation_id, key_id)
        return str(summary)

    # Windows ------------------------------------------------------------------

    def project_window(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        question: str,
        system: str,
        model: str,
        max_bytes: int | None = None,
        policy: WindowPolicy | None = None,
        token_counter: TokenCounter | None = None,
    ) -> ProjectedWindow:
        check_text("question", question)
        check_text("system", system, allow_empty=True)
        check_text("model", model)
        if max_bytes is not None and (
            isinstance(max_bytes, bool)
            or not isinstance(max_bytes, int)
            or max_bytes < 1
        ):
            raise InvalidInputError("max_bytes", "must be a positive integer")
        if max_bytes is None and policy is None:
            raise InvalidInputError("max_bytes", "give max_bytes or a policy")
        if policy is not None and not isinstance(policy, WindowPolicy):
            raise InvalidInputError("policy", "expected a WindowPolicy")
        counter = token_counter or CHAR_ESTIMATE
        if not isinstance(counter, TokenCounter):
            raise InvalidInputError("token_counter", "expected a TokenCounter")
        resolved = resolve_policy(policy, max_bytes)
        damaged: set[str] = set()
        attempt = 0
        while True:
            head = self.get_conversation(owner_id, conversation_id)
            try:
                window = self.window_at(
                    head,
                    question=question,
                    system=system,
                    model=model,
                    policy=resolved,
                    counter=counter,
                    damaged=frozenset(damaged),
                )
            except TurnKeyDamagedError as error:
                if damaged.issuperset(error.turn_ids):
                    raise
                # Left out as "key-damaged", and the window planned again
                # without them: each round names new turns, so it ends.
                damaged.update(error.turn_ids)
                continue
            except TextUnavailableError:
                attempt += 1
                if attempt == _READ_ATTEMPTS:
                    raise
                continue  # a deletion landed after `head`: read the new head
            _log_if_bounded(head.conversation_id, window)
            return ProjectedWindow(
                head.conversation_id,
                head.version,
                window,
                question=question,
                system=system,
                policy=receipt_policy(
                    model=model, policy=resolved, counter=counter.name
                ),
            )

    def window_at(
        self,
        head: ConversationRow,
        *,
        question: str,
        system: str,
        model: str,
        policy: WindowPolicy,
        counter: TokenCounter,
        texts: dict[str, TurnParts] | None = None,
        damaged: frozenset[str] = frozenset(),
    ) -> Window:
        """The window of the conversation as it stood at `head`'s version.

        `texts` (turn id -> the turn's parts) saves reading texts already at
        hand (the audit re-deriving a receipt). Raises TextUnavailableError if
        a turn it needs was deleted since that version, TurnKeyDamagedError if
        a turn it needs has a damaged key; the turns named in `damaged` are
        left out, reported as dropped for "key-damaged".
        """
        conversation_id, version = head.conversation_id, head.version
        fold = current_fold(self.read_side.folds(conversation_id), version)
        prepared = (
            None
            if fold is None
            else prepare_fold(
                fold.fold_id,
                self.read_fold(conversation_id, fold, owner_id=head.owner_id),
                counter,
                policy,
            )
        )
        frame = frame_request(
            model=model,
            system=system,
            question=question,
            fold=prepared,
            policy=policy,
            counter=counter,
        )
        known = texts or {}

        def read(rows: Sequence[TurnRow]) -> dict[str, TurnParts]:
            if all(row.turn_id in known for row in rows):
                return {row.turn_id: known[row.turn_id] for row in rows}
            return self.read_texts(conversation_id, rows, owner_id=head.owner_id)

        from_metadata = isinstance(counter, CharEstimate)
        limit = policy.max_message_tokens
        boundary = -1 if fold is None else fold.covers_through_position
        sent: dict[str, WindowTurn | OpenedTurn] = {}
        walked: list[TurnRow] = []
        skipped: list[TurnRow] = []  # damaged keys met by the walk

        def candidates() -> Iterator[PairCandidate]:
            rows = self.walk(
                conversation_id, above=boundary, below=head.turn_count, as_of=version
            )
            for row in rows:
                if row.turn_id in damaged:
                    skipped.append(row)
                    continue
                walked.append(row)
                sizes = row.sizes
                if from_metadata and sizes is not None and not needs_trim(sizes, limit):
                    yield candidate_from_sizes(
                        row.turn_id, sizes, policy.wire_format, row.position
                    )
                    continue
                candidate, as_sent = measure_pair(
                    WindowTurn.of(row.turn_id, read([row])[row.turn_id]),
                    counter,
                    limit,
                    policy.wire_format,
                )
                sent[row.turn_id] = as_sent
                yield replace(candidate, position=row.position)

        plan = plan_in_frame(frame, candidates(), policy)
        kept = len(plan.kept_newest_first)
        kept_rows = walked[:kept][::-1]
        unread = [row for row in kept_rows if row.turn_id not in sent]
        if unread and all(row.turn_id in known for row in unread):
            sent.update(
                (row.turn_id, WindowTurn.of(row.turn_id, known[row.turn_id]))
                for row in unread
            )
        elif unread:
            sent.update(
                self.open_for_window(conversation_id, unread, owner_id=head.owner_id)
            )
        settled = settle_wire_ids(
            plan, [sent[row.turn_id] for row in kept_rows], policy, model
        )
        plan = settled.plan
        return build_window(
            frame=frame,
            plan=plan,
            sent_turns=settled.turns,
            wire_ids=settled.wire_ids,
            dropped_reasoning=settled.dropped_reasoning,
            dropped=self._dropped(head, fold, frame, plan, skipped),
            policy=policy,
            counter=counter,
            fold_due=self._unfolded_tokens(head, boundary, policy.fold_threshold_tokens)
            > policy.fold_threshold_tokens,
        )

    def walk(
        self, conversation_id: UUID, *, above: int, below: int, as_of: int
    ) -> Iterator[TurnRow]:
        """Turns eligible at `as_of` with `above < position < below`, newest
        first, read in bounded ranges of positions that grow from 32 to 1,024:
        each read is an index range scan whatever the table's statistics, and
        the cost follows how far the caller walks, not the history's length."""
        chunk = _FIRST_CHUNK
        while below - 1 > above:
            low = max(above, below - 1 - chunk)
            yield from self.read_side.eligible_newest_first(
                conversation_id, below=below, above=low, as_of=as_of, limit=chunk
            )
            below = low + 1
            chunk = min(chunk * 2, _LARGEST_CHUNK)

    def _dropped(
        self,
        head: ConversationRow,
        fold: FoldRow | None,
        frame: Frame,
        plan: WindowPlan,
        damaged: Sequence[TurnRow] = (),
    ) -> DroppedTurns:
        """Spans of dropped turns; their ids are listed only when asked for, from
        facts pinned to the window's version, so they never change. Turns whose
        key is damaged (`damaged`, met by the walk) are each a span of their
        own, "key-damaged", and left out of the other spans' counts and ids."""
        read_side, conversation_id, version = (
            self.read_side,
            head.conversation_id,
            head.version,
        )

        left_out = frozenset(row.turn_id for row in damaged)

        def list_ids(first: int, last: int) -> tuple[str, ...]:
            ids = read_side.eligible_ids(
                conversation_id, first=first, last=last, as_of=version
            )
            return tuple(i for i in ids if i not in left_out) if left_out else ids

        covered = 0 if fold is None else fold.covered_eligible
        after = 0 if fold is None else fold.covers_through_position + 1
        report = report_dropped(
            frame=frame,
            plan=plan,
            after_fold=EligibleTurns(
                head.eligible_count - covered - len(damaged),
                first_position=after,
                last_position=max(head.turn_count - 1, after - 1),
            ),
            fold_covers=None
            if fold is None
            else EligibleTurns(covered, fold.covers_through_turn_id, 0, after - 1),
            list_ids=list_ids,
        )
        if not damaged:
            return report
        return DroppedTurns(
            [
                *report.spans,
                *(
                    DroppedSpan(
                        KEY_DAMAGED,
                        1,
                        row.turn_id,
                        row.position,
                        row.position,
                        (row.turn_id,),
                    )
                    for row in sorted(damaged, key=lambda r: r.position)
                ),
            ],
            list_ids=list_ids,
        )

    # Folds --------------------------------------------------------------------

    def _unfolded_tokens(
        self, head: ConversationRow, boundary: int, threshold: int
    ) -> int:
        tokens = 0
        for row in self.walk(
            head.conversation_id,
            above=boundary,
            below=head.turn_count,
            as_of=head.version,
        ):
            if row.sizes is not None:
                tokens += char_estimate(row.sizes.question_chars)
                tokens += char_estimate(row.sizes.answer_chars)
                if row.sizes.parts is not None:
                    tokens += char_estimate(row.sizes.parts.chars)
            if tokens > threshold:
                break
        return tokens

    def get_fold_status(
        self, owner_id: str, conversation_id: UUID, *, threshold_tokens: int
    ) -> FoldStatus:
        if (
            isinstance(threshold_tokens, bool)
            or not isinstance(threshold_tokens, int)
            or threshold_tokens < 1
        ):
            raise InvalidInputError("threshold_tokens", "must be a positive integer")
        head = self.get_conversation(owner_id, conversation_id)
        fold = current_fold(self.read_side.folds(head.conversation_id), head.version)
        boundary = -1 if fold is None else fold.covers_through_position
        tokens = self._unfolded_tokens(head, boundary, threshold_tokens)
        return FoldStatus(
            fold_id=None if fold is None else fold.fold_id,
            covers_through_turn_id=None
            if fold is None
            else fold.covers_through_turn_id,
            unfolded_tokens=tokens,
            threshold_tokens=threshold_tokens,
            due=tokens > threshold_tokens,
        )

    def get_fold_summary(self, owner_id: str, conversation_id: UUID) -> str | None:
        head = self.get_conversation(owner_id, conversation_id)
        fold = current_fold(self.read_side.folds(head.conversation_id), head.version)
        return (
            None
            if fold is None
            else self.read_fold(head.conversation_id, fold, owner_id=owner_id)
        )


def _log_if_bounded(conversation_id: UUID, window: Window) -> None:
    """One structured record when anything was left out; never message text."""
    if not window.dropped:
        return
    logger.info(
        "window bounded: %d turns dropped, %d kept, ~%d tokens",
        len(window.dropped),
        len(window.kept_turn_ids),
        window.estimated_tokens,
        extra={
            "event": "window_bounded",
            "conversation_id": str(conversation_id),
            "dropped": len(window.dropped),
            "dropped_by_reason": window.dropped.counts(),
            "kept": len(window.kept_turn_ids),
            "estimated_tokens": window.estimated_tokens,
            "body_bytes": window.byte_length,
            "wire_format": window.wire_format,
            "trimmed": len(window.trimmed),
        },
    )


__all__ = ["ConversationQueries", "FoldStatus", "TurnStatus"]
