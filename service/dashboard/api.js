// service/dashboard/api.js - larchd's REST API from the browser (docs/api.md):
// the session (a bearer token in sessionStorage, never a cookie), JSON
// requests that revalidate GETs with ETag / If-None-Match, and the change
// feed (GET /v1/events long poll, polling every 3 s on a server without it).

const SESSION_KEY = 'larch.session';
const CACHE_MAX = 64;          // revalidated GET bodies kept, newest last
const POLL_MS = 3000;          // the fallback when /v1/events is not there
const BACKOFF_MAX_MS = 15000;
const FEED_TIMEOUT_S = 25;

export const TOKEN_RE = /^lt_[0-9a-f]{64}$/;

// An API error: the {"error": {"code", "message", "detail"}} reply, or a
// network failure (status 0, code "network").
export class ApiError extends Error {
  constructor(status, code, message, detail = null) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.detail = detail;
  }
}

// The session: {token, role: "admin"|"user", user: name or null}.
export const session = {
  get() {
    try {
      const s = JSON.parse(sessionStorage.getItem(SESSION_KEY));
      return s && typeof s.token === 'string' && TOKEN_RE.test(s.token) ? s : null;
    } catch {
      return null;
    }
  },
  set(s) {
    sessionStorage.setItem(SESSION_KEY, JSON.stringify(s));
  },
  clear() {
    sessionStorage.removeItem(SESSION_KEY);
    cache.clear();
  },
};

let onUnauthorized = null;

// fn(err) runs when a request made with the session's token gets a 401.
export function setUnauthorizedHandler(fn) {
  onUnauthorized = fn;
}

// url key -> {etag, data}: what a 304 stands for.
const cache = new Map();

function remember(key, etag, data) {
  cache.delete(key);
  cache.set(key, { etag, data });
  while (cache.size > CACHE_MAX)
    cache.delete(cache.keys().next().value);
}

async function errorOf(resp) {
  let body = null;
  try {
    body = await resp.json();
  } catch {
    body = null;
  }
  const e = body && body.error;
  if (e && typeof e.code === 'string')
    return new ApiError(resp.status, e.code, String(e.message || e.code), e.detail || null);
  return new ApiError(resp.status, `http_${resp.status}`,
                      `${resp.status} ${resp.statusText || 'error'}`.trim());
}

// One API call. Returns {status, data, changed}: changed is false when a
// GET was answered 304 (data is then the body remembered with its ETag).
// Throws ApiError (or the AbortError of opts.signal). opts: body (sent as
// JSON), signal, token (another token than the session's: used to try one
// at sign-in, and then a 401 is only thrown), revalidate (GET; default
// true).
export async function request(method, path, opts = {}) {
  const token = opts.token || (session.get() || {}).token;
  const headers = { Accept: 'application/json' };
  if (token)
    headers.Authorization = `Bearer ${token}`;
  const revalidate = method === 'GET' && opts.revalidate !== false;
  const key = `${token || ''} ${path}`;
  const cached = revalidate ? cache.get(key) : null;
  if (cached)
    headers['If-None-Match'] = cached.etag;
  let body;
  if (opts.body !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(opts.body);
  }
  let resp;
  try {
    resp = await fetch(path, { method, headers, body, signal: opts.signal,
                               cache: 'no-store', credentials: 'omit' });
  } catch (e) {
    if (e.name === 'AbortError')
      throw e;
    throw new ApiError(0, 'network', `cannot reach larchd (${e.message})`);
  }
  if (resp.status === 304 && cached)
    return { status: 304, data: cached.data, changed: false };
  if (!resp.ok) {
    const err = await errorOf(resp);
    if (resp.status === 401 && !opts.token && onUnauthorized)
      onUnauthorized(err);
    throw err;
  }
  const text = await resp.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      throw new ApiError(resp.status, 'bad_reply', `${path}: the reply is not JSON`);
    }
  }
  const etag = resp.headers.get('ETag');
  if (revalidate && etag)
    remember(key, etag, data);
  return { status: resp.status, data, changed: true };
}

