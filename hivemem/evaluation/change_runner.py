"""Play the change suite through a hivemem `MemoryClient` and judge every probe.

Two modes (`hivemem.evaluation.change.MODES`), one session per conversation and mode:

- **reflected** (the memory once the conversation is over): every turn is ingested in order
  with its role and speaker (agent id), the session is closed (its last episode closes
  whatever its size), the runner waits until the turns are embedded, assigned to episodes and
  every episode is reflected, then asks the probes at the end of the conversation (after_turn
  None or len(turns)). Probes asked mid-conversation are live mode's: they are not asked here.
- **live** (what an agent gets on the turn it asks): the turns are ingested one by one; right
  after the turn a probe's `after_turn` names, the runner waits until the turns so far are
  processed (`wait_until_processed(session)`: its default stage; no close, no wait for the
  boundary stage or reflection) and recalls at once. Probes at the end are asked the same way
  after the last turn. The pipeline keeps running meanwhile: an episode the boundary stage
  closes on its own may or may not be reflected by the time a later probe is asked, as in
  production, so live results can differ slightly from run to run.

Every probe is `recall(session, query, token_budget=B)`, its context judged by
`hivemem.evaluation.change.judge_change`. Probes are never ingested.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog

from hivemem import __version__
from hivemem.config import Settings
from hivemem.evaluation.change import (
    MODES,
    ChangeConversation,
    ChangeProbe,
    ChangeProbeResult,
    ChangeRun,
    ChangeSuite,
    ConversationPlay,
    asked_probes,
    probe_result,
)
from hivemem.evaluation.change_parts import load_part
from hivemem.evaluation.runs import timed_recall
from hivemem.producer.client import MemoryClient
from hivemem.providers.embedders import Embedder
from hivemem.providers.reflector import Reflector

log = structlog.get_logger(__name__)

DEFAULT_BUDGET = 300
START = datetime(2026, 2, 2, 9, 0, tzinfo=UTC)
TURN_SPACING = timedelta(seconds=30)

OnDone = Callable[[ChangeConversation, list[ChangeProbeResult]], None]


def load_change_suite() -> ChangeSuite:
    """The legacy v1 suite shipped with the package (hivemem/evaluation/data/change_suite.json);
    `hivemem.evaluation.change_parts.load_part` loads any part."""
    return load_part("legacy")


def session_for(conversation: ChangeConversation, mode: str) -> str:
    """One session per conversation and mode, so both modes can share one memory."""
    return f"{conversation.session_id}-{mode}"


def _ingest(client: MemoryClient, session: str, conversation: ChangeConversation,
            index: int) -> None:
    turn = conversation.turns[index]
    client.ingest(session, turn.role, turn.content, agent_id=turn.agent,
                  turn_id=f"t{index}", timestamp=START + TURN_SPACING * index)


def _ask(client: MemoryClient, session: str, conversation: ChangeConversation,
         probe: ChangeProbe, token_budget: int, system: str) -> ChangeProbeResult:
    items, recall_ms = timed_recall(client, session, probe.query, token_budget)
    return probe_result(system, conversation, probe, [item.content for item in items],
                        items.used_tokens, recall_ms)


def _play_reflected(client: MemoryClient, session: str, conversation: ChangeConversation,
                    token_budget: int, system: str,
                    timeout: float) -> tuple[int, list[ChangeProbeResult]]:
    for index in range(len(conversation.turns)):
        _ingest(client, session, conversation, index)
    client.close_session(session)
    client.wait_until_processed(session, timeout)
    # The boundary stage settles the close too, so the reflection wait below sees every episode.
    stats = client.wait_until_processed(session, timeout, stage="boundary")
    client.wait_until_reflected(session, timeout)
    return stats.episodes, [_ask(client, session, conversation, probe, token_budget, system)
                            for probe in asked_probes(conversation, "reflected")]


def _play_live(client: MemoryClient, session: str, conversation: ChangeConversation,
               token_budget: int, system: str,
               timeout: float) -> tuple[int, list[ChangeProbeResult]]:
    n = len(conversation.turns)
    pending = asked_probes(conversation, "live")  # sorted by point
    results: list[ChangeProbeResult] = []
    episodes = 0
    for index in range(n):
        _ingest(client, session, conversation, index)
        due = [p for p in pending if p.point(n) == index + 1]
        if not due:
            continue
        episodes = client.wait_until_processed(session, timeout).episodes
        results.extend(_ask(client, session, conversation, probe, token_budget, system)
                       for probe in due)
    return episodes, results


def play_conversation(
    client: MemoryClient, conversation: ChangeConversation, token_budget: int, *,
    system: str = "hivemem", timeout: float = 120.0, mode: str = "reflected",
) -> tuple[ConversationPlay, list[ChangeProbeResult]]:
    """Play one conversation in `mode` and judge the probes that mode asks (in the order
    asked: by point, then as written)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}, want one of {MODES}")
    session = session_for(conversation, mode)
    started = time.perf_counter()
    play = _play_live if mode == "live" else _play_reflected
    episodes, results = play(client, session, conversation, token_budget, system, timeout)
    conversation_play = ConversationPlay(
        conversation=conversation.id, turns=len(conversation.turns), episodes=episodes,
        facts=len(client.facts(session)),
        play_ms=round((time.perf_counter() - started) * 1000, 3))
    log.info("eval.change.conversation", session_id=session, mode=mode, probes=len(results),
             strict=sum(r.strict for r in results), ranked=sum(r.ranked for r in results),
             facts=conversation_play.facts)
    return conversation_play, results


def play_change_suite(
    client: MemoryClient, suite: ChangeSuite, token_budget: int = DEFAULT_BUDGET, *,
    reflector: str, version: str = __version__, on_done: OnDone | None = None,
    timeout: float = 120.0, mode: str = "reflected", part: str = "legacy",
) -> ChangeRun:
    """Play every conversation of `suite` through an open client (one session each)."""
    run = ChangeRun.model_validate({
        "system": "hivemem", "version": version, "reflector": reflector,
        "token_budget": token_budget, "mode": mode, "part": part})
    for conversation in suite.conversations:
        play, results = play_conversation(client, conversation, token_budget, timeout=timeout,
                                          mode=mode)
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
    timeout: float = 120.0, mode: str = "reflected", part: str = "legacy",
) -> ChangeRun:
    """The change suite through an embedded hivemem (`MemoryClient.local`), in one mode.

    `suite`: the conversations (default: the legacy part); `part` labels the run.
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
                                     on_done=on_done, timeout=timeout, mode=mode, part=part)
