// capn dashboard: plain JavaScript, no framework. State comes from the
// gateway's watch stream (/v1/watch) and, for the selected cluster, its
// event timeline (/v1/clusters/{name}/events?follow=true). Rollouts are
// not on the watch stream: the page re-reads /v1/rollouts every
// ROLLOUT_POLL_MS while it is live and visible, and with them the selected
// class cluster (GET /v1/clusters/{name}) for status.topology, which the
// gateway adds on reads but the watch stream does not carry. Streams are read
// with fetch() and a ReadableStream parser because EventSource cannot send
// the Authorization header. The page authenticates with a pasted token
// (kept in localStorage, sent as Authorization) or, without one, with the
// session cookie a login link from `capn dashboard` set (HttpOnly: the
// page never sees it; fetch sends it).
"use strict";

const TOKEN_KEY = "capn.token";
const MAX_EVENTS = 50;
const ROLLOUT_POLL_MS = 3000;

const state = {
  clusters: new Map(), // name -> Cluster
  machines: new Map(), // name -> Machine
  machineCluster: new Map(), // name -> cluster name (kept when a spec goes away)
  selected: null,
  rollouts: new Map(), // name -> Rollout (spec and the fleet-manager's status)
  rolloutsLoaded: false,
  selectedRollout: null,
  topology: new Map(), // cluster name -> status.topology from a read
  events: [], // newest first
  synced: false,
  expanded: new Set(), // keys of nodes whose conditions are shown in full
};

const $ = (sel) => document.querySelector(sel);

function token() { return localStorage.getItem(TOKEN_KEY) || ""; }

// authHeaders is the Authorization header of a pasted token; without one
// the session cookie, if any, authenticates.
function authHeaders() {
  const t = token();
  return t ? { Authorization: "Bearer " + t } : {};
}

const LOGIN_HINT = "log in: run capn dashboard, or paste a token";

function setConn(s, text) {
  const el = $("#conn");
  el.dataset.state = s;
  el.textContent = text;
}

class AuthError extends Error {}

// sse reads one Server-Sent Events response, calling onEvent({event, data,
// id}) for each event; it returns when the stream ends. lastId is sent as
// Last-Event-ID; onId is told each new id (to resume after a drop).
async function sse(url, { signal, lastId, onEvent, onId, onOpen }) {
  const headers = { Accept: "text/event-stream", ...authHeaders() };
  if (lastId) headers["Last-Event-ID"] = lastId;
  const res = await fetch(url, { headers, signal, cache: "no-store" });
  if (res.status === 401 || res.status === 403) throw new AuthError(await problemText(res));
  if (!res.ok) throw new Error(await problemText(res));
  if (onOpen) onOpen();
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let ev = { event: "", data: [], id: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      let line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {
        if (ev.id !== null && onId) onId(ev.id);
        if (ev.data.length) onEvent({ event: ev.event || "message", data: ev.data.join("\n"), id: ev.id });
        ev = { event: "", data: [], id: null };
        continue;
      }
      if (line.startsWith(":")) continue; // heartbeat comment
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? "" : line.slice(colon + 1);
      if (val.startsWith(" ")) val = val.slice(1);
      if (field === "event") ev.event = val;
      else if (field === "data") ev.data.push(val);
      else if (field === "id") ev.id = val;
    }
  }
}

async function problemText(res) {
  try {
    const p = await res.json();
    return `${res.status} ${p.title || ""}${p.detail ? ": " + p.detail : ""}`;
  } catch (_) {
    return `${res.status} ${res.statusText}`;
  }
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  if (signal) signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
});

// ---- watch ----

let watchAbort = null;

function startWatch() {
  if (watchAbort) watchAbort.abort();
  const ctl = new AbortController();
  watchAbort = ctl;
  watchLoop(ctl.signal);
}

async function watchLoop(signal) {
  let lastId = null;
  let backoff = 500;
  setConn("connecting", "connecting…");
  while (!signal.aborted) {
    try {
      await sse("/v1/watch", {
        signal, lastId,
        onOpen: () => { backoff = 500; if (!state.synced) setConn("connecting", "syncing…"); },
        onId: (id) => { lastId = id; },
        onEvent: onWatchEvent,
      });
      if (signal.aborted) return;
      setConn("reconnecting", "reconnecting…");
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof AuthError) {
        stopRolloutPolling();
        setConn("token", (token() ? "token rejected: " + err.message : LOGIN_HINT));
        showWho(null);
        if (!token()) $("#token").focus();
        return;
      }
      setConn("reconnecting", "reconnecting… (" + err.message + ")");
    }
    state.synced = false;
    await sleep(backoff, signal);
    backoff = Math.min(backoff * 2, 10000);
  }
}

