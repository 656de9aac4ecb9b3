// MAESTRO web UI: a router over History-API paths below /ui/, the sign-in, the nav.

import { api, session, onUnauthorized, signedOut } from './api.js';
import { h, append, clear, field, statusLine, setStatus } from './dom.js';
import { SseStream } from './stream.js';
import * as tasksView from './views/tasks.js';
import * as newTaskView from './views/new-task.js';
import * as taskView from './views/task.js';
import * as subtasksView from './views/subtasks.js';
import * as inboxView from './views/inbox.js';
import * as schedulesView from './views/schedules.js';
import * as webhooksView from './views/webhooks.js';
import * as spacesView from './views/spaces.js';

const spaceView = { render: spacesView.renderSpace };

const main = document.getElementById('main');
const topbar = document.getElementById('topbar');
let cleanup = null;
let inboxStream = null;
let signInMessage = '';

const ROUTES = [
  [/^$/, tasksView, 'tasks'],
  [/^new$/, newTaskView, 'new'],
  [/^tasks\/([^/]+)$/, taskView, 'tasks'],
  [/^tasks\/([^/]+)\/subtasks$/, subtasksView, 'tasks'],
  [/^inbox$/, inboxView, 'inbox'],
  [/^spaces$/, spacesView, 'spaces'],
  [/^spaces\/([^/]+)$/, spaceView, 'spaces'],
  [/^schedules$/, schedulesView, 'schedules'],
  [/^webhooks$/, webhooksView, 'webhooks'],
];

export function navigate(path, { replace = false } = {}) {
  if (replace) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  route();
}

function currentPath() {
  return location.pathname.replace(/^\/ui\/?/, '').replace(/\/$/, '');
}

async function route() {
  if (cleanup) { try { cleanup(); } catch { /* ignore */ } cleanup = null; }
  clear(main);
  if (!session.token) { showSignIn(); return; }
  topbar.hidden = false;
  showWho();
  startInbox();
  const path = currentPath();
  for (const [re, view, nav] of ROUTES) {
    const m = re.exec(path);
    if (!m) continue;
    for (const a of document.querySelectorAll('[data-nav]')) {
      if (a.dataset.nav === nav) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    cleanup = view.render(main, ...m.slice(1).map(decodeURIComponent)) || null;
    return;
  }
  main.append(h('h1', 'Not found'), h('p', 'This page does not exist. ', h('a', { href: '/ui/' }, 'Go to the tasks.')));
}

function showSignIn() {
  topbar.hidden = true;
  stopInbox();
  document.title = 'Sign in · MAESTRO';
  const token = h('input', { type: 'password', name: 'token', autocomplete: 'current-password', required: true, spellcheck: 'false' });
  const status = statusLine();
  const form = h('form.card.signin', { 'aria-labelledby': 'signin-title' },
    h('h1#signin-title', 'Sign in to MAESTRO'),
    h('p', 'Paste an API token. It is kept in this tab only (sessionStorage) and sent as a bearer token with every request.'),
    field('API token', token),
    h('div.actions', h('button.primary', { type: 'submit' }, 'Sign in')),
    status);
  if (signInMessage) { setStatus(status, signInMessage, 'error'); signInMessage = ''; }
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const value = token.value.trim();
    if (!value) return;
    setStatus(status, 'Checking the token…');
    session.set(value);
    try {
      me = await api('/api/local/me', { quiet401: true });
      me.token = value;
      session.set(value, me.owner);
    } catch (err) {
      session.clear();
      setStatus(status, err.status === 401 ? 'That token was refused (401). Check it and try again.' : err.readable, 'error');
      token.focus();
      return;
    }
    const back = sessionStorage.getItem('maestro.after') || '/ui/';
    sessionStorage.removeItem('maestro.after');
    navigate(back.startsWith('/ui/') ? back : '/ui/', { replace: true });
  });
  main.append(form);
  token.focus();
}

// --- who the token stands for (GET /api/local/me), shown in the top bar ---
const whoEl = document.getElementById('whoami');
let me = null; // {owner, admin, token}
async function showWho() {
  const token = session.token;
  if (!me || me.token !== token) {
    renderWho(session.owner ? { owner: session.owner, admin: false } : null);
    try {
      const r = await api('/api/local/me');
      if (session.token !== token) return;
      me = { ...r, token };
    } catch { return; /* a 401 signs out; anything else leaves the stored owner shown */ }
  }
  renderWho(me);
}
function renderWho(who) {
  clear(whoEl);
  if (!who?.owner) return;
  append(whoEl, ['Signed in as ', h('strong', who.owner), who.admin && h('span.badge.admin', 'admin')]);
}

function signOut(message) {
  session.clear();
  me = null;
  renderWho(null);
  signInMessage = message || '';
  history.replaceState(null, '', '/ui/');
  route();
}

onUnauthorized((err) => {
  if (currentPath() !== '') sessionStorage.setItem('maestro.after', location.pathname);
  signOut(`You were signed out: the server refused the token (${err.message || 'unauthorized'}). Sign in again.`);
});

// --- unread count in the nav, kept live by the inbox stream ---
const unreadEl = document.getElementById('unread');
export async function refreshUnread() {
  try {
    const r = await api('/api/local/inbox?limit=1');
    setUnread(r.unread);
  } catch { /* shown elsewhere */ }
}
export function setUnread(n) {
  unreadEl.hidden = !n;
  unreadEl.textContent = n ? String(n) : '';
  unreadEl.setAttribute('aria-label', `${n} unread`);
}
const inboxListeners = new Set();
export function onNotification(fn) { inboxListeners.add(fn); return () => inboxListeners.delete(fn); }

function startInbox() {
  if (inboxStream) return;
  refreshUnread();
  inboxStream = new SseStream('/api/local/inbox/stream', {
    onUnauthorized: signedOut,
    onEvent: (ev) => {
      if (ev.event !== 'notification') return;
      let item = null;
      try { item = JSON.parse(ev.data); } catch { /* ignore */ }
      refreshUnread();
      for (const fn of inboxListeners) fn(item);
    },
    onStatus: (s) => { if (s === 'live') refreshUnread(); },
  }).start();
}
function stopInbox() {
  if (inboxStream) { inboxStream.stop(); inboxStream = null; }
}

document.getElementById('signout').addEventListener('click', () => signOut('You signed out.'));

document.addEventListener('click', (e) => {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const a = e.target.closest('a[href]');
  if (!a || a.target || a.hasAttribute('download')) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith('/ui/') || /\.[a-z0-9]+$/i.test(url.pathname)) return;
  e.preventDefault();
  if (url.pathname + url.search !== location.pathname + location.search) navigate(url.pathname + url.search);
  main.focus({ preventScroll: true });
});
window.addEventListener('popstate', route);

route();
