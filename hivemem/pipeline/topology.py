"""The pipeline's layout: every Redis key hivemem uses (`Keys`), the partitions, and the
stream stages as data (`Stage`, `Topology`).

Partitions: a deployment has a fixed number P of partitions (`RedisSettings.partitions`).
A session belongs to partition `partition_of(session_id, P)` (a stable hash, never Python's
`hash()`, which is salted per process). Every key of a session and its partition's streams,
dead letters, delivery errors, session set and episode outbox carry the same Redis Cluster
hash tag ``{p<N>.<k>}`` (`partition_tags`), so each Lua script and MULTI touches one slot
only, and per-session order holds with any number of workers. Keys that belong to no
session (API keys, traces, the worker leases) have tags of their own or are single-key.

A session is named by (namespace, session id): the same id in two namespaces is two
sessions. `Keys.session_name` is the one place that joins the two into the session's
internal name (`SessionName`), which every per-session key, the partition and the vector
store's point ids are derived from: ``default``'s sessions keep their bare id (``s1``), so
stores written before namespaces keep their keys; another namespace's session is
``<namespace>/<session id>`` (``/`` occurs in neither part, so names never collide).

A deployment may run several hivemem installations on one Redis by giving each its own
prefix. No module outside `hivemem.pipeline` spells a stream, a consumer group or a
stage's entry fields: they ask the `Topology` (stages) and `hivemem.pipeline.messages`.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from redis.crc import key_slot

from hivemem.domain.names import SessionName, session_name, split_session_name
from hivemem.errors import ValidationError
from hivemem.pipeline.messages import (
    EmbeddedEntry,
    Entry,
    OutboxEntry,
    TurnEntry,
    decode_embedded,
    decode_outbox,
)
from hivemem.pipeline.messages import decode_turn_entry as _decode_turn_entry

__all__ = ["Keys", "SessionName", "Stage", "Topology", "session_name", "split_session_name"]

# Stage names: what `hivemem worker KIND`, metrics labels and `wait_until_processed(stage=)`
# call them. Each stage's consumer group has the stage's name.
EMBED = "embed"
BOUNDARY = "boundary"
DISPATCH = "dispatch"  # closed episodes (the outbox) -> rq reflect jobs
# Window vectors embedded again as text, on spare capacity (a second group on the embedded
# stream; `embedding.window_mode: refined`). Not a per-turn stage: nothing waits for it.
WINDOW = "window"
STAGE_NAMES: tuple[str, ...] = (EMBED, BOUNDARY)
DEFAULT_PARTITIONS = 16
# The fields of a session's forget mark (`Keys.session_forgotten`): the last entry id of its
# partition's turns stream, and of its embedded stream, when the forget began.
FORGOTTEN_TURNS = "turns"
FORGOTTEN_EMBEDDED = "embedded"


_SLOTS = 16384  # Redis Cluster's hash slots



@functools.cache
def partition_tags(partitions: int) -> tuple[str, ...]:
    """Each partition's hash tag, chosen so that partition p's slot lies in the p-th of P
    equal slot ranges: a cluster whose masters hold equal contiguous ranges (what
    ``redis-cli --cluster create`` makes) then holds equal shares of the partitions."""
    tags: list[str] = []
    for p in range(partitions):
        low, high = p * _SLOTS // partitions, (p + 1) * _SLOTS // partitions
        k = 0
        while not low <= key_slot(f"p{p}.{k}".encode()) < high:
            k += 1
        tags.append(f"p{p}.{k}")
    return tuple(tags)


@functools.lru_cache(maxsize=65_536)
def partition_of(session_id: str, partitions: int) -> int:
    """The session's partition: stable across processes, machines and Python versions.
    (Cached: every key of a session asks for it, several times per turn on ingest.)"""
    if partitions == 1:
        return 0
    digest = hashlib.blake2b(session_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str = "hm"
    partitions: int = DEFAULT_PARTITIONS

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ValidationError("partitions", "must be at least 1")

    # -- partitions ------------------------------------------------------------------------

    def partition(self, name: SessionName) -> int:
        """The partition of the session named `name` (`session_name`)."""
        return partition_of(name, self.partitions)

    @staticmethod
    def session_name(namespace: str, session_id: str) -> SessionName:
        """The one place a session's namespace and id become its internal name."""
        return session_name(namespace, session_id)

    @staticmethod
    def split_name(name: str) -> tuple[str, str]:
        """(namespace, session id) of an internal name."""
        return split_session_name(name)

    def tag(self, partition: int) -> str:
        """The key prefix of partition p, hash tag included: ``hm:{p3.12}``."""
        return f"{self.prefix}:{{{partition_tags(self.partitions)[partition]}}}"

    def _s(self, name: SessionName) -> str:
        return f"{self.tag(self.partition(name))}:s:{name}"

    def session_root(self, name: SessionName) -> str:
        """What every one of the session's own keys starts with (``<root>:<name>``)."""
        return self._s(name)

    @property
    def partition_count(self) -> str:
        """String: the P this deployment's keys were written with (checked at start)."""
        return f"{self.prefix}:partitions"

    @property
    def repartition_marker(self) -> str:
        """String (JSON old/new counts) while `hivemem repartition` moves keys: every
        process refuses to start until the move is finished."""
        return f"{self.prefix}:repartitioning"

    # -- streams and their consumer groups (one per partition) ----------------------------

    def turns_stream(self, partition: int) -> str:
        return f"{self.tag(partition)}:stream:turns"

    def embedded_stream(self, partition: int) -> str:
        """Turns that are durable in Qdrant (with their vectors), plus episode controls."""
        return f"{self.tag(partition)}:stream:embedded"

    def outbox_stream(self, partition: int) -> str:
        """Episodes closed by the boundary commit, waiting for their reflect job."""
        return f"{self.tag(partition)}:stream:outbox"

    def dead_letters(self, stream: str) -> str:
        return f"{stream}:dead"

    def delivery_errors(self, stream: str, group: str) -> str:
        """Hash entry id -> last error, so a dead letter can say why it died."""
        return f"{stream}:errors:{group}"

    # -- stage workers' partition leases (single-key commands only) ------------------------

    def stage_members(self, stage: str) -> str:
        """Sorted set: live workers of a stage, scored by their last heartbeat (ms)."""
        return f"{self.prefix}:workers:{stage}"

    def partition_lease(self, stage: str, partition: int) -> str:
        """The one worker of a stage reading partition p (SET NX PX, its consumer name)."""
        return f"{self.prefix}:lease:{stage}:{partition}"

    def job_maintenance(self, queue: str) -> str:
        """On rq's Redis: held (SET NX PX) by the reflect worker that looks for abandoned
        jobs of `queue` this round; lapses by itself."""
        return f"{self.prefix}:jobcare:{queue}"

    def dispatched(self, episode_id: str) -> str:
        """On rq's Redis: set once the episode's reflect job is enqueued (never twice)."""
        return f"{self.prefix}:dispatched:{episode_id}"

    # -- per-session state (rebuildable from Qdrant) --------------------------------------

    def session_turn_ids(self, name: SessionName) -> str:
        """Hash turn id -> seq: makes a repeated turn id a no-op."""
        return f"{self._s(name)}:ids"

    def session_recent(self, name: SessionName) -> str:
        """List of the latest turns, oldest first, as (seq, wire JSON) pairs: two elements
        per turn (`hivemem.store.recent`)."""
        return f"{self._s(name)}:win"

    def session_processed(self, name: SessionName) -> str:
        """Bitmap: bit seq is set once that turn is durable in Qdrant."""
        return f"{self._s(name)}:done"

    def session_dead(self, name: SessionName) -> str:
        """Bitmap: bit seq is set once that turn was dead-lettered."""
        return f"{self._s(name)}:dead"

    def session_meta(self, name: SessionName) -> str:
        """Hash: first/last activity timestamps."""
        return f"{self._s(name)}:meta"

    def session_latest(self, name: SessionName) -> str:
        """Hash: the key index, each metadata key's latest turn per owner
        (`hivemem.store.key_index`)."""
        return f"{self._s(name)}:latest"

    # Memory lifecycle.
    def session_info(self, name: SessionName) -> str:
        """Hash: what the caller says about the session (title, agent_id, created_at)."""
        return f"{self._s(name)}:info"

    def session_audit(self, name: SessionName) -> str:
        """Append-only stream: every status or layer change of the session's facts."""
        return f"{self._s(name)}:audit"

    # Episode boundaries (owned by the boundary stage).
    def boundary_state(self, name: SessionName) -> str:
        """Hash: next seq to assign, closed count, the open episode (JSON), marker counts."""
        return f"{self._s(name)}:ep:state"

    def boundary_buffer(self, name: SessionName) -> str:
        """Hash seq -> embedded turn waiting for its predecessors; `c:<seq>` -> control."""
        return f"{self._s(name)}:ep:buf"

    def boundary_lease(self, name: SessionName) -> str:
        """The one boundary worker allowed to advance this session (token, PX)."""
        return f"{self._s(name)}:ep:lease"

    def boundary_waiting(self, partition: int) -> str:
        """Sorted set: the partition's sessions with entries in their boundary buffer,
        scored by when the buffer last went from empty to not (ms, server clock): what the
        boundary workers' sweep drains once no lease is held."""
        return f"{self.tag(partition)}:ep:waiting"

    def session_episodes(self, name: SessionName) -> str:
        """List of the session's closed episode ids, in order."""
        return f"{self._s(name)}:episodes"

    def episode(self, name: SessionName, episode_id: str) -> str:
        """String: the closed episode as JSON (in its session's slot: the commit writes it)."""
        return f"{self.tag(self.partition(name))}:ep:{episode_id}"

    # Currency (owned by the boundary stage's currency keeper, `hivemem.workers.currency`).
    def slot_state(self, name: SessionName) -> str:
        """String: the keeper's working state (JSON `SlotState`: last seq applied, the
        previous turn, the current statements)."""
        return f"{self._s(name)}:slots:state"

    def slot_table(self, name: SessionName) -> str:
        """Hash turn id -> what replaced that statement (JSON `Replacement`);
        `p:<turn id>` -> whose own slot the turn states."""
        return f"{self._s(name)}:slots"

    # Reflection (owned by the reflect jobs).
    def reflect_lock(self, name: SessionName) -> str:
        """One reflection per session at a time (token, renewed while it runs)."""
        return f"{self._s(name)}:reflect:lock"

    def reflected(self, name: SessionName) -> str:
        """Index of the last episode reflected: episodes are reflected in order."""
        return f"{self._s(name)}:reflected"

    def reflections_failed(self, name: SessionName) -> str:
        """Hash: the indexes of episodes whose latest reflection failed (`tracked` marks a
        session whose reflections are counted here; before it, the traces were scanned)."""
        return f"{self._s(name)}:reflect:failed"

    @property
    def traces_stream(self) -> str:
        """Bounded stream of reflection traces."""
        return f"{self.prefix}:stream:traces"

    def sessions(self, partition: int) -> str:
        """Set of the internal name (`session_name`) of every session seen in partition p
        (`all_sessions` lists them all)."""
        return f"{self.tag(partition)}:sessions"

    def session_set(self, name: SessionName) -> str:
        """The session set the session is listed in."""
        return self.sessions(self.partition(name))

    def all_sessions(self) -> list[str]:
        """Every partition's session set: cross-session reads fan out over these."""
        return [self.sessions(p) for p in range(self.partitions)]

    def session_keys(self, name: SessionName, episode_ids: Iterable[str] = ()) -> list[str]:
        """Every key that is the session's own (and its closed episodes' bodies): what a
        forget deletes, in one place. A key added for a session is listed here."""
        return [
            self.session_turn_ids(name), self.session_recent(name),
            self.session_processed(name), self.session_dead(name),
            self.session_meta(name), self.session_info(name),
            self.session_audit(name), self.boundary_state(name),
            self.boundary_buffer(name), self.boundary_lease(name),
            self.slot_state(name), self.slot_table(name),
            self.session_episodes(name), self.reflected(name),
            self.reflections_failed(name), self.session_latest(name),
            *(self.episode(name, e) for e in episode_ids),
        ]

    # Forgetting.
    def session_forgotten(self, name: SessionName) -> str:
        """Hash: the forget mark, the last entry ids of the session's partition's turns and
        embedded streams (`FORGOTTEN_TURNS`, `FORGOTTEN_EMBEDDED`) when a forget of the
        whole session began: what the stages' writes check, so that nothing read before
        the forget is written after it (`hivemem.store.lua.forget_mark`). Not one of
        `session_keys`: the forget's purge keeps it (with a time to live), while workers
        may still hold the forgotten entries."""
        return f"{self._s(name)}:forgot"

    # (single-key commands only: these keys have a tag of their own).
    @property
    def forget_pending(self) -> str:
        """Hash forget id -> the request (JSON): a forget begun and not yet finished (a
        process that starts finishes it)."""
        return f"{self.prefix}:{{forget}}:pending"

    @property
    def retention_lease(self) -> str:
        """Held (SET NX PX) by the one process that runs the retention sweep this round."""
        return f"{self.prefix}:{{forget}}:retention"

    @property
    def erasures(self) -> str:
        """Stream: every finished forget (who, when, what scope, counts; never content)."""
        return f"{self.prefix}:{{forget}}:erasures"

    def namespace_sessions(self, partition: int, namespace: str) -> str:
        """Set: the session ids (bare, as the namespace names them) of `namespace`'s
        sessions in partition p (a namespace's listing reads these, never the other
        namespaces' sessions). Added to by a session's first turn (the append script),
        restore and import."""
        return f"{self.tag(partition)}:nsidx:{namespace}"

    def namespace_session_set(self, name: SessionName) -> str:
        """The namespace index the session named `name` is listed in."""
        return self.namespace_sessions(self.partition(name), split_session_name(name)[0])

    def all_namespace_sessions(self, namespace: str) -> list[str]:
        """Every partition's index of `namespace`'s sessions."""
        return [self.namespace_sessions(p, namespace) for p in range(self.partitions)]

    @property
    def session_names_moved(self) -> str:
        """String: set once every session another namespace owned under its bare id (a
        store written before sessions were keyed by namespace) has moved to its internal
        name (`hivemem.store.session_names`)."""
        return f"{self.prefix}:names:moved"

    @property
    def namespace_index_built(self) -> str:
        """String: set once every session owned before the namespace indexes existed has
        been listed in its namespace's index (`SessionStore.session_ids` builds them once)."""
        return f"{self.prefix}:nsidx:built"

    # Scopes and the service.
    def api_key(self, key_id: str) -> str:
        """Hash: an API key's namespace, salt and salted hash (never the key itself)."""
        return f"{self.prefix}:{{apikeys}}:apikey:{key_id}"

    @property
    def api_keys(self) -> str:
        """Set of every API key id (same slot as the keys: created in one MULTI)."""
        return f"{self.prefix}:{{apikeys}}:apikeys"


