// service/dashboard/jobs.js - the jobs page (#/jobs?state=&name=&owner=&sweep=
// &label=&limit=): a table of GET /v1/jobs with filters, client-side sorting
// of the page, the API's cursor paging, and live updates from the change
// feed. Checked rows (kept across pages) open the compare page
// (compare.js); a sweep's child links to its sweep (sweeps.js).
import { request } from './api.js';
import { FINAL_STATES, STATES, coalesce, empty, fmtClock, fmtNum, h, pager, stateBadge,
         tableWrap, timeEl } from './ui.js';

const LIMITS = [25, 50, 100, 200];
const REFRESH_MS = 5000;  // progress of running jobs (cheap: 304 when unchanged)
const REASON_CHARS = 80;  // of a job's reason under its state; the title has it all
const FAILED_STATES = new Set(['FAILED', 'CANCELLED', 'TIMEOUT']);

const COLUMNS = [
  { key: 'id', label: 'ID', value: (j) => j.id },
  { key: 'name', label: 'Name', value: (j) => j.name },
  { key: 'owner', label: 'Owner', value: (j) => j.owner },
  { key: 'state', label: 'State', value: (j) => j.state },
  { key: 'partition', label: 'Partition', value: partition },
  { key: 'ranks', label: 'Ranks', value: ranks, num: true, right: true },
  { key: 'created_at', label: 'Submitted', value: (j) => j.created_at },
  { key: 'started_at', label: 'Started', value: (j) => j.started_at },
  { key: 'ended_at', label: 'Ended', value: (j) => j.ended_at },
  { key: 'progress', label: 'Progress', value: progressRatio, num: true },
];

// The job's partition: the one Slurm put it in (or an admin's, or the
// spec's), else the spec's; "local" for the local executor.
export function partition(job) {
  if (job.partition)
    return job.partition;
  const r = job.spec && job.spec.resources;
  if (r && r.partition)
    return r.partition;
  return job.executor === 'local' ? 'local' : null;
}

// The state badge, and under it why a job that did not complete ended.
function stateCell(job) {
  const why = FAILED_STATES.has(job.state) && job.reason ? String(job.reason) : '';
  if (!why)
    return stateBadge(job.state);
  const short = why.length > REASON_CHARS ? `${why.slice(0, REASON_CHARS - 1)}…` : why;
  return [stateBadge(job.state),
          h('span', { class: 'state-reason muted small', title: why,
                      dataset: { testid: 'state-reason' } }, short)];
}

export function ranks(job) {
  const p = job.spec && job.spec.parallel;
  return p && Number.isFinite(p.ranks) ? p.ranks : null;
}

function progressRatio(job) {
  const p = job.progress;
  if (!p || !Number.isFinite(p.step))
    return null;
  const total = p.total_steps || (job.spec && job.spec.steps);
  return total ? p.step / total : p.step;
}

// <progress> with "step / total" and the last train/loss, or a dash.
export function progressCell(job) {
  const p = job.progress;
  if (!p || !Number.isFinite(p.step) || (p.step === 0 && !FINAL_STATES.has(job.state) &&
                                         job.state !== 'RUNNING'))
    return h('span', { class: 'muted' }, '—');
  const total = p.total_steps || (job.spec && job.spec.steps) || null;
  const text = total ? `${fmtNum(p.step)} / ${fmtNum(total)}` : `step ${fmtNum(p.step)}`;
  const loss = p['train/loss'];
  return h('div', { class: 'progress-cell', dataset: { testid: 'progress', step: p.step } },
           total ? h('progress', { max: total, value: Math.min(p.step, total),
                                   'aria-label': `step ${p.step} of ${total}` }) : null,
           h('span', { class: 'progress-text' }, text),
           loss !== null && loss !== undefined
             ? h('span', { class: 'progress-loss muted' }, `loss ${fmtNum(loss)}`) : null);
}

// The page size of the address (1..500, the API's range), else 50.
function pageSize(text) {
  const n = Number(text);
  return Number.isInteger(n) && n >= 1 && n <= 500 ? n : 50;
}

