// The final solution, the votes, and the user's feedback.

import { api } from '../api.js';
import { copyButton, el } from '../dom.js';
import { fmtInt, fmtMs } from '../format.js';
import { inline, markdown } from '../markdown.js';

/** Methods of `DebateView` (mixed into its prototype in view.js). */
export class SolutionPanel {
  renderSolution() {
    const s = this.state && this.state.finalSolution;
    if (!s) return null;
    const c = Math.max(0, Math.min(100, Number(s.confidence) || 0));
    const color = c >= 70 ? 'var(--ok)' : c >= 40 ? 'var(--warn)' : 'var(--bad)';
    const meter = el('div');
    meter.style.width = `${c}%`;
    meter.style.background = color;
    const section = (cls, name, items) => (items && items.length
      ? el('section', { class: cls }, el('h3', null, name), el('ul', null, items.map((x) => { const li = el('li'); inline(String(x), li); return li; })))
      : null);
    const meta = this.state.synthesisMetadata;
    const solutionText = [s.description,
      ...[['Unmet major requirements', s.unfulfilledMajorRequirements], ['Tradeoffs', s.tradeoffs],
        ['Recommendations', s.recommendations], ['Open questions', s.openQuestions]]
        .filter(([, xs]) => xs && xs.length)
        .map(([name, xs]) => `## ${name}\n\n${xs.map((x) => `- ${x}`).join('\n')}`)].join('\n\n');
    return el('div', { class: 'card solution', id: 'solution' },
      el('div', { class: 'solution-head' },
        el('div', null, el('h2', null, 'Final solution'),
          el('div', { class: 'muted small', text: `Synthesized by ${this.agentName(s.synthesizedBy)}${meta ? ` · ${fmtInt(meta.tokensUsed)} tokens · ${fmtMs(meta.latencyMs)} · ${meta.model}` : ''}` })),
        el('div', { class: 'confidence' }, el('div', { class: 'num', text: `${Math.round(c)}` }),
          el('div', { class: 'muted small', text: 'confidence / 100' }), el('div', { class: 'meter' }, meter))),
      el('div', { class: 'solution-tools' }, (() => { const b = copyButton(solutionText, 'the solution'); b.id = 'copy-solution'; return b; })(),
        this.renderFeedback()),
      markdown(s.description),
      el('div', { class: 'lists' },
        section('unmet', 'Unmet major requirements', s.unfulfilledMajorRequirements),
        section('', 'Tradeoffs', s.tradeoffs),
        section('', 'Recommendations', s.recommendations),
        section('', 'Open questions', s.openQuestions),
        section('unresolved', 'Unresolved disagreements', s.unresolvedDisagreements),
        section('votes', 'Votes', this.voteLines()),
        section('adaptive', 'Adaptive path', this.state.adaptive ? [`${this.state.adaptive.path}: ${this.state.adaptive.reason}`] : null)));
  }

  voteLines() {
    const v = this.state && this.state.voting;
    if (!v) return null;
    const lines = (v.votes || []).map((b) => `${b.agentId} → ${b.vote || '(none)'}${b.valid ? '' : ` (invalid: ${b.invalidReason || '?'})`}: ${b.reason || ''}`);
    if (v.tallied) lines.push(v.winner ? `Winner: ${v.winner}` : `Tie between ${(v.leaders || []).join(', ')} (the judge chose)`);
    return lines;
  }

  /** Thumbs up/down on a completed debate, stored as its `userFeedback`. */
  renderFeedback() {
    if (this.status() !== 'completed') return null;
    const current = Number(this.state && this.state.userFeedback) || 0;
    const send = async (verdict) => {
      this.feedbackError = null;
      try {
        const r = await api('POST', `/debates/${encodeURIComponent(this.id)}/feedback`, { feedback: verdict });
        if (this.state) this.state.userFeedback = r && r.userFeedback !== undefined ? r.userFeedback : verdict;
      } catch (e) {
        this.feedbackError = e.message;
      }
      this.render(['solution']);
    };
    const button = (verdict, id, label, glyph) => el('button', { type: 'button', id, class: `btn thumb${current === verdict ? ' chosen' : ''}`,
      'aria-pressed': current === verdict ? 'true' : 'false', title: label, 'aria-label': label, onclick: () => send(verdict) }, glyph);
    return el('div', { class: 'feedback', id: 'feedback' },
      el('span', { class: 'muted small', text: current ? 'Your verdict:' : 'Was this useful?' }),
      button(1, 'feedback-up', 'Thumbs up', '▲ Useful'), button(-1, 'feedback-down', 'Thumbs down', '▼ Not useful'),
      this.feedbackError ? el('span', { class: 'error small', id: 'feedback-error', text: this.feedbackError }) : null);
  }
}
