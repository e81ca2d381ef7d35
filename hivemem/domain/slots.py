"""Subject slots: who or what a statement is about, and which attribute of it (pure).

A fact's slot ("database", "sam's preferred python version", "friday deploys") is what its
versions share: a newer statement on the same slot with another value replaces the older one.
The slot is read from the sentence itself (the object of "switch the X to", "for the X",
"the X is ...", a speaker's own preference or home), never from a list of known values, and
compared after normalisation ("the database", "our DB" and "databases" are one slot).
"""

from __future__ import annotations

import functools
import re

_DETERMINERS = re.compile(r"^(?:(?:the|our|my|your|their|a|an|this|that|team|team's|project"
                          r"|project's|current|new|old)\s+)+")
# Short forms people use for the same slot.
_SYNONYMS = {"db": "database", "dbs": "database", "datastore": "database",
             "repo": "repository", "k8s": "kubernetes", "ci/cd": "ci", "pipeline": "ci"}
_NOT_SLOTS = frozenset(re.findall(r"\S+",
    "it this that them me us you him her we i they he she everyone everything nothing "
    "what which who there here now today tomorrow tonight while moment time "
    "sure example instance reference record way lot bit one thing things sake real"))
_TRAILING = frozenset(("back", "over", "again", "now", "then", "too", "also", "finally"))
_WORDS = r"[a-z][a-z0-9/+#.-]*"
_PHRASE = rf"((?:{_WORDS} ){{0,3}}?{_WORDS})"
_OWNER = r"(?:the|our|my|your|their|team's|project's)"
# Where a noun phrase ends: punctuation, or a verb or joining word after it.
_PHRASE_END = (r"(?=[,.;:!)]|$| (?:is|are|was|were|will|should|must|stays|has|have|goes"
               r"|needs|runs|from|to|and|but|so|because|instead|now|with|in|on|at|for|then"
               r"|again|going|anymore)\b)")
# A word of a noun phrase: not one of the words that end it.
_NOUN = (r"(?!(?:is|are|was|were|will|should|must|stays|has|have|goes|needs|runs|from|to|and"
         r"|but|so|because|instead|now|with|in|on|at|for|then|again|going|anymore|too|also"
         rf"|though|already|either)\b){_WORDS}")
# Doing something to a thing somewhere: "host the service on AWS" fills "hosting service",
# which "moving the hosting to GCP" ("hosting") names too.
_ACTS = ("host", "deploy", "run", "serve", "store", "keep", "put", "ship", "publish",
         "push", "send", "log", "build", "cache", "schedule", "hold", "release", "launch")
_DOUBLED = {"run": "running", "ship": "shipping", "log": "logging", "put": "putting"}

# Ordered: the most explicit phrasing first.
_PATTERNS: tuple[re.Pattern[str], ...] = (
    # "we switch the database to MySQL", "moving our CI from Jenkins to ..."
    re.compile(rf"\b(?:switch|switching|switched|move|moving|moved|migrate|migrating|migrated"
               rf"|change|changing|changed|replace|replacing|replaced|revert|reverting"
               rf"|reverted) (?:{_OWNER} )?{_PHRASE}(?: back)? (?:to|from|over|with)\b"),
    # "Session timeout for the web app is 30 minutes", "Rate limit for the public API: 250"
    re.compile(rf"^{_PHRASE} (?:for|of|on|in) (?:{_OWNER} )?(?:{_WORDS} ){{0,2}}{_WORDS}"
               r"(?::| is\b| are\b| will\b| should\b| must\b| stays\b| becomes\b)"),
    # "use X for the database", "Redis for caching", "X as our queue"
    re.compile(rf"\b(?:for|as) {_OWNER} ((?:{_NOUN} ){{0,2}}{_NOUN}){_PHRASE_END}"),
    # "Daily standup is at 9:30", "CI runs on Jenkins", "product pages are cached for..."
    re.compile(rf"^((?:{_NOUN} ){{0,3}}?{_NOUN}) (?:is|are|was|were|will be|runs on|run on"
               r"|runs in|moved to"
               r"|moves to|uses|use|lives in|live in|goes to|go to|happens|happen|stays|stay"
               r"|is owned by|are owned by|is cached|are cached)\b"),
    # "the deadline is", "our budget will be", "the freeze is lifted"
    re.compile(rf"\b{_OWNER} {_PHRASE} (?:is|are|was|will|should|can|may|has to|have to|must"
               r"|stays|stay|remains|goes|becomes|moves|moved|changed|needs to|will use|uses"
               r"|runs on|will run on|lives in)\b"),
    # "Jonas owns the billing service": the owner is the value, the service the slot
    re.compile(rf"\b(?:owns|own|leads|maintains|is responsible for|writes|handles|approves"
               rf"|reviews|runs|hosts) {_OWNER} ((?:{_WORDS} ){{0,2}}{_WORDS})(?=[,.;:!)]|$)"),
    # "for caching", "for CI", "for deployment"
    re.compile(rf"\bfor ({_WORDS}(?:ing)?)(?=[ ,.;:!)]|$)"),
    # "Friday deploys are fine again", "deploys on Fridays are frozen"
    re.compile(rf"^{_PHRASE} (?:are|is) (?:fine|ok|okay|allowed|frozen|banned|blocked|off"
               r"|lifted|dropped|cancell?ed)\b"),
)
_PERSONAL: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"\bmy favou?rite {_PHRASE} (?:is|are)\b"), "favourite {0}"),
    (re.compile(r"\bi (?:live|moved|relocated) (?:in|to)\b|\bi'm (?:now )?based in\b"), "home"),
    (re.compile(r"\bi work (?:at|for)\b|\bi joined\b"), "employer"),
    (re.compile(r"\bi work as\b|\bi'm an? \w+ (?:engineer|developer|designer|manager)\b"),
     "job"),
    (re.compile(r"\bmy name is\b|\bcall me\b"), "name"),
    (re.compile(r"\b(?:vegan|vegetarian|pescatarian|gluten|dairy|allergic|diet|keto)\b"),
     "diet"),
    (re.compile(r"\bi (?:really |strongly |much )?(?:prefer|like|love|want|use) (?:to use )?"
                r"([a-z]+) ?(\d+(?:\.\d+)*)\b"), "preferred {0} version"),
    (re.compile(rf"\bi (?:really |strongly |much )?prefer {_OWNER}? ?{_PHRASE}"
                r"(?= over| to| rather|[,.;!]|$)"), "preference"),
)


