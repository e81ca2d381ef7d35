"""What a statement does to what is known: states, changes, retracts, adds, or only asks.

One classification for every reflector (heuristic and LLM alike): consolidation acts on it.
"""

from __future__ import annotations

import re
from enum import StrEnum


class Intent(StrEnum):
    STATE = "state"  # a plain statement: versioned on its slot
    UPDATE = "update"  # says it replaces what was said before
    RETRACT = "retract"  # withdraws something, names nothing new
    ADDITION = "addition"  # one more thing beside what is known ("we also use X")
    NON_ASSERTION = "non_assertion"  # a question, a hypothetical, a rejected proposal


# "Update" says a change unless a noun follows it ("the update protocol over UART", "the
# update window"): "update the deal", "update: I took over", "an update from the solicitor"
# do. Shared with the lineage's change cues (`hivemem.domain.change_words`).
UPDATE_WORD = (r"updated|update(?!\s+(?!(?:the|a|an|it|its|this|that|these|those|my|our"
               r"|your|his|her|their|all|everything|whatever|everyone|me|us|them|him|to|on"
               r"|from|for|by|after|with|please|again|now|then|and|or|so|as|if)\b)[a-z]+\b)")
# A proposal, a joke or a request someone reports ("Pavel is joking we should move club night
# to the pub", "someone asked if club night can be Thursday"): no change. Shared with the
# lineage's weighing words (`hivemem.domain.change_words._HEDGE`).
REPORTED_PROPOSAL = (r"jok(?:e|es|ed|ing)|kidding|(?:asks?|asked|asking) (?:if|whether)"
                     r"|(?:we|you|they|i) should")
# Words that say a statement replaces an earlier one.
UPDATE_LANGUAGE = re.compile(
    r"\b(switch(?:ed|ing)? (?:to|over|\w+ to|the \w+(?: \w+)? to)|chang(?:e|ed|ing) (?:it )?to"
    r"|change of plans?|no longer|actually|instead|correction|from now on|moving to|move to"
    r"|moved (?:to|from|over)|migrat(?:e|ed|ing) to"
    r"|(?:mov|switch|migrat|chang)(?:e|es|ed|ing)? (?:the |our |my )?[\w-]+(?: [\w-]+)?"
    r" (?:over |back )?to"
    r"|replac(?:e|ed|ing)|now (?:use|we|it|the|is"
    r"|are|on|at|in)|(?:is|are) now|going forward|rather than|not .{1,30} anymore|"
    + UPDATE_WORD +
    r"|changed (?:my|our) minds?|on second thought|scratch that|turns out"
    # a revert names the old value again: "we're going back to Jenkins", "back to UTC"
    r"|(?:go|goes|going|went|get|getting|move|moving|switch|switching|come|coming) back to"
    r"|^(?:[a-z]+:\s+)?back to|return(?:s|ed|ing)? to|revert(?:s|ed|ing)?(?: [\w-]+){0,3} to)\b",
    re.IGNORECASE,
)
RETRACTION = re.compile(
    r"\b(scrap (?:that|this|it)|scratch that|forget (?:that|about)|never ?mind"
    r"|(?:we're|we are|i'm|i am) not (?:doing|going with|going to (?:do|use)|using|adding)"
    r"|(?:is|are|was|were|has been|have been|got|gets) (?:now )?(?:dropped|cancell?ed|scrapped"
    r"|lifted|removed|off the table|called off|abandoned|withdrawn|disabled|shelved|axed"
    r"|ditched|discontinued|turned off|switched off|shut down)"
    r"|no longer (?:required|needed|necessary|applies|apply|a (?:thing|requirement|constraint)"
    r"|the case|true|valid|in place|in effect|an issue|a problem|relevant)"
    r"|(?:is|are) fine again|(?:is|are) allowed again|not (?:required|needed|necessary) any ?more"
    r"|(?:we |let's )(?:drop|cancel|abandon) (?:the|that|this|it))\b",
    re.IGNORECASE,
)
_ADDITION = re.compile(r"\b(also|as well|in addition|additionally|besides|on top of that)\b",
                       re.IGNORECASE)
_NON_ASSERTION = re.compile(
    r"^(?:what if|if we|if i|suppose|supposing|imagine|should we|could we|would we|shall we"
    r"|do we|are we|maybe|perhaps|how about|what about|would it|wouldn't it|is it)\b"
    r"|\b(?:we|i|they) (?:considered|thought about|looked at|discussed|debated) .{1,60}\bbut\b"
    r"|\b(?:was|were|got) (?:rejected|turned down|vetoed|ruled out)\b"
    r"|\b(?:rejected|ruled out|vetoed) (?:the |that |this )?(?:[\w-]+ )?(?:idea|proposal"
    r"|suggestion)\b"
    r"|\b(?:i|we) (?:propose|suggest)\b|\bmy proposal\b"
    # reported proposals ("members propose to change the championship", `REPORTED_PROPOSAL`)
    r"|\b(?:" + REPORTED_PROPOSAL + r")\b|\bpropos(?:e|es|ed|ing) (?:to|that)\b"
    r"|\bwhat if\b|\bhypothetically\b",
    re.IGNORECASE,
)


def has_update_language(text: str) -> bool:
    return bool(UPDATE_LANGUAGE.search(text))


def intent_of(text: str) -> Intent:
    stripped = text.strip()
    if stripped.endswith("?") or _NON_ASSERTION.search(stripped):
        return Intent.NON_ASSERTION
    if RETRACTION.search(stripped):
        return Intent.RETRACT
    if has_update_language(stripped):
        return Intent.UPDATE
    if _ADDITION.search(stripped):
        return Intent.ADDITION
    return Intent.STATE
