// Parley's page. Hand-written, no framework, no build step: ES modules the browser loads
// from this server (js/*.js; each says what it draws or does).
//
// It is a client of the JSON API v1 under /v1/ and nothing else. Text from users and models
// is only ever put in the page as DOM text nodes; Markdown goes through js/markdown.js,
// which builds DOM nodes and never parses HTML. Links are kept only for http(s).
//
// This module starts the page: the sign-in card, the router (the address says which debate
// is shown, or the form), and the first load.

import { api, setToken } from './js/api.js';
import { $, clear, el } from './js/dom.js';
import { showForm } from './js/form.js';
import { refreshList, renderList } from './js/list.js';
import { app, navigate, setConn, setRouter, showLogin } from './js/state.js';
import { DebateView } from './js/view.js';

$('login-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  setToken($('token-input').value.trim());
  $('login').hidden = true;
  try {
    await boot();
  } catch (e) {
    showLogin(e.status === 401 ? 'That token was not accepted.' : e.message);
  }
});

setRouter(route);
window.addEventListener('popstate', route);
$('new-debate').addEventListener('click', () => navigate('/'));
$('home-link').addEventListener('click', (ev) => { ev.preventDefault(); navigate('/'); });

function route() {
  const id = new URLSearchParams(location.search).get('d');
  if (app.view && app.view.id === id) return;
  if (app.view) { app.view.stop(); app.view = null; }
  setConn(null);
  if (id) {
    app.view = new DebateView(id);
    app.view.start();
  } else {
    showForm();
  }
  renderList();
}

async function boot() {
  app.config = await api('GET', '/config');
  const badge = $('backend-badge');
  badge.hidden = false;
  badge.textContent = app.config.backend;
  $('new-debate').hidden = false;
  $('login').hidden = true;
  await refreshList();
  if (!app.listTimer) {
    app.listTimer = setInterval(() => { if (!document.hidden) refreshList(); }, 4000);
  }
  if (app.view) { app.view.stop(); app.view = null; }
  route();
}

boot().catch((e) => {
  if (e.status === 401) showLogin();
  else clear($('view')).append(el('div', { class: 'card' }, el('h2', null, 'Cannot reach the server'), el('p', { class: 'error', text: e.message })));
});
