// The console: state kept from polls and the event stream, and one render
// function per view. Views re-render from state; countdowns tick in place
// between renders (elements with data-until count down to that instant).
import { get, put, post, metrics, setUnauthorizedHandler, HTTPError } from "/ui/api.js";
import { esc, num, dur, ago, clock, goDuration, Ring } from "/ui/util.js";
import { lineChart, curveChart } from "/ui/svg.js";
import { curve, validate } from "/ui/curve.js";
import { setToken } from "/ui/token.js";

const historyPoints = 360; // per model: 12 minutes at one status poll every 2 s
const maxLookups = 20; // sessions looked up by id, kept on the Sessions view
const sessionsPage = 100; // sessions the Sessions view lists (GET /gate/v1/sessions?limit=)
const maxModels = 200; // charts kept; the gate itself bounds its models (gate.maxModels)

const state = {
  status: null,
  statusAt: 0, // browser time of the status answer (countdowns run from it)
  waits: null,
  routes: null,
  history: new Map(), // "provider/model" -> Ring of {t, quota, trigger, window}
  rateLimits: new Ring(100), // rate-limited events
  poolEvents: new Ring(100), // failover, entered, left
  recent: new Ring(50), // every event, for the live strip
  sessions: null, // GET /gate/v1/sessions: the sessions the gate knows, newest first
  retryRounds: undefined, // retry.rounds in force, for a session with no turn yet
  lookups: [], // session ids looked up by hand, newest first, bounded
  unavailable: new Set(), // endpoints this server does not have (404)
  connected: false,
};

const view = document.getElementById("view");
let current = "";

// --- data -----------------------------------------------------------------

function key(p, m) {
  return p + "/" + m;
}


async function refreshStatus() {
  const st = await get("/gate/v1/status");
  state.status = st;
  state.statusAt = Date.now();
  const t = Date.now();
  for (const m of st.models || []) {
    const k = key(m.provider, m.model);
    if (!state.history.has(k)) {
      if (state.history.size >= maxModels) state.history.delete(state.history.keys().next().value);
      state.history.set(k, new Ring(historyPoints));
    }
    state.history.get(k).push({ t, quota: m.quota, trigger: m.trigger, budget: m.tokenBudget, window: m.windowTokens });
  }
}

async function refreshWaits() {
  state.waits = await get("/gate/v1/waits");
  state.waitsAt = Date.now();
  const n = state.waits.held.length + (state.waits.longTerm || []).length;
  const pill = document.getElementById("waits-count");
  pill.hidden = n === 0;
  pill.textContent = n;
}

async function refreshRoutes() {
  state.routes = await get("/gate/v1/routes");
}

async function refreshSessions() {
  state.sessions = await get(`/gate/v1/sessions?limit=${sessionsPage}`);
  if (!state.unavailable.has("settings")) {
    try {
      state.retryRounds = (await get("/gate/v1/settings/retry")).effective?.rounds;
    } catch (e) {
      if (e.status === 404) state.unavailable.add("settings");
    }
  }
}

const refreshers = { models: [refreshStatus, refreshWaits], waits: [refreshWaits], pools: [refreshRoutes], sessions: [refreshSessions] };

// refresh runs the view's refreshers and re-renders it. The status and the
// waits are read whatever the view: the waits count in the nav, and the
// models' history, keep up while another view is open.
let refreshing = false;
async function refresh() {
  if (refreshing) return;
  refreshing = true;
  try {
    const fs = new Set([refreshStatus, refreshWaits, ...(refreshers[current] || [])]);
    let failed = false;
    await Promise.all([...fs].map((f) => f().catch((e) => { failed = true; noteError(e); })));
    if (!failed && state.connected) { // an error shown before is over
      const c = document.getElementById("conn");
      c.className = "conn up";
      c.textContent = "live";
    }
    if (liveViews.has(current)) render();
  } finally {
    refreshing = false;
  }
}

function noteError(e) {
  if (e instanceof HTTPError && e.status === 401) return; // the dialog is open
  const c = document.getElementById("conn");
  if (e instanceof TypeError) {
    c.className = "conn down";
    c.textContent = "server unreachable";
  } else if (e instanceof HTTPError) {
    // A 500 or a 503 (a store that fails closed) left the views on their last
    // figures, or on "loading…", with the indicator still "live".
    c.className = "conn down";
    c.textContent = "the server answered " + e.status;
  }
}

// --- event stream ---------------------------------------------------------

let es = null;
let retryMs = 1000;
let debounce = 0;

