// service/dashboard/study.js - the study section of a batch_scaling sweep's
// page (sweep.study, docs/api.md "Batch-scaling studies"): a log-log chart
// of steps S against examples E to the target, one point per child that
// reached it (labelled by its batch size), the McCandlish et al. fit
// (S/S_min - 1)(E/E_min - 1) = 1 drawn as S = S_min (1 + b_crit/B),
// E = E_min (1 + B/b_crit) over the batch sizes' range, B_crit marked on it
// (B = b_crit: S = 2 S_min, E = 2 E_min) with its value, and the asymptotes
// S_min and E_min dashed; a table per batch size (S, E, seconds to the
// target, speed-up against speedup_against, the fit's S) and the fit's
// figures, or the study's note. Chart.js 3.9.1 (the global Chart of
// /vendor/chart.js): logarithmic axes, a scatter chart whose datasets are,
// in order, STUDY_SETS. sweeps.js makes one panel per page and calls
// update(sweep) on every read; the chart goes with the page.
import { palette } from './charts.js';
import { empty, fmtNum, h, stateBadge, tableWrap } from './ui.js';

// The chart's datasets, by index (the browser test reads them by label).
export const STUDY_SETS = ['Children', 'Fit', 'B_crit', 'S_min', 'E_min'];
const CURVE_POINTS = 64;
const RANGE = 2;            // the curve runs from the smallest batch / RANGE to the largest x RANGE
const PAD = 1.25;           // the axes' margin around the data (a factor: log axes)

export function fmtBcrit(v) {
  return fmtNum(v);
}

// The fitted curve over batch sizes lo..hi (log-spaced): [{x: E, y: S, b: B}].
export function fitCurve(fit, lo, hi, n = CURVE_POINTS) {
  const out = [];
  const a = Math.log(lo);
  const step = (Math.log(hi) - a) / (n - 1);
  for (let i = 0; i < n; i++) {
    const b = Math.exp(a + step * i);
    out.push({ x: fit.e_min * (1 + b / fit.b_crit), y: fit.s_min * (1 + fit.b_crit / b), b });
  }
  return out;
}

// The points of the children that reached the target: [{x: E, y: S, b: B}].
export function reachedPoints(study) {
  return (study.points || [])
    .filter((p) => p.steps > 0 && p.examples > 0 && p.batch > 0)
    .map((p) => ({ x: p.examples, y: p.steps, b: p.batch }));
}

function bounds(values) {
  const v = values.filter((x) => Number.isFinite(x) && x > 0);
  if (!v.length)
    return { min: 1, max: 10 };
  return { min: Math.min(...v) / PAD, max: Math.max(...v) * PAD };
}

// Draws each point's batch size beside it, and B_crit's text beside its mark.
const labelPlugin = {
  id: 'larchStudyLabels',
  afterDatasetsDraw(chart) {
    const g = chart.ctx;
    const colors = chart.$larchColors;
    if (!colors)
      return;
    g.save();
    g.font = `12px ${colors.font || 'sans-serif'}`;
    g.fillStyle = colors.text;
    g.textBaseline = 'bottom';
    const pts = chart.getDatasetMeta(0);
    if (!pts.hidden)
      pts.data.forEach((el, i) => {
        const d = chart.data.datasets[0].data[i];
        g.fillText(`B=${fmtNum(d.b)}`, el.x + 6, el.y - 4);
      });
    const mark = chart.getDatasetMeta(2);
    const set = chart.data.datasets[2];
    if (!mark.hidden && mark.data.length && set.data.length) {
      g.fillText(set.label, mark.data[0].x + 8, mark.data[0].y - 8);
    }
    g.restore();
  },
};