function onWatchEvent(e) {
  let msg;
  try { msg = JSON.parse(e.data); } catch (_) { return; }
  switch (e.event) {
    case "RESET":
      state.clusters.clear();
      state.machines.clear();
      state.synced = false;
      break;
    case "SYNCED":
      state.synced = true;
      setConn("live", "live");
      whoAmI();
      startRolloutPolling();
      break;
    case "ADDED":
    case "MODIFIED":
    case "DELETED":
      applyChange(e.event, msg);
      break;
    default: // BOOKMARK: only the id moves on
      return;
  }
  scheduleRender();
}

function applyChange(type, msg) {
  const obj = msg.object || {};
  const name = obj.metadata && obj.metadata.name;
  if (!name) return;
  if (msg.kind === "Cluster") {
    if (type === "DELETED") state.clusters.delete(name);
    else state.clusters.set(name, obj);
    const known = state.topology.get(name);
    const pinned = obj.spec && obj.spec.topology;
    if (name === state.selected && pinned && (!known || n(known.revision) !== n(pinned.revision))) loadTopology(name);
  } else if (msg.kind === "Machine") {
    if (obj.spec && obj.spec.cluster) state.machineCluster.set(name, obj.spec.cluster);
    if (type === "DELETED") {
      state.machines.delete(name);
      state.machineCluster.delete(name);
    } else {
      state.machines.set(name, obj);
    }
  }
}

// ---- events of the selected cluster ----

let eventsAbort = null;

function followEvents(cluster) {
  if (eventsAbort) eventsAbort.abort();
  state.events = [];
  renderEvents();
  if (!cluster) return;
  const ctl = new AbortController();
  eventsAbort = ctl;
  eventsLoop(cluster, ctl.signal);
}

async function eventsLoop(cluster, signal) {
  let lastId = null;
  let backoff = 500;
  const url = `/v1/clusters/${encodeURIComponent(cluster)}/events?follow=true&limit=${MAX_EVENTS}`;
  while (!signal.aborted) {
    $("#events-state").textContent = "(connecting…)";
    try {
      await sse(url, {
        signal, lastId,
        onOpen: () => { backoff = 500; },
        onId: (id) => { lastId = id; },
        onEvent: (e) => {
          if (e.event === "SYNCED") { $("#events-state").textContent = "(live)"; return; }
          if (e.event !== "TIMELINE") return;
          let ev;
          try { ev = JSON.parse(e.data); } catch (_) { return; }
          if (state.events.some((x) => x.sequence === ev.sequence)) return;
          state.events.unshift(ev);
          state.events.sort((a, b) => b.sequence - a.sequence);
          if (state.events.length > MAX_EVENTS) state.events.length = MAX_EVENTS;
          scheduleRender();
        },
      });
    } catch (err) {
      if (signal.aborted) return;
      $("#events-state").textContent = "(" + err.message + ")";
      if (err instanceof AuthError) return;
    }
    if (signal.aborted) return;
    await sleep(backoff, signal);
    backoff = Math.min(backoff * 2, 10000);
  }
}

// ---- rollouts (polled) ----

let rolloutsTimer = null;
let rolloutsBusy = false;

function startRolloutPolling() {
  if (rolloutsTimer) return;
  loadRollouts();
  rolloutsTimer = setInterval(() => {
    if (document.visibilityState === "hidden") return;
    loadRollouts();
    if (state.selected) loadTopology(state.selected);
  }, ROLLOUT_POLL_MS);
}

function stopRolloutPolling() {
  if (rolloutsTimer) clearInterval(rolloutsTimer);
  rolloutsTimer = null;
}

// loadRollouts reads every rollout with its status; a failed read keeps
// what the page shows and says why.
async function loadRollouts() {
  if (rolloutsBusy) return;
  rolloutsBusy = true;
  try {
    const res = await fetch("/v1/rollouts", { headers: { Accept: "application/json", ...authHeaders() }, cache: "no-store" });
    if (res.status === 401 || res.status === 403) stopRolloutPolling();
    if (!res.ok) throw new Error(await problemText(res));
    const list = await res.json();
    state.rollouts = new Map((list.items || []).filter((r) => r.metadata && r.metadata.name).map((r) => [r.metadata.name, r]));
    state.rolloutsLoaded = true;
    $("#rollouts-state").textContent = "";
  } catch (err) {
    $("#rollouts-state").textContent = "(" + err.message + ")";
  } finally {
    rolloutsBusy = false;
  }
  renderRollouts();
}

