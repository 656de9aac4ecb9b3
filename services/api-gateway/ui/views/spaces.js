// Spaces: the list with a "new space" form, and a space's page (members, tasks, files on main,
// commits on main).
import { api, enc, encPath, openFile } from '../api.js';
import { h, clear, field, badge, timeEl, statusLine, setStatus } from '../dom.js';
import { errorBox, pageHead, empty, disclosure, forgetSpaces, loadList } from './common.js';

const ROLE_HINT = { owner: 'you can change it', editor: 'you can start tasks in it', viewer: 'you can read it' };

export function render(main) {
  let alive = true;
  const list = h('ul.spaces', { 'aria-label': 'Spaces' });
  const err = h('div');
  const pageStatus = statusLine();
  const { form, toggle } = newSpaceForm(async (s) => {
    setStatus(pageStatus, `Created the space “${s.name}”.`, 'ok');
    await load();
    list.querySelector(`[data-id="${CSS.escape(s.id)}"]`)?.scrollIntoView({ block: 'nearest' });
  });
  main.append(pageHead('Spaces', toggle), form, pageStatus, err, list);

  const load = () => loadList({ path: '/api/local/spaces', key: 'spaces', list, err, row,
    emptyText: 'No spaces yet. Make one with “New space”.', alive: () => alive });
  load();
  return () => { alive = false; };
}

function row(s) {
  return h('li.card.space', { dataset: { id: s.id } },
    h('div.meta',
      h('a.spacelink', { href: `/ui/spaces/${enc(s.id)}` }, s.name),
      h('span', 'your role: ', h('strong.role', s.role || '—')),
      s.archived_at ? h('span.badge.s-archived', 'archived') : null),
    s.description ? h('p.desc', s.description) : null);
}

/** The form of POST /api/local/spaces, hidden behind a "New space" button. */
function newSpaceForm(created) {
  const name = h('input', { type: 'text', name: 'name', required: true, autocomplete: 'off', maxlength: 200 });
  const description = h('textarea', { name: 'description', rows: 2 });
  const status = statusLine();
  const submit = h('button.primary', { type: 'submit' }, 'Create space');
  const cancel = h('button', { type: 'button' }, 'Cancel');
  const form = h('form.card.createform.newspace#new-space', { 'aria-labelledby': 'new-space-title', hidden: true },
    h('h2#new-space-title', 'New space'),
    field('Name', name, 'Up to 200 characters.'),
    field('Description (optional)', description),
    h('div.actions', submit, cancel), status);
  const { toggle, show } = disclosure(form, { label: 'New space', first: name, cancel });
  for (const el of [name, description]) el.addEventListener('input', () => el.removeAttribute('aria-invalid'));

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const body = { name: name.value.trim() };
    if (description.value.trim()) body.description = description.value.trim();
    submit.disabled = true;
    setStatus(status, 'Creating…');
    try {
      const s = await api('/api/local/spaces', { method: 'POST', body });
      forgetSpaces();
      form.reset();
      setStatus(status, '');
      show(false);
      await created(s);
    } catch (err) {
      const bad = { invalid_name: name, invalid_description: description }[err.code];
      if (bad) { bad.setAttribute('aria-invalid', 'true'); bad.focus(); }
      setStatus(status, `Could not create the space: ${err.readable || err.message}`, 'error');
    }
    submit.disabled = false;
  });
  return { form, toggle };
}

