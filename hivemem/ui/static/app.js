// hivemem explorer: a static page over the public HTTP API (no framework, no build step).
// Every call carries the key the user typed in; the page can show only what that key reads.
// Memory text is untrusted: it is only ever set as textContent, never parsed as HTML.
"use strict";

const KEY_STORE = "hivemem.key";
const PAGE = 100;              // timeline events per page
// The cursor of the page before each timeline page seen (page cursor -> newer page's cursor,
// "" for the newest page): the "newer" link goes back without the server keeping anything.
const newerCursor = new Map();
const POLL_MS = 2500;          // live timeline: how often the session's stats are checked
const SESSION_INFO_CAP = 300;  // sessions whose headers the list reads (the rest by search)
const PRESETS = ["", "cheap", "balanced", "high_recall", "agent_state"];
const SCORE_PARTS = ["dense", "lexical", "neighbour", "answer", "recency", "marker", "kind",
  "episode", "confidence", "conflict", "stale", "other_person", "session", "restates"];

let pollTimer = null;
let whoami = null;
let renderToken = 0;           // a newer navigation makes older async renders give up

// -- small helpers ------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// Long hex ids shortened to their first 8 characters (the full text stays in a title).
function shortIds(text) { return String(text).replace(/\b([0-9a-f]{8})[0-9a-f]{24}\b/g, "$1…"); }

function badge(text, cls) { return h("span", { class: `badge ${cls || ""}` }, text); }
function vis(v) { return badge(v || "shared", v === "private" ? "private" : "shared"); }
function status(s) { return badge(s, `status-${s}`); }

function route() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { page: parts[0] || "sessions", parts, params: new URLSearchParams(query || "") };
}

function link(page, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== null && v !== undefined && v !== "" && v !== false) q.set(k, v);
  }
  const s = q.toString();
  return `#/${page}${s ? "?" + s : ""}`;
}

// The agent the page reads as (a namespace key may name any agent of its namespace; an agent
// key reads as itself). Part of the URL: a shared link shows the same view.
function asAgent() { return route().params.get("as") || ""; }

function withAs(params) { const a = asAgent(); return a ? { ...params, as: a } : params; }

// -- the API --------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}

async function api(path, { method = "GET", body, query, text = false } = {}) {
  const key = sessionStorage.getItem(KEY_STORE);
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v === null || v === undefined || v === "") continue;
    for (const one of Array.isArray(v) ? v : [v]) url.searchParams.append(k, String(one));
  }
  const headers = { Accept: "application/json" };
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(url, { method, headers, cache: "no-store", credentials: "omit",
    body: body === undefined ? undefined : JSON.stringify(body) });
  if (res.status === 401) {
    sessionStorage.removeItem(KEY_STORE);
    whoami = null;
    showLogin("The API key was refused (invalid or revoked).");
    throw new ApiError(401, "unauthorized");
  }
  if (!res.ok) {
    let detail = res.statusText;
    try { const p = await res.json(); detail = p.detail || p.title || detail; } catch (_) { /* */ }
    throw new ApiError(res.status, `${res.status}: ${detail}`);
  }
  return text ? res.text() : res.json();
}

const agentQuery = () => ({ agent_id: asAgent() || null });

// -- frame ----------------------------------------------------------------------------------

const main = () => document.getElementById("main");

function setMain(...children) {
  main().replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined));
}

function errorBox(err) {
  return h("p", { class: "error", role: "alert" }, String(err && err.message || err));
}

function showLogin(message) {
  stopPolling();
  document.getElementById("who").replaceChildren();
  const input = h("input", { id: "key", type: "password", autocomplete: "off",
    placeholder: "hm_…", "aria-label": "API key", spellcheck: "false" });
  const form = h("form", { class: "login", onsubmit: async (ev) => {
    ev.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    sessionStorage.setItem(KEY_STORE, key);
    try { await loadWho(); render(); } catch (err) { /* showLogin ran again on 401 */ }
  } },
  h("h1", {}, "hivemem explorer"),
  h("p", {}, "Enter an API key (", h("code", {}, "hivemem apikey create NAMESPACE"),
    "). It stays in this tab's session storage, is sent only to this server, and never",
    " appears in a URL. The page shows exactly what the key may read."),
  message ? h("p", { class: "error", role: "alert" }, message) : null,
  h("label", { for: "key" }, "API key"), input,
  h("button", { class: "primary", type: "submit" }, "Open"));
  setMain(form);
  input.focus();
}

async function loadWho() {
  whoami = await api("/v1/whoami");
  const agent = h("input", { id: "as-agent", value: asAgent(), placeholder: "any agent",
    "aria-label": "Read as agent", title: "Read as this agent (its private memory too)" });
  agent.addEventListener("change", () => {
    const r = route();
    r.params.set("as", agent.value.trim());
    if (!agent.value.trim()) r.params.delete("as");
    location.hash = `#/${r.parts.map(encodeURIComponent).join("/")}?${r.params}`;
  });
  document.getElementById("who").replaceChildren(
    h("span", {}, "namespace ", h("b", { id: "namespace" }, whoami.namespace)),
    h("label", { class: "row" }, "as agent", agent),
    h("span", { class: "muted mono" }, `key ${whoami.key_id}`),
    h("button", { type: "button", onclick: () => {
      sessionStorage.removeItem(KEY_STORE); whoami = null; showLogin();
    } }, "Sign out"));
}

function stopPolling() { if (pollTimer) { clearInterval(pollTimer); pollTimer = null; } }

