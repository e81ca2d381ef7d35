// The client against a live `hivemem serve`: ingest, recall, facts, errors as typed
// classes, an agent key's scope; and the retries against a scripted fetch.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import {
  connect, HivememMemory, NotFound, NotPermitted, StoreUnavailable, Unauthorized,
  ValidationError, RetryLater, retryWait, DEFAULT_RETRY,
} from "../src/index.js";
import type { KeyedTurn, RecallResult } from "../src/index.js";
import { Served } from "./server.js";

const HERE = dirname(fileURLToPath(import.meta.url));
const PACKAGE = join(HERE, "..", "..");

describe("against hivemem serve", () => {
  let served: Served;
  let team: HivememMemory;

  before(async () => {
    served = await Served.start({
      team: ["team", null], alice: ["team", "alice"], other: ["elsewhere", null],
    });
    team = await connect(served.url, { apiKey: served.keys.team!, agentId: "planner" });
  });
  after(async () => { await served?.stop(); });

  test("ingest, then recall finds it", async () => {
    const turn = await team.ingest("s1", "user", "We decided to use Postgres for orders",
                                   { turnId: "t-1", markers: ["decision"] });
    assert.equal(turn.session_id, "s1");
    assert.equal(turn.agent_id, "planner");
    assert.equal(turn.duplicate, false);
    const again = await team.ingest("s1", "user", "We decided to use Postgres for orders",
                                    { turnId: "t-1" });
    assert.equal(again.duplicate, true);
    const many = await team.ingestMany([
      { session_id: "s1", role: "assistant", content: "Noted: Postgres it is." },
      { session_id: "s1", role: "user", content: "Lunch is at noon", timestamp: new Date() },
    ]);
    assert.deepEqual(many.map((t) => t.seq), [2, 3]);
    await team.waitUntilProcessed("s1", 30);
    const result = await team.recall("s1", "which database for orders?", { tokenBudget: 500 });
    assert.ok(result.items.length > 0);
    assert.match(result.items[0]!.content, /Postgres/);
    assert.equal(typeof result.items[0]!.score, "number");
    assert.match(result.context, /Postgres/);
    assert.ok(result.used_tokens <= result.token_budget);
    assert.deepEqual(await team.sessions(), ["s1"]);
    const events = await team.timeline("s1", { kinds: ["turn"] });
    // Ordered by time: the third turn carries the client's clock, a little behind the server's.
    assert.deepEqual(events.map((e) => e.seq).sort(), [1, 2, 3]);
    assert.deepEqual(events.map((e) => e.detail.role).sort(), ["assistant", "user", "user"]);
    const stats = await team.getSessionStats("s1");
    assert.equal(stats.turns_enqueued, 3);
    const info = await team.setSessionInfo("s1", { title: "Storage" });
    assert.equal(info.title, "Storage");
  });

  test("facts: a closed session is reflected into facts", async () => {
    await team.ingestMany([
      { session_id: "s2", role: "user", content: "Decision: we deploy on Fridays only." },
      { session_id: "s2", role: "assistant", content: "OK, deploys happen on Fridays." },
    ]);
    await team.closeSession("s2");
    await team.waitUntilReflected("s2", 60);
    const facts = await team.facts("s2");
    assert.ok(facts.length > 0, "the heuristic reflector states at least one fact");
    assert.ok(facts.some((f) => /Friday/i.test(f.content)));
    const audit = await team.audit(facts[0]!.fact_id);
    assert.equal(audit[0]!.fact_id, facts[0]!.fact_id);
    assert.ok((await team.episodes("s2")).length >= 1);
  });

  test("export and import", async () => {
    const exported = await team.exportJsonl(["s1"]);
    const lines = exported.text.trim().split("\n");
    assert.ok(lines.length > 3, "a header and the session's records");
    assert.ok(Object.values(exported.counts).reduce((a, b) => a + b, 0) > 0);
    const other = await connect(served.url, { apiKey: served.keys.other! });
    await assert.rejects(other.importJsonl(exported.text), ValidationError,
                         "another namespace's records are refused");
    const summary = await team.importJsonl(exported.text);
    assert.equal(summary.mode, "append");
  });

  test("forget: a session's turns, then the session", async () => {
    const a = await team.ingest("gone", "user", "The door code is 4417", { turnId: "g-1" });
    await team.ingest("gone", "user", "Lunch is at noon", { turnId: "g-2" });
    await team.waitUntilProcessed("gone", 30);
    const one = await team.forget("gone", { turnIds: [a.turn_id] });
    assert.equal(one.target, "turns");
    const left = await team.recall("gone", "what is the door code?", { tokenBudget: 500 });
    assert.ok(!left.items.some((i) => i.content.includes("4417")));
    const all = await team.forget("gone");
    assert.deepEqual(all.session_ids, ["gone"]);
    assert.ok(!(await team.sessions()).includes("gone"));
  });

  test("latest: each key's current value through the key index", async () => {
    await team.ingest("keyed", "user", "db: MySQL", { metadata: { topic: "db" } });
    await team.ingest("keyed", "user", "db: Postgres", { metadata: { topic: "db" } });
    await team.ingest("keyed", "user", "cache: Redis", { metadata: { topic: "cache" } });
    await team.ingest("keyed", "user", "gone", { metadata: { topic: "cache", deleted: true } });
    const alice = await connect(served.url, { apiKey: served.keys.alice!, agentId: "alice" });
    await alice.ingest("keyed", "user", "db: SQLite (mine)",
                       { metadata: { topic: "db" }, visibility: "private" });
    await team.waitUntilProcessed("keyed", 30);
    const now = await team.latest("keyed", "topic");
    assert.deepEqual(Object.keys(now), ["db"], "a tombstone ends its key");
    assert.equal(now.db!.turn?.content, "db: Postgres");
    assert.equal(now.db!.key, "db");
    assert.ok(now.db!.since <= now.db!.at);
    const hers = await alice.latest("keyed", "topic", { keys: ["db", "nope"] });
    assert.equal(hers.db!.turn?.content, "db: SQLite (mine)", "her private turn, hers only");
    assert.deepEqual(Object.keys(hers), ["db"]);
    const bare = await team.latest("keyed", "topic", { keys: ["db"], withTurns: false });
    assert.equal(bare.db!.turn ?? null, null);
    assert.equal(bare.db!.turn_id, now.db!.turn_id);
    assert.deepEqual(await team.latest("keyed", "topic", { keys: [] }), {});
    await assert.rejects(team.latest("keyed", "no spaces"),
                         (e: unknown) => e instanceof ValidationError && e.field === "by");
    await assert.rejects(team.latest("keyed", "topic", { keys: ["a", ""] }),
                         (e: unknown) => e instanceof ValidationError && e.field === "keys[1]");
    await assert.rejects(team.latest("missing", "topic"), NotFound);
    const other = await connect(served.url, { apiKey: served.keys.other! });
    await assert.rejects(other.latest("keyed", "topic"), NotFound);
  });

  test("recallLatest: recall and the key index, to keep only current values", async () => {
    await team.ingest("rl", "user", "Billing data lives in MySQL", { metadata: { topic: "db" } });
    const now = await team.ingest("rl", "user", "Billing data moved to Postgres",
                                  { metadata: { topic: "db" } });
    const cached = await team.ingest("rl", "user", "Page fragments are cached in Redis",
                                     { metadata: { topic: "cache" } });
    await team.ingest("rl", "user", "no more cache", { metadata: { topic: "cache", deleted: true } });
    const alice = await connect(served.url, { apiKey: served.keys.alice!, agentId: "alice" });
    const hers = await alice.ingest("rl", "user", "My billing data lives in SQLite",
                                    { metadata: { topic: "db" }, visibility: "private" });
    await team.waitUntilProcessed("rl", 30);
    const topicsOf = (r: RecallResult) => r.items.map((i) => i.metadata.topic)
      .filter((t): t is string => typeof t === "string");
    // What a framework adapter does with it: keep the recalled turns still current.
    const current = (r: RecallResult, latest: Record<string, KeyedTurn>) => r.items
      .filter((i) => latest[String(i.metadata.topic)]?.turn_id === i.source_id)
      .map((i) => i.content);
    const seen: RecallResult[] = [];
    const [result, latest] = await team.recallLatest("rl", "where does billing data live?",
                                                     "topic", {
      tokenBudget: 500, keysOf: (r) => { seen.push(r); return topicsOf(r); },
    });
    assert.equal(seen.length, 1);
    assert.equal(seen[0], result, "keysOf is given the recall's result");
    assert.ok(result.items.some((i) => i.source_id === now.turn_id));
    assert.ok(!result.items.some((i) => i.source_id === hers.turn_id), "alice's private turn");
    assert.deepEqual(latest, await team.latest("rl", "topic", { keys: topicsOf(result),
                                                                withTurns: false }));
    assert.equal(latest.db!.turn_id, now.turn_id);
    assert.equal(latest.db!.turn ?? null, null, "where and when only");
    assert.deepEqual(current(result, latest), ["Billing data moved to Postgres"]);
    // A recalled turn whose key has ended (a tombstone) is not current.
    const [redis, ended] = await team.recallLatest("rl", "page fragments cached in Redis", "topic",
                                                   { keysOf: topicsOf });
    assert.ok(redis.items.some((i) => i.source_id === cached.turn_id));
    assert.equal(ended.cache, undefined);
    assert.ok(!current(redis, ended).includes("Page fragments are cached in Redis"));
    // No keysOf: every key of the index this handle may see.
    const [, every] = await team.recallLatest("rl", "billing", "topic");
    assert.deepEqual(Object.keys(every), ["db"]);
    assert.equal(every.db!.turn_id, now.turn_id);
    const [, mine] = await alice.recallLatest("rl", "billing", "topic", { keysOf: () => ["db"] });
    assert.equal(mine.db!.turn_id, hers.turn_id, "an agent sees its own private value");
    const [, none] = await team.recallLatest("rl", "billing", "topic", { keysOf: () => [] });
    assert.deepEqual(none, {});
    await assert.rejects(team.recallLatest("rl", "billing", "topic", { keysOf: () => "db" }),
                         (e: unknown) => e instanceof ValidationError && e.field === "keys");
    await assert.rejects(team.recallLatest("rl", "billing", "no spaces"),
                         (e: unknown) => e instanceof ValidationError && e.field === "by");
    await assert.rejects(team.recallLatest("missing", "billing", "topic"), NotFound);
    const other = await connect(served.url, { apiKey: served.keys.other! });
    await assert.rejects(other.recallLatest("rl", "billing", "topic"), NotFound);
  });

  test("errors are typed", async () => {
    await assert.rejects(connect(served.url, { apiKey: "hm_nope_nope" }), Unauthorized);
    await assert.rejects(team.recall("missing", "anything"), NotFound);
    await assert.rejects(
      team.ingest("s1", "robot" as never, "hello"),
      (e: unknown) => e instanceof ValidationError && e.field === "role");
    await assert.rejects(team.ingest("bad id!", "user", "x"),
                         (e: unknown) => e instanceof ValidationError && e.field === "session_id");
    await assert.rejects(team.ingestMany([
      { session_id: "s3", role: "user", content: "fine" },
      { session_id: "s3", role: "user", content: "" },
    ]), (e: unknown) => e instanceof ValidationError && /turns\[1\]/.test(e.field));
    await assert.rejects(team.sessionInfo("s3"), NotFound); // nothing of the batch was written
    await assert.rejects(connect("http://127.0.0.1:9", { apiKey: "k", retry: { attempts: 2,
      backoffS: 0.01 } }), StoreUnavailable);
  });

  test("an agent key acts as its agent only, in its namespace only", async () => {
    const alice = await connect(served.url, { apiKey: served.keys.alice!, agentId: "alice" });
    await alice.ingest("s4", "user", "My locker code is 4411", { visibility: "private" });
    await alice.ingest("s4", "user", "The team offsite is in Porto");
    await alice.waitUntilProcessed("s4", 30);
    const mine = await alice.recall("s4", "locker code");
    assert.ok(mine.items.some((i) => i.content.includes("4411")));
    const planner = await team.recall("s4", "locker code offsite");
    assert.ok(!planner.items.some((i) => i.content.includes("4411")), "private to alice");
    assert.ok(planner.items.some((i) => i.content.includes("Porto")), "shared with the team");
    // The key is alice's: acting as another agent is refused by the server.
    const bob = await connect(served.url, { apiKey: served.keys.alice!, agentId: "bob" });
    await assert.rejects(bob.ingest("s4", "user", "hi"), Unauthorized);
    assert.throws(() => alice.pin().forAgent("bob"), NotPermitted);
    // Another namespace's key does not see the session at all.
    const other = await connect(served.url, { apiKey: served.keys.other! });
    assert.equal(other.namespace, "elsewhere");
    await assert.rejects(other.recall("s4", "offsite"), NotFound);
    assert.deepEqual(await other.sessions(), []);
  });
});

