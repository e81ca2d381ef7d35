"""The collections behind the Qdrant REST stand-in: qdrant-edge shards (the Qdrant engine),
one per collection under one folder, driven by the JSON bodies of Qdrant's REST API.

Only the subset hivemem's server store sends is implemented; anything else is answered
with a 400 that says so, never silently ignored. Error texts follow Qdrant's own
(`lib/storage/src/content_manager/errors.rs`, `src/actix/mod.rs`).
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import qdrant_edge as qe

# serde_json's default nesting limit, which Qdrant's JSON body parser keeps.
MAX_JSON_DEPTH = 128
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,255}$")
_DISTANCE = {"Cosine": qe.Distance.Cosine, "Dot": qe.Distance.Dot,
             "Euclid": qe.Distance.Euclid, "Manhattan": qe.Distance.Manhattan}
_MODIFIER = {"idf": qe.Modifier.Idf, "none": getattr(qe.Modifier, "None")}
_SCHEMA = {"keyword": qe.PayloadSchemaType.Keyword, "integer": qe.PayloadSchemaType.Integer,
           "float": qe.PayloadSchemaType.Float, "bool": qe.PayloadSchemaType.Bool,
           "text": qe.PayloadSchemaType.Text, "uuid": qe.PayloadSchemaType.Uuid,
           "datetime": qe.PayloadSchemaType.Datetime}


class ApiError(Exception):
    """An answer other than 200: the status and Qdrant's error text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def bad_input(message: str) -> ApiError:
    return ApiError(400, f"Wrong input: {message}")


def unsupported(what: str) -> ApiError:
    return ApiError(400, f"Bad request: the Qdrant stand-in does not implement {what}")


def json_depth(value: Any, depth: int = 1) -> int:
    """How many objects/arrays deep `value` nests (stops counting past the limit)."""
    if depth > MAX_JSON_DEPTH + 1:
        return depth
    if isinstance(value, dict):
        return max((json_depth(v, depth + 1) for v in value.values()), default=depth)
    if isinstance(value, list):
        return max((json_depth(v, depth + 1) for v in value), default=depth)
    return depth - 1 if depth > 1 else 0


def parse_body(raw: bytes) -> Any:
    """JSON as Qdrant's parser takes it: a body nested deeper than serde_json's limit is a
    400, like any other body that does not parse."""
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except RecursionError:
        body = None
        depth = MAX_JSON_DEPTH + 1
    except ValueError as exc:
        raise ApiError(400, f"Format error in JSON body: {exc}") from None
    else:
        depth = json_depth(body)
    if depth > MAX_JSON_DEPTH:
        raise ApiError(400, "Format error in JSON body: recursion limit exceeded at line 1"
                            f" column {min(len(raw), MAX_JSON_DEPTH + 1)}")
    return body


def point_id(value: Any) -> str | int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        try:
            return str(uuid.UUID(value))
        except ValueError:
            pass
    raise ApiError(400, f"Format error in JSON body: value {value!r} is not a valid point ID,"
                        " valid values are either an unsigned integer or a UUID")


def to_filter(spec: Any) -> Any:
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ApiError(400, "Format error in JSON body: filter must be an object")
    parts: dict[str, Any] = {}
    for clause in ("must", "should", "must_not"):
        conditions = spec.get(clause)
        if conditions is None:
            continue
        if isinstance(conditions, dict):
            conditions = [conditions]
        parts[clause] = [_condition(c) for c in conditions]
    if spec.get("min_should") is not None:
        raise unsupported("min_should")
    return qe.Filter(**parts)


