// What the whole page shares: the app state, the connection badge, the sign-in card, and
// navigation (the router is set by app.js).

import { $, clear } from './dom.js';

export const app = { config: null, debates: [], view: null, listTimer: null };

export function setConn(state) {
  const c = $('conn');
  if (!state) { c.hidden = true; return; }
  c.hidden = false;
  c.className = `conn ${state}`;
  c.textContent = state === 'live' ? 'Live' : 'Reconnecting…';
}

/** A 503 (the server follows as many event streams as it allows, or the cluster has no
 *  event follower to spare): the server's reason, shown where the connection state is,
 *  instead of a list or a stream that silently stops. */
export function showUnavailable(message) {
  const c = $('conn');
  c.hidden = false;
  c.className = 'conn retrying';
  c.textContent = `Unavailable (503): ${message || 'the server is busy'}. Retrying…`;
}

/** The message of a 503 response's `{"error": {"message"}}` body. */
export async function unavailableMessage(res) {
  try { const d = await res.json(); return d && d.error ? d.error.message : ''; } catch (_) { return ''; }
}

export function showLogin(message) {
  $('login').hidden = false;
  clear($('view'));
  const e = $('login-error');
  e.hidden = !message;
  e.textContent = message || '';
  if (app.view) { app.view.stop(); app.view = null; }
  setConn(null);
}

/** What happens when the address changes: set once by app.js (which knows every view). */
let router = () => {};

export function setRouter(route) {
  router = route;
}

export function navigate(url) {
  history.pushState(null, '', url);
  router();
}
