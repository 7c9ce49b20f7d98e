"""What each part of a window's request spends: bytes of the body and tokens.

A body is made of the format's envelope (model, keys, brackets, the output
reserve), the system instructions, the fold, the history and the current
question. Each part's bytes are what adding it grows the body by, taken in
that order, so the parts sum to the body's length exactly, whatever a format
does with an empty system or where it puts the fold. Tokens are the window's
own estimates (the envelope has none), so they sum to `estimated_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnledger.projections.formats import RequestParts, render_body

PART_NAMES = ("envelope", "system", "fold", "history", "question")


@dataclass(frozen=True, slots=True)
class PartSize:
    """Bytes and estimated tokens one part of the request spends."""

    part: str
    bytes: int
    tokens: int

    def summary(self) -> dict[str, object]:
        return {"part": self.part, "bytes": self.bytes, "tokens": self.tokens}


@dataclass(frozen=True, slots=True)
class FrameBytes:
    """The bytes of the frame without the fold: envelope, system, question."""

    envelope: int
    system: int
    question: int


def frame_bytes(wire_format: str, parts: RequestParts, mandatory: int) -> FrameBytes:
    """Split `mandatory` (the body of `parts` with no fold and no history)."""

    def size(system: str) -> int:
        return len(
            render_body(
                wire_format,
                RequestParts(
                    model=parts.model,
                    system=system,
                    question="",
                    max_output_tokens=parts.max_output_tokens,
                ),
            )
        )

    envelope = size("")
    with_system = size(parts.system) if parts.system else envelope
    return FrameBytes(envelope, with_system - envelope, mandatory - with_system)


def part_sizes(
    *,
    frame: FrameBytes,
    base_bytes: int,
    body_bytes: int,
    system_tokens: int,
    fold_tokens: int,
    history_tokens: int,
    question_tokens: int,
) -> tuple[PartSize, ...]:
    """Every part's bytes and tokens; `base_bytes` is the frame with the fold
    (when sent), `body_bytes` the whole body."""
    mandatory = frame.envelope + frame.system + frame.question
    return (
        PartSize("envelope", frame.envelope, 0),
        PartSize("system", frame.system, system_tokens),
        PartSize("fold", base_bytes - mandatory, fold_tokens),
        PartSize("history", body_bytes - base_bytes, history_tokens),
        PartSize("question", frame.question, question_tokens),
    )
