"""Whether a newer statement plainly replaces an older one (pure).

One rule for everything that reads a chain of versions as history: the currency keeper
(`hivemem.workers.currency`), which writes the slot table as turns arrive, and recall's
reading of the reflected facts (`hivemem.domain.recall.fact_index`). Consolidation links
facts by resemblance too (two chatty turns alike, a person's keyword-read slot filled again
and again: "lactose intolerant" after "allergic to reptiles" on "joanna's diet"); such a
link is kept as the facts' history, but only plain evidence makes a statement history in
recall, where history loses its place.
"""

from __future__ import annotations

import functools
import re

from hivemem.domain.change import has_update_language
from hivemem.domain.fact import Fact
from hivemem.domain.slots import canonical_slot, slot_of
from hivemem.domain.values import contrast, differs, holds, named_values, values_of

_BARE_INSTEAD = re.compile(r"\binstead\b(?! of)", re.IGNORECASE)
_SWITCH = re.compile(r"\b(?:switch(?:es|ed|ing)?|migrat(?:e|es|ed|ing)|mov(?:e|es|ed|ing)"
                     r"|chang(?:e|es|ed|ing)|replac(?:e|es|ed|ing)|upgrad(?:e|es|ed|ing)"
                     r"|rais(?:e|es|ed|ing)|lower(?:s|ed|ing)?|bump(?:s|ed|ing)?"
                     r"|push(?:es|ed)|postpon(?:e|es|ed|ing))\b", re.IGNORECASE)
_CHANGED_MIND = re.compile(r"\b(?:actually|now|no longer|any ?more|switched|changed|from now on"
                           r"|these days)\b", re.IGNORECASE)
_REVERT = re.compile(r"\b(?:back to|return(?:s|ed|ing)? to|revert(?:s|ed|ing)?\b)",
                     re.IGNORECASE)


def plainly_replaces(new: Fact, old: Fact) -> bool:
    """Whether `new` plainly replaces `old`: their sentences name one slot, or `new` says
    `old`'s value is gone ("not 200", "from Jenkins to ..."), or it is a bare "X instead".
    Kept per pair of texts: recall asks again for the same chains on every question, and
    a reading costs milliseconds (LoCoMo's 20 replaced facts: 2 ms a pair at load 12, most
    of it `contrast`)."""
    # (`new.subject` may be `old`'s, inherited when it replaced it: its sentence decides.)
    return _plainly(new.content, new.agent_id, old.content, old.agent_id, old.subject)


@functools.lru_cache(maxsize=4096)
def _plainly(new: str, new_agent: str | None, old: str, old_agent: str | None,
             old_subject: str) -> bool:
    mine = slot_words(slot_of(new, new_agent))
    # Update language alone, with no value of its own ("status update 3: the build is
    # green"), restates rather than replaces.
    changes = differs(old, new) or (has_update_language(new) and bool(values_of(new)))
    for named in (slot_of(old, old_agent), old_subject):
        words = slot_words(named)
        if changes and mine and words and (mine <= words or words <= mine):
            return True
    # A person's own slot changes when its owner says it changed ("I'm vegan now").
    own = slot_of(new, new_agent)
    if ("'s " in own and own == old_subject and new_agent == old_agent
            and _CHANGED_MIND.search(new)):
        return True
    _new, gone = contrast(new)
    if any(holds(old, v) for v in gone):
        return True
    if _REVERT.search(new):
        return True  # "back to Black": consolidation found the version it returns to
    # The slot one names is words of the other ("the request timeout should be 8 seconds"
    # after "set the request timeout to 3 seconds"), and each sets a value of its own.
    theirs = slot_words(slot_of(old, old_agent))
    if (in_words(mine, old) or in_words(theirs, new)
            or _SWITCH.search(new)) and differs(old, new):
        return True  # ... or it says it switches, to a value of its own
    return bool(_BARE_INSTEAD.search(new)) and bool(named_values(new))


def drop_cached() -> None:
    """Forget the statements whose readings are kept (a forget erases their text from the
    process too, as `hivemem.domain.values.drop_cached`)."""
    _plainly.cache_clear()


def slot_words(slot: str) -> set[str]:
    """A slot's words, for comparing: none for a person's own slot (read off a keyword:
    "lactose intolerant" gives "joanna's diet", which a chat fills again and again) or a
    slot too short to name anything."""
    if "'s " in slot or len(slot) < 2 or slot in ("a", "an", "the", "it", "this", "that"):
        return set()
    return set(slot.split())


def in_words(slot: set[str], text: str) -> bool:
    """Every word of a slot (of two or more letters' worth) is a word of `text`."""
    words = {canonical_slot(w) for w in re.findall(r"[a-z][\w-]*", text.lower())}
    return bool(slot) and len(" ".join(slot)) >= 5 and slot <= words
