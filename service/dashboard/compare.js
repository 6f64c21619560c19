// service/dashboard/compare.js - comparing runs (#/compare?jobs=j-000001,
// j-000002&name=val/loss&x=step): the jobs' curves of one metric overlaid
// in one chart, against step, examples seen or wall time since each job
// started (GET /v1/metrics, docs/api.md "Comparing runs"), a metric picker
// over the union of the jobs' series names, and a table of the spec fields
// that differ between the jobs, as dotted paths. Jobs come from the jobs
// page's checkboxes. A job the user may not read shows as not found.
// metricOverlay (the picker and the chart) is the sweep page's too.
import { request } from './api.js';
import { fractionAxis, palette } from './charts.js';
import { card, coalesce, empty, h, stateBadge, tableWrap } from './ui.js';

const JOB_RE = /^j-\d{6,}$/;
export const XS = [['step', 'Step'], ['examples', 'Examples seen'], ['time', 'Seconds since start']];

// The spec's leaves as {dotted.path: value}; arrays are leaves.
export function flatten(v, prefix = '', out = {}) {
  if (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length) {
    for (const [k, c] of Object.entries(v))
      flatten(c, prefix ? `${prefix}.${k}` : k, out);
  } else if (prefix) {
    out[prefix] = v;
  }
  return out;
}

// The paths whose values are not the same in every spec (the name aside:
// the legend has it), sorted.
export function differingPaths(specs) {
  const flat = specs.map((s) => flatten(s || {}));
  const paths = new Set(flat.flatMap((f) => Object.keys(f)));
  paths.delete('name');
  return [...paths].sort().filter((p) => {
    const texts = flat.map((f) => JSON.stringify(f[p]));
    return texts.some((t) => t !== texts[0]);
  });
}

function shown(v) {
  return v === undefined ? '—' : typeof v === 'string' ? v : JSON.stringify(v);
}

