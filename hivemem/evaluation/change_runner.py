"""Play the change suite through a hivemem `MemoryClient` and judge every probe.

Per conversation: every turn is ingested in order with its role and speaker (agent id), the
session is closed (its last episode closes whatever its size), the runner waits until the
turns are embedded, assigned to episodes and every episode is reflected, then asks each probe
with `recall(session, query, token_budget=B)` and judges the returned context with
`hivemem.evaluation.change.judge_change`. Probes are never ingested.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path

import structlog

from hivemem import __version__
from hivemem.config import Settings
from hivemem.evaluation.change import (
    ChangeConversation,
    ChangeProbeResult,
    ChangeRun,
    ChangeSuite,
    ConversationPlay,
    parse_suite,
    probe_result,
)
from hivemem.evaluation.runs import timed_recall
from hivemem.producer.client import MemoryClient
from hivemem.providers.embedders import Embedder
from hivemem.providers.reflector import Reflector

log = structlog.get_logger(__name__)

SUITE_FILE = "change_suite.json"
DEFAULT_BUDGET = 300
START = datetime(2026, 2, 2, 9, 0, tzinfo=UTC)
TURN_SPACING = timedelta(seconds=30)

OnDone = Callable[[ChangeConversation, list[ChangeProbeResult]], None]


def load_change_suite() -> ChangeSuite:
    """The suite shipped with the package (hivemem/evaluation/data/change_suite.json)."""
    text = resources.files("hivemem.evaluation").joinpath("data", SUITE_FILE).read_text(
        encoding="utf-8")
    return parse_suite(json.loads(text))


def play_conversation(
    client: MemoryClient, conversation: ChangeConversation, token_budget: int, *,
    system: str = "hivemem", timeout: float = 120.0,
) -> tuple[ConversationPlay, list[ChangeProbeResult]]:
    session = conversation.session_id
    started = time.perf_counter()
    for index, turn in enumerate(conversation.turns):
        client.ingest(session, turn.role, turn.content, agent_id=turn.agent,
                      turn_id=f"t{index}", timestamp=START + TURN_SPACING * index)
    client.close_session(session)
    client.wait_until_processed(session, timeout)
    # The boundary stage settles the close too, so the reflection wait below sees every episode.
    stats = client.wait_until_processed(session, timeout, stage="boundary")
    client.wait_until_reflected(session, timeout)
    play = ConversationPlay(conversation=conversation.id, turns=len(conversation.turns),
                            episodes=stats.episodes, facts=len(client.facts(session)),
                            play_ms=round((time.perf_counter() - started) * 1000, 3))
    results = []
    for probe in conversation.probes:
        items, recall_ms = timed_recall(client, session, probe.query, token_budget)
        results.append(probe_result(system, conversation, probe,
                                    [item.content for item in items], items.used_tokens,
                                    recall_ms))
    log.info("eval.change.conversation", session_id=session, probes=len(results),
             strict=sum(r.strict for r in results), ranked=sum(r.ranked for r in results),
             facts=play.facts)
    return play, results


def play_change_suite(
    client: MemoryClient, suite: ChangeSuite, token_budget: int = DEFAULT_BUDGET, *,
    reflector: str, version: str = __version__, on_done: OnDone | None = None,
    timeout: float = 120.0,
) -> ChangeRun:
    """Play every conversation of `suite` through an open client (one session each)."""
    run = ChangeRun(system="hivemem", version=version, reflector=reflector,
                    token_budget=token_budget)
    for conversation in suite.conversations:
        play, results = play_conversation(client, conversation, token_budget, timeout=timeout)
        run.conversations.append(play)
        run.probes.extend(results)
        if on_done is not None:
            on_done(conversation, results)
    return run


def run_change_suite(
    settings: Settings | None = None, *, token_budget: int = DEFAULT_BUDGET,
    suite: ChangeSuite | None = None, folder: str | Path | None = None,
    embedder: Embedder | None = None, reflector: Reflector | None = None,
    reflector_name: str | None = None, on_done: OnDone | None = None,
    timeout: float = 120.0,
) -> ChangeRun:
    """The change suite through an embedded hivemem (`MemoryClient.local`).

    `folder`: where the embedded store lives (default: a temporary folder, removed after).
    `reflector`: as for `MemoryClient.local` (default: the configured LLM, else the heuristic
    reflector); `reflector_name` labels the run (default: "heuristic" or "llm").
    """
    settings = settings or Settings()
    suite = suite or load_change_suite()
    name = reflector_name or (
        type(reflector).__name__ if reflector is not None
        else "llm" if settings.llm is not None else "heuristic")
    with tempfile.TemporaryDirectory(prefix="hivemem-change-") as scratch:
        path = Path(folder) if folder is not None else Path(scratch)
        with MemoryClient.local(path, settings, embedder=embedder, reflector=reflector) as client:
            return play_change_suite(client, suite, token_budget, reflector=name,
                                     on_done=on_done, timeout=timeout)
