// The s3queue dashboard: polls /api/state, draws it, shows a task on
// demand. Every text from the server goes through textContent, never HTML.
// A monitor started with a token wants it on every API request: the page
// sends what is typed in its token box (kept in the page's memory only).
"use strict";

const $ = (id) => document.getElementById(id);
let state = null;
let needToken = false; // the server answered 401: the token box is needed
let shownTask = null;
let shownLive = false; // the task shown may still change: re-read it now and then
let shownRead = 0;     // when it was last read (ms)

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k == null ? "" : String(k)));
  return e;
}

function message(text, isError) {
  const m = $("message");
  m.textContent = text;
  m.className = isError ? "error" : "";
  m.hidden = !text;
}

function ago(secs) {
  if (secs == null || isNaN(secs)) return "–";
  const s = Math.round(secs);
  if (s < 0) return "in " + ago(-s);
  if (s < 90) return s + " s";
  if (s < 5400) return Math.round(s / 60) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}

function since(t) { // seconds from t to the state's time
  if (!t || !state) return null;
  return (Date.parse(state.at) - Date.parse(t)) / 1000;
}

function fmtTime(t) { return t ? new Date(t).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "–"; }

function money(d) {
  if (d >= 1) return "$" + d.toFixed(2);
  if (d >= 0.01) return "$" + d.toFixed(3);
  return "$" + d.toFixed(5);
}

async function api(method, path) {
  const opts = { method, headers: {} };
  const token = $("token").value;
  if (token) opts.headers["Authorization"] = "Bearer " + token;
  const r = await fetch(path, opts);
  let body = null;
  try { body = await r.json(); } catch (e) { body = { error: "the dashboard answered " + r.status + " without JSON" }; }
  if (r.status === 401 && !needToken) {
    needToken = true;
    drawAccess();
  }
  if (!r.ok) {
    const err = new Error((body && body.error) || ("HTTP " + r.status));
    err.status = r.status;
    throw err;
  }
  return body;
}

// drawAccess shows the token box when the server wants a token, and the
// action buttons only when actions are enabled (a monitor without a token
// refuses them all).
function drawAccess() {
  const actions = !!(state && state.actions);
  $("token-form").hidden = !(actions || needToken);
  $("task-requeue").hidden = !actions;
  $("task-cancel").hidden = !actions;
  $("dead-types").hidden = !actions;
}

async function refresh() {
  try {
    state = await api("GET", "api/state");
    draw();
  } catch (e) {
    if (e.status === 401) {
      $("summary").textContent = $("token").value ? "the token typed is not this dashboard's: " + e.message : "this dashboard needs its token: type it in the Token box";
      return;
    }
    $("summary").textContent = "cannot reach the monitor: " + e.message;
  }
}

function draw() {
  const s = state;
  if (!s.at || s.at.startsWith("0001")) {
    $("summary").textContent = "monitor " + s.monitor + ": no sweep yet" + (s.leading ? "" : " (standing by: another monitor leads)");
  } else {
    $("summary").textContent = "monitor " + s.monitor + (s.leading ? " · leading" : " · standing by") + " · as of " + fmtTime(s.at) + " · " + s.shards.length + " shard(s)";
  }
  for (const st of ["pending", "running", "blocked", "succeeded", "dead", "canceled"]) $("total-" + st).textContent = (s.totals && s.totals[st]) || 0;
  if (s.spend && s.spend.available) {
    $("spend").textContent = money(s.spend.per_hour) + "/h";
    $("spend-note").textContent = money(s.spend.per_month) + "/month at the rate of the last " + ago(s.spend.window_secs) + "; the monitor's own requests";
  } else {
    $("spend").textContent = "none";
    $("spend-note").textContent = (s.spend && s.spend.why) || "not available";
  }
  drawAccess();
  drawShards(s);
  drawMembers(s);
  drawDead(s);
  drawCharts(s);
}

function drawShards(s) {
  const tb = $("shards").tBodies[0];
  tb.replaceChildren(...s.shards.map((sh) => {
    const c = sh.counts || {};
    return el("tr", { "data-shard": sh.shard },
      el("td", {}, sh.shard), el("td", {}, sh.member || "none"), el("td", {}, sh.role || "–"),
      el("td", {}, sh.lease_expires ? ago(-since(sh.lease_expires)) : "–"),
      el("td", { class: "depth" }, sh.depth), el("td", {}, sh.oldest_pending ? ago(sh.oldest_pending_secs) : "–"),
      el("td", {}, c.running || 0), el("td", {}, c.blocked || 0), el("td", {}, c.succeeded || 0),
      el("td", {}, c.dead || 0), el("td", {}, c.canceled || 0), el("td", {}, swept(sh)));
  }));
}

// swept says when the shard was last swept and, when that sweep started
// past a history too long to list each time, when the history was counted.
function swept(sh) {
  if (!sh.swept) return "not yet";
  const t = ago(since(sh.swept)) + " ago";
  if (sh.whole) return t;
  return t + " (history " + (sh.walked ? "walked " + ago(since(sh.walked)) + " ago" : "not walked yet") + ")";
}

