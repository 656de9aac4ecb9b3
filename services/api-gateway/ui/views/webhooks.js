// Webhook subscriptions: a "new webhook" form (its secret shown once), the list, re-enabling a
// disabled one and deleting one.
import { api, enc } from '../api.js';
import { h, clear, field, uid, timeEl, statusLine, setStatus } from '../dom.js';
import { pageHead, disclosure, loadList } from './common.js';

export const EVENT_TYPES = [
  'task.succeeded', 'task.failed', 'task.cancelled', 'task.waiting_human', 'task.decided',
  'schedule.missed', 'schedule.failed', 'webhook.disabled',
];

export function render(main) {
  let alive = true;
  const list = h('ul.webhooks', { 'aria-label': 'Webhooks' });
  const err = h('div');
  const pageStatus = statusLine();
  const secretSlot = h('div');
  const { form, toggle } = newWebhookForm(async (w) => {
    clear(secretSlot).append(secretBox(w, () => { clear(secretSlot); toggle.focus(); }));
    secretSlot.querySelector('input')?.focus();
    await load();
  });
  main.append(pageHead('Webhooks', toggle), form, secretSlot, pageStatus, err, list);

  const load = () => loadList({ path: '/api/webhooks', key: 'webhooks', list, err, row,
    emptyText: 'No webhooks.', alive: () => alive });
  function row(w) {
    const st = statusLine();
    const li = h('li.card.webhook', { dataset: { id: w.id } },
      h('div.meta', h('code.url', w.url), h(`span.badge.s-${w.status === 'active' ? 'succeeded' : 'failed'}`, w.status)),
      h('p.hint', 'events: ', (w.event_types || []).join(', ') || 'all'),
      h('p.hint', 'created ', timeEl(w.created_at), w.consecutive_failures ? ` · ${w.consecutive_failures} failures in a row` : ''),
      w.disabled_reason ? h('p.error-text', `disabled ${w.disabled_at ? new Date(w.disabled_at).toLocaleString() : ''}: ${w.disabled_reason}`) : null);
    const actions = h('div.actions');
    if (w.status === 'disabled') {
      const b = h('button', { type: 'button' }, 'Enable again');
      b.addEventListener('click', async () => {
        try { await api(`/api/webhooks/${enc(w.id)}/enable`, { method: 'POST' }); load(); } catch (e) { setStatus(st, e.readable || e.message, 'error'); }
      });
      actions.append(b);
    }
    // Deleting takes a second press: "Delete" reveals "Yes, delete" and "Keep it".
    const del = h('button.danger', { type: 'button' }, 'Delete');
    const yes = h('button.danger', { type: 'button' }, 'Yes, delete');
    const no = h('button', { type: 'button' }, 'Keep it');
    const ask = h('span.actions.confirmrow', { hidden: true }, h('span.confirm', 'Delete this webhook? Deliveries to it stop.'), yes, no);
    const asking = (on) => {
      del.hidden = on; ask.hidden = !on;
      (on ? no : del).focus();
    };
    del.addEventListener('click', () => asking(true));
    no.addEventListener('click', () => asking(false));
    yes.addEventListener('click', async () => {
      yes.disabled = no.disabled = true;
      try {
        await api(`/api/webhooks/${enc(w.id)}`, { method: 'DELETE' });
        setStatus(pageStatus, `Deleted the webhook to ${w.url}.`, 'ok');
        await load();
        toggle.focus();
      } catch (e) {
        setStatus(st, e.readable || e.message, 'error');
        yes.disabled = no.disabled = false;
      }
    });
    actions.append(del, ask);
    li.append(actions, st);
    return li;
  }
  load();
  return () => { alive = false; };
}

/** The secret of a webhook just made: the only time the API shows it. */
function secretBox(w, done) {
  const input = h('input', { type: 'text', readonly: true, value: w.secret || '', spellcheck: 'false', autocomplete: 'off' });
  input.addEventListener('focus', () => input.select());
  const st = statusLine();
  const copy = h('button', { type: 'button' }, 'Copy');
  copy.addEventListener('click', async () => {
    input.select();
    try { await navigator.clipboard.writeText(input.value); setStatus(st, 'Copied.', 'ok'); }
    catch { setStatus(st, 'Could not copy here: select the text and copy it yourself.', 'warn'); }
  });
  const dismiss = h('button', { type: 'button' }, 'I have copied it');
  dismiss.addEventListener('click', done);
  return h('section.card.secret', { 'aria-labelledby': 'secret-title' },
    h('h2#secret-title', 'The webhook’s signing secret'),
    h('p', h('strong', 'Copy it now; it is not shown again.'), ' Deliveries to ', h('code.url', w.url),
      ' are signed with it (the Standard Webhooks scheme, see docs/notifications.md).'),
    field('Secret', input),
    h('div.actions', copy, dismiss), st);
}

/** The form of POST /api/webhooks, hidden behind a "New webhook" button. */
function newWebhookForm(created) {
  const url = h('input', { type: 'url', name: 'url', required: true, autocomplete: 'off', spellcheck: 'false', placeholder: 'https://example.com/hooks/maestro' });
  const boxes = EVENT_TYPES.map((t) => h('input', { type: 'checkbox', name: 'event_types', value: t, id: uid('ev') }));
  const hint = uid('hint');
  const events = h('fieldset.events', { 'aria-describedby': hint },
    h('legend', 'Event types'),
    h('p.hint', { id: hint }, 'None checked: all of them.'),
    h('div.checks', boxes.map((b) => h('div.check', b, h('label', { for: b.id }, h('code', b.value))))));
  const status = statusLine();
  const submit = h('button.primary', { type: 'submit' }, 'Create webhook');
  const cancel = h('button', { type: 'button' }, 'Cancel');
  const form = h('form.card.createform.newwebhook#new-webhook', { 'aria-labelledby': 'new-webhook-title', hidden: true },
    h('h2#new-webhook-title', 'New webhook'),
    field('URL', url, 'Each notification is POSTed here, signed.'),
    events,
    h('div.actions', submit, cancel), status);
  const { toggle } = disclosure(form, { label: 'New webhook', first: url, cancel });
  url.addEventListener('input', () => url.removeAttribute('aria-invalid'));

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const body = { url: url.value.trim() };
    const picked = boxes.filter((b) => b.checked).map((b) => b.value);
    if (picked.length) body.event_types = picked;
    submit.disabled = true;
    setStatus(status, 'Creating…');
    try {
      const w = await api('/api/webhooks', { method: 'POST', body });
      form.reset();
      setStatus(status, '');
      form.hidden = true;
      toggle.setAttribute('aria-expanded', 'false');
      await created(w);
    } catch (err) {
      if (/url/i.test(err.code)) { url.setAttribute('aria-invalid', 'true'); url.focus(); }
      setStatus(status, `Could not create the webhook: ${err.readable || err.message}`, 'error');
    }
    submit.disabled = false;
  });
  return { form, toggle };
}