function markNav(page) {
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("on", a.dataset.page === page);
    if (a.dataset.page === page) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
    const session = route().parts[1];
    const target = a.dataset.page;
    if (session && target !== "sessions") {
      a.href = link(`${target}/${encodeURIComponent(session)}`, withAs({}));
    } else {
      a.href = link(target, withAs({}));
    }
  }
}

// `hivemem ui` hands its temporary key over in the fragment (never sent to a server): it is
// moved into sessionStorage and wiped from the address bar and history before anything else.
function takeHandedKey() {
  const m = location.hash.match(/^#key=([A-Za-z0-9_-]+)$/);
  if (!m) return;
  sessionStorage.setItem(KEY_STORE, m[1]);
  whoami = null;
  history.replaceState(null, "", `${location.pathname}#/sessions`);
}

async function render() {
  takeHandedKey();
  stopPolling();
  if (!sessionStorage.getItem(KEY_STORE)) { showLogin(); return; }
  if (!whoami) {
    try { await loadWho(); } catch (err) { if (err.status !== 401) setMain(errorBox(err)); return; }
  }
  const r = route();
  markNav(r.page);
  const asInput = document.getElementById("as-agent");
  if (asInput && document.activeElement !== asInput) asInput.value = asAgent();
  const token = ++renderToken;
  // `ready` says the page shown is the latest render's: cleared while it loads, so a render
  // that finished just before this one never stands for it.
  delete document.body.dataset.ready;
  const page = PAGES[r.page] || PAGES.sessions;
  setMain(h("p", { class: "muted" }, "Loading…"));
  try {
    const content = await page(r, token);
    if (token !== renderToken) return;
    setMain(...[content].flat());
    const selected = document.querySelector("#main .sel");
    if (selected) selected.scrollIntoView({ block: "center" });
    document.body.dataset.page = r.page;
    document.body.dataset.ready = String(token);
  } catch (err) {
    if (token !== renderToken || err.status === 401) return;
    setMain(errorBox(err));
    document.body.dataset.ready = String(token);
  }
}

function needSession(r, page) {
  const session = r.parts[1];
  if (session) return null;
  return [h("h1", {}, page), h("p", {}, "Pick a session first: ",
    h("a", { href: link("sessions", withAs({})) }, "Sessions"), ".")];
}

function sessionHeader(session, active) {
  const tabs = [["timeline", "Timeline"], ["facts", "Facts"], ["recall", "Recall"],
    ["pipeline", "Pipeline"], ["compaction", "Compaction"], ["deadletters", "Dead letters"]];
  return h("div", { class: "row" },
    h("h1", {}, "Session ", h("span", { class: "mono", id: "session-id" }, session)),
    ...tabs.map(([p, label]) => (p === active ? h("b", {}, label)
      : h("a", { href: link(`${p}/${encodeURIComponent(session)}`, withAs({})) }, label))));
}

// -- sessions ---------------------------------------------------------------------------------

async function pool(items, size, fn) {
  const out = new Array(items.length);
  let next = 0;
  async function worker() {
    while (next < items.length) {
      const i = next++;
      try { out[i] = await fn(items[i]); } catch (err) { out[i] = { error: err }; }
    }
  }
  await Promise.all(Array.from({ length: Math.min(size, items.length) }, worker));
  return out;
}

async function sessionsPage(r) {
  const q = (r.params.get("q") || "").toLowerCase();
  const { sessions } = await api("/v1/sessions");
  // A search narrows by id first when there are more sessions than the list reads.
  const byId = sessions.filter((s) => s.toLowerCase().includes(q));
  const ids = (q && sessions.length > SESSION_INFO_CAP ? byId : sessions).sort();
  const read = ids.slice(0, SESSION_INFO_CAP);
  // Who spoke: the session's agent and the agents of its closed episodes (both cheap reads;
  // the open episode's speakers show on the timeline).
  const infos = await pool(read, 6, async (id) => {
    const path = `/v1/sessions/${encodeURIComponent(id)}`;
    const [info, eps] = await Promise.all([api(path, { query: agentQuery() }),
      api(`${path}/episodes`, { query: agentQuery() })]);
    const agents = new Set([info.agent_id, ...eps.episodes.flatMap((e) => e.agent_ids)]);
    agents.delete(null); agents.delete(undefined);
    return { ...info, agents: [...agents].sort() };
  });
  let rows = read.map((id, i) => ({ id, ...(infos[i] || {}) }));
  if (q) {
    rows = rows.filter((s) => [s.id, s.title, ...(s.agents || [])].some(
      (v) => v && String(v).toLowerCase().includes(q)));
  }
  rows.sort((a, b) => String(b.last_active || "").localeCompare(String(a.last_active || "")));
  const total = (k) => rows.reduce((n, s) => n + (s[k] || 0), 0);
  const agents = new Set(rows.flatMap((s) => s.agents || []));
  const search = h("input", { id: "search", type: "search", value: r.params.get("q") || "",
    placeholder: "search id, title, agent", "aria-label": "Search sessions" });
  search.addEventListener("change", () => {
    location.hash = link("sessions", withAs({ q: search.value.trim() }));
  });
  const table = h("table", { id: "sessions" },
    h("thead", {}, h("tr", {}, h("th", {}, "Session"), h("th", {}, "Title"),
      h("th", {}, "Agents"), h("th", { class: "num" }, "Turns"),
      h("th", { class: "num" }, "Episodes"), h("th", { class: "num" }, "Facts"),
      h("th", {}, "Created"), h("th", {}, "Last activity"))),
    h("tbody", {}, rows.map((s) => h("tr", { "data-session": s.id },
      h("td", {}, h("a", { class: "mono", href: link(`timeline/${encodeURIComponent(s.id)}`,
        withAs({})) }, s.id)),
      h("td", {}, s.title || ""),
      h("td", {}, s.agents && s.agents.length ? s.agents.join(", ")
        : h("span", { class: "muted" }, "—")),
      h("td", { class: "num" }, s.error ? "?" : s.turns),
      h("td", { class: "num" }, s.error ? "?" : s.episodes),
      h("td", { class: "num" }, s.error ? "?" : s.facts_active),
      h("td", {}, when(s.created_at)),
      h("td", {}, s.error ? h("span", { class: "error" }, s.error.message)
        : when(s.last_active))))));
  return [
    h("h1", {}, "Sessions"),
    h("div", { class: "cards" },
      card(rows.length, "sessions shown"), card(sessions.length, "in the namespace"),
      card(total("turns"), "turns you may read"), card(total("facts_active"), "current facts"),
      card(agents.size, "agents")),
    h("div", { class: "row" }, search,
      ids.length > SESSION_INFO_CAP ? h("span", { class: "muted" },
        `first ${SESSION_INFO_CAP} of ${ids.length}: search to narrow`) : null),
    h("h2", {}, "By last activity"), rows.length ? table
      : h("p", { class: "muted", id: "no-sessions" }, "No session matches."),
  ];
}

function card(value, label) { return h("div", { class: "card" }, h("b", {}, value), h("span", {}, label)); }

// -- timeline ---------------------------------------------------------------------------------

function timelineRow(e, selected) {
  const d = e.detail || {};
  if (e.kind === "episode") {
    return h("li", { class: "episode", "data-kind": "episode", "data-ref": e.ref_id },
      h("span", { class: "seq" }, e.seq), h("span", { class: "at" }, when(e.at)),
      h("span", {}, h("b", {}, `Episode ${d.index} closed`), " — reason ",
        badge(d.close_reason || "?", "marker"), " ",
        e.summary.replace(/^episode \d+ closed \([^)]*\):\s*/, ""),
        (d.markers || []).map((m) => badge(m, "marker"))));
  }
  if (e.kind === "fact") {
    return h("li", { class: "fact", "data-kind": "fact", "data-ref": e.ref_id },
      h("span", { class: "seq" }, ""), h("span", { class: "at" }, when(e.at)),
      h("span", {}, "fact ", h("a", { class: "mono", href: link(
        `facts/${encodeURIComponent(e.session_id)}`, withAs({ fact: e.ref_id, history: 1 })) },
      e.ref_id.slice(0, 8)), " ", shortIds(e.summary)));
  }
  return h("li", { class: `turn${e.ref_id === selected ? " sel" : ""}`, "data-kind": "turn",
    "data-ref": e.ref_id, tabindex: 0,
    "data-visibility": d.visibility || "" },
  h("span", { class: "seq" }, `#${e.seq}`), h("span", { class: "at" }, when(e.at)),
  h("span", {}, h("b", { class: "speaker" }, e.actor || ""), " ",
    badge(d.role || "", ""), d.visibility ? vis(d.visibility) : null,
    (d.markers || []).map((m) => badge(m, "marker"))),
  h("span", { class: "content" }, e.summary));
}

