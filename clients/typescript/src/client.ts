// `connect(url, { apiKey, agentId })`: a handle on a running `hivemem serve`, in the API
// key's namespace, acting as one agent: the scoped surface of the Python `hivemem.connect`
// (methods in camelCase, results as the HTTP API returns them).

import { NotPermitted, ProcessingTimeout, ReflectionFailed, ValidationError } from "./errors.js";
import { DEFAULT_RETRY, Transport, segment } from "./http.js";
import type { RetryPolicy } from "./http.js";
import type {
  AuditEvent, BatchTurnIn, ContextOut, Episode, Fact, ForgetReceipt, ImportSummary,
  KeyedTurn, RelatedSession, SessionInfo, SessionStats, TurnOut,
} from "./schema.js";
import type { Preset, RecallResult, Role, TimelineEvent } from "./types.js";

const ID = /^(?:[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,127}|\.[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,126}|\.\.[A-Za-z0-9._:-]{1,126})$/;
const WAIT_SLACK_S = 10; // a long poll's HTTP timeout beyond the wait it asks for

export interface ConnectOptions {
  /** An `hm_...` key (`hivemem apikey create NAMESPACE [--agent ID]`). */
  apiKey: string;
  /** The agent the handle acts as (none: the namespace's shared memory only). */
  agentId?: string | null;
  /** Seconds before a request is abandoned (default 30). */
  timeoutS?: number;
  /** How 429/503 answers and unopened connections are retried. */
  retry?: Partial<RetryPolicy>;
  /** Another fetch (tests, proxies). */
  fetch?: typeof fetch;
}

export interface TurnOptions {
  markers?: string[];
  metadata?: Record<string, unknown>;
  /** RFC 3339 with a timezone, or a Date (default: now). */
  timestamp?: string | Date;
  /** Your id for the turn: sending it again is a no-op (safe retries). */
  turnId?: string;
  visibility?: "shared" | "private";
}

export type TurnRow = Omit<BatchTurnIn, "agent_id" | "timestamp"> & {
  timestamp?: string | Date | null;
};

export interface RecallOptions {
  tokenBudget?: number;
  preset?: Preset;
  limit?: number;
  includeHistory?: boolean;
  explain?: boolean;
  relatedSessions?: string[];
}

function checkId(field: string, value: unknown): string {
  if (typeof value !== "string" || !ID.test(value)) {
    throw new ValidationError(field, "must match [A-Za-z0-9._:-]{1,128} and not be '.' or '..'");
  }
  return value;
}

function sessionPath(sessionId: string, tail = ""): string {
  return `/v1/sessions/${segment(checkId("session_id", sessionId))}${tail}`;
}

function stamp(value: string | Date | null | undefined): string | undefined {
  return value instanceof Date ? value.toISOString() : value ?? undefined;
}

/** Connects and checks the key at once (`Unauthorized` when the server refuses it). */
export async function connect(url: string, options: ConnectOptions): Promise<HivememMemory> {
  const agentId = options.agentId ?? null;
  if (agentId !== null) checkId("agent_id", agentId);
  const transport = new Transport(url, options.apiKey, options.timeoutS ?? 30,
                                  { ...DEFAULT_RETRY, ...options.retry }, options.fetch);
  const who = await transport.send<{ namespace: string }>({ method: "GET", path: "/v1/whoami" });
  return new HivememMemory(transport, who.namespace, agentId, false);
}

/** What one agent of one namespace may do, over the HTTP API. */
export class HivememMemory {
  /** @internal use `connect` */
  constructor(private readonly transport: Transport, readonly namespace: string,
              readonly agentId: string | null, readonly pinned: boolean) {}

  /** This handle, unable to become another agent (what an agent-bound key gets). */
  pin(): HivememMemory {
    if (this.agentId === null) throw new ValidationError("agent_id", "a pinned handle needs one");
    return new HivememMemory(this.transport, this.namespace, this.agentId, true);
  }

  /** The same namespace as another agent (or none), over the same connection. */
  forAgent(agentId: string | null): HivememMemory {
    if (this.pinned) {
      if (agentId === null || agentId === this.agentId) return this;
      throw new NotPermitted("agent_id", `this handle acts as agent '${this.agentId}' only`);
    }
    if (agentId !== null) checkId("agent_id", agentId);
    return new HivememMemory(this.transport, this.namespace, agentId, false);
  }

  // -- writes ------------------------------------------------------------------------------