@dataclass(frozen=True, slots=True)
class Stage:
    """One stream stage: its partitioned streams, its consumer group, where its dead
    letters go, and the message type its entries decode to.

    `stream_for(p)` is the only place that names partition p's stream; callers that
    iterate a stage's streams use `streams()` so that they cover every partition.
    """

    name: str
    group: str
    message: object  # the message class (or union of classes) its entries decode to
    decode: Callable[[Mapping[str, str]], Entry] = field(repr=False, compare=False)
    partitions: int = 1
    stream_of: Callable[[int], str] = field(repr=False, compare=False, default=str)

    def stream_for(self, partition: int = 0) -> str:
        if not 0 <= partition < self.partitions:
            raise ValueError(f"partition {partition} outside 0..{self.partitions - 1}")
        return self.stream_of(partition)

    def streams(self) -> list[str]:
        return [self.stream_for(p) for p in range(self.partitions)]

    def dead_letters_for(self, partition: int) -> str:
        return f"{self.stream_for(partition)}:dead"

    def all_dead_letters(self) -> list[str]:
        return [self.dead_letters_for(p) for p in range(self.partitions)]

    def partition_of_stream(self, stream: str) -> int | None:
        """Which partition `stream` (or its dead-letter stream) is; None: not this stage's."""
        for p in range(self.partitions):
            if stream in (self.stream_for(p), self.dead_letters_for(p)):
                return p
        return None