// loadTopology reads a class cluster for its status.topology (its pinned
// revision against the class's current one); other clusters are not read.
const topologyBusy = new Set();
async function loadTopology(name) {
  const c = state.clusters.get(name);
  if (!c || !c.spec || !c.spec.topology || topologyBusy.has(name)) return;
  topologyBusy.add(name);
  try {
    const res = await fetch(`/v1/clusters/${encodeURIComponent(name)}`, { headers: { Accept: "application/json", ...authHeaders() }, cache: "no-store" });
    if (!res.ok) return; // the block shows the spec's revision meanwhile
    const got = await res.json();
    if (got.status && got.status.topology) {
      state.topology.set(name, got.status.topology);
      scheduleRender();
    }
  } catch (_) {
    // kept: the next poll reads it again
  } finally {
    topologyBusy.delete(name);
  }
}

// ---- rendering ----

let renderPending = false;
function scheduleRender() {
  if (renderPending) return;
  renderPending = true;
  setTimeout(() => { renderPending = false; render(); }, 50);
}

function el(tag, attrs, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") n.className = v;
    else if (k.startsWith("data-")) n.setAttribute(k, v);
    else if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    n.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return n;
}

function phaseClass(phase) {
  switch (phase) {
    case "Ready": case "Running": return "ok";
    case "Failed": case "Error": return "bad";
    case "Deleting": case "Deleted": case "Degraded": case "Unhealthy": return "warn";
    default: return "";
  }
}

function badge(phase) {
  return el("span", { class: "badge " + phaseClass(phase), "data-phase": phase || "Unknown" }, phase || "Unknown");
}

function age(ts) {
  if (!ts) return "";
  const s = Math.max(0, Math.floor((Date.now() - Date.parse(ts)) / 1000));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 86400) return Math.floor(s / 3600) + "h";
  return Math.floor(s / 86400) + "d";
}

const n = (v) => Number(v || 0);

// version shows a version, or current → target while they differ (an
// upgrade under way).
function version(current, target) {
  if (current && target && current !== target) {
    return el("span", { class: "version upgrading", "data-upgrade": `${current}→${target}`, title: `upgrading from ${current} to ${target}` },
      current, el("span", { class: "arrow", "aria-label": "to" }, " → "), target);
  }
  return el("span", { class: "version" }, target || current || "");
}

function workers(c) {
  const st = (c.status && c.status.workerPools) || [];
  const ready = st.reduce((a, p) => a + n(p.ready), 0);
  const desired = ((c.spec && c.spec.workerPools) || []).reduce((a, p) => a + n(p.replicas), 0);
  return `${ready} / ${desired}`;
}

function render() {
  renderFleet();
  renderRollouts();
  renderDetail();
}

function renderFleet() {
  const body = $("#fleet tbody");
  const names = [...state.clusters.keys()].sort();
  $("#fleet-empty").hidden = names.length > 0 || !state.synced;
  body.replaceChildren(...names.map((name) => {
    const c = state.clusters.get(name);
    const st = c.status || {};
    const cp = st.controlPlane || {};
    const desiredCP = n((c.spec && c.spec.controlPlane && c.spec.controlPlane.replicas) || cp.desired);
    const deleting = c.metadata && c.metadata.deletionTimestamp;
    const phase = st.phase || (deleting ? "Deleting" : "Pending");
    return el("tr", { "data-cluster": name, "data-phase": phase, "aria-selected": String(name === state.selected) },
      el("td", {}, el("button", { class: "linkish", type: "button", "aria-label": "show cluster " + name, onclick: () => select(name) }, name)),
      el("td", {}, badge(phase)),
      el("td", {}, version(cp.version, c.spec && c.spec.kubernetesVersion)),
      el("td", {}, `${n(cp.ready)} / ${desiredCP}`),
      el("td", {}, workers(c)),
      el("td", { title: (c.metadata && c.metadata.creationTimestamp) || "" }, age(c.metadata && c.metadata.creationTimestamp)));
  }));
}

// Conditions that are good when False.
const NEGATIVE = new Set(["Paused", "Deleting", "Stalled", "Degraded", "Unhealthy"]);

function condClass(c) {
  const s = String(c.status || "Unknown");
  if (s !== "True" && s !== "False") return "unknown";
  return (s === "True") !== NEGATIVE.has(c.type) ? "true" : "false";
}

const condText = (c) => `${c.type}=${c.status}${c.reason ? " (" + c.reason + ")" : ""}`;

function condChip(c) {
  return el("span", {
    class: "cond " + condClass(c),
    title: [c.reason, c.message].filter(Boolean).join(": "),
  }, condText(c));
}

