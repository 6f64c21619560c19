// service/dashboard/app.js - the dashboard's entry point: hash routes
// (#/signin, #/jobs, #/jobs/j-000001, #/compare?jobs=..., #/sweeps,
// #/sweeps/s-000001, #/admin), the header (who is signed in, the live
// indicator, sign-out) and the sign-in page.
import { ApiError, TOKEN_RE, feed, isAbort, request, session,
         setUnauthorizedHandler } from './api.js';
import { adminView } from './admin.js';
import { compareView } from './compare.js';
import { jobView } from './job.js';
import { jobsView } from './jobs.js';
import { sweepView, sweepsView } from './sweeps.js';
import { clearAlert, h, showError } from './ui.js';

const NEXT_KEY = 'larch.next';
const routes = [
  { re: /^\/signin$/, view: signinView, open: true, title: 'Sign in' },
  { re: /^\/jobs$/, view: jobsView, title: 'Jobs', nav: 'jobs' },
  { re: /^\/jobs\/(j-\d{6,})$/, view: jobView, title: 'Job', nav: 'jobs' },
  { re: /^\/compare$/, view: compareView, title: 'Compare', nav: 'jobs' },
  { re: /^\/sweeps$/, view: sweepsView, title: 'Sweeps', nav: 'sweeps' },
  { re: /^\/sweeps\/(s-\d{6,})$/, view: sweepView, title: 'Sweep', nav: 'sweeps' },
  { re: /^\/admin$/, view: adminView, title: 'Admin', nav: 'admin' },
];

let current = null;        // {ctrl, cleanups}
let signinMessage = null;  // shown once on the sign-in page

// ---- the header ------------------------------------------------------------

function renderSession() {
  const s = session.get();
  const box = document.getElementById('session');
  document.getElementById('nav-admin-item').hidden = !(s && s.role === 'admin');
  document.getElementById('nav-jobs-item').hidden = !s;
  document.getElementById('nav-sweeps-item').hidden = !s;
  if (!s) {
    box.replaceChildren();
    return;
  }
  const live = h('span', { class: 'live', dataset: { testid: 'live', mode: feed.mode } },
                 h('span', { class: 'live-dot', 'aria-hidden': 'true' }),
                 h('span', { class: 'live-text' }, ''));
  const who = h('span', { class: 'who', dataset: { testid: 'whoami', role: s.role } },
                h('span', { class: 'who-name' }, s.user || (s.role === 'admin' ? 'admin' : 'user')),
                h('span', { class: `role role-${s.role}` }, s.role),
                h('span', { class: 'who-token', title: 'the end of your token' },
                  `…${s.token.slice(-4)}`));
  const out = h('button', { type: 'button', class: 'btn btn-ghost btn-small',
                            dataset: { testid: 'signout' }, onclick: signOut }, 'Sign out');
  box.replaceChildren(live, who, out);
  showMode(feed.mode);
}

const MODES = {
  live: ['Live', 'Live updates from larchd (GET /v1/events)'],
  polling: ['Polling', 'This larchd has no change feed: refreshing every 3 seconds'],
  offline: ['Reconnecting', 'larchd cannot be reached: retrying'],
  idle: ['', ''],
};

function showMode(mode) {
  const el = document.querySelector('[data-testid="live"]');
  if (!el)
    return;
  const [text, title] = MODES[mode] || MODES.idle;
  el.dataset.mode = mode;
  el.title = title;
  el.querySelector('.live-text').textContent = text;
}

function markNav(nav) {
  for (const a of document.querySelectorAll('.nav a')) {
    if (a.dataset.nav === nav)
      a.setAttribute('aria-current', 'page');
    else
      a.removeAttribute('aria-current');
  }
}

function signOut() {
  session.clear();
  feed.stop();
  renderSession();
  location.hash = '#/signin';
}

// ---- routing -----------------------------------------------------------------

function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/';
  const q = raw.indexOf('?');
  const path = q < 0 ? raw : raw.slice(0, q);
  const query = new URLSearchParams(q < 0 ? '' : raw.slice(q + 1));
  return { path, query };
}

function unmount() {
  if (!current)
    return;
  current.ctrl.abort();
  for (const fn of current.cleanups.splice(0))
    try {
      fn();
    } catch (e) {
      console.error(e);
    }
  current = null;
}

function route() {
  const { path, query } = parseHash();
  const s = session.get();
  if (path === '/' || path === '') {
    location.replace(s ? '#/jobs' : '#/signin');
    return;
  }
  const r = routes.find((x) => x.re.test(path));
  if (r && !r.open && !s) {
    sessionStorage.setItem(NEXT_KEY, `#${path}${query.toString() ? `?${query}` : ''}`);
    location.replace('#/signin');
    return;
  }
  unmount();
  clearAlert();
  const main = document.getElementById('main');
  main.replaceChildren();
  delete document.body.dataset.chartsReadyMs;
  markNav(r ? r.nav : null);
  if (!r) {
    document.title = 'Not found · larch';
    main.append(h('section', { class: 'card narrow' },
                  h('h1', null, 'Not found'),
                  h('p', null, 'There is no page at this address. '),
                  h('p', null, h('a', { href: '#/jobs' }, 'Go to the jobs'))));
    return;
  }
  document.title = `${r.title} · larch`;
  const ctrl = new AbortController();
  current = { ctrl, cleanups: [] };
  const ctx = {
    params: path.match(r.re).slice(1),
    query,
    session: s,
    signal: ctrl.signal,
    onCleanup: (fn) => current.cleanups.push(fn),
    // fn(batch) on every batch of the change feed, until the page goes
    onChanges: (fn) => current.cleanups.push(feed.subscribe(fn)),
    every: (ms, fn) => {
      const t = setInterval(fn, ms);
      current.cleanups.push(() => clearInterval(t));
    },
    // Reports an error of the page's own requests (not an abort).
    fail: (e, what) => {
      if (isAbort(e) || ctrl.signal.aborted)
        return;
      if (e instanceof ApiError && e.status === 401)
        return;            // the unauthorized handler signs out
      console.error(e);
      showError(e, what);
    },
  };
  try {
    r.view(main, ctx);
  } catch (e) {
    ctx.fail(e, 'page');
  }
  const heading = main.querySelector('h1');
  if (heading && document.activeElement === document.body) {
    heading.tabIndex = -1;
    heading.focus({ preventScroll: true });
  }
}

