"""Value lineage: which values a conversation has moved on from, read off the values
themselves (pure).

The slot rules (`hivemem.domain.slots`, consolidation) name what a statement is about and
compare statements on one slot: they miss a change whenever a subject is not read off its
words ("heads up all - standup is at 10:15 from monday ... 9:30 was brutal for them" names
no slot the rules know). A change is also visible in the values alone: a turn that says
something changes and names a value the conversation has said before beside one it has not
(of the same kind: a time beside a time, an amount beside an amount, a name beside a name)
moves on from the old one; so does a turn that sets a new value of a kind an earlier turn
set, on the same thing (they share words besides their values). Every earlier turn that
carries the old value, on the same thing, and not the new one is history from then on; a
later turn that only names the old value again (a question about it, a complaint) is history
too, unless it goes back to it ("back to Redis"), which makes the newer value history.

What a value is (`hivemem.domain.value_reading`), the words a change is said with
(`hivemem.domain.change_words`) and which earlier value a new one replaces
(`hivemem.domain.value_pairing`) are modules of their own.

The keeper (`hivemem.workers.currency`) runs this per turn beside the slot rules; its state
(`Lineage`) is part of the session's slot state.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from pydantic import BaseModel, Field

from hivemem.domain.change import RETRACTION, has_update_language
from hivemem.domain.change_words import (
    _ADDS,
    _BACK,
    _CHANGE_CUE,
    _CLAUSE,
    _CORRECTION,
    _DECIDED_KEEP,
    _DROPS,
    _HEDGE,
    _KEEP,
    _NOT,
    _NOT_BEFORE,
    _PASSIVE,
    _PROPOSES,
    _QUESTION,
    _SENTENCE,
    _SETS,
    _SUBJECT,
    _SWITCH_TO,
)
from hivemem.domain.value_clauses import _CLAUSE as CLAUSE
from hivemem.domain.value_clauses import clause_words, own_words
from hivemem.domain.value_pairing import (
    _NOT_OWNER,
    _contrasted,
    _corrected_by,
    _dismissed,
    _from_to,
    _named_before,
    _negated,
    _one_for_another,
    _pairs,
)
from hivemem.domain.value_reading import (
    _STOP,
    Value,
    _keyed,
    _same_kind,
    _stem,
    value_keys,
    values_in,
    words_in,
)

__all__ = ["Gone", "GoneValues", "Lineage", "Said", "Step", "Value", "parts", "retire",
           "step", "value_keys", "values_in", "withdrawn_parts", "words_in"]

# The parts of a sentence that weigh or state apart ("X; Y"; `_stated_clauses`).
_PARTS = re.compile(r";\s+")

# Turns whose values and words the lineage remembers (the newest kept).
MAX_SAID = 300
# How far back a bare count said to be wrong is looked for.
_RECENT = 20
# How many turns back a value raised is still new to the turn that takes it up.
_FRESH = 6

# Per session, what recall reads of the lineage: a value moved on from -> (the turn that
# moved on, the keys of the values that replaced it).
Gone = Mapping[str, tuple[str, tuple[str, ...]]]


_READ_MAX = 8192  # texts a `GoneValues` remembers its answer for
_UNREAD = object()


class GoneValues:
    """A session's values moved on from, read once per recall (its names, turns and
    successors), then asked per candidate text (`stale`)."""

    def __init__(self, gone: Gone) -> None:
        self.gone = gone
        self.names = frozenset(k for key, (_turn, after) in gone.items() for k in (key, *after)
                               if k.startswith("name="))
        self.turns = {k: t for k, (t, _a) in gone.items()}
        self.successors = {k: list(a) for k, (_t, a) in gone.items()}
        # The names' pattern, made once: asked per candidate, it would cost each candidate
        # in proportion to the names the session has moved on from.
        self._names = _names_reader(self.names)
        # Per text: one instance serves every recall of a slot-table view, and recall meets
        # the same candidates again and again (~15 us a text, ~60 texts a recall).
        self._read: dict[str, str | object | None] = {}

    def stale(self, text: str) -> str | None:
        """The turn that moved on from a value `text` carries without any of its successors
        (the text states only the old value: a config line, a reminder, a question about
        it), or None. Only strong values count (`_strong`); names are read in any case."""
        if not self.gone:
            return None
        known = self._read.get(text, _UNREAD)  # (one lookup: another recall may clear it)
        if known is not _UNREAD:
            return known if isinstance(known, str) else None
        keys = value_keys(text) | self._names(text)
        stale = _stale(keys, self.turns, self.successors, text)
        found = self.gone[stale][0] if stale is not None else None
        if len(self._read) >= _READ_MAX:
            self._read.clear()
        self._read[text] = found
        return found


class Said(BaseModel):
    """What the lineage remembers of one turn: its values' keys and its words."""

    turn_id: str
    values: list[str] = Field(default_factory=list)
    words: list[str] = Field(default_factory=list)
    # Each name it says -> the words of the sentence it is said in (what the name is the
    # value of: "Flour: 200 kg from Farina Nord" -> flour).
    named: dict[str, list[str]] = Field(default_factory=dict)
    weighs: bool = False  # it asks, weighs or proposes rather than states
    ends: bool = False  # it says something ends or is not so ("we're not shipping Windows")
    # Each value it carries -> the words of the clause it is said in (what the value is the
    # value of: "Redis for caching, S3 for uploads"): which of a turn's values a question
    # is about once some of them went (`parts`). Empty for a turn remembered before.
    clauses: dict[str, list[str]] = Field(default_factory=dict)
    # Each value it carries -> the session's speakers named in its sentence (whose value it
    # is: "Lars, Berlin, CET, core 9-17" is Lars's). Empty for a turn remembered before.
    people: dict[str, list[str]] = Field(default_factory=dict)
    # The values it says end, each in a clause that says so ("we're not shipping Windows";
    # not "Hvar catamaran 8:30 from Split, not yet purchased"): `ends`, per value. Empty
    # for a turn remembered before (`ends` tells for the whole turn).
    ended: list[str] = Field(default_factory=list)


