"""Tokens of attachments, by each provider's documented method where there is one.

Images, with their pixel size known (Attachment.width/height):

- OpenAI (both formats): the high-detail rule: fit in 2048 x 2048, scale the
  shortest side down to 768, then 85 + 170 per 512 x 512 tile.
- Anthropic: fit the long edge in 1568, then width x height / 750, at most
  1,600 (an image over about 1,600 tokens is scaled down first).
- Gemini: 258 when both sides are at most 384, else 258 per 768 x 768 tile.

Without a pixel size, or for other files, these are estimates (docs/tools.md
says so beside the table): an image of unknown size is taken as
1024 x 1024 (OpenAI 765, Anthropic 1399, Gemini 1032); any other file as one
token per 4 bytes of it; a file a format sends as a text note as that note's
text. Tool calls and results are counted as their texts (name + arguments,
content) by the window's counter: no provider documents the tokens of the
call structure itself.
"""

from __future__ import annotations

import math

from turnledger.domain.parts import Attachment

UNKNOWN_IMAGE_SIDE = 1024


def _openai_image(width: int, height: int) -> int:
    scale = min(1.0, 2048 / max(width, height))
    fitted_width, fitted_height = width * scale, height * scale
    scale = min(1.0, 768 / min(fitted_width, fitted_height))
    fitted_width, fitted_height = fitted_width * scale, fitted_height * scale
    tiles = math.ceil(fitted_width / 512) * math.ceil(fitted_height / 512)
    return 85 + 170 * tiles


def _anthropic_image(width: int, height: int) -> int:
    scale = min(1.0, 1568 / max(width, height))
    # Larger images are scaled down to about 1,600 tokens before they count.
    return min(math.ceil((width * scale) * (height * scale) / 750), 1600)


def _gemini_image(width: int, height: int) -> int:
    if width <= 384 and height <= 384:
        return 258
    return 258 * math.ceil(width / 768) * math.ceil(height / 768)


_IMAGE_RULES = {
    "openai-chat": _openai_image,
    "openai-responses": _openai_image,
    "anthropic-messages": _anthropic_image,
    "gemini-contents": _gemini_image,
}


def image_tokens(wire_format: str, attachment: Attachment) -> int:
    """Tokens of an image in `wire_format` (its size assumed when unknown)."""
    width = attachment.width or UNKNOWN_IMAGE_SIDE
    height = attachment.height or UNKNOWN_IMAGE_SIDE
    return _IMAGE_RULES[wire_format](width, height)


def file_tokens(attachment: Attachment) -> int:
    """The estimate for a file that is not an image: one token per 4 bytes."""
    return math.ceil(attachment.byte_size / 4)
