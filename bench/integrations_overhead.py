"""What each framework adapter costs over the SDK call it wraps, same store, same run.

One embedded store (the hashing embedder, so that the model's time does not hide the
adapter's), one session per adapter filled with `--items` items, then for each pair the
adapter call and the direct SDK call alternate `--calls` times (so load drifts hit both):

- LangGraph `store.search(ns, query=...)`   vs `memory.recall(session, query)`
- LangGraph `store.get(ns, key)`             vs `memory.timeline(session, kinds=["turn"])`
- LangGraph `store.put(ns, key, value)`      vs `memory.ingest_many([row])`
- Agents `session.get_items()`               vs `memory.timeline(session, kinds=["turn"])`
- Agents `session.add_items([item])`         vs `memory.ingest_many([row])`
- Agents `session.context(query)` (instructions) vs `memory.recall(session, query)`
- ADK `service.search_memory(...)`           vs `memory.recall(session, query)`
- LlamaIndex `block.aget(messages)`          vs `memory.recall(session, query)`

The goal (issue 38): under 10% at p95. A read through an adapter also waits until the
writes before it are stored (`wait_until_processed`, one round trip when nothing is
pending): that is part of what the adapter costs, and it is counted.

    nice python bench/integrations_overhead.py [--items 200] [--calls 200]

JSON in bench/results/integrations_overhead.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import RESULTS, machine_facts, summarize

from hivemem import MemoryClient, Settings
from hivemem.providers.embedders import HashingEmbedder

DIM = 384
# One event loop for every async adapter call, as in a framework's own loop.
LOOP = asyncio.new_event_loop()
QUERY = "which database did we choose for the orders service?"


def _pair(adapter: Callable[[], Any], direct: Callable[[], Any], calls: int) -> dict[str, Any]:
    timed: dict[str, list[float]] = {"adapter": [], "direct": []}
    for i in range(calls + 10):
        order = [("adapter", adapter), ("direct", direct)]
        if i % 2:
            order.reverse()
        for name, fn in order:
            start = time.perf_counter()
            fn()
            if i >= 10:  # the first ten warm caches
                timed[name].append((time.perf_counter() - start) * 1000)
    out = {name: summarize(values) for name, values in timed.items()}
    out["overhead_p50_pct"] = round(100 * (out["adapter"]["p50"] / out["direct"]["p50"] - 1), 1)
    out["overhead_p95_pct"] = round(100 * (out["adapter"]["p95"] / out["direct"]["p95"] - 1), 1)
    return out


def _texts(n: int) -> list[str]:
    topics = ["database", "deploys", "budget", "hiring", "design", "testing", "billing"]
    return [f"Note {i}: about {topics[i % len(topics)]}, we agreed on option {i % 5} "
            f"after comparing {i % 3 + 2} alternatives." for i in range(n)] + [
        "Decision: the orders service uses Postgres."]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()

    from google.adk.memory.memory_entry import MemoryEntry
    from google.genai import types
    from llama_index.core.base.llms.types import ChatMessage

    from hivemem.integrations.google_adk import HivememMemoryService, user_prefix
    from hivemem.integrations.langgraph import HivememStore, namespace_to_session
    from hivemem.integrations.llama_index import HivememMemoryBlock
    from hivemem.integrations.openai_agents import HivememSession

    settings = Settings.model_validate({"embedding": {"provider": "hashing", "dim": DIM}})
    results: dict[str, Any] = {"items": args.items, "calls": args.calls,
                               "machine": machine_facts()}
    with tempfile.TemporaryDirectory() as folder, MemoryClient.local(
            Path(folder) / "memory", settings, embedder=HashingEmbedder(DIM),
            as_guest=False) as client:
        memory = client.scoped(namespace="bench", agent_id="agent")
        texts = _texts(args.items)

        store = HivememStore(memory)
        ns = ("decisions", "team")
        for i, text in enumerate(texts):
            store.put(ns, f"k{i}", {"text": text})
        lg = namespace_to_session(ns)
        memory.wait_until_processed(lg, 120)
        results["langgraph.search"] = _pair(
            lambda: store.search(ns, query=QUERY, limit=5),
            lambda: memory.recall(lg, QUERY), args.calls)
        results["langgraph.get"] = _pair(
            lambda: store.get(ns, "k1"),
            lambda: memory.timeline(lg, kinds=["turn"]), args.calls)
        counter = iter(range(10**9))
        results["langgraph.put"] = _pair(
            lambda: store.put(("writes",), "k", {"text": f"value {next(counter)}"}),
            lambda: memory.ingest_many([{"session_id": "direct-writes", "role": "system",
                                         "content": f"value {next(counter)}"}]), args.calls)

        session = HivememSession("agents-bench", memory)
        LOOP.run_until_complete(session.add_items([{"role": "user" if i % 2 == 0 else "assistant",
                                        "content": t} for i, t in enumerate(texts)]))
        memory.wait_until_processed("agents-bench", 120)
        results["agents.get_items"] = _pair(
            lambda: LOOP.run_until_complete(session.get_items()),
            lambda: memory.timeline("agents-bench", kinds=["turn"]), args.calls)
        results["agents.context"] = _pair(
            lambda: session.context(QUERY),
            lambda: memory.recall("agents-bench", QUERY), args.calls)
        writes = HivememSession("agents-writes", memory)
        results["agents.add_items"] = _pair(
            lambda: LOOP.run_until_complete(writes.add_items([{"role": "user",
                                                   "content": f"hello {next(counter)}"}])),
            lambda: memory.ingest_many([{"session_id": "direct-writes", "role": "user",
                                         "content": f"hello {next(counter)}"}]), args.calls)

        service = HivememMemoryService(memory)
        LOOP.run_until_complete(service.add_memory(app_name="app", user_id="u", memories=[
            MemoryEntry(content=types.Content(role="user", parts=[types.Part.from_text(
                text=t)])) for t in texts]))
        adk_session = user_prefix("app", "u") + ":memory"
        memory.wait_until_processed(adk_session, 120)
        results["adk.search_memory"] = _pair(
            lambda: LOOP.run_until_complete(service.search_memory(app_name="app", user_id="u",
                                                      query=QUERY)),
            lambda: memory.recall(adk_session, QUERY), args.calls)

        block = HivememMemoryBlock(memory=memory, session_id="agents-bench")
        asked = [ChatMessage(role="user", content=QUERY)]
        results["llama_index.aget"] = _pair(
            lambda: LOOP.run_until_complete(block.aget(asked)),
            lambda: memory.recall("agents-bench", QUERY), args.calls)

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "integrations_overhead.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"{'pair':22} {'adapter p50':>11} {'direct p50':>10} {'adapter p95':>11} "
          f"{'direct p95':>10} {'p95 +%':>7}")
    for name, row in results.items():
        if isinstance(row, dict) and "adapter" in row:
            print(f"{name:22} {row['adapter']['p50']:11.2f} {row['direct']['p50']:10.2f} "
                  f"{row['adapter']['p95']:11.2f} {row['direct']['p95']:10.2f} "
                  f"{row['overhead_p95_pct']:7.1f}")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