class Lineage(BaseModel):
    """Per session: the turns said so far (values and words, newest `MAX_SAID`) and the
    values moved on from (value key -> the turn that moved on)."""

    said: list[Said] = Field(default_factory=list)
    gone: dict[str, str] = Field(default_factory=dict)
    # A value moved on from -> the values that replaced it (a turn naming one of them beside
    # the old value is not stale: "from Redis to Memcached").
    successors: dict[str, list[str]] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Step:
    """What one turn did: the lineage after it, the turns it made history (turn id -> the
    turn that replaced them) and the turns it made current again (a revert)."""

    lineage: Lineage
    history: dict[str, str]
    restored: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Reading:
    """One turn as the lineage reads it."""

    text: str
    keys: frozenset[str]  # its values' keys
    words: frozenset[str]
    stated: tuple[str, ...]  # its sentences that neither ask nor weigh a change
    cue: bool  # it says something changes
    back: bool  # it goes back to something
    corrects: bool  # it corrects what was just said
    # Each value -> the words of its clause (`Said.clauses`) and the speakers its sentence
    # names (`Said.people`): whose and what it is the value of (`value_pairing._apart`).
    clauses: Mapping[str, frozenset[str]]
    people: Mapping[str, frozenset[str]]

    @classmethod
    def of(cls, text: str, asks: bool, known: Iterable[str] = (),
           people: frozenset[str] = frozenset()) -> _Reading:
        """`known`: the names said so far (a name is read by its capitals once: "let's use
        memcached" names Memcached when a turn before said "Memcached"); `people`: the
        session's speakers, never a value."""
        names = list(known)
        sentences = [x for x in _SENTENCE.split(text.strip()) if x]
        stated = () if asks else tuple(
            c for x in sentences if not _QUESTION.search(x) for c in _stated_clauses(x))
        values = values_in(text)
        keys = {v.key for v in values} | _named(text, names)
        keys = {k for k in keys if not (k.startswith("name=") and _person(k[5:], people))}
        # "they're $252 not $250": one value said in place of another corrects, with or
        # without the words a change is usually said in.
        instead = not asks and _one_for_another(" ".join(stated), values)
        return cls(
            text=text, keys=frozenset(keys), words=words_in(text),
            stated=stated,
            cue=instead or any(_CHANGE_CUE.search(x) or has_update_language(x)
                               or RETRACTION.search(x) or _CORRECTION.search(x)
                               for x in stated),
            back=any(_BACK.search(x) for x in stated),
            corrects=instead or any(_CORRECTION.search(x) for x in stated),
            clauses=clause_words(text, keys, _names_reader(names)),
            people=_people_of(sentences, keys, people, names))

    @property
    def names(self) -> set[str]:
        return {k for k in self.keys if k.startswith("name=")}

    def about(self, s: Said, value: Value) -> bool:
        """`s` names `value` and is on the same thing: it shares a word (or another name)
        with this turn."""
        return value.key in s.values and bool(
            self.words & set(s.words) or (self.names - {value.key}) & set(s.values))


