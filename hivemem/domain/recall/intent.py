"""What a recall query asks, read once from its text (pure).

One recall reads the question here, once (`read_query`), and hands the `QueryIntent` down:
the scoring model (past versus present, the latest state), currency (whose statements the
question is about) and the text to embed (the question without the speakers it names).

People are named relative to who is known: the intent keeps the question's words, and
`people_named` picks the known speakers among them (who is known differs per session and
per step of a recall, the words do not).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

# "What did we use before?", "what was it originally?", "until March": the old value answers.
_PAST = re.compile(
    r"\b(before|used to|originally|original|until|previously|previous|earlier|at first"
    r"|initially|in the past|formerly|back then|prior|old|first (?:chose|picked|decided)"
    r"|what (?:did|was|were) (?:we|they|you|i) (?:use|have|pick|choose|decide|plan)"
    r"|history|changed from|switched from|moved from|started with|to begin with"
    # A state that did not last or never came to be ("the seat I switched to briefly",
    # "the tool we almost moved to", "the colour she wanted to switch to").
    r"|did\b[^?.]{0,40}\b(?:briefly|temporarily|almost|nearly|for a while|at one point)"
    r"|(?:briefly|temporarily|almost|nearly|did\b[^?.]{0,40}\bwant to) (?:switch|mov|chang"
    r"|went|go|chose|pick|book|replac|us)\w*"
    r"|first\b.{0,40}\b(?:used|chose|picked|had|decided|went with|started))\b",
    re.IGNORECASE,
)
# "before" ahead of an -ing verb in a question about now sets a condition ("how long can it
# run before timing out now?"), unless the verb is a change ("before switching to Kafka").
_CONDITION = re.compile(
    r"\bbefore\s+(?!(?:switch|mov|chang|migrat|replac|upgrad|downgrad|revert|return|go)\w*)"
    r"[a-z]+ing\b", re.IGNORECASE)

# "What is the current timeout?", "where do we deploy now", "which colour did they pick in
# the end?": the current state answers.
_LATEST = re.compile(
    r"\b(now|nowadays|current(ly)?|latest|newest|still|anymore|any more|updated|these days"
    r"|at the moment|so far|most recent(ly)?|in the end|finally|final|ended up|eventually"
    r"|settled on"
    # "the cap after Hamid's change", "after Sven's objection": the state a change left
    r"|after (?:the |that |this |his |her |their |[a-z]+'s )?(?:[a-z]+ )?(?:change|objection"
    r"|update|correction|override|finding|switch|swap|revert|rollback|pushback)s?)\b",
    re.IGNORECASE,
)

# "Which hotel did we end up booking?", "what did they go with?", "did we switch the database
# to MongoDB?": the outcome of a choice is what holds now; "when did we switch?" asks when.
_OUTCOME = re.compile(
    r"^(?!\s*(?:when|why)\b).*\b(?:did|have|has) (?:we|they|you|i) (?:finally |actually "
    r"|already )?(?:end(?:ed)? up|go(?:ne)? (?:with|for)|settled? on|land(?:ed)? on|opt(?:ed)? for"
    r"|switch(?:ed)?|moved?|changed?|migrated?|replaced?)\b", re.IGNORECASE)

# "When did she go ...", "what was the name of ...", "in 2023": a question about an event
# or a time, not about what holds now (the slot table of current values does not answer it).
_EVENT = re.compile(
    r"\b(did|was|were|had|went|ago|last|yesterday|happened|ever|recently)\b"
    r"|\b(?:has|have)\s+\w+\s+\w+ed\b",
    re.IGNORECASE,
)

# "What is Caroline's identity?": a question about a person (a chat's speaker), whose
# plain statements the slot table reads as values far more often than a person sets one.
# "When is Nia's first day?" asks what holds now when Nia is not one of the speakers.
_ABOUT_A_PERSON = re.compile(
    r"\b(?!(?:What|Who|Where|When|How|Which|That|It|There|Here|Let)'s)([A-Z][a-z]+)'s\b")

# A word written as a name ("Mel"), read in lower case to match a speaker's name it shortens.
_CAPITALISED = re.compile(r"\b[A-Z][a-z]+\b")

# A query's words as names are matched against them: lower case, possessive 's dropped.
_WORD = re.compile(r"[a-z][\w-]*")

_MONTH_NAMES = (
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december",
)
_MONTH_NUMBER = {name: i + 1 for i, name in enumerate(_MONTH_NAMES)} | {
    name[:3]: i + 1 for i, name in enumerate(_MONTH_NAMES)} | {"sept": 9}
_MONTH = (r"(?P<month>january|february|march|april|may|june|july|august|september|october"
          r"|november|december|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)")
# "may" and "march" are words too: a month alone counts after a preposition that rarely
# comes before the verb ("in May", not "this may take a while").
_MONTH_NOT_MAY = _MONTH.replace("|may|", "|")
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?\b"
_YEAR = r"(?P<year>(?:19|20)\d{2})\b"
_AT = (r"(?:(?:in|on|since|until|till|by|during|before|after|from|through|of|early|late"
       r"|mid-?)\s+)?")
_COUNT = r"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a few|several)"
_UNIT = r"(?:day|week|month|year|weekend|quarter|hour)s?"
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?"

TimeKind = Literal["date", "month", "weekday", "relative", "year"]

# The readings of a time, the most precise first: a span read by one is not read again by a
# later one (a full date is not also a month and a year).
_TIME_READINGS: tuple[tuple[TimeKind, str], ...] = (
    ("date", r"\b(?P<year>(?:19|20)\d{2})-(?P<month>[01]\d)-(?P<day>[0-3]\d)\b"),
    ("date", rf"\b{_AT}(?:the\s+)?{_DAY}(?:\s+of)?\s+{_MONTH}(?:,?\s+{_YEAR})?(?!\w)"),
    ("date", rf"\b{_AT}{_MONTH}\s+{_DAY}(?:,?\s+{_YEAR})?"),
    ("month", rf"\b{_AT}{_MONTH}\s+{_YEAR}"),
    ("month", r"\b(?:in|since|until|till|during|through|early|late|mid-?)\s+"
              rf"{_MONTH}(?!\w)"),
    ("month", rf"\b(?:by|before|after|from|of|last|this|next)\s+{_MONTH_NOT_MAY}(?!\w)"),
    ("relative", r"\b(?:the day before yesterday|yesterday|today|tonight|tomorrow"
                 r"|this (?:morning|afternoon|evening)|last night"
                 rf"|(?:last|this|next|past|previous|coming) (?:{_COUNT} )?{_UNIT}"
                 rf"|{_COUNT} {_UNIT} (?:ago|back|from now))\b"),
    ("weekday", rf"\b(?:(?:on|last|this|next|since|by|until) )?{_WEEKDAY}\b"),
    ("year", rf"\b{_AT}{_YEAR}"),
)
_TIMES = tuple((kind, re.compile(pattern, re.IGNORECASE)) for kind, pattern in _TIME_READINGS)


@dataclass(frozen=True, slots=True)
class TimeExpression:
    """A time the query names, as written ("last week", "in March", "2024"). `day`,
    `month` and `year` are set where the text gives them (a relative time is left to the
    caller, who knows when "yesterday" was)."""

    text: str
    kind: TimeKind
    day: int | None = None
    month: int | None = None
    year: int | None = None


@dataclass(frozen=True, slots=True)
class QueryIntent:
    """What one query asks. `past`: what was true before (the old value is the answer);
    `latest`: the current state (recency counts for more); `times`: the times it names."""

    text: str
    words: frozenset[str]
    past: bool
    latest: bool
    times: tuple[TimeExpression, ...]
    # The people whose something it asks about ("Caroline's identity" -> "caroline").
    possessed: frozenset[str] = frozenset()
    # The session's speakers (lower case), once recall knows them; None: not known yet.
    speakers: frozenset[str] | None = None

    @property
    def current(self) -> bool:
        """It asks what holds now ("where is the service hosted?", "which database are we
        using now?"), not about the past or an event ("when did Sam go to ...?"), nor about
        a speaker ("what is Caroline's identity?": any person's, while the speakers are
        not known)."""
        if self.past:
            return False
        # A dated question ("in May 2023", "on 7 July, 2023") asks about then; "for Friday",
        # "from April" ask what is planned now.
        dated = any(t.year is not None for t in self.times)
        about_a_speaker = bool(self.possessed) if self.speakers is None \
            else bool(self.possessed & self.speakers)
        return self.latest or (not dated and _EVENT.search(self.text) is None
                               and not about_a_speaker)

    @property
    def asks_state(self) -> bool:
        """It asks what holds now of a thing, not of a person among the session's speakers
        ("which branch do I open PRs against?", not "what does Melanie do to destress?"):
        the newer of two statements on one thing answers it, whether or not it says "now".
        A chat about people's lives returns to a topic again and again, and the later turn
        on it is no newer state of it (measured on LoCoMo)."""
        return bool(self.words) and self.current and not self._names_a_speaker()

    def _names_a_speaker(self) -> bool:
        """Whether the question names one of the session's speakers, by name or by a short
        form of it written as a name ("Mel" for Melanie)."""
        speakers = self.speakers or frozenset()
        return bool(self.people_named(speakers)) or any(
            s.startswith(short.lower()) for short in _CAPITALISED.findall(self.text)
            for s in speakers if len(short) >= 3)

    @property
    def may_be_current(self) -> bool:
        """It asks what holds now unless a person it names is a speaker (`current` once
        the speakers are known)."""
        return self.current if self.speakers is not None \
            else replace(self, speakers=frozenset()).current

    def among(self, speakers: Iterable[str]) -> QueryIntent:
        """This intent, the session's speakers (lower case) known."""
        return replace(self, speakers=frozenset(speakers))

    def people_named(self, people: Iterable[str]) -> set[str]:
        """The known speakers (lower case) the query names ("which city is Sam based in?"
        -> {"sam"})."""
        return {p for p in people if p in self.words}


def read_query(text: str) -> QueryIntent:
    """Read a recall query once."""
    latest = _LATEST.search(text) is not None or _OUTCOME.search(text) is not None
    # A condition in a question about now, said so ("now") or asked in the present tense
    # ("how many retries do jobs get before landing in the DLQ?"); "what did Jean go
    # through before meeting Maria?" asks about then.
    conditions = [m.span() for m in _CONDITION.finditer(text)] \
        if latest or _EVENT.search(text) is None else []
    past = any(not any(s <= m.start() < e for s, e in conditions) for m in _PAST.finditer(text))
    return QueryIntent(
        text=text,
        words=frozenset(_WORD.findall(text.lower().replace("'s", ""))),
        past=past,
        latest=latest,
        times=_times(text),
        possessed=frozenset(m.group(1).lower() for m in _ABOUT_A_PERSON.finditer(text)),
    )


def _times(text: str) -> tuple[TimeExpression, ...]:
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, TimeExpression]] = []
    for kind, pattern in _TIMES:
        for m in pattern.finditer(text):
            start, end = m.span()
            if any(start < e and s < end for s, e in taken):
                continue
            taken.append((start, end))
            groups = m.groupdict()
            day, month, year = groups.get("day"), groups.get("month"), groups.get("year")
            found.append((start, TimeExpression(
                m.group(0), kind, day=int(day) if day else None,
                month=(int(month) if month.isdigit() else _MONTH_NUMBER[month.lower()])
                if month else None,
                year=int(year) if year else None)))
    return tuple(expression for _start, expression in sorted(found, key=lambda f: f[0]))
