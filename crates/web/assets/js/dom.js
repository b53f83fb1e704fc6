// DOM helpers: elements from properties and children, and a copy button.

export const $ = (id) => document.getElementById(id);

/** An element with properties and children (strings become text nodes). */
export function el(tag, props, ...kids) {
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

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
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
export function copyButton(text, what) {
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