async function timelinePage(r, token) {
  const missing = needSession(r, "Timeline");
  if (missing) return missing;
  const session = r.parts[1];
  const page = Math.max(1, parseInt(r.params.get("page") || "1", 10) || 1);
  const base = `/v1/sessions/${encodeURIComponent(session)}`;
  // Page 1 is the newest PAGE events; each older page comes with the cursor the page
  // before returned (the server reads only the events a page shows).
  const cursor = page > 1 ? r.params.get("cursor") || "" : "";
  const [info, stats, tl] = await Promise.all([
    api(base, { query: agentQuery() }), api(`${base}/stats`),
    api(`${base}/timeline`, { query: { ...agentQuery(), limit: PAGE, cursor } })]);
  const shown = tl.events;
  const older = tl.next_cursor || "";
  if (older) newerCursor.set(`${session}|${older}`, cursor);
  // Opened from a link (no page before it seen here): "newer" goes to the newest page.
  const newer = newerCursor.get(`${session}|${cursor}`);
  const newerPage = newer === undefined ? 1 : page - 1;
  const wanted = r.params.get("turn");
  const row = (e) => timelineRow(e, wanted);
  const list = h("ol", { class: "timeline", id: "timeline" }, shown.map(row));
  const live = h("span", { class: "live", id: "live", "aria-live": "polite" },
    page === 1 ? "live" : "");
  if (page === 1) {
    let last = JSON.stringify([stats.last_seq, stats.turns_processed, stats.episodes]);
    pollTimer = setInterval(async () => {
      if (document.hidden || token !== renderToken) return;
      try {
        const now = await api(`${base}/stats`);
        const mark = JSON.stringify([now.last_seq, now.turns_processed, now.episodes]);
        if (mark === last) return;
        last = mark;
        const fresh = await api(`${base}/timeline`, { query: { ...agentQuery(), limit: PAGE } });
        if (token !== renderToken) return;
        list.replaceChildren(...fresh.events.map(row));
        live.textContent = `live · updated ${when(new Date().toISOString()).slice(11)}`;
      } catch (_) { live.textContent = "live · update failed, retrying"; }
    }, POLL_MS);
  }
  const pager = h("div", { class: "row pager" },
    page > 1 ? h("a", { href: link(`timeline/${encodeURIComponent(session)}`,
      withAs(newerPage > 1 ? { page: newerPage, cursor: newer } : {})), id: "newer" },
    "← newer") : null,
    h("span", { class: "muted" }, `page ${page} (${PAGE} events a page, newest page first)`),
    older ? h("a", { href: link(`timeline/${encodeURIComponent(session)}`,
      withAs({ page: page + 1, cursor: older })), id: "older" }, "older →") : null, live);
  return [
    sessionHeader(session, "timeline"),
    info.title ? h("p", {}, info.title) : null,
    h("div", { class: "cards" }, card(info.turns, "turns you may read"),
      card(stats.last_seq, "last seq"), card(info.episodes, "episodes"),
      card(info.facts_active, "current facts"), card(stats.open_episode_turns, "in open episode"),
      card(stats.turns_pending, "turns pending"), card(when(info.last_active) || "—", "last activity")),
    pager,
    wanted && !shown.some((e) => e.ref_id === wanted) ? h("p", { class: "muted" },
      `Turn ${wanted.slice(0, 8)}… is not on this page (or not readable with this key).`) : null,
    list, shown.length ? null : h("p", { class: "muted" }, "No events yet."),
  ];
}