function drawMembers(s) {
  const rows = (s.members || []).map((m) => el("tr", {},
    el("td", {}, el("code", {}, m.id)),
    el("td", {}, [(m.own || []).join(","), (m.drain || []).length ? "drains " + m.drain.join(",") : ""].filter(Boolean).join(" · ") || "–"),
    el("td", {}, (m.types || []).join(", ") || "–"),
    el("td", {}, [m.busy ? "busy" : "idle", m.dedicated ? "dedicated" : "", m.leased ? "leased" : ""].filter(Boolean).join(", ")),
    el("td", {}, ago(-since(m.expires_at))), el("td", {}, ago(since(m.joined)) + " ago")));
  for (const m of s.lapsed || []) rows.push(el("tr", { class: "muted" }, el("td", {}, el("code", {}, m.id)), el("td", {}, "–"), el("td", {}, (m.types || []).join(", ")), el("td", {}, "lapsed"), el("td", {}, "expired " + ago(since(m.expires_at)) + " ago"), el("td", {}, "")));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 6, class: "muted" }, "no live member: the fleet is empty or the monitor has not read it yet")));
  $("members").tBodies[0].replaceChildren(...rows);
  $("standbys").textContent = (s.members || []).length + " live member(s)" + (s.asleep ? ", asleep (the doorbell is set)" : "") +
    (s.want ? ", " + s.want + " wanted by busy members" : "") + ". Standbys only read the fleet object and leave no trace in the bucket, so they are not listed.";
}

function drawDead(s) {
  const dead = s.dead || [];
  const types = [...new Set(dead.map((d) => d.type))].sort();
  $("dead-types").replaceChildren(...types.map((t) => el("button", { type: "button", class: "secondary", "data-type": t, onclick: () => requeueType(t) },
    "Requeue all dead " + t + " (" + dead.filter((d) => d.type === t).length + ")")));
  const rows = dead.map((d) => el("tr", { "data-id": d.id },
    el("td", {}, el("a", { onclick: () => showTask(d.id) }, el("code", {}, d.id))), el("td", {}, d.type),
    el("td", { class: "err", title: d.last_error }, d.last_error), el("td", {}, d.attempts), el("td", {}, ago(since(d.ended)) + " ago"),
    el("td", {}, s.actions ? el("button", { type: "button", class: "secondary requeue", onclick: () => act("POST", "api/tasks/" + encodeURIComponent(d.id) + "/requeue", "requeued " + d.id, d.id) }, "Requeue") : "")));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 6, class: "muted" }, "no dead task")));
  $("dead").tBodies[0].replaceChildren(...rows);
}

const NS = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

// chart draws stacked bars, one per minute, with a y axis label of max.
function chart(target, minutes, series, maxOf, fmt) {
  const W = 600, H = 160, L = 36, B = 18, n = minutes.length || 60;
  const max = Math.max(maxOf, 1e-9);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" });
  for (const f of [0, 0.5, 1]) {
    const y = H - B - f * (H - B - 6);
    root.append(svg("line", { x1: L, x2: W, y1: y, y2: y, stroke: "#e5e7eb" }));
    const t = svg("text", { x: L - 4, y: y + 4, "text-anchor": "end", "font-size": 10, fill: "#6b7280" });
    t.textContent = fmt(f * maxOf);
    root.append(t);
  }
  const bw = (W - L) / n;
  minutes.forEach((m, i) => {
    let y = H - B;
    for (const [key, color] of series) {
      const v = typeof key === "function" ? key(m) : m[key] || 0;
      if (v <= 0) continue;
      const h = (v / max) * (H - B - 6);
      y -= h;
      const r = svg("rect", { x: L + i * bw + 1, y, width: Math.max(bw - 2, 1), height: h, fill: color });
      const tip = svg("title", {});
      tip.textContent = new Date(m.start).toISOString().slice(11, 16) + "Z: " + fmt(v);
      r.append(tip);
      root.append(r);
    }
  });
  for (const [i, label] of [[0, "-60 min"], [n - 1, "now"]]) {
    const t = svg("text", { x: L + i * bw + (i ? bw : 0), y: H - 4, "text-anchor": i ? "end" : "start", "font-size": 10, fill: "#6b7280" });
    t.textContent = label;
    root.append(t);
  }
  target.replaceChildren(root);
}

