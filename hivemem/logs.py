"""structlog setup, called once by entry points (CLI, workers), never at import."""

from __future__ import annotations

import logging
import re
import sys

import structlog

from hivemem.domain.redact import MASK, redact

_SECRET_FIELD = re.compile(
    r"(?i)(api_?key|password|passwd|secret|token|authorization|credentials?|private_key)"
)


def redact_secrets(
    _logger: object, _method: str, event: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """Last step before rendering: no key, password or token reaches a log line (by the
    field's name, or by the value's shape: `hivemem.domain.redact`)."""
    for key, value in event.items():
        if _SECRET_FIELD.fullmatch(key) and value:
            event[key] = MASK
        elif isinstance(value, str | dict | list | tuple):
            event[key] = redact(value)
    return event


def configure_logging(level: str = "info", json: bool | None = None) -> None:
    if json is None:
        json = not sys.stderr.isatty()
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def ensure_quiet_default() -> None:
    """Library use without any logging setup: warnings and errors only, to stderr.

    structlog's own default prints every level to stdout, which would mix debug events into
    an application's output. An application that configured structlog is left alone.
    """
    if not structlog.is_configured():
        configure_logging("warning", json=False)
