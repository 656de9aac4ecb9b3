// Pieces shared by the views.
import { api } from '../api.js';
import { h, clear } from '../dom.js';

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

/** After a space is made or changed: the next spaces() asks again. */
export function forgetSpaces() { spacesCache = null; }

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

/**
 * A button that shows and hides `form` (a create form): `aria-expanded` follows, the form's
 * `first` field takes the focus when it opens, the button when it closes; `cancel` closes it.
 * Returns the button and `show(open)`.
 */
export function disclosure(form, { label, first, cancel }) {
  const toggle = h('button.primary', { type: 'button', 'aria-expanded': 'false', 'aria-controls': form.id }, label);
  const show = (open) => {
    form.hidden = !open;
    toggle.setAttribute('aria-expanded', String(open));
    if (open) first.focus(); else toggle.focus();
  };
  toggle.addEventListener('click', () => show(form.hidden));
  cancel.addEventListener('click', () => show(false));
  return { toggle, show };
}

/**
 * Fill `list` with `row(item)` for each item under `key` of what `path` answers, or with
 * `emptyText`; an error goes into `err`. Nothing is drawn once `alive()` is false (the view
 * was left).
 */
export async function loadList({ path, key, list, err, row, emptyText, alive }) {
  try {
    const r = await api(path);
    if (!alive()) return;
    clear(err);
    clear(list);
    const items = r[key] || [];
    for (const item of items) list.append(row(item));
    if (!items.length) list.append(h('li', empty(emptyText)));
  } catch (e) { if (alive()) clear(err).append(errorBox(e)); }
}
