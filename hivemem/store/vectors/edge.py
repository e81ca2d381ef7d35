"""Embedded Qdrant (qdrant-edge-py): the Qdrant engine in-process, one shard per collection.

One process may open a folder at a time (the WAL is locked); threads in that process share it.
Indexing follows the data: payload indexes on every filter field from the start, HNSW built
in a child process when a collection has grown enough (`edge_index`), and the engine's
planner compares exactly when a filter leaves few points (`VectorIndexSettings`).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import qdrant_edge as qe
import structlog

from hivemem.config import VectorIndexSettings
from hivemem.domain.fact import Fact
from hivemem.domain.names import SessionName
from hivemem.domain.scope import DEFAULT_NAMESPACE, Scope
from hivemem.errors import StoreUnavailable
from hivemem.providers.lexical import LexicalEncoder, SparseVector
from hivemem.store.vectors.base import (
    COLLECTIONS,
    DENSE,
    FACTS,
    FLOAT_FIELDS,
    FUSED,
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    LEXICAL,
    POINT_IDS,
    SCOPE,
    TURNS,
    WRITTEN_AT,
    Between,
    FactHit,
    FactOf,
    Hit,
    Point,
    TurnHit,
    TurnSearch,
    Vector,
    VectorStore,
    Where,
    as_vector,
    fused_vector,
    is_uuid,
    payload_session,
    scoped,
    session_where,
    turn_point_id,
    window_of,
    window_similarity,
    written_at,
)
from hivemem.store.vectors.edge_index import BackgroundIndex, recover, set_active
from hivemem.store.vectors.edge_rows import FILES, HALVES, ROW, RowVectors
from hivemem.store.vectors.memlock import MemoryLock
from hivemem.store.vectors.payload_limits import check_payloads

log = structlog.get_logger(__name__)

# Points read generically (`search`, `retrieve`, `scroll`: export, the proxy) carry the
# dense and fused vectors (the window one recovered from them), not the BM25 one (converting
# it as well cost ~0.6 ms of a 30-hit search at 30k points).
_POINT_VECTORS = [DENSE, FUSED]
# Recall's turn hits (`TurnHit`) carry no vectors from the engine: theirs are read as the
# rows their payloads name (`edge_rows`), dense and fused at once.


class EdgeVectorStore(VectorStore):
    def __init__(
        self, path: Path, dim: int, index: VectorIndexSettings | None = None
    ) -> None:
        self._qe = qe
        self.dim = dim
        self.path = Path(path)
        self.index = index or VectorIndexSettings()
        self._lock = threading.RLock()
        # Taken by every write before `_lock`: an index build holds it (not `_lock`) while
        # it copies the collection, so recall goes on and writes wait.
        self._writes = threading.RLock()
        self._closed = False
        self._memory: MemoryLock | None = None  # `lock_in_memory`, set once opened
        self._shards: dict[str, Any] = {}
        # Writes applied per collection (`changes`): this object is the folder's one
        # writer (guests and the reflection process write through the owner's API).
        self._changes = dict.fromkeys(COLLECTIONS, 0)
        self._folders: dict[str, Path] = {}  # where each collection lives (index builds move it)
        self.indexer = BackgroundIndex(
            self.path, self.index.index_after_points, self._lock, self._writes,
            lambda name: self._shards[name], lambda name: self._folders[name],
            self._qe_load, self._swap, nice=self.index.index_build_nice,
        )
        try:
            for name in COLLECTIONS:
                self._folders[name] = recover(self.path, name)
                self._shards[name] = self._open(self._folders[name])
        except StoreUnavailable:
            self._close_open()
            raise
        for name in COLLECTIONS:
            stored = self._stored_dim(name)
            if stored is not None and stored != dim:
                self._close_open()
                raise StoreUnavailable(
                    "qdrant-edge",
                    f"{self.path / name} holds {stored}-d vectors, the embedder makes {dim}-d",
                )
            missing = [v for v in (LEXICAL, FUSED) if not self._has_vector(name, v)]
            copied = self._migrate(name, missing) if missing else 0
            self._ensure_indexes(name)
            # The copy has no graph, and growth would start one only after as many new
            # points again: a migrated store large enough is indexed now, in the background.
            every = self.index.index_after_points
            if every and copied >= every:
                self.build_index(name, wait=False)
        # The vectors as rows recall reads in one step (`edge_rows`); points written before
        # rows were kept get theirs now.
        self._rows = {name: RowVectors(self.path / FILES[name], dim, HALVES[name])
                      for name in COLLECTIONS}
        try:
            self._fill_once()
        except Exception:
            for rows in self._rows.values():
                rows.close()
            self._close_open()
            raise
        self._memory = MemoryLock(self.path) if self.index.lock_in_memory else None
        self._lock_memory()

    def _lock_memory(self, *, if_due: bool = False) -> None:
        """Lock the shards' mapped file data in memory (`lock_in_memory`); `if_due`: only
        what writes added, at most every `RELOCK_INTERVAL_S`. Not under the store lock:
        reading a cold store in takes up to seconds, and recall goes on meanwhile."""
        if self._memory is None:
            return
        locked = self._memory.after_write() if if_due else self._memory.lock()
        if locked is not None and locked.regions:
            log.info("store.memory_locked", path=str(self.path), ranges=locked.regions,
                     mb=round(locked.bytes / 2**20, 1), total_mb=round(
                         self._memory.total_bytes / 2**20, 1), ms=locked.ms)

    def _config(self) -> Any:
        """The engine settings; the index ones apply from the next optimiser run."""
        qe = self._qe
        ix = self.index
        return qe.EdgeConfig(
            # The fused vector is a mean of two unit vectors: compared by dot product, so
            # that its score is the mean of the two cosines (`FUSED`).
            vectors={
                DENSE: qe.EdgeVectorParams(size=self.dim, distance=qe.Distance.Cosine),
                FUSED: qe.EdgeVectorParams(size=self.dim, distance=qe.Distance.Dot),
            },
            sparse_vectors={LEXICAL: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
            hnsw_config=qe.HnswIndexConfig(
                m=ix.hnsw_m, ef_construct=ix.hnsw_ef_construct,
                full_scan_threshold=ix.full_scan_threshold_kb, payload_m=ix.payload_m or None,
                max_indexing_threads=ix.index_build_threads,
            ),
            optimizers=qe.EdgeOptimizersConfig(indexing_threshold=ix.indexing_threshold_kb),
            on_disk_payload=ix.on_disk_payload,
            # Always said: the engine keeps the last value given on disk, so None would
            # leave a store at whatever it was opened with before.
            max_search_threads=ix.search_threads or os.cpu_count() or 1,
            quantization_config=(
                qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=0.99,
                                            always_ram=True)
                if ix.quantization == "int8" else None),
        )

    def _load(self, shard_path: Path) -> Any:
        try:
            return self._qe.EdgeShard.load(str(shard_path), self._config())
        except Exception as exc:
            if "WAL" in str(exc) or "WouldBlock" in str(exc):
                raise
            # A shard from before keyword search or window vectors opens as it is, and
            # `_migrate` copies it into the current layout.
            return self._qe.EdgeShard.load(str(shard_path))

    def _ensure_indexes(self, collection: str, shard: Any = None) -> None:
        """A payload index on every field recall filters on, also in a shard made before
        the field was indexed (unindexed filters cost ~90 ms at 100k points). An index made
        with other parameters (before only the tenant key took part in the HNSW build) is
        made again: the engine builds an extra graph per value of every field whose index
        has `enable_hnsw`, which made a one-session build several times the main graph."""
        shard = self._shards[collection] if shard is None else shard
        have = shard.info().payload_schema
        for field, schema in self._index_schemas():
            info = have.get(field)
            if info is not None and _same_index(info.params, schema):
                continue
            if info is not None:
                shard.update(self._qe.UpdateOperation.delete_field_index(field))
            shard.update(self._qe.UpdateOperation.create_field_index(field, schema))

    def _index_schemas(self) -> list[tuple[str, Any]]:
        """Only the tenant key (session_id) gets per-value graphs (`payload_m`); the other
        fields narrow a search that the session's graph or an exact scan already answers."""
        qe = self._qe
        schemas: list[tuple[str, Any]] = []
        for field in KEYWORD_FIELDS:
            if field == "session_id":
                # The tenant key: points are grouped by session on disk and, with
                # payload_m, each session big enough gets its own HNSW graph.
                schemas.append((field, qe.KeywordIndexParams(is_tenant=True)))
            else:
                schemas.append((field, qe.KeywordIndexParams(enable_hnsw=False)))
        schemas += [(f, qe.IntegerIndexParams(lookup=True, range=True, enable_hnsw=False))
                    for f in INTEGER_FIELDS]
        schemas += [(f, qe.FloatIndexParams(enable_hnsw=False)) for f in FLOAT_FIELDS]
        return schemas

    def _has_vector(self, collection: str, name: str) -> bool:
        qe = self._qe
        probe = qe.QueryRequest(limit=1, query=qe.Query.Nearest(
            qe.SparseVector([1], [1.0]) if name == LEXICAL else [1.0] * self.dim, using=name))
        try:
            self._shards[collection].query(probe)
        except Exception as exc:
            if "vector name" in str(exc).lower():
                return False
            raise
        return True

    def _migrate(self, collection: str, missing: list[str]) -> int:
        """Migrate a shard made before keyword search or fused vectors: copy every point
        into a new shard of the current layout (BM25 vectors made from its stored text, the
        fused vector from its dense and window vectors; a point without a window gets its
        dense vector as the fused one, so recall ranks it on its turn vector: a window needs
        the embedder), then swap the folders (the old one is kept as `<name>.pre-migration`
        until the copy is complete)."""
        started = time.perf_counter()
        lexical = LexicalEncoder()
        old_path = self._folders[collection]
        new_path = self.path / f"{collection}.migrating"
        shutil.rmtree(new_path, ignore_errors=True)
        new_shard = self._open(new_path)
        copied = 0
        batch: list[Point] = []
        old = self._shards[collection]
        offset: Any = None
        while True:
            records, offset = old.scroll(self._qe.ScrollRequest(
                offset=offset, limit=256, with_payload=True, with_vector=True))
            for r in records:
                vector = as_vector(r.vector)
                if vector is None:
                    continue
                text = str((r.payload or {}).get("content", ""))
                sparse = lexical.document(text) if LEXICAL in missing else None
                if sparse is None and isinstance(r.vector, dict) and LEXICAL in r.vector:
                    kept = r.vector[LEXICAL]
                    sparse = SparseVector(list(kept.indices), list(kept.values))
                batch.append(Point(str(r.id), vector, r.payload, sparse,
                                   window_of(r.vector)))
            if batch:
                new_shard.update(self._qe.UpdateOperation.upsert_points(
                    [self._qe.Point(id=p.id, vector=self._vectors(collection, p), payload=p.payload)
                     for p in batch]))
                copied += len(batch)
                batch = []
            if offset is None:
                break
        new_shard.flush()
        new_shard.close()
        old.close()
        backup = old_path.with_name(f"{collection}.pre-migration")
        shutil.rmtree(backup, ignore_errors=True)
        old_path.rename(backup)
        new_path.rename(old_path)
        self._shards[collection] = self._load_just_closed(old_path)
        shutil.rmtree(backup, ignore_errors=True)
        log.info("store.migrated", collection=collection, added=missing,
                 points=copied, ms=round((time.perf_counter() - started) * 1000, 1))
        return copied

    def _load_just_closed(self, shard_path: Path, wait_s: float = 5.0) -> Any:
        """Load a shard this process has just closed. The engine releases a closed shard's
        write-ahead-log lock once its background work ends, so a load at once can find the
        lock still held (seen under load: `Can't init WAL: WouldBlock`); it is tried again
        for up to `wait_s`."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return self._qe.EdgeShard.load(str(shard_path))
            except Exception as exc:
                if "WouldBlock" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    def _open(self, shard_path: Path) -> Any:
        qe = self._qe
        try:
            if (shard_path / "wal").exists() or (shard_path / "segments").exists():
                return self._load(shard_path)
            shard_path.mkdir(parents=True, exist_ok=True)
            # Payload indexes follow in `_ensure_indexes`, before any point is written.
            return qe.EdgeShard.create(str(shard_path), self._config())
        except Exception as exc:
            if "WouldBlock" in str(exc):
                raise StoreUnavailable(
                    "qdrant-edge",
                    f"{shard_path} is open in another process (one process per embedded store;"
                    " use a Qdrant server to share it)",
                ) from None
            # Anything else is the engine's own words (a write-ahead log it cannot read back
            # says so), never a guess at a lock.
            raise StoreUnavailable("qdrant-edge", f"{shard_path} cannot be opened: {exc}"
                                   ) from None

    def _close_open(self) -> None:
        for shard in self._shards.values():
            shard.close()
        self._shards.clear()
        self._closed = True

    def _stored_dim(self, collection: str) -> int | None:
        try:
            records, _ = self._shards[collection].scroll(
                self._qe.ScrollRequest(limit=1, with_payload=False, with_vector=True)
            )
        except Exception:
            return None
        if not records:
            return None
        vec = as_vector(records[0].vector)
        return None if vec is None else int(vec.shape[0])

    def _filter(self, where: Where | None) -> Any:
        qe = self._qe
        if not where:
            return None
        must: list[Any] = []
        must_not: list[Any] = []
        for field, value in where.items():
            if isinstance(value, Scope):
                if field != SCOPE:
                    raise ValueError(f"a Scope goes under {SCOPE!r}, not {field!r}")
                must.append(self._in_namespace(value.namespace))
                must_not.append(self._others_private(value.agent_id))
            elif field == POINT_IDS:
                must.append(qe.HasIdCondition(set(value)))  # type: ignore[arg-type]
            elif field == "namespace":
                names = [value] if isinstance(value, str) else list(value)  # type: ignore[arg-type]
                must.append(qe.Filter(should=[self._in_namespace(str(n)) for n in names]))
            elif isinstance(value, Between):
                # Edge has no integer range: a float one matches the integer index.
                must.append(qe.FieldCondition(key=field, range=qe.RangeFloat(
                    gte=float(value.gte),
                    lte=None if value.lte is None else float(value.lte))))
            elif isinstance(value, list | tuple):
                must.append(qe.FieldCondition(key=field, match=qe.MatchAny(list(value))))
            else:
                must.append(qe.FieldCondition(key=field, match=qe.MatchValue(value)))
        return qe.Filter(must=must, must_not=must_not or None)

    def _in_namespace(self, namespace: str) -> Any:
        """One match: every point carries its namespace here (`_fill_namespaces`; "or
        none" for ``default`` cost ~0.2 ms of each filtered search at 100k points)."""
        qe = self._qe
        return qe.FieldCondition(key="namespace", match=qe.MatchValue(namespace))

    def _fill_once(self) -> None:
        """Namespaces and rows for the points written before either was kept, looked for
        once per folder (`FILLED` marks it done: each look is a scan of every point's
        payload, ~1.5 s on open at 100k points), or again when a rows file is empty while
        its collection is not (removed by hand)."""
        marker = self.path / FILLED
        lost = [name for name in COLLECTIONS
                if not len(self._rows[name]) and self.index_info(name)["points"]]
        if marker.exists() and not lost:
            return
        self._fill_namespaces()
        for name in COLLECTIONS:
            # A rows file lost: the rows its points name are gone, every point gets one.
            self._fill_rows(name, every=marker.exists() and name in lost)
        marker.write_text("namespaces and vector rows filled\n", encoding="utf-8")

    def _fill_namespaces(self) -> None:
        """Points written before namespaces carry none: they are the default namespace's,
        and are given it (on open, once)."""
        qe = self._qe
        lacking = qe.Filter(must=[qe.IsEmptyCondition("namespace")])
        for name in COLLECTIONS:
            count = int(self._on("count", name, "count", qe.CountRequest(filter=lacking,
                                                                         exact=True)))
            if not count:
                continue
            operation = qe.UpdateOperation.set_payload_by_filter(
                lacking, {"namespace": DEFAULT_NAMESPACE})
            with self._writes, self._lock:
                self._update("namespaces", name, operation, 0)
            log.info("store.namespaces_filled", collection=name, points=count)
            every = self.index.index_after_points
            if every and count >= every:
                self.build_index(name, wait=False)

    def _others_private(self, agent_id: str | None) -> Any:
        """Private points of any other agent (excluded: `must_not`)."""
        qe = self._qe
        private = qe.FieldCondition(key="visibility", match=qe.MatchValue("private"))
        if agent_id is None:
            return private
        mine = qe.FieldCondition(key="agent_id", match=qe.MatchValue(agent_id))
        return qe.Filter(must=[private], must_not=[mine])

    def _on(self, action: str, collection: str, method: str, *args: Any) -> Any:
        """Call a shard method; the shard is looked up under the lock (an index swap
        replaces it)."""
        with self._lock:
            if self._closed:
                raise StoreUnavailable("qdrant-edge", f"{action}: the store is closed")
            return self._call(action, getattr(self._shards[collection], method), *args)

    def _call(self, action: str, fn: Any, *args: Any) -> Any:
        with self._lock:
            if self._closed:
                raise StoreUnavailable("qdrant-edge", f"{action}: the store is closed")
            try:
                return fn(*args)
            except Exception as exc:
                raise StoreUnavailable("qdrant-edge", f"{action}: {exc}") from None

    def _update(self, action: str, collection: str, operation: Any, points: int) -> None:
        """Apply a write (under `_writes` and `_lock`), journal it for an index build in
        flight (`points`: how many it may add), and count it (`changes`), also when it
        failed: part of it may have landed."""
        try:
            self._on(action, collection, "update", operation)
            self.indexer.wrote(collection, points, operation)
        finally:
            self._changes[collection] += 1

    def upsert(self, collection: str, points: Sequence[Point]) -> None:
        check_payloads("qdrant-edge", collection, [p.payload for p in points])
        if not points:
            return
        qe = self._qe
        with self._writes:
            vectors = [self._vectors(collection, p) for p in points]
            payloads = self._with_rows(collection, points, vectors)
            batch = [qe.Point(id=p.id, vector=v, payload=payload)
                     for p, v, payload in zip(points, vectors, payloads, strict=True)]
            operation = qe.UpdateOperation.upsert_points(batch)
            with self._lock:
                self._update("upsert", collection, operation, len(batch))
        self._lock_memory(if_due=True)

    def _with_rows(self, collection: str, points: Sequence[Point],
                   vectors: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The points' payloads naming their rows, the rows written first (under
        `_writes`): a point written again keeps its row (rewritten), a new one gets the
        next."""
        table = self._rows[collection]
        have = self._rows_of(collection, [p.id for p in points])
        dense = _as_stored(np.asarray([v[DENSE] for v in vectors], dtype=np.float32))
        fused = (np.asarray([v[FUSED] for v in vectors], dtype=np.float32)
                 if collection == TURNS else None)
        again = [i for i, p in enumerate(points) if p.id in have]
        new = [i for i, p in enumerate(points) if p.id not in have]
        rows: dict[str, int] = {}
        if again:
            at = [have[points[i].id] for i in again]
            table.rewrite(at, dense[again], None if fused is None else fused[again])
            rows.update(zip((points[i].id for i in again), at, strict=True))
        if new:
            rows.update(zip((points[i].id for i in new), table.append(
                dense[new], None if fused is None else fused[new]), strict=True))
        return [_with_namespace({**p.payload, ROW: rows[p.id]}) for p in points]

    def _rows_of(self, collection: str, ids: Sequence[str]) -> dict[str, int]:
        """The rows the points of these ids name (those that exist and have one)."""
        if not ids:
            return {}
        records = self._on("rows", collection, "retrieve", list(ids), True, False)
        out: dict[str, int] = {}
        for r in records:
            row = (r.payload or {}).get(ROW)
            if isinstance(row, int):
                out[str(r.id)] = row
        return out

    def update_vectors(self, collection: str, name: str,
                       vectors: Sequence[tuple[str, Vector]]) -> int:
        with self._writes:
            # Only points that exist (the engine refuses the whole update otherwise); this
            # process is the shard's one writer, and `_writes` orders it with the others.
            ids = [i for i, _ in vectors]
            present = {str(r.id) for r in self._on(
                "update vectors", collection, "retrieve", ids, False, False)}
            return self._write_vectors(collection, name,
                                       [(i, v) for i, v in vectors if i in present])

    def _write_vectors(self, collection: str, name: str,
                       vectors: Sequence[tuple[str, Vector]]) -> int:
        """Write these points' `name` vectors (all of them exist: under `_writes`)."""
        qe = self._qe
        batch = [qe.PointVectors(id=i, vector={name: v.tolist()}) for i, v in vectors]
        if batch and name in (DENSE, FUSED):
            rows = self._rows_of(collection, [i for i, _v in vectors])
            named = [(rows[i], v) for i, v in vectors if i in rows]
            if named:
                block = np.asarray([v for _r, v in named], dtype=np.float32)
                self._rows[collection].write_half([r for r, _v in named], block
                                                  if name == FUSED else _as_stored(block),
                                                  fused=name == FUSED)
        if batch:
            operation = qe.UpdateOperation.update_vectors(batch)
            with self._lock:
                # 0 points: an update does not grow the collection.
                self._update("update vectors", collection, operation, 0)
            self._lock_memory(if_due=True)
        return len(batch)

    @property
    def has_windows(self) -> bool:
        return True  # an older shard is migrated on open

    def _vectors(self, collection: str, point: Point) -> dict[str, Any]:
        vectors: dict[str, Any] = {DENSE: point.vector.tolist()}
        if point.sparse:
            vectors[LEXICAL] = self._qe.SparseVector(point.sparse.indices, point.sparse.values)
        if collection == TURNS:
            vectors[FUSED] = fused_vector(point.vector, point.window).tolist()
        return vectors

    def update_windows(self, name: SessionName, turn_ids: Sequence[str], windows: Vector) -> int:
        """The fused vectors remade from each turn's stored dense vector and its new window
        (the window is not kept apart: `FUSED`). The read finds the points that exist, so
        a turn deleted meanwhile is not brought back."""
        wanted = {turn_point_id(name, t): windows[i] for i, t in enumerate(turn_ids)}
        with self._writes:  # read and rewrite as one: no other write between them
            records = self._on("update windows", TURNS, "retrieve", list(wanted), False,
                               [DENSE])
            fused: list[tuple[str, Vector]] = []
            for r in records:
                dense = as_vector(r.vector)
                if dense is not None:
                    fused.append((str(r.id), fused_vector(dense, wanted[str(r.id)])))
            return self._write_vectors(TURNS, FUSED, fused)

    def search_fused(
        self, collection: str, vector: Vector, limit: int, where: Where | None
    ) -> list[Hit]:
        return self._query("search", collection, self._nearest_fused(vector), limit, where,
                           self._dense_params(where))

    def _nearest_fused(self, vector: Vector) -> Any:
        return self._qe.Query.Nearest(vector.tolist(), using=FUSED)

    def search(
        self, collection: str, vector: Vector, limit: int, where: Where | None
    ) -> list[Hit]:
        return self._query("search", collection, self._qe.Query.Nearest(
            vector.tolist(), using=DENSE), limit, where, self._dense_params(where))

    def _dense_params(self, where: Where | None) -> Any:
        """Search parameters of dense queries: the graph's ef and, with int8, rescoring the
        quantised candidates with the original vectors (scores stay exact cosines).

        With `hnsw_m` 0 (per-session graphs only, the multi-tenant setting) a search over
        several sessions has no graph that links them: the engine walks one session's
        graph under the filter and misses most of the others' points (measured: 0.53 of
        the exact top-20 over two sessions). Such searches compare exactly instead."""
        qe = self._qe
        ix = self.index
        sessions = (where or {}).get("session_id")
        exact = ix.hnsw_m == 0 and isinstance(sessions, list | tuple) and len(sessions) > 1
        if ix.hnsw_ef is None and ix.quantization == "none" and not exact:
            return None
        quantization = (qe.QuantizationSearchParams(rescore=True)
                        if ix.quantization == "int8" else None)
        return qe.SearchParams(hnsw_ef=ix.hnsw_ef, quantization=quantization, exact=exact)

    def search_sparse(
        self, collection: str, sparse: SparseVector, limit: int, where: Where | None
    ) -> list[Hit]:
        qe = self._qe
        query = qe.Query.Nearest(qe.SparseVector(sparse.indices, sparse.values), using=LEXICAL)
        return self._query("search_sparse", collection, query, limit, where)

    def _query(
        self, action: str, collection: str, query: Any, limit: int, where: Where | None,
        params: Any = None,
    ) -> list[Hit]:
        if collection == FACTS:
            points = self._points(action, collection, query, limit, where, params, False)
            return self._fact_hits(points, [float(p.score) for p in points])
        points = self._points(action, collection, query, limit, where, params, _POINT_VECTORS)
        return [_hit(p, float(p.score)) for p in points]

    def _fact_hits(self, records: Any, scores: Sequence[float] | None = None) -> list[Hit]:
        """`Hit`s of payload-only fact replies, their vectors read as rows in one step."""
        payloads, replies, dense, _ = self._row_vectors(FACTS, records)
        out: list[Hit] = []
        for i, payload in enumerate(payloads):
            score = 0.0 if scores is None else scores[i]
            if i in replies:
                reply = replies[i]
                vector = None if reply is None else as_vector(reply.vector)
            else:
                assert dense is not None
                vector = dense[i]
            out.append(Hit(str(records[i].id), score, payload, vector))
        return out

    def _row_vectors(self, collection: str, records: Any) -> tuple[
            list[dict[str, Any]], dict[int, Any], np.ndarray | None, np.ndarray | None]:
        """The replies' payloads and the rows they name, read in one step (`edge_rows`):
        dense and fused blocks, a row per reply. A reply that names no row (not filled yet:
        none should) is read again from the engine with its vectors: those points by index
        (None: gone meanwhile), their rows in the blocks left as placeholders."""
        payloads = [r.payload for r in records]  # (each read of it converts anew)
        table = self._rows[collection]
        rows = [payload.get(ROW) for payload in payloads]
        lacking = [i for i, row in enumerate(rows) if not table.has(row)]
        replies: dict[int, Any] = {}
        if lacking:
            got = {str(r.id): r for r in self._on(
                "retrieve", collection, "retrieve", [str(records[i].id) for i in lacking],
                False, _POINT_VECTORS)}
            replies = {i: got.get(str(records[i].id)) for i in lacking}
        if len(replies) == len(rows):
            return payloads, replies, None, None
        dense, fused = table.read([0 if i in replies else cast(int, row)
                                   for i, row in enumerate(rows)])
        return payloads, replies, dense, fused

    def _points(
        self, action: str, collection: str, query: Any, limit: int, where: Where | None,
        params: Any = None, vectors: list[str] | bool = False,
        payload: list[str] | bool = True,
    ) -> Any:
        request = self._qe.QueryRequest(
            limit=limit, query=query, filter=self._filter(where), with_payload=payload,
            with_vector=vectors, params=params,
        )
        return self._on(action, collection, "query", request)

    def search_facts(
        self, sessions: SessionName | Sequence[SessionName], vector: Vector, limit: int,
        statuses: Sequence[str], scope: Scope | None = None, known: FactOf | None = None,
    ) -> list[FactHit]:
        """As `VectorStore.search_facts`; with `known`, each hit's payload read only as far
        as telling its version (`_known_fact_hits`)."""
        if known is None:
            return super().search_facts(sessions, vector, limit, statuses, scope)
        where: Where = {
            **session_where(sessions, scope), "status": list(statuses), **scoped(scope)}
        query = self._qe.Query.Nearest(vector.tolist(), using=DENSE)
        return self._known_fact_hits("search", query, limit, where,
                                     self._dense_params(where), known)

    def search_facts_lexical(
        self, sessions: SessionName | Sequence[SessionName], sparse: SparseVector,
        limit: int, statuses: Sequence[str], scope: Scope | None = None,
        known: FactOf | None = None,
    ) -> list[FactHit]:
        """As `search_facts`, by the BM25 vector."""
        if known is None or not sparse:
            return super().search_facts_lexical(sessions, sparse, limit, statuses, scope)
        where: Where = {
            **session_where(sessions, scope), "status": list(statuses), **scoped(scope)}
        qe = self._qe
        query = qe.Query.Nearest(qe.SparseVector(sparse.indices, sparse.values), using=LEXICAL)
        return self._known_fact_hits("search_sparse", query, limit, where, None, known)

    def _known_fact_hits(self, action: str, query: Any, limit: int, where: Where,
                         params: Any, known: FactOf) -> list[FactHit]:
        """The fact hits of `query` (as `_query` gives them), each one's payload read only
        as far as `_FACT_STUB`: `known` gives the `Fact` of that id at that write stamp
        (recall holds the session's facts), and a hit it does not hold is read whole.
        Converting a fact's whole payload out of the engine cost ~16 us, most of a fact
        search (30 hits: 0.49 ms of 0.56 ms, measured on LoCoMo)."""
        points = self._points(action, FACTS, query, limit, where, params, False,
                              list(_FACT_STUB))
        hits = self._fact_hits(points, [float(p.score) for p in points])
        facts = [known(h.payload) for h in hits]
        unknown = [h.id for h, fact in zip(hits, facts, strict=True) if fact is None]
        whole = {h.id: h.payload for h in self.retrieve(FACTS, unknown)} if unknown else {}
        out: list[FactHit] = []
        for hit, held in zip(hits, facts, strict=True):
            fact = held
            if fact is None and hit.id in whole:  # (not there: deleted since the search)
                fact = Fact.model_validate(whole[hit.id])
            if fact is not None:
                out.append(FactHit(fact, hit.score, hit.vector))
        return out

    def search_turns_and_windows(
        self, sessions: SessionName | Sequence[SessionName], vector: Vector, limit: int,
        scope: Scope | None = None,
    ) -> tuple[list[TurnHit], list[TurnHit]]:
        """One search of the fused vectors; each hit's dense similarity from its dense
        vector (read for recall anyway), its window's from the two (`window_similarity`).
        It replaced a batch of a dense and a window search (~0.6 ms less at 100k points)."""
        where: Where = {**session_where(sessions, scope), **scoped(scope)}
        points = self._points("search", TURNS, self._nearest_fused(vector), limit, where,
                              self._dense_params(where), False)
        dense = self._turn_hits(points)
        window: list[TurnHit] = []
        for p, hit in zip(points, dense, strict=True):
            own = hit.vector
            hit.score = 0.0 if own is None else float(own @ vector)
            # The same payload object: each read of `p.payload` converts it anew (~1 us,
            # and one more dict alive through the recall for the garbage collector).
            window.append(TurnHit(hit.payload, window_similarity(float(p.score), hit.score),
                                  own, None))
        return dense, window

    def _search_turns(
        self, using: TurnSearch, query: Vector | SparseVector, limit: int, where: Where
    ) -> list[TurnHit]:
        """The turn searches build their hits from the reply (no `Hit` step, no point id
        formatted); the vectors stay unconverted until recall uses them (`TurnHit`)."""
        qe = self._qe
        params = None
        if using == "lexical":
            sparse = cast(SparseVector, query)
            nearest = qe.Query.Nearest(
                qe.SparseVector(sparse.indices, sparse.values), using=LEXICAL)
            action = "search_sparse"
        else:
            nearest = qe.Query.Nearest(cast(Vector, query).tolist(), using=DENSE)
            action, params = "search", self._dense_params(where)
        points = self._points(action, TURNS, nearest, limit, where, params, False)
        return self._turn_hits(points, [float(p.score) for p in points])

    def _turn_hits(self, records: Any, scores: Sequence[float] | None = None
                   ) -> list[TurnHit]:
        """Hits of payload-only replies, their vectors read as rows (`_row_vectors`)."""
        payloads, replies, dense, fused = self._row_vectors(TURNS, records)
        out: list[TurnHit] = []
        for i, payload in enumerate(payloads):
            score = 0.0 if scores is None else scores[i]
            if i in replies:
                reply = replies[i]
                out.append(TurnHit(payload, score, None) if reply is None
                           else TurnHit.from_reply(payload, score, reply))
            else:
                assert dense is not None and fused is not None
                out.append(TurnHit.from_rows(payload, score, dense[i], fused[i]))
        return out

    def window_similarities(self, hits: Sequence[TurnHit], vector: Vector) -> list[float | None]:
        """One exact query over just these points: the engine compares their fused vectors,
        and each window's similarity follows from that and the hit's dense one
        (`window_similarity`; a point not returned: None). The points of one session are named
        by their seqs (a seq is one turn of the session): the payload indexes find them in
        a quarter of the time an id filter takes (0.11 against 0.48 ms for 35 turns of a
        LoCoMo session); hits from several sessions by their ids."""
        if not hits:
            return []
        qe = self._qe
        names = {payload_session(h.payload) for h in hits}
        if len(names) == 1:
            condition = self._filter({**session_where(names.pop()),
                                      "seq": sorted({h.seq for h in hits})})
        else:
            condition = qe.Filter(must=[qe.HasIdCondition({h.point_id for h in hits})])
        request = qe.QueryRequest(
            limit=len(hits), query=qe.Query.Nearest(vector.tolist(), using=FUSED),
            filter=condition, with_payload=False, with_vector=False,
            params=qe.SearchParams(exact=True))
        scores = {p.id: float(p.score)
                  for p in self._on("window similarities", TURNS, "query", request)}
        out: list[float | None] = []
        for h in hits:
            fused = scores.get(h.engine_id)
            own = h.vector
            out.append(None if fused is None or own is None
                       else window_similarity(fused, float(own @ vector)))
        return out

    def retrieve(self, collection: str, ids: Sequence[str]) -> list[Hit]:
        if not ids:
            return []
        if collection == FACTS:
            return self._fact_hits(self._on("retrieve", collection, "retrieve", list(ids),
                                            True, False))
        records = self._on("retrieve", collection, "retrieve", list(ids), True, _POINT_VECTORS)
        return [_hit(r, 0.0) for r in records]

    def visible_fact_ids(
        self, name: SessionName, fact_ids: Collection[str], scope: Scope
    ) -> set[str]:
        """Payloads only: the vectors of a hundred facts cost more than the rest."""
        wanted = [f for f in fact_ids if is_uuid(f)]
        if not wanted:
            return set()
        records = self._on("retrieve", FACTS, "retrieve", wanted, True, False)
        return {str(r.payload.get("fact_id")) for r in records
                if payload_session(r.payload) == name and scope.allows(r.payload)}

    def get_turns(
        self, name: SessionName, turn_ids: Sequence[str], scope: Scope | None = None
    ) -> list[TurnHit]:
        """As the searches' hits: vectors read out of the reply on first use."""
        if not turn_ids:
            return []
        ids = [turn_point_id(name, t) for t in turn_ids]
        records = self._on("retrieve", TURNS, "retrieve", ids, True, False)
        return [h for h in self._turn_hits(records)
                if scope is None or scope.allows(h.payload)]

    def turns_by_seq(
        self, name: SessionName, seqs: Sequence[int], scope: Scope | None = None, *,
        with_vectors: bool = True, with_windows: bool = False,
    ) -> list[TurnHit]:
        """Pages the size of the ask (a seq is one turn of the session; a page of 512 cost
        ~0.1 ms more at 100k points), the vectors read out of the reply on first use: the
        generic path converted each point's two vectors twice (~0.8 ms of a recall's
        neighbours at 100k). `with_windows`: the window vectors as well."""
        if not seqs:
            return []
        wanted = sorted(set(seqs))
        where = self._filter({**session_where(name, scope), "seq": wanted, **scoped(scope)})
        qe = self._qe
        out: list[TurnHit] = []
        offset: Any = None
        while True:
            request = qe.ScrollRequest(
                offset=offset, limit=len(wanted), filter=where, with_payload=True,
                with_vector=False,
            )
            records, offset = self._on("scroll", TURNS, "scroll", request)
            out += (self._turn_hits(records) if with_vectors
                    else [TurnHit(r.payload, 0.0, None) for r in records])
            # A full page names a next one; with every seq found (one turn each) there is
            # none to read (the empty page cost ~0.1 ms of a recall's neighbours at 100k).
            if offset is None or len(out) >= len(wanted):
                return out

    def scroll(
        self, collection: str, where: Where | None, *, with_vectors: bool = False
    ) -> Iterator[Hit]:
        qe = self._qe
        offset: Any = None
        while True:
            request = qe.ScrollRequest(
                offset=offset, limit=512, filter=self._filter(where), with_payload=True,
                with_vector=_POINT_VECTORS if with_vectors else False,
            )
            records, offset = self._on("scroll", collection, "scroll", request)
            for record in records:
                if with_vectors:
                    yield _hit(record, 0.0)
                else:
                    yield Hit(str(record.id), 0.0, record.payload, None)
            if offset is None:
                return

    def facts_written_after(
        self, name: SessionName, after: float | None
    ) -> list[tuple[Fact, float]]:
        qe = self._qe
        where = self._filter(session_where(name))
        if after is not None:
            where = qe.Filter(must=[where, qe.FieldCondition(
                key=WRITTEN_AT, range=qe.RangeFloat(gt=after))])
        out: list[tuple[Fact, float]] = []
        offset: Any = None
        while True:
            request = qe.ScrollRequest(offset=offset, limit=512, filter=where,
                                       with_payload=True, with_vector=False)
            records, offset = self._on("scroll", FACTS, "scroll", request)
            out += [(Fact.model_validate(payload), written_at(payload))
                    for payload in (r.payload for r in records)]
            if offset is None:
                return out

    def count(self, collection: str, where: Where | None) -> int:
        request = self._qe.CountRequest(filter=self._filter(where), exact=True)
        return int(self._on("count", collection, "count", request))

    def delete(self, collection: str, where: Where) -> None:
        """The points that match; a turn point's row is zeroed (no vector of it stays)."""
        condition = self._filter(where)
        operation = self._qe.UpdateOperation.delete_points_by_filter(condition)
        with self._writes, self._lock:
            rows = self._rows_matching(collection, condition)
            self._update("delete", collection, operation, 0)
            self._rows[collection].erase(rows)

    def _rows_matching(self, collection: str, condition: Any) -> list[int]:
        """The rows the points that match name."""
        qe = self._qe
        rows: list[int] = []
        offset: Any = None
        while True:
            records, offset = self._on("rows", collection, "scroll", qe.ScrollRequest(
                offset=offset, limit=1024, filter=condition,
                with_payload=True, with_vector=False))
            rows += [row for r in records if isinstance(row := (r.payload or {}).get(ROW), int)]
            if offset is None:
                return rows

    def _fill_rows(self, collection: str, *, every: bool = False) -> None:
        """Rows for the points that name none (written before rows were kept; `every`:
        all points): their vectors as the engine stores them, appended, and the row set in
        their payload."""
        qe = self._qe
        condition = None if every else qe.Filter(must=[qe.IsEmptyCondition(ROW)])
        started, filled = time.perf_counter(), 0
        offset: Any = None
        with self._writes:
            while True:
                records, offset = self._on("rows", collection, "scroll", qe.ScrollRequest(
                    offset=offset, limit=1024, filter=condition, with_payload=False,
                    with_vector=_POINT_VECTORS))
                records = [r for r in records if as_vector(r.vector) is not None]
                if not records:  # (a point with no dense vector is none recall reads)
                    if offset is None:
                        break
                    continue
                dense = np.asarray([as_vector(r.vector) for r in records], dtype=np.float32)
                fused = np.asarray([as_vector(r.vector, FUSED) if isinstance(r.vector, dict)
                                    and FUSED in r.vector else fused_vector(d, None)
                                    for r, d in zip(records, dense, strict=True)],
                                   dtype=np.float32) if collection == TURNS else None
                rows = self._rows[collection].append(dense, fused)
                for r, row in zip(records, rows, strict=True):
                    operation = qe.UpdateOperation.set_payload([r.id], {ROW: row})
                    with self._lock:
                        self._update("rows", collection, operation, 0)
                filled += len(records)
                if offset is None:
                    break
        if filled:
            log.info("store.rows_filled", collection=collection, points=filled,
                     ms=round((time.perf_counter() - started) * 1000, 1))
        # The payload writes moved the points out of the graph's segment: built again (as
        # after a migration), in the background.
        build_after = self.index.index_after_points
        if build_after and filled >= build_after:
            self.build_index(collection, wait=False)

    def changes(self, collection: str) -> int | None:
        return self._changes[collection]

    def vacuum(self) -> str:
        """Rebuild each collection into a new shard holding only its live points, and
        remove the old one: deleted points leave the engine's files (its write-ahead log
        and segment pages keep a deleted point's bytes until then). Writes wait while a
        collection is copied, reads go on against the old shard until the swap; an index
        build in flight is waited for first (its copy predates the deletes)."""
        for name in COLLECTIONS:
            self._rebuild(name)
        return "done"

    def _rebuild(self, collection: str) -> None:
        started = time.perf_counter()
        while True:
            self.indexer.wait()
            # Writes wait for the copy (it must hold every live point); reads go on against
            # the old shard until the swap, under the lock, like an index build's.
            with self._writes:
                with self._lock:
                    if self.indexer.running:
                        continue
                    if self._closed:
                        raise StoreUnavailable("qdrant-edge", "vacuum: the store is closed")
                    old = self._shards[collection]
                new_path = self.path / f"{collection}.g{time.time_ns()}"
                new = self._open(new_path)
                live: set[int] = set()
                try:
                    self._ensure_indexes(collection, new)
                    copied = self._copy_points(old, new, collection, live)
                    new.flush()
                except Exception:
                    new.close()
                    shutil.rmtree(new_path, ignore_errors=True)
                    raise
                with self._lock:
                    retire = self._swap(collection, new, new_path)
                # Rows a crash left with no point (still under `_writes`).
                self._rows[collection].keep_only(live)
                break
        retire()
        log.info("store.vacuumed", collection=collection, points=copied,
                 ms=round((time.perf_counter() - started) * 1000, 1))
        every = self.index.index_after_points
        if every and copied >= every:
            self.build_index(collection, wait=False)

    def _copy_points(self, old: Any, new: Any, collection: str,
                     rows: set[int] | None = None) -> int:
        """Copy every point; `rows`: collects the rows the points name."""
        qe = self._qe
        copied = 0
        offset: Any = None
        while True:
            records, offset = old.scroll(qe.ScrollRequest(
                offset=offset, limit=512, with_payload=True, with_vector=True))
            batch = []
            for r in records:
                vector = as_vector(r.vector)
                if vector is None:
                    continue
                sparse = None
                if isinstance(r.vector, dict) and LEXICAL in r.vector:
                    kept = r.vector[LEXICAL]
                    sparse = SparseVector(list(kept.indices), list(kept.values))
                vectors = self._vectors(collection, Point(str(r.id), vector, r.payload, sparse,
                                                          window_of(r.vector)))
                if collection == TURNS and isinstance(r.vector, dict) and FUSED in r.vector:
                    vectors[FUSED] = list(r.vector[FUSED])  # as stored: refined windows too
                payload = r.payload
                if rows is not None and isinstance(row := (payload or {}).get(ROW), int):
                    rows.add(row)
                batch.append(qe.Point(id=str(r.id), vector=vectors, payload=payload))
            if batch:
                new.update(qe.UpdateOperation.upsert_points(batch))
                copied += len(batch)
            if offset is None:
                return copied

    def flush(self) -> None:
        with self._writes, self._lock:  # files change: not while a build copies them
            for shard in self._shards.values():
                self._call("flush", shard.flush)

    def build_index(self, collection: str, *, wait: bool = True) -> None:
        """Start an index build of `collection` now (in the background, as growth would);
        `wait`: return when it is in place."""
        with self._lock:
            self.indexer.start(collection)
        if wait:
            self.indexer.wait()

    def index_info(self, collection: str) -> dict[str, int]:
        """Segments, points and HNSW-indexed vectors of a collection (benchmarks, status)."""
        info = self._on("info", collection, "info")
        return {"segments": int(info.segments_count), "points": int(info.points_count),
                "indexed_vectors": int(info.indexed_vectors_count)}

    def _qe_load(self, folder: Path) -> Any:
        return self._qe.EdgeShard.load(str(folder))

    def _swap(self, collection: str, built: Any, built_path: Path) -> Callable[[], None]:
        """Make the built copy (open, up to date) the collection (under the lock). Returns
        what to do once the lock is released: close and remove the old shard."""
        old, old_folder = self._shards[collection], self._folders[collection]
        self._shards[collection] = built
        self._folders[collection] = built_path
        set_active(self.path, collection, built_path)

        def retire() -> None:
            old.flush()
            old.close()
            shutil.rmtree(old_folder, ignore_errors=True)
            self._lock_memory()  # the built shard's files (read in by `warm` already)

        return retire

    def close(self) -> None:
        self.indexer.close()  # not under the lock: a finishing build takes it to swap
        with self._lock:
            if not self._closed:
                for shard in self._shards.values():
                    shard.flush()
                self._close_open()
                for rows in self._rows.values():
                    rows.close()


_INDEX_PARAMS = ("is_tenant", "enable_hnsw", "lookup", "range")
# Marks a folder whose points all carry a namespace and a row (`_fill_once`).
FILLED = "vectors.filled"


def _as_stored(dense: np.ndarray) -> np.ndarray:
    """Dense vectors as the engine keeps them (cosine: unit length), so a row reads as the
    engine's own copy would (`FUSED` is a dot-product vector, kept as given)."""
    norms = np.linalg.norm(dense, axis=1, keepdims=True)
    return (dense / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def _with_namespace(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload with a namespace (a point written without one, as before namespaces,
    is the default namespace's: filters match it by value, `_in_namespace`)."""
    if payload.get("namespace"):
        return payload
    return {**payload, "namespace": DEFAULT_NAMESPACE}


def _same_index(have: Any, wanted: Any) -> bool:
    """Whether an existing payload index was made with the parameters we want (a plain
    schema type reports no parameters)."""
    if have is None or type(have) is not type(wanted):
        return False
    return all(getattr(have, a, None) == getattr(wanted, a, None) for a in _INDEX_PARAMS)


# What a fact search reads of each hit's payload when the caller holds the facts already
# (`_known_fact_hits`): which fact, which write of it (`read_already`), its vector's row.
_FACT_STUB = ("fact_id", WRITTEN_AT, ROW)


def _hit(point: Any, score: float) -> Hit:
    """A point or record of the engine as a `Hit`. Its `vector` is read once: each read
    converts all of its vectors out of the engine."""
    vectors = point.vector
    return Hit(str(point.id), score, point.payload, as_vector(vectors), window_of(vectors))
