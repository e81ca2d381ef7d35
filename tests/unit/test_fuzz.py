"""Bad input, generated: the SDK and the HTTP API answer only with documented errors.

Hypothesis throws random unicode (lone surrogates, NULs, RTL marks, emoji), huge strings,
deep and cyclic metadata, wrong types, hostile ids (``*``, ``{``, ``:``, key-like strings)
and negative or huge budgets at `MemoryClient` (on fakeredis) and at the HTTP API (in
process). The properties: the SDK raises `ValidationError` or succeeds (no other exception);
a refused call writes nothing; an accepted turn reads back intact and decodes for the
workers; an accepted turn is stored in both vector stores (qdrant-client and qdrant-edge),
reads back equal, and still does after the edge store is closed and reopened (metadata
nested ~124 levels once made qdrant-edge's WAL unreadable); the API answers 2xx or a 4xx
problem JSON, never a 500.

CI runs a few dozen examples per property; ``HIVEMEM_FUZZ_EXAMPLES=10000`` (or
``bench/faults.py``) runs the benchmark mode. `OUTCOMES` counts what happened.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hivemem import MemoryClient, NotFound, Settings, ValidationError
from hivemem.pipeline.topology import Keys, partition_of
from hivemem.pipeline.wire import turn_from_wire
from hivemem.providers.embedders import HashingEmbedder
from hivemem.testing import connect_fake, fake_server
from tests.support.streams import turn_entries, turns_len

EXAMPLES = int(os.environ.get("HIVEMEM_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 100, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],
)
OUTCOMES: Counter[str] = Counter()
KEYS = Keys("hm")
SETTINGS = Settings.model_validate({"embedding": {"provider": "hashing", "dim": 64}})

# -- strategies -----------------------------------------------------------------------------

NASTY = ["\ud800", "\udfff", "\x00", "\u202e", "\u200f", "\ufeff", "🦄", "👩‍👩‍👧", "\n",
         "\r\n", "\t", "\u0301", "ﷺ", "\U0001d54f", "\x7f", "\\", "\"", "'", "%s", "{}", "${x}"]
chars = st.characters(codec=None, exclude_categories=())  # lone surrogates included


def _strings(max_size: int, min_size: int = 0) -> st.SearchStrategy[str]:
    return st.lists(st.one_of(chars, st.sampled_from(NASTY)), min_size=min_size,
                    max_size=max_size).map("".join)


texts = st.one_of(
    _strings(200),
    # Huge: one piece repeated up to well past the 32 KiB content limit.
    st.builds(lambda piece, n: piece * n, _strings(8, 1), st.integers(1, 20_000)),
)
HOSTILE_IDS = ["*", "{", "}", "{a}", ":", "a:b", "hm:s:x:seq", "x:seq", "x:ids", "*:*", "?",
               "[a]", "..", ".", "-", "a" * 128, "a" * 129, "", " ", "a b", "a\nb", "é",
               "s:ep:state", "0", "-1", "null", "None", "\x00", "%2F", "a/b"]


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any],
           p: float = 0.75) -> st.SearchStrategy[Any]:
    """`good` with probability ~p, else `bad` (one_of flattens nested branches, so a plain
    one_of would drown the valid values): the accepted path gets exercised too."""
    return st.integers(0, 99).flatmap(lambda i: good if i < p * 100 else bad)


valid_ids = st.from_regex(r"[A-Za-z0-9._:-]{1,40}", fullmatch=True)
ids = mostly(valid_ids, st.one_of(
    st.sampled_from(HOSTILE_IDS),
    st.from_regex(r"[A-Za-z0-9._:*{}\[\]-]{0,130}", fullmatch=True), texts))
wrong_types = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                        st.binary(max_size=20), st.lists(st.integers(), max_size=3),
                        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
json_leaves = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70),
                        max_value=2**70), st.floats(allow_nan=True, allow_infinity=True),
                        _strings(30))
json_values = st.recursive(
    json_leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(_strings(10), inner, max_size=4)),
    max_leaves=20,
)


def _deep(depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    node = out
    for _ in range(depth):
        node["k"] = {}
        node = node["k"]
    return out


def _cyclic() -> dict[str, Any]:
    d: dict[str, Any] = {"a": 1}
    d["self"] = d
    return d


metadata = mostly(st.none(), st.one_of(
    st.dictionaries(_strings(10), json_values, max_size=5),
    st.integers(0, 5000).map(_deep), st.just(None).map(lambda _: _cyclic()),
    st.dictionaries(st.integers(), st.integers(), max_size=2),  # non-string keys
    st.builds(lambda n: {"big": "x" * n}, st.integers(0, 40_000)),
    wrong_types,
), 0.5)
valid_roles = st.sampled_from(["user", "assistant", "system", "tool"])
roles = mostly(valid_roles, st.one_of(texts, wrong_types))
markers = st.one_of(st.none(), st.lists(st.one_of(st.sampled_from(
    ["decision", "constraint", "failure", "goal", "custom:x"]), texts), max_size=4), wrong_types)
timestamps = st.one_of(
    st.none(), st.datetimes(timezones=st.just(UTC)), st.datetimes(),  # naive: refused
    st.just(datetime.max.replace(tzinfo=UTC)), st.just(datetime.min.replace(tzinfo=UTC)),
    wrong_types,
)
budgets = mostly(st.one_of(st.none(), st.integers(1, 10**7)), st.one_of(
    st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 1, 2**31, 2**63, 10**30]),
    wrong_types), 0.6)
queries = mostly(st.text(min_size=1, max_size=80), st.one_of(texts, wrong_types), 0.6)


def _outcome(kind: str) -> None:
    OUTCOMES[kind] += 1


# -- SDK ------------------------------------------------------------------------------------


@pytest.fixture
def fresh() -> Iterator[Any]:
    """A factory of empty fakeredis-backed clients (one per example)."""

    def _make() -> tuple[MemoryClient, Any]:
        r = connect_fake(fake_server())
        return MemoryClient(SETTINGS, redis_client=r), r

    yield _make


@FUZZ
@given(session_id=ids, role=roles, content=mostly(texts, wrong_types, 0.9), agent_id=mostly(
    st.none(), st.one_of(ids, wrong_types)), markers=mostly(st.none(), markers),
    meta=metadata, ts=mostly(st.none(), timestamps),
    turn_id=mostly(st.none(), st.one_of(ids, wrong_types), 0.5),
    namespace=mostly(st.none(), ids),
    visibility=mostly(st.sampled_from(["shared", "private"]), st.one_of(texts, wrong_types)))
def test_sdk_ingest_documented_errors_only_and_nothing_partial(
    fresh: Any, session_id: Any, role: Any, content: Any, agent_id: Any, markers: Any,
    meta: Any, ts: Any, turn_id: Any, namespace: Any, visibility: Any,
) -> None:
    client, r = fresh()
    try:
        turn = client.ingest(session_id, role, content, agent_id=agent_id, markers=markers,
                             metadata=meta, timestamp=ts, turn_id=turn_id, namespace=namespace,
                             visibility=visibility)
    except ValidationError as exc:
        assert exc.field and exc.message
        assert r.dbsize() == 0, f"refused ({exc}) but wrote {r.keys('*')}"
        _outcome(f"sdk.ingest.refused.{exc.field.split('.')[0].split('[')[0]}")
        return
    _outcome("sdk.ingest.accepted")
    # What was accepted reads back intact and decodes the way the embed worker decodes it.
    assert turn.content == content and turn.session_id == session_id
    [(_, fields)] = turn_entries(r, KEYS)
    stored = turn_from_wire(fields[b"turn"], int(fields[b"seq"]))
    assert stored.content == content and stored.seq == turn.seq == 1
    assert stored.metadata == turn.metadata
    assert client.get_session_stats(session_id, namespace=namespace).turns_enqueued == 1


@FUZZ
@given(rows=st.lists(mostly(
    st.fixed_dictionaries({"session_id": ids, "role": roles, "content": texts},
                          optional={"metadata": metadata, "turn_id": ids}),
    st.one_of(wrong_types, st.fixed_dictionaries({"session_id": ids, "extra": texts})), 0.9),
    min_size=1, max_size=6))
def test_sdk_ingest_many_is_all_or_nothing(fresh: Any, rows: list[Any]) -> None:
    client, r = fresh()
    try:
        turns = client.ingest_many(rows)
    except ValidationError as exc:
        assert r.dbsize() == 0, f"refused ({exc}) but wrote {r.keys('*')}"
        _outcome("sdk.ingest_many.refused")
        return
    _outcome("sdk.ingest_many.accepted")
    assert turns_len(r, KEYS) == len([t for t in turns if not t.duplicate])


@FUZZ
@given(suffix=st.sampled_from(["seq", "ids", "ep", "ep:state", "reflect", "ns", "x"]),
       base=st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True))
def test_key_like_session_ids_do_not_touch_each_other(
    fresh: Any, suffix: str, base: str
) -> None:
    client, _r = fresh()
    other = f"{base}:{suffix}"
    client.ingest(base, "user", "one")
    client.ingest(other, "user", "two")
    client.ingest(other, "user", "three")
    assert client.get_session_stats(base).turns_enqueued == 1
    assert client.get_session_stats(other).turns_enqueued == 2
    _outcome("sdk.key_isolation")


@FUZZ
@given(session_id=valid_ids, namespaces=st.lists(valid_ids, min_size=2, max_size=3,
                                                 unique=True),
       writes=st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=12))
def test_one_id_in_several_namespaces_is_several_sessions(
    fresh: Any, session_id: str, namespaces: list[str], writes: list[tuple[int, bool]],
) -> None:
    """Whoever writes first, one by one or in a batch, each namespace's session of the id
    takes only its own turns, counts from 1, and lists, reads and answers as if the id
    were used nowhere else (an id no namespace of the set wrote is missing there alike)."""
    client, _r = fresh()
    own: dict[str, list[str]] = {ns: [] for ns in namespaces}
    for i, (which, batch) in enumerate(writes):
        ns = namespaces[which % len(namespaces)]
        text = f"{ns} turn {i}"
        if batch:
            turn = client.ingest_many([{"session_id": session_id, "role": "user",
                                        "content": text, "namespace": ns}])[0]
        else:
            turn = client.ingest(session_id, "user", text, namespace=ns)
        own[ns].append(text)
        assert turn.seq == len(own[ns])  # never a seq another namespace took
    for ns, texts_ in own.items():
        handle = client.scoped(namespace=ns)
        if not texts_:
            assert handle.sessions() == []
            with pytest.raises(NotFound):  # exactly a missing session
                client.get_session_stats(session_id, namespace=ns)
            continue
        assert handle.sessions() == [session_id]
        assert client.get_session_stats(session_id, namespace=ns).turns_enqueued == len(texts_)
        got = [t.content for t in client.recent_turns(session_id, 50, namespace=ns)]
        assert got == texts_[::-1][:len(got)] and got
    _outcome("sdk.namespaces_apart")


@pytest.fixture(scope="module")
def recall_client() -> Iterator[tuple[MemoryClient, Any]]:
    from hivemem.store.state import TurnLog
    from hivemem.store.streams import StreamStore
    from hivemem.store.vectors.edge import EdgeVectorStore
    from hivemem.workers.embed import EmbedHandler, embed_kind
    from hivemem.workers.stream import StreamWorker

    folder = Path(tempfile.mkdtemp(prefix="hivemem-fuzz-"))
    r = connect_fake(fake_server())
    embedder = HashingEmbedder(64)
    vectors = EdgeVectorStore(folder, 64)
    client = MemoryClient(SETTINGS, redis_client=r, vector_store=vectors, embedder=embedder)
    for i in range(12):
        client.ingest("known", "user" if i % 2 else "assistant",
                      f"Turn {i}: we chose PostgreSQL 🦄 \u202e for orders, page size {i}")
    state = TurnLog(r, client.keys, SETTINGS.ingest.recent_window)
    streams = StreamStore(r, client.keys)
    StreamWorker(embed_kind(EmbedHandler(embedder, vectors, state, streams, client.keys)),
                 streams, SETTINGS.worker).run(burst=True)
    yield client, r
    vectors.close()


@FUZZ
@given(session_id=mostly(st.just("known"), ids), query=queries, budget=budgets,
       preset=mostly(st.one_of(st.none(), st.sampled_from(
           ["cheap", "balanced", "high_recall", "agent_state"])), st.one_of(texts, wrong_types)),
       limit=mostly(st.none(), st.one_of(st.integers(-5, 10**9), wrong_types)))
def test_sdk_recall_documented_errors_only_within_budget_and_writes_nothing(
    recall_client: tuple[MemoryClient, Any], session_id: Any, query: Any, budget: Any,
    preset: Any, limit: Any,
) -> None:
    client, r = recall_client
    before = r.dbsize()
    try:
        result = client.recall(session_id, query, budget, preset=preset, limit=limit)
    except ValidationError as exc:
        _outcome(f"sdk.recall.refused.{exc.field.split('.')[0]}")
        return
    finally:
        assert r.dbsize() == before
    _outcome("sdk.recall.answered")
    assert result.used_tokens <= result.token_budget
    if isinstance(budget, int) and not isinstance(budget, bool):
        assert result.token_budget == budget
    assert sum(i.token_count for i in result) <= result.token_budget


# -- every store holds what validation accepts -----------------------------------------------


def _nested(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = {"k": leaf} if depth % 2 else [leaf]
    return leaf


structured = st.one_of(
    # Both sides of the depth limit (16), up to the 124 levels that broke the edge WAL.
    st.builds(lambda d, leaf: {"m": _nested(d, leaf)}, st.one_of(
        st.sampled_from([14, 15, 16, 17, 64, 123, 124, 125, 126, 127, 130]),
        st.integers(0, 130)), json_leaves),
    st.dictionaries(_strings(300, 1), json_values, max_size=3),  # keys around the 256 limit
    st.builds(lambda n: {"many": list(range(n))}, st.integers(1900, 2100)),  # node limit
    st.dictionaries(_strings(10), json_values, max_size=5),
)
many_markers = st.lists(st.from_regex(r"custom:[a-z0-9]{1,8}", fullmatch=True),
                        min_size=0, max_size=40)
REOPEN_EVERY = max(1, EXAMPLES // 100)  # held turns between reopens


def _same(a: Any, b: Any) -> bool:
    """Equal, except that a float may come back one ulp off: qdrant-edge's number parsing
    rounds some floats with extreme exponents (1.0196468033593079e-284 reads back as
    1.019646803359308e-284; 0.1 + 0.2, 1/3, 5e-324, 1e308 are exact). Counted apart."""
    if isinstance(a, float) and isinstance(b, float):
        if a != b and abs(a - b) <= 2 * math.ulp(a):
            _outcome("store.float_off_by_an_ulp")
            return True
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and type(a) is type(b)


def _held(got: Any, turn: Any) -> bool:
    return _same(got.model_dump(), turn.model_dump())


class Stores:
    """Both backends; every accepted turn is kept to be read back after each reopen."""

    def __init__(self, folder: Path) -> None:
        from hivemem.config import QdrantSettings
        from hivemem.store.vectors.edge import EdgeVectorStore
        from hivemem.store.vectors.server import ServerVectorStore

        self.folder = folder
        self.edge_cls = EdgeVectorStore
        self.edge = EdgeVectorStore(folder, 64)
        self.server = ServerVectorStore(QdrantSettings(), 64, location=":memory:")
        self.kept: dict[str, Any] = {}
        self.examples = 0
        self.reopens = 0
        # One client for every example (a fresh one costs more than the example itself).
        self.redis = connect_fake(fake_server())
        self.client = MemoryClient(SETTINGS, redis_client=self.redis)
        self.embedder = HashingEmbedder(64)

    def reopen(self) -> None:
        self.edge.close()
        self.edge = self.edge_cls(self.folder, 64)
        self.reopens += 1
        for turn_id, turn in self.kept.items():
            [hit] = self.edge.get_turns(turn.session_id, [turn_id])
            assert _held(hit.turn, turn), f"{turn_id} changed across a reopen"
        _outcome("store.reopened")
        OUTCOMES["store.read_back_after_reopen"] += len(self.kept)


@pytest.fixture(scope="module")
def stores() -> Iterator[Stores]:
    held = Stores(Path(tempfile.mkdtemp(prefix="hivemem-fuzz-edge-")))
    yield held
    held.reopen()  # the last accepted turns too
    held.edge.close()
    held.server.close()


@FUZZ
@given(meta=structured, markers_=many_markers, content=texts,
       ts=st.one_of(st.none(), st.datetimes(timezones=st.timezones()),
                    st.just(datetime.max.replace(tzinfo=UTC))))
def test_accepted_turns_are_held_by_every_store_across_a_reopen(
    stores: Stores, meta: Any, markers_: list[str], content: str, ts: Any,
) -> None:
    r = stores.redis
    stream = KEYS.turns_stream(partition_of("held", KEYS.partitions))
    before = r.xlen(stream)
    try:
        stores.client.ingest("held", "user", content, metadata=meta, markers=markers_,
                             timestamp=ts)
    except ValidationError as exc:
        assert r.xlen(stream) == before
        _outcome(f"store.refused.{exc.field}")
        return
    [(_, fields)] = r.xrevrange(stream, count=1)
    turn = turn_from_wire(fields[b"turn"], int(fields[b"seq"]))  # what the embed worker gets
    vector = stores.embedder.embed_documents([turn.content])
    for store in (stores.server, stores.edge):
        store.upsert_turns([turn], vector)
        [hit] = store.get_turns(turn.session_id, [turn.turn_id])
        assert _held(hit.turn, turn)
    stores.kept[turn.turn_id] = turn
    stores.examples += 1
    _outcome("store.held")
    if stores.examples % REOPEN_EVERY == 0:
        stores.reopen()


# -- HTTP API -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(recall_client: tuple[MemoryClient, Any]) -> Iterator[tuple[Any, dict[str, str], Any]]:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from hivemem.api import create_app
    from hivemem.store.apikeys import ApiKeyStore

    client, r = recall_client
    key, _ = ApiKeyStore(r, client.keys).create("default", "fuzz")
    app = create_app(client.settings, client=client)
    with TestClient(app, raise_server_exceptions=False) as http:
        yield http, {"Authorization": f"Bearer {key}"}, r


def _problem(response: Any) -> None:
    assert response.status_code != 500 and response.status_code < 500, (
        response.status_code, response.text[:500])
    if response.status_code >= 400:
        assert response.headers["content-type"].startswith("application/problem+json")
        body = response.json()
        assert body["status"] == response.status_code and body["title"]


def _path_id(value: Any) -> str:
    # HTTP clients refuse URLs past ~64 KiB before sending; servers answer 414 sooner.
    return quote(str(value)[:2000], safe="", errors="surrogatepass")


def _json_body(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True, default=str).encode("utf-8", "surrogatepass")


@FUZZ
@given(session_id=ids, body=st.one_of(
    st.fixed_dictionaries({"role": roles, "content": st.one_of(texts, wrong_types)},
                          optional={"metadata": metadata.filter(lambda m: m is None or (
                              isinstance(m, dict) and "self" not in m)),
                              "turn_id": st.one_of(ids, wrong_types), "markers": markers,
                              "timestamp": st.one_of(texts, st.datetimes().map(str)),
                              "visibility": texts, "extra": json_values}),
    json_values))
def test_api_ingest_never_500_and_refusals_write_nothing(
    api: tuple[Any, dict[str, str], Any], session_id: str, body: Any
) -> None:
    http, headers, r = api
    before = turns_len(r, KEYS)
    try:
        payload = _json_body(body)
    except (ValueError, RecursionError):
        payload = b"{"
    path = f"/v1/sessions/{_path_id(session_id)}/turns"
    response = http.post(path, content=payload,
                         headers={**headers, "content-type": "application/json"})
    _problem(response)
    _outcome(f"api.ingest.{response.status_code}")
    if response.status_code >= 400:
        assert turns_len(r, KEYS) == before
    else:
        assert response.json()["duplicate"] or turns_len(r, KEYS) == before + 1


@FUZZ
@given(session_id=mostly(st.just("known"), ids), body=mostly(
    st.fixed_dictionaries({"query": queries},
                          optional={"token_budget": budgets, "preset": st.one_of(
                              texts, wrong_types), "limit": budgets, "explain": wrong_types,
                              "related_sessions": st.lists(ids, max_size=25)}),
    json_values))
def test_api_recall_never_500(
    api: tuple[Any, dict[str, str], Any], session_id: str, body: Any
) -> None:
    http, headers, _r = api
    path = f"/v1/sessions/{_path_id(session_id)}/recall"
    response = http.post(path, content=_json_body(body),
                         headers={**headers, "content-type": "application/json"})
    _problem(response)
    _outcome(f"api.recall.{response.status_code}")
    if response.status_code == 200:
        data = response.json()
        assert data["used_tokens"] <= data["token_budget"]


@FUZZ
@given(raw=st.one_of(st.binary(max_size=300), _strings(300).map(
    lambda s: s.encode("utf-8", "surrogatepass"))),
       content_type=st.sampled_from(["application/json", "text/plain", "", "application/x"]))
def test_api_garbage_bodies_are_4xx(
    api: tuple[Any, dict[str, str], Any], raw: bytes, content_type: str
) -> None:
    http, headers, r = api
    before = turns_len(r, KEYS)
    response = http.post("/v1/sessions/known/turns", content=raw,
                         headers={**headers, "content-type": content_type})
    _problem(response)
    _outcome(f"api.garbage.{response.status_code}")
    if response.status_code >= 400:
        assert turns_len(r, KEYS) == before


def _all_sessions(r: Any) -> set[bytes]:
    return set().union(*(r.smembers(key) for key in KEYS.all_sessions()))


def _import_file(session_id: Any, state: Any, turn: Any) -> bytes:
    """An export of one session with one turn record, whatever the fields hold."""
    records = [
        {"format": "hivemem.export", "version": 1, "sessions": [session_id], "vectors": False},
        {"type": "session", "session_id": session_id, "state": state},
        {"type": "turn", "turn": turn},
        {"type": "end", "counts": {"session": 1, "turn": 1}},
    ]
    lines = []
    for record in records:
        try:
            lines.append(_json_body(record))
        except (ValueError, RecursionError):
            lines.append(b"{")
    return b"\n".join(lines) + b"\n"


class ImportSite:
    """The HTTP API over one Redis (fakeredis, outliving every client) and qdrant-edge on
    disk, reopened (the app, the client and the store closed and opened again) every
    `REOPEN_EVERY` accepted imports: each turn accepted so far must read back the same
    after each reopen, and another tenant's session must answer as it did before."""

    def __init__(self, folder: Path) -> None:
        from hivemem.store.apikeys import ApiKeyStore

        self.folder = folder
        self.server = fake_server()
        self.r = connect_fake(self.server)
        self.client: MemoryClient | None = None
        self.http: Any = None
        self.kept: dict[str, str] = {}  # session id -> its turn record as exported
        self.accepted = 0
        self.start()
        keys = ApiKeyStore(self.r, KEYS)
        self.headers = {"Authorization": f"Bearer {keys.create('default', 'fuzz')[0]}"}
        self.other = {"Authorization": f"Bearer {keys.create('other', 'fuzz')[0]}"}
        assert self.client is not None
        self.client.scoped(namespace="other").ingest(
            "theirs", "user", "we chose PostgreSQL for orders", turn_id="t-theirs")
        self.other_before = self.other_view()

    def start(self) -> None:
        from fastapi.testclient import TestClient

        from hivemem.api import create_app
        from hivemem.store.vectors.edge import EdgeVectorStore

        vectors = EdgeVectorStore(self.folder, 64)
        self.client = MemoryClient(SETTINGS, redis_client=connect_fake(self.server),
                                   vector_store=vectors, embedder=HashingEmbedder(64))
        self.http = TestClient(create_app(SETTINGS, client=self.client),
                               raise_server_exceptions=False)

    def reopen(self) -> None:
        assert self.client is not None
        self.http.close()
        self.client.close()
        self.start()
        for sid, record in self.kept.items():
            assert self.exported_turn(sid) == record, f"{sid!r} changed across a reopen"
        _outcome("api.import.reopened")
        OUTCOMES["api.import.read_back_after_reopen"] += len(self.kept)

    def exported_turn(self, sid: str) -> str:
        out = self.http.get("/v1/export", headers=self.headers, params={"session_id": sid})
        assert out.status_code == 200, out.text
        [turn] = [line for line in out.text.splitlines()
                  if line and json.loads(line).get("type") == "turn"]
        return str(turn)

    def other_view(self) -> tuple[Any, ...]:
        """What the other tenant reads: its list, its session's stats, a recall."""
        http, h = self.http, self.other
        listed = http.get("/v1/sessions", headers=h)
        stats = http.get("/v1/sessions/theirs/stats", headers=h)
        recall = http.post("/v1/sessions/theirs/recall", headers=h,
                           json={"query": "which database"})
        assert listed.status_code == stats.status_code == recall.status_code == 200
        return (listed.json(), stats.json()["last_seq"],
                [i["content"] for i in recall.json()["items"]])


