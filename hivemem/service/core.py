"""`Service`: what the SDK handles (`MemoryClient`, `ScopedMemory`, `Admin`, their async
twins) call. Every operation takes who asks, a required `Scope` or the explicit
`OperatorScope`; there is no default that means "everything".

Built only by `hivemem.runtime.wiring.Wiring.service`, from the wiring's parts, one per
process (and per wiring): the handles share it.
"""

from __future__ import annotations

from hivemem.service.access import SessionAccess
from hivemem.service.forget import Forgetting
from hivemem.service.keyed import Keyed
from hivemem.service.operator import Operator
from hivemem.service.parts import Parts
from hivemem.service.reads import Reads
from hivemem.service.sessions import Sessions
from hivemem.service.transfer import Transfer
from hivemem.service.turns import Turns


class Service:
    """The operations, grouped by job: `turns` (ingest, controls, progress), `reads`
    (recall, facts), `sessions` (header, related, timeline, traces, audit), `operator`
    (status, jobs, compaction, dead letters) and `transfer` (export, import)."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.access = SessionAccess(parts.state, parts.sessions)
        self.reads = Reads(parts, self.access)
        self.turns = Turns(parts, self.access, self.reads)
        self.sessions = Sessions(parts, self.access, self.reads)
        self.operator = Operator(parts, self.access, self.reads, self.sessions)
        self.transfer = Transfer(parts, self.access, self.reads)
        self.forget = Forgetting(parts, self.access, self.reads)
        self.keyed = Keyed(parts, self.access, self.reads)

    def close(self) -> None:
        """Stop the read path's helper threads (the stores close with the wiring)."""
        self.reads.close()