function connect() {
  if (es) es.close();
  es = new EventSource("/gate/v1/events");
  const c = document.getElementById("conn");
  es.onopen = () => {
    retryMs = 1000;
    state.connected = true;
    c.className = "conn up";
    c.textContent = "live";
    refresh();
  };
  es.onerror = () => {
    state.connected = false;
    c.className = "conn down";
    c.textContent = "reconnecting…";
    // The browser retries a dropped stream by itself; a refused one (the server
    // restarting, a 401) it gives up on, so start again, backing off to 10 s.
    if (es.readyState === EventSource.CLOSED) {
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 10000);
    }
  };
  for (const type of ["wait", "admitted", "fail-open", "over-budget", "rate-limited", "learn", "leak",
    "failover", "entered", "left", "reload", "retry", "giveup", "settings", "ticket-expired", "ticket-evicted"]) {
    es.addEventListener(type, (ev) => onEvent(type, ev));
  }
}

function onEvent(type, ev) {
  let data = {};
  try {
    data = JSON.parse(ev.data);
  } catch {
    return;
  }
  const e = data && data.type === type ? data : { type, at: new Date().toISOString(), data };
  const d = e.data || {};
  state.recent.push({ type, at: e.at, data: d });
  if (type === "rate-limited") state.rateLimits.push({ at: e.at, ...d });
  if (type === "failover" || type === "entered" || type === "left") state.poolEvents.push({ type, at: e.at, ...d });
  if (type === "settings" && current === "retry" && d.section === "retry") retryView.external(d);
  clearTimeout(debounce);
  debounce = setTimeout(refresh, 150);
}

// --- rendering ------------------------------------------------------------

const liveViews = new Set(["models", "waits", "pools", "sessions", "failures"]);

function render() {
  const f = views[current];
  if (f) f();
}

function tick() {
  const now = Date.now();
  for (const el of document.querySelectorAll("[data-until]")) {
    const left = +el.dataset.until - now;
    el.textContent = left > 0 ? (el.dataset.prefix || "") + dur(left) : el.dataset.done || "now";
    el.classList.toggle("due", left <= 0);
  }
  for (const el of document.querySelectorAll("[data-since]")) {
    el.textContent = dur(now - +el.dataset.since);
  }
}

// until turns a server countdown (ms from the answer) into a ticking element.
function until(ms, at, opts = {}) {
  const end = at + ms;
  return `<span class="countdown" data-until="${end}" data-done="${esc(opts.done || "now")}" data-prefix="${esc(opts.prefix || "")}">${ms > 0 ? esc(opts.prefix || "") + dur(ms) : esc(opts.done || "now")}</span>`;
}

// bar draws usage against a budget as SVG (no inline styles: the page's
// Content-Security-Policy allows none), the reserved part hatched over it.
function bar(used, budget, reserved) {
  const pct = budget > 0 ? Math.min(100, (used / budget) * 100) : 0;
  const rpct = budget > 0 ? Math.min(pct, (reserved / budget) * 100) : 0;
  const cls = pct >= 95 ? "hot" : pct >= 75 ? "warm" : "";
  return `<svg class="bar-track" viewBox="0 0 100 10" preserveAspectRatio="none" role="meter" aria-valuemin="0" aria-valuemax="${budget}" aria-valuenow="${used}"><title>${num(used)} of ${num(budget)} tokens in the window (${num(reserved)} reserved)</title>
    <rect class="track" width="100" height="10"/><rect class="fill ${cls}" width="${pct.toFixed(2)}" height="10"/><rect class="res" width="${rpct.toFixed(2)}" height="10"/></svg>`;
}

function share(f) {
  return `<svg class="share" viewBox="0 0 100 10" preserveAspectRatio="none" aria-hidden="true"><rect class="track" width="100" height="10"/><rect class="fill" width="${(f * 100).toFixed(1)}" height="10"/></svg>`;
}

function empty(text) {
  return `<p class="empty">${text}</p>`;
}

