"""A Qdrant server or cluster through qdrant-client (also `:memory:` for unit tests)."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence
from typing import Any, cast

import httpx
import structlog
from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import UnexpectedResponse

from hivemem.config import QdrantSettings
from hivemem.domain.fact import Fact
from hivemem.domain.names import SessionName
from hivemem.domain.scope import DEFAULT_NAMESPACE, Scope
from hivemem.errors import ConfigurationError, StoreRejected, StoreUnavailable
from hivemem.providers.lexical import SparseVector
from hivemem.store.vectors.base import (
    COLLECTIONS,
    DENSE,
    FACTS,
    FLOAT_FIELDS,
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    LEXICAL,
    POINT_IDS,
    SCOPE,
    TURNS,
    WINDOW,
    WRITTEN_AT,
    Between,
    Hit,
    Point,
    Vector,
    VectorStore,
    Where,
    as_vector,
    rank_fused,
    session_where,
    written_at,
)
from hivemem.store.vectors.payload_limits import check_payloads
from hivemem.store.vectors.server_calls import (
    CLIENT_ERRORS,
    classify,
    is_conflict,
    reason_of,
    retrying,
    status_of,
)

log = structlog.get_logger(__name__)


class ServerVectorStore(VectorStore):
    """Turns and facts on a Qdrant server or cluster (or `:memory:` for unit tests).

    Opening is idempotent and patient: N workers starting together against a server that is
    still coming up all end with the same collections and every payload index, whoever
    created them (a 409 on create is success). Reads retry outages with back-off; a write
    that Qdrant rejects (4xx) raises `StoreRejected` so that only its entries dead-letter.
    """

    def __init__(self, settings: QdrantSettings, dim: int, *, location: str | None = None) -> None:
        self.dim = dim
        self.prefix = settings.collection_prefix
        self.settings = settings
        target = location or settings.url
        # Local mode (`:memory:`, unit tests) filters in Python and ignores payload indexes.
        self._local = location is not None
        self._without_lexical: set[str] = set()
        self._without_window: set[str] = set()
        self._ordering = qm.WriteOrdering(settings.write_ordering)
        consistency = settings.read_consistency
        self._consistency: Any = (
            consistency if isinstance(consistency, int) else qm.ReadConsistencyType(consistency)
        )
        try:
            if location is not None:
                self._client = cast(QdrantClient, _Serialized(QdrantClient(location=location)))
            else:
                self._client = QdrantClient(
                    url=settings.url,
                    api_key=settings.api_key.get_secret_value() if settings.api_key else None,
                    https=settings.https,
                    # qdrant-client takes whole seconds (it rounds 0.5 up to 1) for the
                    # server-side operation timeout; the transport gets the exact float below.
                    timeout=math.ceil(settings.timeout),
                )
                _set_transport_timeout(self._client, settings.timeout)
        except CLIENT_ERRORS as exc:
            raise StoreUnavailable("qdrant", f"{target}: {reason_of(exc)}") from None
        try:
            retrying(
                "open", self._ensure_collections, attempts=1,
                initial_s=settings.backoff_initial_s, max_s=settings.backoff_max_s,
                deadline_s=settings.open_timeout_s,
            )
        except StoreRejected as exc:
            self._client.close()
            message = f"qdrant at {target} refused the collections: {exc}"
            raise ConfigurationError(message) from None
        except StoreUnavailable as exc:
            self._client.close()
            detail = str(exc).removeprefix("qdrant unavailable: ")
            raise StoreUnavailable("qdrant", f"{target}: {detail}") from None
        except ConfigurationError:
            self._client.close()
            raise

    def _ensure_collections(self) -> None:
        for name in COLLECTIONS:
            self._ensure_collection(self.prefix + name)

    def _ensure_collection(self, collection: str) -> None:
        if not self._client.collection_exists(collection):
            self._create_collection(collection)
        info = self._client.get_collection(collection)
        vectors = info.config.params.vectors
        size = vectors[DENSE].size if isinstance(vectors, dict) and DENSE in vectors else None
        if size is not None and size != self.dim:
            raise ConfigurationError(
                f"{collection} holds {size}-d vectors, the embedder makes {self.dim}-d"
            )
        sparse = info.config.params.sparse_vectors or {}
        if LEXICAL not in sparse:
            # Made before keyword search: recall there stays dense-only until the
            # collection is rebuilt (its points carry no BM25 vectors).
            self._without_lexical.add(collection)
            log.warning("store.no_lexical", collection=collection,
                        fix="re-create the collection and re-ingest to get keyword search")
        if not (isinstance(vectors, dict) and WINDOW in vectors):
            # Made before window vectors (Qdrant adds no named vector to a collection):
            # recall there ranks turns on their own vectors until it is re-created.
            self._without_window.add(collection)
            log.warning("store.no_window", collection=collection,
                        fix="re-create the collection and re-ingest to get window vectors")
        self._check_consistency(collection, info.config.params)
        if self._local:
            return
        # Every index, every time: a collection made by an older hivemem, or by a worker
        # that died between creating it and indexing it, gets the ones it lacks.
        indexed = info.payload_schema or {}
        wanted = [(n, qm.PayloadSchemaType.KEYWORD) for n in KEYWORD_FIELDS] + [
            (n, qm.PayloadSchemaType.INTEGER) for n in INTEGER_FIELDS
        ] + [(n, qm.PayloadSchemaType.FLOAT) for n in FLOAT_FIELDS]
        for name, kind in wanted:
            present = indexed.get(name)
            if present is not None and present.data_type == kind:
                continue
            if present is not None:
                log.warning("store.index_type", collection=collection, field=name,
                            has=str(present.data_type), wants=str(kind))
            # Creating an index that exists is a no-op on the server: racing workers agree.
            self._client.create_payload_index(collection, name, kind, wait=True)
            log.info("store.index_created", collection=collection, field=name,
                     kind=str(kind))

    def _create_collection(self, collection: str) -> None:
        settings = self.settings
        index = settings.index
        try:
            self._client.create_collection(
                collection,
                vectors_config={
                    name: qm.VectorParams(size=self.dim, distance=qm.Distance.COSINE)
                    for name in (DENSE, WINDOW)
                },
                sparse_vectors_config={LEXICAL: qm.SparseVectorParams(
                    modifier=qm.Modifier.IDF)},
                shard_number=settings.shard_number,
                replication_factor=settings.replication_factor,
                write_consistency_factor=settings.write_replicas(),
                hnsw_config=qm.HnswConfigDiff(
                    m=index.hnsw_m, ef_construct=index.hnsw_ef_construct,
                    full_scan_threshold=index.full_scan_threshold_kb,
                    payload_m=index.payload_m or None,
                ),
                optimizers_config=qm.OptimizersConfigDiff(
                    indexing_threshold=index.indexing_threshold_kb),
                on_disk_payload=index.on_disk_payload,
                quantization_config=qm.ScalarQuantization(scalar=qm.ScalarQuantizationConfig(
                    type=qm.ScalarType.INT8, quantile=0.99, always_ram=True))
                if index.quantization == "int8" else None,
            )
        except UnexpectedResponse as exc:
            if not is_conflict(exc):
                raise
            # Another worker created it between our check and our create: that is success.
            log.info("store.collection_exists", collection=collection, raced=True)
            return
        log.info("store.collection_created", collection=collection, dim=self.dim,
                 shards=settings.shard_number, replicas=settings.replication_factor,
                 write_consistency=settings.write_replicas())

    def _check_consistency(self, collection: str, params: qm.CollectionParams) -> None:
        """An existing collection keeps the layout it was made with: say so when its write
        consistency is too low for `read_consistency` to see every acknowledged write."""
        replicas = params.replication_factor or 1
        writes = params.write_consistency_factor or 1
        majority = replicas // 2 + 1
        needed = majority if self.settings.read_consistency == "majority" else replicas
        if writes < needed:
            log.warning(
                "store.reads_may_miss_writes", collection=collection, replicas=replicas,
                write_consistency_factor=writes,
                read_consistency=str(self.settings.read_consistency),
                fix=f"raise the collection's write_consistency_factor to {needed}"
                    " (PATCH /collections/{name}) or read_consistency to match",
            )

    @staticmethod
    def _filter(where: Where | None) -> qm.Filter | None:
        if not where:
            return None
        must: list[qm.Condition] = []
        must_not: list[qm.Condition] = []
        for field, value in where.items():
            if isinstance(value, Scope):
                if field != SCOPE:
                    raise ValueError(f"a Scope goes under {SCOPE!r}, not {field!r}")
                must.append(_in_namespace(value.namespace))
                must_not.append(_others_private(value.agent_id))
            elif field == POINT_IDS:
                must.append(qm.HasIdCondition(has_id=list(value)))  # type: ignore[arg-type]
            elif field == "namespace":
                names = [value] if isinstance(value, str) else list(value)  # type: ignore[arg-type]
                must.append(qm.Filter(should=[_in_namespace(str(n)) for n in names]))
            elif isinstance(value, Between):
                must.append(qm.FieldCondition(
                    key=field, range=qm.Range(gte=value.gte, lte=value.lte)))
            elif isinstance(value, str | int | bool):
                must.append(qm.FieldCondition(key=field, match=qm.MatchValue(value=value)))
            else:
                values: list[Any] = list(value)
                must.append(qm.FieldCondition(key=field, match=qm.MatchAny(any=values)))
        return qm.Filter(must=must, must_not=must_not or None)

    def _write(self, action: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """One attempt: a worker backs off on `StoreUnavailable` and retries the batch
        (the writes are idempotent); `StoreRejected` dead-letters its entries."""
        try:
            return fn(*args, wait=True, ordering=self._ordering, **kwargs)
        except CLIENT_ERRORS as exc:
            raise classify(action, exc) from None

    def _read(self, action: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        s = self.settings
        return retrying(
            action, lambda: fn(*args, consistency=self._consistency, **kwargs),
            attempts=s.read_retries + 1, initial_s=s.backoff_initial_s, max_s=s.backoff_max_s,
        )

    def upsert(self, collection: str, points: Sequence[Point]) -> None:
        if not points:
            return
        check_payloads("qdrant", collection, [p.payload for p in points])
        lexical = self.prefix + collection not in self._without_lexical
        window = self.prefix + collection not in self._without_window
        batch = [
            qm.PointStruct(id=p.id, vector=_vectors(p, lexical, window), payload=p.payload)
            for p in points
        ]
        # wait=True: applied (and in the WAL) on write_consistency_factor replicas before
        # the worker acks.
        self._write("upsert", self._client.upsert, self.prefix + collection, points=batch)

    def update_vectors(self, collection: str, name: str,
                       vectors: Sequence[tuple[str, Vector]]) -> int:
        """Only points that exist (read first): Qdrant refuses the whole request when one is
        gone (404). One deleted between the read and the write: then one by one, leaving out
        those it refuses."""
        target = self.prefix + collection
        ids = [i for i, _ in vectors]
        present = {str(r.id) for r in self._read(
            "update vectors", self._client.retrieve, target, ids, with_payload=False,
            with_vectors=False)} if ids else set()
        points = [qm.PointVectors(id=i, vector={name: v.tolist()})
                  for i, v in vectors if i in present]
        if not points:
            return 0
        if self._update_points(target, points):
            return len(points)
        return sum(self._update_points(target, [p]) for p in points)

    def _update_points(self, target: str, points: list[qm.PointVectors]) -> bool:
        """One update request; False when Qdrant says a point of it does not exist."""
        try:
            self._client.update_vectors(target, points=points, wait=True,
                                        ordering=self._ordering)
            return True
        except CLIENT_ERRORS as exc:
            if status_of(exc) == 404 and "No point" in reason_of(exc):
                return False
            raise classify("update vectors", exc) from None

    def search(
        self, collection: str, vector: Vector, limit: int, where: Where | None
    ) -> list[Hit]:
        return self._query("search", collection, vector.tolist(), DENSE, limit, where)

    def _names(self, collection: str) -> list[str]:
        """The dense vectors a read returns (a collection made before windows has one)."""
        if self.prefix + collection in self._without_window:
            return [DENSE]
        return [DENSE, WINDOW]

    @property
    def has_windows(self) -> bool:
        return self.prefix + TURNS not in self._without_window

    def search_window(
        self, collection: str, vector: Vector, limit: int, where: Where | None
    ) -> list[Hit]:
        if self.prefix + collection in self._without_window:
            return []
        return self._query("search_window", collection, vector.tolist(), WINDOW, limit, where)

    def search_sparse(
        self, collection: str, sparse: SparseVector, limit: int, where: Where | None
    ) -> list[Hit]:
        if self.prefix + collection in self._without_lexical:
            return []
        query = qm.SparseVector(indices=sparse.indices, values=sparse.values)
        return self._query("search_sparse", collection, query, LEXICAL, limit, where)

    def search_fused(
        self, collection: str, vector: Vector, limit: int, where: Where | None
    ) -> list[Hit]:
        """The dense and the window search in one request (`query_batch_points`: one round
        trip, not two), ranked together as every backend ranks them (`rank_fused`)."""
        if self.prefix + collection in self._without_window:
            return self.search(collection, vector, limit, where)
        values = vector.tolist()
        requests = [self._request(values, using, limit, where, self._names(collection))
                    for using in (DENSE, WINDOW)]
        dense, window = self._read("search_fused", self._client.query_batch_points,
                                   self.prefix + collection, requests=requests)
        return rank_fused(_hits(dense.points), _hits(window.points), vector, limit)

    def _request(self, query: Any, using: str, limit: int, where: Where | None,
                 vectors: list[str]) -> qm.QueryRequest:
        return qm.QueryRequest(query=query, using=using, filter=self._filter(where),
                               limit=limit, with_payload=True, with_vector=vectors)

    def _query(
        self, action: str, collection: str, query: Any, using: str, limit: int,
        where: Where | None,
    ) -> list[Hit]:
        response = self._read(
            action,
            self._client.query_points,
            self.prefix + collection,
            query=query,
            using=using,
            query_filter=self._filter(where),
            limit=limit,
            with_payload=True,
            with_vectors=self._names(collection),
        )
        return _hits(response.points)

    def retrieve(self, collection: str, ids: Sequence[str]) -> list[Hit]:
        if not ids:
            return []
        records = self._read(
            "retrieve", self._client.retrieve, self.prefix + collection, ids=list(ids),
            with_payload=True, with_vectors=self._names(collection),
        )
        return [Hit(str(r.id), 0.0, r.payload or {}, as_vector(r.vector),
                    as_vector(r.vector, WINDOW)) for r in records]

    def scroll(
        self, collection: str, where: Where | None, *, with_vectors: bool = False
    ) -> Iterator[Hit]:
        offset: Any = None
        while True:
            records, offset = self._read(
                "scroll",
                self._client.scroll,
                self.prefix + collection,
                scroll_filter=self._filter(where),
                limit=512,
                offset=offset,
                with_payload=True,
                with_vectors=self._names(collection) if with_vectors else False,
            )
            for record in records:
                vector = as_vector(record.vector) if with_vectors else None
                window = as_vector(record.vector, WINDOW) if with_vectors else None
                yield Hit(str(record.id), 0.0, record.payload or {}, vector, window)
            if offset is None:
                return

    def facts_written_after(
        self, name: SessionName, after: float | None
    ) -> list[tuple[Fact, float]]:
        """Only the facts stamped after `after`, through the float payload index: a recall
        that has seen the session's facts re-reads just the new ones."""
        if after is None:
            return super().facts_written_after(name, after)
        session = self._filter(session_where(name))
        assert session is not None and session.must is not None
        query = qm.Filter(must=[
            *session.must,
            qm.FieldCondition(key=WRITTEN_AT, range=qm.Range(gt=after)),
        ])
        out: list[tuple[Fact, float]] = []
        offset: Any = None
        while True:
            records, offset = self._read(
                "scroll", self._client.scroll, self.prefix + FACTS,
                scroll_filter=query, limit=512, offset=offset, with_payload=True,
                with_vectors=False,
            )
            for record in records:
                payload = record.payload or {}
                out.append((Fact.model_validate(payload), written_at(payload)))
            if offset is None:
                return out

    def count(self, collection: str, where: Where | None) -> int:
        if self._local:
            return int(self._client.count(self.prefix + collection,
                                          count_filter=self._filter(where), exact=True).count)
        # QdrantClient.count takes no read consistency; the REST call it wraps does.
        response = self._read(
            "count", self._client.http.points_api.count_points, self.prefix + collection,
            count_request=qm.CountRequest(filter=self._filter(where), exact=True),
        )
        return int(response.result.count) if response.result is not None else 0

    def delete(self, collection: str, where: Where) -> None:
        self._write("delete", self._client.delete, self.prefix + collection,
                    points_selector=qm.FilterSelector(filter=self._filter(where) or qm.Filter()))

    def vacuum(self) -> str:
        """A Qdrant server vacuums deleted points by itself (its optimizer, once a
        segment's deleted share passes `deleted_threshold`): nothing to wait for here."""
        return "server"

    def close(self) -> None:
        self._client.close()


