// The subtasks of a task, as a tree (each level fetched with GET …/subtasks).
import { api, enc } from '../api.js';
import { h, clear, badge } from '../dom.js';
import { errorBox, pageHead, empty } from './common.js';

const MAX_DEPTH = 6;

export function render(main, taskId) {
  let alive = true;
  const tree = h('div.tree');
  const title = h('p.hint');
  main.append(pageHead('Subtasks', h('a.button', { href: `/ui/tasks/${enc(taskId)}` }, 'Back to the task')), title, tree);
  api(`/api/local/tasks/${enc(taskId)}`).then((t) => { title.textContent = `Tasks delegated by: ${t.instruction}`; }).catch(() => {});

  async function level(id, depth) {
    const r = await api(`/api/local/tasks/${enc(id)}/subtasks`);
    const kids = r.subtasks || r.tasks || [];
    if (!kids.length) return null;
    const ul = h('ul.subtree', { role: depth === 0 ? 'tree' : 'group', 'aria-label': depth === 0 ? 'Subtasks' : null });
    for (const k of kids) {
      const status = k.status || k.latest_job?.status;
      const li = h('li.subtask', { role: 'treeitem', dataset: { taskId: k.id } },
        h('div.node', badge(status), h('a', { href: `/ui/tasks/${enc(k.id)}` }, k.instruction || k.id),
          k.piece ? h('span.hint', ` piece ${k.piece}`) : null),
        k.result ? h('p.result-text', k.result) : null,
        k.error ? h('p.error-text', k.error) : null);
      ul.append(li);
      if (depth + 1 < MAX_DEPTH) {
        try {
          const sub = await level(k.id, depth + 1);
          if (sub) li.append(sub);
        } catch { /* leave that branch */ }
      }
    }
    return ul;
  }

  let loading = false;
  async function load() {
    if (loading) return; // a large tree takes longer than the interval: one load at a time
    loading = true;
    try {
      const t = await level(taskId, 0);
      if (!alive) return;
      clear(tree).append(t || empty('This task has not delegated anything.'));
    } catch (e) {
      if (alive) clear(tree).append(errorBox(e));
    } finally {
      loading = false;
    }
  }
  load();
  const timer = setInterval(() => { if (document.visibilityState === 'visible') load(); }, 5000);
  return () => { alive = false; clearInterval(timer); };
}
