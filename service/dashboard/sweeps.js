// service/dashboard/sweeps.js - the sweeps (docs/api.md "Sweeps"): the list
// (#/sweeps: GET /v1/sweeps, a user's own, an admin's everyone's, with their
// state and counts by state) and a sweep's page (#/sweeps/s-000001: its
// definition, counts, Cancel, the children's table sorted by the target,
// the overlay of the children's curves from compare.js and, for a
// batch_scaling study, the study's section from study.js). Both follow
// the change feed (a child's state change is a job change) and revalidate
// every few seconds while the sweep runs, since a child's best value moves
// without a state change.
import { request } from './api.js';
import { metricOverlay } from './compare.js';
import { studyPanel } from './study.js';
import { FINAL_STATES, STATES, ask, card, coalesce, empty, fmtClock, fmtNum, h, notify,
         pager, stateBadge, tableWrap, timeEl } from './ui.js';

const REFRESH_MS = 5000;
const LIST_LIMIT = 50;
const OVERLAY_MAX = 16;       // compare_max_jobs' default: GET /v1/metrics takes no more
const REASON_CHARS = 80;
export const SWEEP_FINAL = new Set(['COMPLETED', 'FAILED', 'CANCELLED']);

// "val/accuracy ≥ 0.88" or "—".
export function targetText(t) {
  if (!t || !t.metric)
    return '—';
  return `${t.metric} ${t.mode === 'min' ? '≤' : '≥'} ${fmtNum(t.value)}`;
}

// The states a sweep's children are in, as badges with their counts (the
// states with none left out).
function countBadges(counts, early) {
  const out = STATES.filter((s) => counts && counts[s] > 0).map((s) =>
    h('span', { class: 'count', dataset: { testid: 'sweep-count', state: s, n: counts[s] } },
      stateBadge(s), h('span', { class: 'count-n' }, String(counts[s]))));
  if (early > 0)
    out.push(h('span', { class: 'count muted small', dataset: { testid: 'sweep-early' } },
               `${early} early-stopped`));
  return out.length ? out : h('span', { class: 'muted' }, '—');
}

// The children in the target's order: those that reached it first, then
// by their best value (the highest first for mode max, the lowest for min),
// those without a value last, then by index. Without a target: by index.
export function byTarget(children, target) {
  const dir = target && target.mode === 'min' ? 1 : -1;
  const has = (v) => v !== null && v !== undefined && Number.isFinite(v);
  return [...children].sort((a, b) => {
    if (target && target.metric) {
      const ra = has(a.steps_to_target) ? 0 : 1;
      const rb = has(b.steps_to_target) ? 0 : 1;
      if (ra !== rb)
        return ra - rb;
      const ba = has(a.best);
      const bb = has(b.best);
      if (ba !== bb)
        return ba ? -1 : 1;
      if (ba && a.best !== b.best)
        return (a.best - b.best) * dir;
    }
    return a.index - b.index;
  });
}

function shown(v) {
  return v === undefined || v === null ? '—' : typeof v === 'string' ? v : JSON.stringify(v);
}

function notFound(main, what, e, back, backText) {
  main.replaceChildren(h('section', { class: 'card narrow', dataset: { testid: 'not-found' } },
                         h('h1', null, what), h('p', null, e.message),
                         h('p', null, h('a', { href: back }, backText))));
}

// ---- #/sweeps ------------------------------------------------------------------

