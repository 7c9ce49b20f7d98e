"""Hypothesis strategies shared by the window tests."""

from __future__ import annotations

from hypothesis import strategies as st

# Characters that break naive size accounting: multi-byte UTF-8, astral
# emoji, JSON escapes, control characters, the JS line separators and HTML
# specials (which some serializers escape and ours must not). Not NUL: the
# ledger refuses it, as PostgreSQL cannot store it.
HOSTILE = list(
    "aZ 0\u00e9\u4f60\u597d\u4e16\u754c\u65e5\u672c\u8a9e\ud55c"
    "\U0001f642\U0001f44d\U0001f3fd\"\\\n\r\t\x01\x1f\x7f\u2028\u2029<>&='/"
)

hostile_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(HOSTILE),
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    ),
    max_size=80,
)
# Text the ledger accepts as a question or answer: not only whitespace.
sendable_text = hostile_text.filter(lambda text: bool(text.strip()))
