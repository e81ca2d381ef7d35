"""The token estimate: the larger of chars/4 and the word and punctuation pieces, counted
without the regex for ASCII text; the count must be the regex's, byte for byte."""

from __future__ import annotations

import re
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from hivemem.domain.tokens import _pieces, estimate_tokens

PIECES = re.compile(r"\w+|[^\w\s]", re.UNICODE)
ASCII = "".join(chr(i) for i in range(128))


def test_every_pair_of_ascii_characters_counts_as_the_regex_does() -> None:
    for a in ASCII:
        for b in ASCII:
            text = f"{a}ab{b}{a} {b}"
            assert _pieces(text) == len(PIECES.findall(text)), repr(text)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(ASCII + "é日\u00a0\u2028"), max_size=200))
def test_any_text_counts_as_the_regex_does(text: str) -> None:
    assert _pieces(text) == len(PIECES.findall(text))


def test_the_estimate() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("a[i] = b[i] * 2") == 11  # a [ i ] = b [ i ] * 2
    long_word = "x" * 40
    assert estimate_tokens(long_word) == 10  # chars / 4 wins
    assert estimate_tokens(string.punctuation) == len(string.punctuation)