  /** Remember one turn, written by the bound agent. */
  async ingest(sessionId: string, role: Role, content: string,
               options: TurnOptions = {}): Promise<TurnOut> {
    return await this.transport.send<TurnOut>({
      method: "POST", path: sessionPath(sessionId, "/turns"),
      body: { role, content, agent_id: this.agentId, markers: options.markers,
              metadata: options.metadata, timestamp: stamp(options.timestamp),
              turn_id: options.turnId, visibility: options.visibility ?? "shared" },
    });
  }

  /** Remember many turns in one request: all are written, or none (a bad one names its
   * field, `turns[i].field`). */
  async ingestMany(turns: TurnRow[]): Promise<TurnOut[]> {
    const rows = turns.map((turn, index) => {
      const raw = turn as TurnRow & { agent_id?: unknown; namespace?: unknown };
      if (raw.agent_id !== undefined && raw.agent_id !== this.agentId) {
        throw new ValidationError(`turns[${index}].agent_id`, "is the handle's");
      }
      if (raw.namespace !== undefined && raw.namespace !== this.namespace) {
        throw new ValidationError(`turns[${index}].namespace`, "is the handle's");
      }
      checkId(`turns[${index}].session_id`, turn.session_id);
      const { namespace: _ignored, ...rest } = raw;
      return { ...rest, agent_id: this.agentId, timestamp: stamp(turn.timestamp) };
    });
    const out = await this.transport.send<{ turns: TurnOut[] }>({
      method: "POST", path: "/v1/turns/batch", body: { turns: rows },
    });
    return out.turns;
  }

  /** Close the session's open episode after the turns so far; returns its last seq. */
  async closeEpisode(sessionId: string): Promise<number> {
    return await this.close(sessionId, false);
  }

  /** The session is over: its open episode closes, whatever its size. */
  async closeSession(sessionId: string): Promise<number> {
    return await this.close(sessionId, true);
  }

  private async close(sessionId: string, sessionEnd: boolean): Promise<number> {
    const out = await this.transport.send<{ seq: number }>({
      method: "POST", path: sessionPath(sessionId, "/episodes/close"),
      body: { session_end: sessionEnd },
    });
    return out.seq;
  }

  /** Name the session (and, with a bound agent, record it as the session's agent). */
  async setSessionInfo(sessionId: string, info: { title?: string | null }): Promise<SessionInfo> {
    return await this.transport.send<SessionInfo>({
      method: "PATCH", path: sessionPath(sessionId),
      body: { title: info.title ?? null, agent_id: this.agentId },
    });
  }

  // -- reads -------------------------------------------------------------------------------

  /** The context that matters for `query`, best first, within the token budget. */
  async recall(sessionId: string, query: string,
               options: RecallOptions = {}): Promise<RecallResult> {
    return await this.transport.send<RecallResult>({
      method: "POST", path: sessionPath(sessionId, "/recall"),
      body: { query, agent_id: this.agentId, token_budget: options.tokenBudget ?? null,
              preset: options.preset ?? null, limit: options.limit ?? null,
              include_history: options.includeHistory ?? false,
              explain: options.explain ?? false,
              related_sessions: options.relatedSessions ?? [] },
    });
  }

  /** The session's facts this handle may see, oldest first. */
  async facts(sessionId: string, options: { includeHistory?: boolean;
    includeInactive?: boolean; includeArchived?: boolean } = {}): Promise<Fact[]> {
    const out = await this.transport.send<{ facts: Fact[] }>({
      method: "GET", path: sessionPath(sessionId, "/facts/full"),
      query: { agent_id: this.agentId, include_history: options.includeHistory ?? false,
               include_inactive: options.includeInactive ?? false,
               include_archived: options.includeArchived ?? false },
    });
    return out.facts;
  }

  /** The session's closed episodes this handle may see, oldest first. */
  async episodes(sessionId: string): Promise<Episode[]> {
    const out = await this.transport.send<{ episodes: Episode[] }>({
      method: "GET", path: sessionPath(sessionId, "/episodes"), query: { agent_id: this.agentId },
    });
    return out.episodes;
  }

  /** Turns, episodes, open-episode turns, markers, and each stage's backlog. */
  async getSessionStats(sessionId: string): Promise<SessionStats> {
    return await this.transport.send<SessionStats>({
      method: "GET", path: sessionPath(sessionId, "/stats/full"),
    });
  }

  /** Wait until every turn ingested so far is recallable (`ProcessingTimeout` otherwise). */
  async waitUntilProcessed(sessionId: string, timeoutS = 30,
                           stage: "embed" | "boundary" = "embed"): Promise<SessionStats> {
    const out = await this.transport.send<{ done: boolean; processed?: number; target?: number;
      stats?: SessionStats | null }>({
      method: "POST", path: sessionPath(sessionId, "/wait"), body: { stage, timeout: timeoutS },
      timeoutS: timeoutS + WAIT_SLACK_S,
    });
    if (!out.done || !out.stats) {
      throw new ProcessingTimeout(sessionId, out.processed ?? 0, out.target ?? 0, timeoutS);
    }
    return out.stats;
  }

