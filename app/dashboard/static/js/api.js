// The JSON API as the dashboard sees it: the API key from session storage, errors, live events.

const KEY = "recycle.apiKey";
const WHO = "recycle.principal";

export class ApiError extends Error {
  constructor(status, code, detail) {
    super(`${status} ${code}: ${detail}`);
    this.status = status;
    this.code = code;
    this.detail = detail;
  }
}

export function storedKey() {
  return sessionStorage.getItem(KEY);
}

export function principal() {
  try {
    return JSON.parse(sessionStorage.getItem(WHO) || "null");
  } catch {
    return null;
  }
}

export function isAdmin() {
  const who = principal();
  return Boolean(who && who.role === "admin");
}

export function canSubmit() {
  const who = principal();
  return Boolean(who && (who.role === "admin" || who.role === "platform"));
}

export function signOut(reason) {
  sessionStorage.removeItem(KEY);
  sessionStorage.removeItem(WHO);
  const next = location.pathname + location.search;
  const query = new URLSearchParams({ next });
  if (reason) query.set("reason", reason);
  location.assign(`/dashboard/login?${query}`);
}

function headers(key = storedKey()) {
  const result = { Accept: "application/json" };
  if (key) result.Authorization = `Bearer ${key}`;
  return result;
}

async function raiseFor(response, { redirect = true } = {}) {
  let code = "Error";
  let detail = response.statusText;
  try {
    const body = await response.json();
    code = body.error || code;
    detail = body.detail || detail;
  } catch {
    /* not JSON */
  }
  if (response.status === 401 && redirect) signOut("expired");
  throw new ApiError(response.status, code, detail);
}

export async function request(method, path, { body, query, key } = {}) {
  let url = path;
  if (query) {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query)) {
      if (value !== undefined && value !== null && value !== "") params.set(name, value);
    }
    const text = params.toString();
    if (text) url += `?${text}`;
  }
  const init = { method, headers: headers(key) };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(url, init);
  if (!response.ok) await raiseFor(response, { redirect: !key });
  if (response.status === 204) return null;
  return response.json();
}

export const get = (path, query) => request("GET", path, { query });
export const post = (path, body) => request("POST", path, { body });
export const seg = (value) => encodeURIComponent(String(value));

/** Check a key against the API and keep it for this tab. */
export async function signIn(key) {
  const who = await request("GET", "/v1/keys/me", { key });
  sessionStorage.setItem(KEY, key);
  sessionStorage.setItem(WHO, JSON.stringify(who));
  return who;
}

/**
 * Follow a job's server-sent events (``GET /v1/jobs/{id}/events``) with the key in a header:
 * EventSource cannot send one, so the stream is read with fetch. Calls onEvent(type, data)
 * for every event; resolves when the stream ends (the final ``status`` event) or is aborted.
 */
export async function followJob(jobId, onEvent, signal) {
  let response;
  try {
    response = await fetch(`/v1/jobs/${seg(jobId)}/events`, {
      headers: { ...headers(), Accept: "text/event-stream" },
      signal,
    });
  } catch {
    return; // aborted, or the page is going away
  }
  if (!response.ok) {
    try {
      await raiseFor(response);
    } catch {
      /* reported by the page's own refresh */
    }
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch {
      return;
    }
    if (chunk.done) return;
    buffer += decoder.decode(chunk.value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let type = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) type = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trim());
      }
      if (!data.length) continue;
      try {
        onEvent(type, JSON.parse(data.join("\n")));
      } catch (error) {
        console.warn("could not handle an event", error);
      }
    }
  }
}

/** Keep at most ``limit`` job streams open (browsers allow six connections per host). */
export class JobStreams {
  constructor(onEvent, limit = 3) {
    this.onEvent = onEvent;
    this.limit = limit;
    this.open = new Map();
  }

  sync(activeJobIds) {
    const wanted = new Set(activeJobIds.slice(0, this.limit));
    for (const [id, controller] of this.open) {
      if (!wanted.has(id)) {
        controller.abort();
        this.open.delete(id);
      }
    }
    for (const id of wanted) {
      if (this.open.has(id)) continue;
      const controller = new AbortController();
      this.open.set(id, controller);
      followJob(id, (type, data) => this.onEvent(type, data), controller.signal).finally(() => {
        if (this.open.get(id) === controller) this.open.delete(id);
      });
    }
  }

  get size() {
    return this.open.size;
  }

  close() {
    for (const controller of this.open.values()) controller.abort();
    this.open.clear();
  }
}
