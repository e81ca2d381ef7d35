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


def estimate_tokens(text: str) -> int:
    if not text:
        return 0
    return max(math.ceil(len(text) / 4), len(_PIECES.findall(text)))
