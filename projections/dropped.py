"""What a window left out: plain values, fixed when the window is made.

A window reports the eligible turns it did not send as spans: a reason, a
count, the range of positions the span covers and its newest turn. Listing
the ids of a long span would cost time proportional to the history, which
the window itself never spends; so a span keeps its ids only when the caller
had them, and otherwise a `TurnIdLister` supplied by the caller lists them
from the range, reading fixed facts (the ledger as of the window's version).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

__all__ = [
    "DROP_REASONS",
    "KEY_DAMAGED",
    "DropReason",
    "DroppedSpan",
    "DroppedTurn",
    "DroppedTurns",
    "EligibleTurns",
    "FoldDropReason",
    "TurnIdLister",
    "TurnIdsUnavailableError",
]

# Why an eligible turn was not sent as itself:
#   bytes        the next pair would break max_bytes (hard)
#   count        the next pair would break max_messages / max_pairs (hard)
#   context      the next pair would not fit the model's context (hard)
#   tokens       past the floor, the next pair would break max_tokens (soft)
#   fold         a fold that was sent stands in for the turn
#   fold_dropped a fold covers the turn but did not fit (bytes or context),
#                so neither the fold nor the turn was sent
#   key-damaged  the turn's stored key was altered, so its text cannot be
#                read (TurnKeyDamagedError); the window is planned without it
DropReason = Literal[
    "bytes", "count", "context", "tokens", "fold", "fold_dropped", "key-damaged"
]
DROP_REASONS: tuple[str, ...] = get_args(DropReason)
KEY_DAMAGED: DropReason = "key-damaged"
# Why a fold that exists was not sent.
FoldDropReason = Literal["bytes", "context"]


@dataclass(frozen=True, slots=True)
class DroppedTurn:
    turn_id: str
    reason: DropReason


TurnIdLister = Callable[[int, int], Sequence[str]]
"""`list_ids(first_position, last_position)`: the ids of the eligible turns at
those positions (inclusive), oldest first. It must answer from fixed facts
(the ledger as of the version the window was read at), so that asking later
gives the same ids the window left out."""


class TurnIdsUnavailableError(LookupError):
    """A dropped span has no explicit ids and nothing was given to list them."""


@dataclass(frozen=True, slots=True)
class DroppedSpan:
    """`count` contiguous eligible turns left out for one reason: a plain value.

    The span is every eligible turn whose position (in the conversation's turn
    order, every status counted, from 0) lies in `first_position` ..
    `last_position`, inclusive; the bounds themselves need not be eligible
    turns. `newest_turn_id` names the newest turn the span reaches. The ids
    are kept only when the caller had them (`turn_ids`, oldest first);
    otherwise a `TurnIdLister` lists them from the range, so that a window
    never spends time proportional to the history it leaves out.
    """

    reason: DropReason
    count: int
    newest_turn_id: str | None
    first_position: int | None = None
    last_position: int | None = None
    turn_ids: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.reason not in DROP_REASONS:
            raise ValueError(f"unknown drop reason {self.reason!r}")
        if self.count < 0:
            raise ValueError("a dropped span cannot hold a negative count")
        if (self.first_position is None) != (self.last_position is None):
            raise ValueError("give both ends of a span's position range, or neither")
        if (
            self.first_position is not None
            and self.last_position is not None
            and not 0 <= self.first_position <= self.last_position + 1
        ):
            raise ValueError("a span's position range is out of order")
        if self.turn_ids is not None:
            ids = tuple(self.turn_ids)
            if len(ids) != self.count:
                raise ValueError(
                    f"a span of {self.count} turns cannot list {len(ids)} ids"
                )
            object.__setattr__(self, "turn_ids", ids)

    @property
    def listable(self) -> bool:
        """Whether its ids are here, or can be listed from its range."""
        return self.turn_ids is not None or self.first_position is not None

    def ids(self, list_ids: TurnIdLister | None = None) -> tuple[str, ...]:
        """Its turn ids, oldest first: explicit, or listed by `list_ids`."""
        if self.turn_ids is not None:
            return self.turn_ids
        if self.count == 0:
            return ()
        if list_ids is None or self.first_position is None:
            raise TurnIdsUnavailableError(
                f"the {self.count} turns dropped for {self.reason!r} have no "
                "explicit ids; pass a TurnIdLister bound to the window's version"
            )
        assert self.last_position is not None
        ids = tuple(list_ids(self.first_position, self.last_position))
        # A lister reading another version than the window would give other
        # turns; a count mismatch is the cheap sign of it.
        if len(ids) != self.count:
            raise AssertionError(
                f"positions {self.first_position}..{self.last_position} list "
                f"{len(ids)} eligible turns, the window dropped {self.count}"
            )
        return ids

    def with_ids(self, list_ids: TurnIdLister | None = None) -> DroppedSpan:
        """The same span with its ids explicit."""
        if self.turn_ids is not None:
            return self
        return DroppedSpan(
            self.reason,
            self.count,
            self.newest_turn_id,
            self.first_position,
            self.last_position,
            self.ids(list_ids),
        )

    def summary(self) -> dict[str, object]:
        """The span as plain data, without ids: constant size."""
        return {
            "reason": self.reason,
            "count": self.count,
            "newest_turn_id": self.newest_turn_id,
            "first_position": self.first_position,
            "last_position": self.last_position,
        }


class DroppedTurns:
    """The eligible turns a window left out, oldest first, with reasons.

    The spans are plain values; `list_ids`, when given, lists the ids of
    spans that carry only a position range (see `TurnIdLister`). Iterating,
    `turn_ids()` and `resolved()` need ids for every span: explicit, or from
    the lister given here or to the call. Counts never need them.
    Equality compares the spans, not the lister.
    """

    __slots__ = ("_list_ids", "_spans")

    def __init__(
        self,
        spans: Iterable[DroppedSpan] = (),
        *,
        list_ids: TurnIdLister | None = None,
    ) -> None:
        self._spans = tuple(span for span in spans if span.count > 0)
        self._list_ids = list_ids

    @property
    def spans(self) -> tuple[DroppedSpan, ...]:
        return self._spans

    def __len__(self) -> int:
        return sum(span.count for span in self._spans)

    def __bool__(self) -> bool:
        return bool(self._spans)

    @property
    def listable(self) -> bool:
        """Whether every dropped id can be listed without another argument."""
        return all(
            span.turn_ids is not None
            or (self._list_ids is not None and span.first_position is not None)
            for span in self._spans
        )

    def turns(self, list_ids: TurnIdLister | None = None) -> Iterator[DroppedTurn]:
        """Every dropped turn, oldest first, with its reason."""
        lister = list_ids or self._list_ids
        for span in self._spans:
            for turn_id in span.ids(lister):
                yield DroppedTurn(turn_id, span.reason)

    def __iter__(self) -> Iterator[DroppedTurn]:
        return self.turns()

    def turn_ids(self, list_ids: TurnIdLister | None = None) -> tuple[str, ...]:
        return tuple(turn.turn_id for turn in self.turns(list_ids))

    def resolved(self, list_ids: TurnIdLister | None = None) -> DroppedTurns:
        """The same report with every span's ids explicit and no lister."""
        lister = list_ids or self._list_ids
        return DroppedTurns(span.with_ids(lister) for span in self._spans)

    def counts(self) -> dict[str, int]:
        """Dropped turns per reason."""
        totals: dict[str, int] = {}
        for span in self._spans:
            totals[span.reason] = totals.get(span.reason, 0) + span.count
        return totals

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DroppedTurns):
            return NotImplemented
        return self._spans == other._spans

    def __hash__(self) -> int:
        return hash(self._spans)

    def __repr__(self) -> str:
        return f"DroppedTurns({self.counts()})"


@dataclass(frozen=True, slots=True)
class EligibleTurns:
    """A run of eligible turns as plain facts: how many, where, the newest.

    Positions are in the conversation's turn order (every status counted,
    from 0), inclusive; `turn_ids` (oldest first) only when the caller has
    them. See DroppedSpan.
    """

    count: int
    newest_turn_id: str | None = None
    first_position: int | None = None
    last_position: int | None = None
    turn_ids: tuple[str, ...] | None = None

    @classmethod
    def of_ids(cls, turn_ids: Sequence[str]) -> EligibleTurns:
        ids = tuple(turn_ids)
        return cls(len(ids), ids[-1] if ids else None, turn_ids=ids)