  /** Wait until every episode closed so far is reflected; returns the last index. */
  async waitUntilReflected(sessionId: string, timeoutS = 30): Promise<number> {
    const out = await this.transport.send<{ outcome: string; index?: number; processed?: number;
      target?: number; error?: string | null }>({
      method: "POST", path: sessionPath(sessionId, "/wait-reflected"), body: { timeout: timeoutS },
      timeoutS: timeoutS + WAIT_SLACK_S,
    });
    if (out.outcome === "failed") {
      throw new ReflectionFailed(sessionId, out.index ?? 0, out.error ?? "");
    }
    if (out.outcome !== "done") {
      throw new ProcessingTimeout(sessionId, out.processed ?? 0, out.target ?? 0, timeoutS);
    }
    return out.index ?? 0;
  }

  /** This namespace's sessions. */
  async sessions(): Promise<string[]> {
    const out = await this.transport.send<{ sessions: string[] }>({
      method: "GET", path: "/v1/sessions",
    });
    return out.sessions;
  }

  /** The newest reflection traces this handle may see (secrets redacted). */
  async traces(count = 20, sessionId?: string): Promise<Record<string, unknown>[]> {
    const out = await this.transport.send<{ traces: Record<string, unknown>[] }>({
      method: "GET", path: sessionId === undefined ? "/v1/traces" : sessionPath(sessionId, "/traces"),
      query: { agent_id: this.agentId, count },
    });
    return out.traces;
  }

  /** Turns, episode closes and fact changes this handle may see, oldest first. */
  async timeline(sessionId: string, options: { kinds?: Array<"turn" | "episode" | "fact">;
    limit?: number } = {}): Promise<TimelineEvent[]> {
    const out = await this.transport.send<{ events: TimelineEvent[] }>({
      method: "GET", path: sessionPath(sessionId, "/timeline"),
      query: { agent_id: this.agentId, kinds: options.kinds, limit: options.limit },
    });
    return out.events;
  }

  /** The `limit` newest events this handle may see older than `cursor` (a page's
   * `nextCursor`; none: the newest), oldest first; `nextCursor` null: no older page. */
  async timelinePage(sessionId: string, options: { kinds?: Array<"turn" | "episode" | "fact">;
    limit?: number; cursor?: string } = {}): Promise<{ events: TimelineEvent[];
    nextCursor: string | null }> {
    const out = await this.transport.send<{ events: TimelineEvent[]; next_cursor?: string | null }>({
      method: "GET", path: sessionPath(sessionId, "/timeline"),
      query: { agent_id: this.agentId, kinds: options.kinds, limit: options.limit ?? 100,
        cursor: options.cursor },
    });
    return { events: out.events, nextCursor: out.next_cursor ?? null };
  }

  /** Each key's current value this handle may see: the newest turn whose `metadata[by]` is
   * that key (one with `"deleted": true` in its metadata ends the key), through the
   * server's key index, not the session's every turn; only `keys` when given. `withTurns`
   * false: where and when only (`turn` null). Reads stored turns (`waitUntilProcessed`
   * first to read your own writes). */
  async latest(sessionId: string, by: string, options: { keys?: string[];
    withTurns?: boolean } = {}): Promise<Record<string, KeyedTurn>> {
    const { keys } = options;
    if (keys !== undefined && !Array.isArray(keys)) {
      throw new ValidationError("keys", "must be a list of keys, not one string");
    }
    // A query string cannot carry an empty list: `[]` asks for every key without turns
    // (which still checks the session and `by`) and keeps nothing of the answer.
    const none = keys !== undefined && keys.length === 0;
    const out = await this.transport.send<{ latest: Record<string, KeyedTurn> }>({
      method: "GET", path: sessionPath(sessionId, "/latest"),
      query: { agent_id: this.agentId, by, keys: none ? undefined : keys,
        with_turns: !none && (options.withTurns ?? true) },
    });
    return none ? {} : out.latest;
  }

