"""Settings: one pydantic-settings object, built by entry points and passed down.

Environment variables use the prefix ``HIVEMEM_`` and ``__`` for nesting, e.g.
``HIVEMEM_REDIS__URL=redis://cache:6379/0`` or ``HIVEMEM_EMBEDDING__BATCH_SIZE=128``.
Nothing here is read at import time: call ``Settings()`` where the process starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# What an ingest waits for before it returns: see `IngestSettings.ack`.
AckLevel = Literal["memory", "aof", "replica", "replica_aof"]


class RedisSettings(BaseModel):
    # redis://, rediss:// (TLS) or unix://: one server. redis+cluster://h1:p1,h2:p2 (or
    # rediss+cluster://): a Redis Cluster, any reachable nodes as the seed. redis+sentinel://
    # h1:p1,h2:p2/master-name[/db]: the master Sentinel names. User and password may be in
    # the URL or below. `mode` overrides what the scheme says.
    url: str = "redis://127.0.0.1:6379/0"
    mode: Literal["auto", "standalone", "cluster", "sentinel"] = "auto"
    # Partitions per stage (fixed per deployment: every key carries its partition's hash
    # tag; a count other than the one the data was written with is refused at start: to
    # change it, export the sessions, then import them into a deployment with the new P).
    partitions: int = Field(default=16, ge=1, le=4096)
    # rq's Redis (the reflect queue). rq does not run on Redis Cluster: with a cluster, point
    # this at a plain Redis (or Sentinel master). None: the same server as `url`.
    rq_url: str | None = None
    # Redis 6 ACL user and its password (or the AUTH password alone); never logged.
    username: str | None = None
    password: SecretStr | None = None
    # rediss://: a CA bundle to verify the server with (default: the system's).
    ssl_ca_certs: Path | None = None
    key_prefix: str = Field(default="hm", pattern=r"^[A-Za-z0-9_.-]{1,32}$")
    # redis-py 8 defaults to a 5 s socket timeout; blocking reads stay well below it.
    socket_timeout: float = Field(default=5.0, gt=0)
    connect_timeout: float = Field(default=2.0, gt=0)


class VectorIndexSettings(BaseModel):
    """How Qdrant indexes the vectors, for the embedded engine and a server alike.

    Filtered searches on a small subset (one session of a few thousand turns) use the payload
    indexes and compare exactly (`full_scan_threshold_kb`); a big one walks an HNSW graph,
    which the embedded engine builds in a child process (`index_after_points`).
    """

    # HNSW graph: edges per node, and candidates while building (Qdrant's defaults).
    hnsw_m: int = Field(default=16, ge=0, le=128)
    hnsw_ef_construct: int = Field(default=100, ge=4, le=1000)
    # Edges per node of the per-session graphs (session_id is the tenant key); 0: none.
    payload_m: int = Field(default=16, ge=0, le=128)
    # A filtered subset whose vectors take less than this (KB; 384-d float: ~6.6k points at
    # 10 000) is searched exactly through the payload index instead of the graph.
    full_scan_threshold_kb: int = Field(default=10_000, ge=1)
    # Segments larger than this (KB) get an HNSW index when the optimiser runs.
    indexing_threshold_kb: int = Field(default=10_000, ge=1)
    # Embedded engine: start a background index build when a collection has grown by this
    # many points since the last one (0: never; `optimize` by hand).
    index_after_points: int = Field(default=20_000, ge=0)
    # Threads of the embedded engine's HNSW build (0: one per core). One: the build takes
    # one core and leaves the other(s) to recall and the workers; with more threads than
    # free cores the build's threads wait on each other.
    index_build_threads: int = Field(default=1, ge=0, le=64)
    # Niceness of the build's child process: recall in the parent keeps the cores first.
    # 10 starves the build on a saturated machine (a 100k build is ~45 CPU-seconds); a
    # benchmark timing the build passes 0.
    index_build_nice: int = Field(default=10, ge=0, le=19)
    # Payload on disk (mmap) instead of RAM; None: the engine's default.
    on_disk_payload: bool | None = None
    # "int8": scalar-quantised copies of the dense vectors (a quarter of the memory) that
    # the graph is built and searched with, the best rescored with the originals; from the
    # next index build. Measured at 100k x 384
    # (bench/results/archive/2026-12-01/edge_build_probe.json): the
    # build takes less than half the CPU of float32, searches are faster, and the graph
    # finds as much of the exact top-k. "none": float32 only, for a new store: the embedded
    # engine reads "none" as "not specified" and keeps an existing store's int8.
    quantization: Literal["none", "int8"] = "int8"
    # Embedded: candidates an HNSW search keeps (None: the engine's default, ef_construct).
    # At 100k x 384 int8 (bench/results/archive/2026-12-01/edge_build_probe.json, synthetic topic
    # clusters):
    # 128 found the exact nearest in 0.60 of queries at 1.32 ms p50, 256 in 0.80 at 1.66 ms,
    # 512 in 0.94 at 2.16 ms.
    hnsw_ef: int | None = Field(default=256, ge=1, le=4096)
    # Embedded: threads of the engine's search pool, which reads a collection's segments in
    # parallel (0: one per core, the engine's own default). One: every search runs on the
    # thread that asks. A collection has one or two segments here, so the pool's hand-over
    # cost more than the parallel reads saved: LoCoMo recall p50 / p95 8.6 / 14.6 ms at one
    # thread, 9.4 / 15.7 at two, 9.4 / 16.0 at the engine's eight on two cores, same recall
    # (bench/results/archive/2026-12-02/locomo_arms_search_threads.json). Concurrent searches of
    # one store are
    # serialised by the engine's binding at any setting, so one thread costs them nothing.
    search_threads: int = Field(default=1, ge=0, le=256)
    # Embedded: lock the store's mapped file data in memory (`mlock`), so a host that pages
    # out idle memory (DAMON, a balloon, pressure) does not send recall's searches to the
    # disk. A 100k store reopened after 150 s on such a VM: 36 major faults a recall
    # unlocked, 0 locked, recall p95 excl. the embedding 26.1 -> 13.5 ms. The pages stay
    # resident under pressure. Needs RLIMIT_MEMLOCK above the store's size or CAP_IPC_LOCK
    # (else refused once, logged with what to raise).
    lock_in_memory: bool = False


class QdrantSettings(BaseModel):
    """Either ``url`` (a Qdrant server) or ``path`` (the embedded engine on a folder)."""

    url: str | None = None
    path: Path | None = None
    api_key: SecretStr | None = None
    collection_prefix: str = Field(default="hivemem_", pattern=r"^[A-Za-z0-9_-]{0,32}$")
    # Seconds one request may take, as a float (0.5 is half a second on the wire).
    timeout: float = Field(default=10.0, gt=0)
    # An https:// url is TLS; this forces it on (or off) whatever the scheme says.
    https: bool | None = None
    # -- a Qdrant server or cluster only (the embedded engine ignores these) ---------------
    # Opening retries an unreachable or failing server with back-off for this long, so
    # workers started before (or together with) Qdrant wait for it instead of exiting.
    open_timeout_s: float = Field(default=60.0, ge=0)
    # Reads (recall, scroll, count, retrieve) are retried this many times on a transport
    # error or 5xx before `StoreUnavailable`; writes are left to the worker's back-off.
    read_retries: int = Field(default=3, ge=0, le=20)
    backoff_initial_s: float = Field(default=0.2, gt=0)
    backoff_max_s: float = Field(default=5.0, gt=0)
    # Collection layout when hivemem creates the collections (None: the server's default).
    shard_number: int | None = Field(default=None, ge=1)
    replication_factor: int | None = Field(default=None, ge=1)
    # Replicas that must apply a write before Qdrant acknowledges it (None: a majority of
    # `replication_factor`). With `read_consistency` it decides read-your-writes.
    write_consistency_factor: int | None = Field(default=None, ge=1)
    # Qdrant's write ordering: `strong` routes writes through the permanent shard leader.
    write_ordering: Literal["weak", "medium", "strong"] = "medium"
    # Qdrant's read consistency: `majority` asks every replica and keeps the points a
    # majority of them hold, so with writes acknowledged by a majority a recall after
    # `wait_until_processed` sees every turn the embed workers wrote. `all`, `quorum` and a
    # count N keep only the points *every* replica asked holds (lib/collection/src/shards/
    # resolve.rs): those need write_consistency_factor == replication_factor.
    read_consistency: Literal["majority", "quorum", "all"] | int = "majority"
    index: VectorIndexSettings = VectorIndexSettings()

    @model_validator(mode="after")
    def _reads_see_writes(self) -> QdrantSettings:
        replicas = self.replication_factor or 1
        if isinstance(self.read_consistency, int) and self.read_consistency < 1:
            raise ValueError("read_consistency: a replica count must be >= 1")
        writes = self.write_replicas() or 1
        if writes > replicas:
            raise ValueError(
                f"write_consistency_factor={writes} is more than replication_factor="
                f"{replicas}: no write could be acknowledged"
            )
        needed = replicas // 2 + 1 if self.read_consistency == "majority" else replicas
        if writes < needed:
            raise ValueError(
                f"write_consistency_factor={writes} with read_consistency="
                f"{self.read_consistency!r} on {replicas} replicas: a recall may miss an"
                f" acknowledged write (needs write_consistency_factor >= {needed})"
            )
        return self

    def write_replicas(self) -> int | None:
        """The write consistency factor a new collection gets (None: the server default,
        1). Unset with replication: enough replicas for `read_consistency` to see a write."""
        if self.write_consistency_factor is not None:
            return self.write_consistency_factor
        if self.replication_factor is None or self.replication_factor == 1:
            return None
        if self.read_consistency == "majority":
            return self.replication_factor // 2 + 1
        return self.replication_factor


class EmbeddedSettings(BaseModel):
    """Embedded mode (`MemoryClient.local`, a workspace): its child Redis server."""

    # True: the child server fsyncs its AOF on every write (`appendfsync always`); False:
    # once a second (a crash of the server loses at most that second; of the owner, nothing).
    durable: bool = False
    # How long a starting owner waits for the folder's lock (another owner closing).
    lock_wait_s: float = Field(default=5.0, ge=0)
    # Reflection in a process of its own (its vector calls served by the owner), not a
    # thread of the caller's, held (stopped) while the owner's recalls run: recall does
    # not wait behind it. False, or an embedder/reflector handed in, or no API extra: a
    # thread (the default before issue 40; bench/RESULTS.md has the A/Bs of the two).
    reflect_process: bool = True
    # The reflection process's least share of the wall time while recalls run back to
    # back: holding it spends a budget it earns back while it runs
    # (`hivemem.runtime.process_share`). 1: never held.
    reflect_min_share: float = Field(default=0.25, gt=0, le=1)
    # One hold lasts at most this long (the budget's cap), also when recalls run longer:
    # a burst of recalls up to this long meets the process stopped throughout.
    reflect_max_hold_s: float = Field(default=2.0, gt=0, le=10)


class ApiSettings(BaseModel):
    """The HTTP API (`hivemem serve`)."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    # Request bodies larger than this are refused with 413 before they are read whole.
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    max_batch: int = Field(default=500, ge=1, le=10_000)
    # A long poll (`/wait`, `/wait-reflected`) holds its request for at most this long and
    # then answers "not done yet"; the remote client asks again until its own timeout.
    max_wait_s: float = Field(default=300.0, gt=0, le=300.0)
    # Requests of one namespace in flight at once (each holds one of the server's worker
    # threads, 40, while it runs): one more answers 429, so that no tenant's long requests
    # hold every thread (`hivemem.api.shares`).
    max_inflight_per_namespace: int = Field(default=8, ge=1, le=1000)
    # On shutdown, how long requests in flight may still run before their connections are
    # closed (a long request never holds a shutdown up).
    shutdown_grace_s: float = Field(default=10.0, gt=0, le=600)