def _stated_clauses(sentence: str) -> list[str]:
    """The clauses of `sentence` that state rather than weigh. Read per clause: "Replaced
    Jest with Vitest; the globals option keeps old tests running" and "We moved the docs
    site to Vercel, but preview deploys could stay" state a change whatever a later clause
    weighs; but a clause that follows a weighing one comments on what was weighed ("Rapid
    would fix the closing time, but it changes the character of the championship")."""
    out: list[str] = []
    for part in _PARTS.split(sentence):
        for clause in _CLAUSE.split(part):
            if not clause:
                continue
            if _HEDGE.search(clause):
                break  # this clause weighs, and the rest of its part comments on it
            out.append(clause)
    return out


def _named(text: str, known: Iterable[str]) -> set[str]:
    """The known names (`name=<lower>` keys) `text` says in any case, as whole words."""
    return _names_reader(known)(text)


def _names_reader(known: Iterable[str]) -> Callable[[str], set[str]]:
    """`_named` for many texts and the same known names: the names read once."""
    # A short or common word said with a capital once ("Go Joanna!") is not read in lower
    # case ("wherever you go").
    usable = frozenset(k[5:] for k in known if len(k) > 7 and k[5:] not in _STOP)
    if not usable:
        return lambda _text: set()
    pattern = _names_pattern(usable)
    return lambda text: {"name=" + m for m in pattern.findall(text.lower())}


@functools.lru_cache(maxsize=256)
def _names_pattern(names: frozenset[str]) -> re.Pattern[str]:
    """One pattern for a session's known names (longest first), as whole words."""
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![\w-])({alternatives})(?![\w-])")


def _people_of(sentences: list[str], keys: Iterable[str], people: frozenset[str],
               known: Iterable[str]) -> dict[str, frozenset[str]]:
    """Each key of `keys` -> the speakers (`people`) named, with a capital, in the first
    sentence it is said in; keys whose sentence names none are left out."""
    if not people:
        return {}
    reader = _names_reader(known)
    out: dict[str, frozenset[str]] = {}
    for sentence in sentences:
        named = frozenset(p for p in people if re.search(
            rf"(?<![\w-]){re.escape(p.capitalize())}(?![\w-])", sentence))
        if not named:
            continue
        for key in (value_keys(sentence) | reader(sentence)) & set(keys):
            out.setdefault(key, named)
    return out


def _person(name: str, people: frozenset[str]) -> bool:
    return any(name.startswith(p) or p.startswith(name) for p in people)


def _strong(key: str) -> bool:
    """A value specific enough that every turn carrying it is on the thing it was the value
    of: a name, a version, a path, a time, a date, an amount with its unit, currency or
    label. A bare count or a weekday is not ("3", "Friday")."""
    kind = key.partition("=")[0]
    return kind in ("name", "version", "path", "time", "date") or (
        kind.startswith("amount:") and kind != "amount:")


def _stale(keys: Iterable[str], gone: dict[str, str],
           successors: dict[str, list[str]], text: str) -> str | None:
    """The first strong value of `keys` moved on from with none of its successors in
    `keys` (the turn carries only the old value), or None. A value that ended with no
    successor (dropped, cancelled) is not stale in a text that says it ended or what
    holds instead ("we're not shipping Windows", "windows users can stay on 3.1.4")."""
    mine = set(keys)
    for key in sorted(mine):
        after = successors.get(key, ())
        if key in gone and _strong(key) and not mine & set(after) and (
                after or not (_ends(text) or _KEEP.search(text))):
            return key
    return None


def _ended(text: str, keys: Iterable[str]) -> list[str]:
    """The keys of `keys` a clause of `text` (`value_clauses._CLAUSE`) names (by its words,
    names in any case) and says ends (`_ends`)."""
    wanted = set(keys)
    return sorted({key for clause in CLAUSE.split(text) if clause and _ends(clause)
                   for key in (value_keys(clause) | _named(clause, wanted)) & wanted})


def _ends(text: str) -> bool:
    return bool(_DROPS.search(text) or RETRACTION.search(text) or _NOT.search(text))


