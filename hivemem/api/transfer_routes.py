"""Export and import for one namespace's key (the remote client's `export`, `import_file`),
included by `hivemem.api.client_routes`.

An export is written by the scoped handle to a temporary file and streamed back; its record
counts travel in a header, its sessions in its own first line. An import is an upload of an
export whose every record is the key's namespace's, appended only
(`hivemem.transfer.scoped_import`): it can add to the namespace and touch nothing else.
"""

import json
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path as FilePath
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from hivemem.api.schemas import ID_REGEX, Id
from hivemem.producer.admin import Admin
from hivemem.producer.scoped import ScopedMemory
from hivemem.store.apikeys import ApiKeyInfo
from hivemem.transfer.importer import ImportSummary
from hivemem.transfer.scoped_import import check_file_namespace
from hivemem.transfer.scoped_import import check_mode as check_import_mode

EXPORT_COUNTS = "X-Hivemem-Export-Counts"  # the export's record counts, as JSON
AgentId = Annotated[str | None, Query(pattern=ID_REGEX, max_length=128)]
_FILE: dict[str, Any] = {"schema": {"type": "string", "format": "binary"}}
# The upload is the raw export file (not JSON): declared so that clients and schemathesis see
# the body the route reads from the stream.
IMPORT_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "application/x-ndjson": _FILE, "application/gzip": _FILE}}}
EXPORT_FILE: dict[int | str, dict[str, Any]] = {200: {
    "description": "The export, one JSON record per line",
    "content": {"application/x-ndjson": _FILE, "application/gzip": _FILE}}}


def build_transfer_router(
    tenant_of: Callable[[ApiKeyInfo], ScopedMemory],
    authenticate: Callable[..., Awaitable[ApiKeyInfo]], admin: Admin,
) -> APIRouter:
    Key = Annotated[ApiKeyInfo, Depends(authenticate)]  # noqa: N806 (a type alias)
    router = APIRouter()

    @router.get("/export", response_class=FileResponse, responses=EXPORT_FILE,
                summary="The namespace's sessions (or the ones named) as a JSON Lines export")
    def export(
        key: Key, agent_id: AgentId = None,
        session_id: Annotated[list[Id] | None, Query(max_length=1000)] = None,
        vectors: bool = False, gzip: bool = False,
    ) -> FileResponse:
        folder = FilePath(tempfile.mkdtemp(prefix="hivemem-export-"))
        target = folder / ("export.jsonl.gz" if gzip else "export.jsonl")
        try:
            memory = tenant_of(key).for_agent(agent_id)
            summary = memory.export(target, session_id, vectors=vectors)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return FileResponse(
            target, media_type="application/gzip" if gzip else "application/x-ndjson",
            headers={EXPORT_COUNTS: json.dumps(summary.counts, separators=(",", ":"))},
            background=BackgroundTask(shutil.rmtree, folder, ignore_errors=True),
        )

    @router.post("/import", response_model=ImportSummary, status_code=201,
                 openapi_extra=IMPORT_BODY,
                 summary="Append an export file (of this namespace only) to the namespace")
    async def import_file(
        request: Request, key: Key, mode: Literal["append"] = "append", gzip: bool = False,
    ) -> ImportSummary:
        checked = check_import_mode(mode)
        folder = FilePath(tempfile.mkdtemp(prefix="hivemem-import-"))
        upload = folder / ("upload.jsonl.gz" if gzip else "upload.jsonl")
        try:
            with upload.open("wb") as out:
                async for chunk in request.stream():
                    out.write(chunk)

            def run() -> ImportSummary:
                check_file_namespace(upload, key.namespace)
                return admin.import_file(upload, mode=checked)

            summary = await run_in_threadpool(run)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return summary.model_copy(update={"path": "upload"})

    return router
