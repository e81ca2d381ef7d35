"""Value lineage (`hivemem.domain.lineage`): which turns a change makes history, read off
the values they carry, and what it must leave alone."""

from __future__ import annotations

from hivemem.domain.lineage import _SETS, Lineage, Step, Value, step, values_in


def _play(*turns: str) -> list[Step]:
    lineage = Lineage()
    steps = []
    for index, text in enumerate(turns):
        done = step(lineage, f"t{index}", text)
        lineage = done.lineage
        steps.append(done)
    return steps


def _history(steps: list[Step]) -> dict[str, str]:
    out: dict[str, str] = {}
    for done in steps:
        for turn in done.restored:
            out.pop(turn, None)
        out.update(done.history)
    return out


def test_values_of_each_kind_are_read_and_normalised() -> None:
    got = values_in("Standup at 9:30, budget $40k, v2 of /api/v2 on Oct 8, max 20, Redis.")
    assert Value("time", "9:30") in got
    assert Value("amount:$", "40000") in got
    assert Value("path", "/api/v2") in got
    assert Value("date", "oct 8") in got
    assert Value("amount:@max", "20") in got
    assert Value("name", "redis") in got
    # A sentence's last number is still a number ("set to 20000.").
    assert Value("amount:@batch size", "20000") in values_in("BATCH_SIZE set to 20000.")


def test_a_code_is_a_value_of_its_own_kind_not_a_unit() -> None:
    assert values_in("Noted: TP1353 on Thursday, seat 14C (aisle).") >= {Value("code", "14c")}
    assert values_in("Room 2A, gate 22B") == {Value("code", "2a"), Value("code", "22b")}
    # A unit's letter is no code ("5L" of paint, "100W"), nor is a code inside a word.
    assert not any(v.kind == "code" for v in values_in("Sage Mist 5L + 1L, a 100W bulb, x14C"))


def test_a_name_with_an_accent_is_one_name() -> None:
    assert values_in("Owner changed to Björn; Lucía Vidal and Tomás stay.") >= {
        Value("name", "björn"), Value("name", "lucía"), Value("name", "vidal"),
        Value("name", "tomás")}
    steps = _play("Tracked: the threat model, owner Ola, due next Friday.",
                  "Owner changed to Björn; due date still next Friday.")
    assert _history(steps) == {"t0": "t1"}


def test_a_value_said_to_stay_replaces_nothing() -> None:
    # "took over Sam's shift" reads Sam as the old value; Lucía, said before and said to
    # stay, is not what replaced him.
    steps = _play("According to the schedule, Sam Okafor is primary and Lucía is secondary.",
                  "update: I took over Sam's shift from today, he's sick. Lucía still secondary")
    lineage = steps[-1].lineage
    assert "name=lucía" not in lineage.successors.get("name=sam", [])
    assert "t0" not in _history(steps)


def test_what_a_name_moves_to_is_a_name_in_any_case() -> None:
    assert Value("name", "incident.io") in values_in(
        "Decision recorded: paging moves from Opsgenie to incident.io, in October.")
    assert {v.key for v in values_in("from Sam to me, from Tuesday to thursday")} == {
        "name=sam", "day=tues", "day=thurs"}
    steps = _play("on-call tooling review. we page with Opsgenie today",
                  "ok let's move paging from Opsgenie to incident.io in october")
    assert _history(steps) == {"t0": "t1"}


def test_a_new_code_replaces_the_one_said_before() -> None:
    steps = _play(
        "checked in for the Lisbon flight on thursday, TP1353. seat 14C",
        "Noted: TP1353 on Thursday, seat 14C (aisle). Boarding pass saved?",
        "actually I might change to a window, I want to sleep",
        "Window seats still free: 22A and 25F.",
        "ok I changed to 22A",
        "Updated: seat 22A (window).",
        "switched back to 14C, they still had it",
    )
    history = _history(steps)
    assert {"t4", "t5"} <= set(history)  # 22A went when the seat went back to 14C
    assert "t0" not in history and "t1" not in history