def step(lineage: Lineage, turn_id: str, text: str, *, asks: bool = False,
         people: frozenset[str] = frozenset()) -> Step:
    """`text` (turn `turn_id`) applied to `lineage`. `asks`: the turn is a question (it
    never moves on from anything; naming a gone value only, it is history itself);
    `people`: the session's speakers (their names are never values)."""
    earlier = lineage.said
    said_before = _said_before(earlier)
    turn = _Reading.of(text, asks, (k for k in said_before if k[:5] == "name="), people)
    gone = dict(lineage.gone)
    successors = {k: list(v) for k, v in lineage.successors.items()}
    history: dict[str, str] = {}
    restored: list[str] = []
    if turn.cue:
        known = said_before
        # A value raised in the last few turns that has replaced nothing yet is still new
        # to the turn that takes it up: a change is often said over two turns ("let's say
        # $550" ... "Updated: budget $550"; "what about the Glasshouse?" ... "switch the
        # venue to the Glasshouse"), and the turn that confirms it names what it is about.
        fresh = _fresh(turn.text, turn.keys, earlier, gone, successors)
        old = {v for v in _keyed(turn.keys) if v.key in known and v.key not in fresh}
        new = {v for v in _keyed(turn.keys) if v.key not in known or v.key in fresh}
        # A change said within the turn, both values new ("we run on Node 20. let's bump to
        # Node 22"): the first is gone from here on.
        for o in new:
            for n in new:
                if _same_kind(o, n) and o.key not in gone and _from_to(turn.text, o, n):
                    gone[o.key] = turn_id
                    successors[o.key] = [n.key]
        # A revert: a value moved on from, named again with "back to" and the like.
        back_said = " ".join(x for x in turn.stated if _BACK.search(x))
        revived = {v for v in old if v.key in gone and v.key in _keys_in(back_said, known)
                   } if turn.back else set()
        for value in revived:
            restored += _revert(value, turn_id, earlier, gone, successors, history)
        moves: list[tuple[Value, set[str], bool]] = []
        for o, pairs_new, loose in _pairs(turn, old - revived, new, earlier, fresh):
            if o.key in gone and (o.key not in turn.keys
                                  or set(successors.get(o.key, ())) & turn.keys):
                # Replaced before: the new value replaces what holds now, the values that
                # replaced it ("250 g" went for "200 g"; "it's 220 g" replaces the 200),
                # unless the turn names them beside it.
                if not set(successors.get(o.key, ())) & turn.keys:
                    moves += [(h, pairs_new, loose) for h in _holding(o.key, gone, successors)
                              if h.key not in turn.keys and any(
                                  _same_kind(h, v) for v in _keyed(pairs_new))]
                continue
            moves.append((o, pairs_new, loose))
        for o, pairs_new, loose in moves:
            if o.key in gone:
                continue
            gone[o.key] = turn_id
            successors[o.key] = sorted(
                k for k in pairs_new if any(_same_kind(o, v) or _corrected_by(o, v, turn)
                                            for v in _keyed([k]))) or sorted(pairs_new)
            # A bare count said to be wrong ("400 is too aggressive", "no wait, 14") is
            # gone from the recent turns that carry it, whatever their words.
            said_wrong = o.kind == "amount:" and (
                turn.corrects or _dismissed(turn.text, o) or _negated(turn.text, o))
            recent = {s.turn_id for s in earlier[-_RECENT:]} if said_wrong else set()
            for s in earlier:
                # A strong value is gone wherever it was said without its successor; a
                # weak one only on the same thing.
                if (turn.about(s, o) or ((loose or _strong(o.key) or s.turn_id in recent)
                                         and o.key in s.values)) \
                        and not (set(s.values) & pairs_new):
                    history[s.turn_id] = turn_id
    if not history and not (turn.cue and turn.back) and not (turn.cue and _new_of_kind(
            turn, earlier)):
        # It names a value moved on from and not what replaced it (the config line, the
        # question about it, the complaint): history as soon as it is said.
        old_key = _stale(turn.keys, gone, successors, text)
        if old_key is not None:
            history[turn_id] = gone[old_key]
    # What each name is the value of, from the clauses that state (a question's names are
    # asked about, not set: "TTL of 30 minutes on session keys?").
    named = _names_by_sentence(" ".join(x for x in _SENTENCE.split(text.strip())
                                        if x and not _QUESTION.search(x)), turn.keys)
    if not asks:
        _by_names(turn, turn_id, named, earlier, said_before, gone, successors, history)
    said = Said(turn_id=turn_id, values=sorted(turn.keys), words=sorted(turn.words),
                named=named, weighs=asks or bool(_PROPOSES.search(text) or _HEDGE.search(text)),
                ends=_ends(text),
                ended=_ended(text, turn.keys),
                clauses={k: sorted(w) for k, w in turn.clauses.items()},
                people={k: sorted(p) for k, p in turn.people.items()})
    lineage = Lineage(said=[*earlier, said][-MAX_SAID:], gone=gone, successors=successors)
    return Step(lineage, history, tuple(t for t in restored if t not in history))