// health sums up a node's conditions: one "healthy" chip when every
// condition is good (the list on hover, in full when clicked), else the
// bad ones in full and the good ones behind a "+N ok" chip. It returns
// the chip for the node's head line and the conditions row under it.
function health(key, list, healthy) {
  list = list || [];
  const bad = list.filter((c) => condClass(c) !== "true");
  const good = list.filter((c) => condClass(c) === "true");
  const open = state.expanded.has(key);
  const toggle = () => {
    if (state.expanded.has(key)) state.expanded.delete(key); else state.expanded.add(key);
    render();
  };
  let chip = null;
  if (healthy && !bad.length) {
    chip = el("button", {
      type: "button", class: "chip ok", "data-health": "healthy", "aria-expanded": String(open),
      title: good.length ? good.map(condText).join("\n") : "no conditions reported",
      onclick: good.length ? toggle : null,
    }, "healthy");
  } else if (good.length) {
    chip = el("button", {
      type: "button", class: "chip", "data-health": "ok-conditions", "aria-expanded": String(open),
      title: good.map(condText).join("\n"), onclick: toggle,
    }, `+${good.length} ok`);
  }
  const shown = [...bad, ...(open ? good : [])];
  const row = shown.length ? el("div", { class: "conds" }, shown.map(condChip)) : null;
  return { chip, row };
}

// whyNotReady is a machine's failure, or its first condition that is not
// True.
function whyNotReady(st) {
  if (!st) return "no status yet";
  if (st.failureReason || st.failureMessage) return [st.failureReason, st.failureMessage].filter(Boolean).join(": ");
  if (st.phase === "Running") return null;
  const c = (st.conditions || []).find((x) => condClass(x) !== "true");
  if (c) return [c.type, c.reason, c.message].filter(Boolean).join(": ");
  return null;
}

function machineNode(m) {
  const st = m.status || {};
  const spec = m.spec || {};
  const why = whyNotReady(m.status);
  const h = health("machine/" + m.metadata.name, st.conditions, !why && st.phase === "Running");
  return el("li", { class: "node", "data-kind": "machine", "data-name": m.metadata.name, "data-phase": st.phase || "Pending" },
    el("div", { class: "node-head" },
      el("span", { class: "kind" }, "machine"),
      el("span", { class: "name mono" }, m.metadata.name),
      badge(st.phase || "Pending"),
      version(st.kubeletVersion, spec.version),
      st.nodeName && st.nodeName !== m.metadata.name ? el("span", { class: "sub" }, "node " + st.nodeName) : null,
      h.chip),
    h.row,
    why ? el("div", { class: "why" }, "Not ready: " + why) : null);
}

function poolNode(kind, name, target, ps, ms) {
  return el("li", { class: "node", "data-kind": kind, "data-name": name },
    el("div", { class: "node-head" },
      el("span", { class: "kind" }, kind === "control-plane" ? "control plane" : "pool"),
      el("span", { class: "name" }, name),
      version(ps.version, target),
      el("span", { class: "sub" }, `ready ${n(ps.ready)} / ${n(ps.desired)}, updated ${n(ps.updated)}, available ${n(ps.available)}`)),
    ms.length ? el("ul", {}, ms.map(machineNode)) : el("ul", {}, el("li", { class: "node sub" }, "no machines")));
}

function clusterMachines(name) {
  return [...state.machines.values()]
    .filter((m) => ((m.spec && m.spec.cluster) || state.machineCluster.get(m.metadata.name)) === name)
    .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
}

