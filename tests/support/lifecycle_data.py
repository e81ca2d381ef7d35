"""Shared data for the lifecycle tests: sessions with turns and a known set of facts."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from hivemem import MemoryClient
from hivemem.domain.fact import Fact, FactKind
from hivemem.providers.embedders import HashingEmbedder

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def fid(name: str) -> str:
    """A fact id (Qdrant point ids are UUIDs) that reads as its name in a test."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"hivemem-test/{name}").hex


def seed(client: MemoryClient, drain: Callable[[], None], session: str = "s1",
         topic: str = "database") -> list[Fact]:
    """Four turns, embedded, and facts: a duplicate pair, a stale note, a goal."""
    texts = [f"We talk about the {topic} today", f"The {topic} choice is PostgreSQL",
             "Someone mentioned a blue mug", f"Our goal: ship the {topic} migration"]
    for i, text in enumerate(texts):
        client.ingest(session, "user", text, turn_id=f"t{i}", timestamp=T0 + timedelta(days=i))
    drain()
    old = T0 - timedelta(days=120)
    facts = [
        Fact(fact_id=fid(f"{session}-a"), session_id=session, content=f"The {topic} is PostgreSQL",
             kind=FactKind.DECISION, subject=topic, confidence=0.7, source_turn_ids=["t1"],
             created_at=T0, valid_from=T0, layer="operational"),
        Fact(fact_id=fid(f"{session}-b"), session_id=session, content=f"the {topic} is postgresql!",
             kind=FactKind.DECISION, subject=topic, confidence=0.9, source_turn_ids=["t0"],
             created_at=T0, valid_from=T0 + timedelta(hours=1), layer="operational"),
        Fact(fact_id=fid(f"{session}-mug"), session_id=session, content="A blue mug was mentioned",
             confidence=0.5, source_turn_ids=["t2"], created_at=old, valid_from=old),
        Fact(fact_id=fid(f"{session}-goal"), session_id=session, kind=FactKind.GOAL,
             content=f"Ship the {topic} migration", subject="migration",
             source_turn_ids=["t3"], created_at=T0, valid_from=T0, layer="working"),
    ]
    store = client.vector_store()
    store.upsert_facts(facts, HashingEmbedder(1024).embed_documents([f.content for f in facts]))
    return facts
