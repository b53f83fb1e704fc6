// The clarifying questions and the answers given to them.

import { api } from '../api.js';
import { el } from '../dom.js';
import { app } from '../state.js';

/** Methods of `DebateView` (mixed into its prototype in view.js). */
export class ClarifyPanel {
  renderClarify() {
    const st = this.state;
    const groups = (st && Array.isArray(st.clarifications)) ? st.clarifications : [];
    const open = groups.flatMap((g) => (g.items || []).filter((q) => !q.answer).map((q) => ({ g, q })));
    if (!open.length) return null;
    const fields = [];
    const form = el('form', { id: 'clarify-form' });
    for (const { g, q } of open) {
      const ta = el('textarea', { name: q.id, placeholder: 'Your answer (leave empty to skip)', maxlength: (app.config && app.config.limits && app.config.limits.answerChars) || 4000 });
      fields.push([q.id, ta]);
      form.append(el('div', { class: 'q' },
        el('div', { class: 'who', text: `${g.agentName || g.agentId} · ${g.role || ''}` }),
        el('p', { text: q.question }), ta));
    }
    const err = el('p', { class: 'error', hidden: true });
    const send = el('button', { type: 'submit', class: 'btn primary' }, 'Send answers');
    form.append(el('div', { class: 'actions' }, send), err);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const answers = fields.map(([id, ta]) => ({ id, answer: ta.value.trim() || 'NA' }));
      send.disabled = true;
      try {
        await api('POST', `/debates/${encodeURIComponent(this.id)}/answers`, { answers });
        this.scheduleRefresh(0);
      } catch (e) {
        err.hidden = false;
        err.textContent = e.message;
        send.disabled = false;
      }
    });
    return el('div', { class: 'card clarify' },
      el('h2', null, 'The agents have questions'),
      el('p', { class: 'muted', text: 'The debate waits for your answers; they go into every later prompt.' }),
      form);
  }
}
