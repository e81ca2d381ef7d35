import tempfile
from pathlib import Path

import hivemem
from hivemem.providers.embedders import HashingEmbedder

with tempfile.TemporaryDirectory() as d:
    with hivemem.MemoryClient.local(Path(d), embedder=HashingEmbedder()) as c:
        for role, who, text in [("user","dana","We decided to use PostgreSQL for the database."),("assistant","bot","Noted."),("user","dana","Change of plan: we switch the database to MySQL, ops only supports it.")]:
            c.ingest("s2", role, text, agent_id=who)
        c.wait_until_processed("s2", timeout=120)
        st = c._wiring.slot_tables
        print(st.state("s2").model_dump_json(indent=1)[:1500])
        print(st.view("s2"))
