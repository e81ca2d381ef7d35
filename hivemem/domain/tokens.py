"""Token counting.

hivemem cannot know the caller's LLM tokenizer, so it uses a documented, conservative
estimate: the larger of ceil(characters / 4) (the usual BPE rule of thumb for English) and
the number of word and punctuation pieces. On English chat this over-counts GPT-style
tokenizers slightly, so a packed context stays within the budget the caller sets.
"""

from __future__ import annotations

import math
import re

_PIECES = re.compile(r"\w+|[^\w\s]", re.UNICODE)

# The same count for ASCII text without the regex (6x faster, and every ingested turn is
# counted): every byte that is neither a word character nor white space is a piece of its
# own, and the word runs are counted where they start (a word byte after a non-word byte, or
# at the start), once every word byte is mapped to "a" and every other byte to a space (one
# translate and a count: no list of words is built).
_ASCII = [chr(i) for i in range(128)]
_WORD_OR_SPACE = bytes(
    i for i, c in enumerate(_ASCII) if re.fullmatch(r"\w", c) or c.isspace())
_WORD_MAP = bytes(ord("a") if re.fullmatch(r"\w", c) else ord(" ") for c in _ASCII) + (
    b" " * 128)


def _pieces(text: str) -> int:
    if text.isascii():
        raw = text.encode("ascii")
        runs = raw.translate(_WORD_MAP)
        words = runs.count(b" a") + runs.startswith(b"a")
        return words + len(raw.translate(None, _WORD_OR_SPACE))
    return len(_PIECES.findall(text))


def estimate_tokens(text: str) -> int:
    if not text:
        return 0
    return max(math.ceil(len(text) / 4), _pieces(text))
