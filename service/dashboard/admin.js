// service/dashboard/admin.js - the admin page (#/admin; role admin): queues
// with their load (GET /v1/queues), nodes with Drain/Resume (POST
// /v1/nodes/{name}/drain|resume), the jobs that are waiting or running with
// Hold/Release/Requeue and their priority (POST /v1/jobs/{id}/hold|release|
// requeue, PATCH /v1/jobs/{id}), usage per user per day (usage.js: GET
// /v1/usage) and the audit log (GET /v1/audit). A user token is answered 403
// by larchd, and the page says so.
import { ApiError, request } from './api.js';
import { ask, card, coalesce, empty, fmtNum, h, notify, stateBadge, tableWrap,
         timeEl } from './ui.js';
import { UsagePanel } from './usage.js';

const ACTIVE = ['PENDING', 'HELD', 'QUEUED', 'REQUEUED', 'PREEMPTED', 'RUNNING'];
const ACTIONS = ['node.drain', 'node.resume', 'job.hold', 'job.release', 'job.requeue', 'job.update',
                 'account.limits'];
const REFRESH_MS = 10000;
const AUDIT_PAGE = 50;
const PRIORITY_MAX = 4294967294;

function th(...labels) {
  return h('thead', null, h('tr', null, labels.map((l) => h('th', { scope: 'col' }, l))));
}

function loadBar(cpus) {
  if (!cpus || !cpus.total)
    return h('span', { class: 'muted' }, '—');
  const used = (cpus.alloc || 0) + (cpus.other || 0);
  return h('div', { class: 'load' },
           h('meter', { min: 0, max: cpus.total, value: cpus.alloc || 0, high: cpus.total * 0.9,
                        optimum: 0, 'aria-label': `${cpus.alloc} of ${cpus.total} CPUs allocated` }),
           h('span', { class: 'small' }, `${fmtNum(cpus.alloc)} / ${fmtNum(cpus.total)}`,
             used > (cpus.alloc || 0) ? h('span', { class: 'muted' }, ` (+${cpus.other} other)`) : null));
}

function snapshotNote(d) {
  return h('p', { class: d.stale ? 'snapshot stale small' : 'snapshot muted small' },
           `${d.executor} executor · as of `, timeEl(d.updated_at),
           d.stale ? ` · stale: ${d.error || 'the last refresh failed'}` : '');
}