class EmbeddingSettings(BaseModel):
    provider: Literal["fastembed", "hashing"] = "fastembed"
    model: str = "sentence-transformers/all-MiniLM-L6-v2"
    # A folder with model.onnx + tokenizer files: loads that export instead of the hub's.
    model_path: Path | None = None
    cache_dir: Path | None = None
    # Never ask a model hub (fastembed gets HF_HUB_OFFLINE=1). Also on by itself when the
    # model is in cache_dir: a missing file then fails at once, not after ~40 s of retries.
    offline: bool = False
    # Document batches: a read's texts are tokenised, sorted by token count and cut into
    # ONNX batches of at most `batch_tokens` padded tokens (rows x the longest row) and
    # `batch_size` rows (providers/batching.py): short turns go many to a batch, long ones
    # few, and little is padding. bench/probes/embed_arms.py measures the settings.
    batch_size: int = Field(default=64, ge=1, le=4096)
    # Padded tokens per document batch at most (rows x its longest row; a longer text goes
    # alone): 256 had 1.27x the turns per CPU-second of 512 and 1.73x of 2,048 with int8.
    batch_tokens: int = Field(default=256, ge=1, le=1_000_000)
    # ONNX intra-op threads per embedder (None: all cores). On a small box one thread per
    # embedder and one embedder per core (embedded mode's default; one `hivemem worker embed`
    # process per core) keeps small batches from stalling each other: bench/throughput.py.
    threads: int | None = Field(default=None, ge=1)
    # The recall path embeds one short query: one thread is as fast and does not fight the
    # workers for the cores (p95 8 ms vs 35 ms on a busy 2-core box).
    query_threads: int | None = Field(default=1, ge=1)
    # How recall embeds its query: "int8", the model's int8 quantisation, made once from the
    # fp32 model (providers/quantized.py; needs the `onnx` package, else fp32 with a warning):
    # recall p95 -3.5 ms with LoCoMo R@5/R@10 within noise of "fp32" (bench/probes/locomo_arms.py).
    query_precision: Literal["int8", "fp32"] = "int8"
    # How the documents (turns, windows, facts) are embedded: "int8", the same int8 copy as
    # queries (made once, as above; ignored when `model_path` names an export), or "fp32",
    # the model as loaded. Vectors of both compare (mean cosine 0.99 to each other), so a
    # store may hold some of each after a change.
    document_precision: Literal["int8", "fp32"] = "int8"
    # Where the int8 copy is kept (default: $XDG_CACHE_HOME or ~/.cache, then hivemem/models).
    derived_dir: Path | None = None
    # The recall path's model export, if not the int8 copy of `model_path` / `model`: a folder
    # as for `model_path`. It must be the same model: its vectors are compared with the
    # documents'.
    query_model_path: Path | None = None
    # Each turn is embedded a second time with up to this many turns before it (the "window"
    # vector, searched next to the turn's own): a reply ("Yes, last Tuesday!") then matches
    # a question about what it replied to. 0: turn vectors only (embedding costs about half).
    window_turns: int = Field(default=2, ge=0, le=10)
    # How the window vector is made: "mean" adds up the turns' own vectors (no model pass:
    # the embed stage keeps ~0.86x the rate it has without windows); "text" embeds the turns
    # joined as one text (LoCoMo R@5 +0.011, but a second model pass over about three times
    # the text: ~0.24x the rate, and on 2 cores it no longer keeps up with 50 turns/s);
    # "refined": the mean at once, then the text by the window stage while the embed stage
    # has nothing waiting (workers/window.py): the freshness of "mean", and the quality of
    # "text" once the machine has had the time.
    window_mode: Literal["text", "mean", "refined"] = "refined"
    # Only for the hashing provider (tests): vector size.
    dim: int = Field(default=384, ge=8, le=4096)