// -- facts ----------------------------------------------------------------------------------

function chainsOf(facts) {
  const byId = new Map(facts.map((f) => [f.fact_id, f]));
  const groups = new Map();
  for (const f of facts) {
    // A chain: follow `supersedes` back to its first version; the subject groups the rest.
    let root = f;
    const seen = new Set();
    while (root.supersedes && byId.has(root.supersedes) && !seen.has(root.fact_id)) {
      seen.add(root.fact_id); root = byId.get(root.supersedes);
    }
    const key = root.subject ? `s:${root.subject}` : `f:${root.fact_id}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(f);
  }
  const chains = [...groups.values()].map((vs) => vs.sort((a, b) =>
    (a.version - b.version) || String(a.created_at).localeCompare(String(b.created_at))));
  chains.sort((a, b) => String(b[b.length - 1].created_at)
    .localeCompare(String(a[a.length - 1].created_at)));
  return chains;
}

function versionBlock(f, session, selected, history) {
  // A reason is "word" or "word_by:ids" (ids only, never content): the word is the reason,
  // the ids are shown as links below.
  const changed = f.status !== "active"
    ? (f.reason || f.status).split(":")[0].replace(/_by$/, "") : null;
  return h("div", { class: `version${f.status === "active" ? " current" : ""}` +
      `${selected ? " sel" : ""}`, "data-fact": f.fact_id, "data-status": f.status,
    "data-visibility": f.visibility },
  h("div", { class: "row" }, h("a", { class: "mono", href: link(
    `facts/${encodeURIComponent(session)}`, withAs({ fact: f.fact_id, history: history ? 1 : "" })),
  title: "Show this fact's audit trail" }, `v${f.version}`), status(f.status), vis(f.visibility),
  badge(f.kind, ""), h("span", { class: "content" }, f.content)),
  h("div", { class: "meta" },
    `by ${f.agent_id || "—"} · ${when(f.created_at)} · valid ${when(f.valid_from)}` +
    (f.valid_to ? ` → ${when(f.valid_to)}` : "") + ` · confidence ${f.confidence}`,
    f.source_turn_ids.length ? [" · turns ", f.source_turn_ids.map((t, i) => [i ? ", " : "",
      h("a", { class: "mono", href: link(`timeline/${encodeURIComponent(session)}`,
        withAs({ turn: t })), title: t }, `${t.slice(0, 8)}…`)])] : "",
    changed ? ` · reason: ${changed}` : "",
    f.superseded_by ? ` · superseded by ${f.superseded_by.slice(0, 8)}` : "",
    f.conflicts_with.length ? ` · conflicts with ${f.conflicts_with.map((c) => c.slice(0, 8))
      .join(", ")}` : "",
    f.retracted_by.length ? ` · retracted by turns ${shortIds(f.retracted_by.join(", "))}`
      : ""));
}

async function auditPanel(factId) {
  const { events } = await api(`/v1/facts/${encodeURIComponent(factId)}/audit`,
    { query: agentQuery() });
  return h("section", { id: "audit" }, h("h2", {}, "Audit trail ",
    h("span", { class: "mono muted" }, factId)),
  events.length ? h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "When"),
    h("th", {}, "Action"), h("th", {}, "Who"), h("th", {}, "Status"), h("th", {}, "Reason"),
    h("th", {}, "Cause"))),
  h("tbody", {}, events.map((e) => h("tr", { "data-action": e.action },
    h("td", { title: when(e.at) }, when(e.at).slice(5)), h("td", {}, e.action),
    h("td", {}, e.actor),
    h("td", {}, `${e.from_status || "new"} → ${e.to_status || e.from_status || ""}`),
    h("td", { class: "reason" }, shortIds(e.reason || "")), h("td", { class: "mono", title: e.cause || "" },
      shortIds(e.cause || ""))))))
    : h("p", { class: "muted" }, "No audit events."));
}

async function factsPage(r) {
  const missing = needSession(r, "Facts");
  if (missing) return missing;
  const session = r.parts[1];
  const history = r.params.get("history") === "1";
  const selected = r.params.get("fact");
  const { facts } = await api(`/v1/sessions/${encodeURIComponent(session)}/facts/full`, {
    query: { ...agentQuery(), include_history: history, include_inactive: history,
      include_archived: history } });
  const chains = chainsOf(facts);
  const toggle = h("label", { class: "row" }, h("input", { type: "checkbox", id: "history",
    checked: history, onchange: (ev) => {
      location.hash = link(`facts/${encodeURIComponent(session)}`,
        withAs({ history: ev.target.checked ? 1 : "", fact: selected }));
    } }), "history (every version, retracted and archived too)");
  const list = h("div", { id: "facts" }, chains.map((vs) => h("div", { class: "chain" },
    h("h3", {}, vs[0].subject || h("span", { class: "muted" }, "(no subject)"),
      h("span", { class: "muted" }, ` · ${vs.length} version${vs.length > 1 ? "s" : ""}`)),
    vs.map((f) => versionBlock(f, session, f.fact_id === selected, history)))));
  const side = selected ? await auditPanel(selected).catch(errorBox)
    : h("p", { class: "muted" }, "Pick a version (v1, v2…) to see its audit trail.");
  const current = facts.filter((f) => f.status === "active").length;
  return [
    sessionHeader(session, "facts"),
    h("div", { class: "cards" }, card(current, "current"), card(facts.length, "shown"),
      card(chains.length, "chains")),
    toggle,
    h("div", { class: "split even" }, h("div", {}, chains.length ? list
      : h("p", { class: "muted", id: "no-facts" }, "No facts yet.")), h("div", {}, side)),
  ];
}

// -- recall playground ------------------------------------------------------------------------

function scoreParts(c) {
  return h("div", { class: "parts" }, SCORE_PARTS.filter((p) => c && c[p])
    .map((p) => h("span", { class: "part", title: p }, `${p} ${Number(c[p]).toFixed(2)}`)));
}

async function recallPage(r) {
  const missing = needSession(r, "Recall playground");
  if (missing) return missing;
  const session = r.parts[1];
  const p = r.params;
  const q = p.get("q") || "";
  const query = h("input", { id: "query", name: "q", value: q, required: true,
    placeholder: "What should the agent remember?", "aria-label": "Question" });
  const budget = h("input", { id: "budget", type: "number", min: 1, value: p.get("budget") || "",
    placeholder: "default", class: "budget" });
  const preset = h("select", { id: "preset" }, PRESETS.map((x) => h("option",
    { value: x, selected: x === (p.get("preset") || "") }, x || "(default)")));
  const hist = h("input", { id: "include-history", type: "checkbox",
    checked: p.get("history") === "1" });
  const form = h("form", { class: "recall", onsubmit: (ev) => {
    ev.preventDefault();
    location.hash = link(`recall/${encodeURIComponent(session)}`, withAs({
      q: query.value.trim(), budget: budget.value, preset: preset.value,
      history: hist.checked ? 1 : "" }));
  } },
  h("label", {}, "Question", query), h("label", {}, "Token budget", budget),
  h("label", {}, "Preset", preset), h("label", { class: "check" }, "History", h("span", {}, hist, " on")),
  h("button", { class: "primary", type: "submit", id: "run" }, "Recall"));
  const out = [sessionHeader(session, "recall"), form];
  if (!q) return out;
  const body = { query: q, explain: true, include_history: p.get("history") === "1" };
  if (asAgent()) body.agent_id = asAgent();
  if (p.get("budget")) body.token_budget = parseInt(p.get("budget"), 10);
  if (p.get("preset")) body.preset = p.get("preset");
  const res = await api(`/v1/sessions/${encodeURIComponent(session)}/recall`,
    { method: "POST", body });
  out.push(
    h("div", { class: "cards", id: "recall-summary" }, card(res.preset, "preset"),
      card(`${res.used_tokens} / ${res.token_budget}`, "tokens used / budget"),
      card(res.items.length, "items"), card(res.excluded.length, "excluded")),
    h("div", { class: "split" },
      h("div", {},
        h("h2", {}, "Items, best first"),
        h("table", { id: "items" }, h("thead", {}, h("tr", {}, h("th", {}, "#"),
          h("th", {}, "Item"), h("th", { class: "num" }, "Score"), h("th", {}, "Score parts"),
          h("th", { class: "num" }, "Tokens"))),
        h("tbody", {}, res.items.map((it, i) => h("tr", { "data-source-id": it.source_id,
          "data-score": it.score, tabindex: 0 },
        h("td", { class: "num" }, i + 1),
        h("td", {}, h("div", { class: "row" }, badge(it.source_type, ""), vis(it.visibility),
          h("span", { class: "muted" }, `${it.agent_id || it.role || ""}` +
            (it.seq !== null && it.seq !== undefined ? ` #${it.seq}` : "") +
            (it.session_id !== session ? ` · ${it.session_id}` : ""))),
        h("div", { class: "content" }, it.content)),
        h("td", { class: "num" }, Number(it.score).toFixed(3)),
        h("td", {}, scoreParts(it.components)), h("td", { class: "num" }, it.token_count))))),
        h("h2", {}, "Excluded candidates"),
        res.excluded.length ? h("table", { id: "excluded" }, h("thead", {}, h("tr", {},
          h("th", {}, "Why"), h("th", {}, "Candidate"), h("th", { class: "num" }, "Score"),
          h("th", { class: "num" }, "Tokens"))),
        h("tbody", {}, res.excluded.map((x) => h("tr", { "data-source-id": x.source_id,
          "data-reason": x.reason },
        h("td", {}, badge(x.reason, "marker"), h("div", { class: "meta" }, x.detail || "")),
        h("td", {}, badge(x.source_type, ""), h("span", { class: "content" }, x.content)),
        h("td", { class: "num" }, Number(x.score).toFixed(3)),
        h("td", { class: "num" }, x.token_count)))))
          : h("p", { class: "muted" }, "Nothing was left out.")),
      h("div", {}, h("h2", {}, "The text an agent receives"),
        h("pre", { class: "context", id: "context" }, res.context))));
  return out;
}

