"""Secret redaction for anything hivemem records (traces, errors, logs)."""

from __future__ import annotations

import re
from typing import Any

_SECRET_KEY = re.compile(
    r"(?i)(api[_-]?key|secret|token|password|passwd|pwd|authorization|auth|credential|private[_-]?key)"
)
_PATTERNS = [
    re.compile(r"\bsk-[A-Za-z0-9_-]{12,}"),  # OpenAI-style keys
    re.compile(r"\bsk-ant-[A-Za-z0-9_-]{12,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),  # GitHub tokens
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\bhm_[0-9a-f]{12}_[A-Za-z0-9_-]{20,}"),  # hivemem API keys
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JWTs
    re.compile(
        r"(?i)\b(password|passwd|pwd|api[_-]?key|secret|token)\s*[:=]\s*['\"]?[^\s'\",;]{3,}"
    ),
    re.compile(r"(?i)(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"),  # user:password@ in URLs
]
MASK = "[REDACTED]"


def redact_text(text: str) -> str:
    for pattern in _PATTERNS:
        text = pattern.sub(
            lambda m: (m.group(1) + "=" + MASK) if m.re.groups and m.group(1) else MASK, text
        )
    return text


def redact(value: Any) -> Any:
    """Redact strings by pattern and dict values by key name, recursively."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {
            k: (MASK if isinstance(k, str) and _SECRET_KEY.search(k) and v else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value