def _holding(key: str, gone: Mapping[str, str],
             successors: Mapping[str, list[str]]) -> list[Value]:
    """The values that hold now in place of `key`, a value moved on from: its successors,
    and theirs where they went in turn."""
    seen: set[str] = set()
    frontier: list[str] = [key]
    out: list[Value] = []
    while frontier:
        k = frontier.pop()
        if k in seen:
            continue
        seen.add(k)
        if k in gone:
            frontier.extend(successors.get(k, ()))
        elif k != key:
            out.extend(_keyed([k]))
    return sorted(out, key=lambda v: v.key)


def _fresh(text: str, keys: frozenset[str], earlier: list[Said], gone: dict[str, str],
           successors: dict[str, list[str]]) -> dict[str, int]:
    """The keys of `keys` (said in `text`) first said within the last `_FRESH` turns that
    neither went nor replaced anything since, and that `text` does not say are wrong
    ("not 45", "400 is too aggressive") nor names beside a value of their kind never said
    before, each -> where it was first said."""
    start = max(0, len(earlier) - _FRESH)
    before = {k for s in earlier[:start] for k in s.values}
    adopted = {k for after in successors.values() for k in after}
    out: dict[str, int] = {}
    for index in range(start, len(earlier)):
        for k in earlier[index].values:
            if k in keys and k not in out and k not in before and k not in gone \
                    and k not in adopted:
                out[k] = index
    # Beside a value never said of its kind, it is the old one ("standup is at 10:15 from
    # monday. 9:30 was brutal"), unless named first and not said to go: then the two are
    # values of two things ("200 g/day, so 100 g per meal").
    unsaid = {v for v in _keyed(keys) if not any(v.key in s.values for s in earlier)}
    return {k: i for k, i in out.items() if not any(
        _negated(text, v) or _dismissed(text, v)
        or any(_same_kind(v, u) and not (_named_before(text.lower(), v, u)
                                          and not _contrasted(text, v, u)) for u in unsaid)
        for v in _keyed([k]))}


def _said_before(earlier: list[Said]) -> set[str]:
    """Every value key the remembered turns said."""
    out: set[str] = set()
    for s in earlier:
        out.update(s.values)
    return out


def _names_by_sentence(text: str, keys: Iterable[str]) -> dict[str, list[str]]:
    """Each name key of `keys` -> the words of the first clause (or list line) saying it
    ("logs in ELK, metrics in Prometheus": ELK is the logs' value, not the metrics')."""
    names = [k for k in keys if k.startswith("name=")]
    out: dict[str, list[str]] = {}
    for sentence in re.split(r"(?<=[.!?;,])\s+|\n+|\s+-\s+", text):
        lowered = sentence.lower()
        for key in names:
            if key not in out and re.search(
                    rf"(?<![\w-]){re.escape(key[5:])}(?![\w-])", lowered):
                out[key] = sorted(words_in(sentence) - {key[5:]})
    return out