const views = {
  models() {
    const st = state.status;
    if (!st) return (view.innerHTML = empty("loading…"));
    const held = state.waits?.held || [];
    let out = `<section class="head"><h1>Models</h1><p class="meta">window ${dur(st.windowMs)} · maxWait ${dur(st.maxWaitMs)} · config v${st.configVersion} · ${st.openTickets} open tickets</p></section>`;
    if (!st.models.length) out += empty("No model has been called yet. Models appear here with their first request.");
    out += `<div class="cards">`;
    for (const m of st.models) {
      const k = key(m.provider, m.model);
      const q = held.filter((h) => h.provider === m.provider && h.model === m.model);
      const groups = new Map();
      for (const h of q) {
        const g = h.session + " · " + h.priority;
        groups.set(g, (groups.get(g) || 0) + 1);
      }
      const hist = state.history.get(k)?.items || [];
      const r429 = state.rateLimits.items.filter((r) => r.provider === m.provider && r.model === m.model).slice(-5).reverse();
      out += `<article class="card model" data-model="${esc(k)}">
        <header><h2>${esc(k)}</h2>${m.cooldownMs > 0 ? `<span class="badge hot">cooldown ${until(m.cooldownMs, state.statusAt)}</span>` : ""}
          ${m.waiting ? `<span class="badge warm">${m.waiting} waiting</span>` : ""}</header>
        ${bar(m.windowTokens, m.tokenBudget, m.reserved)}
        <p class="bar-legend">${num(m.windowTokens)} / ${num(m.tokenBudget)} tokens in window · ${m.windowRequests} / ${m.rpmBudget} requests${m.maxRpm ? ` (cap ${m.maxRpm})` : ""}</p>
        ${m.outputLimit ? `${bar(m.outputWindow || 0, m.outputBudget || 0, 0)}
        <p class="bar-legend output-legend">${num(m.outputWindow || 0)} / ${num(m.outputBudget || 0)} output tokens in window${m.outputTrigger && m.outputTrigger <= m.outputLimit ? " (limit learned from a 429)" : m.outputStated ? " (limit stated)" : ""}</p>` : ""}
        <dl class="facts">
          <div><dt>reserved</dt><dd>${num(m.reserved)}</dd></div>
          <div><dt>in flight</dt><dd>${m.inFlight}</dd></div>
          <div><dt>learned quota</dt><dd>${num(m.quota)}${m.maxTpm ? ` (cap ${num(m.maxTpm)})` : ""}</dd></div>
          <div><dt>tightest trigger</dt><dd>${m.trigger ? num(m.trigger) : "none"}</dd></div>
          <div><dt>429s</dt><dd>${m.rateLimited}</dd></div>
          <div><dt>held so far</dt><dd>${m.waits}</dd></div>
        </dl>
        <div class="queue"><h3>Queue</h3>${groups.size ? `<ul>${[...groups].map(([g, n]) => `<li>${esc(g)} <b>${n}</b></li>`).join("")}</ul>` : `<span class="muted">empty</span>`}</div>
        <div class="history"><h3>Quota and trigger</h3>
          ${lineChart([
            { name: "learned quota", cls: "quota", points: hist.map((h) => ({ t: h.t, v: h.quota })) },
            { name: "tightest trigger", cls: "trigger", points: hist.filter((h) => h.trigger > 0).map((h) => ({ t: h.t, v: h.trigger })) },
            { name: "window tokens", cls: "window", points: hist.map((h) => ({ t: h.t, v: h.window })) },
          ], { title: `${k}: learned quota, trigger and window over time` })}
          <p class="legend"><i class="quota"></i>quota <i class="trigger"></i>trigger <i class="window"></i>window</p></div>
        <div class="r429"><h3>Recent 429s</h3>${r429.length ? `<ul>${r429.map((r) => `<li>${clock(r.at)} · ${esc(r.session || "–")} · hint ${r.retryAfterMs ? dur(r.retryAfterMs) : "none"}${r.fallback ? " (fallback)" : ""}</li>`).join("")}</ul>` : m.last429 ? `<span class="muted">last ${ago(m.last429)}</span>` : `<span class="muted">none</span>`}</div>
      </article>`;
    }
    view.innerHTML = out + `</div>`;
  },

  waits() {
    const w = state.waits;
    if (!w) return (view.innerHTML = empty("loading…"));
    const at = state.waitsAt;
    let out = `<section class="head"><h1>Waits</h1><p class="meta">${w.held.length} held by the gate · ${w.longTerm.length} in a long-term quota wait · a held call fails open after ${dur(w.maxWaitMs)}</p></section>`;
    out += `<h2>Held by the gate</h2>`;
    if (!w.held.length) out += empty("Nothing is held: every call goes straight through.");
    else {
      out += `<div class="table-wrap"><table class="held"><thead><tr><th>model</th><th>session</th><th class="hide-sm">priority</th><th class="num hide-sm">tokens</th><th>reason</th><th class="num hide-sm">waited</th><th class="num">admission</th></tr></thead><tbody>`;
      for (const h of w.held) {
        out += `<tr data-session="${esc(h.session)}"><td>${esc(h.provider)}/${esc(h.model)} <span class="muted">#${h.position}</span></td><td>${esc(h.session || "–")}</td>
          <td class="hide-sm">${esc(h.priority)}</td><td class="num hide-sm">${num(h.tokens)}</td><td><span class="reason r-${esc(h.reason)}">${esc(h.reason)}</span></td>
          <td class="num hide-sm"><span data-since="${at - h.waitedMs}">${dur(h.waitedMs)}</span></td>
          <td class="num">${until(h.expectedInMs, at, { prefix: "~", done: "due" })}</td></tr>`;
      }
      out += `</tbody></table></div>`;
    }
    out += `<h2>Long-term quota waits</h2>`;
    if (!w.longTerm.length) out += empty("No session is waiting for its quota to come back.");
    else {
      out += `<div class="table-wrap"><table><thead><tr><th>session</th><th>provider</th><th class="num">attempts</th><th class="hide-sm">since</th><th class="num">next attempt</th></tr></thead><tbody>`;
      for (const l of w.longTerm) {
        const next = l.pending && l.nextAttemptAt ? until(new Date(l.nextAttemptAt).getTime() - new Date(w.at).getTime(), at) : `<span class="muted">not armed</span>`;
        out += `<tr><td>${esc(l.session)}</td><td>${esc(l.provider)}</td><td class="num">${l.attempts}</td><td class="hide-sm">${clock(l.enteredAt)}</td><td class="num">${next}</td></tr>`;
      }
      out += `</tbody></table></div>`;
    }
    view.innerHTML = out;
  },

  pools() {
    const r = state.routes;
    if (!r) return (view.innerHTML = empty("loading…"));
    let out = `<section class="head"><h1>Pools</h1><p class="meta">share: each usable route's score over the pool's total, as a draw weighs it</p></section>`;
    for (const w of r.warnings || []) out += `<p class="warn">${esc(w)}</p>`;
    if (!r.pools.length) out += empty("No pools are configured (pools: in the config).");
    for (const p of r.pools) {
      const total = p.routes.reduce((s, x) => s + (x.usable && x.score > 0 ? x.score : 0), 0);
      const usable = p.routes.filter((x) => x.usable).length;
      out += `<article class="card pool" data-pool="${esc(p.name)}"><header><h2>${esc(p.name)}</h2><span class="muted">${esc(r.scoring?.[p.name] || "default")} scoring${p.midSessionSwitch ? "" : " · no mid-session switch"}</span></header>
        <div class="table-wrap"><table class="routes"><thead><tr><th>route</th><th class="num">reading</th><th class="num">age</th><th class="num">score</th><th>mark</th><th class="num">share</th></tr></thead><tbody>`;
      for (const x of p.routes) {
        const rem = x.reading?.remaining;
        let sh = 0;
        if (x.usable) sh = total > 0 ? (x.score > 0 ? x.score / total : 0) : 1 / Math.max(usable, 1);
        out += `<tr class="${x.usable ? "" : "unusable"}" data-route="${esc(x.provider)}/${esc(x.model)}"><td>${esc(x.provider)}/${esc(x.model)}${x.why ? `<div class="why">${esc(x.why)}</div>` : ""}</td>
          <td class="num" data-label="reading">${rem === undefined || rem === null ? `<span class="muted">none</span>` : Math.abs(rem) < 1000 ? esc(String(+rem.toFixed(2))) : num(rem)}${r.sourceErrors?.[x.provider] ? ` <span class="badge hot" title="${esc(r.sourceErrors[x.provider])}">error</span>` : ""}</td>
          <td class="num" data-label="age">${x.readingAgeMs !== undefined ? dur(x.readingAgeMs) : "–"}</td>
          <td class="num" data-label="score">${x.score === null || x.score === undefined ? "–" : x.score.toFixed(2)}</td>
          <td data-label="mark">${x.marked ? `<span class="badge hot">marked</span>${x.markUntil ? ` <span class="muted">until ${clock(x.markUntil)}</span>` : ""}` : `<span class="muted">–</span>`}</td>
          <td class="num" data-label="share">${share(sh)}${(sh * 100).toFixed(0)}%</td></tr>`;
      }
      out += `</tbody></table></div></article>`;
    }
    out += `<h2>Failovers and long-term waits</h2>`;
    const evs = state.poolEvents.items.slice().reverse();
    if (!evs.length) out += empty("No failover since the console opened.");
    else {
      out += `<ul class="feed" id="pool-feed">`;
      for (const e of evs) {
        let what = "";
        if (e.type === "failover") what = `${esc(e.session)} moved ${e.from ? esc(e.from.provider + "/" + e.from.model) : "?"} → ${e.to ? esc(e.to.provider + "/" + e.to.model) : "?"}${e.pool ? ` in ${esc(e.pool)}` : ""}`;
        else if (e.type === "entered") what = `${esc(e.session)} entered a long-term wait on ${esc(e.provider || "?")}`;
        else what = `${esc(e.session)} left its long-term wait (${esc(e.reason || "")})`;
        out += `<li class="ev-${e.type}"><time>${clock(e.at)}</time> <b>${e.type}</b> ${what}</li>`;
      }
      out += `</ul>`;
    }
    view.innerHTML = out;
  },

  sessions() {
    sessionsView.render();
  },
  retry() {
    retryView.render();
  },
  failures() {
    failuresView.render();
  },
};