export function sweepsView(main, ctx) {
  const admin = ctx.session.role === 'admin';
  const pages = pager(() => {
    loaded = false;
    refresh();
  });
  let sweeps = [];
  let loaded = false;

  const tbody = h('tbody');
  const table = h('table', { class: 'table sweeps-table', dataset: { testid: 'sweeps-table' } },
                  h('caption', { class: 'visually-hidden' }, 'Sweeps, newest first'),
                  h('thead', null, h('tr', null,
                    ['ID', 'Name', admin ? 'Owner' : null, 'State', 'Children', 'By state', 'Target',
                     'Created'].filter(Boolean).map((c) => h('th', { scope: 'col' }, c)))),
                  tbody);
  const wrap = tableWrap(table, 'Sweeps table');
  const emptyMsg = empty('No sweeps yet: submit one with larch sweep submit sweep.json.');
  emptyMsg.hidden = true;
  const count = h('span', { class: 'muted', dataset: { testid: 'sweeps-count' } });
  const updated = h('span', { class: 'muted small' });

  main.append(
    h('div', { class: 'page-head' }, h('h1', null, 'Sweeps'),
      h('div', { class: 'page-meta' }, count, updated)),
    h('section', { class: 'card', 'aria-label': 'Sweeps' }, emptyMsg, wrap,
      h('nav', { class: 'pager', 'aria-label': 'Pages' }, pages.prev, pages.older)));

  function row(s) {
    return h('tr', { dataset: { testid: 'sweep-row', sweepId: s.id, state: s.state } },
             h('td', { class: 'nowrap' }, h('a', { href: `#/sweeps/${s.id}`, class: 'mono' }, s.id)),
             h('td', null, h('span', { class: 'cell-text' }, s.name || '—')),
             admin ? h('td', null, s.owner || '—') : null,
             h('td', null, stateBadge(s.state)),
             h('td', { class: 'num' }, String(s.children_count ?? '—')),
             h('td', { class: 'counts' }, countBadges(s.counts, s.early_stopped)),
             h('td', { class: 'mono small' }, targetText(s.target)),
             h('td', { class: 'nowrap' }, timeEl(s.created_at)));
  }

  async function load() {
    const p = new URLSearchParams({ limit: LIST_LIMIT });
    if (pages.cursor)
      p.set('cursor', pages.cursor);
    try {
      const r = await request('GET', `/v1/sweeps?${p}`, { signal: ctx.signal });
      if (!r.changed && loaded)
        return;
      loaded = true;
      sweeps = (r.data && r.data.sweeps) || [];
      emptyMsg.hidden = sweeps.length > 0 || pages.page > 1;
      wrap.hidden = !sweeps.length;
      tbody.replaceChildren(...sweeps.map(row));
      pages.update(r.data && r.data.next_cursor);
      count.textContent = `${sweeps.length} sweep${sweeps.length === 1 ? '' : 's'} on this page`;
      updated.textContent = `· updated ${fmtClock(new Date())}`;
    } catch (e) {
      ctx.fail(e, 'Sweeps');
    }
  }

  const refresh = coalesce(load);
  refresh();
  ctx.onChanges(() => refresh());
  ctx.every(REFRESH_MS, () => {
    if (sweeps.some((s) => !SWEEP_FINAL.has(s.state)))
      refresh();
  });
}

// ---- #/sweeps/s-000001 -----------------------------------------------------------

function definitionRows(s) {
  const d = s.definition || {};
  const axes = d.axes && typeof d.axes === 'object' ? d.axes : {};
  const study = d.kind === 'batch_scaling';
  const method = study ? 'batch-scaling study'
    : s.method === 'random' ? `random: ${d.samples ?? '?'} samples, seed ${d.seed ?? 0}` : (s.method || 'grid');
  const es = d.early_stop;
  const labels = Object.entries(s.labels || {}).map(([k, v]) => `${k}:${v}`).join(' ');
  return [
    ['Owner', s.owner || '—'],
    ['Created', timeEl(s.created_at)],
    ['Method', method],
    study ? ['Batch sizes', h('span', { class: 'mono', dataset: { testid: 'sweep-batch-sizes' } },
                              (Array.isArray(d.batch_sizes) ? d.batch_sizes : []).map(shown).join(', '))]
      : ['Axes', h('ul', { class: 'axes', dataset: { testid: 'sweep-axes' } },
                 Object.entries(axes).map(([path, values]) =>
                   h('li', { dataset: { path } }, h('span', { class: 'mono' }, path), ': ',
                     h('span', { class: 'mono' }, (Array.isArray(values) ? values : [values])
                       .map(shown).join(', ')))))],
    ['Max parallel', s.max_parallel ? String(s.max_parallel) : 'no limit'],
    ['Target', targetText(s.target)],
    ['Early stop', es ? `${es.rule}, after ${fmtNum(es.after_steps)} steps` : '—'],
    ['Labels', labels || '—'],
    ['Children', String(s.children_count ?? '—')],
  ];
}

