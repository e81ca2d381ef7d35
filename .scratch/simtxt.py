import sys

from hivemem.config import ReflectionSettings, Settings
from hivemem.domain.change import intent_of
from hivemem.domain.models import Turn
from hivemem.domain.slot_table import SlotState
from hivemem.domain.slots import slot_of
from hivemem.domain.values import values_of
from hivemem.evaluation.change_runner import START, TURN_SPACING
from hivemem.pipeline.vectors import encode_vector_half
from hivemem.providers.embedders import build_embedder
from hivemem.workers.currency import step

emb = build_embedder(Settings().embedding)
lines = [l.rstrip("\n") for l in open(sys.argv[1]) if l.strip()]
st = SlotState(); s = ReflectionSettings()
vecs = emb.embed_documents([l.split("|",1)[-1] for l in lines])
for i, l in enumerate(lines):
    who, text = l.split("|",1) if "|" in l else ("user", l)
    role = "assistant" if who == "assistant" else "user"
    turn = Turn(turn_id=f"t{i}", session_id="s", agent_id=None if who in ("user","assistant") else who, role=role, content=text, timestamp=START+TURN_SPACING*i, seq=i+1, token_count=5)
    st, rep, pers = step(st, turn, s, encode_vector_half(vecs[i]))
    print(f"t{i}", repr(slot_of(text, who)), intent_of(text).value, sorted(values_of(text)), "|", text[:90])
    for k, v in rep.items(): print("    REPLACED", k, "by", v.by, v.rule, v.slot)
for f in st.current: print("  CUR", repr(f.subject), "|", f.content[:70], f.source_turn_ids, f.status.value)
