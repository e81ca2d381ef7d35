"""Every Redis key hivemem uses, in one place.

Session keys share the session id; stream keys are global per stage. A deployment may run
several hivemem installations on one Redis by giving each its own prefix.
"""

from __future__ import annotations

from dataclasses import dataclass


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

    @property
    def episodes_stream(self) -> str:
        """Closed episodes, for any consumer that wants to react."""
        return f"{self.prefix}:stream:episodes"

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

    # Memory lifecycle (issue 6).
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

    # Scopes and the service (issue 7).
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
