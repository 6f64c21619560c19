// service/dashboard/ui.js - DOM helpers shared by the pages. Everything is
// built with createElement and text nodes: data from the API is never
// parsed as HTML (no innerHTML anywhere in the dashboard).

// h('a', {href: '#/jobs', class: 'x', dataset: {testid: 'y'}, onclick: fn}, 'text', child, [more])
// Attributes that are null, undefined or false are left out; strings and
// numbers among the children become text nodes.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false)
        continue;
      if (k === 'class')
        el.className = v;
      else if (k === 'text')
        el.textContent = String(v);
      else if (k === 'dataset')
        for (const [dk, dv] of Object.entries(v)) {
          if (dv !== null && dv !== undefined)
            el.dataset[dk] = String(dv);
        }
      else if (k.startsWith('on') && typeof v === 'function')
        el.addEventListener(k.slice(2), v);
      else if (k === 'value' || k === 'checked')
        el[k] = v;
      else
        el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of [children].flat(Infinity)) {
    if (c === null || c === undefined || c === false)
      continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

// The same field names as the table a job's state is shown in.
export const FINAL_STATES = new Set(['COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT']);
export const STATES = ['PENDING', 'QUEUED', 'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED',
                       'TIMEOUT', 'HELD', 'REQUEUED', 'PREEMPTED'];

export function stateBadge(state, testid = 'state-badge') {
  const s = String(state || 'UNKNOWN');
  return h('span', { class: `badge state-${s.toLowerCase().replace(/[^a-z]/g, '')}`,
                     dataset: { state: s, testid } }, s);
}

function pad(n, w = 2) {
  return String(n).padStart(w, '0');
}

// The browser's time zone at date d as its offset from UTC: "UTC",
// "UTC+01:00", "UTC-05:30" (the offset of that date: summer time counts).
export function fmtZone(d) {
  const off = -d.getTimezoneOffset();
  if (!off)
    return 'UTC';
  const a = Math.abs(off);
  return `UTC${off > 0 ? '+' : '-'}${pad(Math.floor(a / 60))}:${pad(a % 60)}`;
}

// "10:57:05 UTC+01:00": a Date's local time of day with its zone.
export function fmtClock(d) {
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())} ${fmtZone(d)}`;
}

// "2026-11-23 10:57:05 UTC+01:00": local time with its offset from UTC,
// the one way the dashboard shows a time.
export function fmtTime(iso) {
  if (!iso)
    return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime()))
    return String(iso);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${fmtClock(d)}`;
}

// A <time> of fmtTime; its title is the API's UTC text.
export function timeEl(iso) {
  if (!iso)
    return h('span', { class: 'muted' }, '—');
  return h('time', { datetime: iso, title: iso, dataset: { testid: 'time' } }, fmtTime(iso));
}

export function fmtDuration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0)
    return '—';
  const s = ms / 1000;
  if (s < 60)
    return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  if (m < 60)
    return `${m}m ${pad(Math.floor(s % 60))}s`;
  const hr = Math.floor(m / 60);
  if (hr < 48)
    return `${hr}h ${pad(m % 60)}m`;
  return `${Math.floor(hr / 24)}d ${hr % 24}h`;
}

export function fmtBytes(n) {
  if (n === null || n === undefined || !Number.isFinite(n))
    return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}

export function fmtNum(v) {
  if (v === null || v === undefined)
    return '—';
  if (typeof v !== 'number')
    return String(v);
  if (!Number.isFinite(v))
    return String(v);
  if (Number.isInteger(v) && Math.abs(v) < 1e9)
    return v.toLocaleString('en-US');
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e6 || a < 1e-3))
    return v.toExponential(3);
  return String(Number(v.toPrecision(5)));
}

// The alert region (role="alert" in index.html): the latest error, with a
// dismiss button. err is an ApiError, an Error or a string.
export function showError(err, context) {
  const region = document.getElementById('alert');
  if (!region)
    return;
  const status = err && err.status ? `${err.status} ${err.code}` : (err && err.code) || 'error';
  const message = (err && err.message) || String(err);
  const box = h('div', { class: 'alert alert-error', dataset: { testid: 'alert-message',
                                                               code: err && err.code } },
                h('div', { class: 'alert-body' },
                  h('strong', { class: 'alert-title' }, context ? `${context}: ` : '', status),
                  h('span', { class: 'alert-text' }, message)),
                h('button', { type: 'button', class: 'btn btn-ghost btn-small',
                              'aria-label': 'Dismiss the error', onclick: () => clearAlert() },
                  'Dismiss'));
  region.replaceChildren(box);
}

export function clearAlert() {
  const region = document.getElementById('alert');
  if (region)
    region.replaceChildren();
}

