// service/dashboard/charts.js - a job's metric charts (Chart.js 3.9.1, the
// global Chart of /vendor/chart.js). Series are grouped into charts (loss:
// train/loss and val/loss together, lr, samples/s and tokens/s apart, loss
// scale, ...); the trainer's own timings (names ending in _s, such as
// train/after_backward_s and offload/grads_s: seconds) get a chart each in a
// "System" section that stays collapsed until opened (and is drawn only
// then). An accuracy's axis stops at 1. They are read
// with one GET /v1/jobs/{id}/metrics?max_points=N where N is about a chart's
// width in device pixels, so the server's min/max downsampling keeps a
// 100k-step job as light as a short one. Zoom: drag across a chart, or the
// step inputs; both re-query with from_step/to_step, and Reset (or a
// double click) goes back to every step. Colours come from CSS variables,
// so the charts follow the light/dark theme.
import { request } from './api.js';
import { empty, fmtNum, h } from './ui.js';

// fraction: values in 0..1, the axis capped at 1. Each group is one unit:
// samples/s and tokens/s (about seq times more) do not share an axis.
const GROUPS = [
  { id: 'loss', title: 'Loss', test: (n) => /(^|[/_])loss$/.test(n) },
  { id: 'accuracy', title: 'Accuracy', fraction: true, test: (n) => /(^|[/_])acc(uracy)?$/.test(n) },
  { id: 'lr', title: 'Learning rate', test: (n) => /(^|[/_])lr$|learning_rate/.test(n) },
  { id: 'samples-per-s', title: 'Samples/s', test: (n) => /samples_per_s(ec)?$/.test(n) },
  { id: 'tokens-per-s', title: 'Tokens/s', test: (n) => /tokens_per_s(ec)?$/.test(n) },
  { id: 'throughput', title: 'Throughput', test: (n) => /per_s(ec)?$|throughput/.test(n) },
  { id: 'loss-scale', title: 'Loss scale', test: (n) => /loss_scale|(^|\/)scale$/.test(n) },
  { id: 'grad-norm', title: 'Gradient norm', test: (n) => /grad_norm/.test(n) },
];
const MIN_DRAG_PX = 6;
const COLOR_VARS = ['--chart-1', '--chart-2', '--chart-3', '--chart-4', '--chart-5', '--chart-6'];

function css(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

export function palette() {
  return { series: COLOR_VARS.map(css), grid: css('--chart-grid'), text: css('--chart-text'),
           font: css('--font-sans') };
}

// A timing of the trainer's own (seconds): a name ending in _s that is not
// a rate (train/after_backward_s, offload/update_s; not samples_per_s).
export function isTiming(name) {
  return /_s$/.test(name) && !/per_s$/.test(name);
}

function chartId(name) {
  return `m-${name.replace(/[^A-Za-z0-9_-]+/g, '-')}`;
}

// [{id, title, names: [...], fraction, system}] in a stable order: the known
// groups, then one chart per other series, then one per timing (system).
export function groupSeries(names) {
  const out = [];
  const left = [...names].sort();
  const timings = left.filter(isTiming);
  for (const n of timings)
    left.splice(left.indexOf(n), 1);
  for (const g of GROUPS) {
    const mine = left.filter(g.test);
    if (mine.length) {
      out.push({ id: g.id, title: g.title, names: mine, fraction: !!g.fraction, system: false });
      for (const n of mine)
        left.splice(left.indexOf(n), 1);
    }
  }
  for (const n of left)
    out.push({ id: chartId(n), title: n, names: [n], fraction: false, system: false });
  for (const n of timings)
    out.push({ id: chartId(n), title: `${n} (seconds)`, names: [n], fraction: false, system: true });
  return out;
}

// The y axis of a fraction's chart: at most 1, from 0 or from the data's
// lowest tenth; null (Chart.js decides) when a value is outside 0..1.
export function fractionAxis(sets) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const s of sets)
    for (const p of s.data)
      if (p.y !== null && Number.isFinite(p.y)) {
        lo = Math.min(lo, p.y);
        hi = Math.max(hi, p.y);
      }
  if (!(lo >= 0 && hi <= 1))
    return lo === Infinity ? { min: 0, max: 1 } : null;
  return { min: Math.min(Math.floor(lo * 10) / 10, 0.9), max: 1 };
}

const readyPlugin = {
  id: 'larchReady',
  afterRender(chart) {
    const done = chart.$larchReady;
    if (done) {
      chart.$larchReady = null;
      done();
    }
  },
};

