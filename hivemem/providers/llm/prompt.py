"""The reflection prompt: the task, the schema and the episode, with short id aliases.

Small local models copy whatever concrete value an example shows (a sample fact was stored as
a fact, a sample id was returned as provenance), so the schema shows placeholders only. Turns
and facts are shown as ``t1``/``f1`` instead of 32-character ids: short aliases are copied
back correctly far more often, and `Aliases` maps them back.
"""

from __future__ import annotations

from dataclasses import dataclass

from hivemem.domain.fact import Fact
from hivemem.domain.models import Turn
from hivemem.providers.reflector import ReflectionRequest

MAX_TURN_CHARS = 4000  # a turn's text in the prompt is cut here (turns may be 32 KiB)

SYSTEM_PROMPT = """\
You are the long-term memory of a team of AI agents. You read one episode of a \
conversation (a few consecutive turns) and distil it into durable facts: what an agent \
joining the work later must know to continue it.

Kinds of fact:
- decision: a choice that was made
- constraint: a requirement or limit to respect
- failure: something that was tried and did not work, and why
- goal: what the work is trying to achieve
- preference: how a user or agent wants things done
- fact: any other durable information (names, versions, numbers, places)

Rules:
1. Detect changes first: "switch to", "instead", "no longer", "actually", "changed my mind", \
"not anymore", "replace", "scrap that". The latest statement wins: record the current state, \
and a change replaces the old fact rather than adding a second one beside it.
2. Each fact is one short self-contained sentence taken from what the turns say; it makes \
sense without the conversation. Keep names, numbers and versions exactly. Never invent a fact \
the turns do not state.
3. subject: the slot the fact fills, 1 to 5 lowercase words naming who or what and which \
attribute (the thing the value belongs to, never the value itself). Every version of a fact \
uses the same subject: reuse a known fact's subject when the fact is about the same thing.
4. Skip greetings, thanks, questions, hypotheticals, ideas that were considered but not \
adopted, and anything that only matters for the current turn.
5. source_turn_ids: the short ids (t1, t2, ...) of the turns the fact comes from, exactly as \
shown, without brackets.
6. agent_id: the agent name shown for the turn that stated the fact; null when the turn \
shows only a role (user, assistant, system, tool).
7. confidence: from 0 to 1; about 0.9 when stated plainly, 0.6 when only implied.

Reply with one JSON object and nothing else (no code fences, no commentary). Its shape, \
with every <...> replaced by a real value from the episode:
{"actions": [{"op": "<add|update|remove|keep>", "target": <null or a known fact id>, \
"content": "<the fact, one sentence>", "kind": "<kind>", "subject": "<slot>", \
"confidence": <number>, "reason": <null or "<why it changed>">, \
"source_turn_ids": ["<turn id>"], "agent_id": <null or "<agent>">}]}"""


@dataclass(frozen=True, slots=True)
class Prompt:
    system: str
    user: str


@dataclass(frozen=True, slots=True)
class Aliases:
    """Short names for the request's turns (t1...) and facts (f1...), and back."""

    turns: dict[str, str]  # real turn id -> alias
    facts: dict[str, str]  # real fact id -> alias

    @classmethod
    def of(cls, request: ReflectionRequest) -> Aliases:
        return cls(
            turns={t.turn_id: f"t{i}" for i, t in enumerate(request.turns, 1)},
            facts={f.fact_id: f"f{i}" for i, f in enumerate(request.prior_facts, 1)},
        )

    def turn_ids(self) -> dict[str, str]:
        """alias -> real turn id."""
        return {alias: real for real, alias in self.turns.items()}

    def fact_ids(self) -> dict[str, str]:
        return {alias: real for real, alias in self.facts.items()}


def render_turn(turn: Turn, alias: str | None = None) -> str:
    """``[t1] (agent or role, timestamp) content``."""
    who = turn.agent_id or turn.role.value
    content = turn.content.strip()
    if len(content) > MAX_TURN_CHARS:
        content = content[:MAX_TURN_CHARS] + " [...truncated]"
    name = alias or turn.turn_id
    return f"[{name}] ({who}, {turn.timestamp.isoformat(timespec='seconds')}) {content}"


def render_fact(fact: Fact, alias: str | None = None) -> str:
    subject = fact.subject or "-"
    return f"- [{alias or fact.fact_id}] {fact.kind.value}, {subject}: {fact.content}"


def build_prompt(request: ReflectionRequest) -> Prompt:
    """One system prompt (the task and the schema) and one user message (the data)."""
    aliases = Aliases.of(request)
    turns = "\n".join(render_turn(t, aliases.turns[t.turn_id]) for t in request.turns)
    header = "Episode turns, oldest first ([turn id] (agent or role, time) text):"
    limit = request.max_facts
    if request.mode == "extract":
        user = (
            f"{header}\n{turns}\n\n"
            "Task: extract the facts worth remembering from this episode, each as an "
            f'"add" action (target null). Return at most {limit} actions. If nothing is '
            'worth remembering, reply with exactly {"actions": []}.'
        )
        return Prompt(SYSTEM_PROMPT, user)
    known = "\n".join(render_fact(f, aliases.facts[f.fact_id]) for f in request.prior_facts)
    user = (
        "Known facts ([fact id] kind, subject: content):\n"
        f"{known}\n\n{header}\n{turns}\n\n"
        "Task: compare the episode with the known facts, look for changes first, then "
        "return actions:\n"
        '- "update": a known fact changed. target = its fact id (f1, f2, ...); content = '
        "the whole new version (not the difference); subject = the known fact's subject; "
        "reason = what changed. The new version supersedes the old one.\n"
        '- "remove": a known fact is no longer true and nothing replaces it. target = its '
        "fact id; reason = why.\n"
        '- "keep": the episode confirms a known fact. target = its fact id.\n'
        '- "add": information no known fact covers. target = null.\n'
        "Known facts the episode does not touch may be left out: they stay as they are. "
        "A target must be one of the fact ids listed above. Return at most "
        f'{limit} "add" and "update" actions together. If nothing changes, reply with '
        'exactly {"actions": []}.'
    )
    return Prompt(SYSTEM_PROMPT, user)


def repair_prompt(error: str) -> str:
    return (
        f"Your reply could not be used: {error}. Reply again with only the JSON object "
        '{"actions": [...]} in the schema described above: no code fences, no commentary.'
    )


def expected_output_tokens(request: ReflectionRequest) -> int:
    """A rough size of a full answer: ~60 tokens per fact, at most one per turn."""
    facts = min(request.max_facts, max(1, len(request.turns)))
    return 40 + 60 * facts
