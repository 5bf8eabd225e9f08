// The API as the page uses it: a session token kept in this tab's sessionStorage (never a
// cookie), JSON requests with it as a bearer, and a domain's event stream read with fetch(),
// since EventSource cannot send an Authorization header.

const TOKEN = 'berth.session';

export class Unauthorized extends Error {}

export class ApiError extends Error {
  constructor(status, body) {
    super(body && body.message ? body.message : `berth answered ${status}`);
    this.status = status;
    this.tag = body && body._tag;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN, value);
  else sessionStorage.removeItem(TOKEN);
}

async function decode(response) {
  const text = await response.text();
  let body = null;
  if (text) {
    try { body = JSON.parse(text); } catch { body = { message: text }; }
  }
  if (response.status === 401) throw new Unauthorized(body && body.message);
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

export async function call(method, path, body, bearer = token()) {
  const headers = { Accept: 'application/json' };
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  const init = { method, headers, credentials: 'omit', cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    // A kept-alive connection the daemon closed as the request left (it closes idle ones):
    // a read is asked once more; anything else is reported.
    if (method !== 'GET') throw e;
    response = await fetch(path, init);
  }
  return decode(response);
}

export const get = (path) => call('GET', path);
export const post = (path, body = {}) => call('POST', path, body);

// Trades a sign-in code for a session token.
export async function redeem(code) {
  const session = await call('POST', '/v1/ui/sessions', { code }, null);
  setToken(session.token);
  return session;
}

// Checks a service key typed into the sign-in form by asking for a sign-in link with it, and
// trades that link's code at once: the key itself is never stored.
export async function signInWithKey(key) {
  const link = await call('POST', '/v1/ui/sign-in-links', {}, key);
  const code = new URL(link.url).hash.replace(/^#code=/, '');
  return redeem(code);
}

export async function signOut() {
  try { await call('DELETE', '/v1/ui/sessions/current'); } finally { setToken(null); }
}

export const domainPath = (id) => `/v1/resource-domains/${encodeURIComponent(id)}`;
export const instancePath = (id, key) => `${domainPath(id)}/instances/${encodeURIComponent(key)}`;

// Reads a domain's Server-Sent Events until `signal` aborts. `onEvent(name, data)` gets each
// event; `onState('live' | 'reconnecting')` says how the stream stands. A dropped stream is
// opened again after a pause that grows, resuming after the last event id seen.
export function streamEvents(id, { onEvent, onState, onUnauthorized, signal }) {
  let lastId = null;
  let pause = 500;
  const run = async () => {
    while (!signal.aborted) {
      try {
        const headers = { Accept: 'text/event-stream', Authorization: `Bearer ${token()}` };
        if (lastId) headers['Last-Event-ID'] = lastId;
        const response = await fetch(`${domainPath(id)}/events`, {
          headers, signal, credentials: 'omit', cache: 'no-store',
        });
        if (response.status === 401) { onUnauthorized(); return; }
        if (!response.ok || !response.body) throw new Error(`events answered ${response.status}`);
        onState('live');
        pause = 500;
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
          while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, '');
            let name = 'message';
            const data = [];
            for (const line of block.split(/\r?\n/)) {
              if (line.startsWith(':')) continue;
              const colon = line.indexOf(':');
              const field = colon < 0 ? line : line.slice(0, colon);
              const text = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
              if (field === 'event') name = text;
              else if (field === 'data') data.push(text);
              else if (field === 'id') lastId = text;
            }
            if (data.length) onEvent(name, JSON.parse(data.join('\n')));
          }
        }
      } catch (e) {
        if (signal.aborted) return;
      }
      if (signal.aborted) return;
      onState('reconnecting');
      await new Promise((resolve) => setTimeout(resolve, pause));
      pause = Math.min(pause * 2, 15000);
    }
  };
  run();
}

// Streams an instance's logs (the last `tail` lines, then what it writes) into `onText` until
// `signal` aborts or the container stops; resolves when the stream ends.
export async function streamLogs(id, key, { tail = 200, onText, signal }) {
  const response = await fetch(`${instancePath(id, key)}/logs?tail=${tail}&follow=true`, {
    headers: { Authorization: `Bearer ${token()}` }, signal, credentials: 'omit', cache: 'no-store',
  });
  if (!response.ok) return decode(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return null;
    onText(value);
  }
}
