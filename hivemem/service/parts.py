"""What the service is built from: the stores, the job queue and the lazily opened read
side of one installation. `hivemem.runtime.wiring.Wiring` is the one implementation (it
builds each part on first use); the service names only this protocol, so it never imports
the composition root that builds it."""

from __future__ import annotations

from typing import Protocol

from hivemem.config import Settings
from hivemem.pipeline.topology import Keys
from hivemem.providers.embedders import Embedder
from hivemem.recall.foreground import Foreground
from hivemem.service.guard import IngestGuard
from hivemem.store.apikeys import ApiKeyStore
from hivemem.store.audit import AuditLog
from hivemem.store.currency import SlotTableStore
from hivemem.store.episodes import EpisodeStore
from hivemem.store.erasure import ErasureStore
from hivemem.store.key_index import KeyIndexStore
from hivemem.store.redis import Redis
from hivemem.store.reflection import ReflectionState
from hivemem.store.sessions import SessionStore
from hivemem.store.state import TurnLog
from hivemem.store.streams import StreamStore
from hivemem.store.vectors.base import VectorStore
from hivemem.transfer.stores import Stores
from hivemem.workers.compact import Compactor
from hivemem.workers.queue import JobQueue


class Parts(Protocol):
    """The parts of one installation the service works with."""

    @property
    def settings(self) -> Settings: ...

    @property
    def keys(self) -> Keys: ...

    @property
    def redis(self) -> Redis: ...

    @property
    def state(self) -> TurnLog: ...

    @property
    def streams(self) -> StreamStore: ...

    @property
    def episodes(self) -> EpisodeStore: ...

    @property
    def slot_tables(self) -> SlotTableStore: ...

    @property
    def sessions(self) -> SessionStore: ...

    @property
    def audit(self) -> AuditLog: ...

    @property
    def reflection(self) -> ReflectionState: ...

    @property
    def erasure(self) -> ErasureStore: ...

    @property
    def key_index(self) -> KeyIndexStore: ...

    @property
    def api_keys(self) -> ApiKeyStore: ...

    @property
    def jobs(self) -> JobQueue: ...

    @property
    def guard(self) -> IngestGuard: ...

    @property
    def vectors(self) -> VectorStore: ...

    @property
    def foreground(self) -> Foreground: ...

    @property
    def query_embedder(self) -> Embedder: ...

    def compactor(self) -> Compactor: ...

    def stores(self) -> Stores: ...