export function sweepView(main, ctx) {
  const id = ctx.params[0];
  const s = ctx.session;
  let sweep = null;

  const title = h('h1', { class: 'job-title', dataset: { testid: 'sweep-title' } }, id);
  const badgeBox = h('span', { class: 'job-state' });
  const actions = h('div', { class: 'page-actions' });
  const live = h('p', { class: 'visually-hidden', 'aria-live': 'polite', dataset: { testid: 'sweep-live' } });
  const counts = h('div', { class: 'counts', dataset: { testid: 'sweep-counts' } });
  const definition = h('dl', { class: 'summary', dataset: { testid: 'sweep-definition' } });
  const children = h('div', { dataset: { testid: 'sweep-children' } });
  // sweep.study (a batch_scaling study): its section (study.js), made on
  // the first read that has one and updated by render() on every read
  const studyBox = h('div', { class: 'study-box', dataset: { testid: 'sweep-study' } });
  let study = null;
  let plot = null;               // the overlay, once the sweep (its target) is known

  const plotCard = card('Curves', { dataset: { testid: 'sweep-curves' } });
  main.append(
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' },
      h('a', { href: '#/sweeps' }, 'Sweeps'), h('span', { 'aria-hidden': 'true' }, ' / '),
      h('span', { 'aria-current': 'page' }, id)),
    h('div', { class: 'page-head' }, h('div', { class: 'title-row' }, title, badgeBox), actions),
    live,
    h('div', { class: 'grid-2' },
      card('Definition', null, definition),
      card('Children by state', { actions: h('a', { href: `#/jobs?sweep=${id}` }, 'In the jobs list') },
           counts)),
    studyBox,
    card('Children', null, children),
    plotCard);

  const final = () => sweep && SWEEP_FINAL.has(sweep.state);

  // The children's table, sorted by the target; a column per axis.
  function renderChildren() {
    const list = byTarget(sweep.children || [], sweep.target);
    if (!list.length) {
      children.replaceChildren(empty('This sweep has no children.'));
      return;
    }
    const axes = Object.keys((sweep.definition && sweep.definition.axes) ||
                             (list[0] && list[0].params) || {});
    // a Slurm column (the child's task of the array, "<array>_<task>") where
    // the children went to Slurm
    const slurm = list.some((c) => c.slurm_job_id);
    const lead = slurm ? ['#', 'Job', 'Slurm'] : ['#', 'Job'];
    const cols = [...lead, ...axes, 'State', 'Step', 'Best', 'Steps to target',
                  'Examples to target', 'Seconds to target'];
    const num = (v, f = fmtNum) => h('td', { class: 'num' }, v === null || v === undefined ? '—' : f(v));
    const t = h('table', { class: 'table children-table', dataset: { testid: 'children-table' } },
                h('caption', { class: 'visually-hidden' },
                  sweep.target ? `Children, by ${targetText(sweep.target)}` : 'Children, by index'),
                h('thead', null, h('tr', null, cols.map((c, i) =>
                  h('th', { scope: 'col', class: i >= lead.length && i < lead.length + axes.length
                    ? 'mono' : null }, c)))),
                h('tbody', null, list.map((c) => {
                  const why = c.reason && c.state !== 'COMPLETED' ? String(c.reason) : '';
                  return h('tr', { dataset: { testid: 'child-row', index: c.index, jobId: c.job,
                                              state: c.state } },
                           h('td', { class: 'num' }, String(c.index)),
                           h('td', { class: 'nowrap' }, h('a', { href: `#/jobs/${c.job}`, class: 'mono' }, c.job)),
                           slurm ? h('td', { class: 'mono nowrap', dataset: { testid: 'child-slurm' } },
                                     c.slurm_job_id || '—') : null,
                           axes.map((a) => h('td', { class: 'mono', dataset: { axis: a } },
                                             shown(c.params && c.params[a]))),
                           h('td', null, stateBadge(c.state),
                             why ? h('span', { class: 'state-reason muted small', title: why,
                                               dataset: { testid: 'state-reason' } },
                                     why.length > REASON_CHARS ? `${why.slice(0, REASON_CHARS - 1)}…` : why)
                               : null),
                           num(c.step), num(c.best), num(c.steps_to_target),
                           num(c.examples_to_target),
                           num(c.seconds_to_target, (v) => v.toFixed(1)));
                })));
    children.replaceChildren(tableWrap(t, 'Children'));
  }

  function render() {
    document.title = `${sweep.id} ${sweep.name} · larch`;
    title.replaceChildren(h('span', { class: 'mono' }, sweep.id), h('span', { class: 'sep' }, ' · '),
                          h('span', { class: 'job-name' }, sweep.name || ''));
    badgeBox.replaceChildren(stateBadge(sweep.state, 'sweep-state'));
    actions.replaceChildren();
    // a user sees only their own sweeps: whoever sees a running one may cancel it
    if (!final() && (s.role === 'admin' || s.role === 'user'))
      actions.append(h('button', { type: 'button', class: 'btn btn-danger', onclick: cancel,
                                   dataset: { testid: 'cancel-button' } }, 'Cancel sweep'));
    counts.replaceChildren(...[countBadges(sweep.counts, sweep.early_stopped)].flat());
    definition.replaceChildren(...definitionRows(sweep).flatMap(([k, v]) =>
      [h('dt', null, k), h('dd', null, v)]));
    renderChildren();
    if (sweep.study && !study) {
      study = studyPanel(ctx);
      studyBox.replaceChildren(study.el);
    }
    if (study)
      study.update(sweep);
  }

  // The overlay: the first OVERLAY_MAX children in the table's order.
  function plotted() {
    return byTarget(sweep.children || [], sweep.target).slice(0, OVERLAY_MAX);
  }

  function makePlot() {
    const byJob = new Map((sweep.children || []).map((c) => [c.job, c]));
    const axes = Object.keys((sweep.definition && sweep.definition.axes) || {});
    const label = (e) => {
      const c = byJob.get(e.id);
      if (!c)
        return `${e.id} ${e.name}`;
      return `#${c.index} ${axes.map((a) => `${a}=${shown(c.params && c.params[a])}`).join(' ')}`;
    };
    const n = (sweep.children || []).length;
    plot = metricOverlay(ctx, { name: sweep.target ? sweep.target.metric : '', keepName: true, label,
                                none: 'The children have reported no metrics yet.' });
    if (n > OVERLAY_MAX)
      plotCard.append(h('p', { class: 'muted small', dataset: { testid: 'sweep-curves-note' } },
                        `The first ${OVERLAY_MAX} of ${n} children in the table's order.`));
    plotCard.append(plot.el);
  }

  async function load() {
    const r = await request('GET', `/v1/sweeps/${id}`, { signal: ctx.signal });
    if (!r.changed && sweep)
      return false;
    const before = sweep && sweep.state;
    sweep = r.data;
    render();
    if (before && before !== sweep.state)
      live.textContent = `${sweep.id} is now ${sweep.state}.`;
    return true;
  }

  const refresh = coalesce(async () => {
    try {
      if (await load() && plot)
        await plot.setJobs(plotted().map((c) => c.job));
    } catch (e) {
      ctx.fail(e, 'Sweep');
    }
  });

  async function cancel() {
    const waiting = (sweep.children || []).filter((c) => !FINAL_STATES.has(c.state)).length;
    const ok = await ask({ title: `Cancel ${sweep.id}?`,
                           message: `${sweep.name}: ${waiting} of its ${sweep.children_count} children ` +
                                    'have not ended; they are cancelled (the running ones are asked ' +
                                    'to stop). Children that ended stay as they are.',
                           confirm: 'Cancel sweep', dismiss: 'Keep it', danger: true });
    if (!ok)
      return;
    try {
      const r = await request('POST', `/v1/sweeps/${id}/cancel`, { signal: ctx.signal });
      sweep = r.data;
      render();
      notify(`${id}: cancel requested`);
      refresh();
    } catch (e) {
      ctx.fail(e, 'Cancel');
    }
  }

  (async () => {
    try {
      await load();
    } catch (e) {
      if (e.status === 404) {
        notFound(main, `No sweep ${id}`, e, '#/sweeps', 'Back to the sweeps');
        return;
      }
      ctx.fail(e, 'Sweep');
      return;
    }
    makePlot();
    ctx.onChanges((batch) => {
      const mine = new Set((sweep.children || []).map((c) => c.job));
      if (!batch.changes || batch.reset || batch.changes.some((c) => mine.has(c.job)))
        refresh();
    });
    ctx.every(REFRESH_MS, () => {
      if (!final())
        refresh();
    });
    try {
      await plot.setJobs(plotted().map((c) => c.job));
    } catch (e) {
      ctx.fail(e, 'Curves');
    }
  })();
}
