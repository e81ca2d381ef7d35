"""An item built by a fast path is the item validation builds: equal, and alike in every way a
caller could tell (field order, value types, fields set, JSON)."""

from __future__ import annotations

from hivemem.domain.models import ContextItem


def assert_same_item(got: ContextItem, want: ContextItem) -> None:
    assert got == want
    assert list(got.__dict__) == list(want.__dict__)
    assert [type(v) for v in got.__dict__.values()] == [
        type(v) for v in want.__dict__.values()]
    assert got.model_fields_set == want.model_fields_set
    assert got.model_dump(mode="json") == want.model_dump(mode="json")