function renderDetail() {
  const detail = $("#detail");
  const c = state.selected && state.clusters.get(state.selected);
  renderHint(c);
  if (!c) {
    detail.hidden = true;
    return;
  }
  detail.hidden = false;
  const st = c.status || {};
  const spec = c.spec || {};
  const ms = clusterMachines(c.metadata.name);
  const byPool = (p) => ms.filter((m) => (m.spec && m.spec.pool) === p);
  const cpStatus = st.controlPlane || {};
  const cpDesired = { ...cpStatus, desired: (spec.controlPlane && spec.controlPlane.replicas) || cpStatus.desired };
  const poolStatus = new Map(((st.workerPools) || []).map((p) => [p.name, p]));
  const pools = (spec.workerPools || []).map((p) => ({ name: p.name, version: p.version || spec.kubernetesVersion, st: { ...(poolStatus.get(p.name) || {}), desired: p.replicas } }));
  const known = new Set(["control-plane", ...pools.map((p) => p.name)]);
  const orphans = ms.filter((m) => !known.has(m.spec && m.spec.pool));

  $("#tree-h").textContent = "Cluster " + c.metadata.name;
  const endpoint = st.controlPlaneEndpoint ? `${st.controlPlaneEndpoint.host}:${st.controlPlaneEndpoint.port}` : "";
  const h = health("cluster/" + c.metadata.name, st.conditions, st.phase === "Ready");
  $("#tree").replaceChildren(el("ul", { class: "tree" },
    el("li", { class: "node", "data-kind": "cluster", "data-name": c.metadata.name, "data-phase": st.phase || "Pending" },
      el("div", { class: "node-head" },
        el("span", { class: "kind" }, "cluster"),
        el("span", { class: "name" }, c.metadata.name),
        badge(st.phase || "Pending"),
        version(cpStatus.version, spec.kubernetesVersion),
        endpoint ? el("span", { class: "sub" }, "endpoint " + endpoint) : null,
        spec.paused ? el("span", { class: "badge warn" }, "paused") : null,
        el("span", { class: "sub" }, `generation ${c.metadata.generation || "?"}, observed ${st.observedGeneration || "–"}`),
        h.chip),
      h.row,
      el("ul", {},
        poolNode("control-plane", "control-plane", spec.kubernetesVersion, cpDesired, byPool("control-plane")),
        pools.map((p) => poolNode("pool", p.name, p.version, p.st, byPool(p.name))),
        orphans.length ? el("li", { class: "node", "data-kind": "pool" },
          el("div", { class: "node-head" }, el("span", { class: "kind" }, "other machines")),
          el("ul", {}, orphans.map(machineNode))) : null))));

  const rows = [{ ...cpDesired, name: "control-plane" }, ...pools.map((p) => ({ ...p.st, name: p.name }))];
  $("#rollout").replaceChildren(...rows.map((p) => {
    const desired = n(p.desired), updated = Math.min(n(p.updated), desired || n(p.updated));
    const label = `${p.name}: ${updated} of ${desired} updated`;
    return el("div", { class: "rollout-row", "data-pool": p.name },
      el("span", { class: "name" }, p.name),
      el("progress", { max: String(desired || 1), value: String(desired ? updated : 0), "aria-label": label, title: label }),
      el("span", { class: "mono" }, `${updated} / ${desired}`));
  }));
  renderMaintenance(c);
  renderEvents();
}

// renderMaintenance shows the selected cluster's class (as capn get
// clusters: class, pinned revision, up to date), its maintenance (window,
// auto-patch, confined rollouts, the changes waiting for a window) and its
// hibernation schedule. Only what is set is shown; a cluster with none of
// it hides the block.
function renderMaintenance(c) {
  const st = c.status || {};
  const spec = c.spec || {};
  const rows = [];
  const row = (key, label, ...value) => rows.push(el("div", { class: "kv", "data-maint": key }, el("dt", {}, label), el("dd", {}, ...value)));

  const topo = st.topology || state.topology.get(c.metadata.name) || {};
  const class_ = topo.class || (spec.topology && spec.topology.class);
  if (class_) {
    const rev = topo.revision || (spec.topology && spec.topology.revision);
    row("class", "class", el("span", { class: "name" }, class_));
    if (rev) {
      row("revision", "revision", el("span", { class: "mono", "data-revision": String(rev) }, String(rev)),
        topo.latestRevision ? el("span", { class: "sub" }, ` of ${topo.latestRevision}`) : null);
    }
    if (topo.class) {
      row("up-to-date", "up to date", el("span", { class: "badge " + (topo.upToDate ? "ok" : "warn"), "data-up-to-date": String(!!topo.upToDate) },
        topo.upToDate ? "yes" : `no: revision ${topo.latestRevision || "?"} is current`));
    }
  }

  const ms = spec.maintenance || {};
  const mst = st.maintenance || {};
  const windows = ms.windows || [];
  if (windows.length) {
    row("windows", "windows", windows.map((w) =>
      `${(w.days && w.days.length) ? w.days.join(",") : "every day"} ${w.start || ""}–${w.end || ""} ${w.timeZone || "UTC"}`).join("; "));
  }
  if (st.maintenance && windows.length) {
    if (mst.windowOpen) {
      row("window", "window", el("span", { class: "badge ok", "data-window": "open" }, "open"),
        mst.windowCloses ? [" closes ", when(mst.windowCloses)] : null);
    } else {
      row("window", "window", el("span", { class: "badge", "data-window": "closed" }, "closed"),
        mst.nextWindowOpen ? [" next opens ", when(mst.nextWindowOpen)] : null);
    }
  }
  if (spec.maintenance) {
    row("auto-patch", "auto-patch", el("span", { "data-on": String(!!ms.autoPatch) }, ms.autoPatch ? "on" : "off"));
    row("confine", "confine spec rollouts", el("span", { "data-on": String(!!ms.confineSpecRollouts) }, ms.confineSpecRollouts ? "on" : "off"));
  }
  if (ms.pendingVersion) row("pending", "pending version", el("span", { class: "mono" }, ms.pendingVersion));
  const waiting = mst.waiting || [];
  if (waiting.length) {
    row("waiting", "waiting", el("ul", { class: "notes" }, waiting.map((w) =>
      el("li", { "data-change": w.change || "" },
        el("strong", {}, w.change || "change"),
        w.from || w.to ? el("span", { class: "mono" }, ` ${w.from || "?"} → ${w.to || "?"}`) : null,
        w.message ? [": ", el("span", { class: "msg" }, w.message)] : null))));
  }
  if (mst.lastApplied) row("last-applied", "last applied", mst.lastApplied, mst.lastAppliedTime ? [" ", when(mst.lastAppliedTime)] : null);

  const schedules = (spec.hibernation && spec.hibernation.schedules) || [];
  const hst = st.hibernation || {};
  const hibernated = spec.hibernated || st.phase === "Hibernated" || st.phase === "Hibernating";
  if (hibernated || schedules.length || hst.nextTransition || hst.override) {
    row("hibernated", "hibernated", el("span", { class: "badge " + (hibernated ? "warn" : ""), "data-hibernated": String(!!hibernated) },
      hibernated ? (st.phase === "Hibernating" ? "hibernating" : "yes") : "no"));
  }
  if (schedules.length) {
    row("schedules", "schedules", schedules.map((s) =>
      `${s.start ? "hibernate " + s.start : ""}${s.start && s.end ? ", " : ""}${s.end ? "wake " + s.end : ""} ${s.location || "UTC"}`).join("; "));
  }
  if (hst.nextTransition) {
    row("next-transition", "next", el("span", { "data-transition": hst.nextHibernates ? "hibernate" : "wake" }, hst.nextHibernates ? "hibernate" : "wake"),
      " ", when(hst.nextTransition));
  }
  if (hst.override) row("override", "override", el("span", { class: "badge warn", "data-override": "true" }, "manual, holds until the next transition"));
  if (hst.message) row("hibernation-message", "", el("span", { class: "sub" }, hst.message));

  $("#maint").hidden = rows.length === 0;
  $("#maint-body").replaceChildren(rows.length ? el("dl", { class: "maint" }, rows) : "");
}