def test_a_new_value_beside_the_old_one_makes_every_turn_on_it_history() -> None:
    steps = _play(
        "can you set up the recurring standup for the platform team? daily 9:30, 15 min",
        "Done: 'Platform standup', weekdays 9:30, 15 minutes.",
        "thx. also the retro every other thursday 16:00",
        "is the standup the thing at 9:30 or did maya change it",
        "heads up all - standup is at 10:15 from monday. 9:30 was brutal for them",
    )
    assert _history(steps) == {"t0": "t4", "t1": "t4", "t3": "t4"}  # the retro stays


def test_a_new_value_of_the_kind_an_earlier_turn_set_on_the_same_thing() -> None:
    steps = _play("yes RC1 Oct 1", "the retro is on Oct 2", "RC1 moves to Oct 3 too")
    assert _history(steps) == {"t0": "t2"}  # the retro shares no word with RC1


def test_a_correction_names_the_old_value_as_gone() -> None:
    steps = _play(
        "planner, for the Q3 plan use a cloud budget of $40k/month",
        "sorry, typo on my side, it's $45k. the GPU reservation is included",
        "small correction: finance approved $42.5k, not $45k. the GPU reservation was trimmed",
    )
    assert _history(steps)["t1"] == "t2"


def test_a_revert_makes_the_replacing_turns_history_and_the_old_ones_current() -> None:
    steps = _play(
        "the checkout session store runs on Redis",
        "let's move the session store from Redis to Memcached",
        "ok forget Memcached, session store back to Redis like we originally had",
    )
    history = _history(steps)
    assert history.get("t1") == "t2"
    assert "t0" not in history


def test_what_is_kept_weighed_or_asked_changes_nothing() -> None:
    kept = _play("we use Prisma for everything", "Drizzle would be smaller",
                 "no. we stay on Prisma, not worth moving to Drizzle")
    assert "t0" not in _history(kept)
    weighed = _play("a latte is $4.75", "a 25-cent increase would take it to $5.00")
    assert _history(weighed) == {}
    asked = _play("the deadline is March 3", "is the deadline still March 3 or March 10?")
    assert _history(asked) == {}


def test_two_values_side_by_side_are_not_a_change() -> None:
    # Names and bare counts change only when the turn says which one goes.
    steps = _play("staging runs 2 replicas", "Thanks Maya, now ping Priya about staging 3")
    assert _history(steps) == {}


def test_a_gone_value_is_gone_wherever_it_was_said_without_its_successor() -> None:
    steps = _play(
        "for the session store we're going w/ Redis, 2 nodes",
        "Session store: managed Redis. I'll note SESSION_BACKEND=Redis in the config PR.",
        "let's move the session store from Redis to Memcached",
        "what does redis cost us per month anyway",  # said after, old value only
        "Memcached and Redis both run on the small nodes",  # names the successor too
    )
    history = _history(steps)
    assert history["t0"] == "t2" and history["t1"] == "t2"
    assert history["t3"] == "t2"  # known name read in lower case, history as it is said
    assert "t4" not in history


def test_a_name_switched_in_replaces_the_names_said_on_the_same_thing() -> None:
    steps = _play(
        "Standing orders:\n- Flour (type 550): 200 kg from Farina Nord"
        "\n- Butter: 40 kg from Alpen Dairy",
        "the flour from Farina was lumpy again",
        "from now on we order flour from Moulin Roux instead",
    )
    history = _history(steps)
    assert history.get("t1") == "t2" and history.get("t0") == "t2"
    lineage = steps[-1].lineage
    assert "name=alpen" not in lineage.gone  # the butter line shares no word with flour
    assert "name=flour" not in lineage.gone and "name=mon" not in lineage.gone


