"""The change suite: does recall lead with the current state after something changed?

Pure: no I/O, no clock, no hivemem runtime. The conversations are hand-written data
(`hivemem/evaluation/data/change_*.json`, listed in `hivemem.evaluation.change_parts` and
played by `hivemem.evaluation.change_runner`); this module parses them, judges one recalled
context against a probe, and scores a run.

Schema: version 1 (the legacy file: every probe is asked at the end of its conversation) and
version 2 (each probe may say `after_turn`: it is asked after the first N turns were said,
1 <= N <= len(turns); None or absent means at the end). Every expected and stale string must
have been said (whole words, any case) in a turn at or before the probe's point, so that a
probe never asks for what the memory cannot know yet.

Every probe asks about one slot (the team's database, Sam's diet, the Friday freeze...) after
the conversation changed it, or pointedly did not. `expected` are the strings a correct
context must contain (whole words, case-insensitive), `stale` the values that are no longer
true. An item that carries an expected value counts as current even when it also names a
stale one ("we switch from PostgreSQL to MySQL" states the change itself).

Two verdicts per probe, both about what a user would see in the prompt:

- **strict**: every expected string appears somewhere in the context and, unless the probe
  asks about the past (`history`), no item carries a stale value without an expected one;
- **ranked**: some item carries an expected value and the first such item ranks above
  every item that carries only a stale value (a context with no stale item passes as soon
  as one expected value is in it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hivemem.domain.ids import ID_PATTERN, ID_RULE
from hivemem.evaluation.runs import RunInfo

# The order of the report's columns: /work/suite/SPEC.md's order (the writers' brief).
Category = Literal[
    "supersede_update_words",
    "supersede_plain",
    "numbers_dates",
    "retraction",
    "revert",
    "correction_chain",
    "addition",
    "non_change",
    "speakers",
    "long_gap",
    "multi_value",
    "history",
]
CATEGORIES: tuple[str, ...] = get_args(Category)
MIN_TURNS, MAX_TURNS = 10, 60
VERSIONS = (1, 2)


class ChangeTurn(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Literal["user", "assistant"]
    content: str
    # who spoke, when the conversation has several people or agents ("sam", "planner");
    # an agent id as ingest takes it, so a suite that parses also plays
    agent: str | None = None

    @field_validator("agent")
    @classmethod
    def _agent_id(cls, value: str | None) -> str | None:
        if value is not None and not ID_PATTERN.fullmatch(value):
            raise ValueError(f"agent {value!r}: {ID_RULE}")
        return value


class ChangeProbe(BaseModel):
    # extra="forbid": a misspelt key ("afterturn") would otherwise silently mean "at the end"
    model_config = ConfigDict(frozen=True, extra="forbid")

    query: str
    # asked after the first N turns were said; None: at the end of the conversation
    after_turn: int | None = Field(default=None, ge=1)
    expected: tuple[str, ...] = Field(min_length=1)
    stale: tuple[str, ...] = ()
    category: Category
    history: bool = False

    def point(self, turns: int) -> int:
        """After how many turns of a `turns`-long conversation this probe is asked."""
        return turns if self.after_turn is None else self.after_turn

    def at_end(self, turns: int) -> bool:
        """Asked once the whole conversation was said (the only probes reflected mode asks)."""
        return self.point(turns) == turns

    @model_validator(mode="after")
    def _disjoint(self) -> ChangeProbe:
        overlap = {e.lower() for e in self.expected} & {s.lower() for s in self.stale}
        if overlap:
            raise ValueError(f"values both expected and stale: {sorted(overlap)}")
        return self


class ChangeConversation(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    category: Category
    turns: tuple[ChangeTurn, ...]
    probes: tuple[ChangeProbe, ...] = Field(min_length=1)

    @field_validator("turns")
    @classmethod
    def _length(cls, turns: tuple[ChangeTurn, ...]) -> tuple[ChangeTurn, ...]:
        if not MIN_TURNS <= len(turns) <= MAX_TURNS:
            raise ValueError(f"{len(turns)} turns, want {MIN_TURNS}-{MAX_TURNS}")
        return turns

    @model_validator(mode="after")
    def _said_by_their_point(self) -> ChangeConversation:
        for index, probe in enumerate(self.probes):
            point = probe.point(len(self.turns))
            if point > len(self.turns):
                raise ValueError(f"probes[{index}].after_turn: {point} is past the last turn "
                                 f"({len(self.turns)})")
            said = [t.content for t in self.turns[:point]]
            for field, values in (("expected", probe.expected), ("stale", probe.stale)):
                for value in values:
                    if not any(mentions(text, value) for text in said):
                        raise ValueError(f"probes[{index}].{field}: {value!r} is not said "
                                         f"in the first {point} turns")
        return self

    @property
    def session_id(self) -> str:
        return f"change-{self.id}"


class ChangeSuite(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: int
    conversations: tuple[ChangeConversation, ...]

    @field_validator("version")
    @classmethod
    def _known_version(cls, version: int) -> int:
        if version not in VERSIONS:
            raise ValueError(f"version {version}, want one of {VERSIONS}")
        return version

    @model_validator(mode="after")
    def _unique_ids(self) -> ChangeSuite:
        ids = [c.id for c in self.conversations]
        if len(ids) != len(set(ids)):
            raise ValueError("conversation ids must be unique")
        return self

    def select(self, ids: Iterable[str] | None = None,
               categories: Iterable[str] | None = None) -> ChangeSuite:
        """A sub-suite: these conversation ids and/or conversations of these categories."""
        wanted = set(ids) if ids is not None else None
        cats = set(categories) if categories is not None else None
        chosen = tuple(
            c for c in self.conversations
            if (wanted is None or c.id in wanted) and (cats is None or c.category in cats)
        )
        return self.model_copy(update={"conversations": chosen})


def parse_suite(raw: Mapping[str, Any]) -> ChangeSuite:
    """Validate the suite's JSON document (pydantic raises on any malformed conversation)."""
    return ChangeSuite.model_validate(raw)