// One chart of a group of series, with its drag-to-zoom overlay.
class MetricChart {
  constructor(group, onZoom) {
    this.group = group;
    this.onZoom = onZoom;
    this.canvas = h('canvas', { role: 'img', 'aria-label': group.title });
    this.select = h('div', { class: 'chart-select', hidden: true });
    this.box = h('div', { class: 'chart-box' }, this.canvas, this.select);
    this.summary = h('p', { class: 'chart-summary muted small' });
    this.el = h('figure', { class: 'chart', dataset: { testid: 'chart', chart: group.id, points: 0 } },
                h('figcaption', { class: 'chart-title' }, group.title), this.box, this.summary);
    this.chart = null;
    this.range = null;
    this.yLimits = null;           // {min, max} of a fraction's axis
    this.drag = null;
    this.listen();
  }

  listen() {
    const c = this.canvas;
    c.addEventListener('pointerdown', (e) => {
      if (e.button !== 0 || !this.chart)
        return;
      const a = this.chart.chartArea;
      if (e.offsetX < a.left || e.offsetX > a.right)
        return;
      this.drag = { x0: e.offsetX, x1: e.offsetX };
      c.setPointerCapture(e.pointerId);
      this.showSelect();
    });
    c.addEventListener('pointermove', (e) => {
      if (!this.drag)
        return;
      const a = this.chart.chartArea;
      this.drag.x1 = Math.min(Math.max(e.offsetX, a.left), a.right);
      this.showSelect();
    });
    c.addEventListener('pointerup', () => {
      const d = this.drag;
      this.drag = null;
      this.select.hidden = true;
      if (!d || !this.chart || Math.abs(d.x1 - d.x0) < MIN_DRAG_PX)
        return;
      const x = this.chart.scales.x;
      const from = Math.max(0, Math.floor(x.getValueForPixel(Math.min(d.x0, d.x1))));
      const to = Math.ceil(x.getValueForPixel(Math.max(d.x0, d.x1)));
      if (to > from)
        this.onZoom({ from, to });
    });
    const cancel = () => {
      this.drag = null;
      this.select.hidden = true;
    };
    c.addEventListener('pointercancel', cancel);
    c.addEventListener('lostpointercapture', () => {
      if (this.drag)
        cancel();
    });
    c.addEventListener('dblclick', () => this.onZoom(null));
  }

  showSelect() {
    const a = this.chart.chartArea;
    const s = this.select.style;
    s.left = `${Math.min(this.drag.x0, this.drag.x1)}px`;
    s.width = `${Math.abs(this.drag.x1 - this.drag.x0)}px`;
    s.top = `${a.top}px`;
    s.height = `${a.bottom - a.top}px`;
    this.select.hidden = false;
  }

  datasets(series, colors) {
    return this.group.names.map((name, i) => {
      const pts = series[name] || [];
      const data = new Array(pts.length);
      for (let k = 0; k < pts.length; k++)
        data[k] = { x: pts[k][0], y: pts[k][1] };
      const color = colors.series[i % colors.series.length];
      return { label: name, data, borderColor: color, backgroundColor: color, borderWidth: 1.5,
               pointRadius: pts.length === 1 ? 3 : 0, pointHoverRadius: 3, pointHitRadius: 6,
               tension: 0, spanGaps: false };
    });
  }

  options(range, colors) {
    const axis = (title) => ({
      type: 'linear',
      grid: { color: colors.grid, borderColor: colors.grid },
      ticks: { color: colors.text, maxTicksLimit: 8 },
      title: title ? { display: true, text: title, color: colors.text } : undefined,
    });
    const x = { ...axis('step'), min: range ? range.from : undefined, max: range ? range.to : undefined };
    const y = { ...axis(null), type: 'linear' };
    if (this.yLimits) {
      y.min = this.yLimits.min;
      y.max = this.yLimits.max;
    }
    return {
      animation: false,
      parsing: false,
      normalized: true,
      responsive: true,
      maintainAspectRatio: false,
      interaction: { mode: 'nearest', axis: 'x', intersect: false },
      scales: { x, y },
      plugins: {
        legend: { display: this.group.names.length > 1 || this.group.names[0] !== this.group.title,
                  labels: { color: colors.text, boxWidth: 12, boxHeight: 2 } },
        tooltip: { callbacks: { title: (items) => (items.length ? `step ${items[0].parsed.x}` : '') } },
        decimation: { enabled: false },
      },
    };
  }