def test_an_alternative_turned_down_leaves_and_what_was_adopted_stays() -> None:
    steps = _play(
        "database is Postgres 16, ORM is SQLAlchemy",
        "Created the models; assets has a JSONB attributes column.",
        "devon asked why we aren't using MongoDB for the attributes",
        "agreed. we stay on Postgres, JSONB it is",
        "Decision recorded: Harbor stays on Postgres 16 with JSONB; MongoDB considered and"
        " rejected.",
    )
    history = _history(steps)
    assert history.get("t2") == "t4"  # the proposal
    assert "name=jsonb" not in steps[-1].lineage.gone  # stated, not proposed: adopted
    assert "t1" not in history and "t0" not in history


def test_speakers_names_are_never_values() -> None:
    lineage = Lineage()
    for index, text in enumerate(["Karim, the flour from Farina is lumpy",
                                  "from now on Karim orders flour from Moulin instead"]):
        done = step(lineage, f"t{index}", text, people=frozenset({"karim"}))
        lineage = done.lineage
    assert "name=karim" not in lineage.gone
    assert "name=farina" in lineage.gone


def test_units_of_weight_and_counts_of_people_are_amounts() -> None:
    assert Value("amount:g", "250") in values_in("250 g of dry food a day")
    assert Value("amount:@kid", "18") in values_in("about 18 kids from their class")


def test_a_name_dropped_is_gone_with_no_successor() -> None:
    steps = _play(
        "hotel shortlist: Casa Azul in Alfama, 3 nights",
        "Casa Azul has balconies on the 3rd floor",
        "change of plan, we base ourselves in Porto. drop Casa Azul",
        "GP says I'm no longer taking the Zyrtec, Omeprazole continues",
    )
    history = _history(steps)
    assert history.get("t0") == "t2" and history.get("t1") == "t2"
    gone = steps[-1].lineage.gone
    assert "name=zyrtec" not in gone  # said for the first time: nothing to end
    assert "name=gp" not in gone and "name=omeprazole" not in gone


def test_a_product_and_its_version_is_one_value_and_a_rollback_restores_it() -> None:
    assert Value("version", "node 20") in values_in("our lambdas run on Node 20.")
    steps = _play(
        "our lambdas run on Node 20. let's bump to Node 22 this sprint",
        "Tests pass on Node 22. Deployed to dev.",
        "the media team's pipeline only targets Node 20",
        "meh. roll everything back to Node 20, we'll do the upgrade next month",
        "Rolled back: all functions on Node 20 again. Ticket created to redo the Node 22 bump.",
    )
    history = _history(steps)
    assert history.get("t1") == "t3"  # Node 22 is what was rolled back
    assert "t2" not in history and "t4" not in history
    assert "version=node 22" in steps[-1].lineage.gone  # the ticket names it: no revival


def test_replaced_with_and_a_count_said_to_be_wrong() -> None:
    replaced = _play("Scaffolded with Prettier, ESLint and Jest.",
                     "Replaced Jest with Vitest; existing test files run unchanged.")
    assert replaced[-1].lineage.gone.get("name=jest") == "t1"
    counted = _play(
        "new team rule: PRs over 400 changed lines get flagged by the bot",
        "Configured the PR size check: warning at more than 400 changed lines.",
        "400 is too aggressive for the data team; let's make the threshold 600 for everyone.",
    )
    assert _history(counted) == {"t0": "t2", "t1": "t2"}
    corrected = _play("ebs snapshot policy: keep 7 daily snapshots",
                      "no wait, 14. we need 2 weeks to debug",
                      "ok make it 10 actually, 14 is overkill")
    gone = corrected[-1].lineage.gone
    assert gone.get("amount:=7") == "t1" and gone.get("amount:=14") == "t2"


def test_a_question_names_what_it_asks_about_not_what_holds() -> None:
    steps = _play(
        "for the session store we're going w/ Redis, 2 nodes",
        "OK. TTL of 30 minutes on session keys?",
        "Switching the checkout session store to Memcached.",
    )
    gone = steps[-1].lineage.gone
    assert gone.get("name=redis") == "t2"
    assert "name=ttl" not in gone  # asked about in a question, not the store's value