/** A space's page: GET /api/local/spaces/{id}, its tasks, files and commits. */
export function renderSpace(main, id) {
  let alive = true;
  const base = `/api/local/spaces/${enc(id)}`;
  const head = h('div');
  const err = h('div');
  const tasks = h('ul.tasklist', { 'aria-labelledby': 'space-tasks' });
  const files = h('ul.files', { 'aria-labelledby': 'space-files' });
  const commits = h('ol.commits', { 'aria-labelledby': 'space-commits' });
  const fileStatus = statusLine();
  main.append(head, err,
    h('section.card', { 'aria-labelledby': 'space-tasks' },
      h('div.pagehead', h('h2#space-tasks', 'Tasks'),
        h('div.actions',
          h('a.button', { href: `/ui/?space=${enc(id)}` }, 'All its tasks'),
          h('a.button.primary', { href: `/ui/new?space=${enc(id)}` }, 'New task in this space'))),
      tasks),
    h('section.card', { 'aria-labelledby': 'space-files' },
      h('h2#space-files', 'Files on main'), files, fileStatus),
    h('section.card', { 'aria-labelledby': 'space-commits' },
      h('h2#space-commits', 'Commits on main'), commits));

  let shown = '';
  async function load() {
    try {
      const [s, t, f, c] = await Promise.all([
        api(base),
        api(`/api/local/tasks?space=${enc(id)}&limit=20`),
        api(`${base}/files`),
        api(`${base}/commits?limit=50`),
      ]);
      if (!alive) return;
      clear(err);
      // The periodic refresh redraws only what changed, so a focused link or button stays.
      const key = JSON.stringify([s, t.tasks, f.files, c.commits]);
      if (key === shown) return;
      shown = key;
      drawHead(s);
      clear(tasks);
      for (const x of t.tasks || []) tasks.append(taskRow(x));
      if (!(t.tasks || []).length) tasks.append(h('li', empty('No tasks in this space yet.')));
      clear(files);
      for (const x of f.files || []) files.append(fileRow(x));
      if (!(f.files || []).length) files.append(h('li', empty('No files on main yet: a task’s files land here when it succeeds.')));
      clear(commits);
      for (const x of c.commits || []) commits.append(commitRow(x));
      if (!(c.commits || []).length) commits.append(h('li', empty('No commits yet.')));
    } catch (e) {
      if (!alive) return;
      if (!head.firstChild) head.append(pageHead('Space'));
      clear(err).append(errorBox(e));
    }
  }

  function drawHead(s) {
    clear(head).append(
      pageHead(s.name, s.archived_at ? h('span.badge.s-archived', 'archived') : null),
      s.description ? h('p.desc', s.description) : null,
      h('dl.kv',
        h('dt', 'Your role'), h('dd', h('strong', s.role || '—'), ROLE_HINT[s.role] ? ` — ${ROLE_HINT[s.role]}` : ''),
        h('dt', 'Members'), h('dd', h('ul.members', (s.members || []).map((m) => h('li', m.member, ' ', h('span.hint', `(${m.role})`))))),
        h('dt', 'Created'), h('dd', timeEl(s.created_at), s.created_by ? ` by ${s.created_by}` : '')));
  }

  function fileRow(f) {
    const b = h('button.link', { type: 'button' }, f.path);
    b.addEventListener('click', async () => {
      setStatus(fileStatus, '');
      try { await openFile(`${base}/files/${encPath(f.path)}`, f.path.split('/').pop()); }
      catch (e) { setStatus(fileStatus, `Could not open ${f.path}: ${e.readable || e.message}`, 'error'); }
    });
    return h('li', { dataset: { path: f.path } }, b, h('span.hint', `${f.size ?? '?'} bytes`));
  }

  load();
  const timer = setInterval(() => { if (document.visibilityState === 'visible') load(); }, 10_000);
  return () => { alive = false; clearInterval(timer); };
}

function taskRow(t) {
  const job = t.latest_job || {};
  return h('li.taskrow', { dataset: { taskId: t.id } },
    h('a.tasklink', { href: `/ui/tasks/${enc(t.id)}` }, t.instruction || '(no instruction)'),
    h('div.meta', badge(job.status), h('span', 'updated ', timeEl(t.updated_at))));
}

function commitRow(c) {
  return h('li.commit', { dataset: { id: c.id } },
    h('code', { title: c.id }, String(c.id || '').slice(0, 8)), ' ',
    h('span.subject', c.subject || ''), ' ',
    h('span.hint', timeEl(c.at)),
    c.task_id ? [' ', h('a', { href: `/ui/tasks/${enc(c.task_id)}` }, 'open its task')] : null);
}