function drawCharts(s) {
  const mins = s.minutes || [];
  const maxEnded = Math.max(0, ...mins.map((m) => (m.succeeded || 0) + (m.dead || 0) + (m.canceled || 0)));
  chart($("chart-throughput"), mins, [["succeeded", "#2f9e44"], ["dead", "#d9480f"], ["canceled", "#868e96"]], Math.max(maxEnded, 1), (v) => Math.round(v));
  const rate = (m) => { const e = (m.succeeded || 0) + (m.dead || 0); return e ? (m.dead || 0) / e : 0; };
  chart($("chart-failures"), mins, [[rate, "#d9480f"]], 1, (v) => Math.round(v * 100) + "%");
  const ended = mins.reduce((a, m) => a + (m.succeeded || 0) + (m.dead || 0) + (m.canceled || 0), 0);
  $("chart-throughput").setAttribute("data-ended", ended);
}

async function act(method, path, done, id) {
  try {
    const r = await api(method, path);
    let text = done;
    if (r.requeued_count !== undefined) text = r.status + ": requeued " + r.requeued_count + " task(s)" + (r.failed_count ? "; " + r.failed_count + " could not be: " + (r.failed || []).map((f) => f.id + ": " + f.error).join("; ") : "");
    if (r.status === "cancel requested") text = "cancel requested for " + r.id + " (its handler is told at the next renewal)";
    message(text, !!r.failed_count);
    if (id && shownTask === id) showTask(id);
    refresh();
  } catch (e) {
    message("refused: " + e.message, true);
  }
}

function requeueType(t) {
  act("POST", "api/dead/requeue?type=" + encodeURIComponent(t), "requeued the dead " + t);
}

async function showTask(id) {
  id = id.trim();
  if (!id) return;
  shownTask = id;
  $("search-id").value = id;
  try {
    const r = await api("GET", "api/tasks/" + encodeURIComponent(id));
    drawTask(r.task);
    shownLive = !["succeeded", "dead", "canceled"].includes(r.task.status);
    shownRead = Date.now();
    history.replaceState(null, "", "#task=" + encodeURIComponent(id));
  } catch (e) {
    $("task").hidden = true;
    message("task " + id + ": " + e.message, true);
  }
}

function drawTask(t) {
  $("task").hidden = false;
  $("task-id").textContent = t.id;
  const st = $("task-status");
  st.textContent = t.status;
  st.className = "status " + t.status;
  $("task-requeue").disabled = !(t.status === "dead" || t.status === "canceled");
  $("task-cancel").disabled = ["succeeded", "dead", "canceled"].includes(t.status);
  const fields = [["type", t.type], ["shard", t.shard], ["attempt", t.attempt + " of " + t.max_attempts], ["created", fmtTime(t.created_at)],
    ["updated", fmtTime(t.updated_at)], ["available", fmtTime(t.available_at)], ["slot", t.slot || "–"],
    ["claim", t.claim ? t.claim.worker + " until " + fmtTime(t.claim.expires_at) : "–"], ["last error", t.last_error || "–"],
    ["input", t.input ? JSON.stringify(t.input) : "–"], ["result", t.result ? JSON.stringify(t.result) : "–"]];
  if (t.idempotency_key) fields.push(["idempotency key", t.idempotency_key]);
  if (t.cancel_requested) fields.push(["cancel", "requested"]);
  $("task-fields").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  const hist = (t.history || []).map((h) => el("tr", {}, el("td", {}, fmtTime(h.at)), el("td", {}, h.from || "–"), el("td", {}, h.to),
    el("td", {}, h.worker || ""), el("td", {}, h.attempt || ""), el("td", {}, h.reason || "")));
  if (t.history_dropped) hist.splice(1, 0, el("tr", {}, el("td", { colspan: 6, class: "muted" }, t.history_dropped + " transitions dropped")));
  $("task-history").tBodies[0].replaceChildren(...hist);
  const deps = (t.deps || []).map((d) => el("div", {}, el("a", { onclick: () => showTask(d.id) }, el("code", {}, d.id)), " " + (d.ended || "not finished")));
  $("task-deps").replaceChildren(...(deps.length ? deps : [el("span", { class: "muted" }, "none" + (t.dependents ? "; other tasks depend on this one" : ""))]));
}

document.addEventListener("DOMContentLoaded", () => {
  $("search").addEventListener("submit", (e) => { e.preventDefault(); message(""); showTask($("search-id").value); });
  $("token-form").addEventListener("submit", (e) => { e.preventDefault(); refresh(); });
  $("token").addEventListener("change", () => refresh());
  $("task-requeue").addEventListener("click", () => act("POST", "api/tasks/" + encodeURIComponent(shownTask) + "/requeue", "requeued " + shownTask, shownTask));
  $("task-cancel").addEventListener("click", () => act("POST", "api/tasks/" + encodeURIComponent(shownTask) + "/cancel", "canceled " + shownTask, shownTask));
  const m = location.hash.match(/^#task=(.+)$/);
  if (m) showTask(decodeURIComponent(m[1]));
  refresh();
  // A live task shown is re-read every 5 s (one GET each) until it ends;
  // a finished one is read once.
  setInterval(() => {
    refresh();
    if (shownTask && shownLive && !$("task").hidden && Date.now() - shownRead >= 5000) showTask(shownTask);
  }, 2000);
});