class Topology:
    """The deployment's stages, built from its `Keys`: `Topology(keys).embed`, `.boundary`,
    `.dispatch` (the outbox), `.window` (window refinement), `.stages` (the per-turn stages,
    in pipeline order)."""

    __slots__ = ("boundary", "dispatch", "embed", "keys", "window")

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self.embed = Stage(
            name=EMBED, group=EMBED, message=TurnEntry, decode=_decode_turn_entry,
            partitions=keys.partitions, stream_of=keys.turns_stream,
        )
        self.boundary = Stage(
            name=BOUNDARY, group=BOUNDARY, message=EmbeddedEntry, decode=decode_embedded,
            partitions=keys.partitions, stream_of=keys.embedded_stream,
        )
        self.dispatch = Stage(
            name=DISPATCH, group=DISPATCH, message=OutboxEntry, decode=decode_outbox,
            partitions=keys.partitions, stream_of=keys.outbox_stream,
        )
        # The embedded stream read a second time, by its own group: a group on a stream
        # keeps its entries from being trimmed until it has acked them.
        self.window = Stage(
            name=WINDOW, group=WINDOW, message=EmbeddedEntry, decode=decode_embedded,
            partitions=keys.partitions, stream_of=keys.embedded_stream,
        )

    @property
    def stages(self) -> tuple[Stage, ...]:
        return (self.embed, self.boundary)

    @property
    def all_stages(self) -> tuple[Stage, ...]:
        """Every stream stage, the outbox dispatcher included."""
        return (self.embed, self.boundary, self.dispatch)

    def stage(self, name: str) -> Stage:
        """The stage called `name`; a `ValidationError` on ``stage`` otherwise."""
        for stage in self.all_stages:
            if stage.name == name:
                return stage
        raise ValidationError("stage", f"unknown stage {name!r}; one of {', '.join(STAGE_NAMES)}")

    def stage_of(self, stream: str) -> Stage | None:
        """The stage that consumes `stream` (None: not a stage's stream)."""
        for stage in self.all_stages:
            if stage.partition_of_stream(stream) is not None:
                return stage
        return None