export function adminView(main, ctx) {
  const queuesBox = h('div', { dataset: { testid: 'queues' } }, empty('Loading…'));
  const nodesBox = h('div', { dataset: { testid: 'nodes' } }, empty('Loading…'));
  const jobsBox = h('div', { dataset: { testid: 'active-jobs' } }, empty('Loading…'));
  const auditBody = h('tbody');
  const auditMore = h('button', { type: 'button', class: 'btn', dataset: { testid: 'audit-more' },
                                  hidden: true }, 'Older entries');
  const auditTable = h('table', { class: 'table audit-table', dataset: { testid: 'audit-table' } },
                       th('Time', 'Actor', 'Action', 'Target', 'Arguments', 'Status', 'Message'),
                       auditBody);
  const auditEmpty = empty('No entries.');
  auditEmpty.hidden = true;
  const auditFilters = {
    actor: h('input', { id: 'a-actor', class: 'input', type: 'search', autocomplete: 'off',
                        dataset: { testid: 'audit-actor' } }),
    action: h('select', { id: 'a-action', class: 'input', dataset: { testid: 'audit-action' } },
              h('option', { value: '' }, 'Any action'), ACTIONS.map((a) => h('option', { value: a }, a))),
    target: h('input', { id: 'a-target', class: 'input', type: 'search', autocomplete: 'off',
                         placeholder: 'jobs/j-000001', dataset: { testid: 'audit-target' } }),
  };
  const auditForm = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter the audit log' },
                      ['actor', 'action', 'target'].map((k) => h('div', { class: 'field' },
                        h('label', { for: `a-${k}`, class: 'label' }, k[0].toUpperCase() + k.slice(1)),
                        auditFilters[k])),
                      h('div', { class: 'filter-actions' },
                        h('button', { type: 'submit', class: 'btn btn-primary' }, 'Apply')));
  let auditCursor = null;
  const usage = new UsagePanel(ctx);

  main.append(
    h('div', { class: 'page-head' }, h('h1', null, 'Admin'),
      h('p', { class: 'muted' }, 'Queues, nodes and jobs of this larchd, and what admins did.')),
    h('div', { class: 'admin-body', dataset: { testid: 'admin' } },
      card('Queues', { dataset: { testid: 'queues-card' } }, queuesBox),
      card('Nodes', { dataset: { testid: 'nodes-card' } }, nodesBox),
      card('Waiting and running jobs', { dataset: { testid: 'active-jobs-card' } }, jobsBox),
      card('Usage per user', { dataset: { testid: 'usage-card' } }, usage.el),
      card('Audit log', { dataset: { testid: 'audit-card' } }, auditForm,
           tableWrap(auditTable, 'Audit log'), auditEmpty, h('div', { class: 'pager' }, auditMore))));

  function forbidden(e) {
    main.replaceChildren(h('section', { class: 'card narrow forbidden', dataset: { testid: 'forbidden' } },
                           h('h1', null, 'Admins only'),
                           h('p', null, 'The admin pages need an admin token; larchd answered: ',
                             h('q', null, e.message), ` (${e.status} ${e.code}).`),
                           h('p', null, h('a', { href: '#/jobs' }, 'Back to the jobs'))));
    const head = main.querySelector('h1');
    head.tabIndex = -1;
    head.focus();
  }

  // ---- queues and nodes
  function renderQueues(d) {
    const rows = (d.queues || []).map((q) => h('tr', { dataset: { testid: 'queue-row', name: q.name } },
      h('th', { scope: 'row' }, q.name, q.default ? h('span', { class: 'tag' }, 'default') : null),
      h('td', null, stateBadge(String(q.state || '').toUpperCase(), 'queue-state')),
      h('td', null, q.nodes ? `${q.nodes.count}` : '—',
        q.nodes && q.nodes.names ? h('span', { class: 'muted small block' }, q.nodes.names.join(', ')) : null),
      h('td', null, loadBar(q.cpus)),
      h('td', null, q.jobs ? `${q.jobs.pending} / ${q.jobs.running}` : '—'),
      h('td', null, q.larch_jobs ? `${q.larch_jobs.pending} / ${q.larch_jobs.running}` : '—'),
      h('td', null, q.max_time || 'none')));
    const t = h('table', { class: 'table', dataset: { testid: 'queues-table' } },
                th('Queue', 'State', 'Nodes', 'CPUs allocated', 'Jobs pending / running',
                   'larch pending / running', 'Time limit'),
                h('tbody', null, rows));
    queuesBox.replaceChildren(snapshotNote(d), rows.length ? tableWrap(t, 'Queues') : empty('No queues.'));
  }

  function renderNodes(d) {
    const rows = (d.nodes || []).map((n) => {
      const drained = /^(drain|draining|down)/.test(n.state || '');
      const reason = n.reason
        ? h('span', null, n.reason.text,
            n.reason.user ? h('span', { class: 'muted' }, ` (${n.reason.user})`) : null)
        : h('span', { class: 'muted' }, '—');
      const mem = n.memory_mb || {};
      return h('tr', { dataset: { testid: 'node-row', name: n.name, state: n.state } },
        h('th', { scope: 'row', class: 'mono' }, n.name),
        h('td', null, stateBadge(String(n.state || '').toUpperCase(), 'node-state'),
          n.responding === false ? h('span', { class: 'tag tag-warn' }, 'not responding') : null),
        h('td', null, loadBar(n.cpus)),
        h('td', { class: 'nowrap' }, mem.total ? `${fmtNum(Math.round(mem.free / 1024))} / ` +
                                                `${fmtNum(Math.round(mem.total / 1024))} GiB free` : '—'),
        h('td', null, (n.partitions || []).join(', ') || '—'),
        h('td', { class: 'reason' }, reason),
        h('td', { class: 'actions' },
          drained
            ? h('button', { type: 'button', class: 'btn btn-small', onclick: () => nodeAction(n.name, 'resume'),
                            dataset: { testid: 'resume-button' } }, 'Resume')
            : h('button', { type: 'button', class: 'btn btn-small btn-warn',
                            onclick: () => nodeAction(n.name, 'drain'),
                            dataset: { testid: 'drain-button' } }, 'Drain')));
    });
    const t = h('table', { class: 'table', dataset: { testid: 'nodes-table' } },
                th('Node', 'State', 'CPUs allocated', 'Memory', 'Partitions', 'Reason', 'Actions'),
                h('tbody', null, rows));
    nodesBox.replaceChildren(snapshotNote(d), rows.length ? tableWrap(t, 'Nodes') : empty('No nodes.'));
  }

  async function nodeAction(name, verb) {
    let body;
    if (verb === 'drain') {
      const r = await ask({ title: `Drain ${name}?`,
                            message: 'No new jobs start on a drained node; running jobs go on.',
                            confirm: 'Drain', danger: true,
                            input: { label: 'Reason', required: true, maxLength: 256,
                                     placeholder: 'e.g. disk swap' } });
      if (!r)
        return;
      body = { reason: r.value.trim() };
    } else {
      const r = await ask({ title: `Resume ${name}?`, message: 'Jobs may start on it again.',
                            confirm: 'Resume' });
      if (!r)
        return;
      body = {};
    }
    try {
      await request('POST', `/v1/nodes/${encodeURIComponent(name)}/${verb}`, { body, signal: ctx.signal });
      notify(`${name}: ${verb === 'drain' ? 'drained' : 'resumed'}`);
    } catch (e) {
      ctx.fail(e, `${verb[0].toUpperCase()}${verb.slice(1)} ${name}`);
    }
    refreshCluster();
    refreshAudit();
  }

  // ---- waiting and running jobs
  const drafts = new Map();      // job id -> a priority being typed: kept across refreshes

  function renderJobs(jobs) {
    const active = document.activeElement;
    const focused = active && jobsBox.contains(active) && active.closest('tr')
      ? [active.closest('tr').dataset.jobId, active.dataset.testid] : null;
    if (!jobs.length) {
      jobsBox.replaceChildren(empty('No job is waiting or running.'));
      return;
    }
    const rows = jobs.map((j) => {
      const pid = `prio-${j.id}`;
      const shown = drafts.has(j.id) ? drafts.get(j.id) : j.priority ? String(j.priority) : '';
      const prio = h('input', { id: pid, type: 'number', min: 1, max: PRIORITY_MAX, step: 1,
                                class: 'input input-step', value: shown,
                                placeholder: String(j.priority ?? 0), dataset: { testid: 'priority-input' } });
      prio.addEventListener('input', () => drafts.set(j.id, prio.value));
      const prioForm = h('form', { class: 'inline-form', 'aria-label': `Priority of ${j.id}` },
                         h('label', { for: pid, class: 'visually-hidden' }, `Priority of ${j.id}`), prio,
                         h('button', { type: 'submit', class: 'btn btn-small',
                                       dataset: { testid: 'priority-set' } }, 'Set'));
      prioForm.addEventListener('submit', (ev) => {
        ev.preventDefault();
        setPriority(j, prio.value);
      });
      const act = (verb, label, enabled) => h('button', {
        type: 'button', class: 'btn btn-small', disabled: !enabled,
        dataset: { testid: `${verb}-button` }, onclick: () => jobAction(j, verb) }, label);
      return h('tr', { dataset: { testid: 'active-job-row', jobId: j.id, state: j.state } },
        h('th', { scope: 'row' }, h('a', { href: `#/jobs/${j.id}`, class: 'mono' }, j.id)),
        h('td', { class: 'col-name' }, j.name),
        h('td', null, j.owner),
        h('td', null, stateBadge(j.state)),
        h('td', { class: 'nowrap' }, timeEl(j.created_at)),
        h('td', null, prioForm),
        h('td', { class: 'actions' },
          act('hold', 'Hold', ['PENDING', 'QUEUED', 'REQUEUED', 'PREEMPTED'].includes(j.state)),
          act('release', 'Release', j.state === 'HELD'),
          act('requeue', 'Requeue', j.state === 'RUNNING')));
    });
    jobsBox.replaceChildren(tableWrap(h('table', { class: 'table', dataset: { testid: 'active-jobs-table' } },
                                        th('Job', 'Name', 'Owner', 'State', 'Submitted', 'Priority', 'Actions'),
                                        h('tbody', null, rows)), 'Waiting and running jobs'));
    if (focused) {
      const el = jobsBox.querySelector(`tr[data-job-id="${focused[0]}"] [data-testid="${focused[1]}"]`);
      if (el)
        el.focus({ preventScroll: true });
    }
  }

  async function jobAction(job, verb) {
    if (verb === 'requeue') {
      const r = await ask({ title: `Requeue ${job.id}?`,
                            message: `${job.name} is stopped and queued again (Slurm jobs only).`,
                            confirm: 'Requeue', danger: true });
      if (!r)
        return;
    }
    try {
      const r = await request('POST', `/v1/jobs/${job.id}/${verb}`, { signal: ctx.signal });
      notify(`${job.id}: ${verb} done, now ${r.data.state}`);
    } catch (e) {
      ctx.fail(e, `${verb[0].toUpperCase()}${verb.slice(1)} ${job.id}`);
    }
    refreshJobs();
    refreshAudit();
  }

  async function setPriority(job, value) {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1 || n > PRIORITY_MAX) {
      ctx.fail(new ApiError(0, 'bad_priority',
                            `priority: an integer 1..${PRIORITY_MAX} (got ${value || 'nothing'})`),
               `Priority of ${job.id}`);
      return;
    }
    try {
      await request('PATCH', `/v1/jobs/${job.id}`, { body: { priority: n }, signal: ctx.signal });
      drafts.delete(job.id);
      notify(`${job.id}: priority set to ${n}`);
    } catch (e) {
      ctx.fail(e, `Priority of ${job.id}`);
    }
    refreshJobs();
    refreshAudit();
  }

  // ---- the audit log
  function auditRow(e) {
    return h('tr', { dataset: { testid: 'audit-row', id: e.id, outcome: e.outcome } },
      h('td', { class: 'nowrap' }, timeEl(e.time)),
      h('td', null, e.actor),
      h('td', { class: 'mono nowrap' }, e.action),
      h('td', { class: 'mono' }, e.target),
      h('td', { class: 'mono args' }, e.args === null || e.args === undefined ? '—' : JSON.stringify(e.args)),
      h('td', null, h('span', { class: `badge outcome-${e.outcome === 'ok' ? 'ok' : 'error'}` },
                      `${e.status} ${e.outcome}`)),
      h('td', { class: 'message' }, e.message || '—'));
  }

  function auditQuery(cursor) {
    const p = new URLSearchParams({ limit: AUDIT_PAGE });
    for (const k of ['actor', 'action', 'target'])
      if (auditFilters[k].value.trim())
        p.set(k, auditFilters[k].value.trim());
    if (cursor)
      p.set('cursor', cursor);
    return `/v1/audit?${p}`;
  }

  async function loadAudit(more) {
    const r = await request('GET', auditQuery(more ? auditCursor : null), { signal: ctx.signal });
    if (!r.changed && !more)
      return;
    const entries = (r.data && r.data.entries) || [];
    const rows = entries.map(auditRow);
    if (more)
      auditBody.append(...rows);
    else
      auditBody.replaceChildren(...rows);
    auditCursor = (r.data && r.data.next_cursor) || null;
    auditMore.hidden = !auditCursor;
    auditEmpty.hidden = auditBody.children.length > 0;
    auditTable.parentElement.hidden = auditBody.children.length === 0;
  }

  // ---- refreshing
  let denied = false;
  const guard = (fn, what) => async () => {
    if (denied)
      return;
    try {
      await fn();
    } catch (e) {
      if (e instanceof ApiError && e.status === 403) {
        denied = true;
        forbidden(e);
        return;
      }
      ctx.fail(e, what);
    }
  };
  const refreshCluster = coalesce(guard(async () => {
    const [q, n] = await Promise.all([request('GET', '/v1/queues', { signal: ctx.signal }),
                                      request('GET', '/v1/nodes', { signal: ctx.signal })]);
    if (q.changed || !queuesBox.querySelector('table'))
      renderQueues(q.data);
    if (n.changed || !nodesBox.querySelector('table'))
      renderNodes(n.data);
  }, 'Queues and nodes'));
  const refreshJobs = coalesce(guard(async () => {
    const replies = await Promise.all(ACTIVE.map((s) =>
      request('GET', `/v1/jobs?state=${s}&limit=100`, { signal: ctx.signal })));
    if (replies.every((r) => !r.changed) && jobsBox.dataset.loaded)
      return;
    jobsBox.dataset.loaded = '1';
    renderJobs(replies.flatMap((r) => (r.data && r.data.jobs) || []));
  }, 'Jobs'));
  const refreshAudit = coalesce(guard(() => loadAudit(false), 'Audit log'));
  const refreshUsage = coalesce(guard(() => usage.refresh(), 'Usage'));

  auditForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    auditCursor = null;
    refreshAudit();
  });
  auditFilters.action.addEventListener('change', () => refreshAudit());
  auditMore.addEventListener('click', guard(() => loadAudit(true), 'Audit log'));

  (async () => {
    await refreshCluster();
    if (denied)
      return;
    refreshJobs();
    refreshAudit();
    refreshUsage();
    ctx.onChanges(() => {
      refreshJobs();
      refreshCluster();
    });
    ctx.every(REFRESH_MS, () => {
      refreshCluster();
      refreshAudit();
      refreshUsage();
    });
  })();
}
