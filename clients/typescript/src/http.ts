// The wire: one request at a time over fetch, retried as the Python remote client retries:
// a 429 (backpressure) or a 503 (a store is down) after the answer's Retry-After (else an
// exponential backoff), and a connection that could not be opened. Nothing else is retried,
// so a call that reached the server runs once (an ingest is safe to resend anyway: every
// turn can carry its turn_id).

import { errorOf, HivememError, StoreUnavailable } from "./errors.js";

export interface RetryPolicy {
  /** Attempts in all (default 5). */
  attempts: number;
  /** The first backoff, doubled each attempt, when the server sends no Retry-After (0.2 s). */
  backoffS: number;
  /** The longest wait between attempts (30 s). */
  maxWaitS: number;
  /** The statuses retried (429, 503). */
  statuses: number[];
}

export const DEFAULT_RETRY: RetryPolicy = {
  attempts: 5, backoffS: 0.2, maxWaitS: 30, statuses: [429, 503],
};

export interface Request {
  method: "GET" | "POST" | "PATCH" | "DELETE";
  path: string;
  query?: Record<string, string | number | boolean | string[] | null | undefined>;
  body?: unknown;
  /** A raw body (an upload) and its content type, instead of `body` as JSON. */
  raw?: { content: string | Uint8Array; contentType: string };
  /** This request's own timeout (a long poll's), in seconds. */
  timeoutS?: number;
}

/** Seconds to wait before the next attempt: the answer's Retry-After (seconds or an HTTP
 * date) when it has one, else backoff * 2^attempt; at most maxWaitS. */
export function retryWait(policy: RetryPolicy, attempt: number, retryAfter: string | null,
                          now: number = Date.now()): number {
  if (retryAfter) {
    const seconds = Number(retryAfter);
    const after = Number.isFinite(seconds) ? seconds : (Date.parse(retryAfter) - now) / 1000;
    if (Number.isFinite(after)) return Math.min(Math.max(after, 0), policy.maxWaitS);
  }
  return Math.min(policy.backoffS * 2 ** attempt, policy.maxWaitS);
}

/** A path segment: ids are [A-Za-z0-9._:-], but "." and ".." would be dot segments. */
export function segment(value: string): string {
  const quoted = encodeURIComponent(value);
  return /^\.+$/.test(value) ? quoted.replace(/\./g, "%2E") : quoted;
}

export class Transport {
  readonly baseUrl: string;

  constructor(baseUrl: string, private readonly apiKey: string,
              private readonly timeoutS: number, readonly retry: RetryPolicy,
              private readonly fetchFn: typeof fetch = fetch) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
  }

  async send<T>(request: Request): Promise<T> {
    const response = await this.sendRaw(request);
    return await response.json() as T;
  }

  /** The successful response itself (its body unread), after the same retries. */
  async sendRaw(request: Request): Promise<Response> {
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      try {
        response = await this.once(request);
      } catch (error) {
        if (error instanceof HivememError) throw error;
        const failure = new StoreUnavailable("api", `${this.baseUrl}: ${describe(error)}`);
        if (!unopened(error) || attempt + 1 >= this.retry.attempts) throw failure;
        await sleep(retryWait(this.retry, attempt, null));
        continue;
      }
      if (response.ok) return response;
      const body = await response.json().catch(() => ({}));
      const error = errorOf(response.status, response.statusText, body);
      if (!this.retry.statuses.includes(response.status) || attempt + 1 >= this.retry.attempts) {
        throw error;
      }
      await sleep(retryWait(this.retry, attempt, response.headers.get("retry-after")));
    }
  }

  private async once(request: Request): Promise<Response> {
    const url = new URL(this.baseUrl + request.path);
    for (const [key, value] of Object.entries(request.query ?? {})) {
      if (value === null || value === undefined) continue;
      for (const one of Array.isArray(value) ? value : [value]) {
        url.searchParams.append(key, String(one));
      }
    }
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.apiKey}`, "User-Agent": "hivemem-typescript/0.1.0",
    };
    let body: string | Uint8Array | undefined;
    if (request.raw !== undefined) {
      headers["Content-Type"] = request.raw.contentType;
      body = request.raw.content;
    } else if (request.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(request.body);
    }
    return await this.fetchFn(url, {
      method: request.method, headers, body: body as BodyInit | undefined,
      signal: AbortSignal.timeout((request.timeoutS ?? this.timeoutS) * 1000),
    });
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    return cause?.code ? `${error.name}: ${cause.code}` : `${error.name}: ${error.message}`;
  }
  return String(error);
}

/** A connection that never opened (the request never left): safe to retry. */
function unopened(error: unknown): boolean {
  const code = (error as { cause?: { code?: string } } | null)?.cause?.code;
  return code === "ECONNREFUSED" || code === "ENOTFOUND"
    || code === "EAI_AGAIN" || code === "UND_ERR_CONNECT_TIMEOUT";
}

function sleep(seconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, seconds * 1000));
}
