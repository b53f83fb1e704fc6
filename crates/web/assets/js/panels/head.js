// The head of a debate: status, progress, elapsed time, tokens, cost, and the action buttons.

import { api, authHeaders, download } from '../api.js';
import { clear, el } from '../dom.js';
import { firstLine, fmtInt, fmtMs, fmtUsd, phaseName } from '../format.js';
import { refreshList } from '../list.js';

/** Methods of `DebateView` (mixed into its prototype in view.js). */
export class HeadPanel {
  renderHead() {
    const st = this.state;
    const ev = this.latest;
    const status = this.interrupted() ? 'interrupted' : this.status();
    const p = (ev && ev.progress) || {};
    const round = p.round || (st && st.currentRound) || 0;
    const rounds = p.rounds || (this.listItem() || {}).rounds || 0;
    const pct = p.total ? Math.round((100 * p.done) / p.total) : (status === 'completed' ? 100 : 0);
    const end = this.running() ? Date.now() : Date.parse((st && st.updatedAt) || (ev && ev.at)) || Date.now();
    const begin = Date.parse(st && st.createdAt) || this.startedAt || end;
    this.begin = begin;
    const active = (p.activeAgents || []);
    const inFlight = [...this.tasks.values()].filter((t) => t.state === 'running').length;
    const card = el('div', { class: 'card debate-head' },
      el('h1', { text: firstLine(st ? st.problem : '') || this.id }),
      el('div', { class: 'sub' },
        el('span', { class: `pill ${status}`, id: 'status', text: status.replace('_', ' ') }),
        el('span', { class: 'mono', text: this.id }),
        st ? el('span', { text: `started ${new Date(st.createdAt).toLocaleString()}` }) : null),
      st && st.problem && st.problem.trim().includes('\n') || (st && st.problem.length > 160)
        ? el('details', { class: 'problem-full' }, el('summary', null, 'Full problem'), el('div', { class: 'text', text: st.problem }))
        : null,
      el('div', { class: 'progress', title: `${p.done || 0} of ${p.total || 0} tasks` }, (() => { const b = el('div'); b.style.width = `${pct}%`; return b; })()),
      el('div', { class: 'stats' },
        el('div', null, el('b', { text: rounds ? `${round} / ${rounds}` : `${round}` }), 'round'),
        el('div', null, el('b', { text: phaseName(p.phase || (st && st.status)) }), 'phase'),
        el('div', null, el('b', { text: `${p.done || 0} / ${p.total || 0}` }), 'tasks done'),
        el('div', null, el('b', { text: fmtInt(this.tokens()) }), 'tokens'),
        (() => {
          const c = this.cost();
          if (c === undefined) return null;
          return el('div', { title: c === null ? 'a model without a price in the operator\'s price list' : 'from the providers\' reported usage' },
            el('b', { id: 'cost', text: c === null ? 'unknown' : fmtUsd(c) }), 'cost');
        })(),
        el('div', null, (this.elapsedEl = el('b', { text: fmtMs(Math.max(0, end - begin)) })), 'elapsed')),
      active.length && this.running()
        ? el('div', { class: 'working', id: 'working' }, el('span', { class: 'muted', text: `Working now (${inFlight || active.length} task${(inFlight || active.length) === 1 ? '' : 's'} in flight):` }),
          active.map((a) => el('span', { class: 'who', text: this.agentName(a) })))
        : null,
      st && st.error && status === 'failed'
        ? el('p', { class: 'error failure', id: 'failure', text: `Failed at ${st.error.node} (round ${st.error.round}): ${st.error.message}\nRetry continues from that step; completed calls are not repeated.` })
        : null,
      this.noteList(this.notes().debate, { id: 'warnings' }),
      this.recordLine(),
      this.actionsEl);
    return card;
  }

  /** A finished debate's decision record: its digest and whether (and with which key) it
   *  is signed; fetched once when the debate has finished. */
  recordLine() {
    if (!['completed', 'failed', 'cancelled'].includes(this.status())) return null;
    if (this.recordInfo === undefined) {
      this.recordInfo = null;
      fetch(`/v1/debates/${encodeURIComponent(this.id)}/record`, { headers: authHeaders() })
        .then(async (res) => {
          if (!res.ok) return;
          const rec = await res.json();
          this.recordInfo = { digest: res.headers.get('parley-record-digest') || '', signature: rec.signature || null };
          this.render();
        })
        .catch(() => {});
    }
    const r = this.recordInfo;
    if (!r) return null;
    const sig = r.signature ? `signed (Ed25519, key ${r.signature.keyId})` : 'unsigned';
    return el('p', { class: 'record muted', id: 'record', title: 'Check it with: parley verify <record> --report <report>' },
      'Decision record ', el('span', { class: 'mono', text: r.digest }), ` · ${sig}`);
  }

