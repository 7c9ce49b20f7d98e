"""Token counting for the window's soft budget, and head + tail trimming.

A `TokenCounter` estimates how many tokens a text costs and can cut a text at
token boundaries. The default is `CharEstimate`, the char/4 heuristic: one
token per four code points, rounded up. It is a budget signal, not billing,
and it needs no text at all: the aggregate records each text's code-point
count, so the window can budget turns it has not decrypted. Its error against
a real tokenizer is measured in docs/window.md (it undercounts CJK text
badly). A real tokenizer (tiktoken, loaded offline) is adapted in
`infra/tokenizers.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

# The shape of a trim (seed: head 400 + tail 400), capped at half the
# per-message limit so that lowering the limit still bounds the result.
TRIM_HEAD_TOKENS = 400
TRIM_TAIL_TOKENS = 400

# The token counters the service offers by name (infra/tokenizers.py).
TokenizerName = Literal["char4", "o200k_base", "cl100k_base"]


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens and cuts text at token boundaries."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int:
        """Estimated tokens of `text`."""
        ...

    def head(self, text: str, tokens: int) -> str:
        """The longest prefix of `text` that is at most `tokens` tokens."""
        ...

    def tail(self, text: str, tokens: int) -> str:
        """The longest suffix of `text` that is at most `tokens` tokens."""
        ...


def char_estimate(chars: int) -> int:
    """char/4, rounded up: the estimate from a code-point count alone."""
    return (chars + 3) // 4


class CharEstimate:
    """The char/4 heuristic: ceil(code points / 4)."""

    name = "char/4"

    def count(self, text: str) -> int:
        return char_estimate(len(text))

    def head(self, text: str, tokens: int) -> str:
        return text[: 4 * tokens]

    def tail(self, text: str, tokens: int) -> str:
        return text[len(text) - 4 * tokens :] if tokens > 0 else ""


CHAR_ESTIMATE = CharEstimate()


def omission_marker(omitted_tokens: int) -> str:
    """The visible marker put where text was cut out of a history message."""
    return f"\n… {omitted_tokens} tokens omitted …\n"


@dataclass(frozen=True, slots=True)
class Trimmed:
    """A message as it is sent, and how many tokens were cut from it."""

    text: str
    tokens: int
    omitted_tokens: int

    @property
    def trimmed(self) -> bool:
        return self.omitted_tokens > 0


def trim_text(text: str, counter: TokenCounter, max_tokens: int | None) -> Trimmed:
    """`text` itself when within `max_tokens`, else head + marker + tail.

    The marker's count is the counter's estimate of the text actually cut
    out, so the reader knows how much is missing and where.
    """
    tokens = counter.count(text)
    if max_tokens is None or tokens <= max_tokens:
        return Trimmed(text=text, tokens=tokens, omitted_tokens=0)
    head = counter.head(text, min(TRIM_HEAD_TOKENS, max_tokens // 2))
    tail = counter.tail(text, min(TRIM_TAIL_TOKENS, max_tokens // 2))
    if len(head) + len(tail) > len(text):  # cannot happen with sane counters
        tail = tail[len(head) + len(tail) - len(text) :]
    middle = text[len(head) : len(text) - len(tail)]
    omitted = counter.count(middle)
    trimmed = head + omission_marker(omitted) + tail
    return Trimmed(text=trimmed, tokens=counter.count(trimmed), omitted_tokens=omitted)


def needs_trim_by_chars(chars: int, max_tokens: int | None) -> bool:
    """Whether the char/4 estimate of a `chars`-long text is over `max_tokens`."""
    return max_tokens is not None and char_estimate(chars) > max_tokens