// describeChange says what a rollout applies, as capn rollout list does.
function describeChange(ch) {
  ch = ch || {};
  if (ch.class) return `class ${ch.class} revision ${ch.classRevision || "current"}`;
  if (ch.kubernetesVersion) return "Kubernetes " + ch.kubernetesVersion;
  const vars = Object.entries(ch.variables || {}).map(([k, v]) => `${k}=${v}`).sort();
  return vars.length ? "variables " + vars.join(",") : "";
}

function rolloutPhaseClass(phase) {
  switch (phase) {
    case "Completed": return "ok";
    case "Halted": return "bad";
    case "Paused": case "Aborted": return "warn";
    default: return "";
  }
}

const CLUSTER_STATES = ["Pending", "Moving", "Ready", "Done", "Skipped"];

// rolloutCounts counts a rollout's clusters per state, in all and per
// wave index.
function rolloutCounts(st) {
  const all = Object.fromEntries(CLUSTER_STATES.map((s) => [s, 0]));
  const byWave = new Map();
  for (const c of st.clusters || []) {
    const s = c.state || "Pending";
    all[s] = (all[s] || 0) + 1;
    const w = n(c.wave);
    if (!byWave.has(w)) byWave.set(w, Object.fromEntries(CLUSTER_STATES.map((x) => [x, 0])));
    const m = byWave.get(w);
    m[s] = (m[s] || 0) + 1;
  }
  return { all, byWave };
}