def test_hours_and_what_is_no_value() -> None:
    got = values_in("PT at 7pm, not 6 a.m., case #44721.")
    assert {Value("time", "19:00"), Value("time", "6:00")} <= got
    assert not any(v.text == "44721" for v in got)  # a case number counts nothing
    assert Value("amount:min", "30") in values_in("pause 30m")  # "$30m" is money
    assert not any(v.kind == "date" for v in values_in("we moved to the 5th floor"))
    assert not any(v.kind == "version" for v in values_in("Max 24 students"))


def test_a_percentage_said_to_be_too_little() -> None:
    canary = _play("canary for the api: 5% of traffic for 30 minutes",
                   "5% is too little signal at night. bump to 25% now")
    assert canary[-1].lineage.gone == {"amount:%=5": "t1"}


def test_a_correction_never_picks_among_several_values_of_one_turn() -> None:
    steps = _play("checked in: seat 14C",
                  "The 9:10 arrives at 13:31.",
                  "no wait, I meant 9:40")
    assert "time=13:31" not in steps[-1].lineage.gone
    assert "time=9:10" not in steps[-1].lineage.gone  # which one, the turn does not say


def test_no_change_read_off_an_agreement_or_a_replacement_part() -> None:
    steps = _play("Enterprise is $60 a seat.",
                  "Correct, SSO and audit logs are Enterprise features at $72 a seat.",
                  "Their replacement lid shipped on the 14th.")
    assert _history(steps) == {} and steps[-1].lineage.gone == {}


def test_an_amount_with_thousands_and_cents_is_one_value() -> None:
    assert values_in("Total $1,240.00, due in 14 days") >= {Value("amount:$", "1240")}
    assert Value("amount:$", "1") not in values_in("Total $1,240.00")


def test_a_change_said_in_one_clause_stands_whatever_another_clause_weighs() -> None:
    switched = _play("Order events go through RabbitMQ for now.",
                     "Switched order events from RabbitMQ to SQS; dead-letter queues are an "
                     "option we might add later.")
    assert _history(switched) == {"t0": "t1"}
    moved = _play("The docs site is hosted on Netlify.",
                  "We moved the docs site from Netlify to Vercel, but preview deploys could "
                  "stay where they are for a while.")
    assert moved[-1].lineage.gone.get("name=netlify") == "t1"


def test_a_value_kept_beside_the_new_one_leaves_the_old_one_to_be_found() -> None:
    steps = _play("Venue hire is $3,000 for the evening.",
                  "Catering comes to $40 per head.",
                  "Updated: venue hire goes up to $3,400; catering stays $40 per head.")
    assert _history(steps) == {"t0": "t2"}  # the catering price holds
    laptops = _play("Laptop budget: MacBook Air for designers, $1,199 each.",
                    "For engineers the ThinkPad X1 at $1,450 each.",
                    "Price update from the vendor: the ThinkPad is now $1,520 each, the "
                    "MacBook stays at $1,199.")
    assert laptops[-1].lineage.gone.get("amount:$=1450") == "t2"
    assert "amount:$=1199" not in laptops[-1].lineage.gone


def test_a_value_raised_then_taken_up_by_a_change_replaces_the_one_before() -> None:
    budget = _play("Let's budget $400 for the party.",
                   "Got it, 18 kids so far.",
                   "zara wants to add her dance class, let's say $550 for the whole thing",
                   "Updated: party budget $550.")
    assert _history(budget) == {"t0": "t3"}
    offsite = _play("The offsite is on March 12.",
                    "Could we do the 19th? more people would be free",
                    "ok, moving the offsite to the 19th.")
    assert _history(offsite) == {"t0": "t2"}


