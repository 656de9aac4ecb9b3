// Schedules: a "new schedule" form, and the list with pause / resume / run now.
import { api, enc } from '../api.js';
import { h, clear, field, timeEl, statusLine, setStatus } from '../dom.js';
import { pageHead, disclosure, loadList } from './common.js';
import { pieceSelect } from './new-task.js';

const OVERLAPS = [
  ['skip', 'skip — a fire while the last run is active starts nothing'],
  ['allow', 'allow — start another run anyway'],
  ['queue', 'queue — start it once the run before it is over'],
];

export function render(main) {
  let alive = true;
  const list = h('ul.schedules', { 'aria-label': 'Schedules' });
  const err = h('div');
  const pageStatus = statusLine();
  const { form, toggle } = newScheduleForm(async (s) => {
    setStatus(pageStatus, `Created the schedule “${s.name || s.cron}”: ${(s.description || s.cron).replace(/\.$/, '')}.`, 'ok');
    await load();
    list.querySelector(`[data-id="${CSS.escape(s.id)}"]`)?.scrollIntoView({ block: 'nearest' });
  });
  main.append(pageHead('Schedules', toggle), form, pageStatus, err, list);

  const load = () => loadList({ path: '/api/local/schedules?limit=100', key: 'schedules', list, err, row,
    emptyText: 'No schedules.', alive: () => alive });

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

/** The form of POST /api/local/schedules, hidden behind a "New schedule" button. */
function newScheduleForm(created) {
  const name = h('input', { type: 'text', name: 'name', autocomplete: 'off' });
  const cron = h('input', { type: 'text', name: 'cron', required: true, autocomplete: 'off', spellcheck: 'false', placeholder: '0 9 * * 1-5' });
  const timezone = h('input', { type: 'text', name: 'timezone', autocomplete: 'off', spellcheck: 'false', placeholder: 'UTC' });
  const instruction = h('textarea', { name: 'instruction', rows: 3, required: true });
  const piece = pieceSelect();
  const overlap = h('select', { name: 'overlap' }, OVERLAPS.map(([v, label]) => h('option', { value: v }, label)));
  const status = statusLine();
  const submit = h('button.primary', { type: 'submit' }, 'Create schedule');
  const cancel = h('button', { type: 'button' }, 'Cancel');
  const form = h('form.card.createform.newschedule#new-schedule', { 'aria-labelledby': 'new-schedule-title', hidden: true },
    h('h2#new-schedule-title', 'New schedule'),
    h('div.row',
      field('Name (optional)', name),
      field('Cron', cron, 'Minute hour day-of-month month day-of-week (5 fields), or 6 with seconds first.'),
      field('Time zone (optional)', timezone, 'An IANA name such as Europe/Berlin; UTC when empty.')),
    field('Instruction', instruction, 'What each run’s task should do.'),
    h('div.row', field('Piece', piece), field('Overlap', overlap, 'What a fire does while the previous run is still active.')),
    h('div.actions', submit, cancel), status);
  const { toggle, show } = disclosure(form, { label: 'New schedule', first: name, cancel });
  for (const el of [cron, timezone]) el.addEventListener('input', () => el.removeAttribute('aria-invalid'));

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const body = { cron: cron.value.trim(), overlap: overlap.value, task: { instruction: instruction.value } };
    if (name.value.trim()) body.name = name.value.trim();
    if (timezone.value.trim()) body.timezone = timezone.value.trim();
    if (piece.value) body.task.piece = piece.value;
    submit.disabled = true;
    setStatus(status, 'Creating…');
    try {
      const s = await api('/api/local/schedules', { method: 'POST', body });
      form.reset();
      setStatus(status, '');
      show(false);
      await created(s);
    } catch (err) {
      const bad = { invalid_cron: cron, invalid_timezone: timezone, invalid_instruction: instruction, invalid_name: name }[err.code];
      if (bad) { bad.setAttribute('aria-invalid', 'true'); bad.focus(); }
      setStatus(status, `Could not create the schedule: ${err.readable || err.message}`, 'error');
    }
    submit.disabled = false;
  });
  return { form, toggle };
}
