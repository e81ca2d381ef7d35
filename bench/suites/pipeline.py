"""The write path's throughput, through the public API only.

- ingest: `MemoryClient.ingest` latency (single calls) and `ingest_many` throughput (batches
  of 100) on a throwaway redis-server (unix socket, AOF everysec, as in production), next to
  the server's own floor on the same socket: PING and a bare XADD of a turn-sized entry
  (redis-py, not hivemem: the baseline).
- embed: the embedded deployment (`MemoryClient.local`, the real model, its embed workers) on
  LoCoMo turns: `ingest_many` of N turns, clock until `wait_until_processed`; next to raw
  fastembed `TextEmbedding.embed` on the same texts (the model's own ceiling).
- freshness: ingest at a steady rate; per turn, the time until `get_session_stats` shows it
  processed (polled every 5 ms): how long a turn waits before recall can find it.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis
from harness import MODEL, CpuMonitor, Samples, locomo_conversations, locomo_turns, summarize

from hivemem import Backpressure, MemoryClient, RetryLater, Settings
from hivemem.testing import RedisServer


def locomo_texts(n: int) -> list[str]:
    """`n` LoCoMo turns, the conversations interleaved (as several agents would write)."""
    per = [locomo_turns(c) for c in locomo_conversations()]
    out: list[str] = []
    for i in range(max(len(t) for t in per)):
        out.extend(t[i] for t in per if i < len(t))
    return (out * (n // len(out) + 1))[:n]


def bench_ingest(n_single: int, n_many: int) -> dict[str, Any]:
    texts = locomo_texts(max(n_single, 100))
    with tempfile.TemporaryDirectory(prefix="hivemem-ingest-") as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        try:
            settings = Settings.model_validate({"redis": {"url": server.url, "key_prefix": "bi"},
                                                "embedding": {"provider": "hashing", "dim": 64}})
            client = MemoryClient(settings)
            bare = redis.Redis.from_url(server.url)
            ping, xadd, single = Samples(), Samples(), Samples()
            for i in range(n_single):  # interleaved, so all three see the same machine
                with ping.timed():
                    bare.ping()
                with xadd.timed():
                    bare.xadd("bench:bare", {"session_id": "s0", "role": "user",
                                             "content": texts[i % len(texts)]})
                with single.timed():
                    client.ingest("single", "user", texts[i % len(texts)])
            batch = [{"session_id": f"many-{i % 10}", "role": "user", "content": texts[i % 100]}
                     for i in range(100)]
            with CpuMonitor() as mon:
                t0 = time.perf_counter()
                for _ in range(max(1, n_many // 100)):
                    client.ingest_many(batch)
                many_s = time.perf_counter() - t0
            client.close()
        finally:
            server.stop()
    turns = max(1, n_many // 100) * 100
    return {"ingest_ms": single.summary(), "bare_xadd_ms": xadd.summary(),
            "ping_ms": ping.summary(),
            "ingest_many": {"turns": turns, "batch": 100, "seconds": round(many_s, 3),
                            "turns_per_s": round(turns / many_s, 1), "cpu": mon.result}}


def bench_embed(n: int, workers: int | None = None, *, raw: bool = True) -> dict[str, Any]:
    """`workers`: embed threads of the embedded deployment (None: its default, one per
    core); each runs its own model session on one ONNX thread. `raw`: also raw fastembed
    on the same texts (off for an A/B of two trees, where it is the same on both sides)."""
    from fastembed import TextEmbedding

    texts = locomo_texts(n)
    raw_s, raw_mon = None, None
    if raw:
        model = TextEmbedding(MODEL)
        list(model.embed(texts[:32]))  # load and warm
        with CpuMonitor() as raw_mon:
            t0 = time.perf_counter()
            list(model.embed(texts, batch_size=64))
            raw_s = time.perf_counter() - t0
        del model
    folder = tempfile.mkdtemp(prefix="hivemem-embed-")
    try:
        with MemoryClient.local(folder, Settings(), workers=workers) as client:
            client.ingest("warm", "user", "warm up the model")
            client.wait_until_processed("warm", timeout=300)
            rows = [{"session_id": f"embed-{i % 5}", "role": "user", "content": t}
                    for i, t in enumerate(texts)]
            with CpuMonitor() as mon:
                t0 = time.perf_counter()
                for start in range(0, len(rows), 100):
                    client.ingest_many(rows[start:start + 100])
                for s in range(5):
                    client.wait_until_processed(f"embed-{s}", timeout=3600)
                pipe_s = time.perf_counter() - t0
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"turns": n, "embed_workers": workers or "default",
            "pipeline_turns_per_s": round(n / pipe_s, 1),
            "raw_fastembed_turns_per_s": None if raw_s is None else round(n / raw_s, 1),
            "ratio": None if raw_s is None else round(raw_s / pipe_s, 3),
            "pipeline_cpu": mon.result, "raw_cpu": None if raw_mon is None else raw_mon.result}


def bench_freshness(rate: float, seconds: float) -> dict[str, Any]:
    texts = locomo_texts(int(rate * seconds) + 1)
    sent: dict[int, float] = {}
    seen: dict[int, float] = {}
    done = threading.Event()
    folder = tempfile.mkdtemp(prefix="hivemem-fresh-")
    try:
        with MemoryClient.local(folder, Settings()) as client:
            client.ingest("fresh", "user", "warm up the model")
            client.wait_until_processed("fresh", timeout=300)
            base = client.get_session_stats("fresh").turns_processed

            def poll() -> None:
                while not done.is_set() or len(seen) < len(sent):
                    processed = client.get_session_stats("fresh").turns_processed - base
                    now = time.perf_counter()
                    for k in range(1, processed + 1):
                        seen.setdefault(k, now)
                    if done.is_set() and now - last_sent[0] > 60:
                        return
                    time.sleep(0.005)

            last_sent = [time.perf_counter()]
            poller = threading.Thread(target=poll, daemon=True)
            poller.start()
            t0 = time.perf_counter()
            for i, text in enumerate(texts, 1):
                wait = t0 + i / rate - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                while True:
                    try:
                        client.ingest("fresh", "user", text)
                        break
                    except (Backpressure, RetryLater):
                        time.sleep(0.05)
                sent[i] = last_sent[0] = time.perf_counter()
            done.set()
            poller.join(timeout=120)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    lags = [(seen[k] - sent[k]) * 1000 for k in sent if k in seen]
    return {"rate_per_s": rate, "seconds": seconds, "turns": len(sent),
            "unseen": len(sent) - len(lags), "fresh_ms": summarize(lags)}