// A short confirmation in the polite status region (id="notice").
export function notify(text) {
  const region = document.getElementById('notice');
  if (!region)
    return;
  region.replaceChildren(h('div', { class: 'notice' }, text));
  clearTimeout(notify.timer);
  notify.timer = setTimeout(() => region.replaceChildren(), 6000);
}

// A modal question. opts: title, message, confirm (label), danger, input
// ({label, placeholder, maxLength, required}). Resolves to {value} when
// confirmed (value: the input's text, or null without input), null when
// dismissed.
export function ask(opts) {
  return new Promise((resolve) => {
    const id = `dlg-input-${Date.now()}`;
    let input = null;
    const error = h('p', { class: 'field-error', 'aria-live': 'polite' });
    if (opts.input) {
      input = h('input', { id, type: 'text', class: 'input', autocomplete: 'off',
                           maxlength: opts.input.maxLength || 256,
                           placeholder: opts.input.placeholder || null,
                           dataset: { testid: 'dialog-input' } });
    }
    const ok = h('button', { type: 'submit', class: opts.danger ? 'btn btn-danger' : 'btn btn-primary',
                             dataset: { testid: 'dialog-confirm' } }, opts.confirm || 'OK');
    const no = h('button', { type: 'button', class: 'btn', dataset: { testid: 'dialog-cancel' } },
                 opts.dismiss || 'Cancel');
    const form = h('form', { class: 'dialog-form', novalidate: true },
                   h('h2', { class: 'dialog-title', id: `${id}-title` }, opts.title),
                   opts.message ? h('p', { class: 'dialog-message' }, opts.message) : null,
                   input ? h('label', { for: id, class: 'label' }, opts.input.label) : null,
                   input, error,
                   h('div', { class: 'dialog-actions' }, no, ok));
    const dlg = h('dialog', { class: 'dialog', 'aria-labelledby': `${id}-title`,
                              dataset: { testid: 'dialog' } }, form);
    let result = null;
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      if (input) {
        const v = input.value;
        if (opts.input.required && !v.trim()) {
          error.textContent = `${opts.input.label}: required`;
          input.focus();
          return;
        }
        result = { value: v };
      } else {
        result = { value: null };
      }
      dlg.close();
    });
    no.addEventListener('click', () => dlg.close());
    dlg.addEventListener('close', () => {
      dlg.remove();
      resolve(result);
    });
    document.body.append(dlg);
    dlg.showModal();
    (input || no).focus();
  });
}

// Runs fn at most once at a time: a call while it runs makes it run once
// more afterwards. Returns the wrapped function.
export function coalesce(fn) {
  let running = false;
  let again = false;
  return async function run() {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      do {
        again = false;
        await fn();
      } while (again);
    } finally {
      running = false;
    }
  };
}

// A card: <section class="card"><div class="card-head"><h2>title</h2>
// actions</div>children</section>. attrs may carry "actions" (nodes put
// beside the title) and a "class" added to "card".
export function card(title, attrs, ...children) {
  const { actions, class: extra, ...rest } = attrs || {};
  const headId = `h-${title.toLowerCase().replace(/[^a-z0-9]+/g, '-')}`;
  return h('section', { ...rest, class: extra ? `card ${extra}` : 'card', 'aria-labelledby': headId },
           h('div', { class: 'card-head' }, h('h2', { id: headId }, title),
             actions ? h('div', { class: 'card-actions' }, actions) : null),
           ...children);
}

// Keyset paging of a list (GET /v1/jobs, /v1/sweeps): the cursor of each
// page on the way here, and the Newer / Older buttons; onPage() reloads
// after a move.
export function pager(onPage) {
  const p = {
    cursors: [null],
    next: null,
    prev: null,
    older: null,
    get cursor() { return p.cursors[p.cursors.length - 1]; },
    get page() { return p.cursors.length; },
    reset() { p.cursors = [null]; },
    // after a load: the page's next_cursor; the buttons follow
    update(nextCursor) {
      p.next = nextCursor || null;
      p.prev.disabled = p.cursors.length <= 1;
      p.older.disabled = !p.next;
    },
    move(d) {
      if (d > 0 && p.next)
        p.cursors.push(p.next);
      else if (d < 0 && p.cursors.length > 1)
        p.cursors.pop();
      else
        return;
      onPage();
    },
  };
  p.prev = h('button', { type: 'button', class: 'btn', dataset: { testid: 'page-prev' },
                         onclick: () => p.move(-1) }, '← Newer');
  p.older = h('button', { type: 'button', class: 'btn', dataset: { testid: 'page-next' },
                          onclick: () => p.move(1) }, 'Older →');
  return p;
}

export function tableWrap(table, label) {
  return h('div', { class: 'table-wrap', tabindex: 0, role: 'region', 'aria-label': label }, table);
}

export function empty(text) {
  return h('p', { class: 'empty' }, text);
}