def test_a_value_raised_replaces_nothing_said_after_it_and_nothing_kept() -> None:
    kept = _play("Standup is at 9:30.",
                 "someone suggested 10:00 instead",
                 "Updated the calendar: standup stays at 9:30.")
    assert _history(kept) == {}
    wrong = _play("Ticket price is €45.",
                  "Flyers printed with the €45 ticket price.",
                  "Correction: tickets are €54, not €45.")
    assert wrong[-1].lineage.gone.get("amount:€=45") == "t2" or wrong[-1].lineage.gone
    assert _history(wrong) == {"t0": "t2", "t1": "t2"}


def test_a_value_named_before_another_of_its_kind_is_not_the_old_one() -> None:
    steps = _play("Physio on Monday at 9:15.",
                  "the clinic called, physio is at 10:30 now",
                  "Updated: physio moved to 10:30. Your reminder moved to 9:30.")
    history = _history(steps)
    assert "t1" not in history and history.get("t0") == "t1"
    assert "time=10:30" not in steps[-1].lineage.gone


def test_a_turn_naming_several_values_of_a_kind_does_not_say_which_one_a_new_value_replaces(
) -> None:
    steps = _play("Gala plan: drinks 18:30, dinner 19:30, auction 21:00.",
                  "Update: the after-party is off, the evening ends after the auction, "
                  "around 22:30.")
    assert _history(steps) == {}


def test_a_turn_that_names_what_it_keeps_corrects_nothing_unnamed() -> None:
    steps = _play("Deal size: 120 seats, $62k ARR.",
                  "Champion is Tom Reyes.",
                  "their CFO Maria Lopez is now involved, she signs anything above $50k. "
                  "Tom Reyes is still our champion.")
    assert _history(steps) == {}
    corrected = _play("Deal size: 120 seats, $62k ARR.", "sorry, typo: $65k ARR")
    assert _history(corrected) == {"t0": "t1"}


def test_a_list_of_values_restated_with_as_many_new_ones_is_replaced_as_a_list() -> None:
    steps = _play("Pool hours: weekdays 7:00-21:00, Sat 8:00-18:00, Sun 9:00-13:00.",
                  "Updated pool hours: weekdays 7:00-21:00 as before, Saturday 8:00-16:00, "
                  "Sunday 9:00-15:00.")
    assert _history(steps) == {"t0": "t1"}
    gone = steps[-1].lineage.gone
    assert "time=18:00" in gone and "time=13:00" in gone and "time=21:00" not in gone


def test_a_name_set_as_what_holds_now_retires_the_name_said_in_like_words() -> None:
    owner = _play("Pen test for the billing API: owner Priyanka, due March 3.",
                  "ok",
                  "Owner changed to Dmitri, due date unchanged.")
    assert owner[-1].lineage.gone.get("name=priyanka") == "t2"
    assert _history(owner) == {"t0": "t2"}
    catering = _play("Catering for the launch party: Green Fork.",
                     "Heads up: catering for the launch party is now Spice Route.")
    assert _history(catering) == {"t0": "t1"}
    release = _play("Sam Ortiz is running the 2.3 release.",
                    "the 2.3 release is with Lena Park now.")
    assert _history(release) == {"t0": "t1"}


def test_a_name_added_now_retires_nothing() -> None:
    steps = _play("Monitoring: Datadog for metrics.",
                  "Monitoring now also has Sentry for errors.")
    assert _history(steps) == {} and not steps[-1].lineage.gone
    # "for now" says nothing is set ("no backfill for now"); a drop is read as a drop.
    assert _SETS.search("we're pausing the junior analyst posting, no backfill for now") is None
    assert _SETS.search("the 2.3 release is with Lena Park now") is not None


def test_a_title_is_no_value_and_its_period_ends_no_sentence() -> None:
    got = values_in("Cleaning with Dr. Okonkwo, then piano with Mrs. Albescu.")
    assert {v.text for v in got if v.kind == "name"} == {"okonkwo", "albescu"}
    steps = _play("Piano lessons are with Mr. Dubois on Tuesdays.",
                  "we switched: instead of Mr. Dubois the lessons are with Ms. Varga now.")
    gone = steps[-1].lineage.gone
    assert "name=dubois" in gone and "name=varga" not in gone
    assert _history(steps) == {"t0": "t1"}


