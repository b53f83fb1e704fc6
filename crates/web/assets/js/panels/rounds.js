// The rounds: each agent's proposal, the critiques it got, and its refinement, with notes.

import { copyButton, el } from '../dom.js';
import { firstLine, fmtInt, fmtMs, similarityLine, title, verdictLine } from '../format.js';
import { markdown } from '../markdown.js';

const NODE_OF_KIND = { propose: 'proposal', critique: 'critique', refine: 'refinement', summarize: 'summarization',
  evaluate: 'evaluation', verdict: 'verdict', vote: 'vote', embed: 'embedding', judgeSummarize: 'summarization', synthesize: 'synthesis' };

/** Methods of `DebateView` (mixed into its prototype in view.js). */
export class RoundsPanel {
  roundsSig() {
    const st = this.state;
    const running = [...this.tasks.entries()].filter(([, t]) => t.state === 'running' || t.state === 'retrying').map(([k]) => k);
    return JSON.stringify([st && st.rounds.map((r) => [r.roundNumber, r.contributions.length, r.evaluation ? r.evaluation.confidence : null, (r.dropped || []).length,
      r.verdict ? r.verdict.verdict : null, r.similarity ? r.similarity.converged : null]),
      running, this.agentIds(), this.status(), st && st.engine && st.engine.warnings, st && st.error, this.humanSig()]);
  }

  contribBody(key, content, what) {
    const body = markdown(content, 'md body');
    const copy = copyButton(content, what);
    const long = String(content).length > 700;
    if (!long) return [body, copy];
    const expanded = this.expanded.has(key);
    if (!expanded) body.classList.add('clamped');
    const btn = el('button', { type: 'button', class: 'more', text: expanded ? 'Show less' : 'Show more' });
    btn.addEventListener('click', () => {
      if (this.expanded.has(key)) { this.expanded.delete(key); body.classList.add('clamped'); btn.textContent = 'Show more'; }
      else { this.expanded.add(key); body.classList.remove('clamped'); btn.textContent = 'Show less'; }
    });
    return [body, btn, copy];
  }

  metrics(c, short) {
    const m = c.metadata || {};
    if (m.carriedOver) return 'carried over';
    if (m.human) return this.humanMetrics(c);
    return `${fmtInt(m.tokensUsed)} tok · ${fmtMs(m.latencyMs)}${m.model && !short ? ` · ${m.model}` : ''}`;
  }

