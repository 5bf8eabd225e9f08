// berth's page: sign-in, the domains, a domain's instances grouped by worktree, an instance's
// details, releases and logs. Live from the domain's event stream; no periodic request.

import * as api from './api.js';
import {
  h, replace, badge, when, ago, stateTime, shortDigest, imageName, stopReason, formatBytes,
  EVIDENCE,
} from './view.js';

const main = document.getElementById('main');
const crumbs = document.getElementById('crumbs');
const liveEl = document.getElementById('live');
const signOutButton = document.getElementById('sign-out');
const toastEl = document.getElementById('toast');
const dialog = document.getElementById('confirm');

// The domain whose stream is open, shared by its list and its instances' pages.
let live = null;
// What the view on screen has open (a log stream), aborted when it goes.
let viewAbort = null;
// Re-renders the view on screen when the live model changes.
let onChange = null;
// What the current view does with a copy's progress (an instance page shows its snapshots).
let onCopy = null;
// Who the page is signed in as (GET /v1/whoami): what its key may do decides which buttons it
// shows. The daemon refuses what the key may not do whatever the page shows.
let me = null;

// Whether the signed-in key may use `capability` in the domain of `model` (when given).
function can(capability, model) {
  if (!me || !me.restricted) return true;
  if ((me.capabilities || []).includes(capability)) return true;
  const d = model && model.domain;
  return !!d && (me.serviceDeploymentGrants || []).some((g) =>
    (g.serviceId === d.name || g.serviceId === d.resourceDomainId) && g.capabilities.includes(capability));
}

function toast(text) {
  toastEl.textContent = text;
  toastEl.classList.add('shown');
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => toastEl.classList.remove('shown'), 4000);
}

function setCrumbs(...items) {
  const list = h('ol');
  items.forEach((item, i) => {
    const last = i === items.length - 1;
    list.append(h('li', {}, last
      ? h('span', { 'aria-current': 'page' }, item.text)
      : h('a', { href: item.href }, item.text)));
  });
  replace(crumbs, list);
}

function setLive(state) {
  if (!state) { replace(liveEl); liveEl.className = 'live'; return; }
  liveEl.className = `live ${state}`;
  replace(liveEl, h('span', { class: 'mark', 'aria-hidden': 'true' }, state === 'live' ? '●' : '○'),
    state === 'live' ? 'Live' : 'Reconnecting…');
}

function focusHeading() {
  const heading = main.querySelector('h1');
  if (heading) { heading.setAttribute('tabindex', '-1'); heading.focus({ preventScroll: true }); }
}

function failed(e) {
  if (e instanceof api.Unauthorized) {
    api.setToken(null);
    showSignIn('Your session ended (it expired, was signed out, or berth restarted). Sign in again.');
    return;
  }
  toast(e.message || String(e));
}

// ---- sign-in ----

function showSignIn(message) {
  closeLive();
  me = null;
  signOutButton.hidden = true;
  setCrumbs({ text: 'Sign in' });
  const error = h('p', { class: 'error', role: 'alert' }, message || '');
  const input = h('input', {
    id: 'key', name: 'key', type: 'password', spellcheck: 'false', required: true,
    'aria-describedby': 'key-help',
  });
  const form = h('form', {
    class: 'card narrow',
    onsubmit: async (event) => {
      event.preventDefault();
      error.textContent = '';
      try {
        await api.signInWithKey(input.value.trim());
        input.value = '';
        location.hash = '#/';
        route();
      } catch (e) {
        error.textContent = e instanceof api.Unauthorized
          ? 'berth does not know this key.' : (e.message || String(e));
      }
    },
  },
  h('label', { for: 'key' }, 'Service key'),
  input,
  h('p', { id: 'key-help', class: 'muted small' },
    'The key is checked once and not kept: the page keeps a session token for this tab only.'),
  h('div', { class: 'row end' }, h('button', { type: 'submit' }, 'Sign in')));
  replace(main,
    h('section', { class: 'center' },
      h('h1', {}, 'Sign in to berth'),
      h('p', {}, 'Run ', h('code', {}, 'berth ui'), ' in a terminal: it opens this page signed in, with a link that works once.'),
      error,
      h('p', { class: 'muted' }, 'Or paste a service key:'),
      form));
  focusHeading();
}

// ---- the live model of a domain ----

function closeLive() {
  if (live) live.abort.abort();
  live = null;
  setLive(null);
}

function groupKey(entry) { return entry.instance.worktreeKey; }

// The names a person wrote, without what berth adds to keep them apart: a project's name
// without the hash of its repository's path (kept in the title), an instance's name without
// its worktree key or its generation (`redis.2@fix-1a2b3c4d` is `redis`).
function projectName(d) { return d.name.replace(/ [0-9a-f]{8}$/, ''); }
function instanceName(key) { return key.split('@')[0].replace(/\.[0-9]+$/, ''); }

// A worktree's heading: the branch it has checked out (its key when the CLI never said, or on a
// detached head), where it lives, and whether it was removed.
function worktreeLabel(key, list) {
  const tree = list.map((e) => e.instance.worktree).find((w) => w);
  return tree && tree.branch ? tree.branch : key;
}

function worktreeHeading(id, key, list) {
  const tree = list.map((e) => e.instance.worktree).find((w) => w);
  const label = worktreeLabel(key, list);
  return h('h2', { id, title: tree ? `${tree.path} (worktree key ${key})` : `worktree key ${key}` },
    h('span', { class: 'muted' }, 'worktree '), h('code', {}, label),
    tree && tree.endedAt ? [' ', badge('removed'),
      h('span', { class: 'muted small' }, ' stopped by berth; ', h('code', {}, 'berth prune'), ' archives it')] : null);
}