class IngestSettings(BaseModel):
    max_content_bytes: int = Field(default=32 * 1024, ge=1)
    max_metadata_bytes: int = Field(default=16 * 1024, ge=2)
    # Turns written to the session's recent window at ingest: recallable before embedding.
    recent_window: int = Field(default=50, ge=0, le=10_000)
    # Backpressure: refuse (`Backpressure`) or block `ingest` while more than this many
    # turns wait for the embed workers (not yet read or not yet acked); 0: off. Measured
    # every `backlog_check_every` turns or `backlog_check_interval_s`, whichever comes first.
    max_backlog: int = Field(default=0, ge=0)
    backpressure: Literal["raise", "block"] = "raise"
    block_timeout_s: float = Field(default=10.0, ge=0)
    backlog_check_every: int = Field(default=256, ge=1)
    backlog_check_interval_s: float = Field(default=0.05, ge=0)
    # `ingest(..., durable=True)` (or this on by default) returns only once the turn is in
    # the server's AOF on disk: WAITAOF on Redis >= 7.2, a no-op with appendfsync always.
    # The same as `ack: aof` (with `ack: replica`, the same as `replica_aof`).
    durable: bool = False
    # How long an acknowledged ingest (`durable`, `ack` other than memory) waits for its
    # confirmation (WAIT / WAITAOF) before it raises `AckTimeout`.
    durable_timeout_ms: int = Field(default=1000, ge=1)
    # What `ingest` waits for before it returns (docs/durability.md): `memory` (the master
    # has the turn in memory: survives a crash of this process), `aof` (also fsynced to the
    # master's AOF: survives the master's crash and restart), `replica` (also in memory on
    # `ack_replicas` replicas, WAIT: survives the master's loss and a failover), `replica_aof`
    # (fsynced to the master's AOF and to `ack_replicas` replicas' AOFs, WAITAOF: Redis >=
    # 7.2). On a Redis Cluster the wait goes to the master of the session's slot.
    ack: AckLevel = "memory"
    # Replicas that must confirm an ingest at `ack: replica` or `replica_aof`.
    ack_replicas: int = Field(default=1, ge=1, le=64)


