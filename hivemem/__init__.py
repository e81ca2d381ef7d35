"""hivemem: shared, distributed, session-scoped memory for AI agents.

This module is the public SDK surface. Importing it loads neither rq, fastembed nor the
embedded Qdrant engine; those load when a worker or a recall first needs them.
"""

from hivemem.config import Settings
from hivemem.domain.models import (
    ContextItem,
    DeadLetter,
    ExcludedItem,
    RecallResult,
    Role,
    ScoreComponents,
    SessionStats,
    Turn,
)
from hivemem.domain.recall.policy import PRESETS, RecallPolicy, ScoringWeights
from hivemem.errors import (
    Backpressure,
    HivememError,
    ModelUnavailable,
    ProcessingTimeout,
    ProviderError,
    RetryLater,
    StoreUnavailable,
    ValidationError,
)
from hivemem.producer.aio import AsyncMemoryClient
from hivemem.producer.client import MemoryClient, TurnInput

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "AsyncMemoryClient",
    "Backpressure",
    "ContextItem",
    "DeadLetter",
    "ExcludedItem",
    "HivememError",
    "MemoryClient",
    "ModelUnavailable",
    "ProcessingTimeout",
    "ProviderError",
    "RecallPolicy",
    "RecallResult",
    "RetryLater",
    "Role",
    "ScoreComponents",
    "ScoringWeights",
    "SessionStats",
    "Settings",
    "StoreUnavailable",
    "Turn",
    "TurnInput",
    "ValidationError",
    "__version__",
]