async function openLive(id) {
  // A second view of the same project (two routes in quick succession) waits for the first
  // one's summary instead of asking for it again.
  if (live && live.id === id) { await live.ready; return live; }
  closeLive();
  const abort = new AbortController();
  const model = {
    id, abort, domain: null, entries: new Map(), workspaces: [], refreshTimer: null,
    sizes: null, sizesAt: null, sizesLoading: null, ready: null,
  };
  live = model;
  model.ready = loadSummary(model);
  await model.ready;
  api.streamEvents(id, {
    signal: abort.signal,
    onState: (state) => { if (live === model) setLive(state); },
    onUnauthorized: () => failed(new api.Unauthorized()),
    onEvent: (name, data) => {
      if (live !== model) return;
      if (name === 'resync') { scheduleRefresh(model); return; }
      if (name === 'copy') { if (onCopy) onCopy(data); return; }
      if (name !== 'instance') return;
      applyChange(model, data);
    },
  });
  return model;
}

async function loadSummary(model) {
  const summary = await api.get(`${api.domainPath(model.id)}/summary`);
  model.domain = summary.domain;
  model.workspaces = summary.workspaces;
  const entries = new Map();
  for (const entry of summary.instances) entries.set(entry.instance.key, entry);
  model.entries = entries;
  // A pool's waiting instances are not in the summary: the pools say how many there are.
  model.pools = (await api.get(`${api.domainPath(model.id)}/pools`)).items;
}

function poolSection(model) {
  if (!model.pools || model.pools.length === 0) return null;
  return h('section', { class: 'group pools', 'aria-labelledby': 'pools' },
    h('h2', { id: 'pools' }, 'Pools'),
    h('div', { class: 'table-wrap' },
      h('table', {},
        h('caption', { class: 'visually-hidden' }, 'Pools of ready instances'),
        h('thead', {}, h('tr', {},
          ['Pool', 'From', 'Size', 'Ready', 'Being made', 'Leased', 'Note']
            .map((t) => h('th', { scope: 'col', class: ['Size', 'Ready', 'Being made', 'Leased'].includes(t) ? 'num' : null }, t)))),
        h('tbody', {}, model.pools.map((p) => h('tr', { 'data-pool': p.name },
          h('th', { scope: 'row' }, h('code', {}, p.name)),
          h('td', {}, p.from.snapshotId ? ['snapshot ', h('code', {}, p.from.snapshotId)] : 'template'),
          h('td', { class: 'num' }, String(p.size)),
          h('td', { class: 'num' }, String(p.ready)),
          h('td', { class: 'num' }, String(p.making)),
          h('td', { class: 'num' }, String(p.leased)),
          h('td', { class: 'muted small' }, p.deleting ? 'being deleted' : (p.message || ''))))))));
}

// The engine's volume sizes, asked for once per view (and when a person asks again), never
// per event: the engine walks every volume to measure them.
function loadSizes(model) {
  if (model.sizesLoading) return model.sizesLoading;
  model.sizesLoading = (async () => {
    try {
      const usage = await api.get(`${api.domainPath(model.id)}/volume-usage`);
      if (live !== model) return;
      const sizes = new Map();
      for (const i of usage.instances) sizes.set(i.key, new Map(i.volumes.map((v) => [v.name, v.bytes])));
      model.sizes = sizes;
      model.sizesAt = usage.measuredAt;
      if (onChange) onChange({ full: true, sizes: true });
    } catch (e) { failed(e); } finally { model.sizesLoading = null; }
  })();
  return model.sizesLoading;
}

// Whether a volume on screen has not been measured yet (none was, or it is newer).
function needsSizes(model) {
  if (!model.sizes) return true;
  return [...model.entries.values()].some((e) => e.instance.volumes.some((v) => sizeOf(model, e.instance.key, v.name) === undefined));
}

function sizeOf(model, key, volume) {
  const of = model.sizes && model.sizes.get(key);
  return of && of.has(volume) ? of.get(volume) : undefined;
}

function volumeList(model, i, { docker = false } = {}) {
  if (!i.volumes.length) return h('span', { class: 'muted' }, 'none');
  return h('ul', { class: 'plain volumes' }, i.volumes.map((v) => {
    const bytes = sizeOf(model, i.key, v.name);
    return h('li', { title: v.dockerName, 'data-volume': v.name },
      docker ? h('code', {}, v.name) : v.name,
      bytes === undefined ? null
        : h('span', { class: 'muted small size', 'data-bytes': bytes === null ? '' : String(bytes) },
          ` ${bytes === null ? 'size unknown' : formatBytes(bytes)}`),
      docker ? h('span', { class: 'muted small' }, ` Docker volume ${v.dockerName}`) : null);
  }));
}

// What the instance's volumes were branched from, in words.
function origin(entry, { prefix = true, id = null } = {}) {
  const b = entry.branchedFrom;
  if (!b) return null;
  const source = b.instanceKey
    ? ['instance ', h('code', {}, b.instanceKey)]
    : ['snapshot ', h('code', { title: b.snapshotId }, b.snapshotName || b.snapshotId),
      b.snapshotInstanceKey ? [' of ', h('code', {}, b.snapshotInstanceKey)] : ''];
  const state = b.state === 'copying' ? ' (copying)' : b.state === 'failed' ? ' (its copy failed)' : '';
  return h('span', { class: 'origin', id }, prefix ? 'branched from ' : '', source, prefix ? ' ' : ', ', when(b.at), state);
}

function lastFailure(entry, { long = false } = {}) {
  const i = entry.instance;
  if (i.state.kind === 'failed') {
    return h('div', { class: 'failure small', role: long ? 'alert' : null }, h('strong', {}, 'Failed: '), i.state.message);
  }
  const f = entry.lastFailure;
  if (!f) return null;
  return h('div', { class: 'last-failure small muted' }, h('strong', {}, 'Last failure '), when(f.at), ': ', f.message);
}

// A summary read again after a change the stream's view does not carry (a new instance, a new
// spec, endpoints or restarts that follow a start): once per burst of changes, never on a timer.
function scheduleRefresh(model) {
  clearTimeout(model.refreshTimer);
  model.refreshTimer = setTimeout(async () => {
    if (live !== model) return;
    try {
      await loadSummary(model);
      if (onChange) onChange({ full: true });
    } catch (e) { failed(e); }
  }, 150);
}

