"""A turn's context window: the turns before it that may shape its second vector, and the
text that vector is embedded from (`embedding.window_mode` text / refined)."""

from __future__ import annotations

from collections.abc import Mapping

from hivemem.domain.models import Turn

__all__ = ["framing", "may_frame", "window_text"]

# A previous turn enters a window up to this many characters (its start): the model reads
# ~256 tokens, and the turn itself, last in the text, must not be cut off.
CONTEXT_CHARS = 400


def may_frame(previous: Turn, turn: Turn) -> bool:
    """Whether `previous` may shape `turn`'s window vector: same namespace, and not another
    agent's private turn (a shared turn's vector must not carry what its reader may not see)."""
    if previous.namespace != turn.namespace:
        return False
    return previous.visibility != "private" or previous.agent_id == turn.agent_id


def framing(turn: Turn, before: Mapping[int, Turn], window_turns: int) -> list[Turn]:
    """The up to `window_turns` turns before `turn` (by seq, from `before`) that may frame
    it, oldest first."""
    return [p for seq in range(turn.seq - window_turns, turn.seq)
            if (p := before.get(seq)) is not None and may_frame(p, turn)]


def window_text(framing_turns: list[Turn], turn: Turn) -> str:
    """The framing turns' starts and the turn, one per line, the turn last."""
    return "\n".join([*(p.content[:CONTEXT_CHARS] for p in framing_turns), turn.content])
