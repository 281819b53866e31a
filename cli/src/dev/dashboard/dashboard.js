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
      // A network change is a `user` event whose detail names the new profile.
      if (event.cause === "user" && event.from === event.to && event.detail &&
          event.detail.startsWith("network: ")) {
        thread.network_text = event.detail.slice("network: ".length);
      }
      // So is an image change: `image: NAME (from OLD)`.
      if (event.cause === "user" && event.from === event.to && event.detail &&
          event.detail.startsWith("image: ")) {
        thread.image = event.detail.slice("image: ".length).split(" ")[0];
      }
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
    $("detail-usage").textContent = "-";
    $("detail-refused").textContent = "-";
    renderEvents();
    try {
      const detail = await api("GET", "/v1/threads/" + enc(id));
      if (state.selected !== id) return;
      mergeThread(detail.session);
      renderRow(id);
      addEvents(detail.events);
      $("detail-usage").textContent = usageText(detail.usage);
      $("detail-refused").textContent = refusedText(detail.sandbox);
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
    $("detail-network").textContent = networkText(thread);
    // The image the thread's next sandbox starts from (the one it has, unless changed since).
    $("detail-image").textContent = thread.image || "host";
    $("detail-error").textContent = thread.last_error || "none";
  }

  // The thread's network profile in words, as `threadbox threads show` puts it.
  function networkText(thread) {
    if (thread.network_text) return thread.network_text;
    const network = thread.network;
    if (!network || network === "restricted") return "restricted";
    if (network === "networked") return "networked (every public address)";
    const allow = (network.networked && network.networked.allow) || [];
    return allow.length
      ? "networked (allow: " + allow.join(", ") + ")"
      : "networked (every public address)";
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
  //
  // What Slack would show: messages with their Block Kit blocks (mrkdwn rendered), ephemeral
  // messages, shared files, the open modal and App Home views. Buttons and the modal's Submit
  // and Cancel go through POST /v1/slack/sink/{click,submit,close}, which send the signed
  // interaction Slack would send to threadbox's own /slack/interactions.
  //
  // Message content is hostile (command output, text people typed): everything from the sink is
  // put in the page as text nodes or attributes set through the DOM, never as HTML, and links
  // keep only http(s) and mailto URLs.

  const EMOJI = {
    large_green_circle: "🟢",
    large_yellow_circle: "🟡",
    large_blue_circle: "🔵",
    white_circle: "⚪",
    black_circle: "⚫",
    red_circle: "🔴",
    warning: "⚠️",
    recycle: "♻️",
    x: "❌",
    hourglass: "⌛",
    hourglass_flowing_sand: "⏳",
    paperclip: "📎",
    no_entry: "⛔",
    white_check_mark: "✅",
    heavy_check_mark: "✔️",
    zzz: "💤",
    rocket: "🚀",
  };

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  // Slack escapes only these three in message text.
  function unescapeSlack(text) {
    return text.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
  }

  // `:name:` as its character, for the names threadbox uses; others stay as typed.
  function emojiText(text) {
    return text.replace(/:([a-z0-9_+-]+):/g, (whole, name) => EMOJI[name] || whole);
  }

  function safeUrl(raw) {
    try {
      const url = new URL(raw);
      return ["http:", "https:", "mailto:"].includes(url.protocol) ? url.href : null;
    } catch (_) {
      return null;
    }
  }

  function link(url, label) {
    const safe = safeUrl(url);
    if (!safe) return document.createTextNode(label);
    const a = el("a", null, label);
    a.href = safe;
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    return a;
  }

  // ---- dates: <!date^SECS^FORMAT[^LINK]|fallback> ----

  function ordinal(n) {
    const teen = n % 100 >= 11 && n % 100 <= 13;
    const suffix = teen ? "th" : ["th", "st", "nd", "rd"][n % 10] || "th";
    return n + suffix;
  }

  function dayOffset(date) {
    const start = (d) => new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime();
    return Math.round((start(date) - start(new Date())) / 86400000);
  }

  function ago(date) {
    const seconds = Math.round((Date.now() - date.getTime()) / 1000);
    const future = seconds < 0;
    const s = Math.abs(seconds);
    let amount;
    if (s < 60) amount = s === 1 ? "1 second" : s + " seconds";
    else if (s < 3600) amount = plural(Math.floor(s / 60), "minute");
    else if (s < 86400) amount = plural(Math.floor(s / 3600), "hour");
    else amount = plural(Math.floor(s / 86400), "day");
    if (s < 5) return "just now";
    return future ? "in " + amount : amount + " ago";
  }

  function plural(n, unit) {
    return n + " " + unit + (n === 1 ? "" : "s");
  }

  function formatDate(date, format) {
    const month = (style) => date.toLocaleDateString(undefined, { month: style });
    const weekday = date.toLocaleDateString(undefined, { weekday: "long" });
    const year = date.getFullYear();
    const pretty = (fallback) => {
      const offset = dayOffset(date);
      if (offset === 0) return "today";
      if (offset === -1) return "yesterday";
      if (offset === 1) return "tomorrow";
      return fallback();
    };
    const plain = {
      date_num: () =>
        year + "-" + String(date.getMonth() + 1).padStart(2, "0") + "-" + String(date.getDate()).padStart(2, "0"),
      date: () => month("long") + " " + ordinal(date.getDate()) + ", " + year,
      date_short: () => month("short") + " " + date.getDate() + ", " + year,
      date_long: () => weekday + ", " + month("long") + " " + ordinal(date.getDate()) + ", " + year,
      time: () => date.toLocaleTimeString(undefined, { hour: "numeric", minute: "2-digit" }),
      time_secs: () => date.toLocaleTimeString(undefined, { hour: "numeric", minute: "2-digit", second: "2-digit" }),
      ago: () => ago(date),
    };
    return format.replace(/\{([a-z_]+)\}/g, (whole, token) => {
      if (plain[token]) return plain[token]();
      const base = token.replace(/_pretty$/, "").replace(/^date_pretty$/, "date");
      if (token.endsWith("_pretty") && plain[base]) return pretty(plain[base]);
      if (token === "date_pretty") return pretty(plain.date);
      return whole;
    });
  }

  // A <time> that keeps its Slack format, so relative times ({ago}) are redrawn as time passes.
  function dateNode(secs, format, fallback) {
    const date = new Date(Number(secs) * 1000);
    if (!Number.isFinite(date.getTime())) return document.createTextNode(unescapeSlack(fallback || ""));
    const node = el("time", "sk-date", formatDate(date, format));
    node.dateTime = date.toISOString();
    node.title = date.toLocaleString();
    node.dataset.secs = String(secs);
    node.dataset.format = format;
    return node;
  }

  function refreshDates(root) {
    for (const node of root.querySelectorAll("time.sk-date")) {
      const text = formatDate(new Date(Number(node.dataset.secs) * 1000), node.dataset.format);
      if (node.textContent !== text) node.textContent = text;
    }
  }

  // ---- mrkdwn ----

  // <...> control sequences: dates, mentions, channels, links.
  function angle(inner) {
    const bar = inner.indexOf("|");
    const target = bar >= 0 ? inner.slice(0, bar) : inner;
    const label = bar >= 0 ? unescapeSlack(inner.slice(bar + 1)) : null;
    if (target.startsWith("!date^")) {
      const parts = target.split("^");
      const node = dateNode(parts[1], unescapeSlack(parts[2] || "{date_num} {time}"), label);
      if (parts[3] && safeUrl(unescapeSlack(parts[3]))) {
        const a = link(unescapeSlack(parts[3]), "");
        a.append(node);
        return a;
      }
      return node;
    }
    if (target.startsWith("!subteam^")) return el("span", "sk-mention", label || "@group");
    if (target.startsWith("!")) return el("span", "sk-mention", "@" + target.slice(1));
    if (target.startsWith("@")) return el("span", "sk-mention", label ? "@" + label.replace(/^@/, "") : target);
    if (target.startsWith("#")) return el("span", "sk-mention", "#" + (label || target.slice(1)));
    const url = unescapeSlack(target);
    return link(url, label !== null ? label : url);
  }

  // Inline formatting; *, _ and ~ count only at word edges (snake_case stays as it is).
  const INLINE =
    /`([^`\n]+)`|<([^<>\n]+)>|(?<![A-Za-z0-9*])\*(?!\s)([^*\n]+?)\*(?![A-Za-z0-9])|(?<![A-Za-z0-9_])_(?!\s)([^_\n]+?)_(?![A-Za-z0-9])|(?<![A-Za-z0-9~])~(?!\s)([^~\n]+?)~(?![A-Za-z0-9])/g;

  function inline(text) {
    const nodes = [];
    let last = 0;
    for (const match of text.matchAll(INLINE)) {
      if (match.index > last) nodes.push(document.createTextNode(emojiText(unescapeSlack(text.slice(last, match.index)))));
      const [, code, ctrl, bold, italic, strike] = match;
      if (code !== undefined) nodes.push(el("code", null, unescapeSlack(code)));
      else if (ctrl !== undefined) nodes.push(angle(ctrl));
      else {
        const tag = bold !== undefined ? "strong" : italic !== undefined ? "em" : "s";
        const wrapper = el(tag);
        wrapper.append(...inline(bold ?? italic ?? strike));
        nodes.push(wrapper);
      }
      last = match.index + match[0].length;
    }
    if (last < text.length) nodes.push(document.createTextNode(emojiText(unescapeSlack(text.slice(last)))));
    return nodes;
  }

  // mrkdwn to DOM nodes: ``` fences as preformatted blocks (nothing formats inside them), the
  // rest inline; newlines are kept by CSS (white-space: pre-wrap).
  function mrkdwn(text) {
    const box = el("div", "sk-mrkdwn");
    const parts = String(text || "").split("```");
    parts.forEach((part, index) => {
      if (index % 2 === 1 && index < parts.length - 1) {
        box.append(el("pre", "sk-pre", unescapeSlack(part.replace(/^\n/, "").replace(/\n$/, ""))));
      } else {
        const rest = index % 2 === 1 ? "```" + part : part;
        box.append(...inline(rest));
      }
    });
    return box;
  }

  function textObject(object) {
    if (!object || typeof object !== "object") return el("span");
    if (object.type === "mrkdwn") return mrkdwn(object.text);
    const span = el("span", "sk-plain", object.emoji === false ? object.text : emojiText(String(object.text || "")));
    return span;
  }

  function plainText(object) {
    if (!object || typeof object !== "object") return "";
    return emojiText(String(object.text || ""));
  }

  // ---- Block Kit ----

  // `where` says what a button click acts on: {ts} for a message; null where the sink cannot
  // click (inside modals and home views).
  function blockButton(element, where) {
    const button = el("button", "sk-button", plainText(element.text) || element.action_id);
    button.type = "button";
    if (element.style === "primary" || element.style === "danger") button.classList.add("sk-" + element.style);
    button.dataset.actionId = String(element.action_id || "");
    if (where && where.ts) {
      button.dataset.sinkClick = "1";
      button.dataset.ts = where.ts;
    } else {
      button.disabled = true;
      button.title = "Only buttons in messages can be clicked in the sink";
    }
    return button;
  }

  function element(element, where) {
    switch (element && element.type) {
      case "button":
        return blockButton(element, where);
      case "mrkdwn":
      case "plain_text":
        return textObject(element);
      case "image":
        return el("span", "sk-muted", "[image" + (element.alt_text ? ": " + element.alt_text : "") + "]");
      default: {
        const label = element && (element.placeholder || element.text);
        return el("span", "sk-muted sk-control", "[" + (element && element.type) + (label ? ": " + plainText(label) : "") + "]");
      }
    }
  }

  function richText(elements) {
    const nodes = [];
    for (const item of elements || []) {
      let node;
      if (item.type === "text") {
        node = document.createTextNode(String(item.text || ""));
        const style = item.style || {};
        if (style.code) node = wrap("code", node);
        if (style.bold) node = wrap("strong", node);
        if (style.italic) node = wrap("em", node);
        if (style.strike) node = wrap("s", node);
      } else if (item.type === "link") {
        node = link(String(item.url || ""), String(item.text || item.url || ""));
      } else if (item.type === "emoji") {
        node = document.createTextNode(EMOJI[item.name] || ":" + item.name + ":");
      } else if (item.type === "user") {
        node = el("span", "sk-mention", "@" + item.user_id);
      } else if (item.type === "channel") {
        node = el("span", "sk-mention", "#" + item.channel_id);
      } else if (item.type === "date") {
        node = dateNode(item.timestamp, item.format || "{date_num} {time}", item.fallback);
      } else {
        continue;
      }
      nodes.push(node);
    }
    return nodes;
  }

  function wrap(tag, child) {
    const node = el(tag);
    node.append(child);
    return node;
  }

  function richTextBlock(block) {
    const box = el("div", "sk-rich");
    for (const part of block.elements || []) {
      if (part.type === "rich_text_section") {
        const p = el("div", "sk-mrkdwn");
        p.append(...richText(part.elements));
        box.append(p);
      } else if (part.type === "rich_text_preformatted") {
        const pre = el("pre", "sk-pre");
        pre.append(...richText(part.elements));
        box.append(pre);
      } else if (part.type === "rich_text_quote") {
        const quote = el("blockquote", "sk-quote");
        quote.append(...richText(part.elements));
        box.append(quote);
      } else if (part.type === "rich_text_list") {
        const list = el(part.style === "ordered" ? "ol" : "ul");
        for (const section of part.elements || []) {
          const li = el("li");
          li.append(...richText(section.elements));
          list.append(li);
        }
        box.append(list);
      }
    }
    return box;
  }

  function block(block, where) {
    switch (block && block.type) {
      case "header":
        return el("h3", "sk-header", plainText(block.text));
      case "section": {
        const box = el("div", "sk-section");
        const main = el("div", "sk-section-main");
        if (block.text) main.append(textObject(block.text));
        if (Array.isArray(block.fields) && block.fields.length) {
          const fields = el("div", "sk-fields");
          for (const field of block.fields) fields.append(textObject(field));
          main.append(fields);
        }
        box.append(main);
        if (block.accessory) box.append(element(block.accessory, where));
        return box;
      }
      case "context": {
        const box = el("div", "sk-context");
        for (const item of block.elements || []) box.append(element(item, where));
        return box;
      }
      case "divider":
        return el("hr", "sk-divider");
      case "actions": {
        const box = el("div", "sk-actions");
        box.dataset.blockId = String(block.block_id || "");
        for (const item of block.elements || []) box.append(element(item, where));
        return box;
      }
      case "rich_text":
        return richTextBlock(block);
      case "input": {
        const box = el("div", "sk-input");
        box.append(el("div", "sk-label", plainText(block.label)), element(block.element, where));
        return box;
      }
      case "image":
        return el("div", "sk-muted", "[image" + (block.alt_text ? ": " + block.alt_text : "") + "]");
      default:
        return el("div", "sk-muted", "[" + (block && block.type) + " block]");
    }
  }

  function blocks(list, where) {
    const box = el("div", "sk-blocks");
    for (const item of Array.isArray(list) ? list : []) box.append(block(item, where));
    return box;
  }

  function size(bytes) {
    if (bytes < 1024) return bytes + " B";
    if (bytes < 1024 * 1024) return (bytes / 1024).toFixed(1) + " KB";
    return (bytes / 1024 / 1024).toFixed(1) + " MB";
  }

  function fileCard(file) {
    const box = el("figure", "sk-file");
    const caption = el("figcaption");
    caption.append(el("span", "sk-file-icon", "📎"), el("strong", null, file.title || file.name));
    const facts = el("span", "sk-muted", " " + file.name + " · " + size(file.size));
    caption.append(facts);
    box.append(caption, el("pre", "sk-pre sk-preview", file.preview));
    if (file.size > file.preview.length) box.append(el("div", "sk-muted", "preview: the first " + size(file.preview.length)));
    return box;
  }

  function sinkItem(message) {
    const item = el("li");
    item.dataset.ts = message.ts;
    if (message.ephemeral_to) item.classList.add("sk-ephemeral");
    const meta = el("div", "meta");
    const parts = ["#" + message.channel];
    if (message.thread_ts) parts.push("thread " + message.thread_ts);
    const posted = new Date(message.posted_at);
    parts.push(posted.toLocaleTimeString());
    if (message.edits > 0) parts.push("edited " + (message.edits === 1 ? "once" : message.edits + " times"));
    meta.textContent = parts.join(" · ");
    meta.title = "posted " + posted.toISOString() + ", ts " + message.ts;
    item.append(meta);
    if (message.ephemeral_to) {
      item.append(el("div", "sk-only-you", "👁 Only visible to you (" + message.ephemeral_to + ")"));
    }
    const hasBlocks = Array.isArray(message.blocks) && message.blocks.length > 0;
    const body = hasBlocks ? blocks(message.blocks, { ts: message.ts }) : mrkdwn(message.text);
    body.classList.add("text");
    item.append(body);
    if (message.file) item.append(fileCard(message.file));
    return item;
  }

  function showSinkStatus(text, failed) {
    const status = $("sink-status");
    status.textContent = text;
    status.classList.toggle("error-text", Boolean(failed));
  }

  function interactionResult(what, answer) {
    const body = answer && answer.body;
    const said = body && typeof body === "object" ? JSON.stringify(body) : body ? String(body) : "";
    return what + ": /slack/interactions answered " + (answer ? answer.status : "?") + (said ? " " + said : "");
  }

  $("sink-messages").addEventListener("click", async (event) => {
    const target = event.target.closest("button[data-sink-click]");
    if (!target || target.disabled) return;
    const label = target.textContent;
    target.disabled = true;
    try {
      const answer = await api("POST", "/v1/slack/sink/click", { ts: target.dataset.ts, action_id: target.dataset.actionId });
      showSinkStatus(interactionResult("Clicked " + label, answer), false);
    } catch (error) {
      if (error.status !== 401) showSinkStatus("Clicking " + label + " failed: " + error.message + " (" + error.code + ")", true);
    } finally {
      target.disabled = false;
      state.sinkSeen = "";
      refreshSink();
    }
  });

  // ---- the open modal ----

  async function finishModal(kind) {
    const dialog = $("sink-modal");
    const viewId = dialog.dataset.viewId;
    if (!viewId) return;
    for (const button of dialog.querySelectorAll("button")) button.disabled = true;
    try {
      const answer = await api("POST", "/v1/slack/sink/" + kind, { view_id: viewId });
      showSinkStatus(kind === "submit" ? interactionResult("Submitted the modal", answer) : "Closed the modal", false);
    } catch (error) {
      if (error.status !== 401) showSinkStatus("Could not " + kind + " the modal: " + error.message + " (" + error.code + ")", true);
    } finally {
      for (const button of dialog.querySelectorAll("button")) button.disabled = false;
      state.sinkSeen = "";
      refreshSink();
    }
  }

  $("sink-modal-submit").addEventListener("click", () => finishModal("submit"));
  $("sink-modal-cancel").addEventListener("click", () => finishModal("close"));
  // Escape closes a Slack modal too: through the sink, so it knows.
  $("sink-modal").addEventListener("cancel", (event) => {
    event.preventDefault();
    finishModal("close");
  });

  function renderModal(modal) {
    const dialog = $("sink-modal");
    if (!modal) {
      delete dialog.dataset.viewId;
      delete dialog.dataset.shown;
      if (dialog.open) dialog.close();
      return;
    }
    const shown = modal.id + "@" + modal.updated_at;
    if (dialog.dataset.shown === shown && dialog.open) return;
    dialog.dataset.viewId = modal.id;
    dialog.dataset.shown = shown;
    const view = modal.view || {};
    $("sink-modal-title").textContent = plainText(view.title) || "Modal";
    $("sink-modal-blocks").replaceChildren(blocks(view.blocks, null));
    $("sink-modal-submit").textContent = plainText(view.submit) || "Submit";
    $("sink-modal-submit").hidden = !view.submit;
    $("sink-modal-cancel").textContent = plainText(view.close) || "Cancel";
    $("sink-modal-meta").textContent = "callback " + (view.callback_id || "none") + " · " + modal.id;
    if (!dialog.open) dialog.showModal();
  }

  function renderHomes(homes) {
    $("sink-home").hidden = homes.length === 0;
    const items = homes.map((home) => {
      const item = el("li");
      item.dataset.user = String(home.user || "");
      item.append(el("div", "meta", "App Home of " + home.user + " · published " + new Date(home.opened_at).toLocaleTimeString()));
      item.append(blocks((home.view || {}).blocks, null));
      return item;
    });
    $("sink-home-views").replaceChildren(...items);
  }

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
    // Oldest first from the API; shown newest first. Status cards are edited in place
    // (chat.update), so an edit must redraw too, as must a view that changed.
    const messages = (answer && answer.messages) || [];
    const views = (answer && answer.views) || [];
    const fingerprint =
      messages.map((m) => m.ts + "@" + m.updated_at).join(",") +
      "|" +
      views.map((v) => v.id + "@" + v.updated_at + v.state).join(",");
    $("sink").hidden = false;
    refreshDates($("sink"));
    if (fingerprint === state.sinkSeen) return;
    state.sinkSeen = fingerprint;
    const items = messages.slice().reverse().map(sinkItem);
    $("sink-messages").replaceChildren(...items);
    $("sink-empty").hidden = items.length > 0;
    renderHomes(views.filter((v) => v.kind === "home"));
    // Views come newest first: the newest open modal is the one on screen.
    renderModal(views.find((v) => v.kind === "modal" && v.state === "open"));
  }

  // ---- helpers and start -------------------------------------------------------------------

  // A thread's usage as of when it was selected, as `threadbox threads show` puts it: running and
  // paused time, and their cost (or vCPU-hours where nobody set prices).
  function usageText(usage) {
    if (!usage) return "-";
    const span = (ms) => (ms > 0 && ms < 1000 ? ms + "ms" : idle(Math.floor(ms / 1000)));
    let text = "running " + span(usage.running_ms) + ", paused " + span(usage.paused_ms);
    const cost = usage.cost;
    if (cost && cost.usd !== undefined) {
      text += "; $" + cost.usd.toFixed(4) + " running, $" + (cost.saved_usd || 0).toFixed(4) + " saved by pausing";
    } else if (cost) {
      text += "; " + cost.vcpu_hours.toFixed(4) + " vCPU-h";
    }
    return text;
  }

  // What the sandbox's network refused as of when it was selected, where its provider counts
  // that (`threadbox threads show` lists each destination): the counts, then the newest first.
  function refusedText(sandbox) {
    const refusals = sandbox && sandbox.network_refusals;
    if (!refusals) return "-";
    const counts = [];
    if (refusals.lookups != null) counts.push(refusals.lookups + " DNS lookups");
    if (refusals.connections != null) counts.push(refusals.connections + " proxied connections");
    if (refusals.packets != null) counts.push(refusals.packets + " packets");
    const recent = refusals.recent.slice().reverse().map((r) => r.destination);
    return counts.join(", ") + (recent.length ? "; last: " + recent.join(", ") : "");
  }

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