function applyChange(model, change) {
  const next = change.instance;
  const before = model.entries.get(next.key);
  if (next.state.kind === 'archived') {
    if (before) {
      model.entries.delete(next.key);
      if (onChange) onChange({ full: true, key: next.key, archived: true });
    }
    return;
  }
  if (!before && next.key.startsWith('pool-')) {
    // Possibly a pool's waiting instance, which the summary leaves to its pool: it decides.
    scheduleRefresh(model);
    return;
  }
  if (!before) {
    model.entries.set(next.key, {
      instance: next, generation: change.generation, observedGeneration: change.observedGeneration,
      restartCount: 0, endpoints: [], connect: [], image: null, lastFailure: null, branchedFrom: null,
    });
    scheduleRefresh(model);
    if (onChange) onChange({ full: true, key: next.key });
    return;
  }
  // A stream's first events repeat what the summary said: nothing to redraw.
  if (before.generation === change.generation && before.observedGeneration === change.observedGeneration
    && JSON.stringify(before.instance) === JSON.stringify(next)) {
    return;
  }
  // A failure stays on screen, as the last one, after the instance recovers.
  if (next.state.kind === 'failed') before.lastFailure = { message: next.state.message, at: next.state.at };
  const kindBefore = before.instance.state.kind;
  const digestBefore = before.instance.specDigest;
  const worktreeBefore = before.instance.worktreeKey;
  const treeBefore = JSON.stringify(before.instance.worktree || null);
  before.instance = next;
  before.generation = change.generation;
  before.observedGeneration = change.observedGeneration;
  const kind = next.state.kind;
  if (digestBefore !== next.specDigest
    || (kind !== kindBefore && (kind === 'exited' || kind === 'failed'
      || (kind === 'running' && before.endpoints.length === 0)))) {
    scheduleRefresh(model);
  }
  // An instance that moved to another worktree moves to another group; a worktree that was
  // removed (or renamed its branch) changes its group's heading.
  if (onChange) {
    onChange({
      key: next.key,
      full: worktreeBefore !== next.worktreeKey || treeBefore !== JSON.stringify(next.worktree || null),
    });
  }
}

// ---- actions ----

function confirmAction(title, body, ok) {
  return new Promise((resolve) => {
    document.getElementById('confirm-title').textContent = title;
    document.getElementById('confirm-body').textContent = body;
    document.getElementById('confirm-ok').textContent = ok;
    dialog.returnValue = '';
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.showModal();
    document.getElementById('confirm-cancel').focus();
  });
}

// Enter in a field of the branch form branches (the form's first button is Cancel, which an
// implicit submission would press).
for (const field of ['branch-key', 'branch-worktree']) {
  document.getElementById(field).addEventListener('keydown', (event) => {
    if (event.key !== 'Enter') return;
    event.preventDefault();
    document.getElementById('branch-form').requestSubmit(document.getElementById('branch-ok'));
  });
}

// Asks for a branch's new key and worktree key; resolves null when cancelled.
function askBranch(source, worktreeKey, alias) {
  const branchDialog = document.getElementById('branch');
  const keyInput = document.getElementById('branch-key');
  const worktreeInput = document.getElementById('branch-worktree');
  document.getElementById('branch-title').textContent = `Branch a new instance from ${source}`;
  document.getElementById('branch-body').textContent = `The new instance runs the same spec, on a copy of ${source}'s volumes; `
    + `${source} is not changed.`;
  document.getElementById('branch-worktree-help').textContent = `Empty: shared by every worktree. The alias stays ${alias}, `
    + 'which two instances of one worktree (or two shared ones) cannot share.';
  keyInput.value = '';
  worktreeInput.value = worktreeKey || '';
  return new Promise((resolve) => {
    branchDialog.returnValue = '';
    branchDialog.addEventListener('close', () => resolve(branchDialog.returnValue === 'ok'
      ? { key: keyInput.value.trim(), worktreeKey: worktreeInput.value.trim() || null } : null), { once: true });
    branchDialog.showModal();
    keyInput.focus();
  });
}

// Runs an action once at a time per button. The button is marked busy rather than disabled:
// a disabled button would drop the keyboard focus.
async function act(button, what, run) {
  if (button.getAttribute('aria-busy') === 'true') return;
  button.setAttribute('aria-busy', 'true');
  try {
    await run();
    toast(what);
  } catch (e) {
    failed(e);
  } finally {
    button.removeAttribute('aria-busy');
  }
}

// The element in `root` that takes the focus `action` had: the same action, or for a stop the
// start that replaced it (and the other way round).
function refocus(root, action) {
  if (!action) return;
  const [verb, key] = action.split(':');
  const swap = { stop: 'start', start: 'stop' }[verb];
  const again = root.querySelector(`[data-action="${CSS.escape(action)}"]`)
    || (swap && root.querySelector(`[data-action="${CSS.escape(`${swap}:${key}`)}"]`));
  if (again) again.focus();
}

function runningish(instance) {
  return instance.desired === 'running';
}

function actionButtons(model, entry, { withArchive = false } = {}) {
  const i = entry.instance;
  const path = api.instancePath(model.id, i.key);
  const buttons = [];
  if (!can('instances:lifecycle', model)) {
    // No start or stop for this key.
  } else if (runningish(i)) {
    const stop = h('button', {
      type: 'button', class: 'secondary', 'data-action': `stop:${i.key}`, 'aria-label': `Stop ${i.key}`,
      onclick: () => act(stop, `Stopping ${i.key}…`, () => api.post(`${path}/stop`, { by: 'the web page' })),
    }, 'Stop');
    buttons.push(stop);
  } else {
    const start = h('button', {
      type: 'button', class: 'secondary', 'data-action': `start:${i.key}`, 'aria-label': `Start ${i.key}`,
      onclick: () => act(start, `Starting ${i.key}…`, () => api.post(`${path}/start`)),
    }, 'Start');
    buttons.push(start);
  }
  if (withArchive && can('instances:archive', model)) {
    const archive = h('button', {
      type: 'button', class: 'danger-outline', 'data-action': `archive:${i.key}`,
      onclick: async () => {
        const volumes = i.volumes.map((v) => v.name).join(', ');
        const sure = await confirmAction(`Archive ${i.key}?`,
          `Its container is removed. Its volumes${volumes ? ` (${volumes})` : ''} are kept, with their data: `
          + 'an up of the same key uses them again.', 'Archive');
        if (!sure) { archive.focus(); return; }
        act(archive, `Archived ${i.key}; its volumes are kept.`, async () => {
          await api.post(`${path}/archive`);
          location.hash = `#/d/${encodeURIComponent(model.id)}`;
        });
      },
    }, 'Archive…');
    buttons.push(archive);
  }
  return buttons;
}

