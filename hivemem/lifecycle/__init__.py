"""Memory lifecycle: compaction and audit through the client, sessions and timelines."""