_PHRASES = {"continuous integration": "ci", "continuous delivery": "cd",
            "data base": "database"}


@functools.lru_cache(maxsize=8192)
def canonical_slot(subject: str) -> str:
    """Lowercased, determiners dropped, short forms expanded, the head noun singular."""
    text = " ".join(re.findall(r"[\w'/+#.-]+", subject.lower())).strip(" .,'")
    for phrase, short in _PHRASES.items():
        text = text.replace(phrase, short)
    text = _DETERMINERS.sub("", text)
    words = [_SYNONYMS.get(w, w) for w in text.split()]
    while words and words[-1] in _TRAILING:  # "switch the database back to ..."
        words.pop()
    if not words:
        return ""
    head = words[-1]
    if len(head) > 3 and head.endswith("s") and not head.endswith(("ss", "us", "is")):
        words[-1] = head[:-1]
    return " ".join(words)


# What opens a sentence without being its subject: "Sam: ", "From now on, ", "Heads up, ".
_LEAD = re.compile(
    r"^(?:[a-z]+(?: [a-z]+)?:\s+)?(?:(?:from now on|going forward|actually|okay|ok|so|well"
    r"|heads up|fyi|correction|update|also|and|but|now|again|anyway|good news|agreed|done"
    r"|sure|right|good|great|thanks|yes|no)[,:;!]?\s+)*")


# Words that open a label without naming a slot ("Update from product:", "Change of plan:").
_LEAD_WORDS = frozenset(re.findall(r"\w+", (
    "update updates plan change changes changed requirement heads note news fyi correction "
    "decision answer final reminder summary recap status important psa ps btw new quick mind "
    "says said from team product security agreed done sure okay ok so well also")))
_LABEL = re.compile(r"^([a-z][a-z0-9/+# -]{1,40}?):\s+(?=\S)")
_ACT = re.compile(rf"(?<!the )(?<!our )(?<!a )(?<!an )(?<!my )(?<!this )(?<!that )(?<!your )"
                  rf"\b({'|'.join(_ACTS)})(?:s|es|ed|d|ing)? (?:{_OWNER} )?"
                  rf"((?:{_WORDS} ){{0,1}}{_WORDS}) (?:on|in|at|to|with|using|via|from)\b")
_NOT_FIRST = frozenset(("of", "to", "in", "on", "at", "with", "from", "about", "and", "or",
                        "it", "is", "be", "we", "i", "you", "they"))


def _gerund(verb: str) -> str:
    if verb in _DOUBLED:
        return _DOUBLED[verb]
    return (verb[:-1] if verb.endswith("e") else verb) + "ing"


def _labelled(text: str, speaker: str | None) -> tuple[str, str]:
    """(the slot a label names, the text after it): "deploy target: us-east-2" names
    "deploy target"; a speaker's name or "change of plan:" names none."""
    match = _LABEL.match(text)
    if match is None:
        return "", text
    label = match.group(1).strip()
    words = label.split()
    rest = text[match.end():]
    if len(words) > 4:
        return "", text  # a sentence with a colon in it, not a label
    if (len(words) < 2 or set(words) & _LEAD_WORDS
            or (speaker and label == speaker.lower())):
        return "", rest
    return canonical_slot(label), rest


def slot_of(sentence: str, speaker: str | None = None) -> str:
    """The slot a sentence fills, or "" when it names none."""
    named, text = _labelled(sentence.lower().strip(), speaker)
    if named:
        return named
    text = _LEAD.sub("", text)
    for pattern, template in _PERSONAL:
        match = pattern.search(text)
        if match:
            attr = template.format(*(canonical_slot(g) for g in match.groups() if g))
            owner = f"{speaker.lower()}'s " if speaker else ""
            return f"{owner}{attr}".strip()
    act = _ACT.search(text)
    for pattern in _PATTERNS:
        if act is not None and pattern is _PATTERNS[2]:
            slot = canonical_slot(act.group(2))
            if slot and slot.split()[-1] not in _NOT_SLOTS and slot.split()[0] not in _NOT_FIRST:
                return f"{_gerund(act.group(1))} {slot}"
        for match in pattern.finditer(text):
            slot = canonical_slot(match.group(1))
            if (slot and slot.split()[-1] not in _NOT_SLOTS
                    and slot.split()[0] not in _NOT_FIRST):
                # "my preferred editor is ...": the speaker's own slot
                mine = (text[max(0, match.start(1) - 3):match.start(1)] == "my "
                        or match.group(1).startswith("my "))
                return f"{speaker.lower()}'s {slot}" if mine and speaker else slot
    return ""


def is_personal(subject: str, owner: str | None) -> bool:
    """A person's own slot (their preference, home, diet): only they change it."""
    return bool(owner) and subject.startswith(f"{(owner or '').lower()}'s ")


def same_slot(a: str, b: str) -> bool:
    return bool(a) and canonical_slot(a) == canonical_slot(b)
