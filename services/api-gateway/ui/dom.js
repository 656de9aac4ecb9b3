// Small DOM helpers. Text always goes through textContent / text nodes, never innerHTML.

/** h('div.card#x', {attrs, on: {click}}, children...) */
export function h(tag, props, ...children) {
  const [, name, rest] = /^([a-z0-9-]+)(.*)$/i.exec(tag) || [null, 'div', tag];
  const el = document.createElement(name);
  for (const part of rest.match(/[.#][^.#]+/g) || []) {
    if (part[0] === '.') el.classList.add(part.slice(1));
    else el.id = part.slice(1);
  }
  if (props && (typeof props !== 'object' || props instanceof Node || Array.isArray(props))) {
    children.unshift(props);
    props = null;
  }
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'text') el.textContent = v;
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

let seq = 0;
export const uid = (p = 'f') => `${p}-${++seq}`;

/** A labelled form field: returns {wrap, input}. */
export function field(label, input, hint) {
  if (!input.id) input.id = uid('in');
  const wrap = h('div.field', h('label', { for: input.id }, label), input);
  if (hint) {
    const hid = uid('hint');
    input.setAttribute('aria-describedby', hid);
    wrap.append(h('p.hint', { id: hid }, hint));
  }
  return wrap;
}

export function fmtTime(s) {
  if (!s) return '';
  const d = new Date(s);
  if (Number.isNaN(d.getTime())) return String(s);
  return d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
}

export function relTime(s) {
  if (!s) return '';
  const d = new Date(s);
  const diff = (Date.now() - d.getTime()) / 1000;
  const abs = Math.abs(diff);
  const fmt = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });
  if (abs < 60) return fmt.format(-Math.round(diff), 'second');
  if (abs < 3600) return fmt.format(-Math.round(diff / 60), 'minute');
  if (abs < 86400) return fmt.format(-Math.round(diff / 3600), 'hour');
  return fmt.format(-Math.round(diff / 86400), 'day');
}

export function timeEl(s) {
  return h('time', { datetime: s || '', title: fmtTime(s) }, relTime(s) || '—');
}

const STATUS_LABEL = {
  queued: 'queued', running: 'running', succeeded: 'succeeded', failed: 'failed',
  cancelled: 'cancelled', retry: 'retrying', waiting_human: 'waiting for you',
  waiting_subtasks: 'waiting for subtasks',
};
export function badge(status) {
  const s = status || 'none';
  return h(`span.badge.s-${s}`, { dataset: { status: s } }, STATUS_LABEL[s] || s.replace(/_/g, ' '));
}

export const OVER = new Set(['succeeded', 'failed', 'cancelled']);

export function pretty(value) {
  if (typeof value === 'string') {
    try { return JSON.stringify(JSON.parse(value), null, 2); } catch { return value; }
  }
  return JSON.stringify(value, null, 2);
}

/** A status line for forms: role=status so screen readers hear it. */
export function statusLine() {
  return h('p.formstatus', { role: 'status', 'aria-live': 'polite' });
}

export function setStatus(el, text, kind = 'info') {
  el.textContent = text || '';
  el.dataset.kind = kind;
}
