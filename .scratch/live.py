"""Live change-suite measurement: ingest, wait_until_processed (embed), no close, recall."""
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

from hivemem.config import Settings
from hivemem.evaluation.change import parse_suite, probe_result
from hivemem.evaluation.change_runner import START, TURN_SPACING
from hivemem.evaluation.runs import timed_recall
from hivemem.producer.client import MemoryClient

mode = sys.argv[2] if len(sys.argv) > 2 else "live"
path = sys.argv[1]
show = "--show" in sys.argv
emb = None
if "--hash" in sys.argv:
    from hivemem.providers.embedders import HashingEmbedder
    emb = HashingEmbedder()
suite = parse_suite(json.load(open(path)))
tot = Counter(); cat = Counter(); catn = Counter()
with tempfile.TemporaryDirectory() as d:
    with MemoryClient.local(Path(d), Settings(), embedder=emb) as c:
        for conv in suite.conversations:
            s = conv.session_id
            for i, t in enumerate(conv.turns):
                c.ingest(s, t.role, t.content, agent_id=t.agent, turn_id=f"t{i}", timestamp=START + TURN_SPACING * i)
            if mode == "reflected":
                c.close_session(s)
                c.wait_until_processed(s, 120)
                c.wait_until_processed(s, 120, stage="boundary")
                c.wait_until_reflected(s, 120)
            else:
                c.wait_until_processed(s, 120)
            for p in conv.probes:
                items, ms = timed_recall(c, s, p.query, 300)
                r = probe_result("hivemem", conv, p, [it.content for it in items], items.used_tokens, ms)
                tot["n"] += 1; tot["strict"] += r.strict; tot["ranked"] += r.ranked
                catn[p.category] += 1; cat[p.category] += r.strict
                if show and not r.strict:
                    print("FAIL", conv.id, p.category, "|", p.query, "| exp", p.expected, "stale", p.stale, "ranked", r.ranked)
                    for k, it in enumerate(items):
                        if k < 3 or any(x.lower() in it.content.lower() for x in p.stale):
                            print("    ", k, round(it.score,3), it.source_type, it.content[:110])
print(mode, "strict", tot["strict"], "/", tot["n"], "ranked", tot["ranked"])
for k in sorted(catn): print("  ", k, cat[k], "/", catn[k])
