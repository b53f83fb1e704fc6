// Parley's page. Hand-written, no framework, no build step.
//
// It is a client of the JSON API v1 under /v1/ and nothing else. Text from users and models
// is only ever put in the page as DOM text nodes; Markdown goes through renderMarkdown
// below, which builds DOM nodes and never parses HTML. Links are kept only for http(s).
'use strict';

(() => {
  // ---------------------------------------------------------------- DOM helpers
  const $ = (id) => document.getElementById(id);

  /** An element with properties and children (strings become text nodes). */
  function el(tag, props, ...kids) {
    const n = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') n.className = v;
        else if (k === 'text') n.textContent = String(v);
        else if (k.startsWith('on') && typeof v === 'function') n.addEventListener(k.slice(2), v);
        else if (k === 'dataset') Object.assign(n.dataset, v);
        else n.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (const kid of kids.flat(4)) {
      if (kid === null || kid === undefined || kid === false) continue;
      n.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return n;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  // ---------------------------------------------------------------- Markdown (safe)
  //
  // Model text can be anything, so this renderer runs in linear time: it is written as
  // plain scans over the characters, with no regular expression applied to model text (a
  // backtracking pattern such as `\s+(.*?)\s*#*\s*$` takes quadratic time on a heading
  // with a long run of spaces, and a reply of 20 000 spaces froze every viewer's tab). Each
  // search for a closing delimiter remembers where the next one is, so text full of
  // openers without closers (`[[[[`, `http://http://`, backtick runs) is scanned once per
  // nesting level, and nesting is capped at 4. What it renders is clipped to
  // MAX_MARKDOWN_CHARS; the report download has the whole text.
  const MAX_MARKDOWN_CHARS = 100000;
  const isSpace = (c) => c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\f' || c === '\v'
    || c === '\u00a0' || c === '\u1680' || (c >= '\u2000' && c <= '\u200a') || c === '\u2028' || c === '\u2029'
    || c === '\u202f' || c === '\u205f' || c === '\u3000' || c === '\ufeff';
  const isWord = (c) => c !== undefined && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c === '_');
  const isDigit = (c) => c !== undefined && c >= '0' && c <= '9';
  /** Index of the first non-space character of `s` at or after `from` (s.length if none). */
  const skipSpaces = (s, from = 0) => { let i = from; while (i < s.length && isSpace(s[i])) i++; return i; };
  const URL_STOP = ' \t\n\r\f\v<>()"\'';
  const URL_END_PUNCT = '.,;:!?';

  /** `text.indexOf(needle, from)`, remembering the last answer: the scanner asks with
   *  growing `from`, so every character is searched once per needle. */
  function finder(text) {
    const memo = new Map();
    return (needle, from) => {
      const m = memo.get(needle);
      if (m !== undefined && (m === -1 || m >= from)) return m;
      const at = text.indexOf(needle, from);
      memo.set(needle, at);
      return at;
    };
  }

  /** Appends `text`'s inline Markdown (code, strong, em, links) to `parent` as DOM nodes. */
  function inline(text, parent, depth = 0) {
    if (depth > 4) { parent.append(document.createTextNode(text)); return; }
    const n = text.length;
    const next = finder(text);
    // Backtick runs by length, in order: a code span closes at the next run of its length.
    const runs = new Map();
    for (let i = 0; i < n;) {
      if (text[i] !== '`') { i++; continue; }
      let j = i;
      while (j < n && text[j] === '`') j++;
      const len = j - i;
      if (!runs.has(len)) runs.set(len, { at: [], k: 0 });
      runs.get(len).at.push(i);
      i = j;
    }
    // The last autolink run: [start, end) of characters a URL may hold, and its last
    // character a URL may end with.
    let urlRun = { start: -1, end: -1, lastEnd: -1 };
    // The last link address looked at: the `]` it follows and its `)` (-1: none).
    let linkAt = { close: -1, end: -1 };
    let plain = 0;
    const emit = (to) => { if (to > plain) parent.append(document.createTextNode(text.slice(plain, to))); };
    let i = 0;
    while (i < n) {
      const c = text[i];
      if (c === '`' && (i === 0 || text[i - 1] !== '`')) {
        let j = i;
        while (j < n && text[j] === '`') j++;
        const len = j - i;
        const r = runs.get(len);
        while (r.k < r.at.length && r.at[r.k] <= i) r.k++;
        // Content must start with a non-backtick (it does: the run ended) and not be empty.
        if (r.k < r.at.length && r.at[r.k] > j) {
          const close = r.at[r.k];
          emit(i);
          parent.append(el('code', { text: text.slice(j, close) }));
          i = plain = close + len;
          continue;
        }
        i = j;
        continue;
      }
      if (c === '*' && text[i + 1] === '*' && i + 2 < n && !isSpace(text[i + 2])) {
        const close = next('**', i + 3);
        if (close !== -1) {
          emit(i);
          const s = el('strong');
          inline(text.slice(i + 2, close), s, depth + 1);
          parent.append(s);
          i = plain = close + 2;
          continue;
        }
      }
      if ((c === '*' || c === '_') && !(c === '*' ? isWord(text[i - 1]) || text[i - 1] === '*' : isWord(text[i - 1]))
          && i + 1 < n && !isSpace(text[i + 1]) && text[i + 1] !== c) {
        const close = next(c, i + 1);
        const after = text[close + 1];
        if (close !== -1 && !isWord(after) && !(c === '*' && after === '*')) {
          emit(i);
          const e = el('em');
          inline(text.slice(i + 1, close), e, depth + 1);
          parent.append(e);
          i = plain = close + 1;
          continue;
        }
      }
      if (c === '[') {
        // `[label](address)`: the label ends at the next `]`, the address at the next `)`
        // with no space or `(` in it; the answer for one `]` serves every `[` before it.
        const close = next(']', i + 1);
        if (close > i + 1 && text[close + 1] === '(') {
          if (linkAt.close !== close) {
            let end = next(')', close + 2);
            if (end !== -1) {
              const open = next('(', close + 2);
              if (end === close + 2 || (open !== -1 && open < end)) end = -1;
              for (let k = close + 2; end !== -1 && k < end; k++) if (isSpace(text[k])) end = -1;
            }
            linkAt = { close, end };
          }
          if (linkAt.end !== -1) {
            emit(i);
            parent.append(link(text.slice(close + 2, linkAt.end), text.slice(i + 1, close), depth));
            i = plain = linkAt.end + 1;
            continue;
          }
        }
      }
      if (c === 'h' && (text.startsWith('http://', i) || text.startsWith('https://', i))) {
        const body = i + (text[i + 4] === 's' ? 8 : 7);
        if (!(i >= urlRun.start && i < urlRun.end)) {
          // The run of URL characters around here, scanned once for every start inside it.
          let end = i;
          while (end < n && !URL_STOP.includes(text[end])) end++;
          let lastEnd = end - 1;
          while (lastEnd >= i && URL_END_PUNCT.includes(text[lastEnd])) lastEnd--;
          urlRun = { start: i, end, lastEnd };
        }
        if (urlRun.lastEnd >= body + 1) {
          emit(i);
          const href = text.slice(i, urlRun.lastEnd + 1);
          parent.append(link(href, href, depth));
          i = plain = urlRun.lastEnd + 1;
          continue;
        }
      }
      i++;
    }
    emit(n);
  }

  /** A link only for http/https URLs; anything else stays text. */
  function link(href, label, depth) {
    let url = null;
    try { url = new URL(href); } catch (_) { url = null; }
    if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
      return document.createTextNode(label === href ? href : `${label} (${href})`);
    }
    const a = el('a', { href: url.href, rel: 'noopener noreferrer nofollow', target: '_blank' });
    // A bare address is its own label, shown as text (parsed again it would link itself).
    if (label === href) a.append(document.createTextNode(label));
    else inline(label, a, depth + 1);
    return a;
  }

  /** `# Title ##` → { level, text }, or null. Up to 3 spaces before, a space after the
   *  hashes, trailing hashes dropped when a space precedes them. */
  function heading(line) {
    let i = 0;
    while (i < 3 && i < line.length && isSpace(line[i])) i++;
    let j = i;
    while (j < line.length && line[j] === '#') j++;
    const level = j - i;
    if (level < 1 || level > 6 || j >= line.length || !isSpace(line[j])) return null;
    let end = line.length;
    while (end > j && isSpace(line[end - 1])) end--;
    let h = end;
    while (h > j && line[h - 1] === '#') h--;
    if (h < end && (h === j || isSpace(line[h - 1]))) end = h;
    while (end > j && isSpace(line[end - 1])) end--;
    return { level, text: line.slice(skipSpaces(line, j), Math.max(end, skipSpaces(line, j))) };
  }

  /** `---`, `* * *`, `___`: three or more of one marker and nothing else but spaces. */
  function isRule(line) {
    const start = skipSpaces(line);
    if (start > 3) return false;
    const mark = line[start];
    if (mark !== '-' && mark !== '*' && mark !== '_') return false;
    let count = 0;
    for (let i = start; i < line.length; i++) {
      if (line[i] === mark) count++;
      else if (!isSpace(line[i])) return false;
    }
    return count >= 3;
  }

  /** `- item`, `1. item`, `2) item` → { ordered, text }, or null. */
  function listItem(line) {
    let i = skipSpaces(line);
    let ordered = false;
    if (line[i] === '-' || line[i] === '*' || line[i] === '+') i++;
    else {
      let j = i;
      while (j < line.length && j - i < 10 && isDigit(line[j])) j++;
      if (j === i || j - i > 9 || (line[j] !== '.' && line[j] !== ')')) return null;
      ordered = true;
      i = j + 1;
    }
    if (i >= line.length || !isSpace(line[i])) return null;
    return { ordered, text: line.slice(skipSpaces(line, i)) };
  }

  /** A list item's continuation line: indented by two or more, not empty. */
  const isContinuation = (line) => { const s = skipSpaces(line); return s >= 2 && s < line.length; };
  const isQuote = (line) => line[skipSpaces(line)] === '>';
  /** The text of a quoted line without its `>` (and one space after it). */
  const unquote = (line) => { const s = skipSpaces(line) + 1; return line.slice(s < line.length && isSpace(line[s]) ? s + 1 : s); };
  const isFence = (line) => { const s = skipSpaces(line); return line.startsWith('```', s) || line.startsWith('~~~', s); };
  /** `| a | b |`: starts and ends with a pipe (spaces aside). */
  const isTableRow = (line) => { const t = line.trim(); return t.length >= 2 && t[0] === '|' && t[t.length - 1] === '|'; };
  /** The cells of a table row, without the outer pipes. */
  function cells(row) {
    let t = row.trim();
    if (t.startsWith('|')) t = t.slice(1);
    if (t.endsWith('|')) t = t.slice(0, -1);
    return t.split('|').map((c) => c.trim());
  }
  /** `|---|:--:|`: every cell two or more dashes, with optional colons at either end. */
  function isTableSeparator(line) {
    if (!line.includes('-')) return false;
    return cells(line).every((c) => {
      let a = 0;
      let b = c.length;
      if (c[a] === ':') a++;
      if (b > a && c[b - 1] === ':') b--;
      if (b - a < 2) return false;
      for (let k = a; k < b; k++) if (c[k] !== '-') return false;
      return true;
    });
  }

  /** Renders Markdown into `container` with DOM nodes only. */
  function renderMarkdown(src, container, depth = 0) {
    let text = String(src ?? '');
    let clipped = 0;
    if (depth === 0 && text.length > MAX_MARKDOWN_CHARS) {
      clipped = text.length - MAX_MARKDOWN_CHARS;
      text = text.slice(0, MAX_MARKDOWN_CHARS);
    }
    const lines = text.split('\r\n').join('\n').split('\r').join('\n').split('\n');
    let para = [];
    const flush = () => {
      if (para.length) {
        const p = el('p');
        inline(para.join(' '), p);
        container.append(p);
        para = [];
      }
    };
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (isFence(line)) {
        flush();
        const fence = line.trim().slice(0, 3);
        const code = [];
        i++;
        while (i < lines.length && !lines[i].trim().startsWith(fence)) { code.push(lines[i]); i++; }
        i++;
        container.append(el('pre', null, el('code', { text: code.join('\n') })));
        continue;
      }
      if ((m = heading(line))) {
        flush();
        const h = el(`h${Math.min(6, m.level + 2)}`);
        inline(m.text, h);
        container.append(h);
        i++;
        continue;
      }
      if (isRule(line)) { flush(); container.append(el('hr')); i++; continue; }
      if (isQuote(line)) {
        flush();
        const quoted = [];
        while (i < lines.length && isQuote(lines[i])) { quoted.push(unquote(lines[i])); i++; }
        const bq = el('blockquote');
        if (depth < 4) renderMarkdown(quoted.join('\n'), bq, depth + 1);
        else bq.append(quoted.join('\n'));
        container.append(bq);
        continue;
      }
      if (isTableRow(line) && i + 1 < lines.length && isTableSeparator(lines[i + 1])) {
        flush();
        const table = el('table');
        const head = el('tr');
        for (const c of cells(line)) { const th = el('th'); inline(c, th); head.append(th); }
        table.append(el('thead', null, head));
        const body = el('tbody');
        i += 2;
        while (i < lines.length && isTableRow(lines[i])) {
          const tr = el('tr');
          for (const c of cells(lines[i])) { const td = el('td'); inline(c, td); tr.append(td); }
          body.append(tr);
          i++;
        }
        table.append(body);
        container.append(el('div', { class: 'table-wrap' }, table));
        continue;
      }
      if ((m = listItem(line))) {
        flush();
        const ordered = m.ordered;
        const list = el(ordered ? 'ol' : 'ul');
        while (i < lines.length && (m = listItem(lines[i])) && m.ordered === ordered) {
          const parts = [m.text];
          i++;
          while (i < lines.length && isContinuation(lines[i]) && !listItem(lines[i])) { parts.push(lines[i].trim()); i++; }
          const li = el('li');
          inline(parts.join(' '), li);
          list.append(li);
        }
        container.append(list);
        continue;
      }
      if (!line.trim()) { flush(); i++; continue; }
      para.push(line.trim());
      i++;
    }
    flush();
    if (clipped) {
      container.append(el('p', { class: 'muted small clipped', text: `… ${clipped.toLocaleString('en-US')} more characters not shown (the report download has the whole text).` }));
    }
    return container;
  }

  function markdown(src, cls = 'md') {
    return renderMarkdown(src, el('div', { class: cls }));
  }

  /** Puts `text` on the clipboard: the Clipboard API (this page is served from localhost or
   *  behind TLS, where it exists), else a selected hidden text area and the copy command. */
  async function copyText(text) {
    if (navigator.clipboard && navigator.clipboard.writeText) {
      await navigator.clipboard.writeText(text);
      return;
    }
    const ta = el('textarea', { readonly: true, class: 'offscreen' });
    ta.value = text;
    document.body.append(ta);
    ta.select();
    const ok = document.execCommand('copy');
    ta.remove();
    if (!ok) throw new Error('the browser refused to copy');
  }

  /** A button that copies `text` (the raw Markdown) and says so. */
  function copyButton(text, what) {
    const b = el('button', { type: 'button', class: 'copy', title: `Copy ${what}`, 'aria-label': `Copy ${what}`, text: 'Copy' });
    b.addEventListener('click', async (ev) => {
      ev.preventDefault();
      ev.stopPropagation();
      try {
        await copyText(String(text));
        b.textContent = 'Copied';
        b.classList.add('done');
      } catch (e) {
        b.textContent = 'Copy failed';
        b.title = e && e.message ? e.message : 'copy failed';
      }
      setTimeout(() => { b.textContent = 'Copy'; b.classList.remove('done'); }, 1500);
    });
    return b;
  }

  // ---------------------------------------------------------------- formatting
  const fmtInt = (n) => (Number(n) || 0).toLocaleString('en-US');
  // Dollars: four decimals under a dollar (a call often costs a fraction of a cent).
  const fmtUsd = (usd) => `$${usd < 1 ? usd.toFixed(4) : usd.toFixed(2)}`;
  const fmtMs = (ms) => {
    ms = Number(ms) || 0;
    if (ms < 1000) return `${ms} ms`;
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
    return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  };
  const ago = (iso) => {
    const t = Date.parse(iso);
    if (!t) return '';
    const s = Math.max(0, Math.round((Date.now() - t) / 1000));
    if (s < 60) return `${s}s ago`;
    if (s < 3600) return `${Math.floor(s / 60)}m ago`;
    if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
    return new Date(t).toLocaleDateString();
  };
  const title = (s) => String(s || '').replace(/^./, (c) => c.toUpperCase());
  const firstLine = (s, n = 160) => {
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
  const phaseName = (p) => PHASES[p] || title(p);
  /** A round's judge verdict in one line: decision, confidence, open issues. */
  const verdictLine = (v) => `judge verdict: ${v.verdict}, confidence ${Math.round(Number(v.confidence) || 0)}`
    + ((v.openIssues || []).length ? ` · open issues: ${v.openIssues.join('; ')}` : '');
  /** A round's similarities in one line: the least self-similarity, across agents, stop or go on. */
  const similarityLine = (s) => {
    const own = Object.values(s.perAgent || {});
    const least = own.length ? Math.min(...own).toFixed(3) : '–';
    const across = s.acrossAgents === undefined || s.acrossAgents === null ? '–' : Number(s.acrossAgents).toFixed(3);
    return `similarity to the previous round: least ${least}, across agents ${across} (threshold ${Number(s.threshold).toFixed(2)}): ${s.converged ? 'converged, stopped' : 'go on'}`;
  };

  // ---------------------------------------------------------------- API
  let token = sessionStorage.getItem('parley-token') || '';
  if (location.hash.startsWith('#token=')) {
    token = decodeURIComponent(location.hash.slice('#token='.length));
    sessionStorage.setItem('parley-token', token);
    history.replaceState(null, '', location.pathname + location.search);
  }

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  function authHeaders(extra) {
    const h = Object.assign({}, extra);
    if (token) h.Authorization = `Bearer ${token}`;
    return h;
  }

  async function api(method, path, body) {
    const opts = { method, headers: authHeaders(body === undefined ? {} : { 'Content-Type': 'application/json' }) };
    if (body !== undefined) opts.body = JSON.stringify(body);
    const res = await fetch(`/v1${path}`, opts);
    const text = await res.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
    if (res.status === 401) { showLogin(); }
    if (!res.ok) {
      const msg = data && data.error ? data.error.message : (text || res.statusText);
      throw new ApiError(res.status, msg);
    }
    return data;
  }

  async function download(path, fallbackName) {
    const res = await fetch(`/v1${path}`, { headers: authHeaders() });
    if (!res.ok) throw new ApiError(res.status, `download failed (${res.status})`);
    const blob = await res.blob();
    const cd = res.headers.get('Content-Disposition') || '';
    const m = /filename="([^"]+)"/.exec(cd);
    const a = el('a', { href: URL.createObjectURL(blob), download: m ? m[1] : fallbackName });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 5000);
  }

  // ---------------------------------------------------------------- app state
  const app = { config: null, debates: [], view: null, listTimer: null };

  function setConn(state) {
    const c = $('conn');
    if (!state) { c.hidden = true; return; }
    c.hidden = false;
    c.className = `conn ${state}`;
    c.textContent = state === 'live' ? 'Live' : 'Reconnecting…';
  }

  /** A 503 (the server follows as many event streams as it allows, or the cluster has no
   *  event follower to spare): the server's reason, shown where the connection state is,
   *  instead of a list or a stream that silently stops. */
  function showUnavailable(message) {
    const c = $('conn');
    c.hidden = false;
    c.className = 'conn retrying';
    c.textContent = `Unavailable (503): ${message || 'the server is busy'}. Retrying…`;
  }

  /** The message of a 503 response's `{"error": {"message"}}` body. */
  async function unavailableMessage(res) {
    try { const d = await res.json(); return d && d.error ? d.error.message : ''; } catch (_) { return ''; }
  }

  function showLogin(message) {
    $('login').hidden = false;
    clear($('view'));
    const e = $('login-error');
    e.hidden = !message;
    e.textContent = message || '';
    if (app.view) { app.view.stop(); app.view = null; }
    setConn(null);
  }

  $('login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    token = $('token-input').value.trim();
    sessionStorage.setItem('parley-token', token);
    $('login').hidden = true;
    try {
      await boot();
    } catch (e) {
      showLogin(e.status === 401 ? 'That token was not accepted.' : e.message);
    }
  });

  function navigate(url) {
    history.pushState(null, '', url);
    route();
  }
  window.addEventListener('popstate', route);
  $('new-debate').addEventListener('click', () => navigate('/'));
  $('home-link').addEventListener('click', (ev) => { ev.preventDefault(); navigate('/'); });

  function route() {
    const id = new URLSearchParams(location.search).get('d');
    if (app.view && app.view.id === id) return;
    if (app.view) { app.view.stop(); app.view = null; }
    setConn(null);
    if (id) {
      app.view = new DebateView(id);
      app.view.start();
    } else {
      showForm();
    }
    renderList();
  }

  // ---------------------------------------------------------------- list
  async function refreshList() {
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

  function renderList() {
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

  // ---------------------------------------------------------------- form
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
      if (allowed) {
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
        providers.map((p) => el('option', { value: p.name, selected: p.name === a.provider, text: p.name })));
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

  function showForm(error) {
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

  // ---------------------------------------------------------------- event stream
  /** Follows a debate's events over fetch (so the token can travel in a header),
   *  resuming after the last sequence number on every reconnect. */
  async function follow(id, view) {
    let backoff = 1000;
    while (!view.aborted()) {
      try {
        const res = await fetch(`/v1/debates/${encodeURIComponent(id)}/events`, {
          headers: authHeaders({ Accept: 'text/event-stream', 'Last-Event-ID': String(view.lastSeq) }),
          signal: view.abort.signal,
        });
        if (res.status === 401) { showLogin('The token was not accepted.'); return; }
        if (res.status === 404) { view.gone(); return; }
        if (res.status === 503) {
          showUnavailable(await unavailableMessage(res));
          await new Promise((r) => setTimeout(r, backoff));
          backoff = Math.min(backoff * 2, 8000);
          continue;
        }
        if (!res.ok || !res.body) throw new Error(`events: ${res.status}`);
        setConn('live');
        backoff = 1000;
        view.reconnected();
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        let buf = '';
        let data = [];
        let eventId = null;
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += decoder.decode(value, { stream: true });
          let nl;
          while ((nl = buf.indexOf('\n')) >= 0) {
            let line = buf.slice(0, nl);
            buf = buf.slice(nl + 1);
            if (line.endsWith('\r')) line = line.slice(0, -1);
            if (line === '') {
              if (data.length) {
                let ev = null;
                try { ev = JSON.parse(data.join('\n')); } catch (_) { ev = null; }
                if (ev) view.onEvent(ev, eventId);
              }
              data = [];
              eventId = null;
            } else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
            else if (line.startsWith('id:')) eventId = line.slice(3).trim();
          }
        }
      } catch (_) {
        if (view.aborted()) return;
      }
      if (view.aborted()) return;
      setConn('retrying');
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, 8000);
    }
  }

  // ---------------------------------------------------------------- debate view
  const NODE_OF_KIND = { propose: 'proposal', critique: 'critique', refine: 'refinement', summarize: 'summarization',
    evaluate: 'evaluation', verdict: 'verdict', vote: 'vote', embed: 'embedding', judgeSummarize: 'summarization', synthesize: 'synthesis' };

  class DebateView {
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
        this.actionsEl);
      return card;
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

    roundsSig() {
      const st = this.state;
      const running = [...this.tasks.entries()].filter(([, t]) => t.state === 'running' || t.state === 'retrying').map(([k]) => k);
      return JSON.stringify([st && st.rounds.map((r) => [r.roundNumber, r.contributions.length, r.evaluation ? r.evaluation.confidence : null, (r.dropped || []).length,
        r.verdict ? r.verdict.verdict : null, r.similarity ? r.similarity.converged : null]),
        running, this.agentIds(), this.status(), st && st.engine && st.engine.warnings, st && st.error]);
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
            at(n, 'column', a));
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

  // ---------------------------------------------------------------- start
  async function boot() {
    app.config = await api('GET', '/config');
    const badge = $('backend-badge');
    badge.hidden = false;
    badge.textContent = app.config.backend;
    $('new-debate').hidden = false;
    $('login').hidden = true;
    await refreshList();
    if (!app.listTimer) {
      app.listTimer = setInterval(() => { if (!document.hidden) refreshList(); }, 4000);
    }
    if (app.view) { app.view.stop(); app.view = null; }
    route();
  }

  boot().catch((e) => {
    if (e.status === 401) showLogin();
    else clear($('view')).append(el('div', { class: 'card' }, el('h2', null, 'Cannot reach the server'), el('p', { class: 'error', text: e.message })));
  });
})();