// -- pipeline ---------------------------------------------------------------------------------

function parseMetrics(text) {
  const rows = [];
  for (const line of text.split("\n")) {
    const m = line.match(/^(hivemem_[a-z_]+)(?:\{([^}]*)\})?\s+([-+0-9.eE]+|NaN)$/);
    if (!m) continue;
    const labels = {};
    for (const kv of (m[2] || "").matchAll(/(\w+)="([^"]*)"/g)) labels[kv[1]] = kv[2];
    rows.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return rows;
}

async function pipelinePage(r) {
  const session = r.parts[1] || null;
  const metrics = parseMetrics(await api("/metrics", { text: true }));
  const stages = new Map();
  const take = (name, field) => {
    for (const m of metrics.filter((x) => x.name === name)) {
      const s = m.labels.stage;
      if (!stages.has(s)) stages.set(s, { stage: s });
      stages.get(s)[field] = m.value;
    }
  };
  take("hivemem_stream_lag", "lag"); take("hivemem_stream_pending", "pending");
  take("hivemem_dead_letters", "dead"); take("hivemem_stage_consumers", "workers");
  const jobs = metrics.filter((x) => x.name === "hivemem_reflect_jobs");
  const up = metrics.find((x) => x.name === "hivemem_redis_up");
  const out = [
    session ? sessionHeader(session, "pipeline") : h("h1", {}, "Pipeline"),
    h("p", { class: "muted" }, "The deployment's stages (from /metrics): entries not yet",
      " delivered (lag), delivered and not acknowledged (pending), given up on (dead letters)."),
    h("table", { id: "stages" }, h("thead", {}, h("tr", {}, h("th", {}, "Stage"),
      h("th", { class: "num" }, "Lag"), h("th", { class: "num" }, "Pending"),
      h("th", { class: "num" }, "Dead letters"), h("th", { class: "num" }, "Workers"))),
    h("tbody", {}, [...stages.values()].map((s) => h("tr", { "data-stage": s.stage },
      h("td", {}, s.stage), h("td", { class: "num" }, s.lag ?? "—"),
      h("td", { class: "num" }, s.pending ?? "—"),
      h("td", { class: "num" }, s.dead ? h("b", { class: "status-retracted" }, s.dead) : s.dead ?? "—"),
      h("td", { class: "num" }, s.workers ?? "—"))))),
    h("div", { class: "cards" }, up ? card(up.value ? "up" : "down", "redis") : null,
      jobs.map((j) => card(j.value, `reflect jobs ${j.labels.state}`))),
    h("p", {}, "Dead letters of this namespace, with why, and their replay: ",
      h("a", { id: "to-letters", href: link(session ? `deadletters/${encodeURIComponent(session)}`
        : "deadletters", withAs({})) }, "Dead letters"), "."),
  ];
  const traces = await api("/v1/traces", { query: { ...agentQuery(), count: 50 } });
  if (session) {
    const st = await api(`/v1/sessions/${encodeURIComponent(session)}/stats/full`);
    out.push(h("h2", {}, "This session"), h("div", { class: "cards", id: "session-stats" },
      card(st.turns_enqueued, "enqueued"), card(st.turns_processed, "processed"),
      card(st.turns_dead_lettered, "dead-lettered"),
      card(Math.max(0, st.turns_enqueued - st.turns_processed - st.turns_dead_lettered),
        "pending"), card(st.episodes, "episodes"),
      card(st.reflections_failed.length, "failed reflections")));
  }
  const failed = traces.traces.filter((t) => t.failed && (!session || t.session_id === session));
  out.push(h("h2", {}, "Failed reflections"), failed.length ? h("table", { id: "failed" },
    h("thead", {}, h("tr", {}, h("th", {}, "Session"), h("th", {}, "Episode"),
      h("th", {}, "Error"), h("th", {}, "Retries exhausted"))),
    h("tbody", {}, failed.map((t) => h("tr", {}, h("td", { class: "mono" }, t.session_id),
      h("td", { class: "mono" }, t.episode_index ?? t.index ?? t.episode_id ?? ""),
      h("td", { class: "content" }, t.error || ""), h("td", {}, t.retries_exhausted ? "yes" : "no")))))
    : h("p", { class: "muted", id: "no-failed" }, "No failed reflection among the newest traces."));
  const recent = traces.traces.filter((t) => !session || t.session_id === session).slice(0, 10);
  out.push(h("h2", {}, "Newest reflections"), h("table", { id: "traces" },
    h("thead", {}, h("tr", {}, h("th", {}, "Session"), h("th", {}, "Episode"),
      h("th", { class: "num" }, "Saved"), h("th", { class: "num" }, "Superseded"),
      h("th", { class: "num" }, "ms"))),
    h("tbody", {}, recent.map((t) => h("tr", {}, h("td", { class: "mono" }, t.session_id),
      h("td", { class: "mono" }, t.episode_index ?? t.index ?? t.episode_id ?? ""),
      h("td", { class: "num" }, (t.saved || []).length),
      h("td", { class: "num" }, (t.superseded || []).length),
      h("td", { class: "num" }, t.elapsed_ms ?? ""))))));
  return out;
}

