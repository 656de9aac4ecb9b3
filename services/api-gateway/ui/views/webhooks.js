// Webhook subscriptions (read-only list, with re-enabling of a disabled one).
import { api, enc } from '../api.js';
import { h, clear, timeEl, statusLine, setStatus } from '../dom.js';
import { errorBox, pageHead, empty } from './common.js';

export function render(main) {
  let alive = true;
  const list = h('ul.webhooks', { 'aria-label': 'Webhooks' });
  const err = h('div');
  main.append(pageHead('Webhooks'), h('p.hint', 'Subscriptions are made with POST /api/webhooks (see docs/notifications.md).'), err, list);
  async function load() {
    try {
      const r = await api('/api/webhooks');
      if (!alive) return;
      clear(err); clear(list);
      for (const w of r.webhooks || []) list.append(row(w));
      if (!(r.webhooks || []).length) list.append(h('li', empty('No webhooks.')));
    } catch (e) { if (alive) clear(err).append(errorBox(e)); }
  }
  function row(w) {
    const st = statusLine();
    const li = h('li.card.webhook', { dataset: { id: w.id } },
      h('div.meta', h('code.url', w.url), h(`span.badge.s-${w.status === 'active' ? 'succeeded' : 'failed'}`, w.status)),
      h('p.hint', 'events: ', (w.event_types || []).join(', ')),
      h('p.hint', 'created ', timeEl(w.created_at), w.consecutive_failures ? ` · ${w.consecutive_failures} failures in a row` : ''),
      w.disabled_reason ? h('p.error-text', `disabled ${w.disabled_at ? new Date(w.disabled_at).toLocaleString() : ''}: ${w.disabled_reason}`) : null);
    if (w.status === 'disabled') {
      const b = h('button', { type: 'button' }, 'Enable again');
      b.addEventListener('click', async () => {
        try { await api(`/api/webhooks/${enc(w.id)}/enable`, { method: 'POST' }); load(); } catch (e) { setStatus(st, e.readable || e.message, 'error'); }
      });
      li.append(h('div.actions', b));
    }
    li.append(st);
    return li;
  }
  load();
  return () => { alive = false; };
}