// --- sessions ---------------------------------------------------------------

// How long a session's card keeps saying "saved" after its settings were saved,
// across the refreshes the save itself sets off (its event redraws the list
// within a fraction of a second).
const savedShownMs = 4000;

const sessionsView = {
  saved: new Map(), // session id → when its settings were last saved here (Date.now())

  // render draws the lookup form once per visit and the list from state. A
  // session's form being edited (changed, not yet saved) or focused holds the
  // list still, so a refresh never throws away a choice in progress.
  async render() {
    if (!document.getElementById("session-list")) {
      view.innerHTML = `<section class="head"><h1>Sessions</h1><p class="meta" id="session-count">loading…</p></section>
        <form id="session-find" class="inline"><label>Session id <input id="session-id" required maxlength="256" autocomplete="off" spellcheck="false"></label><button class="primary">Show</button></form>
        <div id="session-list" class="cards"></div>`;
      document.getElementById("session-find").addEventListener("submit", (ev) => {
        ev.preventDefault();
        const id = document.getElementById("session-id").value.trim();
        if (!id) return;
        state.lookups = [id, ...state.lookups.filter((x) => x !== id)].slice(0, maxLookups);
        this.draw(true);
      });
    }
    if (!state.sessions) {
      try {
        await refreshSessions();
      } catch (e) {
        document.getElementById("session-list").innerHTML = `<p class="error">${esc(e.message)}</p>`;
        return;
      }
    }
    await this.draw(false);
  },

  async draw(force) {
    const list = document.getElementById("session-list");
    if (!list || !state.sessions) return;
    const typing = list.contains(document.activeElement) && document.activeElement.matches("select, input");
    if (!force && (list.querySelector("form.dirty") || typing)) return;
    const l = state.sessions;
    const listed = new Map(l.sessions.map((s) => [s.session, s]));
    // Looked-up sessions the page does not list come first, read one by one.
    const extra = state.lookups.filter((id) => !listed.has(id));
    const looked = await Promise.all(extra.map((id) => this.lookup(id)));
    if (current !== "sessions" || (!force && list.querySelector("form.dirty"))) return;
    document.getElementById("session-count").textContent = l.total
      ? `${l.sessions.length < l.total ? `the ${l.sessions.length} most recently active of ${l.total} sessions` : `${l.total} session${l.total === 1 ? "" : "s"}`}, most recently active first · look one up by id to see or change it`
      : "no session has called yet · look one up by id to see or change it";
    const cards = [...looked, ...l.sessions.map((s) => this.card(s, state.lookups.includes(s.session)))];
    list.innerHTML = cards.length ? cards.join("") : empty("No session has called through the gate yet. Calls with X-Gate-Session (or the decision API) make them appear here.");
    for (const f of list.querySelectorAll("form.session")) {
      f.addEventListener("change", () => f.classList.add("dirty"));
      f.addEventListener("submit", (ev) => this.save(ev));
    }
  },

  // lookup reads a session the list does not hold (GET /gate/v1/sessions/{id}
  // answers any id: one with no settings shows the defaults).
  async lookup(id) {
    const enc = encodeURIComponent(id);
    let s;
    try {
      s = await get(`/gate/v1/sessions/${enc}`);
    } catch (e) {
      return `<article class="card"><h2>${esc(id)}</h2><p class="error">${esc(e.message)}</p></article>`;
    }
    if (!state.unavailable.has("stats")) {
      try {
        s.turn = (await get(`/gate/v1/stats?session=${enc}`)).turn;
      } catch (e) {
        if (e.status === 404) state.unavailable.add("stats");
      }
    }
    return this.card(s, true);
  },

  card(s, looked) {
    const id = s.session;
    const justSaved = Date.now() - (this.saved.get(id) || 0) < savedShownMs;
    const opt = (v, cur, label = v) => `<option value="${esc(v)}"${v === cur ? " selected" : ""}>${esc(label)}</option>`;
    const sw = s.switch || "default";
    const pl = s.poolSetting || "default";
    const badges = (s.longTerm ? `<span class="badge warm">long-term wait</span>` : "") + (looked ? `<span class="badge">looked up</span>` : "");
    return `<article class="card session" data-session="${esc(id)}">
      <header><h2>${esc(id)}</h2>${badges}${s.lastActive ? `<span class="muted when" title="${esc(s.lastActive)}">active ${ago(s.lastActive)}</span>` : ""}</header>
      <dl class="facts">
        <div><dt>quota retry</dt><dd>${s.enabled ? "on" : "off"} <span class="muted">(${esc(s.source)})</span></dd></div>
        <div><dt>pool</dt><dd>${esc(s.pool ?? "none")} <span class="muted">(${esc(s.poolSource)})</span></dd></div>
        <div><dt>route</dt><dd>${s.route ? esc(s.route.provider + "/" + s.route.model) : `<span class="muted">not started</span>`}</dd></div>
      </dl>
      ${turnSummary(s.turn, state.retryRounds, s.budgets)}
      <form class="session inline" data-session="${esc(id)}">
        <label>switch <select name="switch">${opt("default", sw)}${opt("on", sw)}${opt("off", sw)}</select></label>
        <label>pool <select name="pool">${opt("default", pl)}${opt("off", pl)}${(s.pools || []).map((p) => opt(p, pl)).join("")}</select></label>
        <button class="primary">Save</button><span class="result${justSaved ? " ok" : ""}" role="status">${justSaved ? "saved" : ""}</span>
      </form>
      ${s.warning ? `<p class="warn">${esc(s.warning)}</p>` : ""}
    </article>`;
  },

  async save(ev) {
    ev.preventDefault();
    const f = ev.target;
    const out = f.querySelector(".result");
    try {
      await put(`/gate/v1/sessions/${encodeURIComponent(f.dataset.session)}`, { switch: f.elements.switch.value, pool: f.elements.pool.value });
      f.classList.remove("dirty");
      out.className = "result ok";
      out.textContent = "saved";
      const now = Date.now();
      for (const [id, at] of this.saved) if (now - at >= savedShownMs) this.saved.delete(id);
      this.saved.set(f.dataset.session, now);
      setTimeout(async () => {
        if (current !== "sessions") return;
        await refreshSessions().catch(noteError);
        this.draw(true);
      }, 600);
    } catch (e) {
      this.saved.delete(f.dataset.session); // a redraw must not bring back an earlier "saved"
      out.className = "result error";
      out.textContent = e.message;
    }
  },
};

