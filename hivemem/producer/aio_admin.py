"""`AsyncAdmin`: `Admin` for asyncio code, method for method (each runs the synchronous
method in a worker thread, see `twin`). A test pins the two to the same methods."""

from __future__ import annotations

from hivemem.producer.admin import Admin
from hivemem.producer.threads import AsyncHandle, twin
from hivemem.store.redis import Redis


class AsyncAdmin(AsyncHandle[Admin]):
    """Cross-scope operations, as coroutines (see `Admin`)."""

    @property
    def redis(self) -> Redis:
        """The deployment's (synchronous) Redis connection, for operators' tools."""
        return self._sync.redis

    ready = twin(Admin.ready)
    api_keys = twin(Admin.api_keys)
    forget = twin(Admin.forget)
    forget_agent = twin(Admin.forget_agent)
    forget_namespace = twin(Admin.forget_namespace)
    resume_forgets = twin(Admin.resume_forgets)
    apply_retention = twin(Admin.apply_retention)
    erasures = twin(Admin.erasures)
    pending_forgets = twin(Admin.pending_forgets)
    pipeline_status = twin(Admin.pipeline_status)
    rebuild_state = twin(Admin.rebuild_state)
    sessions = twin(Admin.sessions)
    traces = twin(Admin.traces)
    facts = twin(Admin.facts)
    session_stats = twin(Admin.session_stats)
    episodes = twin(Admin.episodes)
    recent_turns = twin(Admin.recent_turns)
    dead_letters = twin(Admin.dead_letters)
    replay_dead_letters = twin(Admin.replay_dead_letters)
    replay_reflection = twin(Admin.replay_reflection)
    preview_compaction = twin(Admin.preview_compaction)
    compact = twin(Admin.compact)
    schedule_compaction = twin(Admin.schedule_compaction)
    audit = twin(Admin.audit)
    get_fact = twin(Admin.get_fact)
    audit_log = twin(Admin.audit_log)
    set_session_info = twin(Admin.set_session_info)
    session_info = twin(Admin.session_info)
    related_sessions = twin(Admin.related_sessions)
    session_context = twin(Admin.session_context)
    timeline = twin(Admin.timeline)
    timeline_page = twin(Admin.timeline_page)
    export = twin(Admin.export)
    import_file = twin(Admin.import_file)
    backup = twin(Admin.backup)
    restore = twin(Admin.restore)
    count_export_records = twin(Admin.count_export_records)