class WorkerSettings(BaseModel):
    # Entries per read: a big read sorts more texts by length before the ONNX batches (1024:
    # the pipeline keeps 1.04x raw fastembed sorted over all texts; 256: 0.77x). Under a
    # backlog a read can take a minute on one busy ONNX thread (window vectors embed every
    # turn twice): longer than claim_idle_ms, so a worker keeps its leases and its batch
    # alive while it works (workers/keepalive.py).
    batch_size: int = Field(default=1024, ge=1, le=10_000)
    block_ms: int = Field(default=1000, ge=1, le=4000)
    # Entries pending longer than this on any consumer are presumed orphaned and reclaimed.
    claim_idle_ms: int = Field(default=30_000, ge=100)
    claim_interval_s: float = Field(default=5.0, gt=0)
    # Every so often a worker drops the entries every group of its stream has acknowledged
    # (XTRIM MINID), so streams do not grow without bound. 0: never.
    trim_interval_s: float = Field(default=60.0, ge=0)
    max_deliveries: int = Field(default=5, ge=1)
    # Back-off while a store is down: the batch is retried in place, never dead-lettered.
    backoff_initial_s: float = Field(default=0.2, gt=0)
    backoff_max_s: float = Field(default=10.0, gt=0)
    # A worker started while Redis is away (refused, timing out, loading its AOF) waits this
    # long for it, backing off, before it exits with the error; 0: exits at once (a wrong
    # URL says so at once; a supervisor restarts the process).
    startup_wait_s: float = Field(default=0.0, ge=0)