// turnSummary shows a session's current turn from the retry statistics: what
// its retries cost, and what is left of the budget. The list answers budgets
// per provider (retry.rounds each for a turn and provider); a session looked up
// by id has none, and shows rounds less its retries.
function turnSummary(turn, rounds, budgets) {
  if (!turn) return `<p class="meta">no retry decision in this turn yet${rounds !== undefined ? ` · budget ${rounds} retries a turn and provider` : ""}</p>`;
  const s = turn.stats || {};
  let left = rounds !== undefined ? String(Math.max(rounds - (s.retries || 0), 0)) : "–";
  if (budgets && budgets.length === 1) left = String(budgets[0].left);
  else if (budgets && budgets.length > 1) left = budgets.map((b) => `${esc(b.provider)} ${b.left}`).join(" · ");
  return `<dl class="facts turn">
    <div><dt>turn</dt><dd>${esc(turn.turn || "–")}</dd></div>
    <div><dt>retries</dt><dd>${num(s.retries || 0)}${rounds !== undefined ? ` <span class="muted">of ${rounds}</span>` : ""}</dd></div>
    <div><dt>budget left</dt><dd>${left}</dd></div>
    <div><dt>waited</dt><dd>${dur(s.waitedMs || 0)}</dd></div>
    <div><dt>gave up</dt><dd>${num(s.gaveUp || 0)}</dd></div>
    <div><dt>failovers</dt><dd>${num(s.failovers || 0)}</dd></div>
  </dl>`;
}

