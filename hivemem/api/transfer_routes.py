"""Export and import for one namespace's key (the remote client's `export`, `import_file`),
included by `hivemem.api.client_routes`.

An export is written by the scoped handle to a temporary file and streamed back; its record
counts travel in a header, its sessions in its own first line. An import is an upload of an
export whose every record is the key's to write (its namespace; for an agent key, that agent),
appended only (`hivemem.transfer.scoped_import`): it can add to the namespace and touch nothing
else. Every record is checked as ingest checks it before anything is written; a refused file
answers 422 (403 for records outside the key's scope) listing the refused records by line.
"""

import json
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path as FilePath
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, Field
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from hivemem.api.problems import BASE, MEDIA_TYPE
from hivemem.api.schemas import ID_REGEX, Id, Problem
from hivemem.errors import ValidationError
from hivemem.producer.admin import Admin
from hivemem.producer.scoped import ScopedMemory
from hivemem.store.apikeys import ApiKeyInfo
from hivemem.transfer.checks import ImportRefused, ImportScope
from hivemem.transfer.importer import ImportSummary
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


class RefusedRecord(BaseModel):
    line: int
    field: str
    detail: str


class ImportProblem(Problem):
    """A refused import file: the problem of its first refused record, then all of them."""

    # Absent when the request itself was refused (its mode, its key) before a record was read.
    refused: int = Field(default=0, description="How many records were refused")
    records: list[RefusedRecord] = Field(default_factory=list,
                                         description="The first refused records, by line")


_REFUSED: dict[str, Any] = {"model": ImportProblem,
                            "content": {"application/problem+json": {}}}
IMPORT_REFUSED: dict[int | str, dict[str, Any]] = {
    403: {"description": "A record of another agent (for an agent key): nothing was written",
          **_REFUSED},
    422: {"description": "Records ingest would refuse, or of another namespace: nothing was"
                         " written; `records` lists them (line, field, detail)", **_REFUSED},
}


def refused_problem(request: Request, refused: ImportRefused) -> JSONResponse:
    """The file-level answer: the first refusal as the problem's detail and field, and every
    refused record (up to `checks.MAX_SHOWN`) with its line and field."""
    status = 403 if refused.forbidden else 422
    body = {
        "type": BASE + ("forbidden" if refused.forbidden else "validation"),
        "title": "Forbidden" if refused.forbidden else "Invalid input", "status": status,
        "detail": str(refused), "instance": request.url.path, "field": refused.field,
        **refused.summary(),
    }
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE)


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
                 openapi_extra=IMPORT_BODY, responses=IMPORT_REFUSED,
                 summary="Append an export file (of this namespace only) to the namespace")
    async def import_file(
        request: Request, key: Key, mode: Literal["append"] = "append", gzip: bool = False,
    ) -> ImportSummary | JSONResponse:
        checked = check_import_mode(mode)
        # What this key may write: its namespace, and for an agent key that agent's data only.
        scope = ImportScope(key.namespace, key.agent_id)
        folder = FilePath(tempfile.mkdtemp(prefix="hivemem-import-"))
        upload = folder / ("upload.jsonl.gz" if gzip else "upload.jsonl")
        try:
            with upload.open("wb") as out:
                async for chunk in request.stream():
                    out.write(chunk)

            def run() -> ImportSummary:
                return admin.import_file(upload, mode=checked, scope=scope)

            summary = await run_in_threadpool(run)
        except ImportRefused as refused:
            return refused_problem(request, refused)
        except ValidationError as exc:
            # A file-level refusal names the file: the caller's is "upload", never where
            # this server put it.
            if type(exc) is not ValidationError or str(folder) not in exc.message:
                raise
            raise ValidationError(exc.field, exc.message.replace(str(upload), "upload")
                                  .replace(str(folder), "upload")) from None
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return summary.model_copy(update={"path": "upload"})

    return router