@pytest.fixture(scope="module")
def importing() -> Iterator[ImportSite]:
    pytest.importorskip("fastapi")
    site = ImportSite(Path(tempfile.mkdtemp(prefix="hivemem-fuzz-import-")))
    yield site
    site.reopen()  # the last accepted imports too
    assert site.other_view() == site.other_before
    assert site.client is not None
    site.http.close()
    site.client.close()


_plain = st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=40)


@FUZZ
@given(session_id=mostly(valid_ids, ids, 0.9), state=mostly(
    st.fixed_dictionaries({}, optional={
        "seq": mostly(st.integers(0, 10**20), wrong_types, 0.9),
        "reflected": mostly(st.integers(0, 10**20), wrong_types, 0.9),
        "namespace": mostly(st.just("default"), ids, 0.9),
        "info": mostly(st.dictionaries(valid_ids, _plain, max_size=3), json_values, 0.8),
        "processed": mostly(st.just(""), texts, 0.8), "dead": mostly(st.just(""), texts, 0.8)}),
    st.one_of(json_values, st.builds(lambda v: {"extra": v}, json_values)), 0.85),
    turn=st.fixed_dictionaries({
        "turn_id": mostly(valid_ids, ids, 0.9), "role": mostly(valid_roles, roles, 0.9),
        "content": mostly(_plain, st.one_of(texts, wrong_types), 0.9),
        "timestamp": mostly(st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat()),
                            st.one_of(st.datetimes(timezones=st.timezones()).map(
                                lambda d: d.isoformat()), texts, wrong_types), 0.8),
        "seq": mostly(st.integers(1, 3), st.one_of(
            st.integers(-(2**70), 2**70), st.just(10**18), wrong_types), 0.8),
        "token_count": st.one_of(st.integers(0, 10), st.integers(0, 2**70)),
    }, optional={"metadata": mostly(st.none(), metadata.filter(lambda m: m is None or (
        isinstance(m, dict) and "self" not in m)), 0.5), "markers": markers,
        "agent_id": st.one_of(st.none(), ids), "visibility": mostly(
            st.just("shared"), texts, 0.9), "namespace": mostly(st.just("default"), ids, 0.9)}))