// --- retry settings -----------------------------------------------------------

const fields = [
  ["rounds", "rounds", "retries one (session, turn, provider) gets; 0 never retries"],
  ["initialDelay", "initial delay", "wait of round 1, e.g. 2s"],
  ["multiplier", "multiplier", "growth of the wait each round (1 = fixed)"],
  ["maxDelay", "max delay", "cap of every round's wait, e.g. 60s"],
  ["jitter", "jitter", "each wait is spread by ±jitter (0 to 1)"],
];

const retryView = {
  loaded: null,
  async render() {
    view.innerHTML = `<section class="head"><h1>Retry settings</h1><p class="meta">the backoff curve: each bar a round (its wait; lighter, its longest with jitter), the line the cumulative longest wait</p></section><div id="retry-body">${empty("loading…")}</div>`;
    let s;
    try {
      s = await get("/gate/v1/settings/retry");
    } catch (e) {
      document.getElementById("retry-body").innerHTML = `<p class="error">${e.status === 404 ? "This server has no runtime settings API (GET /gate/v1/settings/retry): edit retry: in the config file instead." : esc(e.message)}</p>`;
      return;
    }
    if (current !== "retry") return;
    this.loaded = s;
    const eff = s.effective || {};
    const ov = s.overrides || {};
    let form = `<form id="retry-form" class="card retry" novalidate><div class="fields">`;
    for (const [k, label, help] of fields) {
      form += `<label class="field${k in ov ? " overridden" : ""}"><span>${label}${k in ov ? ` <span class="badge">runtime</span>` : ""}</span>
        <input name="${k}" value="${esc(eff[k] ?? "")}" inputmode="${k === "rounds" ? "numeric" : k === "multiplier" || k === "jitter" ? "decimal" : "text"}" autocomplete="off" spellcheck="false" aria-describedby="err-${k}">
        <small class="help">${esc(help)}</small><small class="error" id="err-${k}"></small></label>`;
    }
    form += `</div><div id="curve-chart"></div><p id="curve-sum" class="meta"></p><p id="curve-warn" class="warn" hidden></p>
      <div class="row"><button type="submit" class="primary" id="retry-save">Save</button><button type="button" id="retry-reset">Reset to the file</button><span id="retry-result" class="result" role="status"></span></div></form>`;
    document.getElementById("retry-body").innerHTML = form;
    const f = document.getElementById("retry-form");
    f.addEventListener("input", () => this.update());
    f.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.save();
    });
    document.getElementById("retry-reset").addEventListener("click", () => this.reset());
    this.update();
  },

  text() {
    const f = document.getElementById("retry-form");
    return Object.fromEntries(fields.map(([k]) => [k, f.elements[k].value]));
  },

  update() {
    const { values, errors, warnings } = validate(this.text());
    const f = document.getElementById("retry-form");
    for (const [k] of fields) {
      f.elements[k].classList.toggle("invalid", !!errors[k]);
      f.elements[k].setAttribute("aria-invalid", errors[k] ? "true" : "false");
      document.getElementById("err-" + k).textContent = errors[k] || "";
    }
    const ok = Object.keys(errors).length === 0;
    document.getElementById("retry-save").disabled = !ok;
    const w = document.getElementById("curve-warn");
    w.hidden = warnings.length === 0;
    w.textContent = warnings.join(" ");
    if (!ok) return;
    const pts = curve(values);
    const box = document.getElementById("curve-chart");
    // Drawn at the box's own width, so its text keeps its size on a phone.
    box.innerHTML = curveChart(pts, { width: Math.max(Math.min(box.clientWidth || 720, 980), 300), height: box.clientWidth < 500 ? 200 : 260 }) +
      `<p class="curve-legend"><i class="wait"></i>wait <i class="long"></i>longest with jitter <i class="cum"></i>cumulative longest</p>`;
    const last = pts[pts.length - 1];
    document.getElementById("curve-sum").textContent = last
      ? `${pts.length} rounds: ${dur(last.cum)} of waits without jitter, ${dur(last.cumLongest)} at the longest before gatectl gives up`
      : "no retries";
  },

  async save() {
    const { values, errors } = validate(this.text());
    if (Object.keys(errors).length) return;
    // Only what the user changed is sent: a key left as it was stays with the
    // file (or its earlier override) instead of becoming a new override.
    const eff = this.loaded?.effective || {};
    const { values: base } = validate(Object.fromEntries(fields.map(([k]) => [k, String(eff[k] ?? "")])));
    const body = {};
    for (const [k] of fields) {
      if (values[k] === base[k]) continue;
      body[k] = k === "initialDelay" || k === "maxDelay" ? goDuration(values[k]) : values[k];
    }
    if (!Object.keys(body).length) {
      const out = document.getElementById("retry-result");
      out.className = "result";
      out.textContent = "nothing changed";
      return;
    }
    await this.send(() => put("/gate/v1/settings/retry", body), "saved: the next failure plans on this curve");
  },

  async reset() {
    await this.send(() => post("/gate/v1/settings/retry/reset"), "reset to the config file");
  },

  async send(call, okText) {
    const out = document.getElementById("retry-result");
    this.saving = true;
    try {
      await call();
      await this.render();
      const r = document.getElementById("retry-result");
      if (r) {
        r.className = "result ok";
        r.textContent = okText;
      }
    } catch (e) {
      out.className = "result error";
      out.textContent = e.message;
      if (e.field) document.getElementById("err-" + e.field)?.replaceChildren(e.message);
    } finally {
      this.saving = false;
    }
  },

  // external: a settings event. Another client's change is shown unless the
  // editor is being typed in; this page's own save (its event arrives while it
  // saves, or after with the overrides already shown) is not drawn twice.
  external(d) {
    if (this.saving || JSON.stringify(d.overrides || {}) === JSON.stringify(this.loaded?.overrides || {})) return;
    if (!document.activeElement || !document.getElementById("retry-form")?.contains(document.activeElement)) this.render();
  },
};

