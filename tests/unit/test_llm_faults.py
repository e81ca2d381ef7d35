"""LLM faults through the whole pipeline (embedded mode, a scripted LLM over HTTP): 429s, 5xx,
timeouts and a slow model are retried with back-off until the facts arrive; recall answers
from the turns meanwhile; ingest never waits for the LLM. (The reflectors' own retry rules,
garbage output, failed jobs and replay are in test_llm_reflectors.py / test_reflection.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from support.scripted_llm import Reply, ScriptedLLM

from hivemem import MemoryClient, Settings
from hivemem.config import LLMConfig
from hivemem.providers.embedders import HashingEmbedder
from hivemem.providers.llm import build_reflector

TURNS = [
    ("user", "We decided to use PostgreSQL for the orders database."),
    ("assistant", "PostgreSQL it is; I will write the schema."),
    ("user", "The API must never return more than 100 orders per page."),
    ("assistant", "Understood, pagination caps at 100."),
]


def _answer(_request: dict[str, Any]) -> Reply:
    action = {"op": "add", "content": "The orders database is PostgreSQL.", "kind": "decision",
              "subject": "database", "confidence": 0.9, "source_turn_ids": ["t0"]}
    return Reply(text=json.dumps({"actions": [action]}))


def _settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"reflection": settings.reflection.model_copy(
        update={"retries": 6, "retry_intervals_s": [0]})})


def _run(client: MemoryClient) -> float:
    """Ingest and close the episode; returns the slowest ingest in ms."""
    slowest = 0.0
    for i, (role, text) in enumerate(TURNS):
        started = time.perf_counter()
        client.ingest("llm", role, text, turn_id=f"t{i}")
        slowest = max(slowest, (time.perf_counter() - started) * 1000)
    client.close_session("llm")
    client.wait_until_processed("llm", 20, stage="boundary")
    return slowest


def test_transient_llm_faults_are_retried_until_the_facts_arrive(
    tmp_path: Path, settings: Settings
) -> None:
    with ScriptedLLM(default=Reply(body=_answer)) as llm:
        # Each job attempt makes two requests (max_retries=1), so these take several attempts.
        llm.push(
            Reply(status=429, headers={"Retry-After": "0"}),
            Reply(status=503, text="overloaded"),
            Reply(status=500, text="boom"),
            Reply(body=_answer, delay_s=1.0),  # longer than timeout_s: a timeout
            Reply(status=502, text="bad gateway"),
            Reply(status=429, headers={"Retry-After": "0"}),
        )
        reflector = build_reflector(LLMConfig(
            provider="openai", base_url=llm.url, model="m", timeout_s=0.4, max_retries=1,
            backoff_initial_s=0.01, backoff_max_s=0.05,
        ))
        with MemoryClient.local(tmp_path / "m", _settings(settings),
                                embedder=HashingEmbedder(1024), reflector=reflector) as client:
            _run(client)
            # Reflection is still failing: recall answers from the turns.
            items = client.recall("llm", "which database?")
            assert any("PostgreSQL" in i.content for i in items)
            client.wait_until_reflected("llm", 30)
            facts = client.facts("llm")
            assert [f.content for f in facts] == ["The orders database is PostgreSQL."]
            from rq import Queue
            from rq.registry import FailedJobRegistry

            queue = Queue(settings.episodes.reflect_queue, connection=client._redis)
            assert FailedJobRegistry(queue=queue).count == 0
        assert llm.remaining == 0
        assert len(llm.requests) >= 7


def test_a_slow_llm_holds_up_neither_ingest_nor_recall(
    tmp_path: Path, settings: Settings
) -> None:
    with ScriptedLLM(default=Reply(body=_answer, delay_s=1.5)) as llm:
        reflector = build_reflector(LLMConfig(provider="openai", base_url=llm.url, model="m",
                                              timeout_s=10))
        with MemoryClient.local(tmp_path / "m", _settings(settings),
                                embedder=HashingEmbedder(1024), reflector=reflector) as client:
            slowest = _run(client)
            started = time.perf_counter()
            items = client.recall("llm", "which database?")
            recall_ms = (time.perf_counter() - started) * 1000
            assert any("PostgreSQL" in i.content for i in items)
            assert client.facts("llm") == []  # the model is still thinking
            assert slowest < 500 and recall_ms < 1000, (slowest, recall_ms)
            client.wait_until_reflected("llm", 30)
            assert client.facts("llm")


def test_when_retries_run_out_the_failure_is_recorded_and_the_session_moves_on(
    tmp_path: Path, settings: Settings
) -> None:
    import pytest
    import structlog

    from hivemem.errors import ReflectionFailed

    with ScriptedLLM(default=Reply(body=_answer)) as llm:
        # 2 job attempts x 2 requests each, all 500: the first episode's reflection fails.
        llm.push(*[Reply(status=500, text="boom") for _ in range(4)])
        reflector = build_reflector(LLMConfig(
            provider="openai", base_url=llm.url, model="m", timeout_s=2, max_retries=1,
            backoff_initial_s=0.01, backoff_max_s=0.02,
        ))
        tight = settings.model_copy(update={"reflection": settings.reflection.model_copy(
            update={"retries": 1, "retry_intervals_s": [0]})})
        with structlog.testing.capture_logs() as logs, MemoryClient.local(
            tmp_path / "m", tight, embedder=HashingEmbedder(1024), reflector=reflector
        ) as client:
            for i, (role, text) in enumerate(TURNS[:2]):
                client.ingest("llm", role, text, turn_id=f"t{i}")
            client.close_episode("llm")
            with pytest.raises(ReflectionFailed) as failed:
                client.wait_until_reflected("llm", 30)
            assert failed.value.index == 1 and "embed workers" not in str(failed.value)
            assert client.get_session_stats("llm").reflections_failed == [1]
            [trace] = client.traces(5, session_id="llm")
            assert trace["failed"] and trace["retries_exhausted"] and "500" in trace["error"]
            # The next episode is not blocked behind the failed one.
            for i, (role, text) in enumerate(TURNS[2:], 2):
                client.ingest("llm", role, text, turn_id=f"t{i}")
            client.close_episode("llm")
            assert client.wait_until_reflected("llm", 30) == 2
        assert any(e["event"] == "reflection.failed" for e in logs)
