// The Sigil chat page: one WebSocket speaking docs/web-channel.md's browser protocol.
//
// The token comes from the URL fragment (#token=..., never sent to a server, so never in a log) or
// the paste box, and is kept in sessionStorage: this tab only, and a reload keeps it. A link for
// another user than the one this browser was is asked about, never taken silently: anyone can
// send a link, and one taken silently would put the person in the sender's session (login CSRF).
// The outbox is the source of truth: the page keeps the last seq it has per session and resumes
// after it on every reconnection, so a dropped connection loses and repeats nothing. The user's own
// messages are kept in localStorage (the outbox holds replies only) and each reply is placed under
// the message it answers (`in_reply_to`). Text from users and models, rendered by the same markdown
// (markdown.js), only ever becomes DOM nodes, never markup.
// Files (the Attach button, drag and drop, a pasted image) are uploaded as soon as they are added,
// with the same token (docs/web-channel.md, "Attachments"): a slot first, which refuses a file too
// large or of a kind the workspace does not take from its declared size before a byte is sent, then
// the bytes (to the gateway, or a presigned POST to S3 and a confirm); the message then names the
// files' media ids. An image's thumbnail is drawn here, from the file, and kept with the message.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const MAX_BACKOFF_MS = 15000;
  const MAX_KEPT = 200;
  const THUMB_PX = 160;

  const state = {
    token: null, claims: null, ws: null, ready: false, attempts: 0, retryTimer: null, stopped: false,
    session: null, lastSeq: {}, // session → highest seq shown
    pending: [], // files added to the next message: {id, file, name, size, kind, state, media, thumb, error}
  };

  // ------------------------------------------------------------------ token

  function decodeClaims(token) {
    const parts = String(token).trim().split(".");
    if (parts.length !== 3 || parts[0] !== "v1") return null;
    try {
      const b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
      const json = new TextDecoder().decode(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)));
      const claims = JSON.parse(json);
      if (typeof claims.workspace !== "string" || typeof claims.user !== "string") return null;
      claims.sessions = [].concat(claims.sessions || []);
      return claims;
    } catch (_) {
      return null;
    }
  }

  // The link's token and session, if any; the fragment leaves the address bar whatever it held.
  function takeFragment() {
    const params = new URLSearchParams(location.hash.replace(/^#/, ""));
    if (location.hash) history.replaceState(null, "", location.pathname + location.search);
    const link = { token: params.get("token"), session: params.get("session") };
    if (!link.token && link.session) sessionStorage.setItem("sigil.session", link.session);
    return link.token ? link : null;
  }

  // ------------------------------------------------------------------ identity

  // Who this browser last was on this page (workspace and user: never the token), so a link for
  // someone else is noticed in a new tab too, where sessionStorage starts empty.
  const IDENTITY = "sigil.identity";
  const identityOf = (claims) => ({ workspace: claims.workspace, user: claims.user });
  const sameIdentity = (a, b) => a.workspace === b.workspace && a.user === b.user;

  function heldIdentity() {
    const held = decodeClaims(sessionStorage.getItem("sigil.token") || "");
    if (held) return identityOf(held);
    const kept = load(IDENTITY, null);
    return kept && typeof kept.workspace === "string" && typeof kept.user === "string" ? kept : null;
  }

  // A link arrived (on load, or a fragment changed under the open page): taken at once when it is
  // for whoever this browser already is (or was no one), else only once the person says so.
  function arrive(link) {
    const claims = decodeClaims(link.token);
    const held = heldIdentity();
    if (claims && held && !sameIdentity(held, identityOf(claims))) {
      askToSwitch(link, identityOf(claims), held);
      return;
    }
    adopt(link, !(held && claims)); // here a decodable token for someone held is for the same one
  }

  function adopt(link, newIdentity) {
    $("switch-panel").hidden = true;
    sessionStorage.setItem("sigil.token", link.token);
    if (link.session) sessionStorage.setItem("sigil.session", link.session);
    else if (newIdentity) sessionStorage.removeItem("sigil.session"); // the last user's conversation
    begin(link.token);
  }

  function askToSwitch(link, linked, held) {
    const name = (who) => `${who.user} (workspace ${who.workspace})`;
    $("switch-text").textContent =
      `This link opens Sigil as ${name(linked)}, but this browser is using it as ${name(held)}. ` +
      "Anyone can send a link: switch only if you asked for this one, or your messages would go to " +
      "their conversations.";
    $("switch-yes").textContent = `Switch to ${linked.user}`;
    $("switch-no").textContent = `Stay as ${held.user}`;
    $("switch-yes").onclick = () => adopt(link, true);
    $("switch-no").onclick = () => {
      $("switch-panel").hidden = true;
      if (state.token) return; // the open conversation goes on
      const token = sessionStorage.getItem("sigil.token");
      if (token) start(token); else $("token-panel").hidden = false;
    };
    $("switch-panel").hidden = false;
    $("switch-no").focus();
  }

  // Start over with `token`, closing the connection of the one before.
  function begin(token) {
    if (state.ws) { state.stopped = true; state.ws.close(); }
    banner(null);
    start(token);
  }

  // ------------------------------------------------------------------ storage

  const key = (...parts) => ["sigil", state.claims.workspace, state.claims.user, ...parts].join("|");
  function load(name, fallback) {
    try { return JSON.parse(localStorage.getItem(name)) ?? fallback; } catch (_) { return fallback; }
  }
  function save(name, value) {
    try { localStorage.setItem(name, JSON.stringify(value)); } catch (_) { /* full or disabled */ }
  }
  const sentOf = (session) => load(key("sent", session), []);
  const saveSent = (session, list) => save(key("sent", session), list.slice(-MAX_KEPT));

  // ------------------------------------------------------------------ sessions

  function prefixes() {
    return state.claims.sessions.filter((p) => p.endsWith("*")).map((p) => p.slice(0, -1));
  }
  // The server's rule (shared/channels/web_tokens.py): "*" is one or more characters but ".",
  // so "alice.*" is alice's conversations and never those of a user "alice.smith".
  function allowed(name) {
    return state.claims.sessions.some((p) => {
      if (!p.endsWith("*")) return name === p;
      const rest = name.slice(p.length - 1);
      return name.startsWith(p.slice(0, -1)) && rest !== "" && !rest.includes(".");
    });
  }
  function knownSessions() {
    const stored = load(key("sessions"), []).filter((s) => allowed(s.name));
    for (const p of state.claims.sessions) {
      if (!p.endsWith("*") && !stored.some((s) => s.name === p)) stored.push({ name: p, title: p, updated: 0 });
    }
    return stored;
  }
  // A conversation's title until its first message names it: not the "New conversation" button's
  // name, so a screen reader never hears two buttons of that name (the old one kept for lists
  // stored before).
  const UNTITLED = "Untitled conversation";
  const PLACEHOLDERS = [UNTITLED, "New conversation"];
  function remember(name, title) {
    const list = knownSessions();
    const found = list.find((s) => s.name === name);
    if (found) {
      if (title && (!found.title || found.title === found.name || PLACEHOLDERS.includes(found.title))) found.title = title;
      found.updated = Date.now();
    } else {
      list.push({ name, title: title || UNTITLED, updated: Date.now() });
    }
    list.sort((a, b) => b.updated - a.updated);
    save(key("sessions"), list.slice(0, MAX_KEPT));
    renderSessions();
  }
  function newSessionName() {
    const prefix = prefixes()[0];
    return prefix + Date.now().toString(36) + Math.random().toString(36).slice(2, 6);
  }

  function renderSessions() {
    const ul = $("session-list");
    ul.replaceChildren();
    for (const s of knownSessions()) {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = s.title || s.name;
      button.title = s.name;
      button.dataset.session = s.name;
      if (s.name === state.session) button.setAttribute("aria-current", "true");
      button.addEventListener("click", () => switchTo(s.name));
      const li = document.createElement("li");
      li.append(button);
      ul.append(li);
    }
    const canCreate = prefixes().length > 0;
    $("new-session").disabled = !canCreate;
    $("new-session").title = canCreate ? "" : "This link is for the conversations it names only";
  }

  function switchTo(name) {
    state.session = name;
    sessionStorage.setItem("sigil.session", name);
    remember(name);
    $("session-title").textContent = "Conversation " + name;
    // Files uploaded for another conversation can't go with this one's messages.
    state.pending = state.pending.filter((p) => p.session === name);
    renderPending();
    renderLog();
    if (state.ready) resume(name);
    $("message").focus();
  }

  // ------------------------------------------------------------------ the log

  function bubble(kind, attrs) {
    const div = document.createElement("div");
    div.className = "msg " + kind;
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) div.dataset[k] = v;
    return div;
  }

  function userBubble(msg) {
    const div = bubble("user", { event: msg.event_id });
    if (msg.files && msg.files.length) div.append(filesOf(msg.files));
    // The same markdown as a reply's, built as DOM nodes: what the person typed is never markup.
    if (msg.text) div.append(SigilMarkdown.render(msg.text));
    if (!msg.accepted && !msg.refused) div.classList.add("pending");
    if (msg.refused) markRefused(div, msg.refused);
    return div;
  }

  // A message's files: an image's thumbnail (drawn by this page, a data: URL), else a chip.
  function filesOf(files) {
    const box = document.createElement("div");
    box.className = "files";
    for (const f of files) {
      if (f.thumb) {
        const img = document.createElement("img");
        img.className = "thumb";
        img.src = f.thumb;
        img.alt = f.name;
        img.dataset.media = f.media_id || "";
        box.append(img);
      } else {
        box.append(chip(f));
      }
    }
    return box;
  }

  function chip(f) {
    const span = document.createElement("span");
    span.className = "chip";
    span.dataset.media = f.media_id || "";
    span.textContent = `${f.name} (${sizeText(f.size)})`;
    return span;
  }

  function sizeText(n) {
    if (n >= 1e6) return (n / 1e6).toFixed(1) + " MB";
    if (n >= 1e3) return Math.round(n / 1e3) + " KB";
    return n + " bytes";
  }

  function markRefused(div, code) {
    div.classList.remove("pending");
    div.dataset.refused = code;
    if (!div.querySelector(".not-sent")) {
      const note = document.createElement("span");
      note.className = "not-sent";
      note.textContent = "Not sent";
      div.append(note);
    }
  }

  function renderLog() {
    state.lastSeq[state.session] = 0;
    const log = $("log");
    log.replaceChildren(...sentOf(state.session).map(userBubble));
  }

  // Where a reply to `event` goes: after its message and the replies already under it.
  function placeAfter(event) {
    const log = $("log");
    const mine = event ? log.querySelector(`.msg.user[data-event="${CSS.escape(event)}"]`) : null;
    if (!mine) return null;
    let at = mine;
    while (at.nextElementSibling && at.nextElementSibling.classList.contains("assistant") &&
           at.nextElementSibling.dataset.event === event) at = at.nextElementSibling;
    return at;
  }

  function assistantBubble(turn, part, event) {
    const log = $("log");
    let div = log.querySelector(`.msg.assistant[data-turn="${CSS.escape(turn)}"][data-part="${part}"]`);
    if (div) return div;
    div = bubble("assistant", { turn, part: String(part), event });
    div.streamed = "";
    const after = placeAfter(event);
    if (after) after.after(div); else log.append(div);
    return div;
  }

  function showMarkdown(div, text) {
    div.replaceChildren(SigilMarkdown.render(text));
    const log = $("log");
    if (log.scrollHeight - log.scrollTop - log.clientHeight < 120) log.scrollTop = log.scrollHeight;
  }

  function onDelta(f) {
    if (f.session !== state.session) return;
    const div = assistantBubble(f.turn_id, f.part, f.in_reply_to);
    if (div.dataset.seq) return; // the stored reply is already shown
    const had = div.streamed || "";
    // An increment of text this page never got (it looked at another session meanwhile): wait for
    // the next whole text, or for the reply frame, rather than show a gap.
    if (f.offset > had.length) return;
    div.streamed = had.slice(0, f.offset) + f.text;
    div.setAttribute("aria-busy", "true");
    showMarkdown(div, div.streamed);
  }

  function onReply(f) {
    if (f.session !== state.session) return;
    if (f.seq <= (state.lastSeq[f.session] || 0)) return; // already have it
    state.lastSeq[f.session] = f.seq;
    const div = assistantBubble(f.turn_id, f.part, f.in_reply_to);
    div.dataset.seq = String(f.seq);
    div.removeAttribute("aria-busy");
    showMarkdown(div, f.text);
    const sent = sentOf(f.session);
    const mine = sent.find((m) => m.event_id === f.in_reply_to);
    if (mine && !mine.accepted) { mine.accepted = true; saveSent(f.session, sent); markAccepted(f.in_reply_to); }
  }

  function markAccepted(event) {
    const div = $("log").querySelector(`.msg.user[data-event="${CSS.escape(event)}"]`);
    if (div) div.classList.remove("pending");
  }

  // ------------------------------------------------------------------ banners and status

  const MESSAGES = {
    token_expired: "Your access to this conversation has expired. Open a fresh link (sigil web open) or paste a new token.",
    token_invalid: "This link is not valid for this Sigil. Ask for a new one, or paste a token.",
    sender_refused: "This workspace does not accept messages from you. Ask its administrator to let you in.",
    budget_exhausted: "The budget for your messages has run out.",
    session_forbidden: "This link does not cover that conversation.",
    media_refused: "A file was refused.",
    media_forbidden: "A file was refused.",
    connection_lost: "The connection was lost. Reconnecting…",
  };

  function banner(code, message, kind) {
    const b = $("banner");
    if (!code) { b.hidden = true; delete b.dataset.code; return; }
    b.hidden = false;
    b.dataset.code = code;
    b.dataset.kind = kind || "error";
    const known = MESSAGES[code];
    const detailed = (code === "budget_exhausted" || code.startsWith("media_")) && message;
    $("banner-text").textContent = detailed ? `${known} ${message}` : (known || message || code);
  }

  function status(kind, text) {
    const s = $("status");
    s.dataset.state = kind;
    s.textContent = text;
  }

  // ------------------------------------------------------------------ the connection

  // Where the socket is: config.json's websocket_url (the stack's WebSocket API, beside the HTTP
  // API that serves this page), else this page's own origin at /ws (sigil dev, sigil dev --aws).
  let configured = null;
  async function loadConfig() {
    if (configured !== null) return;
    try {
      const r = await fetch("config.json", { cache: "no-store" });
      const c = r.ok ? await r.json() : {};
      configured = typeof c.websocket_url === "string" ? c.websocket_url : "";
    } catch (_) {
      configured = null; // unreachable: asked again on the next attempt
    }
  }

  function wsUrl() {
    if (configured) return configured;
    return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws";
  }

  async function connect() {
    clearTimeout(state.retryTimer);
    if (state.stopped) return;
    status(state.attempts ? "reconnecting" : "connecting", state.attempts ? "Reconnecting…" : "Connecting…");
    await loadConfig();
    if (state.stopped) return;
    const ws = new WebSocket(wsUrl());
    state.ws = ws;
    state.ready = false;
    // The token in the first frame, not the URL: it stays out of access logs.
    ws.addEventListener("open", () => ws.send(JSON.stringify({ type: "auth", token: state.token })));
    ws.addEventListener("message", (e) => {
      let f;
      try { f = JSON.parse(e.data); } catch (_) { return; }
      handle(f);
    });
    ws.addEventListener("close", (e) => {
      if (state.ws !== ws) return;
      state.ready = false;
      if (e.code === 4401 || e.code === 4403 || state.stopped) {
        stop(e.code === 4403 ? "This page's address is not allowed to reach Sigil (CORS origins)." : null);
        return;
      }
      retry();
    });
  }

  function retry() {
    const delay = Math.min(MAX_BACKOFF_MS, 500 * 2 ** state.attempts) * (0.5 + Math.random() / 2);
    state.attempts += 1;
    banner("connection_lost", null, "warn");
    status("reconnecting", `Connection lost; retrying in ${Math.ceil(delay / 1000)} s`);
    state.retryTimer = setTimeout(connect, delay);
  }

  function stop(reason) {
    state.stopped = true;
    status("closed", "Disconnected");
    if (reason) banner("origin", reason);
    $("token-panel").hidden = false;
    $("send").disabled = true;
  }

  function resume(session) {
    send({ type: "resume", session, after: state.lastSeq[session] || 0 });
  }

  function send(frame) {
    if (state.ws && state.ws.readyState === WebSocket.OPEN && state.ready) {
      state.ws.send(JSON.stringify(frame));
      return true;
    }
    return false;
  }

  function handle(f) {
    switch (f.type) {
      case "ready":
        state.ready = true;
        state.attempts = 0;
        if ($("banner").dataset.code === "connection_lost") banner(null);
        status("open", "Connected");
        resume(state.session);
        // Messages typed while offline, or sent just before a drop: the same event id again is
        // recognised by the server, so this never makes a second turn.
        for (const m of sentOf(state.session)) {
          if (!m.accepted && !m.refused) send(sendFrame(m, state.session));
        }
        break;
      case "accepted": {
        const sent = sentOf(f.session);
        const m = sent.find((x) => x.event_id === f.event_id);
        if (m) { m.accepted = true; saveSent(f.session, sent); }
        if (f.session === state.session) markAccepted(f.event_id);
        break;
      }
      case "delta": onDelta(f); break;
      case "reply": onReply(f); break;
      case "error": onError(f); break;
      default: break;
    }
  }

  function onError(f) {
    banner(f.code, f.message, "error");
    const refusals = ["sender_refused", "budget_exhausted", "session_forbidden", "media_refused", "media_forbidden"];
    if (f.event_id && f.session && refusals.includes(f.code)) {
      const sent = sentOf(f.session);
      const m = sent.find((x) => x.event_id === f.event_id);
      if (m) { m.refused = f.code; saveSent(f.session, sent); }
      const div = $("log").querySelector(`.msg.user[data-event="${CSS.escape(f.event_id)}"]`);
      if (div) markRefused(div, f.code);
    }
    if (f.code === "token_expired" || f.code === "token_invalid") stop(null);
  }

  // ------------------------------------------------------------------ the composer

  function sendFrame(msg, session) {
    const frame = { type: "send", event_id: msg.event_id, session, text: msg.text };
    if (msg.files && msg.files.length) frame.attachments = msg.files.map((f) => ({ media_id: f.media_id }));
    return frame;
  }

  async function submit() {
    const box = $("message");
    const text = box.value.trim();
    if (state.stopped) return;
    if (state.pending.some((p) => p.state === "uploading")) {
      status(state.ready ? "open" : $("status").dataset.state, "Waiting for the files to upload…");
      await Promise.all(state.pending.map((p) => p.done));
    }
    const ready = state.pending.filter((p) => p.state === "ready");
    if (!text && !ready.length) return;
    const msg = {
      event_id: "e" + Date.now().toString(36) + Math.random().toString(36).slice(2, 8),
      text, at: Date.now(), accepted: false,
      files: ready.map((p) => ({ media_id: p.media.media_id, name: p.media.name, kind: p.media.kind,
        mime_type: p.media.mime_type, size: p.media.size, thumb: p.thumb || null })),
    };
    const sent = sentOf(state.session);
    sent.push(msg);
    saveSent(state.session, sent);
    remember(state.session, (text || ready.map((p) => p.name).join(", ")).slice(0, 40));
    $("log").append(userBubble(msg));
    $("log").scrollTop = $("log").scrollHeight;
    box.value = "";
    // The files sent go; a refused one stays listed, with its reason, until it is removed.
    state.pending = state.pending.filter((p) => p.state !== "ready");
    renderPending();
    if ($("banner").dataset.code && $("banner").dataset.code !== "connection_lost") banner(null);
    send(sendFrame(msg, state.session));
  }

  // ------------------------------------------------------------------ attachments

  function addFiles(files) {
    if (!state.claims || state.stopped) return;
    for (const file of files) {
      const entry = { id: Math.random().toString(36).slice(2), file, name: file.name || "pasted-image.png",
        size: file.size, state: "uploading", media: null, thumb: null, error: null, session: state.session };
      entry.done = upload(entry).then(
        (media) => { entry.media = media; entry.state = "ready"; },
        (err) => { entry.state = "refused"; entry.error = err.message || String(err); },
      ).then(renderPending);
      if ((file.type || "").startsWith("image/")) {
        thumbnail(file).then((t) => { entry.thumb = t; renderPending(); }, () => {});
      }
      state.pending.push(entry);
    }
    renderPending();
  }

  // A small JPEG of the image, drawn here from the file (never fetched back): it is what the
  // message shows, after a reload too (kept with the message in localStorage).
  function thumbnail(file) {
    return new Promise((resolve, reject) => {
      const url = URL.createObjectURL(file);
      const img = new Image();
      img.onload = () => {
        const scale = Math.min(1, THUMB_PX / Math.max(img.width, img.height));
        const canvas = document.createElement("canvas");
        canvas.width = Math.max(1, Math.round(img.width * scale));
        canvas.height = Math.max(1, Math.round(img.height * scale));
        canvas.getContext("2d").drawImage(img, 0, 0, canvas.width, canvas.height);
        URL.revokeObjectURL(url);
        resolve(canvas.toDataURL("image/jpeg", 0.8));
      };
      img.onerror = () => { URL.revokeObjectURL(url); reject(new Error("not an image")); };
      img.src = url;
    });
  }

  async function answerOf(response) {
    let body = {};
    try { body = await response.json(); } catch (_) { /* not JSON */ }
    if (response.ok) return body;
    throw new Error(body.message || `the upload failed (${response.status})`);
  }

  // The slot, then the bytes: to the gateway itself (sigil dev), or a presigned POST to the media
  // bucket and the confirm step (the cloud, sigil dev --aws).
  async function upload(entry) {
    const auth = { Authorization: "Bearer " + state.token };
    const workspace = encodeURIComponent(state.claims.workspace);
    const slot = await answerOf(await fetch(`media/${workspace}/uploads`, {
      method: "POST",
      headers: { ...auth, "Content-Type": "application/json" },
      body: JSON.stringify({ session: entry.session, name: entry.name, size: entry.size, type: entry.file.type || "" }),
    }));
    if (!slot.fields) {
      return answerOf(await fetch(slot.url, {
        method: "POST", headers: { ...auth, "Content-Type": "application/octet-stream" }, body: entry.file,
      }));
    }
    const form = new FormData();
    for (const [k, v] of Object.entries(slot.fields)) form.append(k, v);
    form.append("file", entry.file);
    const posted = await fetch(slot.url, { method: "POST", body: form });
    if (!posted.ok) {
      throw new Error(posted.status === 400 ? `${entry.name} is larger than this workspace takes` : `the upload failed (${posted.status})`);
    }
    return answerOf(await fetch(slot.confirm, { method: "POST", headers: auth }));
  }

  function renderPending() {
    const ul = $("attachments");
    ul.replaceChildren();
    for (const p of state.pending) {
      const li = document.createElement("li");
      li.className = "attachment";
      li.dataset.state = p.state;
      li.dataset.name = p.name;
      if (p.media) li.dataset.media = p.media.media_id;
      if (p.thumb) {
        const img = document.createElement("img");
        img.className = "thumb";
        img.src = p.thumb;
        img.alt = "Preview of " + p.name;
        li.append(img);
      } else {
        li.append(chip({ name: p.name, size: p.size }));
      }
      const note = document.createElement("span");
      note.className = "note";
      note.textContent = p.state === "uploading" ? "Uploading…" : p.state === "refused" ? `Not attached: ${p.error}` : "Ready";
      if (p.state === "refused") note.setAttribute("role", "alert");
      li.append(note);
      const remove = document.createElement("button");
      remove.type = "button";
      remove.textContent = "×";
      remove.setAttribute("aria-label", "Remove " + p.name);
      remove.addEventListener("click", () => {
        state.pending = state.pending.filter((x) => x !== p);
        renderPending();
        $("message").focus();
      });
      li.append(remove);
      ul.append(li);
    }
    ul.hidden = state.pending.length === 0;
  }

  function watchForFiles() {
    $("attach").addEventListener("click", () => $("file-input").click());
    $("file-input").addEventListener("change", (e) => { addFiles([...e.target.files]); e.target.value = ""; });
    // Pasting an image (a screenshot) attaches it; pasted text stays text.
    $("message").addEventListener("paste", (e) => {
      const files = [...(e.clipboardData ? e.clipboardData.files : [])];
      if (files.length) { e.preventDefault(); addFiles(files); }
    });
    const zone = document.querySelector(".conversation");
    let depth = 0;
    const dragging = (on) => { $("composer").classList.toggle("dragging", on); $("drop-hint").hidden = !on; };
    const hasFiles = (e) => e.dataTransfer && [...e.dataTransfer.types].includes("Files");
    zone.addEventListener("dragenter", (e) => { if (hasFiles(e)) { depth += 1; dragging(true); e.preventDefault(); } });
    zone.addEventListener("dragover", (e) => { if (hasFiles(e)) e.preventDefault(); });
    zone.addEventListener("dragleave", () => { depth = Math.max(0, depth - 1); if (!depth) dragging(false); });
    zone.addEventListener("drop", (e) => {
      if (!hasFiles(e)) return;
      e.preventDefault();
      depth = 0;
      dragging(false);
      addFiles([...e.dataTransfer.files]);
    });
  }

  // ------------------------------------------------------------------ start

  function start(token) {
    const claims = decodeClaims(token);
    if (!claims) {
      $("token-panel").hidden = false;
      banner("token_invalid", null);
      return;
    }
    state.token = token;
    state.claims = claims;
    save(IDENTITY, identityOf(claims));
    state.stopped = false;
    $("token-panel").hidden = true;
    $("app").hidden = false;
    $("send").disabled = false;
    $("who").textContent = `${claims.user} · ${claims.workspace}`;
    const wanted = sessionStorage.getItem("sigil.session");
    const known = knownSessions();
    const first = wanted && allowed(wanted) ? wanted : known.length ? known[0].name : prefixes().length ? newSessionName() : null;
    if (!first) { banner("session_forbidden", null); return; }
    switchTo(first);
    connect();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const link = takeFragment();
    $("composer").addEventListener("submit", (e) => { e.preventDefault(); submit(); });
    $("message").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); submit(); }
    });
    $("new-session").addEventListener("click", () => switchTo(newSessionName()));
    watchForFiles();
    $("token-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const token = $("token-input").value.trim();
      $("token-input").value = "";
      // Pasted by the person: their choice, so no question.
      sessionStorage.setItem("sigil.token", token);
      begin(token);
    });
    window.addEventListener("online", () => { if (!state.ready && !state.stopped) connect(); });
    window.addEventListener("hashchange", () => {
      const next = takeFragment();
      if (next) arrive(next);
    });
    const token = sessionStorage.getItem("sigil.token");
    if (link) arrive(link);
    else if (token) start(token);
    else $("token-panel").hidden = false;
  });
})();