function datasets(study, colors) {
  const fit = study.fit;
  const pts = reachedPoints(study);
  const dash = (label, data, color) => ({ label, data, showLine: true, borderColor: color,
                                          backgroundColor: color, borderWidth: 1, borderDash: [6, 4],
                                          pointRadius: 0, pointHitRadius: 0 });
  const sets = [
    { label: STUDY_SETS[0], data: pts, showLine: false, borderColor: colors.series[0],
      backgroundColor: colors.series[0], pointRadius: 4, pointHoverRadius: 6 },
  ];
  if (!fit)
    return { sets, x: bounds(pts.map((p) => p.x)), y: bounds(pts.map((p) => p.y)) };
  const batches = (study.points || []).map((p) => p.batch).filter((b) => b > 0);
  const lo = Math.min(...batches, fit.b_crit) / RANGE;
  const hi = Math.max(...batches, fit.b_crit) * RANGE;
  const curve = fitCurve(fit, lo, hi);
  const x = bounds([...pts.map((p) => p.x), ...curve.map((p) => p.x), fit.e_min]);
  const y = bounds([...pts.map((p) => p.y), ...curve.map((p) => p.y), fit.s_min]);
  sets.push(
    { label: STUDY_SETS[1], data: curve, showLine: true, borderColor: colors.series[1],
      backgroundColor: colors.series[1], borderWidth: 1.5, pointRadius: 0, pointHitRadius: 4,
      tension: 0 },
    { label: `B_crit = ${fmtBcrit(fit.b_crit)}`,
      data: [{ x: 2 * fit.e_min, y: 2 * fit.s_min, b: fit.b_crit }], showLine: false,
      borderColor: colors.series[2], backgroundColor: colors.series[2], pointStyle: 'rectRot',
      pointRadius: 7, pointHoverRadius: 8 },
    dash(`S_min = ${fmtNum(fit.s_min)}`, [{ x: x.min, y: fit.s_min }, { x: x.max, y: fit.s_min }],
         colors.series[3]),
    dash(`E_min = ${fmtNum(fit.e_min)}`, [{ x: fit.e_min, y: y.min }, { x: fit.e_min, y: y.max }],
         colors.series[4]));
  return { sets, x, y };
}

function logTick(v) {
  const m = v / 10 ** Math.floor(Math.log10(v) + 1e-9);
  return [1, 2, 5].some((k) => Math.abs(m - k) < 1e-6) ? fmtNum(Number(v.toPrecision(6))) : '';
}

function options(x, y, colors) {
  const axis = (title, lim) => ({
    type: 'logarithmic', min: lim.min, max: lim.max,
    grid: { color: colors.grid, borderColor: colors.grid },
    // Chart.js puts a tick at each 1..9 x 10^k: label 1, 2 and 5 only
    ticks: { color: colors.text, autoSkip: false, callback: logTick },
    title: { display: true, text: title, color: colors.text },
  });
  return {
    animation: false, parsing: false, normalized: true, responsive: true,
    maintainAspectRatio: false,
    interaction: { mode: 'nearest', intersect: true },
    scales: { x: axis('examples to target (E)', x), y: axis('steps to target (S)', y) },
    plugins: {
      legend: { labels: { color: colors.text, boxWidth: 12, boxHeight: 2 } },
      decimation: { enabled: false },
      tooltip: { callbacks: { label: (item) => {
        const d = item.raw;
        const b = d.b !== undefined ? `B=${fmtNum(Math.round(d.b))}: ` : '';
        return `${item.dataset.label}: ${b}S=${fmtNum(Math.round(d.y))}, E=${fmtNum(Math.round(d.x))}`;
      } } },
    },
  };
}

function pointRows(study) {
  const fit = study.fit;
  const num = (v, f = fmtNum) => h('td', { class: 'num' }, v === null || v === undefined ? '—' : f(v));
  return (study.points || []).map((p) => h('tr', {
    dataset: { testid: 'study-row', batch: p.batch, job: p.job, steps: p.steps ?? '' } },
    h('td', { class: 'num' }, fmtNum(p.batch),
      p.batch === study.speedup_against
        ? h('span', { class: 'muted small', dataset: { testid: 'study-reference' } }, ' (reference)')
        : null),
    h('td', { class: 'nowrap' }, h('a', { href: `#/jobs/${p.job}`, class: 'mono' }, p.job)),
    h('td', null, stateBadge(p.state)),
    num(p.steps), num(p.examples), num(p.seconds, (v) => v.toFixed(1)),
    num(p.speedup, (v) => `${v.toFixed(2)}×`),
    num(fit && p.batch > 0 ? fit.s_min * (1 + fit.b_crit / p.batch) : null,
        (v) => fmtNum(Math.round(v)))));
}

function fitRows(study) {
  const fit = study.fit;
  if (!fit)
    return [];
  return [
    ['S_min', fmtNum(fit.s_min), 'study-s-min'],
    ['E_min', fmtNum(fit.e_min), 'study-e-min'],
    ['B_crit', fmtBcrit(fit.b_crit), 'study-bcrit'],
    ['rms (log S)', fmtNum(fit.rms), 'study-rms'],
    ['Points fitted', fmtNum(fit.points), 'study-fit-points'],
  ].flatMap(([k, v, testid]) => [h('dt', null, k), h('dd', { class: 'mono', dataset: { testid } }, v)]);
}

