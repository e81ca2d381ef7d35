"""Evaluation scenarios: seeded conversations with planted information, filler, and probes.

Pure: no I/O, no clock, no hivemem runtime; the same (scenario, turns, iteration, seed) always
gives the same conversation, so other systems can be run on exactly the same data.

A conversation alternates user and assistant turns. A *planted* statement is a user turn
(followed by a short assistant acknowledgement that does not repeat the value); everything
else is filler: ordinary project chatter, some of it on the same topics as the planted
statements (a database migration, a deploy, a latency graph) but never carrying a planted
value. Planted statements fall in the first three quarters of the conversation, so every
probe is asked at least a quarter of the conversation later. Probes are questions to recall,
never turns of the conversation: they are not ingested, so a probe cannot find itself.

**A hit** (`judge`): recall for the probe's question, within the token budget, returns an
item whose text contains the expected value (whole words, case-insensitive). For a probe
with `stale` values (progressive requirements: values that were true earlier), it is a hit
only if, in addition, no item that mentions a stale value *without* the expected one ranks
above the first item that mentions the expected value. An update turn such as "raise the
limit to 200 instead of 50" mentions both values and counts for the expected one.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

PLANT_REGION = 0.75  # planted statements fall in this leading fraction of the conversation


class ScriptTurn(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Literal["user", "assistant"]
    content: str
    planted: bool = False


class Probe(BaseModel):
    model_config = ConfigDict(frozen=True)

    label: str  # what is probed, e.g. "decision:database"
    query: str
    expected: str
    stale: tuple[str, ...] = ()
    planted_at: int  # index of the turn that (last) stated the expected value


class Conversation(BaseModel):
    model_config = ConfigDict(frozen=True)

    scenario: str
    turns_target: int
    iteration: int
    seed: int
    session_id: str
    turns: tuple[ScriptTurn, ...]
    probes: tuple[Probe, ...]


class Verdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    hit: bool
    rank: int | None = None  # 1-based rank of the first item with the expected value
    stale_rank: int | None = None  # first item with only a stale value
    items: int = 0


# --------------------------------------------------------------------------------------
# The judge
# --------------------------------------------------------------------------------------


def mentions(text: str, value: str) -> bool:
    """`value` occurs in `text` as whole words, case-insensitively."""
    pattern = r"(?<![A-Za-z0-9])" + re.escape(value) + r"(?![A-Za-z0-9])"
    return re.search(pattern, text, flags=re.IGNORECASE) is not None


def judge(probe: Probe, recalled: Sequence[str]) -> Verdict:
    """Did a recall (item texts, best first, already within the budget) answer `probe`?"""
    rank = next((i for i, t in enumerate(recalled, 1) if mentions(t, probe.expected)), None)
    stale_rank = next(
        (
            i
            for i, t in enumerate(recalled, 1)
            if not mentions(t, probe.expected) and any(mentions(t, s) for s in probe.stale)
        ),
        None,
    )
    hit = rank is not None and (stale_rank is None or rank < stale_rank)
    return Verdict(hit=hit, rank=rank, stale_rank=stale_rank, items=len(recalled))


# --------------------------------------------------------------------------------------
# Content pools
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Topic:
    """One plantable thing: statements with a {v} slot, the values, and probe questions."""

    key: str
    kind: str
    statements: tuple[str, ...]
    values: tuple[str, ...]
    questions: tuple[str, ...]
    # progressive requirements: how a change is announced ({v} new, {old} previous value)
    updates: tuple[str, ...] = ()


DECISIONS = (
    Topic("database", "decision",
          ("After comparing the options, let's go with {v} for the database; we need solid "
           "transactions.", "Decision: the main database will be {v}, the team knows it best."),
          ("PostgreSQL", "MySQL", "MongoDB", "CockroachDB", "MariaDB"),
          ("Which database did we settle on?", "What database are we using for the service?")),
    Topic("frontend", "decision",
          ("We'll build the web UI with {v}; the hiring pool is bigger for it.",
           "Decision made: the frontend framework is {v}."),
          ("React", "Vue", "Svelte", "Angular", "SolidJS"),
          ("What frontend framework are we building the UI with?",
           "Which framework did we choose for the web client?")),
    Topic("broker", "decision",
          ("For events between services we'll use {v} as the message broker.",
           "Let's standardise on {v} for messaging between the services."),
          ("Kafka", "RabbitMQ", "NATS", "Pulsar"),
          ("Which message broker are we using for events?",
           "What do the services use to send each other messages?")),
    Topic("ci", "decision",
          ("We agreed to move CI to {v}; the old runners are too flaky.",
           "Decision: continuous integration runs on {v} from now on."),
          ("GitHub Actions", "GitLab CI", "Jenkins", "CircleCI", "Buildkite"),
          ("What do we run CI on?", "Which continuous integration system did we pick?")),
    Topic("hosting", "decision",
          ("We'll deploy the service on {v}; it fits the ops team's experience.",
           "Final call on hosting: production runs on {v}."),
          ("Kubernetes", "Nomad", "Fly.io", "Heroku", "Cloud Run"),
          ("Where are we deploying the service?", "What platform will production run on?")),
    Topic("auth", "decision",
          ("Let's use {v} as the identity provider for login.",
           "Decision: single sign-on goes through {v}."),
          ("Auth0", "Keycloak", "Okta", "Cognito"),
          ("Which identity provider did we choose for login?",
           "How are users going to authenticate, which provider?")),
)

CONSTRAINTS = (
    Topic("memory", "constraint",
          ("Hard requirement: the service must run in under {v} of memory.",
           "Keep in mind the container is limited to {v} of RAM, no exceptions."),
          ("256 MB", "512 MB", "768 MB", "2 GB"),
          ("How much memory is the service allowed to use?",
           "What's the memory limit for the container?")),
    Topic("latency", "constraint",
          ("The API has to answer within {v} at p99, that's in the contract.",
           "Constraint from the client: p99 latency must stay below {v}."),
          ("80 ms", "150 ms", "250 ms", "400 ms"),
          ("What latency target do we have to meet?", "How fast must the API respond?")),
    Topic("region", "constraint",
          ("Customer data must stay in the {v} region for compliance.",
           "Legal says all personal data has to be stored in {v} only."),
          ("eu-central-1", "eu-west-3", "us-east-2", "ap-southeast-2"),
          ("Where is customer data allowed to be stored?",
           "Which region do we have to keep personal data in?")),
    Topic("license", "constraint",
          ("We can't ship any dependency under the {v} license, legal forbids it.",
           "Never add a library licensed under {v} to this codebase."),
          ("AGPL", "SSPL", "GPLv3", "EUPL"),
          ("Which licenses are off limits for dependencies?",
           "Are there license restrictions on the libraries we can use?")),
    Topic("python", "constraint",
          ("Everything has to keep working on Python {v}, the customer's servers run it.",
           "We must support Python {v} as the minimum version."),
          ("3.8", "3.9", "3.10"),
          ("Which Python version do we need to support?",
           "What's the oldest Python the code must run on?")),
    Topic("upload", "constraint",
          ("Uploads are capped at {v} per file, the storage gateway rejects anything larger.",
           "Constraint: a single uploaded file can be at most {v}."),
          ("10 MB", "25 MB", "50 MB", "100 MB"),
          ("What's the maximum file upload size?", "How big can an uploaded file be?")),
)

FAILURES = (
    Topic("deploy", "failure",
          ("We tried deploying with {v} last week and it failed: the rollout hung halfway "
           "and we had to roll back by hand.",
           "The deployment through {v} broke, health checks never went green."),
          ("Docker Swarm", "Ansible", "Capistrano", "Octopus Deploy"),
          ("What went wrong with the earlier deployment attempt?",
           "Which deployment approach failed before?")),
    Topic("cache", "failure",
          ("Caching the search results in {v} did not work: invalidation kept serving stale "
           "prices.", "We tried {v} in front of search and had to remove it, stale data."),
          ("Varnish", "Memcached", "Hazelcast", "Squid"),
          ("Did our attempt at caching the search results work?",
           "What caching layer did we try for search, and how did it go?")),
    Topic("migration", "failure",
          ("The schema migration with {v} failed halfway because it locked the orders "
           "table for minutes.", "{v} choked on the orders table migration and we aborted."),
          ("Flyway", "Liquibase", "Alembic", "Sqitch"),
          ("What happened with the schema migration tool we tried?",
           "Which migration tool gave us trouble?")),
    Topic("loadtest", "failure",
          ("Load testing with {v} fell over at two thousand users, the tool itself ran out "
           "of memory.", "{v} crashed during the load test before the service did."),
          ("Locust", "JMeter", "Gatling", "Artillery"),
          ("Which load testing tool gave us trouble?", "What failed during load testing?")),
    Topic("pdf", "failure",
          ("Generating invoice PDFs with {v} failed: fonts came out garbled for accented "
           "names.", "{v} could not render the invoices properly, we dropped it."),
          ("wkhtmltopdf", "ReportLab", "Puppeteer", "PrinceXML"),
          ("What broke when we generated the invoice PDFs?",
           "Which PDF tool did not work for invoices?")),
)

GOALS = (
    Topic("feature", "goal",
          ("The goal for this sprint is to ship {v} for the mobile app.",
           "Our objective for the next two weeks: get {v} released."),
          ("offline mode", "dark mode", "push notifications", "calendar sync", "biometric login"),
          ("What are we trying to ship this sprint?", "What's the sprint goal?")),
    Topic("uptime", "goal",
          ("This quarter we're aiming for {v} uptime on the public API.",
           "Goal: reach {v} availability before the enterprise launch."),
          ("99.9%", "99.95%", "99.99%"),
          ("What uptime are we aiming for?", "What availability target did we set?")),
    Topic("milestone", "goal",
          ("Everything we do now is towards the {v} milestone.",
           "The milestone we're working towards is the {v}."),
          ("public beta", "partner pilot", "SOC 2 audit", "series A demo"),
          ("What milestone are we working towards?", "What's the next big milestone?")),
    Topic("users", "goal",
          ("The target is {v} weekly active users by the end of the year.",
           "We want to hit {v} weekly actives before December."),
          ("5,000", "20,000", "75,000"),
          ("How many weekly active users are we aiming for?",
           "What's our growth target for weekly actives?")),
)

FACTS = (
    Topic("staging", "fact",
          ("For the record, the staging server is called {v}.",
           "Staging lives on the host named {v}."),
          ("falcon", "kestrel", "heron", "osprey"),
          ("What's the name of the staging server?", "Which host is staging on?")),
    Topic("owner", "fact",
          ("{v} owns the billing service, ask her about anything invoicing.",
           "The billing service owner is {v}."),
          ("Priya", "Ingrid", "Mei", "Fatima"),
          ("Who owns the billing service?", "Who should I ask about invoicing code?")),
    Topic("port", "fact",
          ("The internal admin dashboard listens on port {v}.",
           "Admin dashboard: port {v}, internal network only."),
          ("8443", "9090", "7443", "8181"),
          ("Which port does the admin dashboard use?", "Where is the admin dashboard reachable?")),
)

PROGRESSIVE = (
    Topic("export", "constraint",
          ("The CSV export should allow at most {v} rows per page.",),
          ("50", "200", "500", "1000"),
          ("What's the current row limit per page for the CSV export?",
           "How many rows per page can the export return now?"),
          ("Change of plan: raise the CSV export limit to {v} rows per page instead of {old}.",
           "Update from product: the export limit is now {v} rows per page, not {old}.")),
    Topic("timeout", "constraint",
          ("Session timeout for the web app is {v} minutes.",),
          ("15", "30", "45", "90"),
          ("How long is the session timeout now?", "What is the current session timeout?"),
          ("Security changed their mind: the session timeout becomes {v} minutes instead of "
           "{old}.", "New requirement: set the session timeout to {v} minutes, not {old}.")),
    Topic("ratelimit", "constraint",
          ("Rate limit for the public API: {v} requests per minute per key.",),
          ("100", "250", "600", "1200"),
          ("What is the API rate limit now?", "How many requests per minute does a key get?"),
          ("Let's change the API rate limit to {v} requests per minute instead of {old}.",
           "Update: the rate limit is {v} requests per minute now, it used to be {old}.")),
    Topic("color", "preference",
          ("The client wants {v} as the primary brand colour.",),
          ("teal", "navy", "crimson", "amber"),
          ("What's the primary brand colour now?", "Which colour did the client pick in the end?"),
          ("The client switched the primary colour to {v}, no more {old}.",
           "Change: primary brand colour is {v} instead of {old} from now on.")),
    Topic("release", "goal",
          ("We're targeting {v} for the release.",),
          ("March 3", "March 17", "April 7", "April 28"),
          ("When is the release now?", "What's the current release date?"),
          ("The release moves to {v} instead of {old}.",
           "New date: we ship on {v}, not {old} anymore.")),
)

ACKS = (
    "Got it, noted.", "Understood, I'll keep that in mind.", "OK, makes sense.",
    "Sounds good to me.", "Noted, I'll plan around that.", "Alright, thanks for flagging.",
    "Makes sense, I'll update the plan.", "Clear, thanks.",
)

# Ordinary chatter. Some of it is on the planted topics (a database migration, a deploy, a
# latency graph, an upload bug) without ever carrying a planted value.
FILLER_USER = (
    "Can you review the pull request for the settings page?",
    "The unit tests are green again after the fixture fix.",
    "I renamed the helpers module, please rebase your branch.",
    "Let's sync tomorrow morning about the roadmap.",
    "The designer sent new icons for the sidebar.",
    "Did anyone look at the flaky test in the payments suite?",
    "I'm updating the README with the new setup steps.",
    "The staging logs are full of deprecation warnings.",
    "We should add more type hints to the utils package.",
    "Can we split the big controller into smaller handlers?",
    "The database migrations ran cleanly on my laptop.",
    "Deploy of the docs site went fine this morning.",
    "The latency graph looked a bit spiky around noon.",
    "Someone reported that uploads show the wrong progress bar.",
    "Let's write down the onboarding steps for new engineers.",
    "I added a retry around the webhook sender.",
    "The release notes draft is in the shared folder.",
    "Please double-check the translations for the German locale.",
    "We need a better error message when the form is invalid.",
    "I bumped the linter version, a few new warnings showed up.",
    "The customer asked for a demo next Thursday.",
    "Code coverage dropped by two percent this week.",
    "Let's pair on the search endpoint after lunch.",
    "The memory usage of the worker looks stable now.",
    "The login page flickers on slow connections.",
    "I cleaned up the old feature flags.",
    "Could you add logging around the scheduler?",
    "The dashboard query is slow on big accounts.",
    "Our on-call rotation starts again on Monday.",
    "The API docs are missing the pagination parameters.",
    "I'll be out on Friday, the handover notes are in the wiki.",
    "Let's make the config loader fail loudly on unknown keys.",
    "The cron job for reports ran twice yesterday.",
    "The mobile team wants a changelog for the API.",
    "Can we cache the avatar images on the CDN?",
    "The build takes eleven minutes, can we speed it up?",
    "I found a typo in the invoice email template.",
    "We should archive the old prototype repository.",
    "The security scanner flagged an outdated dependency.",
    "Let's add a health endpoint to the worker.",
)

FILLER_ASSISTANT = (
    "Sure, I'll take a look this afternoon.",
    "Done, the branch is rebased and pushed.",
    "I left a few comments on the pull request.",
    "Good catch, I'll open a ticket for it.",
    "I checked, it only happens with the old fixtures.",
    "Sounds good, I'll prepare an agenda.",
    "I pushed a fix, CI is running now.",
    "That should be a small change, I'll handle it.",
    "I added a test that reproduces the problem.",
    "The numbers look reasonable to me.",
    "I'll write that down in the wiki.",
    "Agreed, let's do it in the next iteration.",
    "I profiled it, most of the time goes into serialization.",
    "I updated the docs and linked them in the channel.",
    "Let me know if you want me to pair on it.",
    "I'll ping the owner of that module.",
)


@dataclass(frozen=True)
class ScenarioSpec:
    name: str
    description: str


SCENARIOS: dict[str, ScenarioSpec] = {
    s.name: s
    for s in (
        ScenarioSpec("decision_tracking", "Recall of decisions made early in the conversation"),
        ScenarioSpec("constraint_awareness", "Recall of constraints when they become relevant"),
        ScenarioSpec("failure_memory", "Recall of what was tried and failed"),
        ScenarioSpec("multi_fact_tracking", "Independent recall of several planted facts"),
        ScenarioSpec("goal_tracking", "Persistence of goals and objectives"),
        ScenarioSpec("progressive_requirements",
                     "Values that change twice: the probe must get the latest one, not the "
                     "original"),
    )
}


def all_values() -> set[str]:
    return {v for pool in (DECISIONS, CONSTRAINTS, FAILURES, GOALS, FACTS, PROGRESSIVE)
            for topic in pool for v in topic.values}


# --------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plant:
    topic: Topic
    text: str
    value: str
    final: bool  # the last statement about this topic (probed)
    stale: tuple[str, ...] = ()


def _plants(name: str, rng: random.Random, turns: int) -> list[list[_Plant]]:
    """Per probed topic, its statements in order."""

    def one(pool: Sequence[Topic]) -> list[_Plant]:
        topic = rng.choice(list(pool))
        value = rng.choice(topic.values)
        return [_Plant(topic, rng.choice(topic.statements).format(v=value), value, True)]

    def several(pool: Sequence[Topic], count: int) -> list[list[_Plant]]:
        topics = rng.sample(list(pool), count)
        out = []
        for topic in topics:
            value = rng.choice(topic.values)
            out.append([_Plant(topic, rng.choice(topic.statements).format(v=value), value, True)])
        return out

    if name == "decision_tracking":
        return several(DECISIONS, 2)
    if name == "constraint_awareness":
        return several(CONSTRAINTS, 2)
    if name == "failure_memory":
        return several(FAILURES, 2)
    if name == "goal_tracking":
        return several(GOALS, 2)
    if name == "multi_fact_tracking":
        pools = (DECISIONS, CONSTRAINTS, FACTS, GOALS)
        return [one(pool) for pool in pools]
    if name == "progressive_requirements":
        chains = []
        for topic in rng.sample(list(PROGRESSIVE), 1 if turns < 20 else 2):
            values = rng.sample(list(topic.values), 3)
            chain = [_Plant(topic, topic.statements[0].format(v=values[0]), values[0], False)]
            for i in (1, 2):
                text = rng.choice(topic.updates).format(v=values[i], old=values[i - 1])
                chain.append(_Plant(topic, text, values[i], i == 2, tuple(values[:i])))
            chains.append(chain)
        return chains
    raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")


def _interleave(rng: random.Random, chains: list[list[_Plant]]) -> list[_Plant]:
    """All statements in one order that keeps each chain's own order."""
    pending = [list(c) for c in chains]
    out: list[_Plant] = []
    while any(pending):
        chain = rng.choice([c for c in pending if c])
        out.append(chain.pop(0))
    return out