// The overlay of several jobs' curves of one metric: a metric picker over
// the union of their series names, what to plot against, a status line and
// the chart (GET /v1/metrics). opts: name and x (the first choice; a name
// no job has falls back to a val/loss, a loss, the first name, unless
// keepName), onPick(name, x) (on each choice, to keep the address),
// label(entry) (a job's legend text; default "id name"), none (the status
// while the jobs have no metrics). The page puts .el where it wants it and
// calls setJobs(ids), again whenever the jobs or their metrics may have
// changed (the user's choice stays). The chart goes with the page.
export function metricOverlay(ctx, opts = {}) {
  let ids = [];
  let name = opts.name || '';
  let x = XS.some(([v]) => v === opts.x) ? opts.x : 'step';
  const label = opts.label || ((e) => `${e.id} ${e.name}`);
  let chart = null;
  let names = [];
  let group = 0;                 // jobs per GET /v1/metrics (0: all at once)

  const metricSel = h('select', { id: 'cmp-metric', class: 'input', dataset: { testid: 'compare-metric' } });
  const xSel = h('select', { id: 'cmp-x', class: 'input', dataset: { testid: 'compare-x' } },
                 XS.map(([v, text]) => h('option', { value: v }, text)));
  xSel.value = x;
  const status = h('p', { class: 'muted small', 'aria-live': 'polite', dataset: { testid: 'compare-status' } });
  const canvas = h('canvas', { role: 'img', 'aria-label': 'The jobs\' curves' });
  const figure = h('figure', { class: 'chart', dataset: { testid: 'compare-chart', points: 0 } },
                   h('div', { class: 'chart-box compare-box' }, canvas));
  const el = h('div', { class: 'overlay' },
               h('form', { class: 'filters', 'aria-label': 'What to plot' },
                 h('div', { class: 'field' }, h('label', { for: 'cmp-metric', class: 'label' }, 'Metric'), metricSel),
                 h('div', { class: 'field' }, h('label', { for: 'cmp-x', class: 'label' }, 'Against'), xSel)),
               status, figure);
  ctx.onCleanup(() => {
    if (chart)
      chart.destroy();
  });

  // The union of the jobs' series names (each job's last points: cheap).
  async function loadNames() {
    const found = new Set();
    await Promise.all(ids.map(async (id) => {
      const r = await request('GET', `/v1/jobs/${id}/metrics?max_points=1`, { signal: ctx.signal });
      for (const n of Object.keys((r.data && r.data.series) || {}))
        found.add(n);
    }));
    return [...found].sort();
  }

  // The jobs' entries of GET /v1/metrics, in the order of ids. A larchd
  // whose compare_max_jobs is below ids.length answers 400 (jobs): then
  // in smaller groups, halved until one is taken (and kept for next time).
  async function fetchMetric(max) {
    for (;;) {
      const size = Math.min(group || ids.length, ids.length);
      try {
        const out = [];
        for (let i = 0; i < ids.length; i += size) {
          const p = new URLSearchParams({ jobs: ids.slice(i, i + size).join(','), name, x, max_points: max });
          const r = await request('GET', `/v1/metrics?${p}`, { signal: ctx.signal });
          out.push(...((r.data && r.data.jobs) || []));
        }
        return out;
      } catch (e) {
        if (!(e.status === 400 && e.detail && e.detail.parameter === 'jobs' && size > 1))
          throw e;
        group = Math.ceil(size / 2);
      }
    }
  }

  async function draw() {
    if (!name || !ids.length)
      return;
    const max = Math.max(200, Math.min(2000, Math.round((figure.clientWidth || 800) *
                                                        (window.devicePixelRatio || 1))));
    const colors = palette();
    const entries = (await fetchMetric(max)).filter((e) => !e.error);
    const sets = entries.map((e, i) => {
      const color = colors.series[i % colors.series.length];
      const pts = e.points || [];
      return { label: label(e), data: pts.map((q) => ({ x: q[0], y: q[1] })),
               borderColor: color, backgroundColor: color, borderWidth: 1.5,
               pointRadius: pts.length === 1 ? 3 : 0, pointHoverRadius: 3, tension: 0 };
    });
    const counts = entries.map((e) => `${e.id}:${(e.points || []).length}`);
    figure.dataset.series = counts.join(' ');
    figure.dataset.points = String(entries.reduce((n, e) => n + (e.points || []).length, 0));
    figure.dataset.x = x;
    figure.dataset.name = name;
    const without = entries.filter((e) => !(e.points || []).length).map((e) => e.id);
    status.textContent = `${name} of ${entries.length} jobs against ${XS.find(([v]) => v === x)[1].toLowerCase()}` +
      (without.length ? `; no points: ${without.join(', ')}` : '');
    if (!window.Chart) {
      status.textContent += ' (charts are unavailable: /vendor/chart.js did not load)';
      return;
    }
    const axis = (title) => ({ type: 'linear', grid: { color: colors.grid, borderColor: colors.grid },
                               ticks: { color: colors.text, maxTicksLimit: 8 },
                               title: { display: !!title, text: title || '', color: colors.text } });
    const y = axis(name);
    if (/(^|[/_])acc(uracy)?$/.test(name)) {
      const lim = fractionAxis(sets);
      if (lim)
        Object.assign(y, lim);
    }
    const options = {
      animation: false, parsing: false, normalized: true, responsive: true,
      maintainAspectRatio: false, interaction: { mode: 'nearest', axis: 'x', intersect: false },
      scales: { x: axis(XS.find(([v]) => v === x)[1].toLowerCase()), y },
      plugins: { legend: { labels: { color: colors.text, boxWidth: 12, boxHeight: 2 } },
                 decimation: { enabled: false } },
    };
    if (chart) {
      chart.data.datasets = sets;
      chart.options = options;
      chart.update('none');
    } else {
      chart = new window.Chart(canvas, { type: 'line', data: { datasets: sets }, options });
    }
    canvas.setAttribute('aria-label', `${name} of ${counts.join(', ')}`);
    document.body.dataset.compareReady = `${name} ${x}`;
  }

  const redraw = coalesce(() => draw().catch((e) => ctx.fail(e, 'Chart')));
  function picked() {
    if (opts.onPick)
      opts.onPick(name, x);
    redraw();
  }
  metricSel.addEventListener('change', () => {
    name = metricSel.value;
    picked();
  });
  xSel.addEventListener('change', () => {
    x = xSel.value;
    picked();
  });

  async function setJobs(list) {
    ids = [...list];
    if (!ids.length) {
      status.textContent = opts.none || 'No jobs to plot.';
      return;
    }
    const now = await loadNames();
    if (!now.length) {
      status.textContent = opts.none || 'These jobs have reported no metrics yet.';
      return;
    }
    if (!now.includes(name) && !(opts.keepName && name === opts.name))
      name = now.find((n) => /(^|\/)val\/loss$/.test(n)) || now.find((n) => /loss$/.test(n)) || now[0];
    const offered = now.includes(name) ? now : [...now, name].sort();
    if (offered.join('\n') !== names.join('\n')) {
      names = offered;
      metricSel.replaceChildren(...names.map((n) => h('option', { value: n }, n)));
    }
    metricSel.value = name;
    if (opts.onPick)
      opts.onPick(name, x);
    await draw();
  }

  return { el, setJobs, status };
}

