"""The explorer's first page of a long session's timeline and facts, against the API's own
listing, in the same run (issue 37: under 300 ms p95 at 100,000 turns).

    python bench/ui_listing.py [--turns 100000] [--repeats 30] [--no-browser]
                               [--baseline-tree /work/main] [--store DIR]

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

With `--baseline-tree PATH` (another checkout, e.g. main), the same store is served twice,
each by its own process over its own copy of the folder: one runs this tree's code, the other
PATH's (`PYTHONPATH=PATH`). Every round measures both, alternating which goes first, so the
baseline and the candidate see the same load; the ratios candidate / baseline are printed.
`--store DIR` keeps the filled folder there (and reuses it when it is filled already).

Prints p50/p95 per measure and saves bench/results/ui_listing.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
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


def settings() -> Settings:
    return Settings.model_validate({
        "embedding": {"provider": "hashing", "dim": DIM},
        "episodes": {"max_turns": 500, "topic_shift_threshold": -1.0},
    })


def open_store(folder: Path) -> MemoryClient:
    return MemoryClient.local(folder, settings(), embedder=HashingEmbedder(DIM))


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


def filled(folder: Path, turns: int) -> dict[str, Any]:
    """The store at `folder`, filled with `turns` turns (once: `fill.json` says it is)."""
    done = folder / "fill.json"
    if done.exists():
        facts = json.loads(done.read_text())
        if facts["turns"] == turns:
            return dict(facts)
        raise SystemExit(f"{folder} holds {facts['turns']} turns, not {turns}")
    folder.mkdir(parents=True, exist_ok=True)
    client = open_store(folder / "store")
    try:
        print(f"filling {turns} turns ...", flush=True)
        fill_s = fill(client, turns)
        key, _ = client.admin.api_keys().create("bench", "ui bench")
        info = client.scoped(namespace="bench").session_info(SESSION)
    finally:
        client.close()
    facts = {"turns": turns, "fill_s": round(fill_s, 1), "key": key, "episodes": info.episodes,
             "facts_active": info.facts_active}
    done.write_text(json.dumps(facts))
    print(f"filled in {fill_s:.0f} s: {info.turns} turns, {info.episodes} episodes,"
          f" {info.facts_active} current facts", flush=True)
    return facts


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


def serve(folder: Path, url_file: Path) -> None:
    """`--serve`: serve the store at `folder` until SIGTERM; its address goes to `url_file`."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    import hivemem

    print(f"serving {folder} with {hivemem.__file__}", file=sys.stderr, flush=True)
    client = open_store(folder)
    try:
        with Served(create_app(settings(), client=client)) as served:
            url_file.write_text(served.url)
            stop.wait()
    finally:
        client.close()


class Child:
    """One tree's code serving one copy of the store, in a process of its own."""

    def __init__(self, name: str, tree: Path, folder: Path) -> None:
        self.name = name
        self.url_file = folder.parent / f"{name}.url"
        self.url_file.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(folder), "--url-file",
             str(self.url_file)], env=env)

    def wait(self) -> str:
        deadline = time.monotonic() + 600
        while not self.url_file.exists() or not self.url_file.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the {self.name} server did not start")
            time.sleep(0.2)
        return self.url_file.read_text()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def timed(fn: Any) -> float:
    began = time.perf_counter()
    fn()
    return (time.perf_counter() - began) * 1000


class HttpMeasures:
    """The API's listings and the pages' requests, against one server."""

    def __init__(self, url: str, key: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=120,
                                 headers={"Authorization": f"Bearer {key}"})
        self.pool = ThreadPoolExecutor(3)
        self.out: dict[str, list[float]] = {"api_timeline": [], "api_facts": [],
                                            "page_timeline": [], "page_facts": []}

    def get(self, path: str, **params: Any) -> None:
        self.http.get(path, params=params).raise_for_status()

    def round(self) -> None:
        base = f"/v1/sessions/{SESSION}"

        def page_timeline() -> None:
            for f in [self.pool.submit(self.get, base),
                      self.pool.submit(self.get, f"{base}/stats"),
                      self.pool.submit(self.get, f"{base}/timeline", limit=100)]:
                f.result()

        self.out["api_timeline"].append(timed(lambda: self.get(f"{base}/timeline", limit=100)))
        self.out["api_facts"].append(timed(lambda: self.get(f"{base}/facts")))
        self.out["page_timeline"].append(timed(page_timeline))
        self.out["page_facts"].append(timed(lambda: self.get(f"{base}/facts/full")))

    def close(self) -> None:
        self.pool.shutdown()
        self.http.close()


