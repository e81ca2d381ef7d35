// Result types the OpenAPI document leaves open (recall items, timeline events): written
// from the Python SDK's models (hivemem.ContextItem, hivemem.TimelineEvent).

import type { RecallOut, Role } from "./schema.js";

export type { Role } from "./schema.js"; // the OpenAPI document's since it names `Turn`
export type Preset = "cheap" | "balanced" | "high_recall" | "agent_state";

/** How an item's score was made (hivemem.ScoreComponents). */
export interface ScoreComponents {
  dense: number; lexical: number; relevance: number; neighbour: number; answer: number;
  recency: number; marker: number; kind: number; episode: number; confidence: number;
  conflict: number; stale: number; other_person: number; session: number;
  restates: number; final: number;
  [name: string]: number;
}

/** One recalled item: a turn, a fact or an episode (hivemem.ContextItem). */
export interface ContextItem {
  content: string;
  role: Role | null;
  score: number;
  components: ScoreComponents;
  token_count: number;
  source_type: "turn" | "fact" | "episode";
  source_id: string;
  session_id: string;
  agent_id: string | null;
  seq: number | null;
  timestamp: string | null;
  markers: string[];
  metadata: Record<string, unknown>;
  namespace: string;
  visibility: "private" | "shared";
}

/** An item recall left out, and why (with `explain`). */
export interface ExcludedItem {
  source_type: "turn" | "fact" | "episode";
  source_id: string;
  session_id: string;
  content: string;
  score: number;
  components: ScoreComponents;
  token_count: number;
  reason: "budget" | "threshold" | "duplicate" | "superseded" | "quota" | "limit";
  detail: string;
}

/** What recall returns: the items, best first; `context` is them as prompt text. */
export interface RecallResult extends Omit<RecallOut, "items" | "excluded"> {
  items: ContextItem[];
  excluded: ExcludedItem[];
}

/** One event of a session's timeline (hivemem.TimelineEvent). */
export interface TimelineEvent {
  at: string;
  seq: number;
  kind: "turn" | "episode" | "fact";
  session_id: string;
  ref_id: string;
  actor: string | null;
  summary: string;
  detail: Record<string, unknown>;
}
