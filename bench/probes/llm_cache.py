#!/usr/bin/env python
"""A caching proxy in front of the local LLM server: the same request is computed once.

    python bench/probes/llm_cache.py [--upstream http://127.0.0.1:8011] [--port 8012]
                                     [--cache /work/llm/llm_cache.jsonl]
    HIVEMEM_LLM__BASE_URL=http://127.0.0.1:8012/v1 ...

Why: the change suite plays each conversation in two modes (bench/probes/llm_reflection.py),
and both close the same episodes of the same turns (same aliases, same timestamps), so
reflection often sends the server byte-identical requests. At temperature 0 the server
answers an identical request identically, and on 2 shared cores one request costs 20-60 s:
the second one is answered from the cache instead. Only 200 replies to POSTs are cached,
keyed by the sha256 of the request body; the cache is a JSON-lines file (a restarted run
reuses it). Upstream requests go one at a time (the CPU server computes one at a time
anyway), so a client retry that arrives while the first attempt still computes waits and is
then answered from the cache. `GET /cache/stats` reports hits and misses. Not run in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class Cache:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.replies: dict[str, bytes] = {}
        self.stats = {"hits": 0, "misses": 0, "errors": 0, "upstream_s": 0.0}
        self.lock = threading.Lock()  # one upstream request at a time
        if path is not None and path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                entry = json.loads(line)
                self.replies[entry["key"]] = entry["reply"].encode("utf-8")

    def store(self, key: str, reply: bytes) -> None:
        self.replies[key] = reply
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "reply": reply.decode("utf-8")}) + "\n")


def handler(upstream: str, cache: Cache, timeout: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the LLM server logs every request already

        def _send(self, status: int, body: bytes, cached: bool = False) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Cache", "hit" if cached else "miss")
            self.end_headers()
            self.wfile.write(body)

        def _upstream(self, method: str, body: bytes | None) -> tuple[int, bytes]:
            request = urllib.request.Request(
                upstream + self.path, data=body, method=method,
                headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=timeout) as reply:
                    return reply.status, reply.read()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read()

        def do_GET(self) -> None:
            if self.path == "/cache/stats":
                self._send(200, json.dumps(cache.stats | {"entries": len(cache.replies)})
                           .encode("utf-8"))
                return
            status, body = self._upstream("GET", None)
            self._send(status, body)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            key = hashlib.sha256(self.path.encode("utf-8") + b"\0" + body).hexdigest()
            hit = False
            with cache.lock:
                if key in cache.replies:
                    hit = True
                    cache.stats["hits"] += 1
                    reply = cache.replies[key]
                    status = 200
                else:
                    started = time.perf_counter()
                    status, reply = self._upstream("POST", body)
                    cache.stats["upstream_s"] = round(
                        cache.stats["upstream_s"] + time.perf_counter() - started, 1)
                    if status == 200:
                        cache.stats["misses"] += 1
                        cache.store(key, reply)
                    else:
                        cache.stats["errors"] += 1
            # A client that gave up (its timeout) is gone; the reply stays cached.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._send(status, reply, cached=hit)

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", default="http://127.0.0.1:8011")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8012)
    ap.add_argument("--cache", type=Path, default=Path("/work/llm/llm_cache.jsonl"))
    ap.add_argument("--timeout-s", type=float, default=900.0, help="upstream timeout")
    args = ap.parse_args()
    cache = Cache(args.cache)
    server = ThreadingHTTPServer((args.host, args.port),
                                 handler(args.upstream.rstrip("/"), cache, args.timeout_s))
    print(f"llm_cache: {args.host}:{args.port} -> {args.upstream}, {len(cache.replies)} cached",
          flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
