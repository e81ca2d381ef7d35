#!/usr/bin/env python
"""The boundary stage's currency keeper, fed as a live session feeds it: one turn per batch
(a turn arrives, is embedded and handed on alone), on a real redis-server, over the turns of
a LoCoMo conversation. Per batch: the state read, the rules, the conditional write. Uses
internals (`CurrencyKeeper`, `SlotTableStore`): a probe.

    python bench/probes/keeper_batches.py run --turns 400
    python bench/probes/keeper_batches.py ab --baseline /tmp/base --rounds 3

`run` prints the CPU and wall milliseconds per batch (mean, p50, p95 over the batches past
the first 50, where the state is near its size cap) and the state's size; `ab` runs `run`
in alternating subprocesses for the baseline tree and this one. Saved to
bench/results/latest/keeper_batches.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/: harness

from harness import LATEST, machine_facts  # noqa: E402

CONVERSATION = Path(os.environ.get("HIVEMEM_SHARED", HERE.parents[2] / "shared")) / (
    "data/locomo-dev/26.json")


def _texts(path: Path, limit: int) -> list[tuple[str, str]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    conv = data.get("conversation", data)
    out = []
    for i in range(1, 100):
        for turn in conv.get(f"session_{i}") or []:
            out.append((str(turn["speaker"]), str(turn["text"])))
    return out[:limit]


def run(turns: int, conversation: Path) -> dict[str, Any]:
    from hivemem.config import ReflectionSettings
    from hivemem.domain.models import Turn
    from hivemem.domain.names import SessionName
    from hivemem.logs import configure_logging
    from hivemem.pipeline.messages import EmbeddedTurn
    from hivemem.pipeline.topology import Keys
    from hivemem.providers.embedders import HashingEmbedder
    from hivemem.store.currency import SlotTableStore
    from hivemem.testing import RedisServer
    from hivemem.workers.currency import CurrencyKeeper

    configure_logging("warning")
    said = _texts(conversation, turns)
    vectors = HashingEmbedder(384).embed_documents([t for _, t in said])
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    name = SessionName("probe")
    items = [EmbeddedTurn.of(Turn(
        turn_id=f"t{i}", session_id=name, agent_id=who, role="user", content=text,
        timestamp=t0 + timedelta(minutes=i), seq=i + 1, token_count=len(text.split())),
        vectors[i]) for i, (who, text) in enumerate(said)]
    with tempfile.TemporaryDirectory() as folder:
        server = RedisServer(Path(folder))
        server.start()
        client = server.client()
        keys = Keys(partitions=1)
        client.hset(keys.session_turn_ids(name), "#seq", len(items))  # as ingest leaves it
        keeper = CurrencyKeeper(SlotTableStore(client, keys), ReflectionSettings())
        cpu, wall = [], []
        for item in items:
            c, w = time.process_time(), time.perf_counter()
            keeper.apply(name, [item])
            cpu.append((time.process_time() - c) * 1000)
            wall.append((time.perf_counter() - w) * 1000)
        size = len(client.hget(keys.slot_state(name), "state") or b"")
        server.stop()
    steady_cpu, steady_wall = cpu[50:], wall[50:]

    def q(xs: list[float], p: float) -> float:
        return round(sorted(xs)[min(len(xs) - 1, int(p * len(xs)))], 2)

    return {"turns": len(items), "state_bytes": size,
            "cpu_ms_mean": round(statistics.fmean(steady_cpu), 2),
            "cpu_ms_p50": q(steady_cpu, 0.5), "cpu_ms_p95": q(steady_cpu, 0.95),
            "wall_ms_mean": round(statistics.fmean(steady_wall), 2),
            "wall_ms_p95": q(steady_wall, 0.95)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("run")
    one.add_argument("--turns", type=int, default=400)
    one.add_argument("--conversation", type=Path, default=CONVERSATION)
    one.add_argument("--json", action="store_true", help="print only the JSON line")
    ab = sub.add_parser("ab")
    ab.add_argument("--baseline", type=Path, required=True)
    ab.add_argument("--rounds", type=int, default=3)
    ab.add_argument("--turns", type=int, default=400)
    ab.add_argument("--conversation", type=Path, default=CONVERSATION)
    args = parser.parse_args()
    if args.command == "run":
        result = run(args.turns, args.conversation)
        print(json.dumps(result) if args.json else "\n".join(
            f"{k:>14}: {v}" for k, v in result.items()))
        return
    here = HERE.parents[1]
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for side, tree in (("baseline", args.baseline.resolve()), ("this", here)):
            env = {**os.environ, "PYTHONPATH": str(tree)}
            done = subprocess.run(
                [sys.executable, str(HERE / "keeper_batches.py"), "run", "--json",
                 "--turns", str(args.turns), "--conversation", str(args.conversation)],
                env=env, cwd=tree, capture_output=True, text=True, check=True)
            row = {"round": r + 1, "side": side, **json.loads(done.stdout.strip().splitlines()[-1])}
            rows.append(row)
            print(f"round {r + 1} {side:>8}: cpu mean {row['cpu_ms_mean']} p95 "
                  f"{row['cpu_ms_p95']} ms, wall mean {row['wall_ms_mean']} p95 "
                  f"{row['wall_ms_p95']} ms, state {row['state_bytes']} B", flush=True)
    out = LATEST / "keeper_batches.json"
    out.write_text(json.dumps({"machine": machine_facts(), "rows": rows,
                               "at": datetime.now(UTC).isoformat()}, indent=2))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