def _by_names(turn: _Reading, turn_id: str, named: dict[str, list[str]],
              earlier: list[Said], known: set[str], gone: dict[str, str],
              successors: dict[str, list[str]], history: dict[str, str]) -> None:
    """Names put in place of others (`_SWITCH_TO`), or alternatives turned down
    (`_DECIDED_KEEP`), read per sentence: the old names are those said earlier in a sentence
    sharing a word with the switching one; the turned-down ones are those the keeping turn
    names beside the kept one, said first after it."""
    first_said: dict[str, int] = {}

    def first(key: str) -> int:
        """Where `key` was said first (read once per turn, when a clause needs it)."""
        if not first_said:
            for index, s in enumerate(earlier):
                for value in s.values:
                    first_said.setdefault(value, index)
        return first_said.get(key, -1)

    for sentence in (x for x in _SENTENCE.split(turn.text.strip())
                     if x and not _QUESTION.search(x)):
        keys = set(_names_by_sentence(sentence, turn.keys))
        if not keys and not _DROPS.search(sentence):
            continue
        # What the sentence is about: its words besides its names and its change words.
        words = words_in(_CHANGE_CUE.sub(" ", sentence)) - {
            k[5:] for k in keys}
        if (_SWITCH_TO.search(sentence) or (_SETS.search(sentence) and not _ADDS.search(
                sentence) and not _DROPS.search(sentence))) and not _HEDGE.search(sentence):
            new = {k for k in keys if k not in gone}
            if not new or not words or new != keys:
                # It names what it moves on from ("from ELK to Loki"): `_pairs` read it.
                continue
            # Not a name the turn says holds ("Alpen stays"), nor one of this sentence's;
            # one its other sentences name in passing ("I'll port the 14 Cypress specs")
            # is still the old one.
            held = keys | {k for x in _SENTENCE.split(turn.text.strip()) if _KEEP.search(x)
                           for k in _names_by_sentence(x, turn.keys)}
            # (On the same thing by a word that says what a value is of: not "down" of
            # "shifting them down to the River paddock" and "write that down".)
            old = {k for s in earlier for k, w in s.named.items()
                   if k not in held and k not in gone and (words & set(w)) - _NOT_OWNER}
            for key in old:
                # What replaced it: the new names not said in its clause before (a word of
                # its own name, "Secrets" of "AWS Secrets Manager", tells no turn apart).
                beside = {k for k in new for s in earlier
                          if _stem(k[5:]) in s.named.get(key, ())}
                _gone(key, new - beside or new, turn_id, earlier, gone, successors, history)
        elif _DROPS.search(sentence) and not _HEDGE.search(sentence):
            adopted = {k for after in successors.values() for k in after}
            for clause in re.split(r"[,;]\s+|\s+but\s+|\s+and\s+", sentence):
                dropped = _DROPS.search(clause)
                if dropped is None or _NOT_BEFORE.search(clause[:dropped.start()]):
                    continue  # "don't ever forget that ..." ends nothing
                # What it ends is named after the verb ("GP says ... no longer taking the
                # cetirizine": the cetirizine), or right before a passive one ("Webpack
                # removed").
                ended = clause[dropped.end():]
                if _PASSIVE.match(dropped.group(0)) and not _SUBJECT.search(
                        clause[:dropped.start()]):
                    ended = clause[:dropped.start()] + " " + ended
                # Any value said before ends so ("forget the 6am idea"), not one a number
                # drops to ("ingest drops to 300GB/day").
                values = set() if re.match(r"\s*(?:to|by)\b", ended) else {
                    k for k in value_keys(ended) & turn.keys if _strong(k)}
                found = set(_names_by_sentence(ended, keys)) | values
                if not found and _CALLED_OFF.match(dropped.group(0)) and not re.search(
                        r"[\w.]$", clause[:dropped.start()]):
                    # A thing that ends without a name of its own ("after-party
                    # cancelled"): the names said of it end with it, those said before in a
                    # clause with its words ("after-party at Velvet Lounge from 23:00"; its
                    # times are left to what a question about the evening reads of them).
                    thing = words_in(ended)
                    found = {k for s in earlier for k, w in s.clauses.items()
                             if thing and thing <= set(w) and k.startswith("name=")}
                for key in found:
                    if key in known and key not in gone and key not in adopted:
                        # A turn that itself said it ends ("we're not shipping Windows")
                        # is the answer, not history.
                        _gone(key, set(), turn_id, [x for x in earlier if not (
                            key in x.ended if x.clauses else x.ends)], gone,
                              successors, history)
        elif _DECIDED_KEEP.search(sentence):
            clause = next(c for c in re.split(r"[,;]\s+|\s+but\s+", sentence)
                          if _DECIDED_KEEP.search(c))
            kept = {k for k in _names_by_sentence(clause, keys) if k in known}
            if not kept:
                continue
            start = min(first(k) for k in kept)
            # The alternatives: raised after the kept value, first by a turn that weighed
            # or proposed them ("nadia keeps pushing EKS", "should we switch to Kerrygold?").
            adopted = {k for after in successors.values() for k in after}
            # Named in the keeping turn, or raised since the kept value was last said, by a
            # turn that weighed them ("Vermentino from Fattoria Lupi" ... "what if we tried
            # the Verdicchio?" ... "Vermentino stays").
            last = max(i for i, s in enumerate(earlier) if kept & set(s.values))
            raised = {k for s in earlier[last + 1:] if s.weighs for k in s.values}
            rivals = {k for k in turn.keys | raised if k.startswith("name=") and k not in kept
                      and first(k) > start and k not in gone
                      and k not in adopted and earlier[first(k)].weighs
                      and not _contains(k, kept)}
            for key in rivals:
                _gone(key, kept, turn_id, earlier, gone, successors, history)