def _hits(points: Sequence[qm.ScoredPoint]) -> list[Hit]:
    return [Hit(str(p.id), float(p.score), p.payload or {}, as_vector(p.vector),
                as_vector(p.vector, WINDOW)) for p in points]


def _set_transport_timeout(client: QdrantClient, seconds: float) -> None:
    """Give qdrant-client's httpx pool the configured timeout exactly (its constructor only
    takes whole seconds). Its internals are not public: when they move, keep the rounded-up
    timeout and say so rather than fail."""
    remote = getattr(client, "_client", None)
    api = getattr(getattr(remote, "openapi_client", None), "client", None)
    transport = getattr(api, "_client", None)
    if isinstance(transport, httpx.Client):
        transport.timeout = httpx.Timeout(seconds)
    else:
        log.warning("store.timeout_rounded", timeout_s=seconds, used_s=math.ceil(seconds))


def _in_namespace(namespace: str) -> qm.Condition:
    match = qm.FieldCondition(key="namespace", match=qm.MatchValue(value=namespace))
    if namespace != DEFAULT_NAMESPACE:
        return match
    # Points written before namespaces carry none: they are the default namespace's.
    return qm.Filter(should=[
        match, qm.IsEmptyCondition(is_empty=qm.PayloadField(key="namespace"))
    ])


def _others_private(agent_id: str | None) -> qm.Condition:
    """Private points of any other agent (excluded: `must_not`)."""
    private = qm.FieldCondition(key="visibility", match=qm.MatchValue(value="private"))
    if agent_id is None:
        return private
    return qm.Filter(
        must=[private],
        must_not=[qm.FieldCondition(key="agent_id", match=qm.MatchValue(value=agent_id))],
    )


def _vectors(point: Point, lexical: bool = True, window: bool = True) -> dict[str, Any]:
    vectors: dict[str, Any] = {DENSE: point.vector.tolist()}
    if point.window is not None and window:
        vectors[WINDOW] = point.window.tolist()
    if point.sparse and lexical:
        vectors[LEXICAL] = qm.SparseVector(
            indices=point.sparse.indices, values=point.sparse.values
        )
    return vectors


class _Serialized:
    """qdrant-client's local mode (`:memory:`, the unit tests' stand-in for a server) is not
    thread-safe: a recall's scroll on one thread met a worker's upsert on another mid-way
    (`IndexError` in its payload mask). A server is; here every call takes one lock."""

    def __init__(self, client: QdrantClient) -> None:
        self._client = client
        self._lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return locked
