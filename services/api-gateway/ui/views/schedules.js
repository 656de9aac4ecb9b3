// Schedules: list with pause / resume / run now.
import { api, enc } from '../api.js';
import { h, clear, timeEl, statusLine, setStatus } from '../dom.js';
import { errorBox, pageHead, empty } from './common.js';

export function render(main) {
  let alive = true;
  const list = h('ul.schedules', { 'aria-label': 'Schedules' });
  const err = h('div');
  main.append(pageHead('Schedules'), h('p.hint', 'Create schedules with POST /api/local/schedules (see docs/schedules.md).'), err, list);

  async function load() {
    try {
      const r = await api('/api/local/schedules?limit=100');
      if (!alive) return;
      clear(err);
      clear(list);
      for (const s of r.schedules || []) list.append(row(s));
      if (!(r.schedules || []).length) list.append(h('li', empty('No schedules.')));
    } catch (e) { if (alive) clear(err).append(errorBox(e)); }
  }

  function row(s) {
    const st = statusLine();
    const act = (label, path, done) => {
      const b = h('button', { type: 'button' }, label);
      b.addEventListener('click', async () => {
        b.disabled = true;
        try {
          const r = await api(`/api/local/schedules/${enc(s.id)}/${path}`, { method: 'POST' });
          setStatus(st, done(r), 'ok');
          if (path !== 'run') load();
        } catch (e) { setStatus(st, e.readable || e.message, 'error'); }
        b.disabled = false;
      });
      return b;
    };
    const runLink = h('span');
    return h('li.card.schedule', { dataset: { id: s.id } },
      h('div.meta', h('strong', s.name || s.cron), h(`span.badge.s-${s.status}`, s.status)),
      h('p', h('code', s.cron), ` — ${s.description || ''}`, s.timezone && s.timezone !== 'UTC' ? ` (${s.timezone})` : ''),
      h('p.hint', 'instruction: ', s.task?.instruction || ''),
      h('p.hint', 'next ', s.next_fire_at ? timeEl(s.next_fire_at) : '—', ' · last ', s.last_fire_at ? timeEl(s.last_fire_at) : 'never',
        ` · overlap ${s.overlap} · missed ${s.missed}`),
      h('div.actions',
        s.status === 'paused' ? act('Resume', 'resume', () => 'Resumed.') : act('Pause', 'pause', () => 'Paused.'),
        act('Run now', 'run', (r) => {
          clear(runLink);
          if (r?.task_id) runLink.append(h('a', { href: `/ui/tasks/${enc(r.task_id)}` }, 'open the run'));
          return 'Started a run.';
        }), runLink),
      st);
  }
  load();
  return () => { alive = false; };
}
