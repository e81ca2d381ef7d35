"""Slots and values that survive wording (issue 34): what a statement is about and what
it sets, read off the sentence, not off fixed phrases."""

from __future__ import annotations

import pytest

from hivemem.domain.change import Intent, intent_of
from hivemem.domain.slots import slot_of
from hivemem.domain.values import contrast, differs, holds, values_of


@pytest.mark.parametrize(("sentence", "slot"), [
    ("Change of plan: MySQL instead, ops only supports it", ""),  # never "of plan"
    ("Change of plan, we go with MySQL", ""),
    ("Change of plan: we switch the database to MySQL.", "database"),
    ("Session timeout for the web app is 30 minutes.", "session timeout"),
    ("Rate limit for the public API: 250 requests per minute per key.", "rate limit"),
    ("The client wants amber as the primary brand colour.", "primary brand colour"),
    ("Deploy target: us-east-2 from now on", "deploy target"),
    ("Actually, let's switch to MySQL for the database instead, ops runs it.", "database"),
    ("Sam: From now on incident updates go to #incidents-live, the channel is noisy.",
     "incident update"),
    ("The release moves to March 3 instead of March 17.", "release"),
])
def test_slots_come_from_the_sentence(sentence: str, slot: str) -> None:
    assert slot_of(sentence, "sam") == slot


def test_doing_something_to_a_thing_and_moving_it_name_one_slot() -> None:
    first = slot_of("Let's host the service on AWS, in eu-west-1.")
    later = slot_of("Actually we're moving the hosting to GCP.")
    assert set(later.split()) <= set(first.split())


@pytest.mark.parametrize(("sentence", "values"), [
    ("Change of plan: MySQL instead, ops only supports it", {"mysql"}),
    ("The deadline moved to March 3.", {"march 3"}),
    ("The launch is pushed to next Friday.", {"next friday"}),
    ("We bumped the API to v2.4.1.", {"2.4.1"}),
    ("Set the request timeout to 3 seconds.", {"3s"}),
    ("The container is limited to 512 MB of RAM", {"512mb"}),
    ("Deploy target: us-east-2 from now on", {"us-east-2"}),
    ("Incident updates are posted in #ops-alerts.", {"#ops-alerts"}),
    ("Sam: Celery's configuration is too complicated.", {"celery"}),
    ("We need it by 2026-03-14.", {"2026-03-14"}),
])
def test_values_are_recognised_as_such(sentence: str, values: set[str]) -> None:
    assert values_of(sentence) == values


def test_numbers_keep_their_units() -> None:
    assert differs("The timeout is 30 seconds.", "The timeout is 30 minutes.")
    assert not differs("The timeout is 30 minutes.", "Keep the timeout at 30.")
    assert holds("Session timeout for the web app is 90 minutes.", "90")


@pytest.mark.parametrize(("sentence", "new", "old"), [
    ("Change: primary brand colour is teal instead of amber from now on.", {"teal"},
     {"amber"}),
    ("Update from product: the export limit is now 1000 rows per page, not 200.", None,
     {"200"}),
    ("We moved CI from Jenkins to GitHub Actions.", None, {"jenkins"}),
    ("The client switched the primary colour to crimson, no more teal.", None, {"teal"}),
    ("Update: the rate limit is 1200 requests per minute now, it used to be 250.", None,
     {"250"}),
    ("The services run on Python 3.11.", set(), set()),
])
def test_a_change_says_which_value_is_gone(sentence: str, new: set[str] | None,
                                           old: set[str]) -> None:
    said, gone = contrast(sentence)
    assert gone == old
    if new is not None:
        assert said == new


@pytest.mark.parametrize(("sentence", "intent"), [
    ("Pavel is joking we should move club night to the pub.", Intent.NON_ASSERTION),
    ("Someone asked if club night can be Thursday instead.", Intent.NON_ASSERTION),
    ("Some members propose to change the championship to rapid.", Intent.NON_ASSERTION),
    ("I think we should discuss going remote-first", Intent.NON_ASSERTION),
    ("Break it down: image verification, update protocol over UART.", Intent.STATE),
    ("update the deal: Enterprise, 40 seats", Intent.UPDATE),
    ("update: I took over Sam's shift", Intent.UPDATE),
    ("Updated the booking: Fjord room", Intent.UPDATE),
])
def test_what_a_sentence_does_reads_proposals_and_the_noun_update(sentence: str,
                                                                  intent: Intent) -> None:
    assert intent_of(sentence) == intent
