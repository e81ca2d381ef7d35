"""Counts of one thing under labels named more or less fully (`value_pairing._same_slot`)."""

from __future__ import annotations

from hivemem.domain.lineage import Lineage, step


def _history(*turns: str) -> dict[str, str]:
    lineage = Lineage()
    out: dict[str, str] = {}
    for index, text in enumerate(turns):
        done = step(lineage, f"t{index}", text)
        lineage = done.lineage
        out.update(done.history)
    return out


def test_a_count_named_more_fully_replaces_the_one_named_shortly() -> None:
    # "prod 6", then "Prod replicaCount raised to 10": one count, its label said more fully.
    assert _history("Replica counts: staging 2, prod 6, canary 1.",
                    "Prod replicaCount raised to 10. Staging stays 2, canary stays 1.") == {
        "t0": "t1"}


def test_counts_of_labels_that_only_share_a_word_are_two_slots() -> None:
    # "rate limit" and "export limit" share a word, neither is the other named more fully.
    assert _history("The rate limit is 100 for now.",
                    "Updated the export limit to 1000.") == {}
