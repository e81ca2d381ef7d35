"""The explorer's first page of a long session's timeline and facts, against the API's own
listing, in the same run (issue 37: under 300 ms p95 at 100,000 turns).

    python bench/ui_listing.py [--turns 100000] [--repeats 30] [--no-browser]

Fills an embedded store (hashing embedder, its own valkey child, qdrant-edge, worker threads)
with one session of `--turns` turns through the product's ingest path, closes and reflects its
episodes (episodes of up to 500 turns and no topic shifts, so that ~200 episodes are
reflected rather than ~17,000: the fill is not what is measured), serves the app on a free
loopback port and times, interleaved in each round:

- api_timeline: `GET /timeline?limit=100`, the API's listing of the newest 100 events;
- api_facts: `GET /facts`, the API's listing of the current facts;
- page_timeline: the timeline page's three requests, in parallel as the page sends them
  (session header, stats, `timeline?limit=100`), wall time;
- page_facts: the facts page's request (`facts/full`);
- browser_timeline / browser_facts (a real Chromium, unless --no-browser or none is
  installed): from the page's navigation to the page drawn (`data-ready`), in the browser.

Prints p50/p95 per measure and saves bench/results/ui_listing.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from common import RESULTS, machine_facts, summarize  # noqa: E402

from hivemem import MemoryClient  # noqa: E402
from hivemem.api import create_app  # noqa: E402
from hivemem.config import Settings  # noqa: E402
from hivemem.providers.embedders import HashingEmbedder  # noqa: E402

DIM = 64
SESSION = "long"
GOAL_MS = 300.0
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WORDS = ("deploy", "database", "billing", "cache", "queue", "search", "auth", "metrics")


def fill(client: MemoryClient, turns: int) -> float:
    handle = client.scoped(namespace="bench", agent_id="agent-1")
    start = datetime.now(UTC) - timedelta(seconds=turns)
    began = time.perf_counter()
    for first in range(0, turns, 1000):
        handle.ingest_many([{
            "session_id": SESSION, "role": "user" if i % 2 else "assistant",
            "content": f"note {i}: we decided the {WORDS[i % len(WORDS)]} setting is {i % 97}",
            "timestamp": start + timedelta(seconds=i),
        } for i in range(first, min(turns, first + 1000))])
    handle.wait_until_processed(SESSION, 3600)
    handle.close_episode(SESSION)
    handle.wait_until_reflected(SESSION, 3600)
    return time.perf_counter() - began


class Served:
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


def timed(fn: Any) -> float:
    began = time.perf_counter()
    fn()
    return (time.perf_counter() - began) * 1000


def http_rounds(url: str, key: str, repeats: int) -> dict[str, list[float]]:
    base = f"/v1/sessions/{SESSION}"
    out: dict[str, list[float]] = {"api_timeline": [], "api_facts": [], "page_timeline": [],
                                   "page_facts": []}
    with httpx.Client(base_url=url, timeout=120,
                      headers={"Authorization": f"Bearer {key}"}) as http, \
            ThreadPoolExecutor(3) as pool:

        def get(path: str, **params: Any) -> None:
            http.get(path, params=params).raise_for_status()

        def page_timeline() -> None:
            for f in [pool.submit(get, base), pool.submit(get, f"{base}/stats"),
                      pool.submit(get, f"{base}/timeline", limit=100)]:
                f.result()

        for _ in range(repeats):
            out["api_timeline"].append(timed(lambda: get(f"{base}/timeline", limit=100)))
            out["api_facts"].append(timed(lambda: get(f"{base}/facts")))
            out["page_timeline"].append(timed(page_timeline))
            out["page_facts"].append(timed(lambda: get(f"{base}/facts/full")))
    return out


DRAWN = """async (route) => {
  delete document.body.dataset.ready;
  const t0 = performance.now();
  location.hash = route;
  while (document.body.dataset.ready === undefined) {
    await new Promise((r) => setTimeout(r, 2));
  }
  return performance.now() - t0;
}"""


def browser_rounds(url: str, key: str, repeats: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    out: dict[str, list[float]] = {"browser_timeline": [], "browser_facts": []}
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1366, "height": 820})
        page.goto(f"{url}/ui/#key={key}")
        page.wait_for_selector("#namespace", timeout=120_000)
        for _ in range(repeats):
            for name, route in (("browser_timeline", f"#/timeline/{SESSION}"),
                                ("browser_facts", f"#/facts/{SESSION}")):
                page.evaluate("() => { location.hash = '#/sessions'; }")
                page.wait_for_function("() => document.body.dataset.page === 'sessions'"
                                       " && document.body.dataset.ready !== undefined",
                                       timeout=120_000)
                out[name].append(float(page.evaluate(DRAWN, route)))
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    settings = Settings.model_validate({
        "embedding": {"provider": "hashing", "dim": DIM},
        "episodes": {"max_turns": 500, "topic_shift_threshold": -1.0},
    })
    with tempfile.TemporaryDirectory(prefix="hivemem-ui-bench-") as folder:
        client = MemoryClient.local(folder, settings, embedder=HashingEmbedder(DIM))
        try:
            print(f"filling {args.turns} turns ...", flush=True)
            fill_s = fill(client, args.turns)
            key, _ = client.admin.api_keys().create("bench", "ui bench")
            info = client.scoped(namespace="bench").session_info(SESSION)
            print(f"filled in {fill_s:.0f} s: {info.turns} turns, {info.episodes} episodes,"
                  f" {info.facts_active} current facts", flush=True)
            with Served(create_app(settings, client=client)) as served:
                results = http_rounds(served.url, key, args.repeats)
                if not args.no_browser and Path(CHROMIUM).exists():
                    results |= browser_rounds(served.url, key, args.repeats)
        finally:
            client.close()
    summary = {name: summarize(values) for name, values in results.items()}
    print(f"{'measure':18} {'p50 ms':>9} {'p95 ms':>9}  goal p95 < {GOAL_MS:.0f} ms")
    for name, s in summary.items():
        print(f"{name:18} {s['p50']:9.1f} {s['p95']:9.1f}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {"turns": args.turns, "repeats": args.repeats, "fill_s": round(fill_s, 1),
              "episodes": info.episodes, "facts_active": info.facts_active,
              "goal_p95_ms": GOAL_MS, "results": summary, "machine": machine_facts()}
    (RESULTS / "ui_listing.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