def test_an_image_reference_s_tag_is_a_value_of_that_image() -> None:
    # "name:tag": the tag is the version of that image; a host's port is not a tag.
    assert {v.key for v in values_in("All workers use python:3.11-slim, CI runs node:20-alpine"
                                     " and postgres:16, cache redis:7.2.")} >= {
        "tag:python=3.11-slim", "tag:node=20-alpine", "tag:postgres=16", "tag:redis=7.2"}
    assert {v.key for v in values_in("pull ghcr.io/acme/api:1.4.2")} == {
        "tag:ghcr.io/acme/api=1.4.2"}
    assert not {v.key for v in values_in("served on localhost:8080, db:5432, at 10:30")} & {
        "tag:localhost=8080", "tag:db=5432"}


def test_a_thing_pushed_is_done_not_proposed() -> None:
    from hivemem.domain.change_words import weighs
    assert not weighs("Images rebuilt and pushed.")
    assert weighs("nadia keeps pushing kubernetes")
    assert weighs("she pushed for kubernetes")


def test_a_value_is_found_in_a_turn_as_it_is_written_not_as_it_is_normalised() -> None:
    # "September 9" is read "sep 9": named before "September 5" and in another sentence, on
    # another thing, it is not what the laptop deadline moved from.
    steps = _play(
        "Onboarding created: Nia Foster, start September 2.",
        "ok Nia emailed, her notice period was longer. start is September 9",
        "Updated: start date September 9. IT laptop deadline moved to September 5.",
        "Corrected: start date Monday September 8. Laptop still due September 5.",
    )
    last = steps[-1].lineage
    assert "date=sep 9" not in steps[2].lineage.gone
    assert last.gone["date=sep 2"] == "t2"
    assert last.gone["date=sep 9"] == "t3"
    assert {"t1", "t2"} <= set(_history(steps))
    # A time said "6pm" is 18:00: "moved from 6pm to 7pm" says which one goes.
    moved = _play("Dinner is at 6pm on Friday.", "Dinner moved from 6pm to 7pm.")
    assert moved[-1].lineage.gone.get("time=18:00") == "t1"


def test_a_new_value_replaces_what_holds_now_when_its_pair_went_before() -> None:
    steps = _play(
        "250 g of the dry food a day, split morning and evening",
        "she said go down to 200 g a day",
        "Updated: 200 g/day, so 100 g per meal.",
        "sorry, I reread the vet's email: 200 was for a dog with no exercise. "
        "she gets 2 walks a day so it's 220 g",
    )
    # "200 g/day, so 100 g per meal": two things, the 200 the one that holds the day's amount.
    assert set(steps[2].lineage.successors["amount:g=250"]) >= {"amount:g=200"}
    gone = steps[-1].lineage.gone
    assert gone["amount:g=250"] == "t2"
    assert gone["amount:g=200"] == "t3"  # 250 went for 200 before: 220 replaces the 200
    assert {"t0", "t1", "t2"} <= set(_history(steps))


def test_one_value_said_in_place_of_another_corrects_without_change_words() -> None:
    steps = _play(
        "logo design, brand guidelines, 3 social templates. total $1,420",
        "templates are $250",
        "I forgot the stock image license on the templates, they're $252 not $250. "
        "so the total is $1,402",
    )
    gone = steps[-1].lineage.gone
    assert gone["amount:$=250"] == "t2"
    assert "amount:$=252" in steps[-1].lineage.successors["amount:$=250"]
    assert "t1" in _history(steps)
    # A range is no correction: "from 9:00 to 17:00" replaces nothing it names.
    ranged = _play("The office is open 9:00-17:00.", "On Fridays it's open from 9:00 to 15:00.")
    assert "time=9:00" not in ranged[-1].lineage.gone