DRAWN = """async (route) => {
  delete document.body.dataset.ready;
  const t0 = performance.now();
  location.hash = route;
  while (document.body.dataset.ready === undefined) {
    await new Promise((r) => setTimeout(r, 2));
  }
  return performance.now() - t0;
}"""


class BrowserMeasures:
    """The pages in Chromium, navigation to drawn, against one server."""

    def __init__(self, browser: Any, url: str, key: str) -> None:
        self.page = browser.new_page(viewport={"width": 1366, "height": 820})
        self.page.goto(f"{url}/ui/#key={key}")
        self.page.wait_for_selector("#namespace", timeout=120_000)
        self.out: dict[str, list[float]] = {"browser_timeline": [], "browser_facts": []}

    def round(self) -> None:
        for name, route in (("browser_timeline", f"#/timeline/{SESSION}"),
                            ("browser_facts", f"#/facts/{SESSION}")):
            self.page.evaluate("() => { location.hash = '#/sessions'; }")
            self.page.wait_for_function("() => document.body.dataset.page === 'sessions'"
                                        " && document.body.dataset.ready !== undefined",
                                        timeout=120_000)
            self.out[name].append(float(self.page.evaluate(DRAWN, route)))


def measure(urls: dict[str, str], key: str, repeats: int, browser: bool
            ) -> dict[str, dict[str, list[float]]]:
    """Every measure of every server, `repeats` rounds, the servers' order alternating."""
    names = list(urls)
    http = {name: HttpMeasures(url, key) for name, url in urls.items()}
    try:
        for r in range(repeats):
            for name in names[::-1] if r % 2 else names:
                http[name].round()
    finally:
        for h in http.values():
            h.close()
    results = {name: dict(h.out) for name, h in http.items()}
    if not browser:
        return results
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        pages = {name: BrowserMeasures(chromium, url, key) for name, url in urls.items()}
        for r in range(repeats):
            for name in names[::-1] if r % 2 else names:
                pages[name].round()
        for name, page in pages.items():
            results[name] |= page.out
        chromium.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--baseline-tree", type=Path, default=None,
                        help="another checkout to serve the same store with, as the baseline")
    parser.add_argument("--store", type=Path, default=None,
                        help="keep the filled store in this folder (reused when filled)")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--url-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.url_file)
        return
    browser = not args.no_browser and Path(CHROMIUM).exists()
    with tempfile.TemporaryDirectory(prefix="hivemem-ui-bench-") as scratch:
        folder = args.store or Path(scratch) / "filled"
        facts = filled(folder, args.turns)
        trees = {"candidate": REPO}
        if args.baseline_tree is not None:
            trees["baseline"] = args.baseline_tree.resolve()
        children = []
        try:
            for name, tree in trees.items():
                copy = Path(scratch) / name / "store"
                shutil.copytree(folder / "store", copy, symlinks=True,
                                ignore=shutil.ignore_patterns("*.sock", "*.pid", "*.lock"))
                children.append(Child(name, tree, copy))
            urls = {child.name: child.wait() for child in children}
            print(f"serving: {urls}", flush=True)
            results = measure(urls, facts["key"], args.repeats, browser)
        finally:
            for child in children:
                child.stop()
    summary = {name: {m: summarize(v) for m, v in measures.items()}
               for name, measures in results.items()}
    print(f"{'tree':10} {'measure':18} {'p50 ms':>9} {'p95 ms':>9}  goal p95 < {GOAL_MS:.0f} ms")
    for name, measures in summary.items():
        for m, s in measures.items():
            print(f"{name:10} {m:18} {s['p50']:9.1f} {s['p95']:9.1f}")
    ratios: dict[str, dict[str, float]] = {}
    if "baseline" in summary:
        print(f"{'ratio candidate / baseline':29} {'p50':>9} {'p95':>9}")
        for m, s in summary["candidate"].items():
            b = summary["baseline"][m]
            ratios[m] = {q: round(s[q] / b[q], 3) for q in ("p50", "p95")}
            print(f"{m:29} {ratios[m]['p50']:9.3f} {ratios[m]['p95']:9.3f}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {"turns": args.turns, "repeats": args.repeats, "fill_s": facts["fill_s"],
              "episodes": facts["episodes"], "facts_active": facts["facts_active"],
              "goal_p95_ms": GOAL_MS,
              "trees": {name: str(tree) for name, tree in trees.items()},
              "results": summary, "ratios": ratios, "machine": machine_facts()}
    (RESULTS / "ui_listing.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
