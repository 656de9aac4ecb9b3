// Approval cards: one per pending required action of a task (and of the tasks below it).
import { api, enc } from '../api.js';
import { h, clear, field, pretty, statusLine, setStatus, timeEl } from '../dom.js';

const STALE = {
  already_decided: 'Already decided — someone (or another tab) decided this first.',
  not_waiting: 'Stale — the job no longer waits for this (it was cancelled or moved on).',
  arguments_changed: 'Stale — the arguments changed since you saw them. Reload the card and review them again.',
  decided_by_the_subtask: 'Decided by the subtask itself.',
};

const KIND_TITLE = {
  tool_request: 'Approve a tool call',
  package_request: 'Approve a package',
  ask: 'The agent asks you',
  mcp_auth_required: 'An MCP server needs your token',
  side_effect_unknown: 'Did this side effect happen?',
  subtask: 'Waiting for a subtask',
};

/**
 * Render the cards into `box`. `onDone()` is called after a decision so the page refreshes.
 * Cards being worked on (text typed, a request in flight) are kept across refreshes.
 */
export function renderCards(box, items, { taskId, onDone }) {
  const keep = new Map();
  for (const card of box.querySelectorAll('.card.action')) keep.set(card.dataset.actionId, card);
  clear(box);
  const pending = items.filter((i) => i.status === 'pending');
  box.hidden = !pending.length && ![...keep.values()].some((c) => c.dataset.outcome === 'fresh');
  if (box.hidden) return;
  box.append(h('h2', 'Waiting for you'));
  for (const item of pending) {
    const old = keep.get(item.id);
    if (old && old.dataset.kindKey === `${item.kind}:${item.arguments_hash || ''}`) { box.append(old); keep.delete(item.id); continue; }
    box.append(card(item, taskId, onDone));
  }
  // A card whose outcome we just showed (stale / already decided) stays until the next refresh after it.
  for (const c of keep.values()) if (c.dataset.outcome === 'fresh') { c.dataset.outcome = 'shown'; box.append(c); }
}

