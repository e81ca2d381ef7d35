"""LoCoMo: the data as every system gets it, and the scoring (bench/suites/locomo/__init__.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harness import (
    locomo_conversations,
)

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
KS = (1, 5, 10, 20)
BUDGETS = (500, 1000, 2000)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
BIG_BUDGET = 1_000_000
QUICK_TURNS = 80
RRF_K = 60
ADAPTERS = Path(__file__).resolve().parents[2] / "adapters"
SYSTEM_ORDER = ("hivemem", "bm25", "dense", "rrf", "gleanr", "mneno", "mneno-nofreq")

COLUMNS = [f"R@{k}" for k in KS] + [f"B{b}" for b in BUDGETS]

# -- data -------------------------------------------------------------------------------------

_SESSION = re.compile(r"session_(\d+)")
_EVIDENCE_ID = re.compile(r"^D:?(\d+):(\d+)$")
_AGENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def parse_date_time(value: str) -> datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023", as UTC."""
    return datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    if caption:
        text += f" [shares a photo: {caption}]"
    return text


def conversation_turns(data: dict[str, Any]) -> list[dict[str, Any]]:
    sessions = sorted(
        (int(m.group(1)), v)
        for k, v in data.items()
        if (m := _SESSION.fullmatch(k)) and isinstance(v, list)
    )
    out = []
    for number, turns in sessions:
        start = parse_date_time(data[f"session_{number}_date_time"])
        for i, t in enumerate(turns):
            out.append(
                {
                    "dia_id": t["dia_id"],
                    "session": number,
                    "speaker": t["speaker"],
                    "role": "user" if t["speaker"] == data["speaker_a"] else "assistant",
                    "content": turn_text(t),
                    "timestamp": (start + timedelta(seconds=i)).isoformat(),
                }
            )
    return out


def parse_evidence(raw: Iterable[str], known: set[str]) -> tuple[list[str], list[str], list[str]]:
    """(valid dia_ids, dropped ids, ids repaired from "D:s:i")."""
    valid: list[str] = []
    dropped: list[str] = []
    repaired: list[str] = []
    for entry in raw:
        for piece in entry.split(";"):
            part = piece.strip()
            if not part:
                continue
            m = _EVIDENCE_ID.match(part)
            dia = f"D{m.group(1)}:{m.group(2)}" if m else part
            if dia not in known:
                dropped.append(part)
                continue
            if dia != part:
                repaired.append(part)
            if dia not in valid:
                valid.append(dia)
    return valid, dropped, repaired


