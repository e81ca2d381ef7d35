import json
import sys

from hivemem.config import ReflectionSettings, Settings
from hivemem.domain.models import Turn
from hivemem.domain.slot_table import SlotState
from hivemem.evaluation.change import parse_suite
from hivemem.evaluation.change_runner import START, TURN_SPACING
from hivemem.pipeline.vectors import encode_vector_half
from hivemem.providers.embedders import build_embedder
from hivemem.workers.currency import step

suite = parse_suite(json.load(open(sys.argv[1])))
ids = set(sys.argv[2:])
emb = build_embedder(Settings().embedding)
for conv in suite.conversations:
    if conv.id not in ids: continue
    st = SlotState(); s = ReflectionSettings()
    vecs = emb.embed_documents([t.content for t in conv.turns])
    for i, t in enumerate(conv.turns):
        turn = Turn(turn_id=f"t{i}", session_id="s", agent_id=t.agent, role=t.role, content=t.content, timestamp=START+TURN_SPACING*i, seq=i+1, token_count=len(t.content.split()))
        st, rep, pers = step(st, turn, s, encode_vector_half(vecs[i]))
        print(f"t{i}", t.agent or t.role, "|", t.content[:100])
        for k, v in rep.items(): print("    REPLACED", k, "by", v.by, v.rule, v.slot)
    for f in st.current: print("  CUR", f.subject, "|", f.content[:70], f.source_turn_ids, f.status.value)
    for p in conv.probes: print("  PROBE", p.query, p.expected, p.stale)
