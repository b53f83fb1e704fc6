// The sidebar: the debates, most recently updated first.

import { api } from './api.js';
import { $, clear, el } from './dom.js';
import { ago } from './format.js';
import { app, navigate, showUnavailable } from './state.js';

export async function refreshList() {
  try {
    // The newest 200 by creation; shown most recently updated first.
    const data = await api('GET', '/debates?limit=200');
    app.debates = (data.items || []).slice().sort((a, b) => Date.parse(b.updatedAt) - Date.parse(a.updatedAt));
    renderList();
  } catch (e) {
    // A 503 says why; anything else is shown by the next successful refresh.
    if (e && e.status === 503) showUnavailable(e.message);
  }
}

function shownStatus(d) {
  if (d.status === 'running' && d.live === false) return 'interrupted';
  return d.status;
}

export function renderList() {
  const list = clear($('debate-list'));
  const current = app.view ? app.view.id : null;
  $('list-empty').hidden = app.debates.length > 0;
  for (const d of app.debates) {
    const status = shownStatus(d);
    const progress = d.rounds ? `round ${d.round}/${d.rounds}` : '';
    const a = el('a', { href: `/?d=${encodeURIComponent(d.id)}`, class: d.id === current ? 'current' : '' },
      el('div', { class: 'title', text: d.problem || d.id }),
      el('div', { class: 'meta' },
        el('span', { class: `pill ${status}`, text: status.replace('_', ' ') }),
        progress ? el('span', { text: progress }) : null,
        el('span', { text: ago(d.updatedAt) })));
    a.addEventListener('click', (ev) => { ev.preventDefault(); navigate(`/?d=${encodeURIComponent(d.id)}`); });
    list.append(el('li', null, a));
  }
}
