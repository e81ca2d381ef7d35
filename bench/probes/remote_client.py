"""What the remote client SDK costs: ingest and recall through `hivemem.connect` next to the
same calls in-process (`ScopedMemory`) and as bare httpx requests to the same API, one
installation, one run, interleaved (so the noisy machine hits all three alike).

    python bench/probes/remote_client.py [--turns 300] [--recalls 100]

One process: a throwaway redis-server (unix socket), Qdrant `:memory:`, the hashing embedder,
the embed/boundary/reflect workers as threads, the API under uvicorn on loopback. Prints
p50/p95/p99 per way and the ratios remote/in-process and remote/bare-httpx; saves
bench/results/remote_client.json.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from harness import RESULTS, RedisServer, machine_facts, summarize  # noqa: E402

from hivemem import MemoryClient, Settings, connect  # noqa: E402
from hivemem.api import create_app  # noqa: E402
from hivemem.providers.embedders import HashingEmbedder  # noqa: E402
from hivemem.runtime.metrics import Metrics  # noqa: E402
from hivemem.runtime.wiring import Wiring  # noqa: E402
from hivemem.store.apikeys import ApiKeyStore  # noqa: E402
from hivemem.store.vectors.server import ServerVectorStore  # noqa: E402

DIM = 256
TEXTS = ("We deploy with Helm on GKE", "The cache is Redis 7 with LRU eviction",
         "Billing runs nightly at 02:00 UTC", "Search uses BM25 plus dense vectors")


def serve(app: Any) -> tuple[uvicorn.Server, str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return server, f"http://127.0.0.1:{sock.getsockname()[1]}"


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--recalls", type=int, default=100)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="hivemem-bench-remote-"))
    redis_server = RedisServer(folder)
    redis_server.start()
    conn = redis_server.client()
    settings = Settings.model_validate({"embedding": {"provider": "hashing", "dim": DIM}})
    embedder = HashingEmbedder(DIM)
    vectors = ServerVectorStore(settings.qdrant, DIM, location=":memory:")
    wiring = Wiring(settings, redis=conn, vectors=vectors, embedder=embedder)
    client = MemoryClient(settings, redis_client=conn, vector_store=vectors, embedder=embedder)
    workers = [wiring.embed_worker(wiring.connect(), consumer="bench-embed"),
               wiring.boundary_worker(wiring.connect(), consumer="bench-boundary")]
    for worker in workers:
        threading.Thread(target=worker.run, daemon=True).start()
    key, _ = ApiKeyStore(conn, client.keys).create("bench", "bench")
    server, url = serve(create_app(settings, client=client, metrics=Metrics()))
    local = client.scoped(namespace="bench", agent_id="a")
    remote = connect(url, api_key=key, agent_id="a")
    bare = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    ways = ("in_process", "remote_client", "bare_httpx")
    sessions = {w: f"bench-{w}" for w in ways}
    ingest: dict[str, list[float]] = {w: [] for w in ways}
    recall: dict[str, list[float]] = {w: [] for w in ways}

    def call(way: str, op: str, text: str) -> None:
        sid = sessions[way]
        if op == "ingest":
            if way == "in_process":
                local.ingest(sid, "user", text)
            elif way == "remote_client":
                remote.ingest(sid, "user", text)
            else:
                bare.post(f"/v1/sessions/{sid}/turns", json={
                    "role": "user", "content": text, "agent_id": "a"}).raise_for_status()
        elif way == "in_process":
            local.recall(sid, text)
        elif way == "remote_client":
            remote.recall(sid, text)
        else:
            bare.post(f"/v1/sessions/{sid}/recall", json={
                "query": text, "agent_id": "a"}).raise_for_status()

    try:
        for i in range(args.turns):
            text = f"{TEXTS[i % len(TEXTS)]} (note {i})"
            for way in ways:
                ingest[way].append(timed(lambda w=way, t=text: call(w, "ingest", t)))
        for way in ways:
            local.wait_until_processed(sessions[way], 120)
        for i in range(args.recalls):
            query = TEXTS[i % len(TEXTS)]
            for way in ways:
                recall[way].append(timed(lambda w=way, q=query: call(w, "recall", q)))
    finally:
        remote.close()
        bare.close()
        server.should_exit = True
        for worker in workers:
            worker.stop()
        vectors.close()
        redis_server.stop()
    report: dict[str, Any] = {
        "turns": args.turns, "recalls": args.recalls, "machine": machine_facts(),
        "ingest_ms": {w: summarize(ingest[w]) for w in ways},
        "recall_ms": {w: summarize(recall[w]) for w in ways},
    }
    ratios: dict[str, float] = {}
    for op in ("ingest_ms", "recall_ms"):
        for stat in ("p50", "p95", "p99"):
            mine = report[op]["remote_client"][stat]
            ratios[f"{op}.{stat}.remote/in_process"] = round(
                mine / report[op]["in_process"][stat], 2)
            ratios[f"{op}.{stat}.remote/bare_httpx"] = round(
                mine / report[op]["bare_httpx"][stat], 2)
    report["ratios"] = ratios
    for op in ("ingest_ms", "recall_ms"):
        for way in ways:
            s = report[op][way]
            print(f"{op:10} {way:14} p50 {s['p50']:8.2f}  p95 {s['p95']:8.2f}"
                  f"  p99 {s['p99']:8.2f}  n {s['n']}")
    for name, value in ratios.items():
        print(f"{name:40} {value}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "remote_client.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {RESULTS / 'remote_client.json'}")


if __name__ == "__main__":
    main()