export function isAbort(e) {
  return e && e.name === 'AbortError';
}

// Resolves after ms, or rejects with an AbortError when signal aborts.
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted)
      return reject(new DOMException('aborted', 'AbortError'));
    const t = setTimeout(done, ms);
    function done() {
      if (signal)
        signal.removeEventListener('abort', abort);
      resolve();
    }
    function abort() {
      clearTimeout(t);
      reject(new DOMException('aborted', 'AbortError'));
    }
    if (signal)
      signal.addEventListener('abort', abort, { once: true });
  });
}

// The change feed. Subscribers get batches {changes, reset}: changes is the
// list of {seq, job, state, time} (null in polling mode: "anything may have
// changed"), reset says the cursor was lost (larchd restarted, or we fell
// behind) and everything shown must be reloaded. Mode listeners get "live"
// (long poll), "polling" (no /v1/events on this server), "offline"
// (retrying with backoff) or "idle" (stopped).
class Feed {
  constructor() {
    this.subs = new Set();
    this.modeSubs = new Set();
    this.mode = 'idle';
    this.ctrl = null;
    this.polling = false;
  }

  subscribe(fn) {
    this.subs.add(fn);
    return () => this.subs.delete(fn);
  }

  onMode(fn) {
    this.modeSubs.add(fn);
    fn(this.mode);
    return () => this.modeSubs.delete(fn);
  }

  setMode(mode) {
    if (mode === this.mode)
      return;
    this.mode = mode;
    for (const fn of [...this.modeSubs])
      fn(mode);
  }

  emit(batch) {
    for (const fn of [...this.subs]) {
      try {
        fn(batch);
      } catch (e) {
        console.error('larch: a change listener failed', e);
      }
    }
  }

  start() {
    if (this.ctrl)
      return;
    this.ctrl = new AbortController();
    this.polling = false;
    this.run(this.ctrl.signal).catch((e) => {
      if (!isAbort(e))
        console.error('larch: the change feed stopped', e);
    });
  }

  stop() {
    if (this.ctrl)
      this.ctrl.abort();
    this.ctrl = null;
    this.setMode('idle');
  }

  async run(signal) {
    let after = null;
    let stream = null;
    let backoff = 0;
    while (!signal.aborted) {
      if (this.polling) {
        await sleep(POLL_MS, signal);
        this.emit({ changes: null, reset: false });
        continue;
      }
      let path = '/v1/events';
      if (after !== null) {
        path += `?after=${after}&timeout=${FEED_TIMEOUT_S}`;
        if (stream)
          path += `&stream=${encodeURIComponent(stream)}`;
      }
      let d;
      try {
        d = (await request('GET', path, { signal, revalidate: false })).data;
      } catch (e) {
        if (isAbort(e) || signal.aborted)
          return;
        if (e.status === 404 || e.status === 405) {   // an older larchd: poll
          this.polling = true;
          this.setMode('polling');
          continue;
        }
        if (e.status === 401)
          return;                                      // the app signs out
        if (e.status === 400)
          after = null;                                // start over from "last"
        backoff = Math.min(backoff ? backoff * 2 : 1000, BACKOFF_MAX_MS);
        this.setMode('offline');
        await sleep(backoff, signal);
        continue;
      }
      const wasOffline = this.mode === 'offline';
      backoff = 0;
      this.setMode('live');
      if (!d || typeof d.last !== 'number') {
        after = null;
        continue;
      }
      const changes = Array.isArray(d.changes) ? d.changes : [];
      const first = after === null;
      stream = d.stream || stream;
      // A reply holds at most a few hundred changes and "last" is the feed's
      // newest: go on from the last one received, so that none is skipped.
      after = changes.length ? changes[changes.length - 1].seq : d.last;
      if (d.reset || (first && wasOffline))
        this.emit({ changes: [], reset: true });
      else if (changes.length)
        this.emit({ changes, reset: false });
    }
  }
}

export const feed = new Feed();
