// The client of the JSON API v1 under /v1/: the bearer token (kept for the tab's session,
// or taken once from a `#token=` fragment), requests, and downloads.

import { el } from './dom.js';
import { showLogin } from './state.js';

let token = sessionStorage.getItem('parley-token') || '';
if (location.hash.startsWith('#token=')) {
  token = decodeURIComponent(location.hash.slice('#token='.length));
  sessionStorage.setItem('parley-token', token);
  history.replaceState(null, '', location.pathname + location.search);
}

/** The token the user typed into the sign-in card. */
export function setToken(value) {
  token = value;
  sessionStorage.setItem('parley-token', token);
}

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

export function authHeaders(extra) {
  const h = Object.assign({}, extra);
  if (token) h.Authorization = `Bearer ${token}`;
  return h;
}

export async function api(method, path, body) {
  const opts = { method, headers: authHeaders(body === undefined ? {} : { 'Content-Type': 'application/json' }) };
  if (body !== undefined) opts.body = JSON.stringify(body);
  const res = await fetch(`/v1${path}`, opts);
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
  if (res.status === 401) { showLogin(); }
  if (!res.ok) {
    const msg = data && data.error ? data.error.message : (text || res.statusText);
    throw new ApiError(res.status, msg);
  }
  return data;
}

export async function download(path, fallbackName) {
  const res = await fetch(`/v1${path}`, { headers: authHeaders() });
  if (!res.ok) throw new ApiError(res.status, `download failed (${res.status})`);
  const blob = await res.blob();
  const cd = res.headers.get('Content-Disposition') || '';
  const m = /filename="([^"]+)"/.exec(cd);
  const a = el('a', { href: URL.createObjectURL(blob), download: m ? m[1] : fallbackName });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 5000);
}
