"""The conversation so far, as `hivemem chat` sends it to the model.

A model that sees only the latest message repeats itself and loses the thread; one that sees
everything overflows its context. `Conversation` keeps the session's user and assistant turns
and hands the model the newest of them that fit a token budget, in order, starting with a
user message (some APIs require it) and with consecutive messages of one role joined (a
message the model failed to answer is followed by the next one). What falls out of the
window is what recall is for: the loop drops from the recalled context the turns the window
already holds, so nothing is sent twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from hivemem.domain.models import Role, Turn
from hivemem.domain.tokens import estimate_tokens

DEFAULT_HISTORY_TOKENS = 2000
_SPOKEN = (Role.USER, Role.ASSISTANT)


@dataclass(frozen=True)
class Said:
    role: str  # "user" or "assistant"
    content: str
    turn_id: str | None = None
    tokens: int = 0


@dataclass
class Conversation:
    budget: int = DEFAULT_HISTORY_TOKENS
    said: list[Said] = field(default_factory=list)

    @classmethod
    def resumed(cls, turns: Iterable[Turn], budget: int = DEFAULT_HISTORY_TOKENS
                ) -> Conversation:
        """The conversation of a session's stored turns (any order: sorted by seq)."""
        conversation = cls(budget)
        for turn in sorted(turns, key=lambda t: t.seq):
            if turn.role in _SPOKEN:
                conversation.add(turn.role.value, turn.content, turn.turn_id)
        return conversation

    def add(self, role: str, content: str, turn_id: str | None = None) -> None:
        self.said.append(Said(role, content, turn_id, estimate_tokens(content)))

    def window(self, then: str | None = None) -> tuple[list[dict[str, str]], set[str]]:
        """The messages to send, oldest first, ending with `then` (the new user message,
        always sent, its tokens counted first), and the turn ids they hold."""
        spent = estimate_tokens(then) if then is not None else 0
        kept: list[Said] = []
        for said in reversed(self.said):
            if spent + said.tokens > self.budget:
                break
            kept.append(said)
            spent += said.tokens
        kept.reverse()
        while kept and kept[0].role != "user":
            kept.pop(0)
        messages: list[dict[str, str]] = []
        for said in kept:
            _append(messages, said.role, said.content)
        if then is not None:
            _append(messages, "user", then)
        return messages, {s.turn_id for s in kept if s.turn_id}


def _append(messages: list[dict[str, str]], role: str, content: str) -> None:
    if messages and messages[-1]["role"] == role:
        messages[-1] = {"role": role, "content": f"{messages[-1]['content']}\n\n{content}"}
    else:
        messages.append({"role": role, "content": content})