class EpisodeSettings(BaseModel):
    max_turns: int = Field(default=6, ge=1)
    max_gap_seconds: float = Field(default=1800.0, gt=0)
    # 0.3: about one shift per 100 turns on LoCoMo with MiniLM (bench/probes/episodes.py sweep).
    topic_shift_threshold: float = Field(default=0.3, ge=-1.0, le=1.0)
    topic_min_tokens: int = Field(default=8, ge=0)
    topic_min_turns: int = Field(default=3, ge=1)
    min_episode_turns: int = Field(default=2, ge=1)
    # Must stay below worker.claim_idle_ms: a dead lease holder's own entries are reclaimed
    # only after that, and by then its lease has expired.
    lease_ms: int = Field(default=10_000, ge=50)
    # How often a boundary worker looks, in its partitions, for sessions whose entries wait
    # in the buffer while no lease is held (its holder died or lost Redis between taking the
    # lease and committing) and drains them. A session's last entries are then closed and
    # reflected within about lease_ms + this, with no further traffic. 0: never.
    sweep_interval_s: float = Field(default=2.0, ge=0)
    reflect_queue: str = Field(default="hivemem-reflect", pattern=r"^[A-Za-z0-9_.-]{1,64}$")


class ReflectionSettings(BaseModel):
    namespace: str = Field(default="default", pattern=r"^[A-Za-z0-9._:-]{1,128}$")
    max_facts_per_episode: int = Field(default=10, ge=1)
    # Send every active fact when there are at most this many; else the most similar.
    max_unscoped_facts: int = Field(default=100, ge=1)
    dedup_threshold: float = Field(default=0.9, gt=0, le=1.0)
    min_confidence: float = Field(default=0.5, ge=0, le=1.0)
    lock_lease_ms: int = Field(default=60_000, ge=1000)
    lock_wait_s: float = Field(default=30.0, ge=0)
    job_timeout_s: int = Field(default=600, ge=1)
    retries: int = Field(default=3, ge=0)
    retry_intervals_s: list[int] = Field(default_factory=lambda: [5, 30, 120])
    # A running job's heartbeat in rq's started registry (seconds): its worker renews it
    # every third of this while the job runs. A job whose worker died (SIGKILL, a lost host)
    # is noticed once it lapses and handed back through its retries (failed when none are
    # left) by the next maintenance pass, so it waits about job_heartbeat_s +
    # maintenance_interval_s, not job_timeout_s plus rq's 10-minute maintenance. At least
    # 3: rq keeps the expiry in whole seconds, so a heartbeat can lapse up to 1 s early.
    job_heartbeat_s: int = Field(default=10, ge=3)
    # How often a reflect worker (one of them at a time) looks for jobs whose heartbeat
    # lapsed, and renews its own registration (`hivemem status` counts a reflect worker not
    # heard from in 3x this as stale).
    maintenance_interval_s: float = Field(default=5.0, gt=0)