describe("retries (a scripted fetch)", () => {
  function scripted(answers: Array<[number, Record<string, string>?]>) {
    const calls: string[] = [];
    const fake = (async (input: URL | RequestInfo) => {
      calls.push(String(input));
      const [status, headers] = answers.shift() ?? [500, {}];
      const body = status === 200 ? { namespace: "n" } : { title: "busy", status };
      return new Response(JSON.stringify(body), { status, headers });
    }) as typeof fetch;
    return { calls, fake };
  }

  test("429 and 503 are retried after Retry-After, then succeed", async () => {
    const { calls, fake } = scripted([[429, { "Retry-After": "0" }], [503, {}], [200]]);
    const memory = await connect("http://x", { apiKey: "k", fetch: fake,
                                               retry: { backoffS: 0.001 } });
    assert.equal(memory.namespace, "n");
    assert.equal(calls.length, 3);
  });

  test("the last attempt's error is thrown; other errors are not retried", async () => {
    const busy = scripted([[429, {}], [429, {}], [429, {}]]);
    await assert.rejects(connect("http://x", { apiKey: "k", fetch: busy.fake,
                                               retry: { attempts: 3, backoffS: 0.001 } }),
                         RetryLater);
    assert.equal(busy.calls.length, 3);
    const refused = scripted([[401, {}], [200]]);
    await assert.rejects(connect("http://x", { apiKey: "k", fetch: refused.fake }), Unauthorized);
    assert.equal(refused.calls.length, 1);
  });

  test("the wait: Retry-After seconds or date, else exponential, capped", () => {
    assert.equal(retryWait(DEFAULT_RETRY, 0, "2"), 2);
    assert.equal(retryWait(DEFAULT_RETRY, 0, new Date(10_000).toUTCString(), 5_000), 5);
    assert.equal(retryWait(DEFAULT_RETRY, 3, null), 1.6);
    assert.equal(retryWait(DEFAULT_RETRY, 0, "3600"), 30);
  });
});

test("src/schema.ts is what scripts/gen-types.mjs makes of docs/openapi.json", async () => {
  const script = join(PACKAGE, "scripts", "gen-types.mjs");
  const { generate } = await import(script) as { generate: () => string };
  assert.equal(readFileSync(join(PACKAGE, "src", "schema.ts"), "utf8"), generate(),
               "run `npm run generate`");
});