// Copies `text` (which may hold a password: it is never shown) and says what was copied by
// `shown`, the string on the screen.
function copyButton(text, label, shown = text) {
  const button = h('button', {
    type: 'button', class: 'icon', 'aria-label': label, title: label,
    onclick: async () => {
      try {
        await navigator.clipboard.writeText(text);
        toast(`Copied ${shown}${text !== shown ? ' (with its password)' : ''}`);
      } catch {
        toast(`Copy failed: select ${shown} and copy it`);
      }
    },
  }, 'Copy');
  return button;
}

function endpointCell(entry) {
  const i = entry.instance;
  if (!entry.endpoints.length) return h('span', { class: 'muted' }, '—');
  return entry.endpoints.map((e) => {
    // Another program holds the port: said, and nothing offered to copy.
    if (e.unavailable) {
      return h('div', { class: 'endpoint' },
        h('code', {}, `${e.host}:${e.hostPort}`),
        h('div', { class: 'small warn' }, e.unavailable),
        h('div', { class: 'muted small' }, `→ container port ${e.port}`));
    }
    const known = (entry.connect || []).find((c) => c.port === e.port);
    const connect = known ? known.url : `${e.host}:${e.hostPort}`;
    return h('div', { class: 'endpoint' },
      h('code', {}, `${e.host}:${e.hostPort}`),
      copyButton((known && known.full) || connect, `Copy connect string for ${i.key} port ${e.port}`, connect),
      connect !== `${e.host}:${e.hostPort}` ? h('div', { class: 'muted small mono connect' }, connect) : null,
      h('div', { class: 'muted small' }, `→ container port ${e.port}`));
  });
}

function stateCell(i) {
  const s = i.state;
  return [
    badge(s.kind),
    // The daemon's engine does not answer: the state is the last one seen.
    i.engine ? h('div', { class: 'failure engine-away', title: i.engine.message },
      'Engine unreachable since ', when(i.engine.since), '; last state seen') : null,
    // Frozen for idleness: running, its processes held until a connection, an exec or an up.
    i.frozen ? h('div', { class: 'muted small frozen', title: 'a connection, an exec or an up thaws it' },
      'frozen ', when(i.frozen.since)) : null,
    h('div', { class: 'muted small' },
      s.kind === 'stopped' && stopReason(s) ? `${stopReason(s)}, ` : '',
      s.kind === 'exited' && s.exitCode !== null && s.exitCode !== undefined ? `code ${s.exitCode}, ` : '',
      when(stateTime(s))),
  ];
}

function imageCell(entry) {
  if (!entry.image) return h('span', { class: 'muted' }, '…');
  const img = entry.image;
  const ev = EVIDENCE[img.verificationStatus] || EVIDENCE.pending;
  return [
    h('div', {}, imageName(img.reference)),
    h('div', { class: 'small' },
      h('code', { title: img.digest || '' }, shortDigest(img.digest)), ' ',
      h('span', { class: `evidence ${ev.tone}`, title: img.message || `evidence ${ev.word}` },
        h('span', { 'aria-hidden': 'true' }, ev.mark), ` ${ev.word}`)),
  ];
}

// ---- the domains ----

async function showDomains() {
  closeLive();
  setCrumbs({ text: 'Projects' });
  const { items } = await api.get('/v1/resource-domains');
  const active = items.filter((d) => d.state !== 'archived');
  const archived = items.filter((d) => d.state === 'archived');
  const card = (d) => h('li', {},
    h('a', { class: 'card domain', href: `#/d/${encodeURIComponent(d.resourceDomainId)}` },
      h('span', { class: 'name', title: d.name }, projectName(d)),
      h('span', { class: 'muted small' }, d.state === 'active' ? '' : badge(d.state), ' created ', when(d.createdAt))));
  replace(main,
    h('h1', {}, 'Projects'),
    active.length === 0
      ? h('div', { class: 'empty' },
        h('p', { class: 'big' }, 'No projects yet.'),
        h('p', {}, 'In a git repository, describe its services in ', h('code', {}, 'berth.toml'),
          ' and run ', h('code', {}, 'berth up'), ': the project appears here, with each worktree\'s instances.'),
        h('p', { class: 'muted' }, h('code', {}, 'berth doctor'), ' checks Docker, the daemon and the file first.'))
      : h('ul', { class: 'domains' }, active.map(card)),
    archived.length
      ? h('details', { class: 'archived' }, h('summary', {}, `${archived.length} archived`),
        h('ul', { class: 'domains' }, archived.map(card)))
      : null);
  focusHeading();
}

// ---- a domain ----

function instanceRow(model, entry) {
  const i = entry.instance;
  const href = `#/d/${encodeURIComponent(model.id)}/i/${encodeURIComponent(i.key)}`;
  return h('tr', { 'data-key': i.key, class: `state-${i.state.kind}` },
    h('th', { scope: 'row' },
      h('a', { href, class: 'key', title: i.key }, instanceName(i.key)),
      i.alias !== i.key ? h('div', { class: 'muted small' }, 'alias ', h('code', {}, i.alias)) : null,
      entry.branchedFrom ? h('div', { class: 'muted small' }, origin(entry)) : null),
    h('td', { class: 'state' }, stateCell(i), lastFailure(entry)),
    h('td', {}, imageCell(entry)),
    h('td', {}, endpointCell(entry)),
    h('td', {}, volumeList(model, i)),
    h('td', { class: 'num' }, String(entry.restartCount ?? 0)),
    h('td', { class: 'actions' }, actionButtons(model, entry),
      h('a', { href: `${href}/logs`, class: 'button ghost', 'aria-label': `Logs of ${i.key}` }, 'Logs')));
}

