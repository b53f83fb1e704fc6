// Markdown, safely: a renderer that builds DOM nodes (headings, lists, code, emphasis, and
// links only to http/https) and never parses HTML.
//
// Model text can be anything, so this renderer runs in linear time: it is written as
// plain scans over the characters, with no regular expression applied to model text (a
// backtracking pattern such as `\s+(.*?)\s*#*\s*$` takes quadratic time on a heading
// with a long run of spaces, and a reply of 20 000 spaces froze every viewer's tab). Each
// search for a closing delimiter remembers where the next one is, so text full of
// openers without closers (`[[[[`, `http://http://`, backtick runs) is scanned once per
// nesting level, and nesting is capped at 4. What it renders is clipped to
// MAX_MARKDOWN_CHARS; the report download has the whole text.

import { el } from './dom.js';

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
export function inline(text, parent, depth = 0) {
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
export function renderMarkdown(src, container, depth = 0) {
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

export function markdown(src, cls = 'md') {
  return renderMarkdown(src, el('div', { class: cls }));
}
