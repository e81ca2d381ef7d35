import sys
import tempfile
from pathlib import Path

from hivemem.config import Settings
from hivemem.evaluation.runner import run_conversation
from hivemem.evaluation.scenarios import generate, judge
from hivemem.producer.client import MemoryClient

live = "--live" in sys.argv
with tempfile.TemporaryDirectory() as d:
    with MemoryClient.local(Path(d), Settings()) as c:
        n=h=0
        for turns in (10, 20, 40, 80):
            for it in range(3):
                conv = generate("progressive_requirements", turns, it, 0)
                s = conv.session_id
                if live:
                    for i, t in enumerate(conv.turns):
                        c.ingest(s, t.role, t.content, turn_id=f"t{i}")
                    c.wait_until_processed(s, 120)
                    res=[]
                    for p in conv.probes:
                        items = c.recall(s, p.query, token_budget=200)
                        res.append((p, judge(p, [x.content for x in items]).hit, items))
                else:
                    _, results = run_conversation(c, conv, 200)
                    res=[]
                    for p in conv.probes:
                        items = c.recall(s, p.query, token_budget=200)
                        res.append((p, judge(p, [x.content for x in items]).hit, items))
                for p, hit, items in res:
                    n+=1; h+=hit
                    if not hit:
                        print("MISS", turns, it, p.query, "exp", p.expected, "stale", p.stale)
                        for t in conv.turns:
                            if t.planted: print("     planted:", t.content)
                        for x in list(items)[:4]: print("    ", round(x.score,3), x.source_type, x.content[:100])
        print("hits", h, "/", n)
