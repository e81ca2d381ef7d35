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

    @property
    def sessions(self) -> str:
        """Set of every session id seen."""
        return f"{self.prefix}:sessions"
