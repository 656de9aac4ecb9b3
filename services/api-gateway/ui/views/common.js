// Pieces shared by the views.
import { api } from '../api.js';
import { h } from '../dom.js';

let piecesCache = null;
export async function pieces() {
  if (!piecesCache) piecesCache = api('/api/local/pieces').catch((e) => { piecesCache = null; throw e; });
  return piecesCache;
}

let spacesCache = null;
export async function spaces() {
  if (!spacesCache) spacesCache = api('/api/local/spaces').then((r) => r.spaces || []).catch((e) => { spacesCache = null; throw e; });
  return spacesCache;
}

export function errorBox(err) {
  return h('div.error', { role: 'alert' }, err?.readable || err?.message || String(err));
}

export function pageHead(title, ...extra) {
  document.title = `${title} · MAESTRO`;
  return h('div.pagehead', h('h1', title), ...extra);
}

export function empty(text) {
  return h('p.empty', text);
}
