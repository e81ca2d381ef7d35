"""The memory explorer in a real Chromium, page by page, against the served store of
`browser.served_store`: what each page shows is what the API answers for the same key, and a
key never shows memory it may not read."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from browser.served_store import (
    ALICE_SECRET,
    BOB_SECRET,
    LONG_SESSION,
    OTHER_SESSION,
    SESSION,
    TEAM_B_TEXT,
    Served,
)

TIMEOUT_MS = 20_000


def api(served: Served, key: str, method: str, path: str, **kwargs: Any) -> Any:
    with httpx.Client(base_url=served.url, timeout=30,
                      headers={"Authorization": f"Bearer {key}"}) as http:
        response = http.request(method, path, **kwargs)
        response.raise_for_status()
        return response.json()


def sign_in(page: Any, key: str) -> None:
    page.fill("#key", key)
    page.click("form.login button[type=submit]")
    page.wait_for_selector("#namespace", timeout=TIMEOUT_MS)


def show(page: Any, served: Served, route: str) -> None:
    """Navigate to `#/route` and wait until that page has rendered."""
    page.evaluate("delete document.body.dataset.ready")
    page.goto(f"{served.url}/ui/#/{route}")
    page.wait_for_function("() => document.body.dataset.ready !== undefined", timeout=TIMEOUT_MS)


def attr(page: Any, selector: str, name: str) -> list[str]:
    return list(page.locator(selector).evaluate_all(
        f"els => els.map(e => e.getAttribute('{name}'))"))


def text(page: Any) -> str:
    return str(page.inner_text("body"))


def test_sessions_page_lists_the_key_namespace_with_counts(page: Any, served: Served,
                                                           shots: Path) -> None:
    sign_in(page, served.namespace_key)
    show(page, served, "sessions")
    assert page.inner_text("#namespace") == "team-a"
    listed = attr(page, "#sessions tbody tr", "data-session")
    assert sorted(listed) == sorted(api(served, served.namespace_key, "GET",
                                        "/v1/sessions")["sessions"])
    assert OTHER_SESSION not in listed and SESSION in listed
    info = api(served, served.namespace_key, "GET", f"/v1/sessions/{SESSION}")
    row = page.locator(f'#sessions tr[data-session="{SESSION}"] td')
    assert [row.nth(i).inner_text() for i in (1, 3, 4, 5)] == [
        info["title"], str(info["turns"]), str(info["episodes"]), str(info["facts_active"])]
    episodes = api(served, served.namespace_key, "GET",
                   f"/v1/sessions/{SESSION}/episodes")["episodes"]
    speakers = {a for e in episodes for a in e["agent_ids"]} | {info["agent_id"]} - {None}
    assert speakers == {"alice", "bob"}
    assert row.nth(2).inner_text() == ", ".join(sorted(speakers))
    page.screenshot(path=str(shots / "sessions.png"))

    page.fill("#search", "long")
    page.press("#search", "Enter")
    page.wait_for_function("() => location.hash.includes('q=long')")
    page.wait_for_selector(f'#sessions tr[data-session="{LONG_SESSION}"]')
    page.wait_for_function("() => document.querySelectorAll('#sessions tbody tr').length === 1")


def test_another_namespace_key_sees_only_its_namespace(page: Any, served: Served) -> None:
    sign_in(page, served.team_b_key)
    show(page, served, "sessions")
    assert attr(page, "#sessions tbody tr", "data-session") == [OTHER_SESSION]
    show(page, served, f"timeline/{SESSION}")
    assert page.locator(".error").count() == 1  # team-a's session answers 404
    assert "Postgres" not in text(page)
    show(page, served, f"timeline/{OTHER_SESSION}")
    assert TEAM_B_TEXT in text(page)


def test_timeline_shows_turns_markers_visibility_and_episode_closes(
        page: Any, served: Served, shots: Path) -> None:
    sign_in(page, served.namespace_key)
    show(page, served, f"timeline/{SESSION}?as=alice")
    events = api(served, served.namespace_key, "GET", f"/v1/sessions/{SESSION}/timeline",
                 params={"agent_id": "alice", "limit": 100})["events"]
    turns = [e for e in events if e["kind"] == "turn"]
    assert attr(page, "#timeline li.turn", "data-ref") == [e["ref_id"] for e in turns]
    assert attr(page, "#timeline li.turn", "data-visibility") == [
        e["detail"]["visibility"] for e in turns]
    body = text(page)
    assert ALICE_SECRET in body and BOB_SECRET not in body  # alice's view: her private turn
    decision = page.locator("#timeline li.turn").first
    assert "decision" in decision.inner_text() and "alice" in decision.inner_text()
    episodes = api(served, served.namespace_key, "GET", f"/v1/sessions/{SESSION}/episodes",
                   params={"agent_id": "alice"})["episodes"]
    assert attr(page, "#timeline li.episode", "data-ref") == [e["episode_id"] for e in episodes]
    for episode in episodes:
        row = page.locator(f'#timeline li.episode[data-ref="{episode["episode_id"]}"]')
        assert episode["close_reason"] in row.inner_text()
    page.screenshot(path=str(shots / "timeline.png"))

    show(page, served, f"timeline/{SESSION}")  # the namespace key alone: shared turns only
    body = text(page)
    assert ALICE_SECRET not in body and BOB_SECRET not in body
    assert set(attr(page, "#timeline li.turn", "data-visibility")) == {"shared"}


def test_timeline_pages_through_a_long_session(page: Any, served: Served) -> None:
    sign_in(page, served.namespace_key)
    everything = api(served, served.namespace_key, "GET",
                     f"/v1/sessions/{LONG_SESSION}/timeline")["events"]
    assert len(everything) > 100
    show(page, served, f"timeline/{LONG_SESSION}")
    newest = [e["ref_id"] for e in everything[-100:]]
    assert attr(page, "#timeline li", "data-ref") == newest
    page.click("#older")
    page.wait_for_function("() => location.hash.includes('page=2')")
    page.wait_for_selector("#newer")
    assert attr(page, "#timeline li", "data-ref") == [
        e["ref_id"] for e in everything[-200:-100]]
    assert "cursor=" in page.evaluate("() => location.hash")  # paged by cursor, not limit
    page.click("#newer")
    page.wait_for_function("() => !location.hash.includes('page=')")
    page.wait_for_selector("#newer", state="detached")  # page 1: it has no newer page
    page.wait_for_selector("#timeline li")
    assert attr(page, "#timeline li", "data-ref") == newest


def test_timeline_updates_live_as_turns_arrive(page: Any, served: Served) -> None:
    sign_in(page, served.namespace_key)
    show(page, served, f"timeline/{SESSION}")
    fresh = f"Bob shares the launch checklist tomorrow (note {time.time_ns() % 100_000})"
    handle = served.client.scoped(namespace="team-a", agent_id="bob")
    handle.ingest(SESSION, "user", fresh)
    handle.wait_until_processed(SESSION, 30)
    page.wait_for_selector(f"#timeline li.turn:has-text('{fresh}')", timeout=TIMEOUT_MS)


def test_facts_show_version_chains_and_the_audit_trail(page: Any, served: Served,
                                                       shots: Path) -> None:
    sign_in(page, served.alice_key)
    show(page, served, f"facts/{SESSION}?history=1")
    facts = api(served, served.alice_key, "GET", f"/v1/sessions/{SESSION}/facts/full",
                params={"include_history": True, "include_inactive": True,
                        "include_archived": True})["facts"]
    assert sorted(attr(page, "#facts .version", "data-fact")) == sorted(
        f["fact_id"] for f in facts)
    old = next(f for f in facts if f["status"] == "superseded")
    new = next(f for f in facts if f["fact_id"] == old["superseded_by"])
    chain = page.locator(".chain", has=page.locator(f'[data-fact="{old["fact_id"]}"]'))
    in_chain = f".chain:has([data-fact='{old['fact_id']}']) .version"
    assert attr(page, in_chain, "data-fact") == [old["fact_id"], new["fact_id"]]
    assert "superseded" in chain.inner_text() and "by alice" in chain.inner_text()
    assert ALICE_SECRET in text(page) and BOB_SECRET not in text(page)

    page.click(f'[data-fact="{old["fact_id"]}"] a')
    page.wait_for_selector("#audit table", timeout=TIMEOUT_MS)
    audit = api(served, served.alice_key, "GET", f"/v1/facts/{old['fact_id']}/audit")["events"]
    assert attr(page, "#audit tbody tr", "data-action") == [e["action"] for e in audit]
    assert "fact=" in page.url and old["fact_id"] in page.url  # shareable
    page.screenshot(path=str(shots / "facts.png"), full_page=True)

    show(page, served, f"facts/{SESSION}")  # current only
    shown = attr(page, "#facts .version", "data-status")
    assert shown and set(shown) == {"active"}

    turn_id = new["source_turn_ids"][0]  # which turns: a link to the turn on the timeline
    page.click(f'[data-fact="{new["fact_id"]}"] a[title="{turn_id}"]')
    page.wait_for_selector(f'#timeline li.turn.sel[data-ref="{turn_id}"]', timeout=TIMEOUT_MS)


def test_agent_keys_never_show_another_agents_private_memory(page: Any,
                                                             served: Served) -> None:
    sign_in(page, served.bob_key)
    for route in (f"timeline/{SESSION}", f"facts/{SESSION}?history=1",
                  f"recall/{SESSION}?q=badge+PIN+blue+notebook&history=1", "sessions"):
        show(page, served, route)
        assert ALICE_SECRET not in text(page), route
    show(page, served, f"timeline/{SESSION}")
    assert BOB_SECRET in text(page)
    show(page, served, f"timeline/{SESSION}?as=alice")  # naming another agent: 403
    assert page.locator(".error").count() == 1 and ALICE_SECRET not in text(page)


def test_recall_playground_matches_the_api_item_for_item(page: Any, served: Served,
                                                         shots: Path) -> None:
    sign_in(page, served.alice_key)
    show(page, served, f"recall/{SESSION}")
    page.fill("#query", "which database do we use")
    page.fill("#budget", "60")
    page.select_option("#preset", "high_recall")
    page.check("#include-history")
    page.evaluate("delete document.body.dataset.ready")
    page.click("#run")
    page.wait_for_selector("#items", timeout=TIMEOUT_MS)
    assert "q=which" in page.url and "budget=60" in page.url and "hm_" not in page.url
    answer = api(served, served.alice_key, "POST", f"/v1/sessions/{SESSION}/recall", json={
        "query": "which database do we use", "token_budget": 60, "preset": "high_recall",
        "include_history": True, "explain": True})
    assert answer["items"], "the store should recall something"
    assert attr(page, "#items tbody tr", "data-source-id") == [
        i["source_id"] for i in answer["items"]]
    # Recency moves with the clock between the two recalls: scores agree to 1e-4.
    assert [float(s) for s in attr(page, "#items tbody tr", "data-score")] == pytest.approx(
        [i["score"] for i in answer["items"]], rel=1e-4)
    assert attr(page, "#excluded tbody tr", "data-source-id") == [
        x["source_id"] for x in answer["excluded"]]
    assert attr(page, "#excluded tbody tr", "data-reason") == [
        x["reason"] for x in answer["excluded"]]
    assert page.inner_text("#context") == answer["context"]
    summary = page.inner_text("#recall-summary")
    assert f"{answer['used_tokens']} / {answer['token_budget']}" in summary
    page.screenshot(path=str(shots / "recall.png"), full_page=True)


def test_pipeline_shows_each_stage_and_the_session_progress(page: Any, served: Served,
                                                            shots: Path) -> None:
    sign_in(page, served.namespace_key)
    show(page, served, f"pipeline/{SESSION}")
    stats = api(served, served.namespace_key, "GET", f"/v1/sessions/{SESSION}/stats/full")
    stages = attr(page, "#stages tbody tr", "data-stage")
    assert {s["stage"] for s in stats["stages"]} <= set(stages) and stages
    cards = page.inner_text("#session-stats")
    assert f"{stats['turns_processed']}\nprocessed" in cards
    assert f"{len(stats['reflections_failed'])}\nfailed reflections" in cards
    assert page.locator("#traces tbody tr").count() > 0
    page.screenshot(path=str(shots / "pipeline.png"), full_page=True)


def test_the_key_stays_out_of_urls_and_the_keyboard_reaches_every_page(
        page: Any, served: Served) -> None:
    sign_in(page, served.namespace_key)
    assert page.evaluate("sessionStorage.getItem('hivemem.key')") == served.namespace_key
    show(page, served, f"timeline/{SESSION}")
    for key, page_name in (("3", "facts"), ("4", "recall"), ("5", "pipeline"),
                           ("2", "timeline"), ("1", "sessions")):
        page.evaluate("delete document.body.dataset.ready")
        page.keyboard.press(key)
        page.wait_for_function(f"() => document.body.dataset.page === '{page_name}'"
                               " && document.body.dataset.ready !== undefined")
        assert served.namespace_key not in page.url
    page.keyboard.press("j")
    focused = page.evaluate("document.activeElement.closest('tr')?.dataset.session")
    assert focused in attr(page, "#sessions tbody tr", "data-session")
    page.evaluate("delete document.body.dataset.ready")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.body.dataset.page === 'timeline'"
                           " && document.body.dataset.ready !== undefined")
    assert f"timeline/{focused}" in page.url


def test_a_handed_over_key_leaves_the_address_bar(page: Any, served: Served) -> None:
    """`hivemem ui` opens `/ui/#key=...`: the page keeps the key and wipes the fragment."""
    page.goto(f"{served.url}/ui/#key={served.namespace_key}")
    page.wait_for_selector("#namespace", timeout=TIMEOUT_MS)
    assert served.namespace_key not in page.url
    assert served.namespace_key not in str(page.evaluate("history.length + location.href"))
    assert page.evaluate("sessionStorage.getItem('hivemem.key')") == served.namespace_key
