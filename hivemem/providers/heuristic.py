"""The deterministic reflector: the default when no LLM is configured.

It reads an episode sentence by sentence. A sentence becomes a fact when it is marked (by
the caller or the marker detector) or states a preference or a plain personal/project fact;
its kind follows the marker, its subject comes from a vocabulary of common project topics
(database, api style, frontend framework, ...) or from "the X is / for the X" phrasing. A
sentence with update language ("switch to", "instead", "no longer", "actually", "now") on a
subject that already has an active fact becomes an update that supersedes it.
Deterministic: the same episode and facts give the same actions.
"""

from __future__ import annotations

import re

from hivemem.domain.consolidation import has_update_language, normalise
from hivemem.domain.fact import Fact, FactAction, FactKind, FactStatus
from hivemem.domain.markers import detect_markers
from hivemem.providers.reflector import ReflectionRequest, ReflectionResult

# Topic vocabulary: a value's mention tells what the statement is about.
_TOPICS: dict[str, tuple[str, ...]] = {
    "database": ("postgres", "postgresql", "mysql", "mariadb", "sqlite", "mongodb", "mongo",
                 "dynamodb", "cassandra", "oracle", "sql server", "cockroachdb", "database"),
    "api style": ("rest", "restful", "graphql", "grpc", "soap", "json-rpc", "trpc"),
    "frontend framework": ("react", "vue", "angular", "svelte", "solid", "next.js", "nextjs",
                           "nuxt", "ember", "frontend"),
    "backend framework": ("django", "flask", "fastapi", "express", "rails", "spring", "laravel",
                          "phoenix", "gin"),
    "language": ("python", "typescript", "javascript", "golang", " go ", "rust", "java",
                 "kotlin", "ruby", "c#", "elixir", "scala"),
    "cloud": ("aws", "gcp", "azure", "google cloud", "heroku", "vercel", "fly.io",
              "digitalocean"),
    "cache": ("redis", "memcached", "cache"),
    "queue": ("kafka", "rabbitmq", "sqs", "nats", "celery", "rq ", "queue"),
    "search": ("elasticsearch", "opensearch", "meilisearch", "full-text search"),
    "auth": ("oauth", "jwt", "saml", "sso", "auth0", "authentication"),
    "deployment": ("kubernetes", "k8s", "helm", "docker", "staging", "deploy"),
    "testing": ("pytest", "jest", "unit test", "integration test", "test suite"),
    "budget": ("budget", "cost", "$"),
    "deadline": ("deadline", "by the end of", "launch date", "ship date"),
    "page size": ("page size", "per page", "pagination"),
}
_THE_X = re.compile(
    r"\b(?:the|our|my) ((?:[a-z][a-z-]+ ){0,2}[a-z][a-z-]+?)(?: is| will be| should be| has to"
    r"| must| are)\b"
)
_FOR_THE_X = re.compile(r"\bfor (?:the|our|my) ((?:[a-z][a-z-]+ ){0,1}[a-z][a-z-]+)\b")
_PREFERENCE = re.compile(
    r"\b(?:i|we) (?:really |strongly |much |would )?(?:prefer|like|love|hate|dislike|enjoy"
    r"|favou?r|'d rather|would rather)\b|\bmy favou?rite\b|\bi'm (?:a fan|not a fan) of\b",
    re.IGNORECASE,
)
_PLAIN_FACT = re.compile(
    r"\b(?:my name is|i live in|i work (?:at|as|for)|i'm a |i am a |we have|our team (?:is|has)"
    r"|i have (?:a|two|three)|i moved to|i'm from|i am from|the deadline is)\b",
    re.IGNORECASE,
)
_LABEL = re.compile(r"^\s*(?:decision|constraint|failure|goal|note|update)\s*:\s*", re.IGNORECASE)
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_KIND_BY_MARKER = {
    "decision": FactKind.DECISION,
    "constraint": FactKind.CONSTRAINT,
    "failure": FactKind.FAILURE,
    "goal": FactKind.GOAL,
}


_TOPIC_PATTERNS = {
    topic: re.compile(
        r"(?<![\w.])(?:" + "|".join(re.escape(n.strip()) for n in needles) + r")(?![\w])"
    )
    for topic, needles in _TOPICS.items()
}


def subject_of(sentence: str, kind: FactKind) -> str:
    text = f" {sentence.lower()} "
    for topic, pattern in _TOPIC_PATTERNS.items():
        if pattern.search(text):
            return topic
    for pattern in (_FOR_THE_X, _THE_X):
        match = pattern.search(text)
        if match:
            return match.group(1).strip()
    # Without a topic, failures and goals are about themselves: no versioning across them.
    return "" if kind in (FactKind.FAILURE, FactKind.GOAL, FactKind.FACT) else kind.value


def _candidates(request: ReflectionRequest) -> list[tuple[FactKind, str, str, str | None, str]]:
    """(kind, subject, content, agent, turn id) for every sentence worth keeping."""
    out: list[tuple[FactKind, str, str, str | None, str]] = []
    for turn in request.turns:
        marked_turn = [m for m in turn.markers if m in _KIND_BY_MARKER]
        sentences = [s.strip() for s in _SENTENCES.split(turn.content) if s.strip()]
        for sentence in sentences:
            if sentence.endswith("?"):
                continue
            detected = detect_markers(sentence, turn.role.value)
            kind: FactKind | None = None
            if detected:
                kind = _KIND_BY_MARKER[detected[0]]
            elif _PREFERENCE.search(sentence):
                kind = FactKind.PREFERENCE
            elif _PLAIN_FACT.search(sentence):
                kind = FactKind.FACT
            elif marked_turn and len(sentences) == 1:
                kind = _KIND_BY_MARKER[marked_turn[0]]
            if kind is None:
                continue
            content = _LABEL.sub("", sentence).strip()
            if len(content) < 8:
                continue
            agent = turn.agent_id or turn.role.value
            out.append((kind, subject_of(content, kind), content, agent, turn.turn_id))
    return out


class HeuristicReflector:
    name = "heuristic"

    def reflect(self, request: ReflectionRequest) -> ReflectionResult:
        active: dict[str, Fact] = {}
        for fact in sorted(request.prior_facts, key=lambda f: f.valid_from):
            if fact.status in (FactStatus.ACTIVE, FactStatus.CONFLICTED) and fact.subject:
                active[fact.subject] = fact
        actions: list[FactAction] = []
        latest_new: dict[str, int] = {}  # subject -> index of the action that added it
        seen: set[str] = set()
        for kind, subject, content, agent, turn_id in _candidates(request):
            key = normalise(content)
            if key in seen:
                continue
            seen.add(key)
            action = FactAction(
                op="add", content=content, kind=kind, subject=subject, confidence=0.8,
                source_turn_ids=[turn_id], agent_id=agent,
            )
            updating = subject and has_update_language(content)
            if updating and subject in latest_new:
                action = action.model_copy(update={
                    "op": "update", "target": f"new:{latest_new[subject]}",
                    "reason": f"changed: {content[:120]}"})
            elif updating and subject in active:
                action = action.model_copy(update={
                    "op": "update", "target": active[subject].fact_id,
                    "reason": f"changed: {content[:120]}"})
            elif subject in active and normalise(active[subject].content) == key:
                action = FactAction(op="keep", target=active[subject].fact_id)
            actions.append(action)
            if action.op in ("add", "update") and subject:
                latest_new[subject] = len(actions) - 1
            if len([a for a in actions if a.op != "keep"]) >= request.max_facts:
                break
        return ReflectionResult(actions=actions, model=self.name)
