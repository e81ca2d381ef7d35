"""Per-session state in Redis: sequence numbers, idempotency, the recent window, progress.

All of it can be rebuilt from Qdrant (`restore_session`), which is the system of record.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from hivemem.domain.models import SessionStats, Turn, TurnFields
from hivemem.domain.scope import Scope
from hivemem.errors import OutOfScope
from hivemem.pipeline.messages import (
    EmbeddedTurn,
    EmbeddedTurns,
    EpisodeControl,
    TurnEntry,
    turn_from_wire,
    wire_json,
)
from hivemem.pipeline.topology import Keys, Topology
from hivemem.store import head, window
from hivemem.store.redis import Redis, redis_errors, run_scripts, set_union
from hivemem.store.window import MIGRATE_LUA

# One atomic step per turn, for a batch of turns of one partition (every key in one slot):
# a session belongs to the namespace of its first turn (a turn of another namespace gets -1,
# nothing written; sessions from before namespaces are "default"); a repeated turn id
# returns the seq it already had; otherwise the next seq is taken and the turn is appended
# to the partition's turns stream and to the recent window.
# The caller groups the turns by (session, namespace), groups in the order of their first
# turn: only one group of a session can match its owner, so this refuses and appends what
# turn-by-turn order would, and per-session order is kept inside each group. Per group the
# script reads the counter, the owner and every turn id from the ids hash (one HMGET: they
# share it, `hivemem.store.head`; a session written before they did has them moved in),
# XADDs each new turn, then writes the counter and the ids (one HSET) and the window once:
# three or four commands per session and call, one per turn. A session is listed and its
# first activity set by its first turn only; its last activity is its newest turn's
# timestamp, which the window's last entry holds (`window.activity`), so the meta hash gets
# it only when there is no window.
# The window is a list of (seq, JSON) pairs (`hivemem.store.window`): one RPUSH, and an
# LTRIM once it holds `slack` turns too many; a push that finds the list empty in a session
# that had turns moves the session's older sorted-set window into it first. Each seq is made
# text once (Lua formats numbers with sprintf). KEYS: the stream, the partition's session
# set, then 6 keys per group (the older seq string, ids, window, meta, the older ns string,
# the older window). ARGV: the window, the entry's two field names (from `TurnEntry`), the
# group count g, the slack, then per group: session id, namespace, turn count c and c (turn
# id, wire JSON, timestamp) triples. Returns seq, duplicate per turn, group by group,
# flattened.
_APPEND_TURNS = MIGRATE_LUA + head.LEGACY_LUA + """
local window = tonumber(ARGV[1])
local slack = tonumber(ARGV[5])
local out = {}
local function chunked(cmd, key, list)
  for i = 1, #list, 512 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 511, #list)))
  end
