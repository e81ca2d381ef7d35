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
# counted): the word runs are what is left between non-word bytes, and every byte that is
# neither a word character nor white space is a piece of its own. bytes.split() knows fewer
# white-space bytes than the regex does (not \x1c-\x1f), so every non-word byte becomes a
# space before the split.
_ASCII = [chr(i) for i in range(128)]
_NON_WORD = bytes(i for i, c in enumerate(_ASCII) if not re.fullmatch(r"\w", c))
_WORD_OR_SPACE = bytes(
    i for i, c in enumerate(_ASCII) if re.fullmatch(r"\w", c) or c.isspace())
_SEPARATE = bytes.maketrans(_NON_WORD, b" " * len(_NON_WORD))


def _pieces(text: str) -> int:
    if text.isascii():
        raw = text.encode("ascii")
        return len(raw.translate(_SEPARATE).split()) + len(raw.translate(None, _WORD_OR_SPACE))
    return len(_PIECES.findall(text))


def estimate_tokens(text: str) -> int:
    if not text:
        return 0
    return max(math.ceil(len(text) / 4), _pieces(text))
