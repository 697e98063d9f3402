// The hub's HTTP API: the token (kept in localStorage, sent as a Bearer header), requests with
// a timeout, and errors sorted into what a person can act on. A tunnel's HTML error page, a
// 502 or a dropped connection never surfaces as a blank page: each becomes an ApiError with a
// readable message and a `retry` hint.

const TOKEN_KEY = 'zcode-acp.token';
const TIMEOUT_MS = 15000;

/** The stored token, or ''. */
export function token() {
  try { return localStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
}

/** Stores (or, with '', forgets) the token. */
export function setToken(t) {
  try {
    if (t) localStorage.setItem(TOKEN_KEY, t); else localStorage.removeItem(TOKEN_KEY);
  } catch { /* private mode: the token lives for this page only */ }
  memoryToken = t;
}
let memoryToken = '';

function currentToken() {
  return token() || memoryToken;
}

/**
 * Reads `#token=…` from the address, stores it and removes it from the address bar (and from
 * history), so it is never shown, bookmarked or sent anywhere. Returns whether one was found.
 */
export function takeTokenFromFragment() {
  const frag = location.hash.replace(/^#/, '');
  const params = new URLSearchParams(frag);
  const t = params.get('token');
  if (t === null) return false;
  setToken(t.trim());
  params.delete('token');
  const rest = params.toString();
  history.replaceState(history.state, '', location.pathname + location.search + (rest ? `#${rest}` : ''));
  return true;
}

/** An API failure: `kind` is network | auth | limited | garbage | gateway | missing | http. */
export class ApiError extends Error {
  constructor(kind, status, message, body = '') {
    super(message);
    this.kind = kind;
    this.status = status;
    this.body = body;
  }
  /** Whether trying again later may help. */
  get retry() {
    return ['network', 'garbage', 'gateway', 'limited'].includes(this.kind);
  }
}

/** A short server message worth showing (plain text, one line, not HTML). */
function serverText(body, type) {
  if (!body || /html/i.test(type) || /^\s*</.test(body)) return '';
  const line = body.trim().split('\n')[0];
  return line.length <= 200 ? line : '';
}

/** Sorts a non-2xx answer into an ApiError. */
export function errorFor(status, body, type, what) {
  const said = serverText(body, type);
  if (status === 401) return new ApiError('auth', 401, 'The hub rejected the token (it was rotated, or it is wrong). Pair again with a fresh link.', body);
  if (status === 429) return new ApiError('limited', 429, 'Too many wrong tokens from this address: wait a minute, then retry.', body);
  if (/html/i.test(type) || /^\s*<(!doctype|html)/i.test(body)) {
    return new ApiError('garbage', status, `Something between you and the hub answered with a web page instead of the hub's API (HTTP ${status}): a tunnel or proxy error?`, body);
  }
  if (status === 502 || status === 503 || status === 504) {
    return new ApiError('gateway', status, `${what}: the hub could not reach its bridge, or the tunnel could not reach the hub (HTTP ${status}${said ? `: ${said}` : ''}).`, body);
  }
  if (status === 404 && (!said || said === 'not found')) {
    return new ApiError('missing', 404, `${what}: this hub does not offer that (HTTP 404).`, body);
  }
  return new ApiError('http', status, `${what}: ${said || `HTTP ${status}`}`, body);
}

/**
 * Calls the hub. `opts`: method, json (a body to send as JSON), raw (return the Response),
 * what (a label for error messages), noAuth. Resolves with parsed JSON (or text for text/*
 * answers), rejects with an ApiError.
 */
export async function api(path, opts = {}) {
  const what = opts.what || path.split('?')[0];
  const headers = {};
  const t = currentToken();
  if (t && !opts.noAuth) headers.Authorization = `Bearer ${t}`;
  let body;
  if (opts.json !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(opts.json);
  }
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), opts.timeout || TIMEOUT_MS);
  let resp;
  try {
    resp = await fetch(path, { method: opts.method || (body ? 'POST' : 'GET'), headers, body, signal: ctl.signal, cache: 'no-store' });
  } catch (e) {
    clearTimeout(timer);
    const timedOut = e && e.name === 'AbortError';
    throw new ApiError('network', 0, timedOut
      ? `${what}: the hub did not answer in time.`
      : `${what}: cannot reach the hub (it is stopped, or the network is down).`);
  }
  try {
    if (opts.raw && resp.ok) return resp;
    const type = resp.headers.get('content-type') || '';
    const text = await resp.text();
    if (!resp.ok) throw errorFor(resp.status, text, type, what);
    if (/json/i.test(type)) {
      try { return JSON.parse(text); } catch { /* fall through */ }
      throw new ApiError('garbage', resp.status, `${what}: the answer was cut short or is not JSON.`, text);
    }
    if (opts.expectJson) {
      throw new ApiError('garbage', resp.status, `${what}: expected the hub's JSON, got ${type || 'something else'} (a tunnel or proxy page?).`, text);
    }
    return text;
  } catch (e) {
    if (e instanceof ApiError) throw e;
    throw new ApiError('network', 0, `${what}: the connection broke while reading the answer.`);
  } finally {
    clearTimeout(timer);
  }
}

/** GET JSON (an answer that is not JSON is an error). */
export function getJson(path, what) {
  return api(path, { what, expectJson: true });
}

/** POST a JSON body, expecting JSON back. */
export function postJson(path, json, what) {
  return api(path, { json, what, expectJson: true });
}

/**
 * Why the hub or an instance cannot be used right now: 'down' (nothing answers), 'garbage'
 * (something that is not the hub answers), 'auth', 'gone' (the instance is not listed), or
 * 'ok' (all looks fine: a transient failure).
 */
export async function diagnose(instanceId) {
  try {
    const health = await api('/api/health', { noAuth: true, what: 'Health check', timeout: 5000 });
    if (typeof health !== 'string' || health.trim() !== 'ok') return { why: 'garbage', message: 'Something that is not the hub answers at this address (a tunnel error page?).' };
  } catch (e) {
    return { why: e.kind === 'network' ? 'down' : 'garbage', message: e.message };
  }
  try {
    const list = await getJson('/api/instances?probe=1', 'The instance list');
    if (instanceId && Array.isArray(list) && !list.some((i) => String(i.id) === String(instanceId))) {
      return { why: 'gone', message: 'This instance is gone: its editor or bridge was closed.' };
    }
    return { why: 'ok' };
  } catch (e) {
    return { why: e.kind === 'auth' ? 'auth' : e.kind === 'network' ? 'down' : 'garbage', message: e.message };
  }
}

/** `?a=b&c=d` from an object (skipping empty values). */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : '';
}
