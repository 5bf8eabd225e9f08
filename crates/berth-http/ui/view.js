// Small DOM helpers: every node is built with createElement and text nodes, never from HTML
// strings, so nothing berth or a container says can become markup.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
    else if (name === 'class') el.className = value;
    else if (value === true) el.setAttribute(name, '');
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

// What each state looks like: a mark and a word, so colour is never the only signal.
export const STATES = {
  'running': { mark: '●', word: 'running', tone: 'ok' },
  'starting': { mark: '◐', word: 'starting', tone: 'busy' },
  'stopped': { mark: '■', word: 'stopped', tone: 'idle' },
  'exited': { mark: '▲', word: 'exited', tone: 'warn' },
  'failed': { mark: '✕', word: 'failed', tone: 'bad' },
  'not-started': { mark: '○', word: 'not started', tone: 'idle' },
  'archived': { mark: '▣', word: 'archived', tone: 'idle' },
};

export const EVIDENCE = {
  verified: { mark: '✓', word: 'verified', tone: 'ok' },
  pending: { mark: '…', word: 'pending', tone: 'idle' },
  missing: { mark: '?', word: 'missing', tone: 'warn' },
  mismatched: { mark: '✕', word: 'mismatched', tone: 'bad' },
};

export function badge(kind, table = STATES) {
  const s = table[kind] || { mark: '·', word: kind, tone: 'idle' };
  return h('span', { class: `badge ${s.tone}`, 'data-state': kind },
    h('span', { class: 'mark', 'aria-hidden': 'true' }, s.mark), s.word);
}

// When the state began: `since` for starting and running, `at` for the others.
export function stateTime(state) {
  return state.since || state.at || null;
}

export function ago(iso, now = Date.now()) {
  if (!iso) return '';
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (seconds < 45) return 'just now';
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min ago`;
  const hours = Math.round(minutes / 60);
  if (hours < 36) return `${hours} h ago`;
  return `${Math.round(hours / 24)} days ago`;
}

export function when(iso) {
  if (!iso) return '';
  return h('time', { datetime: iso, title: new Date(iso).toLocaleString(), 'data-ago': iso }, ago(iso));
}

export function shortDigest(digest) {
  if (!digest) return '—';
  const hex = digest.replace(/^sha256:/, '');
  return `${hex.slice(0, 12)}`;
}

export function imageName(reference) {
  const at = reference.indexOf('@');
  const name = at < 0 ? reference : reference.slice(0, at);
  return name.split('/').slice(-1)[0];
}

// Bytes as a person reads them.
export function formatBytes(n) {
  if (n == null) return 'unknown size';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n; let u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u += 1; }
  return `${u === 0 ? v : v.toFixed(1)} ${units[u]}`;
}

export function stopReason(state) {
  const r = state.reason;
  if (!r) return '';
  if (r.kind === 'idle') return 'idle';
  if (r.kind === 'person') return `by ${r.by}`;
  return r.kind;
}