// -- compaction -------------------------------------------------------------------------------

function diffLine(sign, cls, entry, change, ...children) {
  return h("li", { class: `diff ${cls}`, "data-fact": entry.fact_id, "data-change": change },
    h("span", { class: "sign", "aria-hidden": "true" }, sign),
    h("span", {}, ...children));
}

function factLink(session, id) {
  return h("a", { class: "mono", title: id, href: link(`facts/${encodeURIComponent(session)}`,
    withAs({ fact: id, history: 1 })) }, id.slice(0, 8));
}

async function compactionPage(r, token) {
  const missing = needSession(r, "Compaction");
  if (missing) return missing;
  const session = r.parts[1];
  const path = `/v1/sessions/${encodeURIComponent(session)}`;
  let diff;
  try {
    diff = await api(`${path}/compaction`);
  } catch (err) {
    if (err.status !== 403) throw err;
    return [sessionHeader(session, "compaction"), h("p", { class: "muted", id: "not-permitted" },
      "Compaction plans over every agent's facts of the session, so it is previewed and",
      " applied with a namespace key; this key acts as one agent.")];
  }
  const applied = r.params.get("applied");
  const content = new Map([...diff.kept, ...diff.merged, ...diff.archived, ...diff.promoted,
    ...diff.demoted].map((e) => [e.fact_id, e.content]));
  const s = { merged: diff.merged.length, archived: diff.archived.length,
    promoted: diff.promoted.length, demoted: diff.demoted.length, kept: diff.kept.length };
  const changes = s.merged + s.archived + s.promoted + s.demoted;
  const lines = [
    ...diff.merged.map((e) => diffLine("−", "del", e, "merged", badge("merged", "status-merged"),
      factLink(session, e.fact_id), " ", h("span", { class: "content" }, e.content),
      h("div", { class: "meta" }, "folds into ", factLink(session, e.into || ""), " ",
        h("span", { class: "content" }, content.get(e.into) || ""),
        e.similarity != null ? ` · similarity ${Number(e.similarity).toFixed(3)}` : "",
        ` · ${e.reason}`))),
    ...diff.archived.map((e) => diffLine("−", "del", e, "archived", badge("archived", "status-archived"),
      factLink(session, e.fact_id), " ", h("span", { class: "content" }, e.content),
      h("div", { class: "meta" }, e.reason,
        e.value != null ? ` · value ${Number(e.value).toFixed(3)}` : ""))),
    ...[...diff.promoted.map((e) => ["promoted", e]), ...diff.demoted.map((e) => ["demoted", e])]
      .map(([what, e]) => diffLine("~", "mod", e, what, badge(what, "marker"),
        factLink(session, e.fact_id), " ", h("span", { class: "content" }, e.content),
        h("div", { class: "meta" }, `${e.from_layer || "—"} → ${e.to_layer || "—"} · ${e.reason}`))),
  ];
  const apply = h("button", { class: "primary", type: "button", id: "apply",
    disabled: changes === 0, onclick: async () => {
      apply.disabled = true;
      try {
        const done = await api(`${path}/compact`, { method: "POST",
          body: { expect: diff.fingerprint } });
        if (token !== renderToken) return;
        const n = done.merged.length + done.archived.length + done.promoted.length +
          done.demoted.length;
        location.hash = link(`compaction/${encodeURIComponent(session)}`,
          withAs({ applied: `${n}:${done.run_id}` }));
      } catch (err) {
        result.replaceChildren(errorBox(err));
        apply.disabled = false;
      }
    } }, changes ? `Apply these ${changes} changes` : "Nothing to apply");
  const result = h("div", { id: "apply-result" }, applied ? h("p", { class: "live" },
    `Applied: ${applied.split(":")[0]} changes (run ${applied.split(":")[1] || ""}). `,
    "Below is what a run would do now.") : null);
  return [
    sessionHeader(session, "compaction"),
    h("p", { class: "muted" }, "What compaction would do to this session's facts now, with",
      " why; nothing changes until you apply it. Applying runs exactly this preview: if the",
      " facts changed since, it is refused and the page shows the new preview."),
    h("div", { class: "cards", id: "compaction-summary" }, card(diff.facts_seen, "facts seen"),
      card(`${diff.active_before} → ${diff.active_after}`, "active facts"),
      card(s.merged, "merged"), card(s.archived, "archived"), card(s.promoted, "promoted"),
      card(s.demoted, "demoted"), card(s.kept, "kept")),
    h("div", { class: "row" }, apply, h("span", { class: "muted mono",
      title: "the preview's fingerprint" }, `preview ${diff.fingerprint.slice(0, 12)}`),
    h("span", { class: "muted" }, `session clock ${when(diff.clock)}`)),
    result,
    h("h2", {}, "Changes"),
    lines.length ? h("ul", { class: "diff", id: "diff" }, lines)
      : h("p", { class: "muted", id: "no-changes" }, "Compaction would change nothing."),
    h("details", { id: "kept" }, h("summary", {}, `Kept (${s.kept})`),
      h("ul", { class: "diff" }, diff.kept.map((e) => diffLine(" ", "keep", e, "kept",
        factLink(session, e.fact_id), " ", h("span", { class: "content" }, e.content),
        h("div", { class: "meta" }, e.reason))))),
  ];
}

