"""Export and import: a scope exports its namespace's sessions as it sees them; the
operator exports and imports anything (imports write turns of any namespace)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hivemem.domain.scope import Access, OperatorScope, store_scope
from hivemem.service.access import SessionAccess, name_for
from hivemem.service.parts import Parts
from hivemem.service.reads import Reads
from hivemem.transfer.checks import ImportScope
from hivemem.transfer.exporter import ExportSummary, count_records, export_to
from hivemem.transfer.importer import ImportSummary, check_mode, import_from
from hivemem.transfer.stores import Progress, Stores


class Transfer:
    """Versioned JSON Lines files in and out (see `hivemem.transfer`)."""

    def __init__(self, parts: Parts, access: SessionAccess, reads: Reads) -> None:
        self.parts = parts
        self.access = access
        self.reads = reads

    def _stores(self) -> Stores:
        self.reads.vectors()  # opens the vector store (and the query model) on first use
        return self.parts.stores()

    def export(
        self, access: Access, path: str | Path, session_ids: Sequence[str] | None = None, *,
        vectors: bool = False, progress: Progress | None = None,
    ) -> ExportSummary:
        """Write sessions (default: every one `access` may see) to `path` (.gz: compressed)."""
        scope = store_scope(access)
        if session_ids is not None and scope is not None:
            if isinstance(session_ids, str):
                session_ids = [session_ids]
            for sid in session_ids:
                self.access.require(access, sid)
        return export_to(self._stores(), Path(path), session_ids, vectors=vectors,
                         progress=progress, scope=scope)

    def import_file(
        self, _operator: OperatorScope, path: str | Path, *, mode: str = "append",
        progress: Progress | None = None, scope: ImportScope | None = None,
    ) -> ImportSummary:
        """Read an export: validated whole first (every record as ingest checks it), then
        written (modes: append, replace, skip_existing, overwrite). The operator's: a file
        names its namespaces. With `scope` (what an API key may write), a record outside it
        refuses the file (`NotPermitted`)."""
        checked = check_mode(mode)
        return import_from(self._stores(), Path(path), checked, progress=progress, scope=scope)

    def count_records(
        self, _operator: OperatorScope, session_ids: Sequence[str] | None = None,
    ) -> int:
        """About how many records an export would write (for a progress bar)."""
        stores = self._stores()
        return count_records(stores, [name_for(_operator, s) for s in session_ids]
                             if session_ids is not None else stores.state.session_names())