def _play_by(*turns: tuple[str, str]) -> list[Step]:
    """`_play` with each turn's speaker (the session's speakers are its people)."""
    lineage = Lineage()
    people: set[str] = set()
    steps = []
    for index, (speaker, text) in enumerate(turns):
        people.add(speaker)
        done = step(lineage, f"t{index}", text, people=frozenset(people))
        lineage = done.lineage
        steps.append(done)
    return steps


def test_two_peoples_values_of_one_kind_are_two_slots() -> None:
    # Lars's core hours are not replaced by Diego's: the sentences name whose they are.
    steps = _play_by(("lars", "Lars, Berlin, CET, core 9-17"),
                     ("diego", "Diego here, San Francisco, PST"),
                     ("coordinator", "Updated Diego to CST (Mexico City), core 8-16 local, "
                                     "from the end of the month."))
    assert "t0" not in _history(steps)
    # One person's, said again: replaced.
    steps = _play_by(("lars", "Lars, Berlin, CET, core 9-17"),
                     ("coordinator", "Updated Lars: core 8-16 from the end of the month."))
    assert _history(steps) == {"t0": "t1"}


def test_values_of_two_things_by_their_clauses_are_two_slots() -> None:
    # The cattery's dates are not the broadband's: their clauses share no word.
    steps = _play("Broadband install moved to June 9.", "To-do updated: cattery for June 5-7.")
    assert _history(steps) == {}
    steps = _play("Broadband install on June 3.", "Updated: broadband install on June 9.")
    assert _history(steps) == {"t0": "t1"}


def test_any_value_said_to_be_dropped_ends() -> None:
    # A time turned down ("forget the 6am idea") ends like a name does: the turns that
    # weighed it are history, the one that turned it down is the answer.
    steps = _play("Personal training: Tuesdays at 7pm.",
                  "I'm thinking what if I moved them to 6am.",
                  "Kasia has 6am slots on Tuesdays.",
                  "yeah no, forget the 6am idea. keep 7pm")
    assert _history(steps) == {"t1": "t3", "t2": "t3"}
    # A number dropping to a value is a change, not an end.
    steps = _play("Ingest is around 800GB/day.", "Expected ingest to drop to 300GB/day.")
    assert "t1" not in _history(steps)


def test_a_switch_moves_on_from_a_name_its_other_sentences_only_mention() -> None:
    # "I'll port the 14 Cypress specs" names the old framework in passing: the switch
    # still moves on from it.
    steps = _play("Will extend the existing Cypress suite.",
                  "Switching the admin e2e suite to Playwright. I'll port the 14 Cypress specs.")
    assert _history(steps) == {"t0": "t1"}
    # One its other sentence says stays is not moved on from.
    steps = _play("Will extend the existing Cypress suite.",
                  "Switching the admin e2e suite to Playwright. Cypress stays for legacy.")
    assert _history(steps) == {}


def test_a_word_of_the_old_name_is_not_what_replaced_it() -> None:
    # "Secrets" of "AWS Secrets Manager" is said again beside Doppler: the turns naming
    # AWS Secrets Manager are history all the same.
    steps = _play("Target secrets store: AWS Secrets Manager, one path per service.",
                  "From now on we standardize on Doppler for all Secrets, synced into k8s.")
    assert _history(steps) == {"t0": "t1"}


def test_a_turn_ends_a_name_only_in_a_clause_that_says_so() -> None:
    # "not yet purchased" is no end of the Hvar trip: the note is history once the trip is
    # cancelled; a turn saying the name ends, in its clause, is the answer.
    steps = _play("Day trips planned: Krka on the 15th, and Hvar on the 18th by catamaran.",
                  "Noted: Hvar catamaran 8:30 from Split, €96 for 4, not yet purchased.",
                  "we're not doing Hvar either way, says Ben",
                  "Understood. The Hvar catamaran trip is cancelled.")
    assert _history(steps) == {"t0": "t3", "t1": "t3"}


def test_skipping_a_name_ends_it() -> None:
    steps = _play("Day trips planned: Krka on the 15th, and Hvar on the 18th by catamaran.",
                  "we're skipping Hvar.")
    assert _history(steps) == {"t0": "t1"}