# What ends a thing for good ("after-party cancelled", "the trip is called off"), not
# what stops some of it ("a node loss drops those sessions").
_CALLED_OFF = re.compile(r"cancel|call|scrap|withdr", re.IGNORECASE)


def _contains(key: str, others: set[str]) -> bool:
    text = key[5:]
    return any(text.startswith(o[5:]) or o[5:].startswith(text) for o in others)


def _gone(key: str, new: set[str], turn_id: str, earlier: list[Said], gone: dict[str, str],
          successors: dict[str, list[str]], history: dict[str, str]) -> None:
    gone[key] = turn_id
    successors[key] = sorted(new)
    for s in earlier:
        if key in s.values and not set(s.values) & new:
            history[s.turn_id] = turn_id


def _new_of_kind(turn: _Reading, earlier: list[Said]) -> bool:
    """Whether the turn names a value not said before (it may be setting something)."""
    known = {k for s in earlier for k in s.values}
    return any(k not in known for k in turn.keys)


def retire(lineage: Lineage, old_turn: str, by_turns: Iterable[str], turn_id: str,
           people: frozenset[str] = frozenset()) -> tuple[Lineage, dict[str, str]]:
    """What another rule decided (the slot rules: `old_turn` is history, replaced by
    `by_turns`) read as values: each strong value of the old turn that the replacing turns
    do not carry, beside a new value of the same kind they brought, is gone, and every
    turn said carrying it without its successor is history. Returns the lineage and the
    turns made history (turn id -> `turn_id`)."""
    said = {s.turn_id: s for s in lineage.said}
    old = said.get(old_turn)
    by = [said[t] for t in by_turns if t in said]
    if old is None or not by:
        return lineage, {}
    new_keys = {k for s in by for k in s.values
                if not (k.startswith("name=") and _person(k[5:], people))}
    dropped = _keyed(k for k in old.values if k not in new_keys and _strong(k)
                     and not (k.startswith("name=") and _person(k[5:], people)))
    brought_keys = {k for k in new_keys if k not in old.values}
    brought = _keyed(brought_keys)
    # Several values of a kind in the old statement ("logs in ELK, metrics in Prometheus";
    # "the swap at 10:00, the meeting at 14:30"): the new one replaced those said on the
    # same thing, the ones whose clause shares a word with the new value's clause. When
    # nothing tells, every one of them (a name: none, the names of a list are of different
    # things).
    paired = {v for v in dropped if not _one_of_its_kind(v, old) and _paired_by_clause(
        v, old, [(n, s) for s in by for n in _keyed(s.values)
                 if n.key in brought_keys and _same_kind(v, n)])}
    # A kind the clauses or the new statement tell (it names the old value it replaces:
    # "11:00 instead of 10:00"): only the values paired go.
    told = {v.kind for v in paired} | {v.kind for v in _keyed(old.values) if v.key in new_keys}
    dropped = {v for v in dropped if _one_of_its_kind(v, old) or v in paired or (
        v.kind != "name" and v.kind not in told)}
    gone = dict(lineage.gone)
    successors = {k: list(v) for k, v in lineage.successors.items()}
    history: dict[str, str] = {}
    for o in dropped:
        if o.key in gone:
            continue
        news = {n.key for n in brought if _same_kind(o, n)}
        if not news:
            continue
        gone[o.key] = turn_id
        successors[o.key] = sorted(news)
        for s in lineage.said:
            if o.key in s.values and not set(s.values) & news and s.turn_id not in by_turns:
                history[s.turn_id] = turn_id
    return lineage.model_copy(update={"gone": gone, "successors": successors}), history


def _one_of_its_kind(value: Value, said: Said) -> bool:
    """`value` is the only strong value of its kind `said` carries (names: the only name)."""
    return sum(1 for k in _keyed(s for s in said.values if _strong(s))
               if k.kind == value.kind) <= 1


def _paired_by_clause(value: Value, old: Said, news: list[tuple[Value, Said]]) -> bool:
    """Whether the clause `value` is said in (in `old`) shares a word, besides the values,
    with the clause a new value of its kind is said in (each new value with its turn)."""
    mine = set(old.clauses.get(value.key, ())) - own_words(value.key)
    return any(mine & (set(s.clauses.get(n.key, ())) - own_words(n.key)) for n, s in news)


