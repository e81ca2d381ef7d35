"""Which earlier value a turn's new value replaces, and whether the turn says so (pure): the
readings of `hivemem.domain.lineage.step`, tried in order (an old value named beside the
new one, said to be wrong, on the same thing by its words, corrected), and the words that
tell an old value from a kept one ("from", "not", "was", "replaced ... with", the order
the two are named in).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from hivemem.domain.change_words import _KEEP
from hivemem.domain.value_clauses import own_words
from hivemem.domain.value_reading import Value, _keyed, _same_kind, words_in, written


# What pairing reads of the lineage's turns (`hivemem.domain.lineage`: `_Reading` for the
# turn read now, `Said` for one said before), named here so the lineage can import pairing
# without pairing importing it back.
class _Reading(Protocol):
    @property
    def text(self) -> str: ...

    @property
    def keys(self) -> frozenset[str]: ...

    @property
    def words(self) -> frozenset[str]: ...

    @property
    def corrects(self) -> bool: ...

    @property
    def names(self) -> set[str]: ...

    @property
    def clauses(self) -> Mapping[str, frozenset[str]]: ...

    @property
    def people(self) -> Mapping[str, frozenset[str]]: ...


class Said(Protocol):
    @property
    def values(self) -> Sequence[str]: ...

    @property
    def words(self) -> Sequence[str]: ...

    @property
    def clauses(self) -> Mapping[str, Sequence[str]]: ...

    @property
    def people(self) -> Mapping[str, Sequence[str]]: ...


# Words of a clause that say when or that something changes, not what a value is of.
_NOT_OWNER = words_in(
    "january february march april june july august september october november december"
    " moving changing switching switched raised raising lowered lowering increased reduced"
    " bumped pushed postponed delayed rescheduled replaced replacing confirmed booked"
    " instead actually noted starting mondays tuesdays wednesdays thursdays fridays saturdays"
    " sundays weekends nights mornings evenings afternoons around roughly about approximately"
    " nearly almost exactly down back")


def _owner(clauses: Mapping[str, Iterable[str]], people: Mapping[str, Iterable[str]],
           keys: Iterable[str], value: Value) -> tuple[frozenset[str], frozenset[str]]:
    """Whose and what `value` is the value of, in a turn carrying `keys` (its clauses'
    words and the speakers its sentences name, `Said`): the speakers its sentence names and
    the words of its clause, besides the words of the values of its kind and the words that
    say when or that something changes ("Lars, Berlin, CET, core 9-17": Lars's, the core;
    "cattery for June 5-7": the cattery's)."""
    words = set(clauses.get(value.key, ())) - _NOT_OWNER
    for key in keys:
        if key == value.key or key.partition("=")[0] == value.kind:
            words -= own_words(key)
    return frozenset(people.get(value.key, ())), frozenset(words)


def _apart(old: Value, before: Said, new: Value, turn: _Reading, words: bool = True) -> bool:
    """Whether `old` (said in `before`) and `new` (said in `turn`) are values of two owners:
    each names whose or what it is of, and they share none ("Lars: core 9-17" and "Diego
    ... core 8-16"; "broadband install on June 3" and "cattery for June 5-7"). Two values
    of two owners are two slots, never an old and a new one. `words`: by their clauses'
    words too, not only by the speakers named (where nothing else says the two turns are
    on one thing: two turns sharing a word are often on one thing whatever their clauses
    say, "the 9:10 sounds good" and "the 7:40 from King's Cross")."""
    theirs = _owner(before.clauses, before.people, before.values, old)
    mine = _owner(turn.clauses, turn.people, turn.keys, new)
    pairs = zip(theirs, mine, strict=True) if words else [(theirs[0], mine[0])]
    return any(a and b and not a & b for a, b in pairs)


def _pairs(turn: _Reading, old: set[Value], new: set[Value], earlier: Sequence[Said],
           fresh: Mapping[str, int] | None = None) -> list[tuple[Value, set[str], bool]]:
    """The values `turn` moves on from: (old value, the new values' keys, loose: every turn
    carrying it goes, not only those on the same thing by their words). Each reading is
    tried in turn, and one whose pairs all fall (the old values are named beside the new
    ones, kept) leaves the next one to try: "Updated: espresso $16.20/lb, decaf stays
    $15.75/lb" keeps the decaf price and still moves on from the espresso's old one."""
    # A value said before that the turn says stays ("Lucía still secondary", "vice-captain
    # stays Ruby") replaces nothing: it is what holds on, not what comes in.
    new = {n for n in new if not (_said_in(n.key, earlier)
                                  and _KEEP.search(_clause_of(turn.text, n)))}
    # The old value named beside a new one of its kind.
    named = [(o, n) for o in old for n in new if _same_kind(o, n)]
    out = _kept(turn, named, False)
    if not out:
        # The old value said to be wrong beside a new one of its sort ("400 is too
        # aggressive; let's make the threshold 600"): their labels may differ.
        out = _kept(turn, [(o, n) for o in old if _dismissed(turn.text, o) for n in new
                           if o.kind.partition(":")[0] == n.kind.partition(":")[0]], False)
    # A value raised a few turns back replaces only what was said before it was raised.
    raised = fresh or {}

    def older(o: Value, n: Value) -> bool:
        return n.key not in raised or _said_in(o.key, earlier[:raised[n.key]])

    if not out and new:
        # No old value named: a new value of a kind an earlier turn on the same thing set
        # (a turn naming more of its kind than this one brings, "drinks 18:30, dinner
        # 19:30, auction 21:00" against "ends around 22:30", does not say which; as many,
        # "Sat 9-17, Sun 10-14" against "Sat 9-15, Sun 10-16", are replaced as a list).
        brought = {n: sum(1 for m in new if m.kind == n.kind) for n in new}
        # (Sharing a word that says when or that something changes is not being on one
        # thing: "shifting them down to the River paddock" and "drench is Cydectin, write
        # that down".)
        out = _kept(turn, [(o, n) for n in new for s in earlier
                           if (turn.words & set(s.words)) - _NOT_OWNER
                           or turn.names & set(s.values)
                           if 0 < len(c := [o for o in _keyed(s.values) if _same_slot(o, n)
                                            and o.key not in turn.keys and older(o, n)])
                           <= brought[n]
                           # (Never another person's: "Lars: core 9-17", "Diego ... core 8-16".)
                           for o in c if _exact(o) and _exact(n)
                           and not _apart(o, s, n, turn, words=False)],
                    False)
    if not out and new and not named:
        # Nothing on the same thing by its words: a correction ("no wait, 14", "typo, it's
        # $45k") or a change to an exact value replaces the latest value of its kind (not
        # in a turn naming old values beside new ones: it says what it keeps, and not
        # what it replaces).
        pairs = []
        for n in new:
            # Never a name: a person or a title met in passing is not a value corrected.
            if n.kind != "name" and (_exact(n) or turn.corrects):
                # A turn naming several candidates does not say which (its times of
                # departure and arrival): the latest turn naming one does.
                latest = next(((c[0], s) for s in reversed(earlier)
                               if len(c := [o for o in _keyed(s.values) if _corrected_by(o, n, turn)
                                            and o.key not in turn.keys and older(o, n)]) == 1),
                              None)
                # Nor a value of another person or thing ("cattery for June 5-7" is no
                # correction of "broadband install on June 9").
                if latest is not None and not _apart(latest[0], latest[1], n, turn):
                    pairs.append((latest[0], n))
        out = _kept(turn, pairs, True)
    return out


def _same_slot(old: Value, new: Value) -> bool:
    """`_same_kind`, or two counts of one thing named more or less fully: one's label is
    words of the other's ("prod 6", "prod replicaCount raised to 10")."""
    if _same_kind(old, new):
        return True
    a, b = old.kind.partition(":@")[2].split(), new.kind.partition(":@")[2].split()
    return bool(a and b) and old.text != new.text and old.kind.startswith("amount:@") \
        and new.kind.startswith("amount:@") and (set(a) <= set(b) or set(b) <= set(a))


def _kept(turn: _Reading, pairs: list[tuple[Value, Value]],
          loose: bool) -> list[tuple[Value, set[str], bool]]:
    """The pairs of (old, new) value that stand: not an old value the turn names beside the
    new one or keeps, not two names or counts side by side with nothing saying which goes."""
    out = []
    for o, n in pairs:
        if o.key in turn.keys and not _contrasted(turn.text, o, n):
            continue  # named beside the new one, not said to be gone
        if o.key in turn.keys and _KEEP.search(_clause_of(turn.text, o)) \
                and not _negated(turn.text, o):
            continue  # kept ("we stay on Prisma, not Drizzle")
        if o.kind in ("name", "amount:") and not (
                _negated(turn.text, o) or _from_to(turn.text, o, n) or _dismissed(turn.text, o)
                or (loose and turn.corrects)):
            continue  # two names or counts side by side: a change only when it says so
        out.append((o, {m.key for _o, m in pairs}, loose))
    return out


def _said_in(key: str, turns: Iterable[Said]) -> bool:
    return any(key in s.values for s in turns)



def _clause_of(text: str, value: Value) -> str:
    """The clause of `text` naming `value` (the whole text if none does by its words)."""
    probe = value.text.split(" ")[-1]
    return next((x for x in re.split(r"(?<=[.!?;])\s+|\n+|,\s+but\s+", text)
                 if probe in x.lower()), text)


def _corrected_by(old: Value, new: Value, turn: _Reading) -> bool:
    """Whether a correction's `new` value may replace `old`: one kind, or a bare number
    correcting the latest number said ("keep 7 daily snapshots" ... "no wait, 14")."""
    if _same_kind(old, new):
        return True
    return (turn.corrects and new.kind == "amount:" and old.kind.startswith("amount:")
            and "$" not in old.kind and old.text != new.text)


_DISMISSED = r"(?:is|was|are|were|'s)\s+(?:overkill|way too|too|not enough|excessive|a lot)"


def _dismissed(text: str, value: Value) -> bool:
    """ "400 is too aggressive", "14 is overkill": the value is said to be wrong."""
    said = rf"(?<![\w.]){written(value)}(?:\s?(?:%|[a-z]+))?"  # "5% is too little"
    return bool(re.search(rf"{said}\s+{_DISMISSED}\b", text.lower()))


def _exact(value: Value) -> bool:
    """A value precise enough to say what changed by itself (a time, a version, a code, an
    amount with its unit or currency), not a bare count or a name."""
    return value.kind in ("time", "version", "path", "date", "day", "code") or (
        value.kind.startswith("amount:") and value.kind != "amount:")


# What before a value says it is the old one ("from Redis", "not 45", "instead of Jest").
_NEGATED = r"(?:not|no|no longer|instead of|rather than|from|was|were|isn't|wasn't|over)"
# What says a value is not the one ("$252 not $250", "Tuesday, not Monday"): not "from" or
# "was" (a range, "from 9:00 to 17:00", or a remark, "it was 20 last year").
_NOT_THIS = r"(?:not|no longer|instead of|rather than|isn't|wasn't)"


def _one_for_another(text: str, values: Iterable[Value]) -> bool:
    """Whether `text` says one of its values in place of another of the same kind ("they're
    $252 not $250", "the 14th, not the 12th"): a correction, whatever words it is said in."""
    said = list(values)
    return any(_negated(text, v, _NOT_THIS) and any(u != v and _same_kind(u, v) for u in said)
               for v in said)


def _negated(text: str, value: Value, words: str = _NEGATED) -> bool:
    """`value` said after one of `words` ("not $250", "from Redis", "instead of Mr. Haddad")."""
    probe = written(value)
    return bool(re.search(rf"\b{words}\s+(?:the\s+|with\s+)?{_TITLED}[$€£]?{probe}",
                          text.lower()))


def _from_to(text: str, old: Value, new: Value) -> bool:
    """ "from Jenkins to GitHub", "Jenkins -> GitHub", "GitHub instead of Jenkins",
    "replaced Jest with Vitest"."""
    # (A currency sign before either: "$252 not $250".)
    o, n = rf"[$€£]?{written(old)}", rf"[$€£]?{written(new)}"
    lowered = text.lower()
    to = rf"(?<!\w){o}\w*\s*(?:\S+\s+){{0,3}}?(?:to|->|→|=>)\s+(?:the\s+)?{_TITLED}{n}\b"
    instead = rf"(?<!\w){n}\w*,?\s+(?:instead of|over|not)\s+{_TITLED}{o}"
    replaced = (rf"\b(?:replac\w*|swap\w*)\s+(?:the\s+)?{o}\w*\s+(?:with|for)\s+"
                rf"(?:the\s+)?{n}\b")
    return bool(re.search(to, lowered) or re.search(instead, lowered)
                or re.search(replaced, lowered))


# A turn that says what it moves from and to, whatever words it names them by ("switched
# the case from a refund to store credit: $129 + 10% = $141.90").
_FROM_TO = re.compile(r"\bfrom\b.{1,60}?\bto\b|\binstead of\b|\breplac\w* .{1,40}?\bwith\b")
# A person's title between a word and the name it is about ("instead of Mr. Haddad").
_TITLED = r"(?:(?:mr|mrs|ms|mx|dr|prof)\.?\s+)?"


def _contrasted(text: str, value: Value, new: Value | None = None) -> bool:
    """Whether `text` says `value` is the old one: a negation or "from" before it, or
    "was" after it ("9:30 was brutal"), or the turn says it changes at all and does not
    name it before its new value `new` unless it says from what to what ("replaced Jest
    with Vitest"): in "the cleaning moved to 8:45, the reminder to 7:45" 8:45 is the new
    value of one thing and 7:45 of another."""
    lowered = text.lower()
    probe = written(value)
    if re.search(rf"\b{_NEGATED}\s+(?:the\s+)?{_TITLED}[$€£]?{probe}", lowered) or _dismissed(
            text, value):
        return True
    if re.search(rf"{probe}\w*\s+(?:was|were|is out|is gone|no more|anymore)", lowered):
        return True
    if new is not None and _named_before(lowered, value, new) and not (
            _from_to(text, value, new) or _FROM_TO.search(lowered)):
        return False
    return bool(re.search(r"\b(?:not|no longer|anymore|instead|typo|correct\w*|wrong"
                          r"|mistake|chang\w*|mov\w*|switch\w*|replac\w*|push\w*|from)\b",
                          lowered))


def _named_before(lowered: str, value: Value, new: Value) -> bool:
    """Whether `value` is first named before `new` in `lowered` (not known where the words
    are not found as normalised: "6pm" for 18:00, "$45k" for 45000)."""
    at, new_at = _position(lowered, value), _position(lowered, new)
    return at is not None and new_at is not None and at < new_at


def _position(lowered: str, value: Value) -> int | None:
    said = written(value) if value.kind.startswith("amount:") \
        else rf"(?<![\w.]){written(value)}"
    found = re.search(said, lowered)
    return found.start() if found else None
