"""Another tenant's data does not slow a namespace's session listing (issue 35, item 3): namespace
B's `GET /v1/sessions` and `GET /v1/sessions/{id}/related`, alone and after namespace A has made
`--sessions` sessions, in the same run (goal: within 1.5x of B alone).

    python bench/tenancy.py [--sessions 10000] [--b-sessions 20] [--repeats 50]
    python bench/ab.py --baseline /work/main -- tenancy.py     # the same against a baseline

Fills an embedded store (hashing embedder, its own valkey child, qdrant-edge, worker threads)
through the product's ingest path: B's sessions (a few turns each), then measures B's two
routes over loopback HTTP; then A's sessions (one turn each, `ingest_many` batches of 1,000),
waits until the pipeline has embedded every turn and this process is idle again (qdrant-edge
indexes a large fill in the background), and measures B's routes again (each measurement
after waiting for the rest of the machine to be quiet too). Prints
p50/p95 of each and the ratio with/alone, and saves bench/results/latest/tenancy.json.
Each round also times `/healthz` (any request's cost over loopback HTTP on this machine:
~45 ms under load, most of the two routes' time) and the same two reads in process through
B's scoped handle (`sessions()`, `related_sessions()`: what the routes do, without that floor).
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from harness import RESULTS, machine_facts, summarize, wait_for_quiet  # noqa: E402
from harness.settle import stage_backlog  # noqa: E402

from hivemem import MemoryClient  # noqa: E402
from hivemem.api import create_app  # noqa: E402
from hivemem.config import Settings  # noqa: E402
from hivemem.providers.embedders import HashingEmbedder  # noqa: E402

DIM = 64
GOAL_RATIO = 1.5
TOPICS = ("deploy", "database", "billing", "cache", "queue", "search", "auth", "metrics")


class Served:
    """The app on a free loopback port, in a thread."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning",
                                                    access_log=False))
        self.thread = threading.Thread(target=self.server.run,
                                       kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def settle(client: MemoryClient, timeout: float = 1800) -> float:
    """Wait until the embed and boundary stages have nothing left (seconds waited)."""
    t0 = time.perf_counter()
    while stage_backlog(client, "embed") or stage_backlog(client, "boundary"):
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("the pipeline did not catch up")
        time.sleep(0.1)
    return time.perf_counter() - t0


def idle(timeout: float = 300, threshold: float = 0.1) -> float:
    """Wait until this process's own threads (the embedded workers, qdrant-edge building its
    index in the background after a large fill) use under `threshold` of a core, so that
    the second measurement does not share the CPU with work the first one did not have."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        c0, w0 = time.process_time(), time.perf_counter()
        time.sleep(1.0)
        if (time.process_time() - c0) / (time.perf_counter() - w0) < threshold:
            break
    return time.perf_counter() - t0


def fill(client: MemoryClient, namespace: str, sessions: int, turns: int) -> float:
    handle = client.scoped(namespace=namespace)
    rows = [{"session_id": f"{namespace}-{s:05d}", "role": "user" if t % 2 else "assistant",
             "content": f"{namespace} session {s}: the {TOPICS[(s + t) % len(TOPICS)]} "
                        f"setting is {(s * 7 + t) % 97}"}
            for s in range(sessions) for t in range(turns)]
    began = time.perf_counter()
    for first in range(0, len(rows), 1000):
        handle.ingest_many(rows[first:first + 1000])
    return time.perf_counter() - began


def measure(client: MemoryClient, url: str, key: str, session: str,
            repeats: int) -> dict[str, list[float]]:
    """Interleaved per round: the two routes over HTTP, `/healthz` (what any request costs
    here: the floor under the other two), and the same two reads in process through B's
    scoped handle (the work the routes do, without the HTTP floor)."""
    handle = client.scoped(namespace="team-b")
    calls: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=300,
                      headers={"Authorization": f"Bearer {key}"}) as http:
        for name, path in (("http_list", "/v1/sessions"),
                           ("http_related", f"/v1/sessions/{session}/related"),
                           ("http_healthz", "/healthz")):
            calls[name] = lambda path=path: http.get(path).raise_for_status()
        calls["sdk_list"] = handle.sessions
        calls["sdk_related"] = lambda: handle.related_sessions(session)
        out: dict[str, list[float]] = {name: [] for name in calls}
        for call in calls.values():  # warm up
            call()
        for _ in range(repeats):
            for name, call in calls.items():
                began = time.perf_counter()
                call()
                out[name].append((time.perf_counter() - began) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000, help="namespace A's sessions")
    parser.add_argument("--b-sessions", type=int, default=20, help="namespace B's sessions")
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    settings = Settings.model_validate({"embedding": {"provider": "hashing", "dim": DIM}})
    with tempfile.TemporaryDirectory(prefix="hivemem-tenancy-bench-") as folder:
        client = MemoryClient.local(folder, settings, embedder=HashingEmbedder(DIM))
        try:
            key, _ = client.admin.api_keys().create("team-b", "tenancy bench")
            fill(client, "team-b", args.b_sessions, 4)
            settle(client)
            idle()
            quiet_before = wait_for_quiet(120)
            session = "team-b-00000"
            with Served(create_app(settings, client=client)) as served:
                alone = measure(client, served.url, key, session, args.repeats)
                print(f"filling namespace A with {args.sessions} sessions ...", flush=True)
                fill_s = fill(client, "team-a", args.sessions, 1)
                settle_s = settle(client)
                idle_s = idle()
                quiet_after = wait_for_quiet(120)
                print(f"filled in {fill_s:.1f} s, pipeline settled in {settle_s:.1f} s, "
                      f"idle after {idle_s:.1f} s more", flush=True)
                beside = measure(client, served.url, key, session, args.repeats)
        finally:
            client.close()
    results: dict[str, Any] = {}
    print(f"{'measure':13} {'alone p50':>10} {'p95':>8} {'with A p50':>11} {'p95':>8}"
          f" {'ratio':>6}  goal ratio <= {GOAL_RATIO}")
    for name in alone:
        a, b = summarize(alone[name]), summarize(beside[name])
        ratio = round(b["p50"] / a["p50"], 2)
        results[name] = {"b_alone": a, "b_with_a": b, "ratio_p50": ratio,
                         "ratio_p95": round(b["p95"] / a["p95"], 2)}
        print(f"{name:13} {a['p50']:10.2f} {a['p95']:8.2f} {b['p50']:11.2f} {b['p95']:8.2f}"
              f" {ratio:6.2f}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {"a_sessions": args.sessions, "b_sessions": args.b_sessions,
              "repeats": args.repeats, "fill_a_s": round(fill_s, 1),
              "machine_before": quiet_before, "machine_after": quiet_after,
              "goal_ratio": GOAL_RATIO, "results": results, "machine": machine_facts()}
    (RESULTS / "tenancy.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