function renderRollouts() {
  const names = [...state.rollouts.keys()].sort();
  $("#rollouts").hidden = names.length === 0;
  $("#rollouts-empty").hidden = names.length > 0 || !state.rolloutsLoaded;
  $("#rollouts tbody").replaceChildren(...names.map((name) => {
    const ro = state.rollouts.get(name);
    const st = ro.status || {};
    const phase = st.phase || "Pending";
    const waves = (st.waves || []).length;
    const { all } = rolloutCounts(st);
    const total = (st.clusters || []).length - all.Skipped;
    const moved = total - all.Pending;
    return el("tr", { "data-rollout": name, "data-phase": phase, "aria-selected": String(name === state.selectedRollout) },
      el("td", {}, el("button", { class: "linkish", type: "button", "aria-label": "show rollout " + name, onclick: () => selectRollout(name) }, name)),
      el("td", {}, describeChange(ro.spec && ro.spec.change)),
      el("td", {}, el("span", { class: "badge " + rolloutPhaseClass(phase), "data-phase": phase }, phase),
        ro.spec && ro.spec.paused && phase !== "Paused" ? el("span", { class: "badge warn" }, "paused") : null),
      el("td", { class: "mono", "data-wave": waves ? String(n(st.currentWave) + 1) : "" }, waves ? `${n(st.currentWave) + 1} / ${waves}` : "–"),
      el("td", { class: "mono", "data-done": String(all.Done), "data-total": String(total), title: `${moved} moved, ${all.Done} done, ${all.Skipped} skipped` }, `${all.Done} / ${total}`),
      el("td", { class: st.haltReason ? "why" : "" }, st.haltReason || ""));
  }));
  renderRolloutDetail();
}

// when shows a timestamp in the reader's time zone, the exact one on hover.
function when(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  if (isNaN(d)) return "";
  return el("time", { datetime: ts, title: ts }, d.toLocaleString());
}

function renderRolloutDetail() {
  const panel = $("#rollout-detail");
  const name = state.selectedRollout;
  if (!name) {
    panel.hidden = true;
    return;
  }
  panel.hidden = false;
  const ro = state.rollouts.get(name);
  $("#rollout-detail-h").textContent = "Rollout " + name;
  const halt = $("#rollout-halt");
  if (!ro) {
    $("#rollout-summary").textContent = state.rolloutsLoaded ? `No rollout named ${name}.` : "loading…";
    halt.hidden = true;
    $("#waves").hidden = true;
    $("#waves-empty").hidden = true;
    $("#rollout-notes").replaceChildren();
    return;
  }
  const st = ro.status || {};
  const spec = ro.spec || {};
  const phase = st.phase || "Pending";
  panel.dataset.phase = phase;
  const summary = [describeChange(spec.change), "phase " + phase];
  if (spec.paused) summary.push("paused (capn rollout resume " + name + ")");
  if (st.nextWindow) summary.push("the next cluster waits for its maintenance window, which opens " + new Date(st.nextWindow).toLocaleString());
  $("#rollout-summary").textContent = summary.join(" · ");
  halt.hidden = !st.haltReason;
  halt.textContent = st.haltReason ? "Halted: " + st.haltReason + (st.haltedAt ? " (" + new Date(st.haltedAt).toLocaleString() + ")" : "") : "";

  const waves = st.waves || [];
  const { byWave } = rolloutCounts(st);
  $("#waves").hidden = waves.length === 0;
  $("#waves-empty").hidden = waves.length > 0;
  $("#waves tbody").replaceChildren(...waves.map((w) => {
    const i = n(w.index);
    const counts = byWave.get(i) || {};
    const wstate = w.state || "Pending";
    const current = i === n(st.currentWave) && phase !== "Completed";
    return el("tr", { "data-wave": String(i), "data-state": wstate, "aria-current": current ? "step" : null },
      el("td", {}, String(i + 1), i === 0 ? el("span", { class: "sub" }, " canary") : null),
      el("td", { class: "mono", "data-size": String((w.clusters || []).length) }, String((w.clusters || []).length)),
      el("td", {}, el("span", { class: "badge " + (wstate === "Done" ? "ok" : ""), "data-phase": wstate }, wstate)),
      el("td", {}, el("div", { class: "counts" }, CLUSTER_STATES.map((s) =>
        el("span", { class: "count" + (counts[s] ? "" : " zero"), ["data-" + s.toLowerCase()]: String(counts[s] || 0) }, `${s} ${counts[s] || 0}`)))),
      el("td", {}, when(w.started)),
      el("td", {}, when(w.soakUntil)),
      el("td", {}, when(w.finished)));
  }));
  const notes = (st.clusters || []).filter((c) => c.message);
  $("#rollout-notes").replaceChildren(notes.length ? el("ul", { class: "notes" }, notes.map((c) =>
    el("li", { "data-cluster": c.name },
      el("span", { class: "name mono" }, c.name), " ", el("span", { class: "sub" }, `wave ${n(c.wave) + 1}, ${c.state || "Pending"}`), ": ", c.message))) : "");
}

// renderHint says what to do while no cluster is shown: select one, or
// (when the fleet is empty, which the fleet panel already says) nothing.
function renderHint(shown) {
  const hint = $("#hint");
  let text = "";
  if (!shown && state.synced && state.clusters.size) {
    text = state.selected
      ? `No cluster named ${state.selected}. Select a cluster in the fleet above.`
      : "Select a cluster in the fleet above to see its control plane, pools, machines, rollout and events.";
  }
  hint.hidden = !text;
  hint.textContent = text;
}

