// threadbox dev dashboard: threads with status badges, a thread's event timeline with causes,
// pause and resume, and the local Slack sink. Plain JavaScript served from the binary, no build
// step.
//
// Data: the thread list comes from GET /v1/threads, polled so new threads and idle times show up.
// State changes arrive live over the WebSocket (GET /v1/ws with a token from POST /v1/tokens) when
// the server offers it; otherwise, or while the socket is down, the page polls instead.
//
// Credentials: with API auth off the page calls the API as it is (same loopback origin, which the
// API allows). With auth on, the first 401 asks for a key, which is kept in sessionStorage (this
// tab only, gone when it closes) and sent as a bearer token.
"use strict";

(() => {
  const KEY_STORAGE = "threadbox.apiKey";
  const LIST_POLL_MS = 2000;
  const EVENTS_POLL_MS = 1000;
  const SINK_POLL_MS = 2000;
  const LIVE_RETRY_MAX_MS = 30000;
  const TOKEN_TTL_SECONDS = 3600;
  // The server's limit per connection; threads past it still update through the list poll.
  const MAX_LIVE_SUBSCRIPTIONS = 50;
  // Keeps idle connections open through proxies (browsers cannot send WebSocket pings).
  const PING_MS = 25000;
  const MAX_EVENTS_SHOWN = 200;

  const $ = (id) => document.getElementById(id);

  const state = {
    apiKey: sessionStorage.getItem(KEY_STORAGE) || "",
    needKey: false,
    threads: new Map(), // thread id → the API's thread view, kept current by events
    rows: new Map(), // thread id → its <tr>
    busy: new Set(), // thread ids with a pause or resume in flight
    selected: null,
    events: [], // the selected thread's events, oldest first
    lastShownSeq: 0,
    live: null, // { socket, ready, subscribed: Set, ping }
    // False once the server shows it has no live endpoint, or when the page is opened with
    // ?live=off (for proxies that break WebSockets, and to exercise the polling path).
    liveSupported: new URLSearchParams(location.search).get("live") !== "off",
    liveRetryMs: 1000,
    reachable: true,
    sinkSupported: true,
    sinkSeen: "",
  };

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(method, path, body) {
    const headers = {};
    if (state.apiKey) headers.Authorization = "Bearer " + state.apiKey;
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (error) {
      throw new ApiError(0, "unreachable", "cannot reach threadbox dev (" + error.message + ")");
    }
    const text = await response.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch (_) {
      json = null;
    }
    if (!response.ok) {
      const shaped = json && json.error;
      const error = new ApiError(
        response.status,
        shaped ? shaped.code : "http_" + response.status,
        shaped ? shaped.message : "HTTP " + response.status,
      );
      if (response.status === 401) askForKey(state.apiKey ? "The API refused that key." : "");
      throw error;
    }
    return json;
  }

  const enc = encodeURIComponent;

  // ---- connection state ------------------------------------------------------------------

  function setReachable(reachable) {
    state.reachable = reachable;
    showMode();
  }

  function showMode() {
    const el = $("connection");
    let mode;
    let text;
    if (state.needKey) {
      mode = "offline";
      text = "waiting for an API key";
    } else if (!state.reachable) {
      mode = "offline";
      text = "cannot reach threadbox dev; retrying";
    } else if (state.live && state.live.ready) {
      mode = "live";
      text = "live over WebSocket";
    } else {
      mode = "polling";
      text = "polling every " + LIST_POLL_MS / 1000 + " s";
    }
    if (el.dataset.mode !== mode || el.textContent !== text) {
      el.dataset.mode = mode;
      el.textContent = text;
    }
  }

  function showNotice(text) {
    const el = $("notice");
    el.textContent = text;
    el.hidden = !text;
  }

  function backgroundError(error) {
    if (error.status === 401) return; // the key form says it
    if (error.status === 0) setReachable(false);
  }

  // ---- credentials -----------------------------------------------------------------------

  function askForKey(message) {
    state.needKey = true;
    closeLive();
    $("key-form").hidden = false;
    $("key-error").textContent = message;
    $("forget-key").hidden = true;
    showMode();
  }

  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (!key) return;
    state.apiKey = key;
    sessionStorage.setItem(KEY_STORAGE, key);
    state.needKey = false;
    $("api-key").value = "";
    $("key-form").hidden = true;
    $("forget-key").hidden = false;
    showMode();
    refreshThreads().then(connectLive);
  });

  $("forget-key").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORAGE);
    state.apiKey = "";
    $("forget-key").hidden = true;
    closeLive();
    refreshThreads();
  });

  // ---- threads ---------------------------------------------------------------------------

  async function refreshThreads() {
    if (state.needKey) return;
    try {
      const threads = [];
      let cursor = null;
      do {
        let path = "/v1/threads?limit=500";
        if (cursor) path += "&cursor=" + enc(cursor);
        const page = await api("GET", path);
        threads.push(...page.threads);
        cursor = page.next || null;
      } while (cursor);
      setReachable(true);
      for (const view of threads) mergeThread(view);
      renderThreads();
      syncSubscriptions();
    } catch (error) {
      backgroundError(error);
    }
  }

  // Take a thread view from the API unless the page already knows a later state (an event can
  // overtake a list answer that was read before it).
  function mergeThread(view) {
    const known = state.threads.get(view.thread_id);
    if (known && known.last_seq > view.last_seq) {
      known.idle_seconds = view.idle_seconds;
      return;
    }
    state.threads.set(view.thread_id, view);
  }

  // A lifecycle event moves the thread's badge at once, whatever delivered it.
  function applyEvent(event) {
    const thread = state.threads.get(event.thread_id);
    if (!thread) {
      refreshThreads();
    } else if (event.seq > thread.last_seq) {
      thread.status = event.to;
      thread.last_seq = event.seq;
      thread.generation = event.generation;
      if (event.to === "destroyed" || event.to === "expired" || event.to === "creating") {
        thread.sandbox_id = null;
      } else if (event.sandbox_id) {
        thread.sandbox_id = event.sandbox_id;
      }
      if (event.cause === "user") thread.idle_seconds = 0;
      renderRow(event.thread_id);
    }
    if (event.thread_id === state.selected) addEvents([event]);
  }

  function renderThreads() {
    const ids = [...state.threads.keys()].sort();
    const body = $("thread-rows");
    ids.forEach((id, index) => {
      let row = state.rows.get(id);
      if (!row) {
        row = makeRow(id);
        state.rows.set(id, row);
      }
      // Keep rows in order without rebuilding them, so focus and clicks survive updates.
      if (body.children[index] !== row) body.insertBefore(row, body.children[index] || null);
      renderRow(id);
    });
    $("no-threads").hidden = ids.length > 0;
    if (state.selected) renderDetailFacts();
  }

  function makeRow(id) {
    const row = document.createElement("tr");
    row.dataset.thread = id;

    const name = document.createElement("td");
    const select = button(id, "select", id);
    select.className = "link";
    select.setAttribute("aria-label", "Show the timeline of " + id);
    name.append(select);

    const status = document.createElement("td");
    status.append(badge("creating"));
    const idle = document.createElement("td");
    idle.className = "idle";
    const gen = document.createElement("td");
    gen.className = "num gen";

    const actions = document.createElement("td");
    const box = document.createElement("div");
    box.className = "actions";
    const pause = button("Pause", "pause", id);
    pause.setAttribute("aria-label", "Pause " + id);
    const resume = button("Resume", "resume", id);
    resume.setAttribute("aria-label", "Resume " + id);
    box.append(pause, resume);
    actions.append(box);

    row.append(name, status, idle, gen, actions);
    return row;
  }

  function button(text, action, id) {
    const el = document.createElement("button");
    el.type = "button";
    el.textContent = text;
    el.dataset.action = action;
    el.dataset.thread = id;
    return el;
  }

  function badge(status) {
    const el = document.createElement("span");
    setBadge(el, status);
    return el;
  }

  function setBadge(el, status) {
    el.className = "badge badge-" + status;
    el.textContent = status;
    el.dataset.status = status;
  }

  function renderRow(id) {
    const row = state.rows.get(id);
    const thread = state.threads.get(id);
    if (!row || !thread) return;
    setBadge(row.querySelector(".badge"), thread.status);
    row.querySelector(".idle").textContent = idle(thread.idle_seconds);
    row.querySelector(".gen").textContent = String(thread.generation);
    const busy = state.busy.has(id);
    row.querySelector('[data-action="pause"]').disabled = busy || thread.status !== "active";
    row.querySelector('[data-action="resume"]').disabled = busy || thread.status !== "paused";
    const selected = id === state.selected;
    row.classList.toggle("selected", selected);
    row.querySelector('[data-action="select"]').setAttribute("aria-current", String(selected));
    if (selected) renderDetailFacts();
  }

  $("thread-rows").addEventListener("click", (event) => {
    const target = event.target.closest("button[data-action]");
    if (!target) return;
    const id = target.dataset.thread;
    if (target.dataset.action === "select") select(id);
    else act(id, target.dataset.action);
  });

  async function act(id, action) {
    state.busy.add(id);
    renderRow(id);
    try {
      const result = await api("POST", "/v1/threads/" + enc(id) + "/" + action);
      showNotice("");
      // Pause answers with the thread view; resume with a sandbox handle (no sequence number).
      if (result && typeof result.last_seq === "number") mergeThread(result);
    } catch (error) {
      if (error.status !== 401) showNotice("Could not " + action + " " + id + ": " + error.message + " (" + error.code + ")");
    } finally {
      state.busy.delete(id);
      renderRow(id);
    }
    await refreshThreads();
    if (id === state.selected) await pollSelectedEvents();
  }

  // ---- the selected thread's timeline ----------------------------------------------------

  async function select(id) {
    state.selected = id;
    state.events = [];
    state.lastShownSeq = 0;
    for (const rowId of state.rows.keys()) renderRow(rowId);
    $("detail-empty").hidden = true;
    $("detail").hidden = false;
    renderEvents();
    try {
      const detail = await api("GET", "/v1/threads/" + enc(id));
      if (state.selected !== id) return;
      mergeThread(detail.session);
      renderRow(id);
      addEvents(detail.events);
    } catch (error) {
      backgroundError(error);
      if (error.status !== 0 && error.status !== 401) showNotice("Could not load " + id + ": " + error.message);
    }
  }

  // Append events in sequence order; a gap (events missed while the socket was down) is filled
  // from the event log.
  function addEvents(events) {
    let gap = false;
    for (const event of events) {
      if (event.seq <= state.lastShownSeq) continue;
      if (state.lastShownSeq > 0 && event.seq !== state.lastShownSeq + 1) {
        gap = true;
        break;
      }
      state.events.push(event);
      state.lastShownSeq = event.seq;
    }
    if (state.events.length > MAX_EVENTS_SHOWN) state.events.splice(0, state.events.length - MAX_EVENTS_SHOWN);
    renderEvents();
    if (gap) pollSelectedEvents();
  }

  async function pollSelectedEvents() {
    const id = state.selected;
    if (!id || state.needKey) return;
    try {
      const page = await api("GET", "/v1/threads/" + enc(id) + "/events?after_seq=" + state.lastShownSeq);
      if (state.selected === id) addEvents(page.events);
    } catch (error) {
      backgroundError(error);
    }
  }

  function renderDetailFacts() {
    const thread = state.threads.get(state.selected);
    if (!thread) return;
    $("detail-thread").textContent = thread.thread_id;
    const status = $("detail-status");
    if (!status.firstChild) status.append(badge(thread.status));
    else setBadge(status.firstChild, thread.status);
    $("detail-sandbox").textContent = thread.sandbox_id
      ? thread.sandbox_id + " (" + thread.provider + ", generation " + thread.generation + ")"
      : "none (generation " + thread.generation + ")";
    $("detail-error").textContent = thread.last_error || "none";
  }

  function renderEvents() {
    const body = $("event-rows");
    const seen = new Set([...body.children].map((row) => row.dataset.seq));
    const rows = state.events
      .slice()
      .reverse()
      .map((event) => {
        const row = document.createElement("tr");
        row.dataset.seq = String(event.seq);
        if (seen.size > 0 && !seen.has(row.dataset.seq)) row.className = "fresh";
        const time = new Date(event.at);
        const when = document.createElement("time");
        when.dateTime = time.toISOString();
        when.title = time.toISOString();
        when.textContent = time.toLocaleTimeString();
        const change = document.createElement("td");
        change.append(document.createTextNode((event.from || "—") + " → "), badge(event.to));
        const cause = cell(event.cause);
        cause.className = "cause";
        const timeCell = document.createElement("td");
        timeCell.append(when);
        row.append(cell(String(event.seq)), timeCell, change, cause, cell(event.detail || ""));
        return row;
      });
    body.replaceChildren(...rows);
  }

  function cell(text) {
    const td = document.createElement("td");
    td.textContent = text;
    return td;
  }

  // ---- live events over the WebSocket ----------------------------------------------------

  async function connectLive() {
    if (!state.liveSupported || state.needKey || state.live) return;
    let minted;
    try {
      minted = await api("POST", "/v1/tokens", { threads: "*", ttl_seconds: TOKEN_TTL_SECONDS });
    } catch (error) {
      if (error.status === 404 || error.status === 405) {
        // This server has no live endpoint: polling is the whole story.
        state.liveSupported = false;
        showMode();
      } else if (error.status !== 401) {
        retryLive();
      }
      return;
    }
    const url = new URL("/v1/ws", location.href);
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    url.searchParams.set("token", minted.token);
    let socket;
    try {
      socket = new WebSocket(url);
    } catch (_) {
      retryLive();
      return;
    }
    const live = { socket, ready: false, subscribed: new Set(), ping: null };
    state.live = live;
    socket.addEventListener("open", () => {
      live.ready = true;
      state.liveRetryMs = 1000;
      live.ping = setInterval(() => send(live, { action: "ping" }), PING_MS);
      showMode();
      syncSubscriptions();
    });
    socket.addEventListener("message", (message) => {
      let frame;
      try {
        frame = JSON.parse(message.data);
      } catch (_) {
        return;
      }
      onFrame(live, frame);
    });
    socket.addEventListener("close", () => {
      clearInterval(live.ping);
      if (state.live === live) {
        state.live = null;
        showMode();
        retryLive();
      }
    });
  }

  function retryLive() {
    const wait = state.liveRetryMs;
    state.liveRetryMs = Math.min(state.liveRetryMs * 2, LIVE_RETRY_MAX_MS);
    setTimeout(connectLive, wait);
  }

  function closeLive() {
    const live = state.live;
    state.live = null;
    if (live) {
      clearInterval(live.ping);
      live.socket.close();
    }
    showMode();
  }

  function send(live, message) {
    if (live.ready && live.socket.readyState === WebSocket.OPEN) live.socket.send(JSON.stringify(message));
  }

  // Subscribe to every listed thread (up to the server's limit), each from the last event the
  // page has, so the replay covers anything between the list answer and the subscription.
  function syncSubscriptions() {
    const live = state.live;
    if (!live || !live.ready) return;
    const wanted = [...state.threads.keys()].sort();
    if (state.selected) wanted.unshift(state.selected);
    for (const id of wanted) {
      if (live.subscribed.size >= MAX_LIVE_SUBSCRIPTIONS) break;
      const thread = state.threads.get(id);
      if (!thread || live.subscribed.has(id)) continue;
      live.subscribed.add(id);
      send(live, { action: "subscribe", thread_id: id, after_seq: thread.last_seq });
    }
  }

  function onFrame(live, frame) {
    if (frame.type === "event" && frame.event) {
      applyEvent(frame.event);
    } else if (frame.type === "error") {
      if (frame.code === "token_expired") {
        // The server closes the socket; the close handler reconnects with a fresh token.
        return;
      }
      if (frame.thread_id) live.subscribed.delete(frame.thread_id);
    }
  }

  // ---- the local Slack sink ----------------------------------------------------------------

  async function refreshSink() {
    if (!state.sinkSupported || state.needKey) return;
    let answer;
    try {
      answer = await api("GET", "/v1/slack/sink");
    } catch (error) {
      if (error.status === 404 || error.status === 405) state.sinkSupported = false;
      backgroundError(error);
      return;
    }
    // Oldest first from the API; shown newest first. Status messages are edited in place
    // (chat.update), so an edit must redraw too.
    const messages = (answer && answer.messages) || [];
    const fingerprint = messages.map((m) => m.ts + "@" + m.updated_at).join(",");
    $("sink").hidden = false;
    if (fingerprint === state.sinkSeen) return;
    state.sinkSeen = fingerprint;
    const items = messages
      .slice()
      .reverse()
      .map((message) => {
        const item = document.createElement("li");
        const meta = document.createElement("div");
        meta.className = "meta";
        const parts = ["#" + message.channel];
        if (message.thread_ts) parts.push("thread " + message.thread_ts);
        const posted = new Date(message.posted_at);
        parts.push(posted.toLocaleTimeString());
        if (message.edits > 0) parts.push("edited " + (message.edits === 1 ? "once" : message.edits + " times"));
        meta.textContent = parts.join(" · ");
        meta.title = "posted " + posted.toISOString() + ", ts " + message.ts;
        const text = document.createElement("p");
        text.className = "text";
        text.textContent = message.text;
        item.dataset.ts = message.ts;
        item.append(meta, text);
        return item;
      });
    $("sink-messages").replaceChildren(...items);
    $("sink-empty").hidden = items.length > 0;
  }

  // ---- helpers and start -------------------------------------------------------------------

  // Idle time to two units, as the CLI shows it: "45s", "12m5s", "3h4m", "2d5h".
  function idle(total) {
    const d = Math.floor(total / 86400);
    const h = Math.floor(total / 3600) % 24;
    const m = Math.floor(total / 60) % 60;
    const s = total % 60;
    if (d > 0) return h > 0 ? d + "d" + h + "h" : d + "d";
    if (h > 0) return m > 0 ? h + "h" + m + "m" : h + "h";
    if (m > 0) return s > 0 ? m + "m" + s + "s" : m + "m";
    return s + "s";
  }

  // Run `task` every `ms`, never overlapping itself.
  function every(ms, task) {
    const loop = async () => {
      try {
        await task();
      } finally {
        setTimeout(loop, ms);
      }
    };
    setTimeout(loop, ms);
  }

  if (state.apiKey) $("forget-key").hidden = false;
  showMode();
  refreshThreads().then(connectLive);
  refreshSink();
  every(LIST_POLL_MS, refreshThreads);
  every(EVENTS_POLL_MS, async () => {
    const live = state.live;
    const liveForSelected = live && live.ready && live.subscribed.has(state.selected);
    if (!liveForSelected) await pollSelectedEvents();
  });
  every(SINK_POLL_MS, refreshSink);
})();
