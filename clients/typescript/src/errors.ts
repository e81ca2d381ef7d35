// The errors the client throws: one class per kind of failure, the same kinds the Python SDK
// raises (hivemem.errors), read from the server's RFC 9457 problem body.

/** Every error of this client. */
export class HivememError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** Bad input (HTTP 400/413/422, or refused before sending): `field` names what is wrong. */
export class ValidationError extends HivememError {
  constructor(readonly field: string, readonly detail: string) {
    super(`${field}: ${detail}`);
  }
}

/** A session (or fact) that does not exist or is not this key's namespace's (HTTP 404). */
export class NotFound extends HivememError {
  constructor(readonly field: string, readonly detail: string) {
    super(`${field}: ${detail}`);
  }
}

/** The key is missing, unknown or revoked, or may not do this (HTTP 401/403). */
export class Unauthorized extends HivememError {}

/** A handle pinned to its agent was asked to act as another one (refused before sending). */
export class NotPermitted extends HivememError {
  constructor(readonly field: string, readonly detail: string) {
    super(`${field}: ${detail}`);
  }
}

/** Backpressure: the server asked to slow down (HTTP 429) and the retries ran out. */
export class RetryLater extends HivememError {}

/** The server, or a store behind it, cannot be reached (HTTP 503, a refused connection). */
export class StoreUnavailable extends HivememError {
  constructor(readonly store: string, readonly detail: string) {
    super(`${store} unavailable: ${detail}`);
  }
}

/** The server is misconfigured (HTTP 500 "Server misconfigured"). */
export class ConfigurationError extends HivememError {}

/** The turns were not processed within the wait's timeout. */
export class ProcessingTimeout extends HivememError {
  constructor(readonly sessionId: string, readonly processed: number,
              readonly target: number, readonly timeoutS: number) {
    super(`session ${sessionId}: ${processed}/${target} processed after ${timeoutS}s`);
  }
}

/** A reflection of the session failed (wait_until_reflected). */
export class ReflectionFailed extends HivememError {
  constructor(readonly sessionId: string, readonly index: number, readonly reason: string) {
    super(`session ${sessionId}: reflection of episode ${index} failed: ${reason}`);
  }
}

/** Any other answer of the API that is an error. */
export class ApiError extends HivememError {
  constructor(readonly status: number, readonly title: string,
              readonly detail: string | null) {
    super(detail ? `${status} ${title}: ${detail}` : `${status} ${title}`);
  }
}

interface ProblemBody { title?: unknown; detail?: unknown; field?: unknown }

/** The error a problem answer stands for (as the Python remote client's `error_of`). */
export function errorOf(status: number, statusText: string, body: unknown): HivememError {
  const problem: ProblemBody = body && typeof body === "object" ? body as ProblemBody : {};
  const title = String(problem.title ?? (statusText || "Error"));
  const detail = problem.detail == null ? null : String(problem.detail);
  const field = problem.field ? String(problem.field) : null;
  let message = detail ?? title;
  if (field && message.startsWith(`${field}: `)) message = message.slice(field.length + 2);
  if (status === 404) {
    return field || detail ? new NotFound(field ?? "session_id", message)
      : new ApiError(status, title, detail);
  }
  if (status === 400 || status === 413 || status === 422) {
    return new ValidationError(field ?? "body", message);
  }
  if (status === 401 || status === 403) return new Unauthorized(message);
  if (status === 429) return new RetryLater(message);
  if (status === 503) return new StoreUnavailable("api", message);
  if (status === 500 && title === "Server misconfigured") return new ConfigurationError(message);
  return new ApiError(status, title, detail);
}
