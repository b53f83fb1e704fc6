// The debate view: its state (the debate as last read, the live events, the tasks running)
// and its render loop; each block of the page is drawn by a panel of js/panels/.

import { api } from './api.js';
import { $, clear, el } from './dom.js';
import { follow } from './events.js';
import { fmtMs } from './format.js';
import { refreshList, renderList } from './list.js';
import { ClarifyPanel } from './panels/clarify.js';
import { FlowPanel } from './panels/flow.js';
import { HeadPanel } from './panels/head.js';
import { HumanPanel } from './panels/human.js';
import { RoundsPanel } from './panels/rounds.js';
import { SolutionPanel } from './panels/solution.js';
import { app, setConn } from './state.js';

export class DebateView {
  constructor(id) {
    this.id = id;
    this.abort = new AbortController();
    this.lastSeq = 0;
    this.state = null;
    this.latest = null;        // the newest event (status and progress)
    this.startedAt = null;     // the first event's time
    this.agents = [];          // agent ids from debateStarted
    this.tasks = new Map();    // taskId -> {node, agent, target, round, start, end, state, tokens, latency}
    this.expanded = new Set(); // contributions the user expanded
    this.open = new Set();     // critiques the user opened
    this.sigs = {};            // block -> signature of what it shows
    this.blocks = {};
    this.refreshing = false;
    this.dirty = false;
    this.refreshTimer = null;
    this.ticker = null;
  }

  aborted() { return this.abort.signal.aborted; }

  start() {
    const view = clear($('view'));
    for (const b of ['head', 'clarify', 'solution', 'flow', 'rounds']) {
      this.blocks[b] = el('div', { id: `block-${b}` });
      view.append(this.blocks[b]);
    }
    this.blocks.head.append(el('div', { class: 'card' }, el('p', { class: 'waiting active', text: 'Loading debate…' })));
    this.actionsEl = el('div', { class: 'actions', id: 'actions' });
    this.refreshState();
    follow(this.id, this);
    this.ticker = setInterval(() => this.tick(), 1000);
  }

  stop() {
    this.abort.abort();
    clearInterval(this.ticker);
    clearTimeout(this.refreshTimer);
  }

  gone() {
    clear($('view')).append(el('div', { class: 'card' }, el('h2', null, 'Debate not found'),
      el('p', { class: 'muted', text: `There is no debate ${this.id} on this server.` })));
    setConn(null);
  }

  reconnected() {
    // Whatever happened while disconnected is in the state.
    this.scheduleRefresh(0);
  }

  onEvent(ev, id) {
    const seq = Number(id || ev.seq) || 0;
    if (seq && seq <= this.lastSeq) return;
    if (seq) this.lastSeq = seq;
    this.latest = ev;
    if (!this.startedAt) this.startedAt = Date.parse(ev.at);
    const at = Date.parse(ev.at);
    switch (ev.type) {
      case 'debateStarted':
        this.agents = ev.agents || [];
        break;
      case 'taskDispatched': {
        const parts = String(ev.taskId).split('/');
        const t = this.tasks.get(ev.taskId) || {
          node: ev.node, agent: ev.agentId, round: Number(parts[1]) || 0,
          target: parts.length > 4 ? parts[4] : null, start: at, attempts: 0,
        };
        t.attempts = ev.attempt;
        t.state = 'running';
        t.end = null;
        this.tasks.set(ev.taskId, t);
        break;
      }
      case 'taskCompleted': {
        const t = this.tasks.get(ev.taskId);
        if (t) Object.assign(t, { state: 'done', end: at, tokens: ev.tokens, latency: ev.latencyMs, cost: ev.costUsd });
        break;
      }
      case 'taskFailed': {
        const t = this.tasks.get(ev.taskId);
        if (t) Object.assign(t, { state: ev.willRetry ? 'retrying' : 'failed', end: at, error: ev.error });
        break;
      }
      default:
        break;
    }
    if (ev.type !== 'taskDispatched') this.scheduleRefresh();
    this.render();
    const item = app.debates.find((d) => d.id === this.id);
    if (item && item.status !== ev.status) { item.status = ev.status; item.live = true; renderList(); }
    if (ev.type === 'debateCompleted' || ev.type === 'debateFailed' || ev.type === 'debateCancelled') refreshList();
  }

  scheduleRefresh(delay = 250) {
    if (this.refreshTimer) return;
    this.refreshTimer = setTimeout(() => { this.refreshTimer = null; this.refreshState(); }, delay);
  }

  async refreshState() {
    if (this.refreshing) { this.dirty = true; return; }
    this.refreshing = true;
    try {
      this.state = await api('GET', `/debates/${encodeURIComponent(this.id)}`);
      this.render();
    } catch (e) {
      if (e.status === 404) this.gone();
    } finally {
      this.refreshing = false;
      if (this.dirty) { this.dirty = false; this.scheduleRefresh(); }
    }
  }

  tick() {
    if (!this.running()) return;
    // Only the clock moves: the header's buttons are not rebuilt under the pointer.
    if (this.elapsedEl && this.begin) this.elapsedEl.textContent = fmtMs(Math.max(0, Date.now() - this.begin));
    this.render(['flow']);
  }

