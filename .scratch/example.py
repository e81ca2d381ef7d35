import sys
import tempfile
from pathlib import Path

import hivemem

emb=None
if "--hash" in sys.argv:
    from hivemem.providers.embedders import HashingEmbedder
    emb = HashingEmbedder()
with tempfile.TemporaryDirectory() as d:
    with hivemem.MemoryClient.local(Path(d), embedder=emb) as c:
        for role, who, text in [
            ("user", "dana", "Let's host the service on AWS, in eu-west-1."),
            ("assistant", "bot", "Decision: AWS eu-west-1 it is."),
            ("user", "dana", "What should the health endpoint be called?"),
            ("assistant", "bot", "Use /healthz, it is the common convention."),
            ("user", "dana", "Actually we're moving the hosting to GCP, the AWS credits ran out."),
            ("assistant", "bot", "Understood, GCP from now on."),
        ]:
            c.ingest("s", role, text, agent_id=who)
        c.wait_until_processed("s", timeout=120)
        for it in c.recall("s", "Where is the service hosted?", token_budget=300):
            print(round(it.score,3), it.source_type, it.content)
        print("--")
        for role, who, text in [("user","dana","Let's use PostgreSQL for the database."),("user","dana","Change of plan: MySQL instead, ops only supports it")]:
            c.ingest("s2", role, text, agent_id=who)
        c.wait_until_processed("s2", timeout=120)
        for it in c.recall("s2", "which database are we using now?", token_budget=40):
            print(round(it.score,3), it.source_type, it.content)
