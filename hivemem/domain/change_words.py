"""The words a turn says a change with (pure): change cues, corrections, weighing, keeping,
going back, switching to a name, dropping one, proposing; and how a turn is cut into
sentences and clauses. Read by the value lineage (`hivemem.domain.lineage`).
"""

from __future__ import annotations

import re

from hivemem.domain.change import REPORTED_PROPOSAL, UPDATE_WORD

_CHANGE_CUE = re.compile(
    r"\b(?:now|anymore|any more|no longer|instead|rather than|switch\w*|mov(?:e|es|ed|ing)"
    r"|chang\w*|replac(?:e|es|ed|ing)\b|upgrad\w*|downgrad\w*|bump\w*|rais\w*|lower\w*|increas\w*"
    r"|decreas\w*|reduc\w*|push\w*|postpon\w*|delay\w*|pull\w* (?:in|forward)|resched\w*"
    r"|correct(?:ed|ion|ing|s)|typo|mistake|wrong|actually|scratch|scrap|forget"
    r"|from (?:here|now|today|tomorrow|monday|tuesday|wednesday|thursday|friday|next)"
    r"|starting|going forward|revert\w*|roll\w* back|back to"
    r"|in the end|turns out|" + UPDATE_WORD + r"|make (?:it|that)|let'?s make|set (?:it )?to"
    # the same said in other words: swaps, shifts, amendments, hand-overs, decisions
    r"|swap\w*|shift\w*|brought forward|bring (?:\w+ )?forward|amend\w*|revis\w*|adjust\w*"
    r"|tweak\w*|flip\w*|rebook\w*|renam\w*|reassign\w*|re-assign\w*|hand(?:s|ed|ing)? over"
    r"|tak(?:e|es|ing) over|took over|opt(?:s|ed)? for|settled on|ended up|after all"
    r"|extend\w*|shorten\w*|disabl\w*|turn(?:s|ed|ing)? off|shut(?:s|ting)? down)\b",
    re.IGNORECASE)
# A turn that corrects what was just said.
# ("Correct, SSO is Enterprise only" agrees: not a correction.)
_CORRECTION = re.compile(r"\b(?:typo|no wait|wait|sorry|i mean|i meant|correct(?:ed|ion)"
                         r"|actually|oops|my bad|mistake|wrong|make it|scratch that"
                         r"|hang on|hold on|misspoke|misread|miscount\w*|misremember\w*"
                         r"|mixed (?:it |them |that )?up|strike that|disregard|ignore (?:that|my)"
                         r"|make that|i misunderstood|not quite)\b",
                         re.IGNORECASE)
# A turn that weighs a change rather than makes it ("a 25-cent increase would cover it").
_HEDGE = re.compile(r"\b(?:would|could|might|maybe|perhaps|options?|if we|if you|suggest\w*"
                    r"|propos\w*|consider\w*|what if|how about|should we|thinking about"
                    r"|wondering|" + REPORTED_PROPOSAL + r")\b", re.IGNORECASE)
# A turn that keeps what holds ("we stay on Prisma", "decaf still 6 lb").
_KEEP = re.compile(r"\b(?:stay\w*|still|keep\w*|kept|remain\w*|unchanged|as is|no change"
                   r"|same as)\b", re.IGNORECASE)
_BACK = re.compile(r"\b(?:back to|revert\w*|roll\w* (?:\w+ )?back|again|originally"
                   r"|like (?:we|it) (?:had|was)|return\w* to|undo)\b", re.IGNORECASE)
# A sentence that puts a new name in place of whatever held the slot ("from now on we order
# flour from Moulin Roux instead", "switching the flour order to Moulin Roux").
_SWITCH_TO = re.compile(
    r"\b(?:instead\b(?! of)|from now on|going forward|switch\w* (?:\w+ ){0,4}?to|mov(?:e|es|ed|ing)"
    r" (?:\w+ ){0,4}?to|replac\w* (?:\w+ ){0,4}?with|going with|we'?ll go with|renam\w*"
    r" (?:\w+ ){0,3}?to)\b", re.IGNORECASE)
