"""The owner API: the vector-store primitives of an embedded folder, for its guests.

Mounted only when the app runs on the embedded folder's owner (`MemoryClient.owner_key`).
A guest process (`hivemem.store.vectors.proxy`) proves it may use the folder with the
owner's local key, which only the folder's user can read. Not in the OpenAPI schema: it is
the store's own traffic, unscoped, and no API key of a namespace opens it.
"""

from __future__ import annotations

import hmac
from typing import Any

import orjson
from fastapi import APIRouter, Body, FastAPI, Header, HTTPException, Response

from hivemem.store.vectors import wire
from hivemem.store.vectors.base import COLLECTIONS, VectorStore
from hivemem.store.vectors.proxy import PATH


def owner_router(vectors: VectorStore, key: str) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.post(PATH)
    def primitive(op: str, body: dict[str, Any] = Body(default_factory=dict),  # noqa: B008
                  x_hivemem_owner_key: str = Header(default="")) -> Response:
        # A plain def: FastAPI runs it in its thread pool, off the event loop.
        if not hmac.compare_digest(x_hivemem_owner_key.encode(), key.encode()):
            raise HTTPException(status_code=403, detail="not the folder's owner key")
        if op not in wire.OPERATIONS:
            raise HTTPException(status_code=404, detail=f"no vector operation {op!r}")
        if op == "info":
            return _json({"dim": vectors.dim, "has_windows": vectors.has_windows})
        collection = body.get("collection")
        if collection not in COLLECTIONS:
            raise HTTPException(status_code=422, detail=f"unknown collection {collection!r}")
        return _json(_run(vectors, op, collection, body))

    return router


def _json(result: Any) -> Response:
    # Encoded here, not by FastAPI's `jsonable_encoder`, which walks every payload in
    # Python: 91 ms for a scroll of 1,400 facts against under 1 ms, in the owner's
    # interpreter, where recalls run (embedded reflection scrolls the session's facts
    # for each episode).
    return Response(orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY
                                 | orjson.OPT_NON_STR_KEYS), media_type="application/json")


def _run(vectors: VectorStore, op: str, collection: str, body: dict[str, Any]) -> Any:
    where = wire.decode_where(body.get("where"))
    if op == "upsert":
        vectors.upsert(collection, wire.decode_points(body["points"]))
        return None
    if op in ("search", "search_fused"):
        vector = wire.decode_vector(body["vector"])
        if vector is None:
            raise HTTPException(status_code=422, detail=f"{op} needs a vector")
        search = vectors.search if op == "search" else vectors.search_fused
        return wire.encode_hits(search(collection, vector, int(body["limit"]), where))
    if op == "search_sparse":
        sparse = wire.decode_sparse(body["sparse"])
        if sparse is None:
            raise HTTPException(status_code=422, detail="search_sparse needs a sparse vector")
        return wire.encode_hits(
            vectors.search_sparse(collection, sparse, int(body["limit"]), where))
    if op == "retrieve":
        return wire.encode_hits(vectors.retrieve(collection, [str(i) for i in body["ids"]]))
    if op == "scroll":
        return wire.encode_hits(list(vectors.scroll(
            collection, where, with_vectors=bool(body.get("with_vectors")))))
    if op == "count":
        return vectors.count(collection, where)
    if op == "vacuum":
        return vectors.vacuum()
    if where is None:
        raise HTTPException(status_code=422, detail="delete needs a filter")
    vectors.delete(collection, where)
    return None


def owner_app(vectors: VectorStore, key: str) -> FastAPI:
    """The owner API alone (served on the folder's unix socket by the owner itself)."""
    app = FastAPI(title="hivemem owner", docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(owner_router(vectors, key))
    return app