// The section: el to place, update(sweep) on every read of the sweep.
export function studyPanel(ctx) {
  let chart = null;
  let last = '';
  let study = null;
  const canvas = h('canvas', { role: 'img', 'aria-label': 'Steps against examples to the target' });
  const figure = h('figure', { class: 'chart study-chart', dataset: { testid: 'study-chart', points: 0 } },
                   h('div', { class: 'chart-box study-box-chart' }, canvas));
  const chartNote = h('p', { class: 'muted small', dataset: { testid: 'study-chart-note' } });
  const figures = h('dl', { class: 'summary', dataset: { testid: 'study-fit' } });
  const note = h('p', { class: 'study-note', dataset: { testid: 'study-note' } });
  const table = h('div', { dataset: { testid: 'study-table' } });
  const head = h('p', { class: 'muted small', dataset: { testid: 'study-head' } });
  const el = h('section', { class: 'card', 'aria-labelledby': 'h-study', dataset: { testid: 'study' } },
               h('div', { class: 'card-head' }, h('h2', { id: 'h-study' }, 'Batch-scaling study')),
               head, figure, chartNote,
               h('h3', { class: 'study-h' }, 'Fit'), figures, note,
               h('h3', { class: 'study-h' }, 'Per batch size'), table);

  const mq = window.matchMedia('(prefers-color-scheme: dark)');
  const recolor = () => {
    if (study)
      draw(study);
  };
  mq.addEventListener('change', recolor);
  ctx.onCleanup(() => {
    mq.removeEventListener('change', recolor);
    if (chart)
      chart.destroy();
    chart = null;
  });

  function draw(st) {
    const pts = reachedPoints(st);
    figure.dataset.points = String(pts.length);
    figure.dataset.fit = st.fit ? 'yes' : 'no';
    if (!window.Chart) {
      chartNote.textContent = 'Charts are unavailable: /vendor/chart.js did not load.';
      figure.hidden = true;
      return;
    }
    figure.hidden = !pts.length && !st.fit;
    chartNote.textContent = pts.length || st.fit ? ''
      : 'No child has reached the target yet: the chart shows those that have.';
    if (figure.hidden) {
      if (chart)
        chart.destroy();
      chart = null;
      return;
    }
    const colors = palette();
    const { sets, x, y } = datasets(st, colors);
    const opts = options(x, y, colors);
    if (chart) {
      chart.$larchColors = colors;
      chart.data.datasets = sets;
      chart.options = opts;
      chart.update('none');
    } else {
      chart = new window.Chart(canvas, { type: 'scatter', data: { datasets: sets }, options: opts,
                                         plugins: [{ id: 'larchStudyColors',
                                                     beforeInit: (c) => { c.$larchColors = colors; } },
                                                   labelPlugin] });
    }
    canvas.setAttribute('aria-label', `Steps against examples to the target: ${pts.map((p) =>
      `B=${p.b} S=${p.y} E=${p.x}`).join(', ')}` +
      (st.fit ? `; fit S_min ${fmtNum(st.fit.s_min)}, E_min ${fmtNum(st.fit.e_min)}, ` +
                `B_crit ${fmtBcrit(st.fit.b_crit)}` : ''));
  }

  function update(sweep) {
    const st = sweep.study;
    const text = JSON.stringify(st);
    if (!st || text === last)
      return;
    last = text;
    study = st;
    const reached = reachedPoints(st).length;
    head.textContent = `Steps S and examples E to the target, per batch size; speed-up: time to ` +
      `the target of batch ${st.speedup_against ?? '—'} over each one's. ` +
      `${reached} of ${(st.points || []).length} reached the target.`;
    figures.replaceChildren(...fitRows(st));
    figures.hidden = !st.fit;
    note.textContent = st.note || '';
    note.hidden = !st.note;
    const cols = ['Batch', 'Job', 'State', 'Steps to target (S)', 'Examples to target (E)',
                  'Seconds to target', `Speed-up vs ${st.speedup_against ?? '—'}`, 'Fitted S'];
    const t = h('table', { class: 'table study-table' },
                h('caption', { class: 'visually-hidden' }, 'The study per batch size'),
                h('thead', null, h('tr', null, cols.map((c, i) =>
                  h('th', { scope: 'col', class: i > 2 ? 'num' : null }, c)))),
                h('tbody', null, pointRows(st)));
    table.replaceChildren((st.points || []).length ? tableWrap(t, 'Study per batch size')
      : empty('This study has no children.'));
    draw(st);
    document.body.dataset.studyReady = `${reached} ${st.fit ? 'fit' : 'nofit'}`;
  }

  return { el, update };
}
