"""The request window as a query: read the conversation's row, pin its
version, walk the turn rows newest first on their recorded sizes, open only
the kept turns' texts, then render (projections/window.py does the pure
part). A deletion landing meanwhile makes the query start again at the new
head; a turn whose key is damaged is left out and reported."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import replace
from uuid import UUID

from turnledger.domain.errors import (
    InvalidInputError,
    TextUnavailableError,
    TurnKeyDamagedError,
)
from turnledger.domain.parts import TurnParts
from turnledger.domain.text import check_text
from turnledger.projections.dropped import (
    KEY_DAMAGED,
    DroppedSpan,
    DroppedTurns,
    EligibleTurns,
)
from turnledger.projections.ledger_rows import ConversationRow, FoldRow, TurnRow
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.read_side import current_fold
from turnledger.projections.receipt import receipt_policy
from turnledger.projections.results import ProjectedWindow
from turnledger.projections.tokens import (
    CHAR_ESTIMATE,
    CharEstimate,
    TokenCounter,
    char_estimate,
)
from turnledger.projections.turn_reads import TurnReads
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


class WindowQueries(TurnReads):
    """Windows and the walk over turn rows (ConversationQueries builds on it)."""

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
        _check_policy(policy, max_bytes)
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
        fold = current_fold(self.read_side.folds(head.conversation_id), head.version)
        prepared = (
            None
            if fold is None
            else prepare_fold(
                fold.fold_id,
                self.read_fold(head.conversation_id, fold, owner_id=head.owner_id),
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
        boundary = -1 if fold is None else fold.covers_through_position
        walk = _Walk(self, head, policy, counter, texts or {}, damaged)
        plan = plan_in_frame(frame, walk.candidates(boundary), policy)
        kept_rows = walk.walked[: len(plan.kept_newest_first)][::-1]
        settled = settle_wire_ids(plan, walk.sent_turns(kept_rows), policy, model)
        plan = settled.plan
        return build_window(
            frame=frame,
            plan=plan,
            sent_turns=settled.turns,
            wire_ids=settled.wire_ids,
            dropped_reasoning=settled.dropped_reasoning,
            dropped=self._dropped(head, fold, frame, plan, walk.skipped),
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


def _check_policy(policy: WindowPolicy | None, max_bytes: int | None) -> None:
    """InvalidInputError unless a window request gives a policy or a byte limit."""
    if max_bytes is not None and (
        isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1
    ):
        raise InvalidInputError("max_bytes", "must be a positive integer")
    if max_bytes is None and policy is None:
        raise InvalidInputError("max_bytes", "give max_bytes or a policy")
    if policy is not None and not isinstance(policy, WindowPolicy):
        raise InvalidInputError("policy", "expected a WindowPolicy")


class _Walk:
    """One window's walk over the turn rows, newest first: the candidates it
    hands the planner, the rows it met, and the turns it read on the way.

    A turn is planned from its recorded sizes (char/4, nothing to trim) or,
    failing that, read and measured; only the kept turns not read on the way
    are opened afterwards, all at once.
    """

    def __init__(
        self,
        queries: WindowQueries,
        head: ConversationRow,
        policy: WindowPolicy,
        counter: TokenCounter,
        known: dict[str, TurnParts],
        damaged: frozenset[str],
    ) -> None:
        self.queries, self.head = queries, head
        self.policy, self.counter = policy, counter
        self.known, self.damaged = known, damaged
        self.sent: dict[str, WindowTurn | OpenedTurn] = {}
        self.walked: list[TurnRow] = []
        self.skipped: list[TurnRow] = []  # damaged keys met by the walk

    def candidates(self, boundary: int) -> Iterator[PairCandidate]:
        head, policy = self.head, self.policy
        from_metadata = isinstance(self.counter, CharEstimate)
        limit = policy.max_message_tokens
        rows = self.queries.walk(
            head.conversation_id,
            above=boundary,
            below=head.turn_count,
            as_of=head.version,
        )
        for row in rows:
            if row.turn_id in self.damaged:
                self.skipped.append(row)
                continue
            self.walked.append(row)
            sizes = row.sizes
            if from_metadata and sizes is not None and not needs_trim(sizes, limit):
                yield candidate_from_sizes(
                    row.turn_id, sizes, policy.wire_format, row.position
                )
                continue
            candidate, as_sent = measure_pair(
                WindowTurn.of(row.turn_id, self._read([row])[row.turn_id]),
                self.counter,
                limit,
                policy.wire_format,
            )
            self.sent[row.turn_id] = as_sent
            yield replace(candidate, position=row.position)

    def sent_turns(self, kept_rows: Sequence[TurnRow]) -> list[WindowTurn | OpenedTurn]:
        """The kept turns as sent, oldest first, opening those not read yet."""
        known, sent = self.known, self.sent
        unread = [row for row in kept_rows if row.turn_id not in sent]
        if unread and all(row.turn_id in known for row in unread):
            sent.update(
                (row.turn_id, WindowTurn.of(row.turn_id, known[row.turn_id]))
                for row in unread
            )
        elif unread:
            sent.update(
                self.queries.open_for_window(
                    self.head.conversation_id, unread, owner_id=self.head.owner_id
                )
            )
        return [sent[row.turn_id] for row in kept_rows]

    def _read(self, rows: Sequence[TurnRow]) -> dict[str, TurnParts]:
        known = self.known
        if all(row.turn_id in known for row in rows):
            return {row.turn_id: known[row.turn_id] for row in rows}
        return self.queries.read_texts(
            self.head.conversation_id, rows, owner_id=self.head.owner_id
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
