"""The pipeline's layout: every Redis key hivemem uses (`Keys`) and the stream stages as
data (`Stage`, `Topology`).

Session keys share the session id; stream keys are global per stage. A deployment may run
several hivemem installations on one Redis by giving each its own prefix. No module outside
`hivemem.pipeline` spells a stream, a consumer group or a stage's entry fields: they ask the
`Topology` (stages) and `hivemem.pipeline.messages` (entries).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hivemem.errors import ValidationError
from hivemem.pipeline.messages import EmbeddedEntry, Entry, TurnEntry, decode_embedded
from hivemem.pipeline.messages import decode_turn_entry as _decode_turn_entry

# Stage names: what `hivemem worker KIND`, metrics labels and `wait_until_processed(stage=)`
# call them. Each stage's consumer group has the stage's name.
EMBED = "embed"
BOUNDARY = "boundary"
STAGE_NAMES: tuple[str, ...] = (EMBED, BOUNDARY)


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str = "hm"

    # Streams and their consumer groups.
    @property
    def turns_stream(self) -> str:
        return f"{self.prefix}:stream:turns"

    @property
    def embedded_stream(self) -> str:
        """Turns that are durable in Qdrant (with their vectors), plus episode controls."""
        return f"{self.prefix}:stream:embedded"

    def dead_letters(self, stream: str) -> str:
        return f"{stream}:dead"

    def delivery_errors(self, stream: str, group: str) -> str:
        """Hash entry id -> last error, so a dead letter can say why it died."""
        return f"{stream}:errors:{group}"

    # Per-session state (rebuildable from Qdrant).
    def session_seq(self, session_id: str) -> str:
        return f"{self.prefix}:s:{session_id}:seq"

    def session_turn_ids(self, session_id: str) -> str:
        """Hash turn id -> seq: makes a repeated turn id a no-op."""
        return f"{self.prefix}:s:{session_id}:ids"

    def session_recent(self, session_id: str) -> str:
        """Sorted set of the latest turns (JSON), scored by seq."""
        return f"{self.prefix}:s:{session_id}:recent"

    def session_processed(self, session_id: str) -> str:
        """Bitmap: bit seq is set once that turn is durable in Qdrant."""
        return f"{self.prefix}:s:{session_id}:done"

    def session_dead(self, session_id: str) -> str:
        """Bitmap: bit seq is set once that turn was dead-lettered."""
        return f"{self.prefix}:s:{session_id}:dead"

    def session_meta(self, session_id: str) -> str:
        """Hash: first/last activity timestamps."""
        return f"{self.prefix}:s:{session_id}:meta"

    # Memory lifecycle.
    def session_info(self, session_id: str) -> str:
        """Hash: what the caller says about the session (title, agent_id, created_at)."""
        return f"{self.prefix}:s:{session_id}:info"

    def session_audit(self, session_id: str) -> str:
        """Append-only stream: every status or layer change of the session's facts."""
        return f"{self.prefix}:s:{session_id}:audit"

    # Episode boundaries (owned by the boundary stage).
    def boundary_state(self, session_id: str) -> str:
        """Hash: next seq to assign, closed count, the open episode (JSON), marker counts."""
        return f"{self.prefix}:s:{session_id}:ep:state"

    def boundary_buffer(self, session_id: str) -> str:
        """Hash seq -> embedded turn waiting for its predecessors; `c:<seq>` -> control."""
        return f"{self.prefix}:s:{session_id}:ep:buf"

    def boundary_lease(self, session_id: str) -> str:
        """The one boundary worker allowed to advance this session (SET NX PX, token)."""
        return f"{self.prefix}:s:{session_id}:ep:lease"

    def session_episodes(self, session_id: str) -> str:
        """List of the session's closed episode ids, in order."""
        return f"{self.prefix}:s:{session_id}:episodes"

    def episode(self, episode_id: str) -> str:
        """String: the closed episode as JSON."""
        return f"{self.prefix}:ep:{episode_id}"

    # Reflection (owned by the reflect jobs).
    def reflect_lock(self, session_id: str) -> str:
        """One reflection per session at a time (token, renewed while it runs)."""
        return f"{self.prefix}:s:{session_id}:reflect:lock"

    def reflected(self, session_id: str) -> str:
        """Index of the last episode reflected: episodes are reflected in order."""
        return f"{self.prefix}:s:{session_id}:reflected"

    @property
    def traces_stream(self) -> str:
        """Bounded stream of reflection traces."""
        return f"{self.prefix}:stream:traces"

    @property
    def sessions(self) -> str:
        """Set of every session id seen."""
        return f"{self.prefix}:sessions"

    # Scopes and the service.
    def session_namespace(self, session_id: str) -> str:
        """String: the namespace that owns the session (set by its first turn)."""
        return f"{self.prefix}:s:{session_id}:ns"

    def api_key(self, key_id: str) -> str:
        """Hash: an API key's namespace, salt and salted hash (never the key itself)."""
        return f"{self.prefix}:apikey:{key_id}"

    @property
    def api_keys(self) -> str:
        """Set of every API key id."""
        return f"{self.prefix}:apikeys"


@dataclass(frozen=True, slots=True)
class Stage:
    """One stream stage: the stream it consumes, its consumer group, where its dead letters
    go, and the message type its entries decode to.

    Partition seam: a deployment has `partitions` streams per stage (P = 1 today, so the
    stage's stream is `stream`). When streams are partitioned, `stream_for(p)` is the only
    place that names partition p's stream; callers that iterate a stage's streams use
    `streams()` so that they already cover every partition.
    """

    name: str
    stream: str
    group: str
    dead_letters: str
    message: object  # the message class (or union of classes) its entries decode to
    decode: Callable[[Mapping[str, str]], Entry] = field(repr=False, compare=False)
    partitions: int = 1

    def stream_for(self, partition: int = 0) -> str:
        if not 0 <= partition < self.partitions:
            raise ValueError(f"partition {partition} outside 0..{self.partitions - 1}")
        return self.stream

    def streams(self) -> list[str]:
        return [self.stream_for(p) for p in range(self.partitions)]


class Topology:
    """The deployment's stages, built from its `Keys`: `Topology(keys).embed`, `.boundary`,
    `.stages` (in pipeline order)."""

    __slots__ = ("boundary", "embed", "keys")

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self.embed = Stage(
            name=EMBED,
            stream=keys.turns_stream,
            group=EMBED,
            dead_letters=keys.dead_letters(keys.turns_stream),
            message=TurnEntry,
            decode=_decode_turn_entry,
        )
        self.boundary = Stage(
            name=BOUNDARY,
            stream=keys.embedded_stream,
            group=BOUNDARY,
            dead_letters=keys.dead_letters(keys.embedded_stream),
            message=EmbeddedEntry,
            decode=decode_embedded,
        )

    @property
    def stages(self) -> tuple[Stage, ...]:
        return (self.embed, self.boundary)

    def stage(self, name: str) -> Stage:
        """The stage called `name`; a `ValidationError` on ``stage`` otherwise."""
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise ValidationError("stage", f"unknown stage {name!r}; one of {', '.join(STAGE_NAMES)}")

    def stage_of(self, stream: str) -> Stage | None:
        """The stage that consumes `stream` (None: not a stage's stream)."""
        for stage in self.stages:
            if stream in stage.streams():
                return stage
        return None
