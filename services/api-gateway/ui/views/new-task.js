// The "new task" form: instruction, piece (or auto), model, space, attachments.
import { api, enc } from '../api.js';
import { h, field, statusLine, setStatus } from '../dom.js';
import { pieces, spaces, pageHead } from './common.js';
import { navigate } from '../app.js';

export function pieceSelect(label = 'Default') {
  const sel = h('select', { name: 'piece' }, h('option', { value: '' }, label));
  pieces().then((r) => {
    if (label === 'Default' && r.default) sel.options[0].textContent = `Default (${r.default})`;
    sel.append(h('option', { value: 'auto' }, 'auto — let the router choose'));
    for (const p of r.pieces || []) sel.append(h('option', { value: p.name, title: p.description || '' }, p.name));
  }).catch(() => {});
  return sel;
}

export function render(main) {
  const instruction = h('textarea', { name: 'instruction', rows: 5, required: true });
  const piece = pieceSelect();
  const model = h('input', { type: 'text', name: 'model', autocomplete: 'off', spellcheck: 'false' });
  const space = h('select', { name: 'space' }, h('option', { value: '' }, 'No space (private task)'));
  const files = h('input', { type: 'file', name: 'file', multiple: true });
  const status = statusLine();
  const submit = h('button.primary', { type: 'submit' }, 'Start task');
  const wanted = new URLSearchParams(location.search).get('space') || '';
  spaces().then((ss) => {
    for (const s of ss) if (!s.archived_at) space.append(h('option', { value: s.id }, s.name));
    if (wanted && [...space.options].some((o) => o.value === wanted)) space.value = wanted;
  }).catch(() => {});

  const form = h('form.card.newtask', { 'aria-label': 'New task' },
    field('Instruction', instruction, 'What the agent should do.'),
    h('div.row',
      field('Piece', piece),
      field('Model (optional)', model, 'Leave empty for the default model.'),
      field('Space (optional)', space)),
    field('Attachments (optional)', files, 'Placed in the workspace under attachments/. Text, images, PDF, JSON, archives; up to 512 KiB each.'),
    h('div.actions', submit), status);

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const body = { instruction: instruction.value };
    if (piece.value) body.piece = piece.value;
    if (model.value.trim()) body.model = model.value.trim();
    if (space.value) body.space_id = space.value;
    let payload = body;
    if (files.files.length) {
      payload = new FormData();
      payload.append('task', new Blob([JSON.stringify(body)], { type: 'application/json' }));
      for (const f of files.files) payload.append('file', f, f.name);
    }
    submit.disabled = true;
    setStatus(status, 'Starting…');
    try {
      const t = await api('/api/local/tasks', { method: 'POST', body: payload });
      navigate(`/ui/tasks/${enc(t.id)}`);
    } catch (err) {
      setStatus(status, `Could not start the task: ${err.readable || err.message}`, 'error');
      submit.disabled = false;
    }
  });

  main.append(pageHead('New task'), form);
  instruction.focus();
}
