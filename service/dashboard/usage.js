// service/dashboard/usage.js - the admin page's usage card: CPU hours (or
// GPU hours, or jobs) per user per day over the last DAYS days (UTC), as a
// stacked bar chart (Chart.js 3.9.1, the global Chart) from one
// GET /v1/usage?group_by=user,day, with each user's totals in a table below
// (what a screen reader reads, and all there is when Chart.js is missing).
// A 304 redraws nothing.
import { request } from './api.js';
import { palette } from './charts.js';
import { empty, fmtNum, h, tableWrap } from './ui.js';

const DAYS = 30;
const METRICS = [
  { key: 'cpu_hours', label: 'CPU hours' },
  { key: 'gpu_hours', label: 'GPU hours' },
  { key: 'jobs', label: 'Jobs' },
];

// Hours to 4 significant digits (the API rounds them to 0.0001 h).
function hours(v) {
  return v ? fmtNum(Number(v.toPrecision(4))) : '0';
}

function utcDay(ms) {
  return new Date(ms).toISOString().slice(0, 10);
}

export class UsagePanel {
  constructor(ctx) {
    this.ctx = ctx;
    this.data = null;
    this.chart = null;
    this.metric = METRICS[0];
    const today = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(),
                           new Date().getUTCDate());
    this.days = [];
    for (let i = DAYS - 1; i >= 0; i--)
      this.days.push(utcDay(today - i * 86400000));
    this.select = h('select', { id: 'usage-metric', class: 'input', dataset: { testid: 'usage-metric' } },
                    METRICS.map((m) => h('option', { value: m.key }, m.label)));
    this.select.addEventListener('change', () => {
      this.metric = METRICS.find((m) => m.key === this.select.value) || METRICS[0];
      this.draw();
    });
    this.canvas = h('canvas', { role: 'img', 'aria-label': 'Usage per user per day' });
    this.figure = h('figure', { class: 'chart usage-chart', dataset: { testid: 'usage-chart' }, hidden: true },
                    h('div', { class: 'chart-box' }, this.canvas));
    this.note = h('p', { class: 'muted small', dataset: { testid: 'usage-note' } });
    this.tableBox = h('div', { dataset: { testid: 'usage-totals' } }, empty('Loading…'));
    this.el = h('div', { class: 'usage' },
                h('div', { class: 'field field-inline' },
                  h('label', { for: 'usage-metric', class: 'label' }, 'Show'), this.select),
                this.note, this.figure, this.tableBox);
    ctx.onCleanup(() => {
      if (this.chart)
        this.chart.destroy();
      this.chart = null;
    });
  }

  // Reads the last DAYS days; redraws when they changed.
  async refresh() {
    const p = new URLSearchParams({ from: this.days[0], group_by: 'user,day' });
    const r = await request('GET', `/v1/usage?${p}`, { signal: this.ctx.signal });
    if (!r.changed && this.data)
      return;
    this.data = r.data || { usage: [] };
    this.draw();
  }

  draw() {
    const rows = this.data.usage || [];
    const key = this.metric.key;
    const users = [...new Set(rows.map((r) => r.user || '(none)'))].sort();
    const at = new Map(this.days.map((d, i) => [d, i]));
    const per = new Map(users.map((u) => [u, new Array(this.days.length).fill(0)]));
    const totals = new Map(users.map((u) => [u, { cpu_hours: 0, gpu_hours: 0, jobs: 0 }]));
    for (const r of rows) {
      const u = r.user || '(none)';
      const i = at.get(r.day);
      if (i !== undefined)
        per.get(u)[i] += r[key] || 0;
      const t = totals.get(u);
      t.cpu_hours += r.cpu_hours || 0;
      t.gpu_hours += r.gpu_hours || 0;
      t.jobs += r.jobs || 0;
    }
    const s = this.data.slurm || {};
    this.note.textContent = `Jobs that ended, ${this.days[0]} to ${this.days[this.days.length - 1]} ` +
      '(UTC days). ' + (s.accounting
      ? `Slurm's jobs from its accounting${s.read_to ? `, read up to ${s.read_to.slice(0, 16).replace('T', ' ')}` : ''}` +
        `${s.error ? ` (the last read failed: ${s.error})` : ''}; local jobs from larch's records.`
      : "From larch's records of its jobs.");

    const trs = users.map((u) => {
      const t = totals.get(u);
      return h('tr', { dataset: { testid: 'usage-row', user: u } },
               h('th', { scope: 'row' }, u), h('td', null, hours(t.cpu_hours)),
               h('td', null, hours(t.gpu_hours)), h('td', null, fmtNum(t.jobs)));
    });
    this.tableBox.replaceChildren(users.length
      ? tableWrap(h('table', { class: 'table', dataset: { testid: 'usage-table' } },
                    h('thead', null, h('tr', null, ['User', 'CPU hours', 'GPU hours', 'Jobs'].map(
                      (l) => h('th', { scope: 'col' }, l)))),
                    h('tbody', null, trs)), 'Usage per user')
      : empty(`No job ended in the last ${DAYS} days.`));

    this.figure.dataset.users = users.join(',');
    this.figure.dataset.metric = key;
    this.figure.dataset.total = String(users.reduce((n, u) => n + per.get(u).reduce((a, b) => a + b, 0), 0));
    this.canvas.setAttribute('aria-label', `${this.metric.label} per user per day: ` +
      users.map((u) => `${u} ${hours(per.get(u).reduce((a, b) => a + b, 0))}`)
        .join(', '));
    if (!window.Chart || !users.length) {
      this.figure.hidden = true;
      return;
    }
    this.figure.hidden = false;
    const colors = palette();
    const datasets = users.map((u, i) => ({
      label: u, data: per.get(u), backgroundColor: colors.series[i % colors.series.length],
      borderWidth: 0, stack: 'usage',
    }));
    const axis = { grid: { color: colors.grid, borderColor: colors.grid }, ticks: { color: colors.text } };
    const options = {
      animation: false, responsive: true, maintainAspectRatio: false,
      scales: { x: { ...axis, stacked: true, ticks: { ...axis.ticks, maxTicksLimit: 10 } },
                y: { ...axis, stacked: true, beginAtZero: true,
                     title: { display: true, text: this.metric.label, color: colors.text } } },
      plugins: { legend: { labels: { color: colors.text, boxWidth: 12 } } },
    };
    const labels = this.days.map((d) => d.slice(5));
    if (this.chart) {
      this.chart.data = { labels, datasets };
      this.chart.options = options;
      this.chart.update('none');
    } else {
      this.chart = new window.Chart(this.canvas, { type: 'bar', data: { labels, datasets }, options });
    }
    this.figure.dataset.drawn = '1';
  }
}
