"""hivemem: shared, distributed, session-scoped memory for AI agents.

This module is the public SDK surface: the clients (`MemoryClient`, its tenant handle
`ScopedMemory` and its operator side `Admin`, each with an async twin), every type their
methods return, and every error they raise; and the remote client of the HTTP API
(`connect`, `connect_async`: `RemoteMemory`, with the same methods as `ScopedMemory`).
Importing it loads neither rq, fastembed nor the embedded Qdrant engine; those load when a
worker or a recall first needs them.
"""

from hivemem.config import CompactionPolicy, Settings
from hivemem.domain.audit import AuditEvent
from hivemem.domain.compaction import CompactionDiff
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact
from hivemem.domain.forget import DiskErasure, ForgetReceipt, ForgetRequest
from hivemem.domain.keyed import KeyedTurn
from hivemem.domain.models import (
    ContextItem,
    DeadLetter,
    ExcludedItem,
    RecallResult,
    Role,
    ScoreComponents,
    SessionStats,
    StageLag,
    Turn,
)
from hivemem.domain.recall.policy import PRESETS, RecallPolicy, ScoringWeights
from hivemem.domain.scope import Scope
from hivemem.domain.session import RelatedSession, SessionContext, SessionInfo
from hivemem.domain.timeline import TimelineEvent, TimelinePage
from hivemem.errors import (
    AckTimeout,
    ApiError,
    Backpressure,
    ConfigurationError,
    FolderBusy,
    HivememError,
    MalformedEntry,
    ModelUnavailable,
    NotFound,
    NotPermitted,
    OutOfScope,
    ProcessingTimeout,
    ProviderError,
    ReflectionFailed,
    ReflectionTimeout,
    RetryLater,
    StoreRejected,
    StoreUnavailable,
    Unauthorized,
    ValidationError,
)
from hivemem.producer.admin import Admin
from hivemem.producer.aio import AsyncMemoryClient
from hivemem.producer.aio_admin import AsyncAdmin
from hivemem.producer.aio_remote import AsyncRemoteMemory, connect_async
from hivemem.producer.aio_scoped import AsyncScopedMemory
from hivemem.producer.client import MemoryClient, TurnInput
from hivemem.producer.remote import RemoteMemory, connect
from hivemem.producer.remote_http import RetryPolicy
from hivemem.producer.scoped import ScopedMemory
from hivemem.runtime.workspace import WorkspaceError
from hivemem.store.apikeys import ApiKeyInfo, ApiKeyStore
from hivemem.store.status import PipelineStatus
from hivemem.store.vectors.base import VectorStore
from hivemem.transfer.checks import ImportRefused, ImportScope
from hivemem.transfer.exporter import ExportSummary
from hivemem.transfer.importer import ImportSummary

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "AckTimeout",
    "Admin",
    "ApiError",
    "ApiKeyInfo",
    "ApiKeyStore",
    "AsyncAdmin",
    "AsyncMemoryClient",
    "AsyncRemoteMemory",
    "AsyncScopedMemory",
    "AuditEvent",
    "Backpressure",
    "CompactionDiff",
    "CompactionPolicy",
    "ConfigurationError",
    "ContextItem",
    "DeadLetter",
    "DiskErasure",
    "Episode",
    "ExcludedItem",
    "ExportSummary",
    "Fact",
    "FolderBusy",
    "ForgetReceipt",
    "ForgetRequest",
    "HivememError",
    "ImportRefused",
    "ImportScope",
    "ImportSummary",
    "KeyedTurn",
    "MalformedEntry",
    "MemoryClient",
    "ModelUnavailable",
    "NotFound",
    "NotPermitted",
    "OutOfScope",
    "PipelineStatus",
    "ProcessingTimeout",
    "ProviderError",
    "RecallPolicy",
    "RecallResult",
    "ReflectionFailed",
    "ReflectionTimeout",
    "RelatedSession",
    "RemoteMemory",
    "RetryLater",
    "RetryPolicy",
    "Role",
    "Scope",
    "ScopedMemory",
    "ScoreComponents",
    "ScoringWeights",
    "SessionContext",
    "SessionInfo",
    "SessionStats",
    "Settings",
    "StageLag",
    "StoreRejected",
    "StoreUnavailable",
    "TimelineEvent",
    "TimelinePage",
    "Turn",
    "TurnInput",
    "Unauthorized",
    "ValidationError",
    "VectorStore",
    "WorkspaceError",
    "__version__",
    "connect",
    "connect_async",
]
