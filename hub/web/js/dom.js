// DOM helpers. Every string that reaches the page goes through a text node or an attribute
// set by name: nothing here (or anywhere in the client) parses HTML from a string.

/**
 * Builds an element. `attrs`: `class`, `text`, `on<event>` (listeners), `dataset`, and
 * anything else as an attribute (false/null/undefined skipped). Children: nodes, strings
 * (text nodes), arrays, null/false (skipped).
 */
export function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === false || v === null || v === undefined) continue;
    if (k === 'class') node.className = v;
    else if (k === 'text') node.textContent = v;
    else if (k === 'dataset') Object.assign(node.dataset, v);
    else if (k.startsWith('on') && typeof v === 'function') node.addEventListener(k.slice(2), v);
    else if (k === 'value') node.value = v;
    else if (k === 'checked' || k === 'disabled' || k === 'selected' || k === 'hidden') node[k] = !!v;
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  append(node, children);
  return node;
}

/** Appends children (see `h`) to `node`; returns `node`. */
export function append(node, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

/**
 * Removes every child of `node`, then appends `children` as `append` does (null, undefined
 * and false skipped: the native `Element.append` would print them as "null"); returns `node`.
 * Fill a cleared node through here (`clear(box, a, b)`), never `clear(box).append(a, b)`.
 */
export function clear(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

/** `$('#id')` within `root` (default: document). */
export const $ = (sel, root = document) => root.querySelector(sel);

let toastSeq = 0;
/** A short message at the bottom of the screen; `kind`: info | error. */
export function toast(message, kind = 'info', ms = 5000) {
  const box = $('#toasts');
  if (!box) return;
  const id = ++toastSeq;
  const t = h('div', { class: `toast ${kind}`, role: kind === 'error' ? 'alert' : 'status', dataset: { id } },
    h('span', { text: message }),
    h('button', { type: 'button', class: 'link', 'aria-label': 'Dismiss', onclick: () => t.remove() }, '×'));
  box.append(t);
  setTimeout(() => t.remove(), ms);
}

/** "3 min ago"-style age of an epoch-ms or ISO time. */
export function ago(t) {
  const ms = typeof t === 'number' ? t : Date.parse(t);
  if (!Number.isFinite(ms)) return '';
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return 'just now';
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(ms).toLocaleDateString();
}

/** A count in words: `plural(1, 'session')` → "1 session", `plural(2, 'session')` → "2 sessions". */
export function plural(n, one, many = `${one}s`) {
  const k = Number(n) || 0;
  return `${k} ${k === 1 ? one : many}`;
}

/**
 * `text` on one line, at most `max` characters: a longer one is cut at the last word that
 * fits and ends with "…" (mid-word only when a single word is longer than `max`).
 */
export function short(text, max = 80) {
  const t = String(text ?? '').replace(/\s+/g, ' ').trim();
  if (t.length <= max) return t;
  const cut = t.slice(0, max);
  const space = cut.lastIndexOf(' ');
  return `${(space > max / 2 ? cut.slice(0, space) : cut.slice(0, max - 1)).replace(/[\s,.;:!?-]+$/, '')}…`;
}

/** The last path segment ("/a/b/proj" → "proj"). */
export function baseName(path) {
  const parts = String(path || '').split('/').filter(Boolean);
  return parts.length ? parts[parts.length - 1] : '/';
}

/** A human size ("1.2 MB"). */
export function size(n) {
  if (!Number.isFinite(n)) return '';
  const units = ['B', 'KB', 'MB', 'GB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

/**
 * A modal dialog (`<dialog>`): `body` nodes, `actions` [{label, value, kind}]; resolves with
 * the chosen value (or null on Escape/cancel). `onSubmit(value)` may return an error string to
 * keep it open, or a promise of one.
 */
export function modal(title, body, actions, onSubmit) {
  return new Promise((resolve) => {
    const err = h('p', { class: 'error', role: 'alert', hidden: true });
    const form = h('form', { method: 'dialog' },
      h('h2', { text: title }), body, err,
      h('div', { class: 'actions' }, actions.map((a) =>
        h('button', { type: 'submit', value: a.value ?? '', class: a.kind || '' }, a.label))));
    const dlg = h('dialog', { class: 'modal' }, form);
    let submitter = null;
    form.addEventListener('click', (e) => { if (e.target.tagName === 'BUTTON') submitter = e.target; });
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const value = submitter ? submitter.value : (actions[0] && actions[0].value);
      if (!value) { dlg.close(); return; }
      if (onSubmit) {
        for (const b of form.querySelectorAll('button')) b.disabled = true;
        const problem = await onSubmit(value);
        for (const b of form.querySelectorAll('button')) b.disabled = false;
        if (problem) { err.textContent = problem; err.hidden = false; return; }
      }
      resolve(value);
      dlg.close();
    });
    dlg.addEventListener('close', () => { dlg.remove(); resolve(null); });
    document.body.append(dlg);
    dlg.showModal();
    const first = form.querySelector('input, textarea, select');
    if (first) first.focus();
  });
}

/** A line diff: common head and tail kept as context, the middle as removed and added lines. */
export function diffNode(c) {
  const oldLines = c.oldText == null ? [] : String(c.oldText).split('\n');
  const newLines = String(c.newText ?? '').split('\n');
  let a = 0;
  while (a < oldLines.length && a < newLines.length && oldLines[a] === newLines[a]) a++;
  let b = 0;
  while (b < oldLines.length - a && b < newLines.length - a
    && oldLines[oldLines.length - 1 - b] === newLines[newLines.length - 1 - b]) b++;
  const rows = [];
  const ctx = (l) => rows.push(h('div', { class: 'ctx', text: `  ${l}` }));
  oldLines.slice(Math.max(0, a - 2), a).forEach(ctx);
  oldLines.slice(a, oldLines.length - b).forEach((l) => rows.push(h('div', { class: 'del', text: `- ${l}` })));
  newLines.slice(a, newLines.length - b).forEach((l) => rows.push(h('div', { class: 'add', text: `+ ${l}` })));
  oldLines.slice(oldLines.length - b, oldLines.length - b + 2).forEach(ctx);
  return h('div', { class: 'diff' }, h('div', { class: 'diff-path', text: String(c.path || '') }), h('pre', {}, rows));
}