function table(model, entries, caption) {
  return h('div', { class: 'table-wrap' },
    h('table', {},
      h('caption', { class: 'visually-hidden' }, caption),
      h('thead', {}, h('tr', {},
        ['Instance', 'State', 'Image', 'Host endpoint', 'Volumes', 'Restarts', 'Actions']
          .map((t) => h('th', { scope: 'col', class: t === 'Restarts' ? 'num' : null }, t)))),
      h('tbody', {}, entries.map((e) => instanceRow(model, e)))));
}

function renderDomain(model) {
  const entries = [...model.entries.values()].sort((a, b) => a.instance.key.localeCompare(b.instance.key));
  const shared = entries.filter((e) => groupKey(e) === null);
  const worktrees = new Map();
  for (const e of entries) {
    if (groupKey(e) === null) continue;
    if (!worktrees.has(groupKey(e))) worktrees.set(groupKey(e), []);
    worktrees.get(groupKey(e)).push(e);
  }
  const running = entries.filter((e) => e.instance.state.kind === 'running').length;
  const failedCount = entries.filter((e) => e.instance.state.kind === 'failed').length;
  const links = (key) => model.workspaces.filter((w) => w.worktreeKey === key);
  const workspaceList = (ws) => ws.length
    ? h('p', { class: 'muted small' }, 'Linked workspaces: ',
      ws.map((w, n) => [n ? ', ' : '', h('code', {}, w.workspaceId),
        ` (${w.executors.length} executor${w.executors.length === 1 ? '' : 's'})`]))
    : null;
  const sections = [];
  for (const [key, list] of [...worktrees.entries()].sort((a, b) => a[0].localeCompare(b[0]))) {
    const id = `wt-${sections.length}`;
    sections.push(h('section', { class: 'group', 'aria-labelledby': id },
      worktreeHeading(id, key, list),
      workspaceList(links(key)),
      table(model, list, `Instances of worktree ${worktreeLabel(key, list)}`)));
  }
  if (shared.length) {
    sections.push(h('section', { class: 'group shared', 'aria-labelledby': 'shared' },
      h('h2', { id: 'shared' }, 'Shared by every worktree'),
      table(model, shared, 'Shared instances')));
  }
  const pools = poolSection(model);
  if (pools) sections.push(pools);
  const d = model.domain;
  replace(main,
    h('div', { class: 'title-row' },
      h('h1', { title: d.name }, projectName(d)),
      d.state !== 'active' ? badge(d.state) : null,
      h('p', { class: 'muted summary', id: 'counts' },
        `${entries.length} instance${entries.length === 1 ? '' : 's'} · ${running} running`
        + (failedCount ? ` · ${failedCount} failed` : '')),
      entries.length ? sizesNote(model) : null),
    entries.length === 0 && sections.length === 0
      ? h('div', { class: 'empty' },
        h('p', { class: 'big' }, `No instances in ${projectName(d)} yet.`),
        h('p', {}, 'Add one to ', h('code', {}, 'berth.toml'), ' in the repository and run ',
          h('code', {}, 'berth up'), '. It appears here as it starts.'))
      : sections);
}

// When the volume sizes on screen were measured, and a button to measure them again.
function sizesNote(model) {
  const again = h('button', {
    type: 'button', class: 'icon', 'data-action': 'measure',
    onclick: () => act(again, 'Volume sizes measured again.', () => loadSizes(model)),
  }, 'Measure again');
  return h('p', { class: 'muted small sizes-note', id: 'sizes-note' },
    model.sizesAt ? ['Volume sizes measured ', when(model.sizesAt), ' '] : 'Measuring volume sizes… ',
    model.sizesAt ? again : null);
}

function updateRow(model, key) {
  const entry = model.entries.get(key);
  const old = main.querySelector(`tr[data-key="${CSS.escape(key)}"]`);
  if (!entry || !old) return false;
  const focused = old.contains(document.activeElement) ? document.activeElement.getAttribute('data-action') : null;
  const row = instanceRow(model, entry);
  old.replaceWith(row);
  refocus(row, focused);
  const entries = [...model.entries.values()];
  const running = entries.filter((e) => e.instance.state.kind === 'running').length;
  const failedCount = entries.filter((e) => e.instance.state.kind === 'failed').length;
  const counts = document.getElementById('counts');
  if (counts) {
    counts.textContent = `${entries.length} instance${entries.length === 1 ? '' : 's'} · ${running} running`
      + (failedCount ? ` · ${failedCount} failed` : '');
  }
  return true;
}

async function showDomain(id) {
  const model = await openLive(id);
  setCrumbs({ text: 'Projects', href: '#/' }, { text: projectName(model.domain) });
  renderDomain(model);
  performance.mark('berth:domain-rendered');
  if (needsSizes(model)) loadSizes(model);
  onChange = (what) => {
    const action = main.contains(document.activeElement) ? document.activeElement.getAttribute('data-action') : null;
    if (what.full || !updateRow(model, what.key)) { renderDomain(model); refocus(main, action); }
    if (what.archived) toast(`${what.key} archived; its volumes are kept.`);
  };
  focusHeading();
}

// ---- an instance ----

