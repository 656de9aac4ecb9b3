// The inbox: notifications, newest first, with read marks; new items arrive over the inbox stream.
import { api, enc } from '../api.js';
import { h, clear, badge, timeEl } from '../dom.js';
import { errorBox, pageHead, empty } from './common.js';
import { setUnread, onNotification } from '../app.js';

export function render(main) {
  let alive = true;
  let items = [];
  let next = null;
  const unreadOnly = h('input', { type: 'checkbox', id: 'unread-only' });
  const list = h('ul.inbox', { 'aria-label': 'Notifications' });
  const err = h('div');
  const more = h('button', { type: 'button', hidden: true }, 'Load more');
  const readAll = h('button', { type: 'button' }, 'Mark all read');
  main.append(pageHead('Inbox', readAll),
    h('div.filters', h('div.check', unreadOnly, h('label', { for: 'unread-only' }, 'Unread only'))),
    err, list, h('div.actions', more));

  function draw() {
    clear(list);
    for (const it of items) list.append(row(it));
    if (!items.length) list.append(h('li', empty('Nothing here yet.')));
    more.hidden = !next;
  }

  function row(it) {
    const n = it.notification || {};
    const d = n.data || {};
    const mark = h('button.link', { type: 'button', hidden: it.read }, 'Mark read');
    mark.addEventListener('click', async () => {
      try {
        const r = await api(`/api/local/inbox/${enc(it.id)}/read`, { method: 'POST' });
        it.read = true;
        setUnread(r.unread);
        draw();
      } catch (e) { clear(err).append(errorBox(e)); }
    });
    const summary = d.result || d.error || (d.wait_reason ? `waiting: ${d.wait_reason.replace(/_/g, ' ')}` : '')
      || (d.decision ? `decided: ${d.decision.decision || ''} ${d.decision.kind || ''}` : '') || d.reason || d.name || '';
    return h(`li.inboxitem${it.read ? '.read' : '.unread'}`, { dataset: { id: it.id } },
      h('div.meta', h('strong', it.type), d.status ? badge(d.status) : null, timeEl(it.created_at),
        it.task_id ? h('span.hint', `task ${it.task_id.slice(0, 8)}…${it.task_id.slice(-4)}`) : null,
        it.read ? h('span.hint', 'read') : h('span.dot', { 'aria-label': 'unread' }, '●')),
      summary ? h('p', summary) : null,
      h('div.actions',
        it.task_id ? h('a', { href: `/ui/tasks/${enc(it.task_id)}`, on: { click: () => { if (!it.read) mark.click(); } } }, 'Open the task') : null,
        d.schedule_id ? h('a', { href: '/ui/schedules' }, 'Schedules') : null,
        mark));
  }

  async function load(reset) {
    if (reset) { items = []; next = null; }
    const qs = new URLSearchParams({ limit: '30' });
    if (next) qs.set('before', next);
    if (unreadOnly.checked) qs.set('unread', 'true');
    try {
      const r = await api(`/api/local/inbox?${qs}`);
      if (!alive) return;
      clear(err);
      items = items.concat(r.items || []);
      next = r.next_before || null;
      setUnread(r.unread);
      draw();
    } catch (e) { if (alive) clear(err).append(errorBox(e)); }
  }
  readAll.addEventListener('click', async () => {
    try {
      const body = items.length ? { up_to: items[0].id } : {};
      const r = await api('/api/local/inbox/read-all', { method: 'POST', body });
      setUnread(r.unread);
      load(true);
    } catch (e) { clear(err).append(errorBox(e)); }
  });
  unreadOnly.addEventListener('change', () => load(true));
  more.addEventListener('click', () => load(false));
  const off = onNotification((item) => {
    if (!item || items.some((i) => i.id === item.id)) return;
    items.unshift(item);
    draw();
  });
  load(true);
  return () => { alive = false; off(); };
}
