// The task list: newest first, paged by next_before, filtered by state and space, searched
// by text (in the browser, over the pages loaded so far).
import { api, enc } from '../api.js';
import { h, clear, field, badge, timeEl, uid } from '../dom.js';
import { spaces, errorBox, pageHead, empty } from './common.js';

const STATES = ['queued', 'running', 'waiting_human', 'waiting_subtasks', 'retry', 'succeeded', 'failed', 'cancelled'];

export function render(main) {
  const params = new URLSearchParams(location.search);
  let tasks = [];
  let next = null;
  let alive = true;

  const state = h('select', { name: 'state' }, h('option', { value: '' }, 'Any state'),
    STATES.map((s) => h('option', { value: s }, s.replace(/_/g, ' '))));
  state.value = params.get('state') || '';
  const space = h('select', { name: 'space' }, h('option', { value: '' }, 'All spaces'));
  const search = h('input', { type: 'search', name: 'q', placeholder: 'Words in the instruction' });
  search.value = params.get('q') || '';
  const list = h('ul.tasklist', { 'aria-label': 'Tasks' });
  const more = h('button', { type: 'button', hidden: true }, 'Load more');
  const count = h('p.hint', { role: 'status', 'aria-live': 'polite' });
  const err = h('div');

  main.append(
    pageHead('Tasks', h('a.button.primary', { href: '/ui/new' }, 'New task')),
    h('form.filters', { role: 'search', on: { submit: (e) => e.preventDefault() } },
      field('State', state), field('Space', space),
      field('Search', search, 'Searches the instructions of the tasks loaded on this page (in your browser).')),
    err, count, list, h('div.actions', more));

  spaces().then((ss) => {
    for (const s of ss) space.append(h('option', { value: s.id }, s.name));
    space.value = params.get('space') || '';
  }).catch(() => {});
  space.value = params.get('space') || '';

  function syncUrl() {
    const p = new URLSearchParams();
    if (state.value) p.set('state', state.value);
    if (space.value) p.set('space', space.value);
    if (search.value) p.set('q', search.value);
    const qs = p.toString();
    history.replaceState(null, '', `/ui/${qs ? `?${qs}` : ''}`);
  }

  function draw() {
    clear(list);
    const q = search.value.trim().toLowerCase();
    const shown = tasks.filter((t) => (!state.value || t.latest_job?.status === state.value)
      && (!q || (t.instruction || '').toLowerCase().includes(q)));
    for (const t of shown) list.append(row(t));
    if (!shown.length) list.append(h('li', empty(tasks.length ? 'No loaded task matches these filters.' : 'No tasks yet. Start one with “New task”.')));
    count.textContent = `${shown.length} of ${tasks.length} loaded task${tasks.length === 1 ? '' : 's'} shown${next ? ' (more to load)' : ''}.`;
    more.hidden = !next;
  }

  async function load(reset) {
    if (reset) { tasks = []; next = null; }
    clear(err);
    const qs = new URLSearchParams({ limit: '50' });
    if (next) qs.set('before', next);
    if (space.value) qs.set('space', space.value);
    more.disabled = true;
    try {
      const r = await api(`/api/local/tasks?${qs}`);
      if (!alive) return;
      tasks = tasks.concat(r.tasks || []);
      next = r.next_before || null;
      draw();
    } catch (e) {
      if (alive) err.append(errorBox(e));
    } finally {
      more.disabled = false;
    }
  }

  state.addEventListener('change', () => { syncUrl(); draw(); });
  search.addEventListener('input', () => { syncUrl(); draw(); });
  space.addEventListener('change', () => { syncUrl(); load(true); });
  more.addEventListener('click', () => load(false));
  load(true);
  const timer = setInterval(() => { if (document.visibilityState === 'visible' && !next) refresh(); }, 10_000);
  async function refresh() {
    const qs = new URLSearchParams({ limit: '50' });
    if (space.value) qs.set('space', space.value);
    try {
      const r = await api(`/api/local/tasks?${qs}`);
      if (!alive) return;
      const fresh = new Map((r.tasks || []).map((t) => [t.id, t]));
      const known = new Set(tasks.map((t) => t.id));
      tasks = (r.tasks || []).filter((t) => !known.has(t.id)).concat(tasks.map((t) => fresh.get(t.id) || t));
      draw();
    } catch { /* keep what is shown */ }
  }
  return () => { alive = false; clearInterval(timer); };
}

function row(t) {
  const id = uid('t');
  const job = t.latest_job || {};
  return h('li.taskrow', { dataset: { taskId: t.id } },
    h('a.tasklink', { href: `/ui/tasks/${enc(t.id)}`, id }, t.instruction || '(no instruction)'),
    h('div.meta', badge(job.status),
      h('span', `piece ${job.piece || t.piece || '—'}`),
      t.parent_task_id ? h('span', 'subtask') : null,
      t.schedule_id ? h('span', 'scheduled') : null,
      h('span', 'updated ', timeEl(t.updated_at))));
}