// ---- sign in -----------------------------------------------------------------

async function whoIs(token) {
  // A job token can read nothing: a 403 here. 401: not a token of this larchd.
  try {
    const me = await request('GET', '/v1/whoami', { token, revalidate: false });
    if (me.data && (me.data.role === 'admin' || me.data.role === 'user'))
      return { token, role: me.data.role, user: me.data.user };
  } catch (e) {
    if (!(e instanceof ApiError) || e.status !== 404)
      throw e;
  }
  // A larchd without /v1/whoami: the role from what the token may read.
  const jobs = await request('GET', '/v1/jobs?limit=1', { token, revalidate: false });
  let role = 'user';
  try {
    await request('GET', '/v1/queues', { token, revalidate: false });
    role = 'admin';
  } catch (e) {
    if (!(e instanceof ApiError) || e.status !== 403)
      throw e;
  }
  // A user sees only their own jobs, so any of them names them.
  const list = (jobs.data && jobs.data.jobs) || [];
  const user = role === 'user' && list.length ? list[0].owner : null;
  return { token, role, user };
}

function signinView(main, ctx) {
  if (session.get()) {
    location.replace('#/jobs');
    return;
  }
  feed.stop();
  const input = h('input', { id: 'token', name: 'token', type: 'password', class: 'input mono',
                             autocomplete: 'off', spellcheck: 'false', required: true,
                             placeholder: 'lt_…', 'aria-describedby': 'token-help',
                             dataset: { testid: 'token-input' } });
  const button = h('button', { type: 'submit', class: 'btn btn-primary',
                               dataset: { testid: 'signin-submit' } }, 'Sign in');
  const form = h('form', { class: 'signin-form', dataset: { testid: 'signin-form' }, novalidate: true },
                 h('label', { for: 'token', class: 'label' }, 'API token'),
                 input,
                 h('p', { id: 'token-help', class: 'help' },
                   'A larchd token: lt_ followed by 64 hex digits (larchd token create). ' +
                   'It stays in this browser tab only and is sent as a bearer header.'),
                 h('div', { class: 'form-actions' }, button));
  main.append(h('section', { class: 'card narrow signin', dataset: { testid: 'signin' } },
                h('div', { class: 'signin-mark', 'aria-hidden': 'true' }),
                h('h1', null, 'Sign in to larch'),
                h('p', { class: 'muted' }, 'Training jobs, their metrics and the cluster.'),
                form));
  if (signinMessage) {
    showError(signinMessage);
    signinMessage = null;
  }
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const token = input.value.trim();
    if (!TOKEN_RE.test(token)) {
      showError(new ApiError(0, 'bad_token', 'a token is lt_ followed by 64 lowercase hex digits'),
                'Sign in');
      input.focus();
      return;
    }
    button.disabled = true;
    try {
      const s = await whoIs(token);
      clearAlert();
      session.set(s);
      feed.start();
      renderSession();
      const next = sessionStorage.getItem(NEXT_KEY);
      sessionStorage.removeItem(NEXT_KEY);
      location.hash = next && next !== '#/signin' ? next : '#/jobs';
    } catch (e) {
      if (e instanceof ApiError && e.status === 401)
        showError(new ApiError(401, e.code, `larchd does not accept this token (${e.message})`),
                  'Sign in');
      else if (e instanceof ApiError && e.status === 403)
        showError(new ApiError(403, e.code, 'this is a job token: sign in with a user or admin token'),
                  'Sign in');
      else
        ctx.fail(e, 'Sign in');
      button.disabled = false;
      input.focus();
    }
  });
}

// ---- start -------------------------------------------------------------------

setUnauthorizedHandler((err) => {
  if (!session.get())
    return;
  session.clear();
  feed.stop();
  renderSession();
  signinMessage = new ApiError(401, err.code,
                               `your token is no longer accepted (${err.message}): sign in again`);
  location.hash = '#/signin';
});

feed.onMode(showMode);
document.getElementById('skip-link').addEventListener('click', (ev) => {
  ev.preventDefault();
  const main = document.getElementById('main');
  main.focus();
});
window.addEventListener('hashchange', route);
// A page kept in the back/forward cache keeps its requests open, and the
// long poll would hold one of the browser's few connections to larchd:
// leaving stops everything, coming back starts again.
window.addEventListener('pagehide', () => {
  unmount();
  feed.stop();
});
window.addEventListener('pageshow', (ev) => {
  if (!ev.persisted)
    return;
  if (session.get())
    feed.start();
  renderSession();
  route();
});
if (session.get())
  feed.start();
renderSession();
route();