  /** Where the debate's warnings, dropped critiques and failure belong: the debate as a
   *  whole, a round, or one box of an agent's column (`round/box/agent`, box one of
   *  proposal, critiques, refinement, column). Warnings name their place: a task id
   *  (`<debate>/<round>/<kind>/<agent>[/<target>]: ...`), `round N: ...` or `agent X: ...`. */
  notes() {
    const st = this.state;
    const out = { debate: [], round: new Map(), box: new Map() };
    if (!st) return out;
    const put = (map, key, note) => { if (!map.has(key)) map.set(key, []); map.get(key).push(note); };
    const boxOf = { propose: 'proposal', critique: 'critiques', refine: 'refinement', summarize: 'column',
      proposal: 'proposal', refinement: 'refinement', summarization: 'column' };
    const anyDropped = (n) => { const r = st.rounds.find((x) => x.roundNumber === n); return r && r.dropped && r.dropped.length > 0; };
    for (const w of (st.engine && st.engine.warnings) || []) {
      const text = String(w);
      let m;
      if (text.startsWith(`${this.id}/`)) {
        const rest = text.slice(this.id.length + 1);
        const cut = rest.indexOf(': ');
        const parts = (cut >= 0 ? rest.slice(0, cut) : rest).split('/');
        const message = cut >= 0 ? rest.slice(cut + 2) : rest;
        const round = Number(parts[0]) || 0;
        const box = boxOf[parts[1]];
        if (box && round) {
          const owner = parts[1] === 'critique' && parts[3] ? parts[3] : parts[2];
          const who = parts[1] === 'critique' ? `${this.agentName(parts[2])}'s critique: ` : '';
          put(out.box, `${round}/${box}/${owner}`, { kind: 'warning', text: who + message });
        } else if (round) put(out.round, round, { kind: 'warning', text: `${title(NODE_OF_KIND[parts[1]] || parts[1])}: ${message}` });
        else out.debate.push({ kind: 'warning', text: message });
      } else if ((m = /^round (\d+): ([\s\S]*)$/.exec(text))) {
        const round = Number(m[1]);
        // Dropped critiques are shown from the round's `dropped` list, where they happened.
        if (m[2].startsWith('dropped ') && anyDropped(round)) continue;
        put(out.round, round, { kind: 'warning', text: m[2] });
      } else if ((m = /^agent ([^:\s]+): ([\s\S]*)$/.exec(text))) {
        const r = /\bround (\d+)\b/.exec(m[2]);
        if (r && st.rounds.some((x) => x.roundNumber === Number(r[1]))) put(out.box, `${r[1]}/proposal/${m[1]}`, { kind: 'warning', text: m[2] });
        else out.debate.push({ kind: 'warning', text: `${this.agentName(m[1])}: ${m[2]}` });
      } else out.debate.push({ kind: 'warning', text });
    }
    for (const r of st.rounds) {
      for (const d of r.dropped || []) {
        put(out.box, `${r.roundNumber}/critiques/${d.targetAgentId}`, { kind: 'dropped',
          text: `${this.agentName(d.agentId)}'s critique was dropped after ${d.attempts} attempt${d.attempts === 1 ? '' : 's'}: ${d.error}` });
      }
    }
    const e = st.error;
    // The failure, in the round it stopped (the synthesis after the last round: that
    // round); the head says it too, with the retry button.
    const last = st.rounds.length ? st.rounds[st.rounds.length - 1].roundNumber : 0;
    const failedIn = e && (st.rounds.some((r) => r.roundNumber === e.round) ? e.round : last);
    if (e && this.status() === 'failed' && failedIn) {
      const parts = String(e.taskId || '').slice(this.id.length + 1).split('/');
      const box = failedIn === e.round ? (boxOf[e.node] || (e.node === 'critique' ? 'critiques' : null)) : null;
      const owner = e.node === 'critique' && parts[3] ? parts[3] : e.agentId;
      const text = `Failed here after ${e.attempts} attempt${e.attempts === 1 ? '' : 's'}: ${e.message}`;
      if (box && owner) put(out.box, `${failedIn}/${box}/${owner}`, { kind: 'failure', text });
      else put(out.round, failedIn, { kind: 'failure', text: `${title(e.node)}: ${text}` });
    }
    return out;
  }

  /** The notes of one place, as a list (or nothing). */
  noteList(notes, attrs) {
    if (!notes || !notes.length) return null;
    return el('ul', Object.assign({ class: 'notes' }, attrs || {}), notes.map((x) => el('li', { class: `note ${x.kind}`, dataset: { kind: x.kind } },
      el('span', { class: 'tag', text: x.kind === 'failure' ? 'Failed' : x.kind === 'dropped' ? 'Dropped' : 'Warning' }),
      el('span', { text: x.text }))));
  }

  waiting(text, active) {
    return el('p', { class: `waiting${active ? ' active' : ''}`, text });
  }