async function showInstance(id, key, focusLogs) {
  const model = await openLive(id);
  const abort = new AbortController();
  viewAbort = abort;
  const domainHref = `#/d/${encodeURIComponent(id)}`;
  setCrumbs({ text: 'Projects', href: '#/' }, { text: projectName(model.domain), href: domainHref }, { text: key });
  const releasesBox = h('div', {}, h('p', { class: 'muted' }, 'Loading releases…'));
  const snapshotsBox = h('div', {}, h('p', { class: 'muted' }, 'Loading snapshots…'));
  const copyStatus = h('p', { class: 'muted small', id: 'copy-status', role: 'status' });
  const logBox = h('pre', {
    class: 'logs', id: 'logs', role: 'log', tabindex: '0', 'aria-label': `Logs of ${key}`, 'aria-live': 'off',
  });
  const logStatus = h('p', { class: 'muted small', id: 'log-status', role: 'status' });
  let stick = true;
  logBox.addEventListener('scroll', () => {
    stick = logBox.scrollTop + logBox.clientHeight >= logBox.scrollHeight - 8;
  });
  let following = true;
  let logAbort = null;
  const followButton = h('button', {
    type: 'button', class: 'ghost', 'aria-pressed': 'true',
    onclick: () => { following = !following; followButton.setAttribute('aria-pressed', String(following)); followButton.textContent = following ? 'Following' : 'Paused'; if (following) openLogs(); else if (logAbort) logAbort.abort(); },
  }, 'Following');

  const openLogs = async () => {
    if (logAbort) logAbort.abort();
    const mine = new AbortController();
    logAbort = mine;
    abort.signal.addEventListener('abort', () => mine.abort(), { once: true });
    logBox.textContent = '';
    logStatus.textContent = 'Following the container\'s output.';
    try {
      await api.streamLogs(id, key, {
        tail: 500,
        signal: mine.signal,
        onText: (text) => {
          logBox.append(text);
          if (stick) logBox.scrollTop = logBox.scrollHeight;
        },
      });
      if (!mine.signal.aborted) logStatus.textContent = 'The container stopped; its output ends here.';
    } catch (e) {
      if (mine.signal.aborted) return;
      if (e instanceof api.Unauthorized) { failed(e); return; }
      logStatus.textContent = e.tag === 'ResourceInstanceNotRunningError'
        ? `No container to read from: start ${key} to see its output.` : (e.message || String(e));
    }
  };

  const detailsBox = h('div');
  const header = h('div');
  const render = () => {
    const entry = model.entries.get(key);
    if (!entry) {
      replace(header, h('h1', {}, key), h('p', {}, `${key} is not in ${projectName(model.domain)} (it may be archived). `,
        h('a', { href: domainHref }, `Back to ${projectName(model.domain)}`)));
      replace(detailsBox);
      return;
    }
    const i = entry.instance;
    const focused = header.contains(document.activeElement) ? document.activeElement.getAttribute('data-action') : null;
    const rollback = h('button', {
      type: 'button', class: 'secondary', 'data-action': `rollback:${key}`,
      onclick: async () => {
        const sure = await confirmAction(`Roll ${key} back?`,
          'It runs the previous release\'s spec again, as a person\'s start. Every volume is kept.', 'Roll back');
        if (!sure) { rollback.focus(); return; }
        act(rollback, `Rolling ${key} back…`, () => api.post(`${api.instancePath(id, key)}/rollback`, {
          idempotencyKey: crypto.randomUUID(), expectedSpecDigest: i.specDigest,
        }));
      },
    }, 'Roll back…');
    replace(header,
      h('div', { class: 'title-row' }, h('h1', {}, key), badge(i.state.kind),
        h('span', { class: 'muted' }, when(stateTime(i.state)))),
      i.state.kind === 'failed' ? lastFailure(entry, { long: true }) : null,
      entry.branchedFrom ? h('p', { class: 'muted' }, origin(entry, { id: 'origin' })) : null,
      h('div', { class: 'row' }, actionButtons(model, entry, { withArchive: true }),
        can('deployment:rollback-route', model) ? rollback : null));
    refocus(header, focused);
    const focusedDetail = detailsBox.contains(document.activeElement) ? document.activeElement.getAttribute('data-action') : null;
    const row = (label, ...value) => [h('dt', {}, label), h('dd', {}, ...value)];
    replace(detailsBox, h('dl', { class: 'details' },
      row('Alias', h('code', {}, i.alias)),
      row('Worktree', i.worktreeKey ? h('code', {}, i.worktreeKey) : 'shared by every worktree'),
      row('Desired', i.desired, i.state.kind === 'stopped' && stopReason(i.state) ? ` (stopped ${stopReason(i.state)})` : ''),
      row('Image', entry.image ? h('code', { class: 'wrap' }, entry.image.reference) : '…'),
      row('Evidence', imageCell(entry)),
      row('Host endpoint', endpointCell(entry)),
      row('Volumes', volumeList(model, i, { docker: true }), i.volumes.length ? sizesNote(model) : null),
      row('Restarts', String(entry.restartCount ?? 0)),
      row('Last failure', entry.lastFailure
        ? h('span', { id: 'last-failure' }, when(entry.lastFailure.at), ': ', entry.lastFailure.message)
        : h('span', { class: 'muted' }, 'none')),
      row('Branched from', entry.branchedFrom ? origin(entry, { prefix: false }) : h('span', { class: 'muted' }, 'not a branch')),
      row('Last reached', i.lastReachedAt ? when(i.lastReachedAt) : 'never'),
      row('Spec', h('code', { title: i.specDigest }, shortDigest(i.specDigest)))));
    refocus(detailsBox, focusedDetail);
  };

  const loadReleases = async () => {
    try {
      const [releases, rollouts] = await Promise.all([
        api.get(`${api.instancePath(id, key)}/releases`),
        api.get(`${api.instancePath(id, key)}/rollouts`).catch(() => ({ items: [] })),
      ]);
      if (abort.signal.aborted) return;
      replace(releasesBox, releases.items.length === 0
        ? h('p', { class: 'muted' }, 'No release yet: one is recorded when a verified container of a spec starts.')
        : h('div', { class: 'table-wrap' }, h('table', { class: 'releases' },
          h('caption', { class: 'visually-hidden' }, `Releases of ${key}`),
          h('thead', {}, h('tr', {}, ['Spec', 'Image', 'First started', 'Ended'].map((t) => h('th', { scope: 'col' }, t)))),
          h('tbody', {}, releases.items.map((r) => h('tr', {},
            h('td', {}, h('code', { title: r.specDigest }, shortDigest(r.specDigest)), r.ended ? '' : h('span', { class: 'badge ok small' }, 'current')),
            h('td', {}, imageName(r.image), ' ', h('code', { title: r.imageDigest }, shortDigest(r.imageDigest))),
            h('td', {}, when(r.firstStartedAt)),
            h('td', {}, r.ended ? [r.ended, ' ', when(r.endedAt)] : '—')))))),
      rolloutTable(rollouts.items));
    } catch (e) { if (!abort.signal.aborted) failed(e); }
  };

  // The key of a branch asked for from this page: its copy's progress is shown here too.
  let branching = null;
  const restore = (s, button) => async () => {
    const sure = await confirmAction(`Restore ${s.name} into ${key}?`,
      `What ${key}'s volumes hold now is kept first, as a before-restore snapshot listed here; then `
      + `${s.name}'s contents are copied in and ${key} starts again on them (its container stops for the copy).`,
      'Restore');
    if (!sure) { button.focus(); return; }
    act(button, `Restoring ${s.name} into ${key}…`, async () => {
      const asking = `Restoring ${s.name}…`;
      copyStatus.textContent = asking;
      const answer = await api.post(`${api.instancePath(id, key)}/restore`, { snapshotId: s.snapshotId });
      // The copy's own events may have said more already.
      if (copyStatus.textContent === asking) {
        copyStatus.textContent = `Restoring ${s.name}; what ${key} held is kept as ${answer.beforeRestore.name}.`;
      }
      loadSnapshots();
    });
  };
  const branch = (s, button) => async () => {
    const entry = model.entries.get(key);
    const asked = await askBranch(`the snapshot ${s.name}`, entry ? entry.instance.worktreeKey : null,
      entry ? entry.instance.alias : key);
    if (!asked) { button.focus(); return; }
    act(button, `Branching ${asked.key} from ${s.name}…`, async () => {
      branching = asked.key;
      copyStatus.textContent = `Branching ${asked.key} from ${s.name}…`;
      await api.post(`${api.instancePath(id, asked.key)}/branch`, {
        from: { snapshotId: s.snapshotId }, worktreeKey: asked.worktreeKey, cause: 'person',
      });
    });
  };
  const loadSnapshots = async () => {
    try {
      const snapshots = await api.get(`${api.domainPath(id)}/snapshots?instanceKey=${encodeURIComponent(key)}`);
      if (abort.signal.aborted) return;
      const focused = snapshotsBox.contains(document.activeElement) ? document.activeElement.getAttribute('data-action') : null;
      replace(snapshotsBox, snapshotTable(key, snapshots.items, { restore, branch, copies: can('data:snapshot', model) }));
      refocus(snapshotsBox, focused);
    } catch (e) { if (!abort.signal.aborted) failed(e); }
  };
  const snapshotName = h('input', {
    id: 'snapshot-name', name: 'name', type: 'text', required: true, maxlength: '100', autocomplete: 'off',
    spellcheck: 'false', 'aria-describedby': 'snapshot-help',
  });
  const takeButton = h('button', { type: 'submit', 'data-action': `snapshot:${key}` }, 'Take snapshot');
  const takeForm = h('form', {
    class: 'take-snapshot',
    onsubmit: (event) => {
      event.preventDefault();
      const name = snapshotName.value.trim();
      if (!name) return;
      act(takeButton, `Taking the snapshot ${name}…`, async () => {
        await api.post(`${api.instancePath(id, key)}/snapshots`, { name });
        snapshotName.value = '';
        loadSnapshots();
      });
    },
  },
  h('label', { for: 'snapshot-name' }, 'Snapshot name'),
  h('div', { class: 'row' }, snapshotName, takeButton),
  h('p', { id: 'snapshot-help', class: 'muted small' },
    'Copies the volumes as they are now; a running instance is frozen only for the copy.'));

  replace(main, header,
    h('div', { class: 'split' },
      h('section', { 'aria-labelledby': 'details-h' }, h('h2', { id: 'details-h' }, 'Details'), detailsBox),
      h('section', { 'aria-labelledby': 'releases-h' }, h('h2', { id: 'releases-h' }, 'Releases'), releasesBox)),
    h('section', { 'aria-labelledby': 'snapshots-h' }, h('h2', { id: 'snapshots-h' }, 'Snapshots'),
      can('data:snapshot', model) ? takeForm : null, copyStatus, snapshotsBox),
    h('section', { 'aria-labelledby': 'logs-h', class: 'log-section' },
      h('div', { class: 'title-row' }, h('h2', { id: 'logs-h' }, 'Logs'), followButton),
      logStatus, logBox));
  render();
  let digest = model.entries.get(key)?.instance.specDigest;
  let kind = model.entries.get(key)?.instance.state.kind;
  let started = model.entries.get(key)?.instance.startedAt;
  onChange = () => {
    render();
    const entry = model.entries.get(key);
    if (entry && entry.instance.specDigest !== digest) { digest = entry.instance.specDigest; loadReleases(); }
    const k = entry?.instance.state.kind;
    if (k !== kind) {
      // A spec's release is recorded when its container runs: the history is read again then.
      if (k === 'running') loadReleases();
      kind = k;
    }
    // A container that started again (a start, a restore, a rollback) has new output to follow.
    const s = entry?.instance.startedAt;
    if (s && s !== started) {
      started = s;
      if (following && (k === 'starting' || k === 'running')) openLogs();
    }
  };
  // A copy of this instance's volumes (a snapshot of it, a branch or a restore into it) says
  // its progress on the stream; the list is read again when it ends.
  onCopy = (copy) => {
    const mine = copy.instanceKey === key;
    const ours = branching !== null && copy.instanceKey === branching && copy.kind === 'branch';
    if (!mine && !ours) return;
    const what = ours ? `The branch ${copy.instanceKey}` : `The ${copy.kind}`;
    if (copy.state === 'copying') {
      copyStatus.textContent = `${ours ? `The branch ${copy.instanceKey}` : `A ${copy.kind}`} is copying: `
        + `${formatBytes(copy.bytesDone)}${copy.bytesTotal ? ` of ${formatBytes(copy.bytesTotal)}` : ''}.`;
      return;
    }
    if (copy.state === 'done' && ours) {
      replace(copyStatus, `${what} is done: `,
        h('a', { href: `#/d/${encodeURIComponent(id)}/i/${encodeURIComponent(copy.instanceKey)}` }, `open ${copy.instanceKey}`), '.');
    } else {
      copyStatus.textContent = copy.state === 'done' ? `${what} is done.` : `${what} failed: ${copy.message || 'no reason given'}.`;
    }
    if (mine) loadSnapshots();
  };
  loadReleases();
  loadSnapshots();
  if (needsSizes(model)) loadSizes(model);
  openLogs();
  if (focusLogs) logBox.focus(); else focusHeading();
}