# A sentence that sets a name as what holds now, saying less of a switch ("Owner changed to
# Björn", "the threat model is with Björn now", "Updated: living room colour is Harbor
# Grey", "let's go with the Glasshouse"); not one that adds ("we also use Redis now") or
# ends something "for now".
_SETS = re.compile(
    r"^\W*updated?\b[^.:]{0,30}:|\b(?:is|are) now\b"
    r"|(?<!^)(?<![.!?]\s)(?<!for )(?<!right )(?<!until )(?<!by )(?<!of )(?<!just )\bnow\b(?!,)"
    r"|\b(?:chang|updat)\w* (?:\w+ ){0,3}?to\b|\bfrom (?:here|today|now) on\b|\bfrom here\b"
    r"|\blet'?s go with\b", re.IGNORECASE)
_ADDS = re.compile(r"\b(?:also|too|as well|add(?:s|ed|ing)?|plus|another|in addition|extra)\b",
                   re.IGNORECASE)
# A sentence that keeps what holds against an alternative ("we stay on Postgres", "Alpen
# stays", "MongoDB considered and rejected").
_DECIDED_KEEP = re.compile(
    r"\b(?:stay(?:s|ing)? (?:on|with)|stays\b|remains?\b|nothing (?:changes|moves)|no change"
    r"|(?:considered and )?rejected|said no|not (?:moving|switching)|sticking with"
    r"|stick with)\b", re.IGNORECASE)
# A clause that ends something without a successor ("I'm no longer taking the cetirizine",
# "drop casa do largo", "cancel the PureGym membership").
_DROPS = re.compile(
    r"\b(?:cancel(?:s|led|ling)?|drop(?:s|ped|ping)?|no longer (?:taking|using|doing|going)"
    r"|stop(?:s|ped|ping)? (?:taking|using|paying)|withdr[ae]w\w*|scrap(?:s|ped)?|call(?:ed)? off"
    r"|forget (?:about )?|quit(?:ting)?|pull(?:ed|ing)? (?:out|the plug)|skip(?:s|ped|ping)?"
    # other words for ending a thing
    r"|disabl(?:e|es|ed|ing)|turn(?:s|ed|ing)? off|switch(?:es|ed|ing)? off|shut(?:s|ting)? down"
    r"|ditch(?:es|ed|ing)?|ax(?:e|es|ed|ing)|nix(?:es|ed|ing)?|shelv(?:e|es|ed|ing)"
    r"|abandon(?:s|ed|ing)?|discontinu(?:e|es|ed|ing)|not (?:going ahead|happening)"
    r"|off the table)\b",
    re.IGNORECASE)
_NOT_BEFORE = re.compile(r"\b(?:don'?t|do not|never|not|won'?t)\s+(?:\w+\s+)?$", re.IGNORECASE)
_NOT = re.compile(r"\b(?:not|no|never)\b|n't\b", re.IGNORECASE)
_PASSIVE = re.compile(r"(?:cancelled|dropped|withdrawn|scrapped|called off|disabled|ditched"
                      r"|axed|nixed|shelved|abandoned|discontinued|turned off|switched off)$",
                      re.IGNORECASE)
_SUBJECT = re.compile(r"\b(?:i|we|you|they|he|she)\b", re.IGNORECASE)
# A turn that raises an alternative rather than states what holds. "Pushing", "pushes for"
# advocate; "pushed" alone reports a thing done ("images rebuilt and pushed", "pushed the
# fix"), not a proposal: only "pushed for" still pushes for something.
_PROPOSES = re.compile(r"\?|\b(?:push(?!ed\b(?!\s+for\b))\w*|pitch\w*|swears? by|recommend\w*"
                       r"|wants? to try"
                       r"|why (?:we|don't|aren't|not)|\w+'d (?:get|have|be))\b", re.IGNORECASE)
_QUESTION = re.compile(r"\?\s*$")
_CLAUSE = re.compile(r";\s+|,?\s+but\s+")
# (A title's period, "Mr. Haddad", ends no sentence.)
_SENTENCE = re.compile(r"(?<=[.!?])(?<!\bMr\.)(?<!\bMs\.)(?<!Mrs\.)(?<!\bDr\.)(?<!\bMx\.)"
                       r"(?<!Prof\.)\s+|\n+")


def weighs(text: str) -> bool:
    """Whether `text` asks, weighs or proposes rather than states ("what if we did mongo",
    "EKS would give you that ecosystem", "nadia keeps pushing kubernetes")."""
    return bool(_PROPOSES.search(text) or _HEDGE.search(text))