# --------------------------------------------------------------------------------------
# The judge
# --------------------------------------------------------------------------------------


def mentions(text: str, value: str) -> bool:
    """`value` occurs in `text` as whole words, case-insensitively."""
    pattern = r"(?<![A-Za-z0-9])" + re.escape(value) + r"(?![A-Za-z0-9])"
    return re.search(pattern, text, flags=re.IGNORECASE) is not None


class ChangeVerdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    strict: bool
    ranked: bool
    rank: int | None = None  # 1-based rank of the first item carrying an expected value
    stale_rank: int | None = None  # 1-based rank of the first item carrying only stale values
    missing: tuple[str, ...] = ()  # expected strings found in no item
    stale_items: int = 0  # items carrying a stale value and no expected one
    items: int = 0


def judge_change(probe: ChangeProbe, recalled: Sequence[str]) -> ChangeVerdict:
    """Judge one recalled context (item texts, best first, already within the budget)."""
    current = [any(mentions(t, e) for e in probe.expected) for t in recalled]
    stale_only = [
        not cur and any(mentions(t, s) for s in probe.stale)
        for t, cur in zip(recalled, current, strict=True)
    ]
    rank = next((i for i, cur in enumerate(current, 1) if cur), None)
    stale_rank = next((i for i, st in enumerate(stale_only, 1) if st), None)
    missing = tuple(e for e in probe.expected if not any(mentions(t, e) for t in recalled))
    ranked = rank is not None and (stale_rank is None or rank < stale_rank)
    # A question about the past wants the old value: stale items are then not wrong.
    strict = not missing and (probe.history or stale_rank is None)
    return ChangeVerdict(strict=strict, ranked=ranked, rank=rank, stale_rank=stale_rank,
                         missing=missing, stale_items=sum(stale_only), items=len(recalled))


# --------------------------------------------------------------------------------------
# Results and scores
# --------------------------------------------------------------------------------------


# How a probe is asked. reflected: the whole conversation is said, the session closed, every
# episode reflected, then only the probes at the end are asked. live: the turns are said one
# by one and every probe is asked at its point, once the turns so far are embedded (no close,
# no wait for reflection).
Mode = Literal["reflected", "live"]
MODES: tuple[str, ...] = get_args(Mode)
# Which file a conversation comes from: tuning (change_live.json, the part one may look at),
# heldout (change_heldout.json, never looked at while tuning), legacy (change_suite.json, v1).
Part = Literal["tuning", "heldout", "legacy"]
PARTS: tuple[str, ...] = get_args(Part)


class ChangeProbeResult(BaseModel):
    system: str
    conversation: str
    category: Category
    query: str
    after_turn: int | None = None  # the turns said when it was asked
    expected: tuple[str, ...]
    stale: tuple[str, ...]
    history: bool
    strict: bool
    ranked: bool
    rank: int | None = None
    stale_rank: int | None = None
    missing: tuple[str, ...] = ()
    items: int = 0
    used_tokens: int = 0
    recall_ms: float = 0.0
    context: list[str] = Field(default_factory=list)  # the recalled texts, best first