// An instance's snapshots, newest first, with what to run when there is none.
function snapshotTable(key, items, { restore, branch, copies = true }) {
  if (!items.length) {
    return h('p', { class: 'muted' }, 'No snapshot yet. Take one above, or run ',
      h('code', {}, `berth snapshot ${key} before-migration`),
      '; a snapshot can be restored into this instance, or branched into a new one.');
  }
  const actions = (s) => {
    if (s.state !== 'ready' || !copies) return h('span', { class: 'muted' }, '—');
    const restoreButton = h('button', {
      type: 'button', class: 'secondary', 'data-action': `restore:${s.snapshotId}`, 'aria-label': `Restore ${s.name} into ${key}`,
    }, 'Restore…');
    restoreButton.addEventListener('click', restore(s, restoreButton));
    const branchButton = h('button', {
      type: 'button', class: 'ghost', 'data-action': `branch:${s.snapshotId}`, 'aria-label': `Branch a new instance from ${s.name}`,
    }, 'Branch…');
    branchButton.addEventListener('click', branch(s, branchButton));
    return [restoreButton, branchButton];
  };
  return h('div', { class: 'table-wrap' }, h('table', {},
    h('caption', { class: 'visually-hidden' }, `Snapshots of ${key}`),
    h('thead', {}, h('tr', {}, ['Name', 'State', 'Taken', 'Size', 'Actions'].map((t) => h('th', { scope: 'col', class: t === 'Size' ? 'num' : null }, t)))),
    h('tbody', {}, items.map((s) => h('tr', { 'data-snapshot': s.name },
      h('td', {}, h('code', { title: s.snapshotId }, s.name)),
      h('td', {}, s.state === 'failed' ? `failed: ${s.message || ''}` : s.state),
      h('td', {}, when(s.createdAt)),
      h('td', { class: 'num' }, formatBytes(s.volumes.reduce((sum, v) => (v.bytes == null || sum == null ? null : sum + v.bytes), 0))),
      h('td', { class: 'actions' }, actions(s)))))));
}

