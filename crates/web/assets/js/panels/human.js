// Human participants: a form in the agent's card for each of its open tasks (what it
// answers, until when), and how a person's contribution is marked.

import { api } from '../api.js';
import { el } from '../dom.js';
import { fmtMs } from '../format.js';
import { markdown } from '../markdown.js';

const VERB = { propose: 'Your proposal', critique: 'Your critique', refine: 'Your refinement', vote: 'Your vote' };

/** Methods of `DebateView` (mixed into its prototype in view.js). */
export class HumanPanel {
  /** The open human tasks (`state.human.open`). */
  humanOpen() {
    const h = this.state && this.state.human;
    return (h && Array.isArray(h.open)) ? h.open : [];
  }

  /** What a signature of the rounds must hold of the human tasks. */
  humanSig() {
    const h = (this.state && this.state.human) || {};
    return [(h.open || []).map((t) => t.taskId), (h.answered || []).length, (h.expired || []).length, this.humanError || ''];
  }

  /** The forms of agent `a`'s open tasks of round `n`. */
  humanForms(n, a) {
    if (!this.drafts) this.drafts = new Map();
    const st = this.state;
    const tasks = this.humanOpen().filter((t) => t.agentId === a && t.round === n && t.kind !== 'vote');
    return tasks.map((t) => this.humanForm(t, st));
  }

  /** The votes waiting for a person (after the final round). */
  renderHumanVotes() {
    if (!this.drafts) this.drafts = new Map();
    const votes = this.humanOpen().filter((t) => t.kind === 'vote');
    if (!votes.length) return null;
    return el('div', { class: 'card human-votes' }, el('h2', null, 'Your vote'), votes.map((t) => this.humanForm(t, this.state)));
  }

  humanForm(t, st) {
    const round = st.rounds.find((r) => r.roundNumber === t.round);
    const find = (type, agent) => round && round.contributions.find((c) => c.type === type && c.agentId === agent);
    const context = [];
    if (t.kind === 'critique' && t.targetAgentId) {
      const p = find('proposal', t.targetAgentId);
      context.push(el('div', { class: 'what', text: `${this.agentName(t.targetAgentId)}'s proposal, which you critique:` }));
      if (p) context.push(markdown(p.content, 'md body clamped'));
    } else if (t.kind === 'refine') {
      const p = find('proposal', t.agentId);
      context.push(el('div', { class: 'what', text: 'Refine your proposal with the critiques it received (above).' }));
      if (p) context.push(markdown(p.content, 'md body clamped'));
    } else if (t.kind === 'vote') {
      context.push(el('div', { class: 'what', text: 'Vote for another agent\'s final refinement: start with its id, then why.' }));
    } else {
      context.push(el('div', { class: 'what', text: 'Write your proposal for the problem.' }));
    }
    const ta = el('textarea', { name: 'text', maxlength: 20000, placeholder: VERB[t.kind] || 'Your answer' });
    ta.value = this.drafts.get(t.taskId) || '';
    ta.addEventListener('input', () => this.drafts.set(t.taskId, ta.value));
    const err = el('p', { class: 'error', hidden: true });
    const send = el('button', { type: 'submit', class: 'btn primary' }, 'Send');
    const left = Date.parse(t.deadline) - Date.now();
    const form = el('form', { class: 'human-task', dataset: { task: t.taskId, kind: t.kind } },
      el('div', { class: 'kind' }, `${VERB[t.kind] || t.kind} as ${this.agentName(t.agentId)}`,
        el('span', { class: 'metrics', text: left > 0 ? `answer within ${fmtMs(left)}` : 'deadline passed' })),
      ...context, ta, el('div', { class: 'actions' }, send), err);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      if (!ta.value.trim()) return;
      send.disabled = true;
      try {
        await api('POST', `/debates/${encodeURIComponent(this.id)}/contributions`, { taskId: t.taskId, agentId: t.agentId, text: ta.value });
        this.drafts.delete(t.taskId);
        this.scheduleRefresh(0);
      } catch (e) {
        err.hidden = false;
        err.textContent = e.message;
        send.disabled = false;
      }
    });
    return form;
  }

  /** How a person's contribution is marked instead of tokens. */
  humanMetrics(c) {
    const m = c.metadata || {};
    return m.human ? `by a person · ${fmtMs(m.latencyMs)}` : null;
  }
}