function renderEvents() {
  const list = $("#events");
  if (!state.events.length) {
    list.replaceChildren(el("li", { class: "sub" }, "no events yet"));
    return;
  }
  list.replaceChildren(...state.events.map((e) => {
    const t = e.time ? new Date(e.time) : null;
    return el("li", { "data-seq": String(e.sequence) },
      t ? el("time", { datetime: e.time, title: e.time }, t.toLocaleTimeString()) : null,
      el("strong", {}, `${e.entity || ""} ${e.what || e.type || ""}`.trim()),
      " ",
      e.object && e.object !== "_" ? el("span", { class: "mono" }, e.object) : null,
      " ",
      e.phase ? badge(e.phase) : null,
      e.message || e.reason ? el("span", { class: "msg" }, e.message || e.reason) : null);
  }));
}

function select(name) {
  if (state.selected === name) return;
  state.selected = name;
  writeHash();
  followEvents(name);
  if (name) loadTopology(name);
  render();
}

function selectRollout(name) {
  if (state.selectedRollout === name) return;
  state.selectedRollout = name;
  writeHash();
  renderRollouts();
}

// writeHash keeps the selection in the URL: #cluster=NAME&rollout=NAME.
function writeHash() {
  const parts = [];
  if (state.selected) parts.push("cluster=" + encodeURIComponent(state.selected));
  if (state.selectedRollout) parts.push("rollout=" + encodeURIComponent(state.selectedRollout));
  const hash = parts.length ? "#" + parts.join("&") : "";
  if (location.hash !== hash) history.replaceState(null, "", hash || location.pathname + location.search);
}

// hashParam is what #...&KEY=VALUE&... names, or null.
function hashParam(key) {
  for (const part of location.hash.replace(/^#/, "").split("&")) {
    const eq = part.indexOf("=");
    if (eq > 0 && part.slice(0, eq) === key && eq < part.length - 1) {
      try { return decodeURIComponent(part.slice(eq + 1)); } catch (_) { return null; }
    }
  }
  return null;
}

// hashCluster is the cluster #cluster=NAME names, or null.
function hashCluster() { return hashParam("cluster"); }

// ---- who is logged in ----

// whoAmI asks the gateway how the page authenticated, to show it.
async function whoAmI() {
  try {
    const res = await fetch("/v1/session", { headers: { Accept: "application/json", ...authHeaders() }, cache: "no-store" });
    showWho(res.ok ? await res.json() : null);
  } catch (_) {
    showWho(null);
  }
}

function showWho(s) {
  const who = $("#who");
  if (!s) {
    who.hidden = true;
    return;
  }
  const how = { session: "by login link", token: "by token", anonymous: "anonymously" }[s.via] || "";
  who.textContent = `${s.principal} (${(s.scopes || []).join(", ")}) ${how}`;
  who.title = s.expiresAt ? "session ends " + new Date(s.expiresAt).toLocaleString() : "";
  who.hidden = false;
}

async function logOut() {
  localStorage.removeItem(TOKEN_KEY);
  stopRolloutPolling();
  state.rollouts.clear();
  state.rolloutsLoaded = false;
  state.topology.clear();
  if (watchAbort) watchAbort.abort();
  if (eventsAbort) eventsAbort.abort();
  try {
    await fetch("/v1/session", { method: "DELETE", cache: "no-store" });
  } catch (_) { /* the cookie is cleared by the next 401 anyway */ }
  $("#token").placeholder = "paste the token capn dev printed";
  state.clusters.clear();
  state.machines.clear();
  state.synced = false;
  showWho(null);
  setConn("token", LOGIN_HINT);
  render();
}

// ---- start ----

function init() {
  state.selected = hashCluster();
  state.selectedRollout = hashParam("rollout");
  window.addEventListener("hashchange", () => {
    state.selectedRollout = hashParam("rollout");
    select(hashCluster());
    renderRollouts();
  });
  $("#token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = $("#token").value.trim();
    if (!v) return;
    localStorage.setItem(TOKEN_KEY, v);
    $("#token").value = "";
    $("#token").placeholder = "token saved";
    state.clusters.clear();
    state.machines.clear();
    state.synced = false;
    stopRolloutPolling();
    startWatch();
    followEvents(state.selected);
  });
  $("#logout").addEventListener("click", logOut);
  if (token()) $("#token").placeholder = "token saved";
  setInterval(renderFleet, 10000); // ages
  render();
  startWatch();
  if (state.selected) followEvents(state.selected);
}

init();
