// The new-debate form and its agent editor.

import { api } from './api.js';
import { $, clear, el } from './dom.js';
import { refreshList } from './list.js';
import { app, navigate } from './state.js';

/** The agent editor: one row per agent (name, role, model, provider, temperature), 1 to
 *  the server's limit. The server checks everything again (as it checks any submission)
 *  and its error names the field (`agents[1].model`), which is marked here. */
function agentEditor(d) {
  const max = Math.max(1, Number(d.maxAgents) || 1);
  const providers = d.providers || [];
  const rows = [];
  const list = el('div', { class: 'agents', id: 'agents' });
  const add = el('button', { type: 'button', class: 'btn', id: 'add-agent' }, 'Add agent');
  const count = el('span', { class: 'muted small', id: 'agent-count' });
  let serial = 0;
  const allowedFor = (provider) => {
    const p = providers.find((x) => x.name === provider);
    return p && Array.isArray(p.allowedModels) ? p.allowedModels : null;
  };
  function modelControl(row, value) {
    const allowed = allowedFor(row.provider.value);
    let control;
    if (row.provider.value === 'human') {
      // A person takes this agent's turns: no model.
      control = el('input', { class: 'agent-model', 'aria-label': 'Model', value: '', placeholder: 'a person', disabled: true });
    } else if (allowed) {
      control = el('select', { class: 'agent-model', 'aria-label': 'Model' },
        allowed.map((m) => el('option', { value: m, selected: m === value, text: m })));
      if (!allowed.includes(value)) control.value = allowed[0] || '';
    } else {
      const listId = `models-${row.n}`;
      control = el('input', { class: 'agent-model', 'aria-label': 'Model', list: listId, value: value || '', maxlength: 256, required: true });
      control.append(el('datalist', { id: listId }, (d.models || []).map((m) => el('option', { value: m }))));
    }
    if (row.model) row.model.replaceWith(control);
    row.model = control;
    return control;
  }
  function sync() {
    rows.forEach((r, i) => {
      r.el.dataset.index = String(i);
      r.remove.disabled = rows.length <= 1;
    });
    add.disabled = rows.length >= max;
    count.textContent = `${rows.length} of at most ${max}`;
  }
  function addRow(a) {
    if (rows.length >= max) return;
    const row = { n: serial++ };
    row.name = el('input', { class: 'agent-name', 'aria-label': 'Name', value: a.name || '', maxlength: 256, required: true });
    row.role = el('select', { class: 'agent-role', 'aria-label': 'Role' },
      d.roles.map((r) => el('option', { value: r, selected: r === a.role, text: r })));
    row.provider = el('select', { class: 'agent-provider', 'aria-label': 'Provider' },
      el('option', { value: '', text: 'default provider' }),
      providers.filter((p) => p.name !== 'human').map((p) => el('option', { value: p.name, selected: p.name === a.provider, text: p.name })),
      el('option', { value: 'human', selected: a.provider === 'human', text: 'a person (you)' }));
    row.temperature = el('input', { class: 'agent-temperature', 'aria-label': 'Temperature', type: 'number', min: 0, max: 2, step: 0.1,
      value: a.temperature === undefined || a.temperature === null ? 0.5 : a.temperature, required: true });
    modelControl(row, a.model || (d.models || [])[0] || '');
    row.provider.addEventListener('change', () => modelControl(row, row.model.value));
    row.remove = el('button', { type: 'button', class: 'btn remove-agent', title: 'Remove this agent', 'aria-label': 'Remove this agent' }, '✕');
    row.remove.addEventListener('click', () => {
      if (rows.length <= 1) return;
      rows.splice(rows.indexOf(row), 1);
      row.el.remove();
      sync();
    });
    row.el = el('div', { class: 'agent-row' },
      el('label', null, el('span', { class: 'small muted', text: 'Name' }), row.name),
      el('label', null, el('span', { class: 'small muted', text: 'Role' }), row.role),
      el('label', null, el('span', { class: 'small muted', text: 'Model' }), row.model),
      el('label', null, el('span', { class: 'small muted', text: 'Provider' }), row.provider),
      el('label', null, el('span', { class: 'small muted', text: 'Temperature' }), row.temperature),
      row.remove);
    rows.push(row);
    list.append(row.el);
    sync();
  }
  add.addEventListener('click', () => {
    const last = rows[rows.length - 1];
    const role = last ? last.role.value : (d.roles[0] || '');
    addRow({ name: `Agent ${rows.length + 1}`, role, model: last ? last.model.value : '',
      provider: last ? last.provider.value : '', temperature: last ? Number(last.temperature.value) : 0.5 });
  });
  const initial = d.agents.length ? d.agents : [{ name: 'Agent 1', role: d.roles[0] }];
  for (const a of initial.slice(0, max)) addRow(a);
  return {
    node: el('div', null, list, el('div', { class: 'actions' }, add, count)),
    values: () => rows.map((r) => {
      const a = { name: r.name.value, role: r.role.value, model: r.model.value, temperature: Number(r.temperature.value) };
      if (r.provider.value) a.provider = r.provider.value;
      return a;
    }),
    /** Marks the inputs an error message names (`agents[2].temperature`). */
    mark: (message) => {
      for (const r of rows) for (const k of ['name', 'role', 'model', 'provider', 'temperature']) r[k].classList.remove('invalid');
      const re = /agents\[(\d+)\]\.(name|role|model|provider|temperature)/g;
      let m;
      while ((m = re.exec(String(message))) !== null) {
        const r = rows[Number(m[1])];
        if (r) r[m[2]].classList.add('invalid');
      }
    },
  };
}