def load_dataset(only: list[str] | None, max_turns: int | None = None
                 ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The conversations (`only` these names); `max_turns` keeps each conversation's first
    turns and only the questions whose evidence lies wholly inside them (--quick)."""
    convs = []
    notes: dict[str, Any] = {
        "split_entries": 0,
        "repaired_ids": [],
        "dropped_ids": [],
        "questions_without_evidence": [],
        "questions_cat_1_4": 0,
    }
    for conv in locomo_conversations():
        name = conv["name"]
        if only and name not in only:
            continue
        data = conv["data"]
        turns = conversation_turns(data)
        known = {t["dia_id"] for t in turns}
        assert len(known) == len(turns), f"duplicate dia_ids in {name}"
        if max_turns is not None:
            turns = turns[:max_turns]
        kept = {t["dia_id"] for t in turns}
        questions = []
        for index, q in enumerate(data["qa"]):
            cat = q.get("category")
            if cat not in CATEGORIES:
                continue
            notes["questions_cat_1_4"] += 1
            qid = f"{name}-q{index}"
            notes["split_entries"] += sum(1 for e in q["evidence"] if ";" in e)
            evidence, dropped, repaired = parse_evidence(q["evidence"], known)
            notes["repaired_ids"].extend([qid, r] for r in repaired)
            notes["dropped_ids"].extend([qid, d] for d in dropped)
            if not evidence:
                notes["questions_without_evidence"].append(qid)
                continue
            if max_turns is not None and not set(evidence) <= kept:
                continue
            questions.append(
                {"qid": qid, "question": q["question"], "category": cat, "evidence": evidence}
            )
        convs.append({"name": name, "speakers": [data["speaker_a"], data["speaker_b"]],
                      "turns": turns, "questions": questions})
    notes["questions_scored"] = sum(len(c["questions"]) for c in convs)
    notes["turns"] = sum(len(c["turns"]) for c in convs)
    notes["image_turns_with_caption"] = sum(
        1 for c in convs for t in c["turns"] if "[shares a photo:" in t["content"]
    )
    return convs, notes


# -- scoring ----------------------------------------------------------------------------------

_PROVENANCE_KEYS = ("dia_ids", "turn_ids", "source_turn_ids", "source_ids", "evidence")


def item_dia_ids(item: Any) -> list[str]:
    """The turns (dia_ids) a recalled hivemem item stands for.

    A turn is itself. Anything else (e.g. a "fact" distilled from turns) stands for the turn ids
    in its metadata: any of `_PROVENANCE_KEYS`, or `provenance` holding such a list or a mapping
    with one of those keys. Items with no provenance stand for nothing.
    """
    if getattr(item, "source_type", None) == "turn":
        return [item.source_id]
    md = getattr(item, "metadata", None) or {}
    found: list[str] = []

    def take(value: Any) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, list | tuple):
            for v in value:
                if isinstance(v, str):
                    found.append(v)
                elif isinstance(v, dict):
                    take(v.get("turn_id") or v.get("dia_id") or v.get("source_id"))

    prov = md.get("provenance")
    if isinstance(prov, dict):
        for key in (*_PROVENANCE_KEYS, "turn_id"):
            take(prov.get(key))
    else:
        take(prov)
    for key in _PROVENANCE_KEYS:
        take(md.get(key))
    return list(dict.fromkeys(found))


def share(evidence: Sequence[str], covered: Iterable[str]) -> float:
    got = set(covered)
    return sum(1 for e in evidence if e in got) / len(evidence)


def recall_at_ks(evidence: Sequence[str], ranked: Sequence[Sequence[str]]) -> list[float]:
    """`ranked`: per item, the dia_ids it stands for."""
    out = []
    for k in KS:
        covered = [d for ids in ranked[:k] for d in ids]
        out.append(share(evidence, covered))
    return out


def pack_greedy(ranked: Sequence[str], tokens: dict[str, int], budget: int) -> list[str]:
    """hivemem's packing rule: in rank order, take what fits, skip what does not, go on."""
    chosen, used = [], 0
    for dia in ranked:
        t = tokens.get(dia)
        if t is None:
            continue
        if used + t <= budget:
            chosen.append(dia)
            used += t
    return chosen


class Scores:
    """Per system: per question the metric vector [r@1, r@5, r@10, r@20, b500, b1000, b2000]."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, list[float]]] = {}
        self.tokens: dict[str, dict[int, list[int]]] = {}
        self.latency_ms: dict[str, list[float]] = {}
        self.budget_latency_ms: dict[str, list[float]] = {}
        self.ranked: dict[str, dict[str, list[list[str]]]] = {}

    def add(
        self,
        system: str,
        q: dict[str, Any],
        ranked: Sequence[Sequence[str]],
        budget_sets: dict[int, Sequence[str]],
        budget_tokens: dict[int, int] | None = None,
    ) -> None:
        row = recall_at_ks(q["evidence"], ranked)
        row += [share(q["evidence"], budget_sets[b]) for b in BUDGETS]
        self.rows.setdefault(system, {})[q["qid"]] = row
        self.ranked.setdefault(system, {})[q["qid"]] = [list(ids) for ids in ranked[: max(KS)]]
        if budget_tokens:
            for b, t in budget_tokens.items():
                self.tokens.setdefault(system, {}).setdefault(b, []).append(t)
