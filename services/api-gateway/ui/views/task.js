// The task view: the conversation as it runs (over the task's SSE stream), approval cards,
// result, files, comments, cancel and continue.
import { api, enc, encPath, openFile, signedOut } from '../api.js';
import { h, clear, append, field, badge, timeEl, fmtTime, pretty, statusLine, setStatus, OVER } from '../dom.js';
import { SseStream } from '../stream.js';
import { errorBox } from './common.js';
import { renderCards } from './approvals.js';
import { pieceSelect } from './new-task.js';
import { onNotification } from '../app.js';

const ROUTED = {
  interjection: 'delivered to the running job at its next step',
  instruction: 'added to the queued job\'s instruction',
  answer: 'answers the question; a follow-up job resumes with it',
  follow_up: 'started a follow-up job',
};

const CONN_TEXT = {
  connecting: 'connecting…', live: 'live', reconnecting: 'reconnecting…',
  offline: 'offline — reconnects when the network is back', closed: 'closed',
};

export function render(main, taskId) {
  let alive = true;
  let task = null;
  const jobNo = new Map(); // job_id -> number, in order of appearance
  const provisional = new Map(); // job_id -> provisional bubble
  const seen = new Set(); // persisted seqs rendered
  let lastStatus = null;

  // ---- skeleton ----
  const title = h('h1.instruction', 'Task');
  const stateBadge = h('span.statebadge', badge(null));
  const meta = h('div.meta');
  const conn = h('span.conn', { role: 'status', 'aria-live': 'polite', dataset: { state: 'connecting' } }, 'connecting…');
  const cancelBtn = h('button.danger', { type: 'button', hidden: true }, 'Cancel');
  const headStatus = statusLine();
  const subtasksLink = h('a.button', { href: `/ui/tasks/${enc(taskId)}/subtasks` }, 'Subtasks');
  const head = h('div.taskhead', title,
    h('div.headrow', stateBadge, meta, conn),
    h('div.actions', cancelBtn, subtasksLink), headStatus);
  const loadErr = h('div');
  const approvals = h('section.approvals', { 'aria-label': 'Waiting for you', hidden: true });
  const timeline = h('ol.timeline', { 'aria-label': 'Conversation' });
  const conversation = h('section.conversation', h('h2', 'Conversation'), timeline);
  const resultBox = h('section.card.final', { hidden: true, 'aria-label': 'Result' });
  const filesList = h('ul.files');
  const files = h('section.card.fileset', { hidden: true }, h('h2', 'Files the task wrote'), filesList);
  const attList = h('ul.files');
  const attachments = h('section.card.fileset', { hidden: true }, h('h2', 'Attachments'), attList);

  const commentBody = h('textarea', { name: 'comment', rows: 3, required: true });
  const commentBtn = h('button.primary', { type: 'submit' }, 'Send comment');
  const commentStatus = statusLine();
  commentStatus.classList.add('comment-status');
  const commentForm = h('form.card.comment', { 'aria-label': 'Comment' },
    h('h2', 'Comment'),
    field('Comment on the task', commentBody, 'A running job reads it at its next step; a queued one gets it with its instruction; a question is answered by it; a finished task starts a follow-up job.'),
    h('div.actions', commentBtn), commentStatus);

  const contInstr = h('textarea', { name: 'continue-instruction', rows: 3, required: true });
  const contPiece = pieceSelect('Same as before');
  const contModel = h('input', { type: 'text', name: 'continue-model', autocomplete: 'off', spellcheck: 'false' });
  const contBtn = h('button.primary', { type: 'submit' }, 'Continue');
  const contStatus = statusLine();
  const contForm = h('form.card.continue', { 'aria-label': 'Continue the task', hidden: true },
    h('h2', 'Continue'),
    h('p.hint', 'The job is over. Carry the task on: the agent remembers what it did.'),
    field('What next?', contInstr),
    h('div.row', field('Piece (optional)', contPiece), field('Model (optional)', contModel, 'Empty: the model of the last job.')),
    h('div.actions', contBtn), contStatus);

  main.append(head, loadErr, approvals, conversation, resultBox, files, attachments, commentForm, contForm);

  // ---- task, actions, files: refreshed on state changes ----
  let refreshTimer = null;
  function scheduleRefresh(ms = 150) {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(refresh, ms);
  }
  async function refresh() {
    if (!alive) return;
    try {
      task = await api(`/api/local/tasks/${enc(taskId)}`);
    } catch (e) {
      clear(loadErr).append(errorBox(e));
      return;
    }
    if (!alive) return;
    clear(loadErr);
    drawHead();
    const [ra, fl] = await Promise.allSettled([
      api(`/api/local/tasks/${enc(taskId)}/required-actions`),
      api(`/api/local/tasks/${enc(taskId)}/files`),
    ]);
    if (!alive) return;
    if (ra.status === 'fulfilled') renderCards(approvals, ra.value.required_actions || [], { taskId, onDone: () => scheduleRefresh(300) });
    if (fl.status === 'fulfilled') drawFiles(fl.value.files || []);
    else files.hidden = true; // 404 where the route is not there: no section
  }

  function drawHead() {
    const job = task.latest_job || {};
    title.textContent = task.instruction || 'Task';
    document.title = `${(task.instruction || 'Task').slice(0, 60)} · MAESTRO`;
    setBadge(job.status);
    append(clear(meta), [
      h('span', `job ${job.job_no ?? '—'}`),
      h('span', `piece ${job.piece || task.piece || '—'}`),
      task.model || job.model ? h('span', `model ${job.model || task.model}`) : null,
      task.parent_task_id ? h('span', 'subtask of ', h('a', { href: `/ui/tasks/${enc(task.parent_task_id)}` }, 'parent')) : null,
      job.status === 'retry' && job.next_retry_at ? h('span.retry', 'next retry ', timeEl(job.next_retry_at)) : null,
      job.wait_reason ? h('span', `waiting: ${job.wait_reason.replace(/_/g, ' ')}`) : null,
      job.queued_reason ? h('span.warn', job.queued_reason) : null,
      h('span', 'created ', timeEl(task.created_at))]);
    const over = !job.status || OVER.has(job.status);
    cancelBtn.hidden = over;
    contForm.hidden = !over;
    clear(resultBox);
    if (job.status === 'succeeded' && job.result) {
      resultBox.append(h('h2', 'Result'), h('p.result-text', job.result));
      resultBox.hidden = false;
    } else if (job.status === 'failed' && job.error) {
      resultBox.append(h('h2', 'Failed'), h('p.error-text', job.error));
      resultBox.hidden = false;
    } else resultBox.hidden = true;
    clear(attList);
    for (const a of task.attachments || []) {
      attList.append(fileItem(a.name, `/api/local/tasks/${enc(taskId)}/attachments/${enc(a.name)}`, `${a.content_type || ''}${a.size != null ? `, ${a.size} bytes` : ''}`));
    }
    attachments.hidden = !(task.attachments || []).length;
  }

  function setBadge(status) {
    if (status === lastStatus) return;
    lastStatus = status;
    clear(stateBadge).append(badge(status));
  }

  function drawFiles(list) {
    clear(filesList);
    for (const f of list) filesList.append(fileItem(f.path, `/api/local/tasks/${enc(taskId)}/files/${encPath(f.path)}`));
    files.hidden = !list.length;
  }

  function fileItem(name, url, note) {
    const st = h('span.filestatus', { role: 'status' });
    const go = (download) => async () => {
      st.textContent = '';
      try { await openFile(url, name.split('/').pop(), { download }); } catch (e) { st.textContent = e.readable || e.message; }
    };
    return h('li', h('code', name), note ? h('span.hint', ` ${note}`) : null,
      h('button.link', { type: 'button', on: { click: go(false) }, 'aria-label': `Open ${name}` }, 'open'),
      h('button.link', { type: 'button', on: { click: go(true) }, 'aria-label': `Download ${name}` }, 'download'), st);
  }

  // ---- the conversation ----
  const nearBottom = () => window.innerHeight + window.scrollY >= document.body.scrollHeight - 120;
  // Persisted items go above the reply being streamed, which stays at the bottom.
  function add(el) {
    const stick = nearBottom();
    const streaming = el.classList.contains('provisional') ? null : timeline.querySelector(':scope > .provisional');
    if (streaming) timeline.insertBefore(el, streaming);
    else timeline.append(el);
    if (stick) timeline.lastElementChild?.scrollIntoView({ block: 'end' });
  }
  const jobLabel = (jobId) => {
    if (!jobNo.has(jobId)) jobNo.set(jobId, jobNo.size + 1);
    return `job ${jobNo.get(jobId)}`;
  };

  function onEvent(ev) {
    let data;
    try { data = JSON.parse(ev.data); } catch { return; }
    if (ev.event === 'delta') { onDelta(data); return; }
    if (typeof data.seq === 'number') {
      if (seen.has(data.seq)) return;
      seen.add(data.seq);
    }
    renderEvent(data);
  }

  function onDelta(d) {
    let p = provisional.get(d.job_id);
    if (!p) {
      p = {
        el: h('li.msg.assistant.provisional', { dataset: { jobId: d.job_id }, 'aria-busy': 'true' }),
        reasoning: null, reasoningText: null, text: h('div.content.streaming'), calls: new Map(),
      };
      p.el.append(h('div.who', 'Assistant ', h('span.hint', `· ${jobLabel(d.job_id)} · writing…`)), p.text);
      provisional.set(d.job_id, p);
      add(p.el);
    }
    const stick = nearBottom();
    if (d.type === 'reasoning') {
      if (!p.reasoning) {
        p.reasoningText = h('div.reasoning-text');
        p.reasoning = h('details.reasoning', h('summary', 'Reasoning'), p.reasoningText);
        p.el.insertBefore(p.reasoning, p.text);
      }
      p.reasoningText.append(d.text || '');
    } else if (d.type === 'text') {
      p.text.append(d.text || '');
    } else if (d.type === 'tool_call') {
      let c = p.calls.get(d.index);
      if (!c) {
        c = { pre: h('pre.args'), name: h('code', d.name || 'tool') };
        p.el.append(h('details.toolcall', h('summary', 'Tool call ', c.name), c.pre));
        p.calls.set(d.index, c);
      }
      if (d.name) c.name.textContent = d.name;
      c.pre.append(d.arguments || '');
    }
    if (stick) p.el.scrollIntoView({ block: 'end' });
  }

  function dropProvisional(jobId, keepAsInterrupted) {
    const p = provisional.get(jobId);
    if (!p) return;
    provisional.delete(jobId);
    if (keepAsInterrupted && (p.text.textContent || p.calls.size)) {
      p.el.classList.remove('provisional');
      p.el.classList.add('interrupted');
      p.el.removeAttribute('aria-busy');
      p.el.querySelector('.who .hint').textContent = ` · ${jobLabel(jobId)} · interrupted`;
    } else p.el.remove();
  }

  function renderEvent(e) {
    const p = e.payload || {};
    const when = h('time.when', { datetime: e.created_at, title: fmtTime(e.created_at) }, new Date(e.created_at).toLocaleTimeString());
    const base = { dataset: { seq: String(e.seq), kind: e.kind, jobId: e.job_id } };
    switch (e.kind) {
      case 'message': {
        if (p.role === 'assistant') dropProvisional(e.job_id, false);
        add(messageEl(e, p, base, when));
        break;
      }
      case 'job_state': {
        dropProvisional(e.job_id, true);
        setBadge(p.status);
        const bits = [h('span.hint', jobLabel(e.job_id)), badge(p.status)];
        if (p.attempt) bits.push(h('span.hint', `attempt ${p.attempt}`));
        if (p.wait_reason) bits.push(h('span', `waits for: ${p.wait_reason.replace(/_/g, ' ')}`));
        if (p.next_retry_at) bits.push(h('span.retry', 'next retry ', h('time', { datetime: p.next_retry_at }, fmtTime(p.next_retry_at))));
        if (p.reason) bits.push(h('span.hint', p.reason));
        const li = h('li.event.state', base, when, ...bits);
        if (p.error) li.append(h('p.error-text', p.error));
        if (p.status === 'succeeded' && p.result) li.append(h('div.result', h('strong', 'Result: '), h('span.result-text', p.result)));
        add(li);
        scheduleRefresh();
        break;
      }
      case 'movement':
        add(h('li.event.movement', base, when, h('span', '→ movement ', h('strong', p.name || '?')),
          p.from ? h('span.hint', ` from ${p.from}`) : null, p.piece ? h('span.hint', ` (piece ${p.piece})`) : null,
          p.reason ? h('span', `: ${p.reason}`) : null));
        break;
      case 'tool_call':
        // Shown with the assistant message that proposed it.
        break;
      case 'tool_result': {
        add(h(`li.event.toolresult${p.is_error ? '.is-error' : ''}`, base,
          h('details', h('summary', when, p.is_error ? 'Tool error from ' : 'Tool result from ', h('code', p.name || '?')),
            h('pre.output', { tabindex: 0 }, typeof p.content === 'string' ? p.content : pretty(p.content)))));
        break;
      }
      case 'decision':
        add(h('li.event.decision', base, when, h('span', 'Decision on ', h('strong', (p.kind || '').replace(/_/g, ' ')), ': ',
          h('strong', String(p.decision || '?')), p.scope ? ` (${p.scope})` : '', p.by ? ` by ${p.by}` : '',
          p.note ? ` — “${p.note}”` : '', p.resumed ? ' · the job resumes' : '')));
        scheduleRefresh();
        break;
      case 'job_continued':
        add(h('li.event.continued', base, when, h('span', `${jobLabel(e.job_id)}: continued`,
          p.piece ? ` with piece ${p.piece}` : '', p.model ? ` and model ${p.model}` : '')));
        scheduleRefresh();
        break;
      case 'replay':
        add(h('li.event.minor', base, when, h('span.hint', `replayed ${p.messages ?? '?'} earlier message(s) into the new job`)));
        break;
      case 'redispatch':
        add(h('li.event.minor', base, when, h('span.hint', `dispatched again (${p.reason || '?'}), attempt ${p.attempt ?? '?'}`)));
        break;
      case 'rewrite':
        add(h('li.event.minor', base, when, h('span.hint', `prompt rewritten: ${(p.steps || []).join(', ')}`)));
        break;
      default:
        add(h('li.event.minor', base, when, h('details', h('summary', e.kind), h('pre.args', pretty(p)))));
    }
  }

  function messageEl(e, p, base, when) {
    const content = contentText(p.content);
    if (p.role === 'system') {
      return h('li.msg.system', base, h('details', h('summary', when, 'System prompt'), h('div.content', content)));
    }
    if (p.role === 'tool') {
      return h('li.msg.toolmsg', base, h('details', h('summary', when, 'Tool message'), h('pre.output', content)));
    }
    if (p.role === 'user') {
      // The opening message starts with a <context> block: fold it away, show the rest.
      const ctx = /^\s*<context>[\s\S]*?<\/context>\s*/.exec(content);
      const rest = ctx ? content.slice(ctx[0].length) : content;
      const li = h('li.msg.user', base, h('div.who', when, p.name || 'User'));
      if (ctx) li.append(h('details.context', h('summary', 'Context'), h('div.content', ctx[0].trim())));
      const body = h('div.content');
      // <instruction>…</instruction>, <addition>…</addition>, …: labelled blocks.
      const re = /<([a-z_]+)>\n?([\s\S]*?)\n?<\/\1>\s*/g;
      let m; let last = 0;
      while ((m = re.exec(rest))) {
        if (m.index > last) body.append(rest.slice(last, m.index));
        body.append(h('div.block', m[1] !== 'instruction' ? h('span.blocklabel', m[1].replace(/_/g, ' ')) : null, m[2]));
        last = re.lastIndex;
      }
      if (last < rest.length) body.append(rest.slice(last));
      li.append(rest.length > 1500 ? h('details', h('summary', firstLine(rest)), body) : body);
      return li;
    }
    const li = h('li.msg.assistant', base, h('div.who', when, 'Assistant', h('span.hint', ` · ${jobLabel(e.job_id)}${p.model ? ` · ${p.model}` : ''}`)));
    if (p.reasoning) li.append(h('details.reasoning', h('summary', 'Reasoning'), h('div.reasoning-text', p.reasoning)));
    if (content) li.append(h('div.content', content));
    for (const c of p.tool_calls || []) {
      const fn = c.function || {};
      li.append(h('details.toolcall', { dataset: { callId: c.id || '' } },
        h('summary', 'Tool call ', h('code', fn.name || '?')), h('pre.args', { tabindex: 0 }, pretty(fn.arguments ?? ''))));
    }
    return li;
  }

  // ---- the stream ----
  const stream = new SseStream(`/api/local/tasks/${enc(taskId)}/stream`, {
    onUnauthorized: signedOut,
    onEvent,
    onStatus: (s, detail) => {
      conn.dataset.state = s;
      conn.textContent = CONN_TEXT[s] || s;
      if (detail && s !== 'live') conn.title = detail;
    },
  }).start();

  // ---- actions ----
  cancelBtn.addEventListener('click', async () => {
    cancelBtn.disabled = true;
    setStatus(headStatus, 'Cancelling…');
    try {
      await api(`/api/local/tasks/${enc(taskId)}/cancel`, { method: 'POST' });
      setStatus(headStatus, 'Cancelled.', 'ok');
    } catch (e) {
      setStatus(headStatus, e.code === 'nothing_to_cancel' ? 'Nothing to cancel: the job is already over.' : (e.readable || e.message), 'error');
    } finally {
      cancelBtn.disabled = false;
      scheduleRefresh(0);
    }
  });

  commentForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (!commentBody.value.trim()) return;
    commentBtn.disabled = true;
    setStatus(commentStatus, 'Sending…');
    try {
      const c = await api(`/api/local/tasks/${enc(taskId)}/comments`, { method: 'POST', body: { body: commentBody.value } });
      commentStatus.dataset.routedTo = c.routed_to || '';
      setStatus(commentStatus, `Comment sent — routed to ${c.routed_to}: ${ROUTED[c.routed_to] || ''}.`, 'ok');
      commentBody.value = '';
    } catch (err) {
      commentStatus.dataset.routedTo = '';
      const why = err.code === 'decision_pending' ? 'Not sent: a decision is pending. ' : 'Not sent: ';
      setStatus(commentStatus, `${why}${err.message} (${err.code})`, 'error');
    } finally {
      commentBtn.disabled = false;
      scheduleRefresh(200);
    }
  });

  contForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    const body = { instruction: contInstr.value };
    if (contPiece.value) body.piece = contPiece.value;
    if (contModel.value.trim()) body.model = contModel.value.trim();
    contBtn.disabled = true;
    setStatus(contStatus, 'Continuing…');
    try {
      const t = await api(`/api/local/tasks/${enc(taskId)}/continue`, { method: 'POST', body });
      setStatus(contStatus, `Continued: job ${t.latest_job?.job_no ?? ''} is ${t.latest_job?.status ?? 'queued'}.`, 'ok');
      contInstr.value = '';
    } catch (err) {
      setStatus(contStatus, err.readable || err.message, 'error');
    } finally {
      contBtn.disabled = false;
      scheduleRefresh(0);
    }
  });

  const offInbox = onNotification((item) => { if (!item || item.task_id === taskId) scheduleRefresh(); });
  refresh();

  return () => {
    alive = false;
    clearTimeout(refreshTimer);
    stream.stop();
    offInbox();
  };
}

function contentText(c) {
  if (c == null) return '';
  if (typeof c === 'string') return c;
  if (Array.isArray(c)) return c.map((part) => (typeof part === 'string' ? part : part?.text ?? '')).join('');
  return pretty(c);
}

function firstLine(s) {
  const lines = s.split('\n').map((l) => l.trim()).filter((l) => l && !/^<\/?[a-z_]+>$/i.test(l));
  const l = lines[0] || 'Message';
  return l.length > 100 ? `${l.slice(0, 100)}…` : l;
}
