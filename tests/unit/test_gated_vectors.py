"""The owner's vector store as its reflection process reaches it: each call, and each page
of a listing, waits first while a recall runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hivemem.runtime.gated_vectors import SCROLL_PAGE, GatedVectorStore


class _Inner:
    dim = 4
    has_windows = False

    def __init__(self, n: int) -> None:
        self.n = n

    def scroll(self, collection: str, where: Any, *, with_vectors: bool = False
               ) -> Iterator[int]:
        yield from range(self.n)

    def count(self, collection: str, where: Any) -> int:
        return self.n


def test_a_long_listing_waits_for_recalls_between_its_pages() -> None:
    pauses: list[int] = []
    got: list[int] = []
    gated = GatedVectorStore(_Inner(SCROLL_PAGE * 3 + 5), lambda: pauses.append(len(got)))
    for hit in gated.scroll("facts", None):
        got.append(hit)  # type: ignore[arg-type]
    assert got == list(range(SCROLL_PAGE * 3 + 5))
    # Once before the call, then after each full page.
    assert pauses == [0, SCROLL_PAGE, 2 * SCROLL_PAGE, 3 * SCROLL_PAGE]
    assert gated.count("facts", None) == SCROLL_PAGE * 3 + 5 and len(pauses) == 5
