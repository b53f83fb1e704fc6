// The task flow: which node runs now, which are done, how long each took.

import { el } from '../dom.js';
import { fmtInt, fmtMs, phaseName } from '../format.js';

/** Methods of `DebateView` (mixed into its prototype in view.js). */
export class FlowPanel {
  renderFlow() {
    const tasks = [...this.tasks.values()].filter((t) => t.start);
    if (!tasks.length) return null;
    const t0 = Math.min(...tasks.map((t) => t.start));
    const ends = tasks.map((t) => t.end || t.start);
    const now = this.running() ? Date.now() : Math.max(...ends);
    const span = Math.max(1, now - t0);
    const lanes = [];
    for (const t of tasks) if (!lanes.includes(t.agent)) lanes.push(t.agent);
    const order = this.agentIds();
    lanes.sort((a, b) => (order.indexOf(a) + 1 || 99) - (order.indexOf(b) + 1 || 99));
    const rows = lanes.map((agent) => {
      // Calls of one agent that overlap go on separate rows, so concurrency shows.
      const mine = tasks.filter((x) => x.agent === agent).sort((a, b) => a.start - b.start);
      const rowEnds = [];
      const placed = mine.map((t) => {
        const end = t.end || now;
        let row = rowEnds.findIndex((e) => e <= t.start);
        if (row < 0) { row = rowEnds.length; rowEnds.push(end); } else rowEnds[row] = end;
        return [t, row];
      });
      const track = el('div', { class: 'track' });
      track.style.height = `${Math.max(1, rowEnds.length) * 18 + 4}px`;
      for (const [t, row] of placed) {
        const end = t.end || now;
        const kind = ['proposal', 'critique', 'refinement', 'synthesis', 'evaluation', 'summarization'].includes(t.node) ? t.node : 'other';
        const cls = `bar ${kind}${t.state === 'running' || t.state === 'retrying' ? ' running' : ''}${t.state === 'failed' ? ' failed' : ''}`;
        const what = `${phaseName(t.node).replace(/s$/, '')} · round ${t.round}${t.target ? ` · of ${this.agentName(t.target)}` : ''}`;
        const detail = t.state === 'done' ? ` · ${fmtMs(t.latency)} · ${fmtInt(t.tokens)} tokens` : t.state === 'failed' ? ` · failed: ${t.error || ''}` : ' · running';
        const bar = el('div', { class: cls, title: what + detail });
        bar.style.top = `${3 + row * 18}px`;
        bar.style.left = `${(100 * (t.start - t0)) / span}%`;
        bar.style.width = `${Math.max(0.4, (100 * (end - t.start)) / span)}%`;
        track.append(bar);
      }
      return el('div', { class: 'lane' }, el('div', { class: 'name', text: this.agentName(agent), title: agent }), track);
    });
    const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => el('span', { text: fmtMs(Math.round(f * span)) }));
    const inFlight = tasks.filter((t) => t.state === 'running').length;
    return el('div', { class: 'card' },
      el('div', { class: 'solution-head' },
        el('h2', null, 'Dataflow'),
        el('span', { class: 'muted small', text: inFlight ? `${inFlight} task${inFlight === 1 ? '' : 's'} running at once` : `${tasks.length} tasks` })),
      el('p', { class: 'muted small', text: 'Each bar is one LLM call; bars that overlap ran at the same time. A critique starts as soon as the proposal it reviews exists.' }),
      el('div', { class: 'timeline', id: 'timeline' }, rows),
      el('div', { class: 'axis' }, el('span'), el('div', { class: 'ticks' }, ticks)),
      el('div', { class: 'legend' },
        el('span', { class: 'proposal', text: 'Proposal' }), el('span', { class: 'critique', text: 'Critique' }),
        el('span', { class: 'refinement', text: 'Refinement' }), el('span', { class: 'judge', text: 'Judge' })));
  }
}
