import time, random
from datetime import UTC, datetime, timedelta
from hivemem.config import ReflectionSettings
from hivemem.domain.models import Turn
from hivemem.domain.slot_table import SlotState
from hivemem.pipeline.vectors import encode_vector_half
from hivemem.providers.embedders import HashingEmbedder
from hivemem.workers.currency import step
emb = HashingEmbedder(384)
rng = random.Random(0)
topics = ["database", "cache", "queue", "frontend", "timeout", "deadline", "region", "budget", "owner", "formatter"]
vals = ["PostgreSQL","MySQL","Redis","Kafka","React","Vue","Dublin","Frankfurt","Jonas","Marta","Black","Ruff"]
st = SlotState(); s = ReflectionSettings(); times = []
T0 = datetime(2026,1,1,tzinfo=UTC)
for i in range(1, 601):
    t = rng.choice(topics)
    text = rng.choice([f"The {t} is {rng.choice(vals)} for service{i%37}.", f"Let's switch the {t} to {rng.choice(vals)}.", f"random chatter number {i} about lunch", f"We have {rng.randint(2,900)} items in the {t} backlog{i}."])
    turn = Turn(turn_id=f"t{i}", session_id="s", role="user", content=text, timestamp=T0+timedelta(seconds=i), seq=i, token_count=10)
    v = encode_vector_half(emb.embed_documents([text])[0])
    a = time.perf_counter(); st, rep, pers = step(st, turn, s, v); times.append((time.perf_counter()-a)*1000)
    if i % 100 == 0:
        js = st.model_dump_json()
        b = time.perf_counter(); SlotState.model_validate_json(js); parse = (time.perf_counter()-b)*1000
        print(i, "step p50 %.2f p95 %.2f ms" % (sorted(times[-100:])[50], sorted(times[-100:])[95]), "current", len(st.current), "history", len(st.history), "state KB", len(js)//1024, "parse ms %.2f" % parse)
