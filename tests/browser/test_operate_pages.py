"""The explorer's operating pages in a real Chromium: a session's compaction preview (and
applying it) and the dead letters (and their replay), against the served store of
`browser.served_store`. Each page shows what the API answers for the same key, and an agent
key neither sees another agent's private turns nor runs what needs a namespace key.

The tests run in this order: the replays come last (they empty the dead-letter list)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from browser.served_store import (
    ALICE_POISON,
    ALICE_SECRET,
    BOB_POISON,
    BOB_SECRET,
    COMPACT_SESSION,
    DEAD_ERROR,
    DEAD_SESSION,
    SESSION,
    Served,
)
from browser.test_explorer import TIMEOUT_MS, api, attr, show, sign_in, text

CHANGES = ("merged", "archived", "promoted", "demoted")


def changes_of(diff: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((e["fact_id"], kind) for kind in CHANGES for e in diff[kind])


def shown_changes(page: Any) -> list[tuple[str, str]]:
    return sorted(zip(attr(page, "#diff li.diff", "data-fact"),
                      attr(page, "#diff li.diff", "data-change"), strict=True))


def test_compaction_page_shows_the_preview_the_api_gives(page: Any, served: Served,
                                                         shots: Path) -> None:
    sign_in(page, served.namespace_key)
    show(page, served, f"compaction/{SESSION}")
    diff = api(served, served.namespace_key, "GET", f"/v1/sessions/{SESSION}/compaction")
    assert changes_of(diff) and shown_changes(page) == changes_of(diff)
    kept = attr(page, "#kept li.diff", "data-fact")
    assert sorted(kept) == sorted(e["fact_id"] for e in diff["kept"])
    summary = page.inner_text("#compaction-summary")
    assert f"{diff['active_before']} → {diff['active_after']}" in summary
    for kind in CHANGES:
        assert f"{len(diff[kind])}\n{kind}" in summary
    for entry in diff["promoted"] + diff["demoted"]:
        row = page.locator(f'#diff li[data-fact="{entry["fact_id"]}"]').inner_text()
        assert f"{entry['from_layer']} → {entry['to_layer']}" in row and entry["reason"] in row
    assert f"Apply these {len(changes_of(diff))} changes" in page.inner_text("#apply")
    page.screenshot(path=str(shots / "compaction.png"), full_page=True)


def test_an_agent_key_cannot_preview_a_compaction(page: Any, served: Served) -> None:
    sign_in(page, served.alice_key)
    show(page, served, f"compaction/{SESSION}")
    page.wait_for_selector("#not-permitted")
    body = text(page)
    assert BOB_SECRET not in body and ALICE_SECRET not in body
    assert page.locator("#apply").count() == 0


def test_applying_the_preview_applies_exactly_it(page: Any, served: Served) -> None:
    sign_in(page, served.namespace_key)
    show(page, served, f"compaction/{COMPACT_SESSION}")
    before = api(served, served.namespace_key, "GET",
                 f"/v1/sessions/{COMPACT_SESSION}/compaction")
    assert changes_of(before) and shown_changes(page) == changes_of(before)
    page.evaluate("delete document.body.dataset.ready")
    page.click("#apply")
    page.wait_for_function("() => location.hash.includes('applied=')"
                           " && document.body.dataset.ready !== undefined",
                           timeout=TIMEOUT_MS)
    assert f"Applied: {len(changes_of(before))} changes" in page.inner_text("#apply-result")
    after = api(served, served.namespace_key, "GET",
                f"/v1/sessions/{COMPACT_SESSION}/compaction")
    assert changes_of(after) == [] and page.locator("#no-changes").count() == 1
    assert page.locator("#apply").is_disabled()
    # The facts now sit in the layers the preview named.
    facts = api(served, served.namespace_key, "GET",
                f"/v1/sessions/{COMPACT_SESSION}/facts/full")["facts"]
    layers = {f["fact_id"]: f["layer"] for f in facts}
    for kind in ("promoted", "demoted"):
        for entry in before[kind]:
            assert layers[entry["fact_id"]] == entry["to_layer"]


def test_dead_letters_page_lists_the_namespace_letters_with_why(page: Any, served: Served,
                                                               shots: Path) -> None:
    sign_in(page, served.namespace_key)
    show(page, served, "deadletters")
    letters = api(served, served.namespace_key, "GET", "/v1/dead-letters")["letters"]
    assert {x["session_id"] for x in letters} == {DEAD_SESSION}
    assert attr(page, "#letters tbody tr", "data-entry") == [x["entry_id"] for x in letters]
    body = page.inner_text("#letters")
    assert ALICE_POISON in body and BOB_POISON in body  # the namespace's: every agent's
    assert body.count(DEAD_ERROR) == len(letters) == 2
    page.screenshot(path=str(shots / "deadletters.png"), full_page=True)
    # The pipeline page links to them; a session's tab shows that session's.
    show(page, served, f"pipeline/{DEAD_SESSION}")
    page.click("#to-letters")
    page.wait_for_function(f"() => location.hash.startsWith('#/deadletters/{DEAD_SESSION}')")
    page.wait_for_selector("#letters tbody tr")
    show(page, served, f"deadletters/{SESSION}")
    assert page.locator("#no-letters").count() == 1
    show(page, served, "deadletters?stage=boundary")
    assert page.locator("#no-letters").count() == 1


def test_an_agent_key_sees_only_letters_it_may_read_and_cannot_replay(
        page: Any, served: Served) -> None:
    sign_in(page, served.alice_key)
    show(page, served, "deadletters")
    mine = api(served, served.alice_key, "GET", "/v1/dead-letters")["letters"]
    assert len(mine) == 1
    assert attr(page, "#letters tbody tr", "data-entry") == [mine[0]["entry_id"]]
    body = text(page)
    assert ALICE_POISON in body and BOB_POISON not in body
    page.click("#letters tbody tr button.replay")
    page.wait_for_selector("#replay-result .error")
    assert "namespace key" in page.inner_text("#replay-result")
    assert len(api(served, served.namespace_key, "GET", "/v1/dead-letters")["letters"]) == 2

    sign_out_and_in(page, served.team_b_key)
    show(page, served, "deadletters?stage=embed")  # another address: the page renders again
    assert page.locator("#no-letters").count() == 1
    assert ALICE_POISON not in text(page)


def sign_out_and_in(page: Any, key: str) -> None:
    page.click("#who button")
    sign_in(page, key)


def test_replaying_one_letter_then_all_of_them(page: Any, served: Served) -> None:
    sign_in(page, served.namespace_key)
    show(page, served, "deadletters")
    first, second = attr(page, "#letters tbody tr", "data-entry")
    page.evaluate("delete document.body.dataset.ready")
    page.click(f'#letters tr[data-entry="{first}"] button.replay')
    page.wait_for_selector("#replay-result .live", timeout=TIMEOUT_MS)
    assert "Replayed 1" in page.inner_text("#replay-result")
    assert attr(page, "#letters tbody tr", "data-entry") == [second]
    left = api(served, served.namespace_key, "GET", "/v1/dead-letters")["letters"]
    assert [x["entry_id"] for x in left] == [second]
    page.click("#replay-all")
    page.wait_for_selector("#no-letters", timeout=TIMEOUT_MS)
    assert api(served, served.namespace_key, "GET", "/v1/dead-letters")["letters"] == []
    # The replayed turns are embedded again (unchanged): the session reads as before.
    served.client.scoped(namespace="team-a").wait_until_processed(DEAD_SESSION, 60)
    events = api(served, served.namespace_key, "GET", f"/v1/sessions/{DEAD_SESSION}/timeline",
                 params={"agent_id": "bob"})["events"]
    assert sorted(e["summary"] for e in events if e["kind"] == "turn") == sorted(
        [ALICE_POISON, BOB_POISON])


def test_the_keyboard_reaches_the_operating_pages(page: Any, served: Served) -> None:
    sign_in(page, served.namespace_key)
    show(page, served, f"timeline/{SESSION}")
    for key, page_name in (("6", "compaction"), ("7", "deadletters")):
        page.evaluate("delete document.body.dataset.ready")
        page.keyboard.press(key)
        page.wait_for_function(f"() => document.body.dataset.page === '{page_name}'"
                               " && document.body.dataset.ready !== undefined")
        assert f"{page_name}/{SESSION}" in page.url
