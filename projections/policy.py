"""The window policy: every limit a request window obeys, validated once.

Defaults follow the seeds: a 4,000-token history budget, 25 messages, a floor
of the 10 newest messages, history messages over 1,000 tokens trimmed to head
+ marker + tail, and a fold threshold of 2,000 tokens (half the budget).
`None` switches a limit off.
"""

from __future__ import annotations

from typing import Self

from pydantic import (
    BaseModel,
    ConfigDict,
    NonNegativeInt,
    PositiveInt,
    model_validator,
)

from turnledger.projections.formats import WireFormatName

DEFAULT_MAX_BYTES = 1_048_576


def check_fold_gap(max_tokens: int | None, fold_threshold_tokens: int) -> None:
    """Refuse a history budget under twice the fold threshold (seed 002).

    The fold holds what is older, the window what the fold has not absorbed
    yet. A budget under the threshold leaves a stretch held by neither; the
    factor 2 covers the lag while the application writes the next fold.
    """
    if max_tokens is not None and max_tokens < 2 * fold_threshold_tokens:
        raise ValueError(
            f"the window's token budget ({max_tokens}) must be >= 2x the fold "
            f"threshold ({fold_threshold_tokens}): the fold is written after the "
            "threshold is passed, and below 2x the turns written meanwhile fall "
            "into a gap held neither by the fold nor by the window"
        )


class WindowPolicy(BaseModel):
    """What a request window may contain.

    Strict: a limit is an integer, never a boolean, a numeric string or a
    float (`True` would otherwise mean 1 pair, `"4096"` would pass unseen).
    Settings parse the environment's strings into integers first and build
    the policy from those.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    wire_format: WireFormatName = "openai-chat"
    # Hard limit: the exact UTF-8 length of the body. Never exceeded.
    max_bytes: PositiveInt = DEFAULT_MAX_BYTES
    # Soft budget for the history messages, in estimated tokens.
    max_tokens: PositiveInt | None = 4_000
    # Tokens left for the model's reply; Anthropic bodies carry it as max_tokens.
    reserved_output_tokens: NonNegativeInt = 1_000
    # The model's context window; when set, the history budget also shrinks so
    # that system + fold + history + question + reserve fit in it.
    context_tokens: PositiveInt | None = None
    # Count limits over history messages (the current question not included).
    max_messages: PositiveInt | None = 25
    max_pairs: PositiveInt | None = None
    # The newest history messages kept even over the token budget (not bytes).
    floor_messages: NonNegativeInt = 10
    # History messages over this many tokens are sent as head + marker + tail.
    max_message_tokens: PositiveInt | None = 1_000
    # The fold's own budget: a longer summary is trimmed the same way.
    fold_max_tokens: PositiveInt | None = 2_000
    # When the turns after the fold exceed this, the application should fold.
    fold_threshold_tokens: PositiveInt = 2_000

    @model_validator(mode="after")
    def _check_cross_field_rules(self) -> Self:
        check_fold_gap(self.max_tokens, self.fold_threshold_tokens)
        if self.max_messages is not None and self.floor_messages > self.max_messages:
            raise ValueError(
                f"floor_messages ({self.floor_messages}) must be <= max_messages "
                f"({self.max_messages})"
            )
        if (
            self.context_tokens is not None
            and self.reserved_output_tokens >= self.context_tokens
        ):
            raise ValueError("reserved_output_tokens must be < context_tokens")
        if self.wire_format == "anthropic-messages" and self.reserved_output_tokens < 1:
            raise ValueError("anthropic-messages needs reserved_output_tokens >= 1")
        return self

    @classmethod
    def bytes_only(
        cls, max_bytes: int, wire_format: WireFormatName = "openai-chat"
    ) -> Self:
        """Only the byte limit: the longest suffix of whole turns that fits."""
        return cls(
            wire_format=wire_format,
            max_bytes=max_bytes,
            max_tokens=None,
            max_messages=None,
            floor_messages=0,
            max_message_tokens=None,
            fold_max_tokens=None,
        )

    @property
    def max_pairs_total(self) -> int | None:
        """The pair limit that results from both count limits."""
        limits = [
            limit
            for limit in (
                self.max_pairs,
                None if self.max_messages is None else self.max_messages // 2,
            )
            if limit is not None
        ]
        return min(limits) if limits else None

    @property
    def floor_pairs(self) -> int:
        """Whole pairs the floor keeps: the open edge only moves outward."""
        return (self.floor_messages + 1) // 2