function card(item, taskId, onDone) {
  const status = statusLine();
  const buttons = [];
  const el = h('article.card.action', {
    dataset: { actionId: item.id, kind: item.kind, kindKey: `${item.kind}:${item.arguments_hash || ''}` },
    'aria-label': KIND_TITLE[item.kind] || item.kind,
  });
  const head = h('header', h('h3', KIND_TITLE[item.kind] || item.kind),
    h('p.meta', item.movement ? `movement ${item.movement} · ` : '', 'asked ', timeEl(item.created_at)));
  el.append(head);
  if (item.task_id && item.task_id !== taskId) {
    el.append(h('p.note', 'In subtask ', h('a', { href: `/ui/tasks/${enc(item.task_id)}` }, item.task_id.slice(0, 13) + '…')));
  }
  const tid = item.task_id || taskId;

  const finish = (text, kind, outcome) => {
    setStatus(status, text, kind);
    if (outcome) {
      el.dataset.outcome = 'fresh';
      el.classList.add('decided');
      for (const b of buttons) b.disabled = true;
    }
  };
  const run = async (button, fn, doneText) => {
    for (const b of buttons) b.disabled = true;
    setStatus(status, 'Sending…');
    try {
      await fn();
      finish(doneText, 'ok', true);
      onDone?.();
    } catch (err) {
      if (STALE[err.code]) { finish(STALE[err.code], 'warn', true); onDone?.(); return; }
      setStatus(status, err.readable || err.message, 'error');
      for (const b of buttons) b.disabled = false;
      button.focus();
    }
  };
  const btn = (label, cls, onClick) => {
    const b = h(`button${cls}`, { type: 'button' }, label);
    b.addEventListener('click', () => onClick(b));
    buttons.push(b);
    return b;
  };

  switch (item.kind) {
    case 'tool_request':
    case 'package_request': {
      const isPkg = item.kind === 'package_request';
      if (isPkg) {
        const p = item.package || {};
        el.append(h('dl.kv', h('dt', 'Package'), h('dd', h('code', p.name || '?')),
          h('dt', 'Manager'), h('dd', p.manager || '?'), h('dt', 'Version'), h('dd', p.version || 'any')));
      } else {
        el.append(h('p', 'Tool ', h('code.toolname', item.tool), ' with these exact arguments:'),
          h('pre.args', { tabindex: 0, 'aria-label': 'Arguments' }, pretty(item.arguments ?? {})));
      }
      if (item.reason) el.append(h('p.note', item.reason));
      const note = h('input', { type: 'text', name: 'note', autocomplete: 'off' });
      el.append(field('Note (optional, shown to the agent with a denial)', note));
      const path = isPkg ? 'package-requests' : 'tool-requests';
      const decide = (decision, scope) => () => api(`/api/local/tasks/${enc(tid)}/${path}/${enc(item.id)}/decide`, {
        method: 'POST',
        body: { decision, ...(scope ? { scope } : {}), ...(item.arguments_hash ? { arguments_hash: item.arguments_hash } : {}), ...(note.value.trim() ? { note: note.value.trim() } : {}) },
      });
      const actions = h('div.actions',
        btn('Approve once', '.primary.approve-once', (b) => run(b, decide('approve', 'once'), 'Approved once. The job resumes.')));
      if (!isPkg) actions.append(btn('Approve for this task', '.approve-task', (b) => run(b, decide('approve', 'task'), 'Approved for the rest of this task. The job resumes.')));
      actions.append(btn('Deny', '.danger.deny', (b) => run(b, decide('deny'), 'Denied. The agent is told and goes on.')));
      el.append(actions);
      break;
    }
    case 'ask': {
      el.append(h('blockquote.question', item.question || '(no question text)'));
      const answer = h('textarea', { name: 'answer', rows: 3, required: true });
      el.append(field('Your answer', answer));
      const send = btn('Send answer', '.primary.answer', (b) => {
        if (!answer.value.trim()) { setStatus(status, 'Write an answer first.', 'error'); answer.focus(); return; }
        run(b, () => api(`/api/local/tasks/${enc(tid)}/comments`, { method: 'POST', body: { body: answer.value } }),
          'Answered. A follow-up job takes your answer.');
      });
      el.append(h('div.actions', send));
      break;
    }
    case 'mcp_auth_required': {
      el.append(h('p', 'The server ', h('code', item.server || '?'), ' needs a token of yours before the job can go on.'));
      if (item.login_error) el.append(h('p.error', item.login_error));
      if (item.login_url) el.append(h('p', h('a', { href: item.login_url, target: '_blank', rel: 'noopener' }, `Log in to ${item.server}`), ' (opens the server\'s sign-in; the job resumes by itself after it).'));
      const token = h('input', { type: 'password', name: 'mcp-token', autocomplete: 'off' });
      el.append(field(`Token for ${item.server}`, token));
      el.append(h('div.actions', btn('Save token', '.primary', (b) => {
        if (!token.value) { setStatus(status, 'Enter the token first.', 'error'); token.focus(); return; }
        run(b, async () => {
          await api(`/api/local/mcp-servers/${enc(item.server)}/token`, { method: 'PUT', body: { token: token.value } });
          token.value = '';
        }, 'Token saved. Waiting jobs resume.');
      })));
      break;
    }
    case 'side_effect_unknown': {
      el.append(h('p', 'A call of ', h('code', item.tool || '?'), ' was started, and nobody knows whether it took effect. Check, then tell the agent.'),
        h('pre.args', { tabindex: 0, 'aria-label': 'Arguments' }, pretty(item.arguments ?? {})));
      if (item.operation_id) el.append(h('p.note', `operation ${item.operation_id}`));
      const decide = (decision) => () => api(`/api/local/tasks/${enc(tid)}/required-actions/${enc(item.id)}/decide`, { method: 'POST', body: { decision } });
      el.append(h('div.actions',
        btn('It happened', '.primary', (b) => run(b, decide('happened'), 'Recorded: it happened. It will not run again.')),
        btn('It did not happen', '', (b) => run(b, decide('not_happened'), 'Recorded: it did not happen. It runs now.'))));
      break;
    }
    case 'subtask': {
      el.append(h('p', 'Subtask ', item.subtask_id ? h('a', { href: `/ui/tasks/${enc(item.subtask_id)}` }, item.subtask_id.slice(0, 13) + '…') : '',
        item.piece ? ` (piece ${item.piece})` : '', ': ', item.instruction || ''),
      h('p.note', 'Nothing to decide: the parent goes on when the subtask is over. Cancel the subtask to end it now.'));
      break;
    }
    default:
      el.append(h('pre.args', pretty(item)));
  }
  el.append(status);
  return el;
}