# The recall presets (`hivemem.domain.recall.policy.PRESETS` is keyed by them; a test pins it).
PresetName = Literal["cheap", "balanced", "high_recall", "agent_state"]


class RecallSettings(BaseModel):
    """Recall defaults; everything else a recall does is its policy
    (`hivemem.domain.recall.policy`)."""

    default_token_budget: int = Field(default=4000, ge=1)
    default_preset: PresetName = "balanced"


# The kinds of fact (`hivemem.domain.fact.FactKind` has the same values; a test pins it).
FactKindName = Literal["decision", "constraint", "failure", "goal", "preference", "fact"]


class CompactionPolicy(BaseModel):
    """What a compaction run does. Ages are measured in days on the session's clock."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    merge: bool = True
    merge_threshold: float = Field(default=0.92, gt=0, le=1.0)
    archive_stale: bool = True
    # Age alone archives nothing in a small session: staleness prunes only while the session
    # holds more than this many active facts (on LoCoMo, ~40 facts a conversation, an old
    # fact was sometimes the only way recall reached its turn).
    stale_above: int = Field(default=200, ge=0)
    stale_after_days: float = Field(default=30.0, ge=0)
    archive_below: float = Field(default=0.3, ge=0)
    half_life_days: float = Field(default=30.0, gt=0)
    max_active_facts: int = Field(default=1000, ge=1)
    assign_layers: bool = True
    # Kinds that are the agent's operational state (what it must keep doing or respecting).
    operational_kinds: tuple[FactKindName, ...] = (
        "goal", "constraint", "decision",
    )
    # Kinds that record something that happened (episodic memory).
    episodic_kinds: tuple[FactKindName, ...] = ("failure",)
    # Durable: stated this many times, or this confident.
    durable_support: int = Field(default=2, ge=1)
    durable_confidence: float = Field(default=0.9, ge=0, le=1.0)
    # Newer than this, an unconfirmed fact is working memory; older, short-term (ages out).
    working_days: float = Field(default=1.0, ge=0)



class CompactionSettings(CompactionPolicy):
    """The compaction policy (`hivemem.domain.compaction`) and when it runs by itself."""

    # Enqueue a compaction of the session after every this many reflected episodes (0: only
    # on demand: `hivemem compact`, `Admin.compact`, `Admin.schedule_compaction`).
    every_episodes: int = Field(default=0, ge=0)

    def policy(self) -> CompactionPolicy:
        return CompactionPolicy.model_validate(self.model_dump(exclude={"every_episodes"}))


class LifecycleSettings(BaseModel):
    """Forgetting: how a forget finishes, and retention (turns and facts older than N days
    forgotten by the lifecycle job; off by default)."""

    # Forget turns and facts older than this many days (0: keep everything), in every
    # namespace that `namespace_retention_days` does not name.
    retention_days: float = Field(default=0.0, ge=0)
    # Per namespace (0: keep everything in it), over `retention_days`.
    namespace_retention_days: dict[str, float] = Field(default_factory=dict)
    # How often the lifecycle sweep applies retention (one process a round: the embedded
    # owner, or one `hivemem worker reflect` of a server deployment).
    retention_interval_s: float = Field(default=3600.0, gt=0)
    # A forget erases twice: the second pass, after the turns in flight when it began are
    # acked, catches what a worker wrote meanwhile. This is the least it waits between them.
    forget_settle_s: float = Field(default=0.2, ge=0)
    # The most it waits for the turns in flight (a worker killed holding one never acks it).
    forget_settle_timeout_s: float = Field(default=10.0, ge=0)
    # How long a session's forget mark is kept after the forget (0: for good): while it is,
    # a worker that still holds some of the session's turns (read before the forget, killed
    # and reclaimed, slowed down) writes nothing of them. It names the session, no content.
    forget_mark_ttl_s: float = Field(default=86400.0, ge=0)
    # Rewrite Redis's AOF after a forget (the deleted bytes leave its files).
    forget_rewrite_aof: bool = True
    # How long a forget waits for that rewrite.
    forget_rewrite_timeout_s: float = Field(default=120.0, gt=0)
    # Rebuild the embedded engine's collections without the deleted points (their bytes
    # leave its files); a Qdrant server vacuums by itself.
    forget_vacuum: bool = True

    @property
    def retains(self) -> bool:
        """Whether any retention is set (else the sweep does not run)."""
        return bool(self.retention_days) or any(self.namespace_retention_days.values())

    def retention_for(self, namespace: str) -> float:
        """The retention in days of `namespace` (0: keep everything)."""
        return self.namespace_retention_days.get(namespace, self.retention_days)


class LLMConfig(BaseModel):
    """One LLM endpoint. Nested into `Settings` as ``llm`` (``HIVEMEM_LLM__MODEL=...``)."""

    provider: Literal["openai", "anthropic"]
    # openai: the URL that ends before /chat/completions, e.g. https://api.openai.com/v1 or
    # http://127.0.0.1:11434/v1 (Ollama). anthropic: https://api.anthropic.com.
    base_url: str
    model: str
    api_key: SecretStr | None = None
    timeout_s: float = Field(default=30.0, gt=0)
    max_retries: int = Field(default=3, ge=0, le=20)
    backoff_initial_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=8.0, ge=0)
    temperature: float = Field(default=0.0, ge=0, le=2)
    max_tokens: int = Field(default=1024, ge=1)
    # openai: send response_format={"type": "json_object"} (dropped if the server rejects it).
    json_mode: bool = True


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="HIVEMEM_", env_nested_delimiter="__", extra="ignore"
    )

    redis: RedisSettings = RedisSettings()
    qdrant: QdrantSettings = QdrantSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    ingest: IngestSettings = IngestSettings()
    worker: WorkerSettings = WorkerSettings()
    recall: RecallSettings = RecallSettings()
    episodes: EpisodeSettings = EpisodeSettings()
    reflection: ReflectionSettings = ReflectionSettings()
    compaction: CompactionSettings = CompactionSettings()
    lifecycle: LifecycleSettings = LifecycleSettings()
    api: ApiSettings = ApiSettings()
    embedded: EmbeddedSettings = EmbeddedSettings()
    # An LLM for reflection (OpenAI-compatible or Anthropic); none: the heuristic reflector.
    llm: LLMConfig | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_json: bool | None = None  # None: JSON when stderr is not a terminal

    @model_validator(mode="after")
    def _one_qdrant_target(self) -> Settings:
        if self.qdrant.url and self.qdrant.path:
            raise ValueError("set either qdrant.url or qdrant.path, not both")
        if self.episodes.lease_ms >= self.worker.claim_idle_ms:
            # A dead lease holder's entries are reclaimed after claim_idle_ms: its lease must
            # have expired by then, so a short claim_idle_ms shortens the lease with it.
            self.episodes.lease_ms = max(50, self.worker.claim_idle_ms // 2)
        return self
