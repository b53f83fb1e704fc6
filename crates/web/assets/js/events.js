// The event stream of one debate (Server-Sent Events read over fetch).

import { authHeaders } from './api.js';
import { setConn, showLogin, showUnavailable, unavailableMessage } from './state.js';

/** Follows a debate's events over fetch (so the token can travel in a header),
 *  resuming after the last sequence number on every reconnect. */
export async function follow(id, view) {
  let backoff = 1000;
  while (!view.aborted()) {
    try {
      const res = await fetch(`/v1/debates/${encodeURIComponent(id)}/events`, {
        headers: authHeaders({ Accept: 'text/event-stream', 'Last-Event-ID': String(view.lastSeq) }),
        signal: view.abort.signal,
      });
      if (res.status === 401) { showLogin('The token was not accepted.'); return; }
      if (res.status === 404) { view.gone(); return; }
      if (res.status === 503) {
        showUnavailable(await unavailableMessage(res));
        await new Promise((r) => setTimeout(r, backoff));
        backoff = Math.min(backoff * 2, 8000);
        continue;
      }
      if (!res.ok || !res.body) throw new Error(`events: ${res.status}`);
      setConn('live');
      backoff = 1000;
      view.reconnected();
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buf = '';
      let data = [];
      let eventId = null;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          let line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (line.endsWith('\r')) line = line.slice(0, -1);
          if (line === '') {
            if (data.length) {
              let ev = null;
              try { ev = JSON.parse(data.join('\n')); } catch (_) { ev = null; }
              if (ev) view.onEvent(ev, eventId);
            }
            data = [];
            eventId = null;
          } else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
          else if (line.startsWith('id:')) eventId = line.slice(3).trim();
        }
      }
    } catch (_) {
      if (view.aborted()) return;
    }
    if (view.aborted()) return;
    setConn('retrying');
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 8000);
  }
}