def _condition(spec: Any) -> Any:
    if not isinstance(spec, dict):
        raise ApiError(400, "Format error in JSON body: a condition must be an object")
    if {"must", "should", "must_not"} & set(spec):
        return to_filter(spec)
    if "is_empty" in spec:
        return qe.IsEmptyCondition(spec["is_empty"]["key"])
    if "is_null" in spec:
        return qe.IsNullCondition(spec["is_null"]["key"])
    if "has_id" in spec:
        return qe.HasIdCondition({point_id(i) for i in spec["has_id"]})
    if "key" in spec:
        match = spec.get("match")
        if match is not None:
            if "value" in match:
                return qe.FieldCondition(key=spec["key"], match=qe.MatchValue(match["value"]))
            if "any" in match:
                return qe.FieldCondition(key=spec["key"], match=qe.MatchAny(match["any"]))
            if "except" in match:
                return qe.FieldCondition(key=spec["key"], match=qe.MatchExcept(match["except"]))
            raise unsupported(f"match {sorted(match)}")
        if spec.get("range") is not None:
            bounds = {k: v for k, v in spec["range"].items() if v is not None}
            return qe.FieldCondition(key=spec["key"], range=qe.RangeFloat(**bounds))
        raise unsupported(f"field condition {sorted(spec)}")
    raise unsupported(f"condition {sorted(spec)}")


def _with(value: Any, what: str) -> bool | list[str]:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise unsupported(f"{what} selector {value!r}")


def _vector_json(vector: Any) -> Any:
    if isinstance(vector, dict):
        return {name: _vector_json(v) for name, v in vector.items()}
    if isinstance(vector, qe.SparseVector):
        return {"indices": list(vector.indices), "values": list(vector.values)}
    return vector


def _record(r: Any, *, score: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"id": str(r.id) if not isinstance(r.id, int) else r.id,
                           "payload": r.payload, "vector": _vector_json(r.vector),
                           "shard_key": None, "order_value": None}
    if score:
        out["score"] = float(r.score)
        out["version"] = int(r.version)
    return out


class Collection:
    def __init__(self, path: Path, config: dict[str, Any], shard: Any) -> None:
        self.path = path
        self.config = config
        self.shard = shard

    @property
    def dense(self) -> dict[str, Any]:
        return dict(self.config["params"]["vectors"])

    @property
    def sparse(self) -> dict[str, Any]:
        return dict(self.config["params"].get("sparse_vectors") or {})

    def save(self) -> None:
        tmp = self.path / "standin.json.tmp"
        tmp.write_text(json.dumps(self.config))
        tmp.replace(self.path / "standin.json")

    def check_vector_name(self, name: str) -> None:
        if name not in self.dense and name not in self.sparse:
            raise bad_input(f"Not existing vector name error: {name}")

    def edge_vectors(self, vector: Any) -> dict[str, Any]:
        if not isinstance(vector, dict):
            raise unsupported("unnamed vectors (hivemem names them)")
        out: dict[str, Any] = {}
        for name, value in vector.items():
            self.check_vector_name(name)
            if name in self.sparse:
                if not isinstance(value, dict) or set(value) - {"indices", "values"}:
                    raise ApiError(400, f"Format error in JSON body: vector {name} is sparse")
                if len(value["indices"]) != len(value["values"]):
                    raise bad_input("Sparse vector indices and values must have the same"
                                    " length")
                out[name] = qe.SparseVector(list(value["indices"]), list(value["values"]))
            else:
                size = int(self.dense[name]["size"])
                if not isinstance(value, list) or len(value) != size:
                    got = len(value) if isinstance(value, list) else 0
                    raise bad_input(f"Vector dimension error: expected dim: {size}, got {got}")
                out[name] = [float(x) for x in value]
        return out

    def query_vector(self, body: dict[str, Any]) -> Any:
        query = body.get("query")
        if isinstance(query, dict) and "nearest" in query:
            query = query["nearest"]
        using = body.get("using") or ""
        self.check_vector_name(using)
        if isinstance(query, list):
            size = int(self.dense.get(using, {}).get("size", -1))
            if len(query) != size:
                raise bad_input(f"Vector dimension error: expected dim: {size}, got"
                                f" {len(query)}")
            return qe.Query.Nearest([float(x) for x in query], using=using)
        if isinstance(query, dict) and "indices" in query:
            sparse = qe.SparseVector(list(query["indices"]), list(query["values"]))
            return qe.Query.Nearest(sparse, using=using)
        raise unsupported(f"query {type(query).__name__}")


