// The task list: newest first, paged by next_before, filtered by state and space and searched
// by text by the gateway (GET /api/local/tasks?state=&space=&q=).
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
      field('Search', search, 'Finds tasks whose instruction contains these words.')),
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

  const filtered = () => !!(state.value || space.value || search.value.trim());

  function draw() {
    clear(list);
    for (const t of tasks) list.append(row(t));
    if (!tasks.length) list.append(h('li', empty(filtered() ? 'No task matches these filters.' : 'No tasks yet. Start one with “New task”.')));
    count.textContent = `${tasks.length} task${tasks.length === 1 ? '' : 's'} shown${next ? ' (more to load)' : ''}.`;
    more.hidden = !next;
  }

  // The listing's query: the filters, as the gateway applies them.
  function query() {
    const qs = new URLSearchParams({ limit: '50' });
    if (space.value) qs.set('space', space.value);
    if (state.value) qs.set('state', state.value);
    if (search.value.trim()) qs.set('q', search.value.trim());
    return qs;
  }

  let generation = 0;
  async function load(reset) {
    if (reset) { tasks = []; next = null; }
    clear(err);
    const qs = query();
    if (next) qs.set('before', next);
    const mine = ++generation;
    more.disabled = true;
    try {
      const r = await api(`/api/local/tasks?${qs}`);
      if (!alive || mine !== generation) return; // a newer filter's answer wins
      tasks = tasks.concat(r.tasks || []);
      next = r.next_before || null;
      draw();
    } catch (e) {
      if (alive) err.append(errorBox(e));
    } finally {
      more.disabled = false;
    }
  }

  let typing = null;
  state.addEventListener('change', () => { syncUrl(); load(true); });
  search.addEventListener('input', () => {
    syncUrl();
    clearTimeout(typing);
    typing = setTimeout(() => load(true), 250);
  });
  space.addEventListener('change', () => { syncUrl(); load(true); });
  more.addEventListener('click', () => load(false));
  load(true);
  const timer = setInterval(() => { if (document.visibilityState === 'visible' && !next) refresh(); }, 10_000);
  // Only while every matching task is shown (no more to load): the first page is then the
  // whole list, so it replaces it — a task that left the filter (its state changed) goes.
  async function refresh() {
    const qs = query();
    const mine = generation;
    try {
      const r = await api(`/api/local/tasks?${qs}`);
      if (!alive || mine !== generation || next) return; // the filter changed, or more was loaded
      tasks = r.tasks || [];
      next = r.next_before || null;
      draw();
    } catch { /* keep what is shown */ }
  }
  return () => { alive = false; clearInterval(timer); clearTimeout(typing); };
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