// -- dead letters -----------------------------------------------------------------------------

async function deadLettersPage(r, token) {
  const stage = r.params.get("stage") === "boundary" ? "boundary" : "embed";
  const session = r.parts[1] || "";
  const { letters: all } = await api("/v1/dead-letters", { query: { stage, count: 1000 } });
  const letters = session ? all.filter((l) => l.session_id === session) : all;
  const notice = h("div", { id: "replay-result", "aria-live": "polite" });
  const replay = async (ids, button) => {
    button.disabled = true;
    try {
      const res = await api("/v1/dead-letters/replay", { method: "POST",
        body: ids ? { stage, entry_ids: ids } : { stage } });
      if (token !== renderToken) return;
      sessionStorage.setItem("hivemem.replayed", `${res.replayed.length}`);
      render();
    } catch (err) {
      notice.replaceChildren(errorBox(err.status === 403 ? new Error(
        "Replaying is for a namespace key: this key acts as one agent.") : err));
      button.disabled = false;
    }
  };
  const replayed = sessionStorage.getItem("hivemem.replayed");
  sessionStorage.removeItem("hivemem.replayed");
  if (replayed !== null) {
    notice.append(h("p", { class: "live" }, `Replayed ${replayed}: back on their stream.`));
  }
  const stageLink = (name) => (name === stage ? h("b", {}, name) : h("a", {
    href: link(session ? `deadletters/${encodeURIComponent(session)}` : "deadletters",
      withAs({ stage: name })) }, name));
  const all_ = h("button", { type: "button", id: "replay-all", disabled: !letters.length,
    onclick: () => replay(session ? letters.map((l) => l.entry_id) : null, all_) },
  session ? `Replay this session's ${letters.length}` : `Replay all ${letters.length}`);
  const table = h("table", { id: "letters" }, h("thead", {}, h("tr", {},
    h("th", {}, "Failed at"), h("th", {}, "Session"), h("th", {}, "Entry"),
    h("th", {}, "Turns"), h("th", {}, "Why"), h("th", { class: "num" }, "Tries"),
    h("th", {}, ""))),
  h("tbody", {}, letters.map((l) => {
    const button = h("button", { type: "button", class: "replay",
      "aria-label": `Replay ${l.entry_id}` }, "Replay");
    button.addEventListener("click", () => replay([l.entry_id], button));
    return h("tr", { "data-entry": l.entry_id, "data-session": l.session_id },
      h("td", {}, when(l.failed_at)),
      h("td", {}, h("a", { class: "mono", href: link(`timeline/${encodeURIComponent(l.session_id)}`,
        withAs({})) }, l.session_id)),
      h("td", {}, h("span", { class: "mono" }, l.entry_id), " ", badge(l.kind, ""),
        h("div", { class: "meta" }, `seq ${l.seqs.join(", ")}`, l.action ? ` · ${l.action}` : "")),
      h("td", {}, l.turns.map((t) => h("div", { class: "letter-turn" },
        h("b", { class: "speaker" }, t.agent_id || ""), " ", badge(t.role, ""), vis(t.visibility),
        h("span", { class: "content" }, t.content)))),
      h("td", { class: "content why" }, l.error),
      h("td", { class: "num" }, l.deliveries),
      h("td", {}, button));
  })));
  return [
    session ? sessionHeader(session, "deadletters") : h("h1", {}, "Dead letters"),
    h("p", { class: "muted" }, "Entries a worker gave up on, with why (of this key's namespace;",
      " an agent key sees only letters whose every turn it may read). Replaying puts an entry",
      " back on its stream once the cause is fixed; a replayed turn keeps its seq. Replaying",
      " needs a namespace key."),
    h("div", { class: "row" }, h("span", {}, "stage: ", stageLink("embed"), " · ",
      stageLink("boundary")), all_,
    session ? h("a", { href: link("deadletters", withAs({ stage })) }, "every session") : null),
    notice,
    letters.length ? table : h("p", { class: "muted", id: "no-letters" },
      `No dead letter in the ${stage} stage${session ? " for this session" : ""}.`),
  ];
}

