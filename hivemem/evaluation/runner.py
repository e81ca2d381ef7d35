"""Play an evaluation suite through a `MemoryClient` and record hits and timings.

Per conversation: every turn is ingested (timed one by one), then the runner waits for the
pipeline (embedded, assigned to episodes, episodes reflected: each wait timed from the last
ingest), then asks every probe with `recall` inside the token budget (timed) and judges the
returned items. Probes are never ingested.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import structlog
from pydantic import BaseModel, Field

from hivemem.evaluation.runs import RunInfo, timed_recall
from hivemem.evaluation.scenarios import Conversation, Probe, Suite, judge
from hivemem.producer.client import MemoryClient

log = structlog.get_logger(__name__)

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
TURN_SPACING = timedelta(seconds=30)


class ProbeResult(BaseModel):
    system: str
    scenario: str
    turns: int
    iteration: int
    label: str
    query: str
    expected: str
    hit: bool
    rank: int | None = None
    stale_rank: int | None = None
    items: int = 0
    used_tokens: int = 0
    recall_ms: float = 0.0
    top: str | None = None  # the first recalled item's text (for reading failures)


class ConversationTiming(BaseModel):
    scenario: str
    turns: int
    iteration: int
    ingest_ms: list[float] = Field(default_factory=list)
    embed_lag_ms: float | None = None
    boundary_lag_ms: float | None = None
    reflect_lag_ms: float | None = None
    episodes: int | None = None
    facts: int | None = None


class SystemRun(RunInfo):
    probes: list[ProbeResult] = Field(default_factory=list)
    conversations: list[ConversationTiming] = Field(default_factory=list)


def probe_result(
    system: str, conversation: Conversation, probe: Probe, texts: Sequence[str],
    used_tokens: int, recall_ms: float,
) -> ProbeResult:
    """Judge one recall (item texts, best first) for `probe`: shared by every system."""
    verdict = judge(probe, texts)
    return ProbeResult(
        system=system, scenario=conversation.scenario, turns=conversation.turns_target,
        iteration=conversation.iteration, label=probe.label, query=probe.query,
        expected=probe.expected, hit=verdict.hit, rank=verdict.rank,
        stale_rank=verdict.stale_rank, items=verdict.items, used_tokens=used_tokens,
        recall_ms=round(recall_ms, 3), top=texts[0] if texts else None,
    )


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def run_conversation(
    client: MemoryClient, conversation: Conversation, token_budget: int, *,
    system: str = "hivemem", timeout: float = 120.0,
) -> tuple[ConversationTiming, list[ProbeResult]]:
    session = conversation.session_id
    timing = ConversationTiming(scenario=conversation.scenario,
                                turns=conversation.turns_target,
                                iteration=conversation.iteration)
    for index, turn in enumerate(conversation.turns):
        started = time.perf_counter()
        client.ingest(session, turn.role, turn.content, turn_id=f"t{index}",
                      timestamp=START + TURN_SPACING * index)
        timing.ingest_ms.append(_ms_since(started))
    last = time.perf_counter()
    client.wait_until_processed(session, timeout)
    timing.embed_lag_ms = _ms_since(last)
    stats = client.wait_until_processed(session, timeout, stage="boundary")
    timing.boundary_lag_ms = _ms_since(last)
    client.wait_until_reflected(session, timeout)
    timing.reflect_lag_ms = _ms_since(last)
    timing.episodes = stats.episodes
    timing.facts = len(client.facts(session))
    results = []
    for probe in conversation.probes:
        items, recall_ms = timed_recall(client, session, probe.query, token_budget)
        texts = [item.content for item in items]
        used = sum(item.token_count for item in items)
        results.append(probe_result(system, conversation, probe, texts, used, recall_ms))
    log.info("eval.conversation", session_id=session, hits=sum(r.hit for r in results),
             probes=len(results), facts=timing.facts)
    return timing, results


def run_suite(
    client: MemoryClient, suite: Suite, token_budget: int, *, reflector: str,
    version: str, on_done: Callable[[Conversation, list[ProbeResult]], None] | None = None,
    timeout: float = 120.0,
) -> SystemRun:
    run = SystemRun(system="hivemem", version=version, reflector=reflector,
                    token_budget=token_budget)
    for conversation in suite.conversations:
        timing, results = run_conversation(client, conversation, token_budget,
                                           timeout=timeout)
        run.conversations.append(timing)
        run.probes.extend(results)
        if on_done is not None:
            on_done(conversation, results)
    return run
