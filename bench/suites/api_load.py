"""20 concurrent agents ingesting and recalling through the HTTP API for a fixed time.

    python bench/scale.py --only api [--agents 20] [--duration 60] [--embedder hashing|fastembed]

Starts `hivemem --local <tmp> serve` as its own process (embedded mode: in-process Redis,
Qdrant Edge, embed/boundary/reflect threads, the API under uvicorn), creates one API key per
namespace with the CLI, then runs the agents as threads of this process, each with its own
httpx client. Agents are spread over 2 namespaces x 3 sessions; each loops: ingest one turn
(1 in 4 private to itself), then recall in one of its namespace's sessions. Every recalled
item is checked: another namespace's item, or another agent's private one, is a leak.
Reports throughput, p50/p95/p99 per operation, errors and leaks (bench/scale.py saves them).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from harness import CpuMonitor, machine_facts, model_cache, summarize

NAMESPACES = ("ns-0", "ns-1")
SESSIONS_PER_NAMESPACE = 3
TOPICS = ("database", "deploy", "billing", "search", "auth", "queue", "cache", "metrics")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hivemem(*args: str) -> list[str]:
    return [sys.executable, "-m", "hivemem", *args]


class Agent(threading.Thread):
    def __init__(self, index: int, url: str, key: str, namespace: str, stop_at: float,
                 seed: int) -> None:
        super().__init__(daemon=True)
        self.name = f"agent-{index}"
        self.namespace = namespace
        self.url = url
        self.key = key
        self.stop_at = stop_at
        self.rng = random.Random(seed)
        self.latency: dict[str, list[float]] = {"ingest": [], "recall": []}
        self.errors: Counter[str] = Counter()
        self.leaks: list[dict[str, Any]] = []
        self.items_checked = 0
        self.ingested: Counter[str] = Counter()  # session -> turns accepted
        self.guesses = 0
        self.guess_leaks = 0

    def session(self) -> str:
        return f"{self.namespace}-s{self.rng.randrange(SESSIONS_PER_NAMESPACE)}"

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=30) as http:
            n = 0
            while time.monotonic() < self.stop_at:
                n += 1
                topic = self.rng.choice(TOPICS)
                private = self.rng.random() < 0.25
                body = {
                    "role": "assistant" if n % 2 else "user", "agent_id": self.name,
                    "visibility": "private" if private else "shared",
                    "content": f"[{self.namespace}] {self.name} note {n} about the {topic}:"
                               f" we keep the {topic} settings in {self.namespace} only",
                }
                session = self.session()
                if self._call(http, "ingest", f"/v1/sessions/{session}/turns", body):
                    self.ingested[session] += 1
                if n % 10 == 0:  # a guessed id of the other namespace must look missing
                    other = f"{'ns-1' if self.namespace == 'ns-0' else 'ns-0'}-s{n % 3}"
                    self.guesses += 1
                    r = http.post(f"/v1/sessions/{other}/recall", json={"query": "settings"})
                    if r.status_code != 404:
                        self.guess_leaks += 1
                query = {"query": f"what about the {self.rng.choice(TOPICS)}?",
                         "agent_id": self.name, "token_budget": 400}
                result = self._call(http, "recall", f"/v1/sessions/{self.session()}/recall",
                                    query)
                if result is not None:
                    self._check(result)

    def _call(self, http: httpx.Client, op: str, path: str,
              body: dict[str, Any]) -> dict[str, Any] | None:
        started = time.perf_counter()
        try:
            r = http.post(path, json=body)
        except httpx.HTTPError as exc:
            self.errors[f"{op}: {type(exc).__name__}"] += 1
            return None
        self.latency[op].append((time.perf_counter() - started) * 1000)
        if r.status_code == 404 and op == "recall":
            return None  # a session nobody of this namespace has written to yet
        if r.status_code >= 300:
            self.errors[f"{op}: HTTP {r.status_code}"] += 1
            return None
        data: dict[str, Any] = r.json()
        return data

    def _check(self, result: dict[str, Any]) -> None:
        for item in result["items"]:
            self.items_checked += 1
            foreign = item.get("namespace") != self.namespace or (
                item["source_type"] == "turn"
                and not item["content"].startswith(f"[{self.namespace}]"))
            stolen = item.get("visibility") == "private" and item.get("agent_id") != self.name
            if foreign or stolen:
                self.leaks.append({"agent": self.name, "namespace": self.namespace,
                                   "item": item["content"][:80], "foreign": foreign,
                                   "private_of_other": stolen})


def run(agents: int = 20, duration: float = 60.0, embedder: str = "hashing") -> dict[str, Any]:
    """`agents` threads against `hivemem serve` for `duration` seconds; the result."""
    args = argparse.Namespace(agents=agents, duration=duration, embedder=embedder)
    folder = Path(tempfile.mkdtemp(prefix="hivemem-bench-api-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMEM_")}
    env.update({"HIVEMEM_EMBEDDING__PROVIDER": args.embedder, "HIVEMEM_LOG_LEVEL": "warning"})
    if args.embedder == "fastembed":
        env.setdefault("FASTEMBED_CACHE_PATH", str(model_cache()))
        env.setdefault("HF_HUB_OFFLINE", "1")
    store = str(folder / "store")
    keys: dict[str, str] = {}
    for namespace in NAMESPACES:
        out = subprocess.run(hivemem("--local", store, "apikey", "create", namespace, "--json"),
                             env=env, check=True, capture_output=True, text=True).stdout
        keys[namespace] = json.loads(out)["key"]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = folder / "server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(hivemem("--local", store, "serve", "--port", str(port)),
                                  env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"server did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.2)
        print(f"server ready on {url} ({args.embedder} embedder); {args.agents} agents for"
              f" {args.duration:.0f} s")
        stop_at = time.monotonic() + args.duration
        agents = [Agent(i, url, keys[NAMESPACES[i % 2]], NAMESPACES[i % 2], stop_at, seed=i)
                  for i in range(args.agents)]
        with CpuMonitor(extra_pids=[server.pid]) as cpu:
            started = time.perf_counter()
            for agent in agents:
                agent.start()
            for agent in agents:
                agent.join()
            wall = time.perf_counter() - started
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        accepted: Counter[str] = Counter()
        for agent in agents:
            accepted.update(agent.ingested)
        stats: dict[str, dict[str, int]] = {}
        settle_deadline = time.monotonic() + 120  # let the embed threads catch up
        while True:
            for namespace in NAMESPACES:
                for s in range(SESSIONS_PER_NAMESPACE):
                    session = f"{namespace}-s{s}"
                    r = httpx.get(f"{url}/v1/sessions/{session}/stats", timeout=10,
                                  headers={"Authorization": f"Bearer {keys[namespace]}"})
                    if r.status_code == 200:
                        stats[session] = {k: r.json()[k] for k in
                                          ("turns_enqueued", "turns_processed", "episodes")}
            settled = all(v["turns_processed"] >= v["turns_enqueued"] for v in stats.values())
            if settled or time.monotonic() > settle_deadline:
                break
            time.sleep(1)
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()

    latency = {op: [v for a in agents for v in a.latency[op]] for op in ("ingest", "recall")}
    errors: Counter[str] = Counter()
    for agent in agents:
        errors.update(agent.errors)
    leaks = [leak for a in agents for leak in a.leaks]
    ops = sum(len(v) for v in latency.values())
    result: dict[str, Any] = {
        "agents": args.agents, "duration_s": round(wall, 1), "embedder": args.embedder,
        "namespaces": len(NAMESPACES), "sessions": len(NAMESPACES) * SESSIONS_PER_NAMESPACE,
        "requests": ops, "throughput_rps": round(ops / wall, 1),
        "ingest_rps": round(len(latency["ingest"]) / wall, 1),
        "recall_rps": round(len(latency["recall"]) / wall, 1),
        "latency_ms": {op: summarize(v) for op, v in latency.items()},
        "errors": sum(errors.values()), "error_kinds": dict(errors),
        "recalled_items_checked": sum(a.items_checked for a in agents),
        "cross_namespace_results": sum(1 for x in leaks if x["foreign"]),
        "other_agents_private_results": sum(1 for x in leaks if x["private_of_other"]),
        "leak_examples": leaks[:5],
        "guessed_other_namespace_ids": sum(a.guesses for a in agents),
        "guessed_ids_not_404": sum(a.guess_leaks for a in agents),
        "turns_accepted": sum(accepted.values()),
        "turns_lost": sum(max(0, accepted[k] - v["turns_enqueued"]) for k, v in stats.items())
        + sum(n for k, n in accepted.items() if k not in stats),
        "turns_unprocessed_after_settling": sum(
            v["turns_enqueued"] - v["turns_processed"] for v in stats.values()),
        "sessions_after": stats,
        "server_metrics_lines": [line for line in metrics.splitlines()
                                 if line.startswith(("hivemem_ingested_turns_total",
                                                     "hivemem_recall_seconds_count"))],
        "cpu": cpu.result,
        "machine": machine_facts(),
    }

    print(f"\n{'op':<8} {'n':>7} {'rps':>7} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for op in ("ingest", "recall"):
        s = result["latency_ms"][op]
        print(f"{op:<8} {s['n']:>7} {s['n'] / wall:>7.1f} {s['p50']:>8.1f} {s['p95']:>8.1f}"
              f" {s['p99']:>8.1f}")
    print(f"\ntotal {ops} requests in {wall:.1f} s = {ops / wall:.1f} req/s;"
          f" errors {result['errors']} {dict(errors) or ''};"
          f" cross-namespace results {result['cross_namespace_results']};"
          f" other agents' private results {result['other_agents_private_results']}"
          f" (of {result['recalled_items_checked']} items checked)")
    print(f"guessed ids of the other namespace: {result['guessed_other_namespace_ids']},"
          f" not 404: {result['guessed_ids_not_404']}; turns accepted"
          f" {result['turns_accepted']}, lost {result['turns_lost']}, unprocessed after"
          f" settling {result['turns_unprocessed_after_settling']}")
    print(f"cpu: {cpu.result}")
    shutil.rmtree(folder, ignore_errors=True)
    return result
