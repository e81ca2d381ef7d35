"""Recall reads each candidate's currency off a stack of per-key views (the slot table's
over the facts', a memo, the answers found at recall over both, the statements only
partly history left out). `find` walks the stack once; it answers what `in` and `[]` answer,
layer by layer, as the plain dicts they stand for."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hivemem.domain.recall.fact_index import PerKey, find
from hivemem.recall.currency import _Layered
from hivemem.recall.recaller import _Except, _Memo, _Over

_KEYS = [f"turn:s:t{i}" for i in range(8)] + ["fact:f1", "fact:f2"]
_answers = st.dictionaries(st.sampled_from(_KEYS),
                           st.lists(st.sampled_from(_KEYS), max_size=3).map(tuple),
                           max_size=6)


@given(_answers, _answers, _answers, st.sets(st.sampled_from(_KEYS)))
@settings(max_examples=200, deadline=None)
def test_find_down_the_stack_is_in_then_getitem(
        table: dict[str, tuple[str, ...]], facts: dict[str, tuple[str, ...]],
        found: dict[str, tuple[str, ...]], partly: set[str]) -> None:
    asked: list[str] = []

    def lens(key: str) -> tuple[str, ...] | None:
        asked.append(key)
        return facts.get(key)

    layered = _Layered(PerKey(table.get), PerKey(lens), merge=True)
    stack = _Except(_Over(found, _Memo(layered)), partly)
    for key in _KEYS:
        below = table.get(key), facts.get(key)
        merged = (None if below == (None, None) else below[0] if below[1] is None
                  else below[1] if below[0] is None else tuple(sorted({*below[0], *below[1]})))
        want = None if key in partly else found.get(key, merged)
        assert find(stack, key) == want
        assert (key in stack) == (want is not None)
        assert stack.get(key) == want
        assert find({key: ("x",)}, key) == ("x",) and find({}, key) is None
    # Each key asked of the lens once at most, however often the stack was read.
    assert len(asked) == len(set(asked))
