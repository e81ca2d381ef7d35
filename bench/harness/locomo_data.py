"""LoCoMo dev conversations (../shared/data/locomo-dev): realistic turns and questions."""

from __future__ import annotations

import glob
import json
import re
from pathlib import Path
from typing import Any

from harness.paths import LOCOMO

_SESSION_KEY = re.compile(r"session_(\d+)")


def locomo_conversations() -> list[dict[str, Any]]:
    files = sorted(glob.glob(str(LOCOMO / "*.json")))
    if not files:
        raise SystemExit(f"no LoCoMo conversations under {LOCOMO}")
    out = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            out.append({"name": Path(f).stem, "data": json.load(fh)})
    return out


def locomo_turns(conv: dict[str, Any]) -> list[str]:
    """The conversation's turns in order, as "Speaker: text"."""
    data = conv["data"]
    sessions = sorted(
        (int(m.group(1)), v)
        for k, v in data.items()
        if (m := _SESSION_KEY.fullmatch(k)) and isinstance(v, list)
    )
    return [f"{t['speaker']}: {t['text']}" for _, turns in sessions for t in turns]


def locomo_questions(conv: dict[str, Any]) -> list[str]:
    """Questions of categories 1-4 (5 is adversarial)."""
    return [q["question"] for q in conv["data"]["qa"] if q.get("category") in (1, 2, 3, 4)]
