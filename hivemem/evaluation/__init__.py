"""`hivemem eval`: scenario suites that plant information in long conversations and probe
recall for it later.

- `scenarios`: pure generation (seeded; no I/O) of the conversations, their probes, and the
  judge that decides whether a recall answered a probe;
- `runner`: plays the conversations through a `MemoryClient` and times every stage;
- `report`: hit rates and latency percentiles, as JSON and Markdown.
"""