  // Draws these series (the group's share of {name: [[step, value], ...]});
  // resolves once the chart has rendered.
  draw(series, range, colors) {
    this.range = range;
    const sets = this.datasets(series, colors);
    this.yLimits = this.group.fraction ? fractionAxis(sets) : null;
    const drawn = new Promise((resolve) => {
      if (this.chart) {
        this.chart.$larchReady = resolve;
        this.chart.data.datasets = sets;
        this.chart.options = this.options(range, colors);
        this.chart.update('none');
      } else {
        // the plugin sees $larchReady only after the constructor: set it on
        // the config's first render through a wrapper
        const cfg = { type: 'line', data: { datasets: sets }, options: this.options(range, colors),
                      plugins: [{ id: 'larchFirst', beforeInit: (c) => { c.$larchReady = resolve; } },
                                readyPlugin] };
        this.chart = new window.Chart(this.canvas, cfg);
      }
    });
    const counts = sets.map((s) => [s.label, s.data.reduce((n, p) => n + (p.y === null ? 0 : 1), 0)]);
    this.el.dataset.points = String(counts.reduce((n, c) => n + c[1], 0));
    this.el.dataset.series = counts.map(([n, c]) => `${n}:${c}`).join(' ');
    this.summary.textContent = this.group.names.map((n) => {
      const pts = series[n] || [];
      const last = pts.length ? pts[pts.length - 1] : null;
      return last ? `${n} ${fmtNum(last[1])} at step ${fmtNum(last[0])}` : `${n}: no points`;
    }).join(' · ');
    this.canvas.setAttribute('aria-label', `${this.group.title} chart. ${this.summary.textContent}`);
    return drawn;
  }

  recolor(colors) {
    if (!this.chart)
      return;
    this.chart.data.datasets.forEach((d, i) => {
      d.borderColor = d.backgroundColor = colors.series[i % colors.series.length];
    });
    this.chart.options = this.options(this.range, colors);
    this.chart.update('none');
  }

  destroy() {
    if (this.chart)
      this.chart.destroy();
    this.chart = null;
  }
}