def probe_result(
    system: str, conversation: ChangeConversation, probe: ChangeProbe, texts: Sequence[str],
    used_tokens: int, recall_ms: float,
) -> ChangeProbeResult:
    """Judge one recall for `probe`: the same function for every system."""
    verdict = judge_change(probe, texts)
    return ChangeProbeResult(
        system=system, conversation=conversation.id, category=probe.category,
        query=probe.query, after_turn=probe.point(len(conversation.turns)),
        expected=probe.expected, stale=probe.stale, history=probe.history,
        strict=verdict.strict, ranked=verdict.ranked, rank=verdict.rank,
        stale_rank=verdict.stale_rank, missing=verdict.missing, items=verdict.items,
        used_tokens=used_tokens, recall_ms=round(recall_ms, 3), context=list(texts),
    )


def asked_probes(conversation: ChangeConversation, mode: str) -> list[ChangeProbe]:
    """The probes `mode` asks, in the order they are asked (by point, then as written):
    live asks them all; reflected only those at the end (a reflected memory of a prefix
    would need the prefix replayed and closed, which is another experiment)."""
    n = len(conversation.turns)
    chosen = [p for p in conversation.probes if mode == "live" or p.at_end(n)]
    return sorted(chosen, key=lambda p: p.point(n))


class ConversationPlay(BaseModel):
    """What playing one conversation left behind (for reading results, not scored)."""

    conversation: str
    turns: int
    episodes: int | None = None
    facts: int | None = None
    play_ms: float = 0.0


class ChangeRun(RunInfo):
    mode: Mode = "reflected"
    part: Part = "legacy"
    probes: list[ChangeProbeResult] = Field(default_factory=list)
    conversations: list[ConversationPlay] = Field(default_factory=list)


def run_record(run: ChangeRun, show_heldout: bool = False) -> dict[str, Any]:
    """A run as written to results files. The held-out part's per-probe results (contexts,
    failures) are withheld unless asked for: one tunes on the rest and only reads the
    held-out part's scores."""
    if run.part == "heldout" and not show_heldout:
        return run.model_dump(mode="json", exclude={"probes"}) | {
            "probes": "withheld: the held-out part is reported as scores only"}
    return run.model_dump(mode="json")


class Score(BaseModel):
    probes: int = 0
    strict: int = 0
    ranked: int = 0

    @property
    def strict_rate(self) -> float | None:
        return self.strict / self.probes if self.probes else None

    @property
    def ranked_rate(self) -> float | None:
        return self.ranked / self.probes if self.probes else None

    def add(self, result: ChangeProbeResult) -> None:
        self.probes += 1
        self.strict += result.strict
        self.ranked += result.ranked


class SystemScore(BaseModel):
    system: str
    version: str
    reflector: str
    mode: Mode = "reflected"
    part: Part = "legacy"
    overall: Score
    categories: dict[str, Score]


def score(run: ChangeRun) -> SystemScore:
    """Strict and ranked counts per probe category and overall."""
    overall = Score()
    categories = {c: Score() for c in CATEGORIES}
    for result in run.probes:
        overall.add(result)
        categories[result.category].add(result)
    return SystemScore(system=run.system, version=run.version, reflector=run.reflector,
                       mode=run.mode, part=run.part, overall=overall,
                       categories={c: s for c, s in categories.items() if s.probes})


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{100 * rate:.0f}%"


def _cell(cell: Score | None) -> str:
    return "-" if cell is None else f"{_pct(cell.strict_rate)} / {_pct(cell.ranked_rate)}"


def markdown_table(scores: Sequence[SystemScore]) -> str:
    """A row per system x mode x part, a column per category, each cell "strict / ranked"
    (percent of that row's probes of the category); the probe counts below, per mode x part
    (every system of a mode and part is asked the same probes)."""
    cats = [c for c in CATEGORIES if any(c in s.categories for s in scores)]
    header = ["system", "mode", "part", "probes", *cats, "overall"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for s in scores:
        cells = [f"{s.system} {s.version}", s.mode, s.part, str(s.overall.probes),
                 *(_cell(s.categories.get(c)) for c in cats), _cell(s.overall)]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Cells: strict / ranked.")
    counted: dict[tuple[str, str], SystemScore] = {}
    for s in scores:
        counted.setdefault((s.mode, s.part), s)
    for (mode, part), s in counted.items():
        lines.append(f"Probes per category, {mode} {part}: "
                     + ", ".join(f"{c} {n.probes}" for c, n in s.categories.items()) + ".")
    return "\n".join(lines) + "\n"
