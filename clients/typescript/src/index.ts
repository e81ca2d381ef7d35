// hivemem for TypeScript: a client of the hivemem HTTP API (`hivemem serve`), with the
// scoped surface of the Python `hivemem.connect`. No runtime dependency beyond fetch.

export { connect, HivememMemory } from "./client.js";
export type { ConnectOptions, RecallOptions, TurnOptions, TurnRow } from "./client.js";
export {
  ApiError, ConfigurationError, HivememError, NotFound, NotPermitted, ProcessingTimeout,
  ReflectionFailed, RetryLater, StoreUnavailable, Unauthorized, ValidationError, errorOf,
} from "./errors.js";
export { DEFAULT_RETRY, retryWait } from "./http.js";
export type { RetryPolicy } from "./http.js";
export type * from "./schema.js";
export type * from "./types.js";