// The metrics card of a job page: toolbar (zoom inputs), charts, and the
// refresh that keeps them current. ctx is the page's (app.js).
export class MetricsPanel {
  constructor(jobId, ctx) {
    this.jobId = jobId;
    this.ctx = ctx;
    this.range = null;
    this.charts = new Map();        // group id -> MetricChart (the visible grid)
    this.sysCharts = new Map();     // group id -> MetricChart (the system section, once open)
    this.sysGroups = [];            // the timings' groups of the last read
    this.last = null;               // {series, range} of the last read, for the system section
    this.names = new Set();         // every series seen
    this.firstDrawn = false;
    this.loadedPath = null;
    const num = (id, label, testid) => h('div', { class: 'field field-inline' },
                                         h('label', { for: id, class: 'label' }, label),
                                         h('input', { id, type: 'number', min: 0, step: 1,
                                                      class: 'input input-step', inputmode: 'numeric',
                                                      dataset: { testid } }));
    this.fromField = num('zoom-from', 'From step', 'zoom-from');
    this.toField = num('zoom-to', 'To step', 'zoom-to');
    this.fromIn = this.fromField.querySelector('input');
    this.toIn = this.toField.querySelector('input');
    this.resetBtn = h('button', { type: 'button', class: 'btn', dataset: { testid: 'zoom-reset' },
                                  disabled: true, onclick: () => this.zoom(null) }, 'Reset zoom');
    const form = h('form', { class: 'zoom', 'aria-label': 'Step range' }, this.fromField, this.toField,
                   h('button', { type: 'submit', class: 'btn btn-primary',
                                 dataset: { testid: 'zoom-apply' } }, 'Zoom'),
                   this.resetBtn,
                   h('span', { class: 'help' }, 'or drag across a chart; double-click resets'));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const from = this.fromIn.value === '' ? 0 : Math.max(0, Math.floor(Number(this.fromIn.value)));
      const to = this.toIn.value === '' ? null : Math.floor(Number(this.toIn.value));
      if (to !== null && to <= from) {
        this.toIn.setCustomValidity('must be above From');
        this.toIn.reportValidity();
        return;
      }
      this.toIn.setCustomValidity('');
      this.zoom(from === 0 && to === null ? null : { from, to: to === null ? Number.MAX_SAFE_INTEGER : to });
    });
    this.grid = h('div', { class: 'charts', dataset: { testid: 'charts' }, 'aria-live': 'off' });
    this.status = h('p', { class: 'muted small', 'aria-live': 'polite', dataset: { testid: 'charts-status' } });
    this.sysGrid = h('div', { class: 'charts', dataset: { testid: 'charts-system-grid' } });
    this.sysCount = h('span', { class: 'muted' });
    this.system = h('details', { class: 'charts-system', hidden: true,
                                 dataset: { testid: 'charts-system' } },
                    h('summary', null, 'System ', this.sysCount), this.sysGrid);
    this.system.addEventListener('toggle', () => {
      if (this.system.open)
        this.drawSystem();
    });
    this.noCharts = !window.Chart;
    this.el = h('div', { class: 'metrics' }, form, this.status, this.grid, this.system);
    if (this.noCharts)
      this.grid.replaceChildren(empty('Charts are unavailable: /vendor/chart.js did not load.'));
    const mq = window.matchMedia('(prefers-color-scheme: dark)');
    const recolor = () => {
      const colors = palette();
      for (const c of [...this.charts.values(), ...this.sysCharts.values()])
        c.recolor(colors);
    };
    mq.addEventListener('change', recolor);
    ctx.onCleanup(() => {
      mq.removeEventListener('change', recolor);
      for (const c of [...this.charts.values(), ...this.sysCharts.values()])
        c.destroy();
    });
  }

  // Points per series to ask for: about one per device pixel of a chart.
  maxPoints() {
    const w = this.grid.clientWidth || 800;
    const cols = w >= 760 ? 2 : 1;
    const px = (w - (cols - 1) * 16) / cols * (window.devicePixelRatio || 1);
    return Math.max(200, Math.min(2000, Math.round(px)));
  }

  zoom(range) {
    if (range && range.to === Number.MAX_SAFE_INTEGER)
      range = { from: range.from, to: null };
    this.range = range;
    this.fromIn.value = range ? String(range.from) : '';
    this.toIn.value = range && range.to !== null ? String(range.to) : '';
    this.resetBtn.disabled = !range;
    this.refresh();
  }

  // The charts of groups in grid, made anew when the groups changed (the
  // charts map keeps them by group id). Returns them in the groups' order.
  place(charts, grid, groups) {
    const ids = groups.map((g) => g.id).join(',');
    if (ids !== [...charts.keys()].join(',')) {
      for (const c of charts.values())
        c.destroy();
      charts.clear();
      for (const g of groups)
        charts.set(g.id, new MetricChart(g, (range) => this.zoom(range)));
      grid.replaceChildren(...[...charts.values()].map((c) => c.el));
    }
    return groups.map((g) => {
      const c = charts.get(g.id);
      c.group = g;
      return c;
    });
  }

  // Draws the system section's charts from the last read (once it is open).
  drawSystem() {
    if (!this.last || this.noCharts)
      return Promise.resolve();
    const { series, range } = this.last;
    const colors = palette();
    return Promise.all(this.place(this.sysCharts, this.sysGrid, this.sysGroups)
      .map((c) => c.draw(series, range, colors)));
  }

  // Reads the series (a 304 changes nothing) and draws them. Resolves to the
  // number of charts drawn by this call (0 when nothing changed).
  async refresh() {
    if (this.noCharts)
      return 0;
    const max = this.maxPoints();
    const p = new URLSearchParams({ max_points: max });
    if (this.range) {
      p.set('from_step', this.range.from);
      if (this.range.to !== null)
        p.set('to_step', this.range.to);
    }
    const path = `/v1/jobs/${this.jobId}/metrics?${p}`;
    const r = await request('GET', path, { signal: this.ctx.signal });
    if (!r.changed && path === this.loadedPath)
      return 0;
    this.loadedPath = path;
    const series = (r.data && r.data.series) || {};
    // a zoomed range keeps every chart of the whole run, empty or not
    for (const n of Object.keys(series))
      this.names.add(n);
    const all = groupSeries(this.range ? [...this.names] : Object.keys(series));
    const groups = all.filter((g) => !g.system);
    this.grid.dataset.maxPoints = String(max);
    const range = this.range
      ? { from: this.range.from, to: this.range.to === null ? undefined : this.range.to } : null;
    this.last = { series, range };
    this.sysGroups = all.filter((g) => g.system);
    this.sysCount.textContent = `(${this.sysGroups.length} timing${this.sysGroups.length === 1 ? '' : 's'})`;
    this.system.hidden = !this.sysGroups.length;
    const sysDrawn = this.system.open ? this.drawSystem() : null;
    if (!all.length) {
      this.status.textContent = this.range ? 'No points in this step range.' : 'No metrics yet.';
      if (!this.range) {
        for (const c of this.charts.values())
          c.destroy();
        this.charts.clear();
        this.grid.replaceChildren();
      }
      return 0;
    }
    const total = Object.values(series).reduce((n, s) => n + s.length, 0);
    this.status.textContent = `${groups.length} chart${groups.length === 1 ? '' : 's'}, ` +
      `${total.toLocaleString('en-US')} points` +
      (this.range ? `, steps ${this.range.from} to ${this.range.to === null ? 'the end' : this.range.to}` : '');
    const colors = palette();
    await Promise.all([this.place(this.charts, this.grid, groups).map((c) => c.draw(series, range, colors)),
                       sysDrawn].flat());
    if (!this.firstDrawn) {
      this.firstDrawn = true;
      document.body.dataset.chartsReadyMs = performance.now().toFixed(1);
    }
    return groups.length;
  }
}