const PAGES = { sessions: sessionsPage, timeline: timelinePage, facts: factsPage,
  recall: recallPage, pipeline: pipelinePage, compaction: compactionPage,
  deadletters: deadLettersPage };

// -- keyboard ---------------------------------------------------------------------------------

function rows() {
  return [...document.querySelectorAll(
    "#main tbody tr, #main .timeline li.turn, #main .version")];
}

function moveRow(step) {
  const all = rows();
  if (!all.length) return;
  const current = all.findIndex((el) => el.classList.contains("sel"));
  const next = all[Math.max(0, Math.min(all.length - 1, current + step))];
  all.forEach((el) => el.classList.remove("sel"));
  next.classList.add("sel");
  const target = next.querySelector("a") || next;
  if (!target.hasAttribute("tabindex") && target === next) next.setAttribute("tabindex", "0");
  target.focus();
  next.scrollIntoView({ block: "nearest" });
}

document.addEventListener("keydown", (ev) => {
  const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement.tagName);
  if (ev.key === "Escape" && typing) { document.activeElement.blur(); return; }
  if (typing || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const pages = ["sessions", "timeline", "facts", "recall", "pipeline", "compaction",
    "deadletters"];
  if (/^[1-7]$/.test(ev.key)) {
    const a = document.querySelector(`#nav a[data-page="${pages[Number(ev.key) - 1]}"]`);
    if (a) { ev.preventDefault(); location.hash = a.getAttribute("href"); }
  } else if (ev.key === "/") {
    const s = document.querySelector("#search, #query");
    if (s) { ev.preventDefault(); s.focus(); }
  } else if (ev.key === "j" || ev.key === "k") {
    ev.preventDefault(); moveRow(ev.key === "j" ? 1 : -1);
  } else if (ev.key === "Enter") {
    const sel = document.querySelector("#main .sel a");
    if (sel && document.activeElement === sel.closest(".sel")) sel.click();
  } else if (ev.key === "?") {
    document.querySelector("footer.keys").scrollIntoView();
  }
});

// -- start --------------------------------------------------------------------------------------

window.addEventListener("hashchange", render);
render();