def _revert(value: Value, turn_id: str, earlier: list[Said], gone: dict[str, str],
            successors: dict[str, list[str]], history: dict[str, str]) -> list[str]:
    """`value` is current again: what replaced it (the values of its kind the replacing turn
    brought) goes, with the turns carrying them. Returns the turns current again."""
    replacer = gone.pop(value.key)
    successors.pop(value.key, None)
    by = next((s for s in earlier if s.turn_id == replacer), None)
    if by is None:
        return []
    for successor in _keyed(by.values):
        if not _same_kind(successor, value):
            continue
        gone[successor.key] = turn_id
        successors[successor.key] = [value.key]
        for s in earlier:
            if successor.key in s.values and (
                    s.turn_id == replacer or value.key not in s.values):
                history[s.turn_id] = turn_id
    return [s.turn_id for s in earlier if value.key in s.values
            and not any(k in gone for k in s.values if k != value.key)]


def _keys_in(text: str, known: Iterable[str]) -> frozenset[str]:
    """The value keys `text` names (known names in any case)."""
    return value_keys(text) | _named(text, {k for k in known if k.startswith("name=")})


def _said_of(lineage: Lineage, turn_id: str) -> Said | None:
    """What the lineage remembers of turn `turn_id` (None: too old, or never read)."""
    return next((s for s in reversed(lineage.said) if s.turn_id == turn_id), None)


def parts(lineage: Lineage, turn_id: str, people: frozenset[str] = frozenset(),
          by: Iterable[str] = ()) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Which values of turn `turn_id` went and which it still carries, each -> the words of
    the clause it is said in (a gone value's with the words of the values that replaced it:
    a question naming the new value is about the old one too). The values gone: moved on
    from, with none of their successors in the turn; the ones kept: its other strong values
    (not a speaker's name) read in a clause of their own (a value said in a gone value's
    clause is of the same thing: "AWS in us-east-1"), and not on what the turns that
    replaced it (`by`) are about unless they say it again (the change may be to that one,
    read wrongly off the values: "P2" kept while "priority is P1 now" replaced the turn).
    Nothing known of the turn: ({}, {})."""
    said = _said_of(lineage, turn_id)
    if said is None:
        return {}, {}
    values = set(said.values)
    gone: dict[str, list[str]] = {}
    kept: dict[str, list[str]] = {}
    clause: dict[str, frozenset[str]] = {}
    for key in said.values:
        if key.startswith("name=") and _person(key[5:], people):
            continue
        if key in said.clauses:
            clause[key] = frozenset(said.clauses[key])
        after = lineage.successors.get(key, [])
        if key in lineage.gone and not set(after) & values:
            words = set(clause.get(key, frozenset(said.words)) - own_words(key))
            words.update(w for k in after for w in own_words(k))
            gone[key] = sorted(words)
    if not gone:
        return {}, {}
    gone_clauses = {clause[k] for k in gone if k in clause}
    later = [s for s in lineage.said if s.turn_id in set(by)]
    later_words = frozenset(w for s in later for w in s.words)
    later_values = {k for s in later for k in s.values}
    if any(not (clause.get(k, frozenset()) - own_words(k)) & later_words for k in gone):
        # The turns that replaced it do not talk about what a gone value was the value of:
        # which of its values the change was about is not read with confidence.
        return gone, kept
    for key in said.values:
        around = clause.get(key, frozenset()) - own_words(key)
        if key in clause and key not in gone and _strong(key) \
                and clause[key] not in gone_clauses \
                and (key in later_values or not around & later_words):
            kept[key] = sorted(around)
    return gone, kept


def withdrawn_parts(lineage: Lineage, turn_id: str, by: Iterable[str],
                    people: frozenset[str] = frozenset()
                    ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """`parts` for a statement a retraction withdrew: the values said in a clause that
    shares a word with the retraction (`by`: its turns) went, the other strong values it
    carries are kept ("club run sun: 9am clock tower, 80km ... jersey order closes fri",
    then "jersey order cancelled": the meeting time still holds). Both empty unless some
    value went and some is kept: then the retraction withdrew the statement whole."""
    said = _said_of(lineage, turn_id)
    if said is None:
        return {}, {}
    wanted = set(by)
    later_words = frozenset(w for s in lineage.said if s.turn_id in wanted for w in s.words)
    if not later_words:
        return {}, {}
    gone: dict[str, list[str]] = {}
    kept: dict[str, list[str]] = {}
    for key in said.values:
        if key not in said.clauses or (key.startswith("name=") and _person(key[5:], people)):
            continue
        around = set(said.clauses[key]) - own_words(key)
        if around & later_words or own_words(key) & later_words:
            gone[key] = sorted(around)
        elif _strong(key):
            kept[key] = sorted(around)
    return (gone, kept) if gone and kept else ({}, {})
