// service/dashboard/job.js - a job's page (#/jobs/j-000001): its state and
// Cancel, a summary, the state timeline (GET .../events), the metric charts
// (charts.js), the log tail with "follow" (logs.js), the checkpoints and
// the effective spec. While the job is not final it is refreshed on the
// change feed's news of it, and metrics and logs every few seconds (with
// ETags: a 304 costs next to nothing).
import { request } from './api.js';
import { MetricsPanel } from './charts.js';
import { partition, progressCell, ranks } from './jobs.js';
import { LogPanel } from './logs.js';
import { FINAL_STATES, ask, card, coalesce, empty, fmtBytes, fmtDuration, h, notify, stateBadge,
         tableWrap, timeEl } from './ui.js';

const METRICS_MS = 5000;
const LOGS_MS = 2000;
const JOB_MS = 10000;

export function jobView(main, ctx) {
  const id = ctx.params[0];
  const s = ctx.session;
  let job = null;

  const title = h('h1', { class: 'job-title', dataset: { testid: 'job-title' } }, id);
  const badgeBox = h('span', { class: 'job-state' });
  const actions = h('div', { class: 'page-actions' });
  const summary = h('dl', { class: 'summary', dataset: { testid: 'summary' } });
  const timeline = h('ol', { class: 'timeline', dataset: { testid: 'timeline' } });
  const checkpoints = h('div', { dataset: { testid: 'checkpoints' } });
  const spec = h('pre', { class: 'code', dataset: { testid: 'spec' }, tabindex: 0 });
  const metrics = new MetricsPanel(id, ctx);
  const logs = new LogPanel(id, ctx);
  const live = h('p', { class: 'visually-hidden', 'aria-live': 'polite', dataset: { testid: 'job-live' } });

  main.append(
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' },
      h('a', { href: '#/jobs' }, 'Jobs'), h('span', { 'aria-hidden': 'true' }, ' / '),
      h('span', { 'aria-current': 'page' }, id)),
    h('div', { class: 'page-head' }, h('div', { class: 'title-row' }, title, badgeBox), actions),
    live,
    h('div', { class: 'grid-2' },
      card('Summary', null, summary),
      card('Timeline', { 'aria-live': 'polite' }, timeline)),
    card('Metrics', { dataset: { testid: 'metrics' } }, metrics.el),
    card('Logs', { actions: logs.controls }, logs.el),
    h('div', { class: 'grid-2' },
      card('Checkpoints', null, checkpoints),
      card('Spec', null, tableWrap(spec, 'The effective spec'))));

  const final = () => job && FINAL_STATES.has(job.state);
  const mayCancel = () => job && !final() &&
    (s.role === 'admin' || s.role === 'user');   // a user sees only their own jobs

  function renderJob() {
    document.title = `${job.id} ${job.name} · larch`;
    title.replaceChildren(h('span', { class: 'mono' }, job.id), h('span', { class: 'sep' }, ' · '),
                          h('span', { class: 'job-name' }, job.name || ''));
    badgeBox.replaceChildren(stateBadge(job.state, 'job-state'));
    actions.replaceChildren();
    if (mayCancel())
      actions.append(h('button', { type: 'button', class: 'btn btn-danger', onclick: cancel,
                                   dataset: { testid: 'cancel-button' } }, 'Cancel job'));
    const started = job.started_at ? Date.parse(job.started_at) : null;
    const ended = job.ended_at ? Date.parse(job.ended_at) : null;
    const run = started ? (ended || Date.now()) - started : null;
    const rows = [
      ['Owner', job.run_as && job.run_as !== job.owner ? `${job.owner} (runs as ${job.run_as})`
                                                         : job.owner],
      ['Executor', job.slurm_job_id ? `${job.executor} (Slurm job ${job.slurm_job_id})` : job.executor],
      ['Partition', partition(job) || '—'],
      ['Ranks', ranks(job) === null ? '—' : String(ranks(job))],
      ['Priority', String(job.priority ?? '—')],
      ['Attempt', String(job.attempt ?? '—')],
      ['Submitted', timeEl(job.created_at)],
      ['Started', timeEl(job.started_at)],
      ['Ended', timeEl(job.ended_at)],
      ['Run time', fmtDuration(run)],
      ['Progress', progressCell(job)],
      ['Exit code', job.exit_code === null || job.exit_code === undefined ? '—' : String(job.exit_code)],
      ['Reason', job.reason || '—'],
    ];
    if (job.sweep)
      rows.splice(1, 0, ['Sweep', [h('a', { href: `#/sweeps/${job.sweep}`, class: 'mono',
                                            dataset: { testid: 'job-sweep' } },
                                    `${job.sweep} #${job.sweep_index}`),
                                  ' ', h('span', { class: 'mono small' },
                                         Object.entries(job.params || {})
                                           .map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(' '))]]);
    summary.replaceChildren(...rows.flatMap(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
    const text = JSON.stringify(job.spec, null, 2);
    if (spec.textContent !== text)
      spec.textContent = text;
  }

  function renderEvents(events) {
    timeline.replaceChildren(...events.map((e) => {
      const note = e.from === e.to;
      return h('li', { class: note ? 'tl-item tl-note' : 'tl-item',
                       dataset: { testid: 'timeline-item', to: e.to, seq: e.seq } },
               h('span', { class: 'tl-dot', 'aria-hidden': 'true' }),
               h('div', { class: 'tl-body' },
                 h('div', { class: 'tl-head' },
                   note ? h('span', { class: 'tl-kind' }, 'note')
                        : [e.from ? stateBadge(e.from, 'tl-from') : null,
                           e.from ? h('span', { class: 'tl-arrow', 'aria-label': 'to' }, '→') : null,
                           stateBadge(e.to, 'tl-to')],
                   h('span', { class: 'tl-by muted' }, `by ${e.by || '—'}`),
                   h('span', { class: 'tl-time muted' }, timeEl(e.time))),
                 e.reason ? h('p', { class: 'tl-reason' }, e.reason) : null));
    }));
    if (!events.length)
      timeline.replaceChildren(h('li', { class: 'empty' }, 'No events.'));
  }

  function renderCheckpoints(list) {
    if (!list.length) {
      checkpoints.replaceChildren(empty(final() ? 'No checkpoints.' : 'No checkpoints yet.'));
      return;
    }
    const t = h('table', { class: 'table' },
                h('thead', null, h('tr', null, ['Step', 'Time', 'Size', 'SHA-256', 'Path']
                  .map((c) => h('th', { scope: 'col' }, c)))),
                h('tbody', null, [...list].reverse().map((c) => h('tr', { dataset: { step: c.step } },
                  h('td', { class: 'num' }, String(c.step)),
                  h('td', { class: 'nowrap' }, timeEl(c.time)),
                  h('td', { class: 'num nowrap' }, fmtBytes(c.bytes)),
                  h('td', { class: 'mono', title: c.sha256 }, `${String(c.sha256 || '').slice(0, 12)}…`),
                  h('td', { class: 'mono path' }, c.path)))));
    checkpoints.replaceChildren(tableWrap(t, 'Checkpoints'));
  }

  async function loadJob() {
    const r = await request('GET', `/v1/jobs/${id}`, { signal: ctx.signal });
    if (!r.changed && job)
      return false;
    const before = job && job.state;
    job = r.data;
    renderJob();
    if (before && before !== job.state)
      live.textContent = `${job.id} is now ${job.state}.`;
    return true;
  }

  async function loadEvents() {
    const r = await request('GET', `/v1/jobs/${id}/events`, { signal: ctx.signal });
    if (r.changed)
      renderEvents((r.data && r.data.events) || []);
  }

  async function loadCheckpoints() {
    const r = await request('GET', `/v1/jobs/${id}/checkpoints`, { signal: ctx.signal });
    if (r.changed)
      renderCheckpoints((r.data && r.data.checkpoints) || []);
  }

  const guard = (fn, what) => async () => {
    try {
      await fn();
    } catch (e) {
      ctx.fail(e, what);
    }
  };
  const refreshJob = coalesce(guard(async () => {
    const wasFinal = final();
    await loadJob();
    await Promise.all([loadEvents(), loadCheckpoints()]);
    if (final() && !wasFinal) {     // one last look at what the end wrote
      logs.setFinal(true);
      await Promise.all([refreshMetrics(), refreshLogs()]);
    }
  }, 'Job'));
  const refreshMetrics = coalesce(guard(() => metrics.refresh(), 'Metrics'));
  const refreshLogs = coalesce(guard(() => logs.refresh(), 'Logs'));

  async function cancel() {
    const ok = await ask({ title: `Cancel ${job.id}?`,
                           message: `${job.name} is ${job.state}. The trainer is asked to stop ` +
                                    '(SIGTERM, time to checkpoint, then SIGKILL).',
                           confirm: 'Cancel job', dismiss: 'Keep it', danger: true });
    if (!ok)
      return;
    try {
      const r = await request('POST', `/v1/jobs/${id}/cancel`, { signal: ctx.signal });
      job = r.data;
      renderJob();
      notify(`${id}: cancel requested (${job.state})`);
      refreshJob();
    } catch (e) {
      ctx.fail(e, 'Cancel');
    }
  }

  (async () => {
    // the charts' read is the page's longest: it starts with the job's
    // (its failure is reported once the job is known to exist)
    const firstMetrics = metrics.refresh().then(() => null, (e) => e);
    try {
      await loadJob();
    } catch (e) {
      if (e.status === 404) {
        main.replaceChildren(h('section', { class: 'card narrow', dataset: { testid: 'not-found' } },
                               h('h1', null, `No job ${id}`),
                               h('p', null, e.message),
                               h('p', null, h('a', { href: '#/jobs' }, 'Back to the jobs'))));
        return;
      }
      ctx.fail(e, 'Job');
      return;
    }
    logs.setFinal(final());
    ctx.onChanges((batch) => {
      if (!batch.changes || batch.reset || batch.changes.some((c) => c.job === id))
        refreshJob();
    });
    ctx.every(JOB_MS, () => {       // in case the feed is down: a 304 while nothing changes
      if (!final())
        refreshJob();
    });
    await Promise.all([guard(loadEvents, 'Timeline')(), guard(loadCheckpoints, 'Checkpoints')(),
                       firstMetrics.then((e) => e && ctx.fail(e, 'Metrics')), refreshLogs()]);
    ctx.every(METRICS_MS, () => {
      if (!final())
        refreshMetrics();
    });
    ctx.every(LOGS_MS, () => {
      if (!final() && logs.following())
        refreshLogs();
    });
  })();
}
