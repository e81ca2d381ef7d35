"""Provenance: which of an episode's turns actually state a fact (pure).

A reflector names the turns a fact came from (`source_turn_ids`); an LLM's claim is not
evidence. A fact came from the turns it names that state it (content matching), else from the turns
that do; a claim no turn supports is not believed. Its visibility is the most private of
those turns and of every other turn that states it (`stating`), so a fact whose words come
from a private turn stays private whatever the model claimed
(`hivemem.domain.scope.owner_of`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from hivemem.domain.models import Turn
from hivemem.domain.values import named_values

__all__ = ["contributors", "sources_of", "stated_in", "stating", "words_of"]

_WORD = re.compile(r"[a-z0-9][a-z0-9+#.-]*[a-z0-9+#]|[a-z0-9]")
_STOP = frozenset(re.findall(r"\w+",
    "the a an and or of to for in on at by is are was were be been it its this that these "
    "those we our us you your they their he she his her i my me with as from will would "
    "should must can could has have had do does did not no so but if then than use used "
    "using now also just very"))


def words_of(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def stated_in(content: str, vocabulary: Collection[str]) -> bool:
    """Do these words state `content`? Most of its words, and every name in it, occur
    (a name may be written shorter or longer: "Postgres", "PostgreSQL")."""
    words = [w for w in words_of(content) if w not in _STOP]
    if not words:
        return False
    seen = sum(1 for w in words if w in vocabulary)
    long_words = [v for v in vocabulary if len(v) >= 3]
    names_ok = all(
        any(v.startswith(n) or n.startswith(v) for v in long_words)
        for n in named_values(content)
    )
    return names_ok and seen * 2 >= len(words)


def stating(content: str, turns: Sequence[Turn]) -> list[Turn]:
    """Every turn whose own words state `content`."""
    return [t for t in turns if stated_in(content, set(words_of(t.content)))]


def sources_of(content: str, claimed: Sequence[str], turns: Sequence[Turn]) -> list[Turn]:
    """The episode turns `content` came from, in episode order: the claimed turns that
    state it; else, when the claim is wrong, the turns that do; else the claimed turns
    when together they state it. Nothing when no turn supports it (a claim alone is not
    believed)."""
    named = set(claimed)
    found = stating(content, turns)
    own = [t for t in found if t.turn_id in named]
    if own or found:
        return own or found
    together = [t for t in turns if t.turn_id in named]
    joint = {w for t in together for w in words_of(t.content)}
    return together if together and stated_in(content, joint) else []


def contributors(content: str, sources: Sequence[Turn], turns: Sequence[Turn]) -> list[Turn]:
    """Turns beyond `sources` that hold a word of `content` no source holds: where the rest
    of a fact's words came from ("Kong is the gateway and the launch moved to May 3" from
    a shared turn about the launch and a private one about Kong)."""
    held = {w for t in sources for w in words_of(t.content)}
    missing = {w for w in words_of(content) if w not in _STOP and w not in held}
    named = {t.turn_id for t in sources}
    return [t for t in turns if t.turn_id not in named
            and missing & set(words_of(t.content))]
