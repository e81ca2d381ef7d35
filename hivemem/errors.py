"""The error hierarchy: callers catch `HivememError` and never see client internals."""

from __future__ import annotations


class HivememError(Exception):
    """Root of every error hivemem raises on purpose."""


class ValidationError(HivememError, ValueError):
    """Bad input, raised before anything is written. `field` names the offending argument."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class StoreUnavailable(HivememError):
    """Redis or Qdrant could not be reached or refused the operation."""

    def __init__(self, store: str, message: str) -> None:
        super().__init__(f"{store} unavailable: {message}")
        self.store = store


class AckTimeout(StoreUnavailable):
    """An acknowledged ingest (`ack` other than memory, or `durable`) wrote its turns, but
    the confirmation it waits for (WAIT: replicas; WAITAOF: AOF fsyncs) did not come within
    `ingest.durable_timeout_ms`. The turns exist on the master and may well survive; they may
    also be lost at a failover or crash, so the ingest does not count as acknowledged.
    Retrying with the same `turn_id` is safe (a duplicate is a no-op) and waits again."""

    def __init__(self, level: str, wanted: str, got: str, timeout_ms: int,
                 turn_ids: list[str]) -> None:
        shown = ", ".join(turn_ids[:3]) + (f" (+{len(turn_ids) - 3})" if len(turn_ids) > 3
                                           else "")
        StoreUnavailable.__init__(
            self, "redis",
            f"ack={level}: waited {timeout_ms} ms for {wanted}, got {got}; the turn(s)"
            f" {shown} were written to the master and may exist, but are not acknowledged"
            " (they can be lost at a failover): retry with the same turn_id")
        self.level = level
        self.wanted = wanted
        self.got = got
        self.timeout_ms = timeout_ms
        self.turn_ids = turn_ids


class StoreRejected(HivememError):
    """The store refused a request that can never succeed as sent (a Qdrant 400/413/422: a
    payload it cannot hold, a vector of the wrong size). Unlike `StoreUnavailable` it is not
    an outage: retrying gets the same answer, so a worker dead-letters the entries behind it
    with this reason at once and the stage moves on for everyone else."""

    def __init__(self, store: str, action: str, reason: str, *, status: int | None = None) -> None:
        super().__init__(f"{store} rejected {action}: {reason}")
        self.store = store
        self.action = action
        self.reason = reason
        self.status = status


class ProviderError(HivememError):
    """An embedding or LLM provider failed."""


class ModelUnavailable(ProviderError):
    """The embedding model could not be loaded; the message says how to fix it."""


class FolderBusy(HivememError):
    """An embedded folder is owned by another process that cannot be used from here (it
    never published its address, or this caller must own the folder itself)."""


class RetryLater(HivememError):
    """A transient condition: the work should be retried without counting as a failure."""


class Backpressure(HivememError):
    """The turns stream's backlog (entries the embed workers have not consumed yet) is over
    `ingest.max_backlog`: nothing was written. Retry later, or start more embed workers."""

    def __init__(self, backlog: int, limit: int, waited_s: float = 0.0) -> None:
        waited = f" after waiting {waited_s:.1f}s" if waited_s else ""
        super().__init__(
            f"backlog of {backlog} turns not yet embedded is over ingest.max_backlog={limit}"
            f"{waited}; nothing was written (retry later or add embed workers)"
        )
        self.backlog = backlog
        self.limit = limit


class ProcessingTimeout(HivememError, TimeoutError):
    """`wait_until_processed` ran out of time before the workers caught up."""

    def __init__(self, session_id: str, processed: int, target: int, timeout: float) -> None:
        super().__init__(
            f"session {session_id!r}: {processed} of {target} turns processed after {timeout:.1f}s"
            " (are the embed workers running?)"
        )
        self.session_id = session_id
        self.processed = processed
        self.target = target


class ReflectionTimeout(ProcessingTimeout):
    """`wait_until_reflected` ran out of time before the episodes closed so far were
    reflected (the reflect workers, or a slow LLM, are behind)."""

    def __init__(self, session_id: str, done: int, target: int, timeout: float) -> None:
        HivememError.__init__(
            self,
            f"session {session_id!r}: {done} of {target} episodes reflected after "
            f"{timeout:.1f}s (are the reflect workers running? is the LLM reachable?)",
        )
        self.session_id = session_id
        self.processed = done
        self.target = target


class ReflectionFailed(HivememError):
    """An episode's reflection failed for good (its trace holds the error); the session
    moved on past it, and `replay` can redo it."""

    def __init__(self, session_id: str, index: int, error: str) -> None:
        super().__init__(f"session {session_id!r}: reflection of episode {index} failed: "
                         f"{error[:300]}")
        self.session_id = session_id
        self.index = index
        self.error = error


class NotFound(ValidationError):
    """An unknown session, episode or fact. Also what a scoped caller gets for another
    namespace's session or another agent's private fact: `OutOfScope` is this very class, so a
    caller cannot tell the two apart. A `ValidationError` (the id argument is what is wrong), so
    existing ``except ValidationError`` code keeps working; the API answers 404."""

    def __init__(self, field: str = "session_id", message: str = "no such session") -> None:
        super().__init__(field, message)


# The same class, not a subclass: a type check must not reveal that a session exists elsewhere.
OutOfScope = NotFound


class NotPermitted(ValidationError):
    """The caller's credentials do not allow this (an agent-bound key naming another agent):
    the field says which input. The API answers 403."""


class ConfigurationError(HivememError):
    """Configuration is missing or wrong (no vector store configured, a bad workspace file):
    nothing the caller passed in, fixed by changing settings or the environment."""


class MalformedEntry(HivememError, ValueError):
    """A stream entry that does not decode to its stage's message (a poison entry).

    `cause` is the underlying error (a JSON or validation error, a missing field), named in
    the dead letter so that it says what was wrong."""

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause

    @property
    def reason(self) -> str:
        """``<cause type>: <message>``, as a dead letter records it."""
        kind = type(self.cause).__name__ if self.cause is not None else type(self).__name__
        return f"{kind}: {self}"


class Unauthorized(HivememError):
    """The HTTP API refused the API key (missing, unknown or revoked): the remote client's
    401/403."""


class ApiError(HivememError):
    """The HTTP API answered with an error the remote client has no better type for (a 5xx
    that is a server bug, a 4xx it does not know). `status` and `detail` are the problem's."""

    def __init__(self, status: int, title: str, detail: str | None = None) -> None:
        super().__init__(f"HTTP {status} {title}" + (f": {detail}" if detail else ""))
        self.status = status
        self.title = title
        self.detail = detail