  /** `recall`, then `latest(sessionId, by, { keys: keysOf(result), withTurns: false })`
   * (`keysOf` absent: every key of the index), as the Python `recall_latest`: e.g. to keep
   * only the recalled turns that are still their key's current value. Two requests here,
   * each checked by the server (the embedded Python handle makes it one service call). */
  async recallLatest(sessionId: string, query: string, by: string, options: {
    tokenBudget?: number; preset?: Preset;
    keysOf?: (result: RecallResult) => Iterable<string>;
  } = {}): Promise<[RecallResult, Record<string, KeyedTurn>]> {
    const result = await this.recall(sessionId, query,
                                     { tokenBudget: options.tokenBudget, preset: options.preset });
    const named = options.keysOf?.(result);
    if (typeof named === "string") {
      throw new ValidationError("keys", "keysOf must return a list of keys, not one string");
    }
    const keys = named === undefined ? undefined : [...named];
    return [result, await this.latest(sessionId, by, { keys, withTurns: false })];
  }

  /** Erase a session (or only these turns / facts of it) everywhere it was copied, on disk
   * too; the receipt says what was removed. An agent key forgets only what its agent wrote. */
  async forget(sessionId: string, options: { turnIds?: string[]; factIds?: string[] } = {},
  ): Promise<ForgetReceipt> {
    const turnIds = options.turnIds ?? [];
    const factIds = options.factIds ?? [];
    if (turnIds.length === 0 && factIds.length === 0) {
      return await this.transport.send<ForgetReceipt>({
        method: "DELETE", path: sessionPath(sessionId),
      });
    }
    return await this.transport.send<ForgetReceipt>({
      method: "POST", path: sessionPath(sessionId, "/forget"),
      body: { turn_ids: turnIds, fact_ids: factIds },
    });
  }

  /** Erase one fact and its versions (`NotFound` for a fact this handle may not see). */
  async forgetFact(factId: string): Promise<ForgetReceipt> {
    return await this.transport.send<ForgetReceipt>({
      method: "DELETE", path: `/v1/facts/${segment(checkId("memory_id", factId))}`,
    });
  }

  /** Why a fact has its status (`NotFound` for a fact this handle may not see). */
  async audit(factId: string): Promise<AuditEvent[]> {
    const out = await this.transport.send<{ events: AuditEvent[] }>({
      method: "GET", path: `/v1/facts/${segment(checkId("memory_id", factId))}/audit`,
      query: { agent_id: this.agentId },
    });
    return out.events;
  }

  /** Title, agent, created, last active, and how much the session holds. */
  async sessionInfo(sessionId: string): Promise<SessionInfo> {
    return await this.transport.send<SessionInfo>({
      method: "GET", path: sessionPath(sessionId), query: { agent_id: this.agentId },
    });
  }

  /** This namespace's other sessions about the same things. */
  async relatedSessions(sessionId: string, options: { limit?: number; minScore?: number } = {},
  ): Promise<RelatedSession[]> {
    const out = await this.transport.send<{ related: RelatedSession[] }>({
      method: "GET", path: sessionPath(sessionId, "/related"),
      query: { agent_id: this.agentId, limit: options.limit ?? 5,
               min_score: options.minScore ?? 0.05 },
    });
    return out.related;
  }

  /** The session's header and recall for `query` over it and its `related` sessions. */
  async sessionContext(sessionId: string, query: string, options: { tokenBudget?: number;
    related?: number; preset?: Preset } = {}): Promise<ContextOut> {
    return await this.transport.send<ContextOut>({
      method: "POST", path: sessionPath(sessionId, "/context"),
      body: { query, agent_id: this.agentId, token_budget: options.tokenBudget ?? null,
              related: options.related ?? 0, preset: options.preset ?? null },
    });
  }

  // -- export and import -------------------------------------------------------------------

  /** This namespace's sessions (default: all), as this handle sees them, as a versioned
   * JSON Lines export (`text`), with its record counts. */
  async exportJsonl(sessionIds?: string[], options: { vectors?: boolean } = {},
  ): Promise<{ text: string; counts: Record<string, number> }> {
    for (const sid of sessionIds ?? []) checkId("session_ids", sid);
    const response = await this.transport.sendRaw({
      method: "GET", path: "/v1/export",
      query: { agent_id: this.agentId, vectors: options.vectors ?? false, gzip: false,
               session_id: sessionIds },
    });
    const counts = JSON.parse(response.headers.get("x-hivemem-export-counts") ?? "{}");
    return { text: await response.text(), counts };
  }

  /** Append an export (JSON Lines text, or gzip bytes with `gzip: true`) to this
   * namespace: every record must be this namespace's; taken ids are renamed. */
  async importJsonl(content: string | Uint8Array,
                    options: { gzip?: boolean } = {}): Promise<ImportSummary> {
    const gzip = options.gzip ?? false;
    return await this.transport.send<ImportSummary>({
      method: "POST", path: "/v1/import", query: { mode: "append", gzip },
      raw: { content, contentType: gzip ? "application/gzip" : "application/x-ndjson" },
    });
  }
}
