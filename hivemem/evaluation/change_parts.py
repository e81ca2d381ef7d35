"""The change suite's parts: which file holds which, and the rule that holds a third out.

- **tuning** (`data/change_live.json`) and **heldout** (`data/change_heldout.json`): the
  conversations written blind from the writers' brief (schema v2, probes asked mid-
  conversation), split by `split_heldout` from the writers' files by `bench/change_split.py`.
  One may look at the tuning part's failures; the held-out part is only ever reported.
- **legacy** (`data/change_suite.json`): the 51 v1 conversations written next to the rules
  they test (every probe at the end); kept to compare with earlier results.

The split rule is fixed and positional, so that nobody picks what is held out: in each source
file, the conversation at index i (0-based, in file order) is held out when i % 3 == 2 (the
3rd, 6th, 9th, ... conversation), every other one is tuning. Sources are split one by one and
concatenated in the order given, so each writer contributes a third of their own file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import Any

from hivemem.evaluation.change import PARTS, ChangeSuite, parse_suite

PART_FILES: dict[str, str] = {
    "tuning": "change_live.json",
    "heldout": "change_heldout.json",
    "legacy": "change_suite.json",
}
HELDOUT_EVERY = 3  # index % 3 == 2 is held out
SPLIT_RULE = ("in each source file, in file order, the conversation at 0-based index i is "
              f"held out when i % {HELDOUT_EVERY} == {HELDOUT_EVERY - 1}; the others are tuning")


def is_heldout(index: int) -> bool:
    """The held-out rule for the conversation at 0-based `index` of its source file."""
    return index % HELDOUT_EVERY == HELDOUT_EVERY - 1


def split_heldout(
    sources: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(tuning, heldout) conversations of the source documents, by `is_heldout` per source.

    The conversations are returned as they are in the sources (raw JSON objects): the split
    copies data, it does not rewrite it."""
    tuning: list[dict[str, Any]] = []
    heldout: list[dict[str, Any]] = []
    for doc in sources:
        for index, conversation in enumerate(doc["conversations"]):
            (heldout if is_heldout(index) else tuning).append(dict(conversation))
    return tuning, heldout


def part_document(part: str, conversations: list[dict[str, Any]],
                  sources: Iterable[str]) -> dict[str, Any]:
    """A part's file: the v2 document plus where it came from and by which rule (both
    ignored by the parser)."""
    return {"version": 2, "part": part, "sources": list(sources), "split_rule": SPLIT_RULE,
            "conversations": conversations}


def _data(part: str) -> Any:
    if part not in PART_FILES:
        raise ValueError(f"unknown part {part!r}; known: {', '.join(PARTS)}")
    return resources.files("hivemem.evaluation").joinpath("data", PART_FILES[part])


def part_shipped(part: str) -> bool:
    """Whether the package holds this part's file (the v2 parts exist once split)."""
    return bool(_data(part).is_file())


def load_part(part: str) -> ChangeSuite:
    """The conversations of one part, as shipped in hivemem/evaluation/data/."""
    path = _data(part)
    if not path.is_file():
        raise FileNotFoundError(f"the change suite's {part} part ({PART_FILES[part]}) is not "
                                "shipped yet: run bench/change_split.py")
    return parse_suite(json.loads(path.read_text(encoding="utf-8")))
