"""Reflection throughput: episodes/s with the heuristic reflector, and the per-episode
overhead around an LLM call (a scripted OpenAI-compatible server with a fixed delay).

Runs the whole embedded pipeline (real fastembed model, Qdrant Edge, rq thread worker);
per-episode times come from the reflection traces (reflector + consolidation + fact
embedding + Qdrant writes) and from rq's job start/end times (adds the lock and rq).
Prints a summary and saves bench/results/reflection.json.

    python bench/probes/reflection.py [--sessions 8] [--delay-ms 200] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
os.environ.setdefault("FASTEMBED_CACHE_PATH", str(REPO.parent / "shared/models/fastembed_cache"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(REPO / "tests"))

from hivemem import MemoryClient, Settings  # noqa: E402
from hivemem.config import LLMConfig  # noqa: E402
from hivemem.providers.embedders import FastEmbedEmbedder  # noqa: E402
from hivemem.providers.llm import build_reflector  # noqa: E402

TOPICS = [
    ("database", "PostgreSQL", "MySQL"), ("API", "REST", "GraphQL"),
    ("frontend", "React", "Vue"), ("cloud", "AWS", "GCP"), ("queue", "RabbitMQ", "Kafka"),
]
T0 = datetime(2026, 4, 1, 9, 0, tzinfo=UTC)


def conversation(n_episodes: int) -> list[tuple[str, str]]:
    turns: list[tuple[str, str]] = []
    for e in range(n_episodes):
        topic, first, second = TOPICS[e % len(TOPICS)]
        value = first if e < len(TOPICS) else second
        change = "Actually, let's switch to" if e >= len(TOPICS) else "Decision: we'll use"
        turns += [
            ("user", f"{change} {value} for the {topic}."),
            ("assistant", f"OK, {value} for the {topic} then. I'll update the plan."),
            ("user", "The deadline is the end of the month, it has to be live by then."),
            ("assistant", f"Noted. The {topic} setup with {value} takes about two days."),
            ("user", "I prefer small pull requests with tests."),
            ("assistant", "Understood, small pull requests it is."),
        ]
    return turns


def run(label: str, settings: Settings, embedder: Any, reflector: Any, sessions: int,
        episodes: int) -> dict[str, Any]:
    from rq import Queue
    from rq.registry import FinishedJobRegistry

    with tempfile.TemporaryDirectory() as tmp, MemoryClient.local(
        Path(tmp), settings, embedder=embedder, reflector=reflector
    ) as client:
        script = conversation(episodes)
        for s in range(sessions):
            client.ingest_many([
                {"session_id": f"{label}-{s}", "role": r, "content": c,
                 "timestamp": T0 + timedelta(minutes=i)}
                for i, (r, c) in enumerate(script)
            ])
        started = time.perf_counter()
        for s in range(sessions):
            client.close_session(f"{label}-{s}")
        total_eps = 0
        for s in range(sessions):
            stats = client.wait_until_processed(f"{label}-{s}", 600, stage="boundary")
            total_eps += stats.episodes
        for s in range(sessions):
            client.wait_until_reflected(f"{label}-{s}", 600)
            print(f"  {label}: session {s + 1}/{sessions} reflected", file=sys.stderr)
        wall = time.perf_counter() - started
        traces = client.traces(10_000)
        elapsed = [t["elapsed_ms"] for t in traces if "elapsed_ms" in t and not t.get("error")]
        queue = Queue(settings.episodes.reflect_queue, connection=client._redis)
        registry = FinishedJobRegistry(queue=queue)
        job_ms = []
        for job in [queue.fetch_job(j) for j in registry.get_job_ids()]:
            if job is not None and job.started_at and job.ended_at:
                job_ms.append((job.ended_at - job.started_at).total_seconds() * 1000)
        facts = sum(len(client.facts(f"{label}-{s}", include_history=True))
                    for s in range(sessions))
    return {
        "sessions": sessions, "episodes": total_eps, "facts_written": facts,
        "wall_s_close_to_reflected": round(wall, 2),
        "episodes_per_s_wall": round(total_eps / wall, 2),
        "reflect_ms": summary(elapsed), "rq_job_ms": summary(job_ms),
        "episodes_per_s_busy": round(1000 / statistics.mean(elapsed), 2) if elapsed else None,
    }


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {"n": len(values), "mean": round(statistics.mean(values), 2),
            "p50": round(ordered[len(ordered) // 2], 2),
            "p95": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 2)}


def main() -> int:
    from support.scripted_llm import Reply, ScriptedLLM

    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--delay-ms", type=int, default=200)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.episodes = 2, 4
    settings = Settings.model_validate({})
    embedder = FastEmbedEmbedder(settings.embedding)
    results: dict[str, Any] = {"args": vars(args), "model": settings.embedding.model}
    print("heuristic reflector...", file=sys.stderr)
    results["heuristic"] = run("h", settings, embedder, None, args.sessions, args.episodes)
    answer = json.dumps({"actions": [{"op": "add", "content": "The team uses X for Y.",
                                      "kind": "decision", "subject": "stack",
                                      "confidence": 0.9}]})
    with ScriptedLLM(default=Reply(text=answer, delay_s=args.delay_ms / 1000)) as llm:
        reflector = build_reflector(LLMConfig(provider="openai", base_url=llm.url,
                                              model="scripted", timeout_s=30))
        print(f"scripted LLM with a fixed {args.delay_ms} ms delay...", file=sys.stderr)
        results["llm"] = run("l", settings, embedder, reflector, args.sessions, args.episodes)
        results["llm"]["llm_calls"] = len(llm.requests)
    llm_ms = results["llm"]["reflect_ms"]
    results["llm"]["overhead_ms_per_episode"] = {
        k: round(llm_ms[k] - args.delay_ms, 2) for k in ("mean", "p50", "p95") if k in llm_ms
    }
    name = "reflection-quick.json" if args.quick else "reflection.json"
    out = REPO / "bench" / "results" / name
    out.write_text(json.dumps(results, indent=2))
    h, l_ = results["heuristic"], results["llm"]
    print(f"\nheuristic: {h['episodes']} episodes, {h['episodes_per_s_wall']} episodes/s wall "
          f"(close -> reflected), {h['episodes_per_s_busy']} episodes/s busy; reflect ms "
          f"{h['reflect_ms']}; rq job ms {h['rq_job_ms']}")
    print(f"llm ({args.delay_ms} ms delay): {l_['episodes']} episodes, "
          f"{l_['episodes_per_s_wall']} episodes/s wall; reflect ms {l_['reflect_ms']}; "
          f"overhead around the call {l_['overhead_ms_per_episode']} ms; rq job ms "
          f"{l_['rq_job_ms']}")
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