  status() {
    const st = this.state;
    if (!st) return this.latest ? this.latest.status : 'pending';
    // Between refreshes the stream is newer than the state.
    const stateSeq = (st.engine && st.engine.eventSeq) || 0;
    return this.latest && this.latest.seq > stateSeq ? this.latest.status : st.status;
  }

  listItem() { return app.debates.find((d) => d.id === this.id); }

  interrupted() {
    const item = this.listItem();
    // A paused debate whose calls are all back holds no driver: it waits for `resume`.
    const paused = this.state && this.state.steering && this.state.steering.paused;
    return this.status() === 'running' && item && item.live === false && !paused;
  }

  running() { return ['running', 'pending'].includes(this.status()) && !this.interrupted(); }

  agentName(id) {
    const cfg = app.config && app.config.defaults;
    const a = cfg && [...cfg.agents, cfg.judge].find((x) => x.id === id);
    return a ? a.name : id;
  }

  /** Agents in order of appearance: the debate's start event, then the contributions. */
  agentIds() {
    const ids = [...this.agents];
    for (const r of (this.state && this.state.rounds) || []) {
      for (const c of r.contributions) if (!ids.includes(c.agentId)) ids.push(c.agentId);
    }
    return ids;
  }

  roleOf(id) {
    for (const r of (this.state && this.state.rounds) || []) {
      const c = r.contributions.find((x) => x.agentId === id);
      if (c) return c.agentRole;
    }
    const cfg = app.config && app.config.defaults;
    const a = cfg && cfg.agents.find((x) => x.id === id);
    return a ? a.role : '';
  }

  runningTask(round, node, agent, target) {
    for (const t of this.tasks.values()) {
      if (t.round === round && t.node === node && t.agent === agent && (target === undefined || t.target === target)
          && (t.state === 'running' || t.state === 'retrying')) return t;
    }
    return null;
  }

  render(only) {
    if (!this.state && !this.latest) return;
    const want = (b) => !only || only.includes(b);
    if (want('head')) {
      this.renderBlock('head', () => this.headSig(), () => this.renderHead());
      this.renderActions();
    }
    if (want('clarify')) this.renderBlock('clarify', () => JSON.stringify([this.state && this.state.clarifications, this.status()]), () => this.renderClarify());
    if (want('solution')) this.renderBlock('solution', () => JSON.stringify([this.state && this.state.finalSolution, this.state && this.state.userFeedback, this.status(), this.feedbackError || '']), () => this.renderSolution());
    if (want('flow')) this.renderBlock('flow', () => `${this.lastSeq}:${this.running() ? Date.now() : ''}`, () => this.renderFlow());
    if (want('rounds')) this.renderBlock('rounds', () => this.roundsSig(), () => this.renderRounds());
  }

  renderBlock(name, sig, build) {
    const s = sig();
    if (this.sigs[name] === s) return;
    this.sigs[name] = s;
    const node = build();
    clear(this.blocks[name]);
    if (node) this.blocks[name].append(node);
  }

  headSig() {
    const st = this.state;
    const ev = this.latest;
    return JSON.stringify([this.status(), this.interrupted(), st && st.updatedAt, st && st.error, ev && ev.seq, st && st.engine && st.engine.warnings]);
  }

  tokens() {
    const st = this.state;
    if (!st) return 0;
    let n = 0;
    for (const r of st.rounds) {
      for (const c of r.contributions) n += c.metadata.tokensUsed || 0;
      for (const s of Object.values(r.summaries || {})) n += s.metadata.tokensUsed || 0;
      if (r.evaluation) n += r.evaluation.metadata.tokensUsed || 0;
      if (r.verdict) n += r.verdict.metadata.tokensUsed || 0;
      if (r.similarity) n += r.similarity.metadata.tokensUsed || 0;
    }
    if (st.judgeSummary) n += st.judgeSummary.metadata.tokensUsed || 0;
    if (st.synthesisMetadata) n += st.synthesisMetadata.tokensUsed || 0;
    return n;
  }

  // What the debate cost so far, in dollars: the state's total (`spend.costUsd`) or, while
  // it runs, the sum of the finished tasks' `costUsd` when that is further along. `null`:
  // some call has no price (unknown, never guessed); `undefined`: nothing spent yet.
  cost() {
    const spend = this.state && this.state.spend;
    let live = 0, done = 0, known = true;
    for (const t of this.tasks.values()) {
      if (t.state !== 'done') continue;
      done += 1;
      if (typeof t.cost === 'number') live += t.cost; else known = false;
    }
    if (spend && spend.calls > 0) {
      if (typeof spend.costUsd !== 'number') return null;
      return known ? Math.max(spend.costUsd, live) : spend.costUsd;
    }
    if (done === 0) return undefined;
    return known ? live : null;
  }
}

// Each panel's methods become DebateView's own (they use the view's state through `this`).
for (const panel of [HeadPanel, ClarifyPanel, SolutionPanel, FlowPanel, RoundsPanel, HumanPanel]) {
  for (const name of Object.getOwnPropertyNames(panel.prototype)) {
    if (name !== 'constructor') {
      Object.defineProperty(DebateView.prototype, name, Object.getOwnPropertyDescriptor(panel.prototype, name));
    }
  }
}