end
local a = 6
for g = 1, tonumber(ARGV[4]) do
  local k = 2 + (g - 1) * 6
  local sid, ns, c = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  a = a + 3
  local ids_key = KEYS[k + 2]
  local found = {}
  local seq_raw, owner
  for i = 0, c - 1, 512 do
    local fields = {}
    if i == 0 then fields = {'#seq', '#ns'} end
    for j = i, math.min(i + 511, c - 1) do fields[#fields + 1] = ARGV[a + 3 * j] end
    local got = redis.call('HMGET', ids_key, unpack(fields))
    local from = 1
    if i == 0 then
      seq_raw, owner = got[1], got[2]
      from = 3
    end
    for x = from, #got do found[#found + 1] = got[x] end
  end
  if not seq_raw and not owner then
    seq_raw, owner = legacy_head(ids_key, KEYS[k + 1], KEYS[k + 5])
  end
  local seq = tonumber(seq_raw or '0')
  local claim = false
  if not owner then
    if seq > 0 then owner = 'default' end
    if not owner or owner == ns then
      owner = ns
      claim = true
    end
  end
  if owner ~= ns then
    for _ = 1, c do
      out[#out + 1] = -1
      out[#out + 1] = 0
    end
  else
    local known, ids, recent = {}, {}, {}
    local before = seq
    local first, last
    for j = 1, c do
      local b = a + 3 * (j - 1)
      local tid = ARGV[b]
      local existing = known[tid] or found[j]
      if existing then
        out[#out + 1] = tonumber(existing)
        out[#out + 1] = 1
      else
        seq = seq + 1
        local text = string.format('%d', seq)
        known[tid] = text
        ids[#ids + 1] = tid
        ids[#ids + 1] = text
        redis.call('XADD', KEYS[1], '*', ARGV[2], text, ARGV[3], ARGV[b + 1])
        if window > 0 then
          recent[#recent + 1] = text
          recent[#recent + 1] = ARGV[b + 1]
        end
        if seq == 1 then
          first = ARGV[b + 2]
          redis.call('SADD', KEYS[2], sid)
        end
        last = ARGV[b + 2]
        out[#out + 1] = seq
        out[#out + 1] = 0
      end
    end
    if #ids > 0 or claim then
      local fields = {}
      if #ids > 0 then fields = {'#seq', string.format('%d', seq)} end
      if claim then
        fields[#fields + 1] = '#ns'
        fields[#fields + 1] = owner
      end
      for _, v in ipairs(ids) do fields[#fields + 1] = v end
      chunked('HSET', ids_key, fields)
    end
    if #ids > 0 then
      if window > 0 then
        local length = 0
        for i = 1, #recent, 512 do
          length = redis.call('RPUSH', KEYS[k + 3], unpack(recent, i, math.min(i + 511, #recent)))
        end
        if length == #recent and before > 0 then
          length = migrate_window(KEYS[k + 3], KEYS[k + 6], length)
        end
        if length > 2 * (window + slack) then
          redis.call('LTRIM', KEYS[k + 3], -2 * window, -1)
        end
      end
      if first then
        redis.call('HSET', KEYS[k + 4], 'first_ts', first, 'last_ts', last)
      elseif window == 0 then
        redis.call('HSET', KEYS[k + 4], 'last_ts', last)
      end
    end
  end
  a = a + 3 * c
end
return out
"""


# An explicit episode close takes the session's next seq, so the boundary stage meets it in
# order with the turns. It skips the embed stage: its processed bit is set here. The entry
# is `EpisodeControl`: ARGV[1] names the seq field, ARGV[2..7] are its other three pairs.
# KEYS: ids hash, processed bitmap, meta, the embedded stream, the older seq and ns strings.
_APPEND_CONTROL = head.LEGACY_LUA + """
if not redis.call('HGET', KEYS[1], '#seq') then
  if not legacy_head(KEYS[1], KEYS[5], KEYS[6]) then return -1 end
end
local seq = redis.call('HINCRBY', KEYS[1], '#seq', 1)
redis.call('SETBIT', KEYS[2], seq, 1)
redis.call('HINCRBY', KEYS[3], 'controls', 1)
redis.call('XADD', KEYS[4], '*', ARGV[1], seq, ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6],
           ARGV[7])
return seq
"""



# The embed stage's one write to Redis per partition and batch, idempotent: set each turn's
# processed bit and publish the turns whose bit was not set before on the partition's
# embedded stream, one `EmbeddedTurns` entry per session. A retry after a crash or an outage
# between the Qdrant write and this script publishes nothing twice. One BITFIELD per session
# sets its bits and returns the old ones (BITFIELD numbers bits as SETBIT does); the entry's
# values come built (Lua hashes every byte of every string it makes, so joining the turns
# here would cost more than the rest of the script). A session whose turns are partly
# published already (a redelivery batched with new turns) has the bits this call set put
# back, and the caller publishes the rest on its own. KEYS: the embedded stream, then one
# processed bitmap per session. ARGV: the entry's names and kind
# (`EmbeddedTurns.script_fields`), then per session the entry's four values
# (`EmbeddedTurns.script_values`), its turn count c and its c seqs. Returns the number of
# turns published, then (session index, the c old bits) for each partly published session.
_PUBLISH_EMBEDDED = """
local published = 0
local out = {0}
local a = 7
for g = 2, #KEYS do
  local c = tonumber(ARGV[a + 4])
  local first = a + 5
  local ops = {}
  for j = 0, c - 1 do
    ops[#ops + 1] = 'SET'
    ops[#ops + 1] = 'u1'
    ops[#ops + 1] = ARGV[first + j]
    ops[#ops + 1] = 1
  end
  local old = redis.call('BITFIELD', KEYS[g], unpack(ops))
  local ones = 0
  for j = 1, c do ones = ones + old[j] end
  if ones == 0 then
    redis.call('XADD', KEYS[1], '*', ARGV[1], ARGV[2], ARGV[3], ARGV[a], ARGV[4], ARGV[a + 1],
               ARGV[5], ARGV[a + 2], ARGV[6], ARGV[a + 3])
    published = published + c
  elseif ones < c then
    local undo = {}
    for j = 1, c do
      if old[j] == 0 then
        undo[#undo + 1] = 'SET'
        undo[#undo + 1] = 'u1'
        undo[#undo + 1] = ARGV[first + j - 1]
        undo[#undo + 1] = 0
      end
    end
    redis.call('BITFIELD', KEYS[g], unpack(undo))
    out[#out + 1] = g - 1
    for j = 1, c do out[#out + 1] = old[j] end
  end
  a = first + c
end
out[1] = published
return out
"""

# Turns of one session in one published entry at most (a BITFIELD's arguments stay well
# inside what a script may unpack).
_ENTRY_TURNS = 1000


# restore_session's counter and owner: KEYS ids hash, the older seq and ns strings; ARGV the
# restored turns' top seq and the first turn's namespace.
_RESTORE_HEAD = head.LEGACY_LUA + """
local got = redis.call('HMGET', KEYS[1], '#seq', '#ns')
if not got[1] and not got[2] then legacy_head(KEYS[1], KEYS[2], KEYS[3]) end
local c = tonumber(redis.call('HGET', KEYS[1], '#seq') or '0')
if c < tonumber(ARGV[1]) then redis.call('HSET', KEYS[1], '#seq', ARGV[1]) end
redis.call('HSETNX', KEYS[1], '#ns', ARGV[2])
return 0
"""

_IN_SCOPE_MAX = 100_000  # pairs remembered by `check_scopes` before it starts over


class SessionState:
    def __init__(self, client: Redis, keys: Keys, recent_window: int) -> None:
        self._r = client
        self.keys = keys
        self.topology = Topology(keys)
        self.recent_window = recent_window
        self._append = client.register_script(_APPEND_TURNS)
        self._control = client.register_script(_APPEND_CONTROL)
        self._publish = client.register_script(_PUBLISH_EMBEDDED)
        # (session, namespace) pairs `check_scopes` has seen pass: see there.
        self._in_scope: dict[tuple[str, str], None] = {}

    def _append_call(
        self, partition: int, drafts: Sequence[TurnFields]
    ) -> tuple[list[str], list[str | int], list[int]]:
        """The append script's keys and args for turns of one partition, grouped by
        (session, namespace) in the order of each group's first turn, and where each reply
        pair belongs: `order[i]` is the index in `drafts` of the i-th turn the script
        answers for."""
        k = self.keys
        groups: dict[tuple[str, str], list[int]] = {}
        for i, draft in enumerate(drafts):
            groups.setdefault((draft.session_id, draft.namespace), []).append(i)
        keys: list[str] = [k.turns_stream(partition), k.sessions(partition)]
        args: list[str | int] = [self.recent_window, TurnEntry.SEQ_FIELD, TurnEntry.TURN_FIELD,
                                 len(groups), window.slack(self.recent_window)]
        order: list[int] = []
        for (sid, namespace), members in groups.items():
            keys += (k.session_seq(sid), k.session_turn_ids(sid), k.session_window(sid),
                     k.session_meta(sid), k.session_namespace(sid), k.session_recent(sid))
            args += (sid, namespace, len(members))
            for i in members:
                draft = drafts[i]
                args += (draft.turn_id, wire_json(draft), draft.timestamp.isoformat())
            order += members
        return keys, args, order

    def append_turn(self, draft: TurnFields) -> tuple[int, bool]:
        """Returns (seq, duplicate). `OutOfScope` if the session is another namespace's."""
        keys, args, _ = self._append_call(self.keys.partition(draft.session_id), [draft])
        with redis_errors("append turn"):
            seq, dup = self._append(keys=keys, args=args)
        if int(seq) < 0:
            raise OutOfScope()
        return int(seq), bool(dup)

    def append_turns(self, drafts: Sequence[TurnFields]) -> list[tuple[int, bool]]:
        """One script call per partition (each turn atomic on its own, in order within its
        session), all in one pipeline: one round trip for the batch.

        Callers check the sessions' namespaces first (`check_scope`): a turn refused here
        (a session claimed by another namespace in between) raises `OutOfScope` after the
        others were written."""
        if not drafts:
            return []
        by_partition: dict[int, list[int]] = {}
        for i, draft in enumerate(drafts):
            by_partition.setdefault(self.keys.partition(draft.session_id), []).append(i)
        calls = [
            self._append_call(p, [drafts[i] for i in idx]) for p, idx in by_partition.items()
        ]
        with redis_errors("append turns"):
            replies = run_scripts(self._r, self._append, [(ks, args) for ks, args, _ in calls])
        out: list[tuple[int, bool]] = [(0, False)] * len(drafts)
        refused = False
        for idx, (_, _, order), flat in zip(by_partition.values(), calls, replies, strict=True):
            for j, local in enumerate(order):
                seq, dup = int(flat[2 * j]), bool(int(flat[2 * j + 1]))
                refused |= seq < 0
                out[idx[local]] = (seq, dup)
        if refused:
            # A session claimed by another namespace meanwhile: forget what passed before.
            self._in_scope.clear()
            raise OutOfScope()
        return out

    def publish_embedded(self, entries: Sequence[EmbeddedTurn]) -> int:
        """Mark these turns processed and publish them on their partitions' embedded
        streams (one `EmbeddedTurns` entry per session), only the turns not marked before
        (a retry appends nothing twice). One script per partition, one round trip (two
        when a session's turns were partly published before). Returns how many turns were
        published."""
        if not entries:
            return 0
        k = self.keys
        by_partition: dict[int, dict[str, list[EmbeddedTurn]]] = {}
        for entry in entries:
            sid = entry.session_id
            by_partition.setdefault(k.partition(sid), {}).setdefault(sid, []).append(entry)
        names = EmbeddedTurns.script_fields()
        calls: list[tuple[list[str], list[str | int]]] = []
        groups: list[list[list[EmbeddedTurn]]] = []
        for p, sessions in by_partition.items():
            keys = [k.embedded_stream(p)]
            args: list[str | int] = [*names]
            chunks = [turns[i:i + _ENTRY_TURNS] for turns in sessions.values()
                      for i in range(0, len(turns), _ENTRY_TURNS)]
            for chunk in chunks:
                keys.append(k.session_processed(chunk[0].session_id))
                batch = EmbeddedTurns(session_id=chunk[0].session_id, turns=tuple(chunk))
                args += (*batch.script_values(), len(chunk), *(t.seq for t in chunk))
            calls.append((keys, args))
            groups.append(chunks)
        with redis_errors("publish embedded turns"):
            replies = run_scripts(self._r, self._publish, calls)
        published = 0
        rest: list[EmbeddedTurn] = []
        for chunks, reply in zip(groups, replies, strict=True):
            published += int(reply[0])
            i = 1
            while i < len(reply):
                chunk = chunks[int(reply[i]) - 1]
                bits = reply[i + 1:i + 1 + len(chunk)]
                rest += (t for t, bit in zip(chunk, bits, strict=True) if int(bit) == 0)
                i += 1 + len(chunk)
        return published + self.publish_embedded(rest)

    def append_control(self, session_id: str, action: str) -> int | None:
        """Enqueue an episode control after the session's turns so far; None: no session."""
        k = self.keys
        with redis_errors("append control"):
            seq = self._control(
                keys=[
                    k.session_turn_ids(session_id),
                    k.session_processed(session_id),
                    k.session_meta(session_id),
                    k.embedded_stream(k.partition(session_id)),
                    *head.legacy_keys(k, session_id),
                ],
                args=[EpisodeControl.SEQ_FIELD,
                      *EpisodeControl.script_fields(session_id, action)],
            )
        return None if int(seq) < 0 else int(seq)

    def mark_processed(self, turns: Sequence[Turn]) -> None:
        """Record that these turns are durable in Qdrant. Idempotent (bits)."""
        if not turns:
            return
        with redis_errors("mark processed"):
            pipe = self._r.pipeline(transaction=False)
            for turn in turns:
                pipe.setbit(self.keys.session_processed(turn.session_id), turn.seq, 1)
            pipe.execute()

    def mark_dead(self, session_id: str, seq: int) -> None:
        with redis_errors("mark dead-lettered"):
            self._r.setbit(self.keys.session_dead(session_id), seq, 1)

    def last_seq(self, session_id: str) -> int:
        return self.progress(session_id)[0]

    def progress(self, session_id: str) -> tuple[int, int, int]:
        """(last seq, processed, dead-lettered) in one round trip."""
        k = self.keys
        with redis_errors("read progress"):
            pipe = self._r.pipeline(transaction=False)
            head.queue_read(pipe, k, session_id)
            pipe.bitcount(k.session_processed(session_id))
            pipe.bitcount(k.session_dead(session_id))
            *read, done, dead = pipe.execute()
        return head.decode(*read)[0], int(done), int(dead)

    def namespace_of(self, session_id: str) -> str | None:
        """The namespace that owns the session; None for a session with no turns yet."""
        with redis_errors("read session namespace"):
            pipe = self._r.pipeline(transaction=False)
            head.queue_read(pipe, self.keys, session_id)
            read = pipe.execute()
        return head.decode(*read)[1]

    def check_scopes(self, pairs: Sequence[tuple[str, str]]) -> None:
        """`check_scope` for many (session, namespace) pairs in one round trip, skipping
        pairs this client has seen pass before: a session's namespace is fixed by its first
        turn, so a pair that passed keeps passing (the append script checks every turn
        again anyway; this pre-check is what writes nothing of a batch with one bad turn)."""
        pairs = [pair for pair in pairs if pair not in self._in_scope]
        if not pairs:
            return
        with redis_errors("read session namespaces"):
            pipe = self._r.pipeline(transaction=False)
            for session_id, _ns in pairs:
                head.queue_read(pipe, self.keys, session_id)
            replies = pipe.execute()
        n = head.READS
        for i, (_sid, namespace) in enumerate(pairs):
            found = head.decode(*replies[n * i:n * i + n])[1]
            if found is not None and found != namespace:
                raise OutOfScope()
        if len(self._in_scope) + len(pairs) > _IN_SCOPE_MAX:
            self._in_scope.clear()
        self._in_scope.update(dict.fromkeys(pairs))

    def check_scope(self, session_id: str, namespace: str, *, must_exist: bool = False) -> None:
        """`OutOfScope` when the session is another namespace's (or, with `must_exist`,
        unknown): the two look the same to the caller."""
        owner = self.namespace_of(session_id)
        if (owner is None and must_exist) or (owner is not None and owner != namespace):
            raise OutOfScope()

    def recent_turns(
        self, session_id: str, limit: int, scope: Scope | None = None
    ) -> list[Turn]:
        """The newest `limit` turns, newest first, including ones not yet embedded; with a
        scope, only those it may see (another agent's private turns are left out)."""
        # The list may hold a few more than the window (`window.slack`): never more.
        rows = window.read(self._r, self.keys, session_id, min(limit, self.recent_window))
        turns = [turn_from_wire(member, seq) for member, seq in rows]
        if scope is None:
            return turns
        return [t for t in turns if scope.admits(t.namespace, t.visibility, t.agent_id)]

    def stats(self, session_id: str) -> SessionStats:
        last, done, dead = self.progress(session_id)
        with redis_errors("read session meta"):
            pipe = self._r.pipeline(transaction=False)
            window.queue_activity(pipe, self.keys, session_id)
            decoded = window.activity(*pipe.execute())
        first = decoded.get("first_ts")
        latest = decoded.get("last_ts")
        controls = int(decoded.get("controls", 0))
        return SessionStats(
            session_id=session_id,
            turns_enqueued=last - controls,
            turns_processed=done - controls,
            turns_dead_lettered=dead,
            last_seq=last,
            first_activity=datetime.fromisoformat(first) if first else None,
            last_activity=datetime.fromisoformat(latest) if latest else None,
        )

    def session_ids(self) -> list[str]:
        with redis_errors("list sessions"):
            return sorted(set_union(self._r, self.keys.all_sessions()))

    def restore_session(self, session_id: str, turns: Sequence[Turn]) -> None:
        """Rebuild this session's state from its turns as stored in Qdrant."""
        if not turns:
            return
        k = self.keys
        ordered = sorted(turns, key=lambda t: t.seq)
        with redis_errors("restore session"):
            pipe = self._r.pipeline(transaction=True)
            top = ordered[-1].seq
            # Never move a live counter backwards; the owner is the first turn's unless the
            # session has one.
            pipe.eval(_RESTORE_HEAD, 3, k.session_turn_ids(session_id),
                      *head.legacy_keys(k, session_id), top, ordered[0].namespace)
            ids = head.valid_ids(ordered)
            if ids:
                pipe.hset(k.session_turn_ids(session_id), mapping=ids)  # type: ignore[arg-type]
            for turn in ordered:
                pipe.setbit(k.session_processed(session_id), turn.seq, 1)
            # One entry per seq: the stored version (with its detected markers) replaces
            # the one written at ingest, instead of sitting beside it.
            window.queue_write(pipe, k, session_id, ordered, self.recent_window)
            pipe.hsetnx(k.session_meta(session_id), "first_ts", ordered[0].timestamp.isoformat())
            pipe.hset(k.session_meta(session_id), "last_ts", ordered[-1].timestamp.isoformat())
            pipe.sadd(k.session_set(session_id), session_id)
            pipe.execute()