export function showForm(error) {
  const cfg = app.config;
  const view = clear($('view'));
  if (!cfg) return;
  const d = cfg.defaults;
  const problem = el('textarea', { id: 'problem', name: 'problem', required: true, maxlength: 100000,
    placeholder: 'Describe the design problem: what it must do, its constraints, scale and risks…' });
  const editor = agentEditor(d);
  const rounds = el('input', { type: 'number', id: 'rounds', name: 'rounds', min: 1, max: d.maxRounds, value: d.rounds, required: true });
  const clarify = el('input', { type: 'checkbox', id: 'clarify', name: 'clarify', checked: !!d.clarify });
  const errorBox = el('p', { class: 'error', id: 'form-error', hidden: !error, text: error || '' });
  const submit = el('button', { type: 'submit', class: 'btn primary', id: 'start' }, 'Start debate');
  const form = el('form', { id: 'debate-form', autocomplete: 'off', novalidate: true },
    el('label', { for: 'problem' }, 'Problem'), problem,
    el('label', null, 'Agents'), editor.node,
    el('div', { class: 'row' },
      el('div', null, el('label', { for: 'rounds' }, 'Rounds'), rounds),
      el('div', null, el('label', null, 'Judge'), el('div', { class: 'muted', text: `${d.judge.name} · ${d.judge.model}` }))),
    el('label', { class: 'chip', for: 'clarify' }, clarify,
      el('span', { text: 'Agents ask clarifying questions first (you answer them here)' })),
    el('div', { class: 'actions' }, submit, el('span', { class: 'muted small', text: `Runs ${cfg.backend === 'cluster' ? 'on the cluster' : 'in the server process'}; prompts and the judge come from the server's config.` })),
    errorBox);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    editor.mark('');
    try {
      const r = await api('POST', '/debates', { problem: problem.value, agents: editor.values(), rounds: Number(rounds.value), clarify: clarify.checked });
      await refreshList();
      navigate(`/?d=${encodeURIComponent(r.debateId)}`);
    } catch (e) {
      errorBox.hidden = false;
      errorBox.textContent = e.message;
      editor.mark(e.message);
      submit.disabled = false;
    }
  });
  view.append(el('div', { class: 'card form-card' },
    el('h2', null, 'Start a debate'),
    el('p', { class: 'muted', text: 'Agents propose solutions, critique each other and refine over the rounds; the judge writes the final solution.' }),
    form));
  problem.focus();
}