class Engine:
    """Every collection of one stand-in; one lock serializes shard access across the HTTP
    threads (a real server would do better, a test store need not)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._operation = 0
        self._collections: dict[str, Collection] = {}
        for folder in sorted(self.root.iterdir()):
            config_file = folder / "standin.json"
            if config_file.exists():
                config = json.loads(config_file.read_text())
                shard = qe.EdgeShard.load(str(folder / "shard"))
                self._collections[folder.name] = Collection(folder, config, shard)

    def close(self) -> None:
        with self._lock:
            for collection in self._collections.values():
                collection.shard.flush()
                collection.shard.close()
            self._collections.clear()

    def _get(self, name: str) -> Collection:
        collection = self._collections.get(name)
        if collection is None:
            raise ApiError(404, f"Not found: Collection `{name}` doesn't exist!")
        return collection

    def _update(self, collection: Collection, operation: Any) -> dict[str, Any]:
        try:
            collection.shard.update(operation)
        except Exception as exc:
            raise bad_input(str(exc)) from None
        self._operation += 1
        return {"operation_id": self._operation, "status": "completed"}

    def locked(self, fn: Callable[..., Any], *args: Any) -> Any:
        with self._lock:
            return fn(*args)

    # -- collections -----------------------------------------------------------------------

    def list(self) -> dict[str, Any]:
        return {"collections": [{"name": n} for n in sorted(self._collections)]}

    def exists(self, name: str) -> dict[str, Any]:
        return {"exists": name in self._collections}

    def create(self, name: str, body: dict[str, Any]) -> bool:
        if not _NAME.match(name):
            raise ApiError(422, f"Validation error in path parameters: [collection_name:"
                                f" invalid collection name {name!r}]")
        if name in self._collections:
            raise ApiError(409, f"Wrong input: Collection `{name}` already exists!")
        vectors = body.get("vectors") or {}
        if "size" in vectors:
            raise unsupported("unnamed vectors (hivemem names them)")
        dense = {}
        for vname, params in vectors.items():
            if params.get("distance") not in _DISTANCE:
                raise ApiError(400, f"Format error in JSON body: unknown distance"
                                    f" {params.get('distance')!r}")
            dense[vname] = qe.EdgeVectorParams(size=int(params["size"]),
                                               distance=_DISTANCE[params["distance"]])
        sparse = {}
        for vname, params in (body.get("sparse_vectors") or {}).items():
            modifier = (params or {}).get("modifier") or "none"
            sparse[vname] = qe.EdgeSparseVectorParams(modifier=_MODIFIER[modifier])
        folder = self.root / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        shard = qe.EdgeShard.create(str(folder / "shard"),
                                    qe.EdgeConfig(vectors=dense, sparse_vectors=sparse))
        params = {
            "vectors": vectors,
            "sparse_vectors": body.get("sparse_vectors") or {},
            "shard_number": int(body.get("shard_number") or 1),
            "replication_factor": int(body.get("replication_factor") or 1),
            "write_consistency_factor": int(body.get("write_consistency_factor") or 1),
            "on_disk_payload": bool(body.get("on_disk_payload", True)),
        }
        collection = Collection(folder, {"params": params, "payload_schema": {}}, shard)
        collection.save()
        self._collections[name] = collection
        return True

    def delete(self, name: str) -> bool:
        collection = self._collections.pop(name, None)
        if collection is None:
            return False
        collection.shard.close()
        shutil.rmtree(collection.path, ignore_errors=True)
        return True

    def info(self, name: str) -> dict[str, Any]:
        collection = self._get(name)
        points = int(collection.shard.count(qe.CountRequest(exact=True)))
        schema = {field: {"data_type": kind, "params": None, "points": points}
                  for field, kind in collection.config["payload_schema"].items()}
        return {
            "status": "green", "optimizer_status": "ok", "segments_count": 1,
            "points_count": points, "indexed_vectors_count": 0,
            "config": {
                "params": collection.config["params"],
                "hnsw_config": {"m": 16, "ef_construct": 100, "full_scan_threshold": 10000,
                                "max_indexing_threads": 0, "on_disk": False},
                "optimizer_config": {"deleted_threshold": 0.2, "vacuum_min_vector_number": 1000,
                                     "default_segment_number": 0, "max_segment_size": None,
                                     "memmap_threshold": None, "indexing_threshold": 10000,
                                     "flush_interval_sec": 5,
                                     "max_optimization_threads": None},
                "wal_config": {"wal_capacity_mb": 32, "wal_segments_ahead": 0},
                "quantization_config": None,
            },
            "payload_schema": schema,
        }

    def create_index(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        collection = self._get(name)
        field = body.get("field_name")
        schema = body.get("field_schema")
        if isinstance(schema, dict):
            schema = schema.get("type")
        if not isinstance(field, str) or schema not in _SCHEMA:
            raise ApiError(400, f"Format error in JSON body: bad field index {body!r}")
        result = self._update(collection, qe.UpdateOperation.create_field_index(
            field, _SCHEMA[schema]))
        collection.config["payload_schema"][field] = schema
        collection.save()
        return result

    # -- points ----------------------------------------------------------------------------

    def upsert(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        collection = self._get(name)
        if "points" not in body:
            raise unsupported("the batch form of an upsert")
        points = [
            qe.Point(id=point_id(p.get("id")), vector=collection.edge_vectors(p.get("vector")),
                     payload=p.get("payload"))
            for p in body["points"]
        ]
        return self._update(collection, qe.UpdateOperation.upsert_points(points))

    def update_vectors(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT .../points/vectors: Qdrant answers 404 when a point does not exist."""
        collection = self._get(name)
        points = body.get("points")
        if not isinstance(points, list):
            raise ApiError(400, "Format error in JSON body: expected points")
        ids = [point_id(p.get("id")) for p in points]
        present = {str(r.id) for r in collection.shard.retrieve(ids, False, False)}
        missing = [i for i in ids if str(i) not in present]
        if missing:
            raise ApiError(404, f"Not found: No point with id {missing[0]} found")
        operation = qe.UpdateOperation.update_vectors([
            qe.PointVectors(id=i, vector=collection.edge_vectors(p.get("vector")))
            for i, p in zip(ids, points, strict=True)])
        return self._update(collection, operation)

    def delete_points(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        collection = self._get(name)
        if "filter" in body:
            operation = qe.UpdateOperation.delete_points_by_filter(to_filter(body["filter"]))
        elif "points" in body:
            operation = qe.UpdateOperation.delete_points([point_id(i) for i in body["points"]])
        else:
            raise ApiError(400, "Format error in JSON body: expected points or filter")
        return self._update(collection, operation)

    def query(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        collection = self._get(name)
        if body.get("prefetch"):
            raise unsupported("prefetch")
        request = qe.QueryRequest(
            limit=int(body.get("limit") or 10), offset=body.get("offset"),
            query=collection.query_vector(body), filter=to_filter(body.get("filter")),
            with_payload=_with(body.get("with_payload"), "payload"),
            with_vector=_with(body.get("with_vector"), "vector"),
            score_threshold=body.get("score_threshold"),
        )
        points = collection.shard.query(request)
        return {"points": [_record(p, score=True) for p in points]}

    def query_batch(self, name: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        searches = body.get("searches")
        if not isinstance(searches, list):
            raise bad_input("Format error in JSON body: missing field `searches`")
        return [self.query(name, search) for search in searches]

    def retrieve(self, name: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        collection = self._get(name)
        ids = [point_id(i) for i in body.get("ids") or []]
        records = collection.shard.retrieve(
            ids, _with(body.get("with_payload", True), "payload"),
            _with(body.get("with_vector"), "vector"))
        return [_record(r) for r in records]

    def scroll(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        collection = self._get(name)
        if body.get("order_by") is not None:
            raise unsupported("order_by")
        offset = body.get("offset")
        request = qe.ScrollRequest(
            offset=None if offset is None else point_id(offset),
            limit=int(body.get("limit") or 10), filter=to_filter(body.get("filter")),
            with_payload=_with(body.get("with_payload", True), "payload"),
            with_vector=_with(body.get("with_vector"), "vector"),
        )
        records, next_offset = collection.shard.scroll(request)
        if next_offset is not None and not isinstance(next_offset, int):
            next_offset = str(next_offset)
        return {"points": [_record(r) for r in records], "next_page_offset": next_offset}

    def count(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        collection = self._get(name)
        request = qe.CountRequest(exact=bool(body.get("exact", True)),
                                  filter=to_filter(body.get("filter")))
        return {"count": int(collection.shard.count(request))}