def session_id_for(scenario: str, turns: int, iteration: int, seed: int) -> str:
    return f"eval-{scenario}-{turns}t-i{iteration}-s{seed}"


def generate(scenario: str, turns: int, iteration: int = 0, seed: int = 0) -> Conversation:
    """One conversation of `turns` turns (even, >= 2x the planted statements)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    rng = random.Random(f"{scenario}/{turns}/{iteration}/{seed}")
    plants = _interleave(rng, _plants(scenario, rng, turns))
    pairs = max(turns // 2, 1)
    region = max(len(plants), int(pairs * PLANT_REGION))
    if len(plants) > region or region > pairs:
        raise ValueError(f"{scenario} plants {len(plants)} statements: needs more than "
                         f"{turns} turns")
    slots = sorted(rng.sample(range(region), len(plants)))
    filler_user = rng.sample(FILLER_USER, len(FILLER_USER))
    filler_assistant = list(FILLER_ASSISTANT)
    out: list[ScriptTurn] = []
    probes: list[Probe] = []
    plant_at = dict(zip(slots, plants, strict=True))
    for pair in range(pairs):
        plant = plant_at.get(pair)
        if plant is None:
            out.append(ScriptTurn(role="user", content=filler_user[pair % len(filler_user)]))
            out.append(ScriptTurn(role="assistant", content=rng.choice(filler_assistant)))
            continue
        out.append(ScriptTurn(role="user", content=plant.text, planted=True))
        if plant.final:
            probes.append(Probe(label=f"{plant.topic.kind}:{plant.topic.key}",
                                query=rng.choice(plant.topic.questions), expected=plant.value,
                                stale=plant.stale, planted_at=len(out) - 1))
        out.append(ScriptTurn(role="assistant", content=rng.choice(ACKS)))
    return Conversation(
        scenario=scenario, turns_target=turns, iteration=iteration, seed=seed,
        session_id=session_id_for(scenario, turns, iteration, seed), turns=tuple(out),
        probes=tuple(probes),
    )


class Suite(BaseModel):
    """Every conversation of one evaluation run, in run order."""

    scenarios: list[str]
    turn_counts: list[int]
    iterations: int = Field(ge=1)
    seed: int
    conversations: list[Conversation]


def build_suite(
    scenarios: Sequence[str], turn_counts: Sequence[int], iterations: int, seed: int
) -> Suite:
    conversations = [
        generate(s, n, i, seed)
        for s in scenarios
        for n in turn_counts
        for i in range(iterations)
    ]
    return Suite(scenarios=list(scenarios), turn_counts=list(turn_counts),
                 iterations=iterations, seed=seed, conversations=conversations)