  renderRounds() {
    const st = this.state;
    if (!st) return null;
    const agents = this.agentIds();
    const out = el('div', { id: 'rounds' });
    const votes = this.renderHumanVotes();
    if (votes) out.append(votes);
    const ended = !this.running();
    const notes = this.notes();
    const at = (n, box, a) => this.noteList(notes.box.get(`${n}/${box}/${a}`), { dataset: { round: String(n), agent: a, box } });
    for (const r of [...st.rounds].reverse()) {
      const n = r.roundNumber;
      const header = el('div', { class: 'round-title' }, el('h2', null, `Round ${n}`),
        r.evaluation ? el('span', { class: 'muted small', text: `judge confidence after this round: ${Math.round(r.evaluation.confidence)}` }) : null,
        r.verdict ? el('span', { class: 'muted small verdict', text: verdictLine(r.verdict) }) : null,
        r.similarity ? el('span', { class: 'muted small similarity', text: similarityLine(r.similarity) }) : null);
      const roundNotes = this.noteList(notes.round.get(n), { dataset: { round: String(n), box: 'round' } });
      const cols = el('div', { class: 'columns' });
      for (const a of agents) {
        const find = (type, target) => r.contributions.find((c) => c.type === type && c.agentId === a && (target === undefined || c.targetAgentId === target));
        const col = el('section', { class: 'agent-col', dataset: { agent: a, round: String(n) } },
          el('header', null, el('div', null, el('b', { text: this.agentName(a) }), el('span', { class: 'role', text: this.roleOf(a) }))),
          at(n, 'column', a), ...this.humanForms(n, a));
        // proposal
        const prop = find('proposal');
        const propBox = el('div', { class: 'contrib proposal' }, el('div', { class: 'kind' }, 'Proposal', prop ? el('span', { class: 'metrics', text: this.metrics(prop) }) : null));
        if (prop && prop.metadata && prop.metadata.carriedOver) {
          const key = `${n}/p/${a}`;
          const d = el('details', { class: 'carried', open: this.open.has(key) },
            el('summary', null, `Round ${n - 1}'s refinement, carried over`), markdown(prop.content, 'md body'),
            copyButton(prop.content, `${this.agentName(a)}'s proposal`));
          d.addEventListener('toggle', () => { if (d.open) this.open.add(key); else this.open.delete(key); });
          propBox.append(d);
        } else if (prop) propBox.append(...this.contribBody(`${n}/p/${a}`, prop.content, `${this.agentName(a)}'s proposal`));
        else propBox.append(this.runningTask(n, 'proposal', a) ? this.waiting('Writing the proposal…', true) : this.waiting(ended ? 'No proposal' : 'Waiting to start'));
        const propNotes = at(n, 'proposal', a);
        if (propNotes) propBox.append(propNotes);
        col.append(propBox);
        // critiques received
        const received = r.contributions.filter((c) => c.type === 'critique' && c.targetAgentId === a);
        const others = agents.filter((x) => x !== a);
        const crit = el('div', { class: 'contrib critiques' }, el('div', { class: 'kind' }, `Critiques received · ${received.length}`));
        for (const c of received) {
          const key = `${n}/c/${c.agentId}/${a}`;
          const d = el('details', { class: 'crit', open: this.open.has(key) },
            el('summary', null,
              el('span', { class: 'from' }, `From ${this.agentName(c.agentId)}`, el('span', { class: 'preview', text: firstLine(c.content.replace(/[#*`_>]/g, ''), 150) })),
              el('span', { class: 'metrics', text: this.metrics(c, true) })),
            markdown(c.content, 'md body'),
            copyButton(c.content, `${this.agentName(c.agentId)}'s critique of ${this.agentName(a)}`));
          d.addEventListener('toggle', () => { if (d.open) this.open.add(key); else this.open.delete(key); });
          crit.append(d);
        }
        for (const o of others) {
          if (received.some((c) => c.agentId === o)) continue;
          if (this.runningTask(n, 'critique', o, a)) crit.append(el('div', { class: 'crit' }, this.waiting(`${this.agentName(o)} is critiquing…`, true)));
        }
        const critNotes = at(n, 'critiques', a);
        if (!received.length && !critNotes && !others.some((o) => this.runningTask(n, 'critique', o, a))) crit.append(el('div', { class: 'crit' }, this.waiting(ended ? 'None' : 'Waiting for the proposal')));
        if (critNotes) crit.append(critNotes);
        col.append(crit);
        // refinement
        const ref = find('refinement');
        const refBox = el('div', { class: 'contrib refinement' }, el('div', { class: 'kind' }, 'Refinement', ref ? el('span', { class: 'metrics', text: this.metrics(ref) }) : null));
        if (ref) refBox.append(...this.contribBody(`${n}/r/${a}`, ref.content, `${this.agentName(a)}'s refinement`));
        else refBox.append(this.runningTask(n, 'refinement', a) ? this.waiting('Refining with the critiques…', true) : this.waiting(ended ? 'No refinement' : 'Waiting for the critiques'));
        const refNotes = at(n, 'refinement', a);
        if (refNotes) refBox.append(refNotes);
        col.append(refBox);
        cols.append(col);
      }
      out.append(header, roundNotes || '', cols);
    }
    return out;
  }
}