function compare(col, dir) {
  return (a, b) => {
    const x = col.value(a);
    const y = col.value(b);
    if (x === y)
      return 0;
    if (x === null || x === undefined)
      return 1;                       // blanks last, either way
    if (y === null || y === undefined)
      return -1;
    const r = col.num ? x - y : String(x).localeCompare(String(y), 'en', { numeric: true });
    return r * dir;
  };
}

export function jobsView(main, ctx) {
  const admin = ctx.session.role === 'admin';
  const q = ctx.query;
  const filters = {
    state: STATES.includes(q.get('state')) ? q.get('state') : '',
    name: q.get('name') || '',
    owner: admin ? q.get('owner') || '' : '',
    sweep: q.get('sweep') || '',
    label: q.get('label') || '',
    limit: pageSize(q.get('limit')),
  };
  const pages = pager(() => {
    loaded = false;
    refresh();
  });
  let jobs = [];
  let loaded = false;
  let sort = { key: null, dir: 1 };
  const seen = new Map();        // id -> the state shown last
  const selected = new Set();    // ids checked for comparing

  // ---- the filter form
  const stateSel = h('select', { id: 'f-state', class: 'input', dataset: { testid: 'filter-state' } },
                     h('option', { value: '' }, 'Any state'),
                     STATES.map((s) => h('option', { value: s }, s)));
  stateSel.value = filters.state;
  const nameIn = h('input', { id: 'f-name', class: 'input', type: 'search', value: filters.name,
                              autocomplete: 'off', placeholder: 'exact name',
                              dataset: { testid: 'filter-name' } });
  const ownerIn = admin
    ? h('input', { id: 'f-owner', class: 'input', type: 'search', value: filters.owner,
                   autocomplete: 'off', placeholder: 'user', dataset: { testid: 'filter-owner' } })
    : null;
  const sweepIn = h('input', { id: 'f-sweep', class: 'input', type: 'search', value: filters.sweep,
                               autocomplete: 'off', placeholder: 's-000001',
                               dataset: { testid: 'filter-sweep' } });
  const labelIn = h('input', { id: 'f-label', class: 'input', type: 'search', value: filters.label,
                               autocomplete: 'off', placeholder: 'key:value',
                               dataset: { testid: 'filter-label' } });
  const sizes = LIMITS.includes(filters.limit) ? LIMITS : [...LIMITS, filters.limit].sort((a, b) => a - b);
  const limitSel = h('select', { id: 'f-limit', class: 'input', dataset: { testid: 'filter-limit' } },
                     sizes.map((n) => h('option', { value: n }, String(n))));
  limitSel.value = String(filters.limit);
  const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter jobs',
                           dataset: { testid: 'jobs-filters' } },
                 field('f-state', 'State', stateSel),
                 field('f-name', 'Name', nameIn),
                 ownerIn ? field('f-owner', 'Owner', ownerIn) : null,
                 field('f-sweep', 'Sweep', sweepIn),
                 field('f-label', 'Label', labelIn),
                 field('f-limit', 'Per page', limitSel),
                 h('div', { class: 'filter-actions' },
                   h('button', { type: 'submit', class: 'btn btn-primary',
                                 dataset: { testid: 'filter-apply' } }, 'Apply'),
                   h('button', { type: 'button', class: 'btn', onclick: clearFilters,
                                 dataset: { testid: 'filter-clear' } }, 'Clear')));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    applyFilters();
  });
  stateSel.addEventListener('change', applyFilters);
  limitSel.addEventListener('change', applyFilters);

  // ---- the table
  const thead = h('thead');
  const tbody = h('tbody');
  const table = h('table', { class: 'table jobs-table', dataset: { testid: 'jobs-table' } },
                  h('caption', { class: 'visually-hidden' }, 'Jobs, newest first'), thead, tbody);
  const count = h('span', { class: 'muted', dataset: { testid: 'jobs-count' } });
  const updated = h('span', { class: 'muted small' });
  const live = h('p', { class: 'visually-hidden', 'aria-live': 'polite',
                        dataset: { testid: 'jobs-live' } });
  const pageNo = h('span', { class: 'muted small', 'aria-live': 'polite' });
  const compareBtn = h('button', { type: 'button', class: 'btn', disabled: true,
                                   dataset: { testid: 'compare-selected' }, onclick: () => {
                                     location.hash = `#/compare?jobs=${[...selected].join(',')}`;
                                   } }, 'Compare');
  const emptyMsg = empty('');
  emptyMsg.hidden = true;
  const wrap = tableWrap(table, 'Jobs table');
  const content = h('div', { class: 'jobs-content' }, emptyMsg, wrap);

  main.append(
    h('div', { class: 'page-head' },
      h('h1', null, 'Jobs'),
      h('div', { class: 'page-meta' }, count, updated, compareBtn)),
    h('section', { class: 'card', 'aria-label': 'Jobs' },
      form, content,
      h('nav', { class: 'pager', 'aria-label': 'Pages' }, pages.prev, pageNo, pages.older)),
    live);

  function field(id, label, input) {
    return h('div', { class: 'field' }, h('label', { for: id, class: 'label' }, label), input);
  }

  function syncHash() {
    const p = new URLSearchParams();
    for (const k of ['state', 'name', 'owner', 'sweep', 'label'])
      if (filters[k])
        p.set(k, filters[k]);
    if (filters.limit !== 50)
      p.set('limit', filters.limit);
    const s = p.toString();
    history.replaceState(null, '', `#/jobs${s ? `?${s}` : ''}`);
  }

  function applyFilters() {
    filters.state = stateSel.value;
    filters.name = nameIn.value.trim();
    filters.owner = ownerIn ? ownerIn.value.trim() : '';
    filters.sweep = sweepIn.value.trim();
    filters.label = labelIn.value.trim();
    filters.limit = Number(limitSel.value) || 50;
    pages.reset();
    syncHash();
    loaded = false;
    refresh();
  }

  function clearFilters() {
    stateSel.value = '';
    nameIn.value = '';
    if (ownerIn)
      ownerIn.value = '';
    sweepIn.value = '';
    labelIn.value = '';
    limitSel.value = '50';
    applyFilters();
  }

  function renderHead() {
    thead.replaceChildren(h('tr', null, h('th', { scope: 'col', class: 'col-select' },
                                          h('span', { class: 'visually-hidden' }, 'Compare')),
                            COLUMNS.map((c) => {
      const active = sort.key === c.key;
      const dir = active ? (sort.dir > 0 ? 'ascending' : 'descending') : null;
      return h('th', { scope: 'col', 'aria-sort': dir || 'none',
                       class: `col-${c.key}${c.right ? ' num' : ''}` },
               h('button', { type: 'button', class: 'sort', dataset: { sort: c.key },
                             title: `Sort this page by ${c.label.toLowerCase()}`,
                             onclick: () => sortBy(c.key) },
                 c.label,
                 h('span', { class: 'sort-mark', 'aria-hidden': 'true' },
                   active ? (sort.dir > 0 ? '▲' : '▼') : '↕')));
    })));
  }

  function sortBy(key) {
    if (sort.key === key)
      sort.dir = -sort.dir;
    else
      sort = { key, dir: 1 };
    renderHead();
    renderRows([]);
    const btn = thead.querySelector(`button[data-sort="${key}"]`);
    if (btn)
      btn.focus();
  }

  function row(job, changed) {
    const ended = FINAL_STATES.has(job.state);
    return h('tr', { class: changed ? 'changed' : null,
                     dataset: { testid: 'job-row', jobId: job.id, state: job.state } },
             h('td', { class: 'col-select' },
               h('input', { type: 'checkbox', checked: selected.has(job.id),
                            'aria-label': `Compare ${job.id}`, dataset: { testid: 'job-select' },
                            onchange: (ev) => select(job.id, ev.target.checked) })),
             h('td', { class: 'col-id' }, h('a', { href: `#/jobs/${job.id}`, class: 'mono',
                                                   dataset: { focus: 'link' } }, job.id)),
             h('td', { class: 'col-name' }, h('span', { class: 'cell-text' }, job.name || '—'),
               job.sweep ? h('a', { href: `#/sweeps/${job.sweep}`, class: 'sweep-link mono small',
                                    title: `child ${job.sweep_index} of sweep ${job.sweep}`,
                                    dataset: { testid: 'job-sweep' } },
                             `${job.sweep} #${job.sweep_index}`) : null),
             h('td', { class: 'col-owner' }, job.owner || '—'),
             h('td', { class: 'col-state' }, stateCell(job)),
             h('td', { class: 'col-partition' }, partition(job) || '—'),
             h('td', { class: 'col-ranks num' }, ranks(job) === null ? '—' : String(ranks(job))),
             h('td', { class: 'col-created_at nowrap' }, timeEl(job.created_at)),
             h('td', { class: 'col-started_at nowrap' }, timeEl(job.started_at)),
             h('td', { class: 'col-ended_at nowrap' },
               ended ? timeEl(job.ended_at) : h('span', { class: 'muted' }, '—')),
             h('td', { class: 'col-progress' }, progressCell(job)));
  }

  function select(id, on) {
    if (on)
      selected.add(id);
    else
      selected.delete(id);
    compareBtn.disabled = selected.size < 2;
    compareBtn.textContent = selected.size ? `Compare ${selected.size}` : 'Compare';
  }

  function renderRows(changedIds) {
    const shown = sort.key
      ? [...jobs].sort(compare(COLUMNS.find((c) => c.key === sort.key), sort.dir)) : jobs;
    // keep the keyboard focus on the same job's link across a re-render
    const active = document.activeElement;
    const focusId = active && tbody.contains(active) ? active.closest('tr').dataset.jobId : null;
    const filtered = filters.state || filters.name || filters.owner || filters.sweep || filters.label;
    emptyMsg.textContent = filtered ? 'No jobs match these filters.'
                                    : 'No jobs yet: submit one with larch submit spec.json.';
    emptyMsg.hidden = jobs.length > 0;
    wrap.hidden = jobs.length === 0;
    tbody.replaceChildren(...shown.map((j) => row(j, changedIds.includes(j.id))));
    if (focusId) {
      const a = tbody.querySelector(`tr[data-job-id="${focusId}"] a`);
      if (a)
        a.focus({ preventScroll: true });
    }
  }

  function renderPager() {
    pageNo.textContent = `Page ${pages.page}`;
    count.textContent = `${jobs.length} job${jobs.length === 1 ? '' : 's'} on this page`;
    updated.textContent = `· updated ${fmtClock(new Date())}`;
  }

  async function load() {
    const p = new URLSearchParams({ limit: filters.limit });
    if (filters.state)
      p.set('state', filters.state);
    if (filters.name)
      p.set('name', filters.name);
    for (const k of ['owner', 'sweep', 'label'])
      if (filters[k])
        p.set(k, filters[k]);
    if (pages.cursor)
      p.set('cursor', pages.cursor);
    try {
      const r = await request('GET', `/v1/jobs?${p}`, { signal: ctx.signal });
      if (!r.changed && loaded)
        return;
      jobs = (r.data && r.data.jobs) || [];
      pages.update(r.data && r.data.next_cursor);
      const changed = [];
      const notes = [];
      for (const j of jobs) {
        const before = seen.get(j.id);
        if (before && before !== j.state) {
          changed.push(j.id);
          notes.push(`${j.id} ${j.name}: ${j.state}`);
        }
        seen.set(j.id, j.state);
      }
      if (!loaded)
        renderHead();
      loaded = true;
      renderRows(changed);
      renderPager();
      if (notes.length)
        live.textContent = `${notes.join('; ')}.`;
    } catch (e) {
      ctx.fail(e, 'Jobs');
    }
  }

  const refresh = coalesce(load);
  renderHead();
  refresh();
  ctx.onChanges(() => refresh());
  ctx.every(REFRESH_MS, () => {
    if (jobs.some((j) => !FINAL_STATES.has(j.state)))
      refresh();
  });
}