  /** The buttons, rebuilt only when what they offer changes (not under the pointer). */
  renderActions() {
    const steering = (this.state && this.state.steering) || {};
    const notes = Array.isArray(steering.notes) ? steering.notes : [];
    const sig = JSON.stringify([this.status(), this.interrupted(), this.commandError || '', !!steering.paused, !!steering.stopped, notes.length, steering.extraRounds || 0]);
    if (this.sigs.actions === sig) return;
    this.sigs.actions = sig;
    const buttons = [];
    const live = ['running', 'pending'].includes(this.status());
    if (live && !steering.stopped) {
      buttons.push(steering.paused
        ? el('button', { type: 'button', class: 'btn primary', id: 'steer-resume', onclick: () => this.steer({ command: 'resume' }) }, 'Resume')
        : el('button', { type: 'button', class: 'btn', id: 'steer-pause', title: 'No new task starts; the calls in flight finish', onclick: () => this.steer({ command: 'pause' }) }, 'Pause'));
      buttons.push(el('button', { type: 'button', class: 'btn', id: 'steer-extend', title: 'One more round than configured', onclick: () => this.steer({ command: 'extend' }) }, 'One more round'));
      buttons.push(el('button', { type: 'button', class: 'btn', id: 'steer-stop', title: 'The judge synthesizes from what exists once the calls in flight are back', onclick: () => this.steer({ command: 'stop' }) }, 'Synthesize now'));
    }
    if (['running', 'pending', 'awaiting_clarifications'].includes(this.status())) {
      buttons.push(el('button', { type: 'button', class: 'btn danger', id: 'cancel', onclick: () => this.command('cancel') }, 'Cancel'));
    }
    if (this.status() === 'failed') {
      buttons.push(el('button', { type: 'button', class: 'btn primary', id: 'retry', onclick: () => this.command('retry') }, 'Retry from failed step'));
    } else if (this.interrupted()) {
      buttons.push(el('button', { type: 'button', class: 'btn primary', id: 'retry', onclick: () => this.command('retry') }, 'Resume'));
    }
    buttons.push(el('button', { type: 'button', class: 'btn', id: 'download-report', onclick: () => this.fetchFile(`/debates/${encodeURIComponent(this.id)}/report`, `${this.id}.md`) }, 'Report (.md)'));
    buttons.push(el('button', { type: 'button', class: 'btn', id: 'download-state', onclick: () => this.fetchFile(`/debates/${encodeURIComponent(this.id)}`, `${this.id}.json`) }, 'State (.json)'));
    if (['completed', 'failed', 'cancelled'].includes(this.status())) {
      buttons.push(el('button', { type: 'button', class: 'btn', id: 'download-record', onclick: () => this.fetchFile(`/debates/${encodeURIComponent(this.id)}/record`, `${this.id}.record.json`) }, 'Decision record (.json)'));
    }
    clear(this.actionsEl).append(...buttons);
    if (['running', 'pending', 'awaiting_clarifications'].includes(this.status()) && !steering.stopped) {
      const note = el('input', { type: 'text', id: 'steer-note', maxlength: 4000, placeholder: 'A note for the agents (every later prompt carries it)' });
      const form = el('form', { id: 'steer-guide', class: 'guide' }, note, el('button', { type: 'submit', class: 'btn' }, 'Guide'));
      form.addEventListener('submit', (ev) => {
        ev.preventDefault();
        if (note.value.trim()) this.steer({ command: 'guide', note: note.value });
      });
      this.actionsEl.append(form);
    }
    if (notes.length) {
      this.actionsEl.append(el('ul', { class: 'muted', id: 'steer-notes' },
        notes.map((n) => el('li', { text: `Guidance (round ${n.round}): ${n.note}` }))));
    }
    if (steering.paused && live) this.actionsEl.append(el('p', { class: 'muted', id: 'paused', text: 'Paused: no new task starts until you resume.' }));
    if (this.commandError) this.actionsEl.append(el('p', { class: 'error', text: this.commandError }));
  }

  /** Pause, resume, guide, stop or extend (POST /v1/debates/{id}/steer). */
  async steer(body) {
    this.commandError = null;
    try {
      await api('POST', `/debates/${encodeURIComponent(this.id)}/steer`, body);
    } catch (e) {
      this.commandError = e.message;
    }
    this.sigs.actions = null;
    this.scheduleRefresh(0);
    this.render();
  }

  async command(what) {
    this.commandError = null;
    try {
      await api('POST', `/debates/${encodeURIComponent(this.id)}/${what}`, {});
      await refreshList();
      if (what === 'retry') this.tasks.forEach((t) => { if (t.state === 'failed') t.state = 'old'; });
    } catch (e) {
      this.commandError = e.message;
    }
    this.scheduleRefresh(0);
    this.render();
  }

  async fetchFile(path, name) {
    try { await download(path, name); } catch (e) { this.commandError = e.message; this.render(); }
  }
}