export function compareView(main, ctx) {
  const ids = [...new Set((ctx.query.get('jobs') || '').split(',').filter((s) => JOB_RE.test(s)))];
  const jobs = new Map();        // id -> the job, or null when not found

  function syncHash(name, x) {
    const p = new URLSearchParams({ jobs: ids.join(',') });
    if (name)
      p.set('name', name);
    if (x !== 'step')
      p.set('x', x);
    history.replaceState(null, '', `#/compare?${p.toString().replace(/%2C/g, ',').replace(/%2F/g, '/')}`);
  }

  const plot = metricOverlay(ctx, { name: ctx.query.get('name') || '', x: ctx.query.get('x'),
                                    onPick: syncHash });
  const diffBox = h('div', { dataset: { testid: 'compare-diff' } });
  const jobList = h('ul', { class: 'compare-jobs', dataset: { testid: 'compare-jobs' } });

  main.append(
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' },
      h('a', { href: '#/jobs' }, 'Jobs'), h('span', { 'aria-hidden': 'true' }, ' / '),
      h('span', { 'aria-current': 'page' }, 'Compare')),
    h('div', { class: 'page-head' }, h('h1', null, `Compare ${ids.length} jobs`)),
    card('Jobs', null, jobList),
    card('Metric', null, plot.el),
    card('Differing spec fields', null, diffBox));

  if (ids.length < 2) {
    plot.status.textContent = 'Pick two or more jobs on the jobs page (the checkboxes).';
    return;
  }

  function renderJobs() {
    jobList.replaceChildren(...ids.map((id) => {
      const j = jobs.get(id);
      return h('li', { dataset: { testid: 'compare-job', jobId: id } },
               h('a', { href: `#/jobs/${id}`, class: 'mono' }, id), ' ',
               j ? [j.name, ' ', stateBadge(j.state)] : h('span', { class: 'muted' }, 'not found'));
    }));
  }

  function renderDiff() {
    const found = ids.filter((id) => jobs.get(id));
    const paths = differingPaths(found.map((id) => jobs.get(id).spec));
    if (!paths.length) {
      diffBox.replaceChildren(empty('Their specs are the same (but for the name).'));
      return;
    }
    const table = h('table', { class: 'table' },
                    h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'Field'),
                                       found.map((id) => h('th', { scope: 'col', class: 'mono' }, id)))),
                    h('tbody', null, paths.map((p) => {
                      const flat = found.map((id) => flatten(jobs.get(id).spec || {}));
                      return h('tr', { dataset: { testid: 'diff-row', path: p } },
                               h('th', { scope: 'row', class: 'mono' }, p),
                               flat.map((f) => h('td', { class: 'mono' }, shown(f[p]))));
                    })));
    diffBox.replaceChildren(tableWrap(table, 'Differing spec fields'));
  }

  async function loadJobs() {
    await Promise.all(ids.map(async (id) => {
      try {
        jobs.set(id, (await request('GET', `/v1/jobs/${id}`, { signal: ctx.signal })).data);
      } catch (e) {
        if (e.status !== 404)
          throw e;
        jobs.set(id, null);
      }
    }));
  }

  (async () => {
    await loadJobs();
    renderJobs();
    renderDiff();
    await plot.setJobs(ids.filter((id) => jobs.get(id)));
  })().catch((e) => ctx.fail(e, 'Compare'));
}