def test_api_import_obeys_what_ingest_does(
    importing: ImportSite, session_id: Any, state: Any, turn: Any,
) -> None:
    """Import through the API with a namespace key, for every field ingest checks: never a
    5xx; a refused file writes nothing; an accepted one holds a session every route
    accepts, with counters derived from its records, not from the state it claimed, and
    its turn as sent (content, role, metadata), the same after the store is reopened;
    another tenant reads what it read before either way."""
    site = importing
    http, headers, r = site.http, site.headers, site.r
    turn = {**turn, "session_id": session_id}
    body = _import_file(session_id, state, turn)
    before = _all_sessions(r)
    response = http.post("/v1/import", content=body,
                         headers={**headers, "content-type": "application/x-ndjson"})
    _problem(response)
    _outcome(f"api.import.{response.status_code}")
    if response.status_code >= 400:
        assert _all_sessions(r) == before
        assert site.other_view() == site.other_before
        return
    assert response.status_code == 201, response.text
    stored = response.json()["sessions"][session_id]
    stats = http.get(f"/v1/sessions/{_path_id(stored)}/stats", headers=headers)
    assert stats.status_code == 200, stats.text
    assert stats.json()["last_seq"] == turn["seq"]  # the record's, never the state's claim
    _outcome("api.import.accepted")
    record = site.exported_turn(stored)
    got = json.loads(record)["turn"]
    assert got["content"] == turn["content"] and got["role"] == turn["role"]
    assert got["turn_id"] == turn["turn_id"] and got["seq"] == turn["seq"]
    if isinstance(turn.get("metadata"), dict):
        assert _same(got["metadata"], turn["metadata"])
    site.kept[stored] = record
    site.accepted += 1
    assert site.other_view() == site.other_before
    if site.accepted % REOPEN_EVERY == 0:
        site.reopen()
        assert site.other_view() == site.other_before


def test_timestamps_far_in_the_past_or_future_are_refused_or_kept(fresh: Any) -> None:
    client, _r = fresh()
    for ts in (datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC),
               datetime.now(UTC) + timedelta(days=3650)):
        try:
            turn = client.ingest("ts", "user", "hello", timestamp=ts)
        except ValidationError:
            continue
        assert turn.timestamp == ts
