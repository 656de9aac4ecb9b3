// The API client: every call carries `Authorization: Bearer <token>` from sessionStorage.

const KEY = 'maestro.token';
const OWNER = 'maestro.owner';

export const session = {
  get token() { return sessionStorage.getItem(KEY); },
  get owner() { return sessionStorage.getItem(OWNER) || ''; },
  set(token, owner) {
    sessionStorage.setItem(KEY, token);
    if (owner) sessionStorage.setItem(OWNER, owner); else sessionStorage.removeItem(OWNER);
  },
  clear() { sessionStorage.removeItem(KEY); sessionStorage.removeItem(OWNER); },
};

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message || code || `HTTP ${status}`);
    this.status = status;
    this.code = code || `http_${status}`;
  }
  /** What a person reads. */
  get readable() {
    if (this.status === 0) return `Could not reach the server: ${this.message}`;
    return `${this.message} (${this.code}, HTTP ${this.status})`;
  }
}

let unauthorized = () => {};
export function onUnauthorized(fn) { unauthorized = fn; }
/** The token was refused (a stream's 401 too): back to sign-in. */
export function signedOut(err) { unauthorized(err); }

export function authHeaders(extra = {}) {
  const h = { ...extra };
  if (session.token) h.Authorization = `Bearer ${session.token}`;
  return h;
}

async function errorOf(res) {
  let code, message;
  try {
    const body = await res.json();
    code = body?.error?.code;
    message = body?.error?.message;
  } catch { /* not JSON */ }
  return new ApiError(res.status, code, message || res.statusText);
}

/** fetch with the token; JSON in and out. `body` may be an object, FormData or undefined. */
export async function api(path, { method = 'GET', body, headers = {}, signal, quiet401 = false } = {}) {
  const init = { method, headers: authHeaders(headers), signal, cache: 'no-store' };
  if (body instanceof FormData) init.body = body;
  else if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'network', e.message);
  }
  if (res.status === 401 && !quiet401) {
    const err = await errorOf(res);
    unauthorized(err);
    throw err;
  }
  if (!res.ok) throw await errorOf(res);
  if (res.status === 204) return null;
  const type = res.headers.get('content-type') || '';
  return type.includes('json') ? res.json() : res.text();
}

/** Fetch a file with the token and open or save it through a blob URL. */
export async function openFile(path, name, { download = false } = {}) {
  const res = await fetch(path, { headers: authHeaders(), cache: 'no-store' });
  if (res.status === 401) { const e = await errorOf(res); unauthorized(e); throw e; }
  if (!res.ok) throw await errorOf(res);
  let blob = await res.blob();
  // What an agent wrote is not the UI's content: a page or an image with scripts (HTML, SVG,
  // XML) opened from a blob URL would run with the UI's origin, so it is opened as text.
  if (!download && /html|svg|xml|javascript/i.test(blob.type)) blob = new Blob([blob], { type: 'text/plain' });
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.rel = 'noopener';
  if (download) a.download = name || 'file';
  else a.target = '_blank';
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

export const enc = encodeURIComponent;
export const encPath = (p) => p.split('/').map(encodeURIComponent).join('/');