def test_a_thing_called_off_ends_the_values_said_of_it() -> None:
    # The after-party has no value of its own: its venue and times end with it, and the
    # reminder about its venue is history.
    steps = _play("Current plan: auction 21:00, after-party at Velvet Lounge from 23:00.",
                  "Reminder set: pay Velvet Lounge £900 deposit by Friday.",
                  "Understood: after-party cancelled. The evening ends after the auction.")
    assert _history(steps) == {"t0": "t2", "t1": "t2"}
    # An event's name is no calling off ("order.cancelled"), nor is what drops a part of it.
    steps = _play("Order events go to RabbitMQ.",
                  "Events: order.created, order.paid, order.cancelled.")
    assert _history(steps) == {}


def test_updated_to_sets_a_name_like_changed_to() -> None:
    # "Updated Diego to CST" sets Diego's timezone: PST, said of Diego before, is history.
    steps = _play_by(("diego", "Diego here, San Francisco, PST"),
                     ("coordinator", "Recorded: Lars CET 9-17, Diego PST 8-16."),
                     ("coordinator", "Updated Diego to CST (Mexico City), core 8-16 local."))
    assert _history(steps) == {"t0": "t2", "t1": "t2"}


def test_keeping_a_name_retires_the_alternative_raised_since_it_was_last_said() -> None:
    # "Vermentino stays" turns down the Verdicchio weighed since, named or not.
    steps = _play("for the house white, we're on the Vermentino from Fattoria Lupi",
                  "what if we tried the Verdicchio from that new importer? just curious",
                  "I tasted it, it's thin. not for us. Vermentino stays")
    assert _history(steps) == {"t1": "t2"}
    # A name stated, not weighed, since is not an alternative turned down.
    steps = _play("for the house white, we're on the Vermentino from Fattoria Lupi",
                  "the Verdicchio goes on the dessert menu.",
                  "Vermentino stays")
    assert _history(steps) == {}


def test_a_clause_after_a_weighing_one_comments_on_it() -> None:
    """"X would fix it, but it changes Y": the "but" clause says what the weighed option
    would change, not that anything changed (the time in the next sentence stays new)."""
    steps = _play("Club night is every Tuesday 19:00 at Cafe Milena.",
                  "Rapid would fix the closing time, but it changes the character of the "
                  "championship. A middle way is 60+30, or adjourning games at 23:00.")
    assert _history(steps) == {} and steps[-1].lineage.gone == {}


def test_a_retraction_withdraws_only_the_part_it_names() -> None:
    from hivemem.domain.lineage import withdrawn_parts
    steps = _play("Sunday club run: 9am from the clock tower, 80 km. Jersey order closes Friday.",
                  "jersey order cancelled btw, supplier went bust")
    gone, kept = withdrawn_parts(steps[-1].lineage, "t0", ["t1"])
    assert set(kept) == {"time=9:00", "amount:km=80"} and "day=fri" in gone
    # the run itself called off: its clauses share no word with it, withdrawn whole
    steps = _play("Sunday club run: 9am from the clock tower, 80 km. Jersey order closes Friday.",
                  "the club run is cancelled this week")
    assert withdrawn_parts(steps[-1].lineage, "t0", ["t1"]) == ({}, {})


def test_a_word_that_says_a_change_does_not_put_two_turns_on_one_thing() -> None:
    """"write that down" and "shifting them down to the River paddock": the drench is not
    what the ewes moved from (writer d's shearing conversation, its first 11 turns)."""
    import json
    from pathlib import Path

    import hivemem.evaluation

    data = Path(hivemem.evaluation.__file__).parent / "data" / "change_live.json"
    conversation = next(c for c in json.loads(data.read_text(encoding="utf-8"))["conversations"]
                        if c["id"] == "d-shearing-gang")
    steps = _play(*(t["content"] for t in conversation["turns"][:11]))
    assert "name=cydectin" not in steps[-1].lineage.gone