// --- failures -------------------------------------------------------------

const failuresView = {
  async render() {
    let counts = [];
    let upstream = [];
    let unc = null;
    let err = "";
    try {
      const ms = await metrics(["gatectl_failures_total", "gatectl_upstream_responses_total"]);
      counts = ms.filter((m) => m.name === "gatectl_failures_total" && m.value > 0).sort((a, b) => b.value - a.value);
      upstream = ms.filter((m) => m.name === "gatectl_upstream_responses_total" && !/^2/.test(m.labels.status) && m.value > 0);
    } catch (e) {
      err = e.message;
    }
    try {
      unc = await get("/gate/v1/failures/unclassified");
    } catch (e) {
      err = err || e.message;
    }
    if (current !== "failures") return;
    let out = `<section class="head"><h1>Failures</h1><p class="meta">since this gatectl started</p></section>`;
    if (err) out += `<p class="error">${esc(err)}</p>`;
    out += `<div class="cols"><div><h2>By class</h2>`;
    out += counts.length
      ? `<table class="compact"><tbody>${counts.map((c) => `<tr><td><span class="cls">${esc(c.labels.class)}</span></td><td class="num">${num(c.value)}</td></tr>`).join("")}</tbody></table>`
      : empty("No failure yet.");
    out += `</div><div><h2>By provider (non-2xx answers)</h2>`;
    out += upstream.length
      ? `<table class="compact"><thead><tr><th>provider</th><th>status</th><th class="num">count</th></tr></thead><tbody>${upstream.map((u) => `<tr><td>${esc(u.labels.provider)}</td><td>${u.labels.status === "0" ? "no answer" : esc(u.labels.status)}</td><td class="num">${num(u.value)}</td></tr>`).join("")}</tbody></table>`
      : empty("No provider has failed a call.");
    out += `</div></div><h2>Unclassified failures</h2><p class="meta">decided only by a status-only rule or not at all: write a rule for these (<code>gatectl classify --explain</code>)</p>`;
    const fs = unc?.failures || [];
    if (!fs.length) out += empty("None: every failure so far matched a specific rule.");
    else {
      out += `<div class="table-wrap"><table class="unclassified"><thead><tr><th>time</th><th>provider</th><th>status</th><th class="hide-sm">class · by</th><th>excerpt (redacted)</th></tr></thead><tbody>`;
      for (const f of fs.slice(0, 50)) { // newest first, as the server lists them
        out += `<tr><td>${clock(f.time)}</td><td>${esc(f.provider)}${f.model ? `/${esc(f.model)}` : ""}</td><td>${f.status || esc(f.errorKind || "–")}</td>
          <td class="hide-sm">${esc(f.class)} · <span class="muted">${esc(f.by)}</span></td><td>${f.excerpt ? `<code class="excerpt">${esc(f.excerpt)}</code>${f.truncated ? " …" : ""}` : `<span class="muted">(empty body)</span>`}</td></tr>`;
      }
      out += `</tbody></table></div>`;
    }
    view.innerHTML = out;
  },
};

// --- navigation -------------------------------------------------------------

function show() {
  const name = (location.hash || "#models").slice(1);
  current = views[name] ? name : "models";
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === current);
  document.body.dataset.view = current;
  render();
  refresh();
}

// --- token ------------------------------------------------------------------

function askToken() {
  const d = document.getElementById("token-dialog");
  if (d.open) return;
  d.showModal();
}

document.getElementById("token-form").addEventListener("submit", () => {
  const t = document.getElementById("token-input").value.trim();
  if (!t) return;
  try {
    setToken(t);
  } catch (e) {
    alert(e.message);
    return;
  }
  connect();
  show();
});

setUnauthorizedHandler(askToken);
window.addEventListener("hashchange", show);
setInterval(tick, 250);
setInterval(() => {
  if (current === "failures") failuresView.render();
  else refresh();
}, 2000);
connect();
show();
