"""hivemem: shared, distributed, session-scoped memory for AI agents.

This module is the public SDK surface: the clients (`MemoryClient`, its tenant handle
`ScopedMemory` and its operator side `Admin`, each with an async twin), every type their
methods return, and every error they raise. Importing it loads neither rq, fastembed nor the
embedded Qdrant engine; those load when a worker or a recall first needs them.
"""

from hivemem.config import CompactionPolicy, Settings
from hivemem.domain.audit import AuditEvent
from hivemem.domain.compaction import CompactionDiff
from hivemem.domain.episode import Episode
from hivemem.domain.fact import Fact
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
from hivemem.domain.timeline import TimelineEvent
from hivemem.errors import (
    Backpressure,
    ConfigurationError,
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
    StoreUnavailable,
    ValidationError,
)
from hivemem.producer.admin import Admin
from hivemem.producer.aio import AsyncMemoryClient
from hivemem.producer.aio_admin import AsyncAdmin
from hivemem.producer.aio_scoped import AsyncScopedMemory
from hivemem.producer.client import MemoryClient, TurnInput
from hivemem.producer.scoped import ScopedMemory
from hivemem.runtime.workspace import WorkspaceError
from hivemem.store.apikeys import ApiKeyInfo, ApiKeyStore
from hivemem.store.status import PipelineStatus
from hivemem.store.vectors.base import VectorStore
from hivemem.transfer.exporter import ExportSummary
from hivemem.transfer.importer import ImportSummary

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "Admin",
    "ApiKeyInfo",
    "ApiKeyStore",
    "AsyncAdmin",
    "AsyncMemoryClient",
    "AsyncScopedMemory",
    "AuditEvent",
    "Backpressure",
    "CompactionDiff",
    "CompactionPolicy",
    "ConfigurationError",
    "ContextItem",
    "DeadLetter",
    "Episode",
    "ExcludedItem",
    "ExportSummary",
    "Fact",
    "HivememError",
    "ImportSummary",
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
    "RetryLater",
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
    "StoreUnavailable",
    "TimelineEvent",
    "Turn",
    "TurnInput",
    "ValidationError",
    "VectorStore",
    "WorkspaceError",
    "__version__",
]