// An instance's image rollouts, newest first, where the API has them.
function rolloutTable(items) {
  if (!items.length) return null;
  const sorted = [...items].sort((a, b) => b.status.rolloutGeneration - a.status.rolloutGeneration);
  return [
    h('h3', { class: 'sub' }, 'Rollouts'),
    h('div', { class: 'table-wrap' }, h('table', {},
      h('caption', { class: 'visually-hidden' }, 'Image rollouts'),
      h('thead', {}, h('tr', {}, ['Generation', 'Status', 'Digest', 'Healthy'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, sorted.slice(0, 10).map((r) => h('tr', {},
        h('td', { class: 'num' }, String(r.status.rolloutGeneration)),
        h('td', {}, String(r.status.status)),
        h('td', {}, h('code', { title: r.status.expectedDigest }, shortDigest(r.status.expectedDigest))),
        h('td', { class: 'num' }, `${r.status.healthyReplicaCount}/${r.status.requiredReplicaCount}`)))))),
  ];
}

// ---- routing ----

async function route() {
  if (viewAbort) { viewAbort.abort(); viewAbort = null; }
  onChange = null;
  onCopy = null;
  if (!api.token()) { showSignIn(); return; }
  signOutButton.hidden = false;
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  try {
    if (!me) me = await api.get('/v1/whoami');
    if (parts[0] === 'd' && parts[1] && parts[2] === 'i' && parts[3]) await showInstance(parts[1], parts[3], parts[4] === 'logs');
    else if (parts[0] === 'd' && parts[1]) await showDomain(parts[1]);
    else await showDomains();
  } catch (e) {
    if (e instanceof api.ApiError && (e.status === 404 || e.status === 403)) {
      closeLive();
      replace(main, h('h1', {}, 'Not found'), h('p', {}, e.message), h('p', {}, h('a', { href: '#/' }, 'All projects')));
      focusHeading();
      return;
    }
    failed(e);
  }
}

signOutButton.addEventListener('click', async () => {
  try { await api.signOut(); } catch { /* the token is forgotten either way */ }
  showSignIn('Signed out.');
});

window.addEventListener('hashchange', route);

// Times on screen say how long ago; they are refreshed here, without asking berth anything.
setInterval(() => {
  for (const t of document.querySelectorAll('time[data-ago]')) t.textContent = ago(t.dataset.ago);
}, 30000);

async function boot() {
  const hash = location.hash;
  if (hash.startsWith('#code=')) {
    // `#code=CODE`, and from `berth ui` in a repository `&open=d/ID`: the project to show.
    const params = new URLSearchParams(hash.slice(1));
    const code = params.get('code') || '';
    const open = params.get('open') || '';
    const next = /^d\/[^/]+$/.test(open) ? `#/${open}` : '#/';
    // The code leaves the address bar (and the history) before it is used.
    history.replaceState(null, '', `${location.pathname}${next}`);
    try {
      await api.redeem(code);
    } catch (e) {
      showSignIn(e instanceof api.Unauthorized
        ? 'This sign-in link was already used or has expired: run berth ui for a new one.'
        : (e.message || String(e)));
      return;
    }
  }
  await route();
}

boot();
