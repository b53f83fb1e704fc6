// Numbers, durations, times and phases as the page shows them.

export const fmtInt = (n) => (Number(n) || 0).toLocaleString('en-US');
// Dollars: four decimals under a dollar (a call often costs a fraction of a cent).
export const fmtUsd = (usd) => `$${usd < 1 ? usd.toFixed(4) : usd.toFixed(2)}`;
export const fmtMs = (ms) => {
  ms = Number(ms) || 0;
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
};
export const ago = (iso) => {
  const t = Date.parse(iso);
  if (!t) return '';
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return new Date(t).toLocaleDateString();
};
export const title = (s) => String(s || '').replace(/^./, (c) => c.toUpperCase());
export const firstLine = (s, n = 160) => {
  const line = String(s || '').trim().split('\n')[0];
  return line.length > n ? `${line.slice(0, n - 1)}…` : line;
};
const PHASES = {
  initialization: 'Starting', clarification: 'Clarifying', roundManager: 'Next round',
  summarization: 'Summarizing', proposal: 'Proposals', critique: 'Critiques',
  refinement: 'Refinements', evaluation: 'Judge evaluation', verdict: 'Judge verdict', vote: 'Voting', embedding: 'Similarity',
  synthesis: 'Synthesis',
  completed: 'Done', failed: 'Failed',
};
export const phaseName = (p) => PHASES[p] || title(p);
/** A round's judge verdict in one line: decision, confidence, open issues. */
export const verdictLine = (v) => `judge verdict: ${v.verdict}, confidence ${Math.round(Number(v.confidence) || 0)}`
  + ((v.openIssues || []).length ? ` · open issues: ${v.openIssues.join('; ')}` : '');
/** A round's similarities in one line: the least self-similarity, across agents, stop or go on. */
export const similarityLine = (s) => {
  const own = Object.values(s.perAgent || {});
  const least = own.length ? Math.min(...own).toFixed(3) : '–';
  const across = s.acrossAgents === undefined || s.acrossAgents === null ? '–' : Number(s.acrossAgents).toFixed(3);
  return `similarity to the previous round: least ${least}, across agents ${across} (threshold ${Number(s.threshold).toFixed(2)}): ${s.converged ? 'converged, stopped' : 'go on'}`;
};
