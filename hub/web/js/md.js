// A tiny markdown renderer for agent text that cannot produce markup: it builds DOM nodes,
// and every piece of the source becomes a text node. What it understands: fenced code blocks
// (coloured by highlight.js, with a Copy button), tables (GFM pipes), headings, lists (- * + and
// 1.), block quotes, rules, paragraphs with line breaks, and inline `code`, **bold**, *italic*,
// [links](https://…) and bare https:// links. A link whose target is not http(s) stays plain
// text; nothing else (HTML, images, scripts) is ever interpreted.

import { highlight, languageOf } from './highlight.js';

const INLINE = new RegExp([
  '(`+)([^`]|[^`][\\s\\S]*?[^`])\\1(?!`)', // 1,2: code span
  '\\[([^\\]\\n]+)\\]\\(([^)\\s]+)(?:\\s+"[^"\\n]*")?\\)', // 3,4: [text](url)
  '\\*\\*(?=\\S)([\\s\\S]*?\\S)\\*\\*', // 5: **bold**
  '(?<![\\w])__(?=\\S)([\\s\\S]*?\\S)__(?![\\w])', // 6: __bold__
  '\\*(?=[^\\s*])([^*\\n]*?[^\\s*])\\*', // 7: *italic*
  '(?<![\\w])_(?=[^\\s_])([^_\\n]*?[^\\s_])_(?![\\w])', // 8: _italic_
  '(https?:\\/\\/[^\\s<>()\\[\\]"\']*[^\\s<>()\\[\\].,;:!?\'"])', // 9: bare link
].join('|'), 'g');

/** The URL if it is an absolute http(s) one, else null. */
export function safeUrl(raw) {
  try {
    const u = new URL(raw);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.href : null;
  } catch {
    return null;
  }
}

function link(href, children) {
  const a = document.createElement('a');
  a.href = href;
  a.target = '_blank';
  a.rel = 'noopener noreferrer nofollow';
  a.append(...children);
  return a;
}

function wrap(tag, children) {
  const n = document.createElement(tag);
  n.append(...children);
  return n;
}

/** Inline markdown of `text` as a list of nodes; `links: false` inside a link's text. */
export function inline(text, links = true) {
  const out = [];
  let last = 0;
  const re = new RegExp(INLINE.source, 'g'); // its own: the calls nest (bold inside a link…)
  for (let m = re.exec(text); m; m = re.exec(text)) {
    if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
    last = re.lastIndex;
    if (m[2] !== undefined) {
      out.push(wrap('code', [document.createTextNode(m[2])]));
    } else if (m[3] !== undefined) {
      const href = links ? safeUrl(m[4]) : null;
      out.push(href ? link(href, inline(m[3], false)) : document.createTextNode(m[0]));
    } else if (m[5] !== undefined || m[6] !== undefined) {
      out.push(wrap('strong', inline(m[5] ?? m[6], links)));
    } else if (m[7] !== undefined || m[8] !== undefined) {
      out.push(wrap('em', inline(m[7] ?? m[8], links)));
    } else if (m[9] !== undefined) {
      const href = links ? safeUrl(m[9]) : null;
      out.push(href ? link(href, [document.createTextNode(m[9])]) : document.createTextNode(m[9]));
    }
  }
  if (last < text.length) out.push(document.createTextNode(text.slice(last)));
  return out;
}

/** `text` with its `code` spans as `<code>` and everything else as text (a tool's title). */
export function codeSpans(text) {
  const src = String(text ?? '');
  const out = [];
  let last = 0;
  const re = /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g;
  for (let m = re.exec(src); m; m = re.exec(src)) {
    if (m.index > last) out.push(document.createTextNode(src.slice(last, m.index)));
    out.push(wrap('code', [document.createTextNode(m[2])]));
    last = re.lastIndex;
  }
  if (last < src.length) out.push(document.createTextNode(src.slice(last)));
  return out;
}

/** Inline nodes of several lines, joined by `<br>`. */
function lines(ls) {
  const out = [];
  ls.forEach((l, i) => {
    if (i) out.push(document.createElement('br'));
    out.push(...inline(l));
  });
  return out;
}

const FENCE = /^\s{0,3}(```+|~~~+)\s*([\w+.-]*)\s*$/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const BULLET = /^(\s*)([-*+])\s+(.*)$/;
const ORDERED = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const TABLE_ROW = /^\s{0,3}\|?.*\|.*$/;
const TABLE_RULE = /^\s{0,3}(?=.*\|)\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

/** A fenced block: its code coloured for `lang`, and a Copy button (see `copyClicked`). */
function codeBlock(text, lang) {
  const code = wrap('code', highlight(text, lang));
  const known = languageOf(lang);
  if (lang) code.dataset.lang = lang;
  const copy = document.createElement('button');
  copy.type = 'button';
  copy.className = 'copy';
  copy.textContent = 'Copy';
  copy.setAttribute('aria-label', `Copy ${known || 'the'} code`);
  const box = wrap('div', [wrap('pre', [code]), copy]);
  box.className = 'code-block';
  return box;
}

/** The cells of a table row (`|` escaped as `\|` stays in its cell). */
function cells(line) {
  const t = line.trim().replace(/^\|/, '').replace(/(?<!\\)\|$/, '');
  return t.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

/** A GFM table starting at `src[i]` (header, rule, rows); returns the next line index. */
function table(src, i, parent) {
  const head = cells(src[i]);
  const align = cells(src[i + 1]).map((c) => (/^:-+:$/.test(c) ? 'center' : /-:$/.test(c) ? 'right' : ''));
  const row = (tag, list) => wrap('tr', head.map((_, k) => {
    const cell = wrap(tag, inline(list[k] ?? ''));
    if (align[k]) cell.className = `align-${align[k]}`; // a class: the CSP refuses style attributes
    return cell;
  }));
  const body = [];
  i += 2;
  while (i < src.length && src[i].trim() && src[i].includes('|')) body.push(row('td', cells(src[i++])));
  const t = wrap('table', [wrap('thead', [row('th', head)]), wrap('tbody', body)]);
  const box = wrap('div', [t]);
  box.className = 'table-wrap';
  parent.append(box);
  return i;
}

/**
 * A Copy button of a code block was pressed: its code goes to the clipboard (the async API
 * where the page is a secure context, else a selection and `execCommand`). One listener for
 * the page: a block re-rendered in place keeps no stale handler.
 */
async function copyClicked(e) {
  const b = e.target.closest && e.target.closest('.code-block > button.copy');
  if (!b) return;
  const text = b.parentElement.querySelector('code').textContent;
  let ok = false;
  try {
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch {
    const area = document.createElement('textarea');
    area.value = text;
    area.setAttribute('readonly', '');
    area.style.position = 'fixed';
    area.style.opacity = '0';
    document.body.append(area);
    area.select();
    try { ok = document.execCommand('copy'); } catch { ok = false; }
    area.remove();
  }
  b.textContent = ok ? 'Copied' : 'Copy failed';
  setTimeout(() => { b.textContent = 'Copy'; }, 1500);
}
if (typeof document !== 'undefined') document.addEventListener('click', copyClicked);

/** Renders `text` as a DocumentFragment. */
export function render(text) {
  const frag = document.createDocumentFragment();
  const src = String(text ?? '').replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  while (i < src.length) {
    const line = src[i];
    const fence = FENCE.exec(line);
    if (fence) {
      const body = [];
      i++;
      while (i < src.length && !src[i].trim().startsWith(fence[1])) body.push(src[i++]);
      i++; // the closing fence (or the end of an unfinished, streaming block)
      frag.append(codeBlock(body.join('\n'), fence[2]));
      continue;
    }
    if (i + 1 < src.length && TABLE_ROW.test(line) && TABLE_RULE.test(src[i + 1])) {
      i = table(src, i, frag);
      continue;
    }
    if (!line.trim()) { i++; continue; }
    const heading = HEADING.exec(line);
    if (heading) {
      const level = Math.min(6, heading[1].length + 2);
      frag.append(wrap(`h${level}`, inline(heading[2])));
      i++;
      continue;
    }
    if (RULE.test(line)) { frag.append(document.createElement('hr')); i++; continue; }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < src.length && QUOTE.test(src[i])) body.push(QUOTE.exec(src[i++])[1]);
      const q = document.createElement('blockquote');
      q.append(render(body.join('\n')));
      frag.append(q);
      continue;
    }
    if (BULLET.test(line) || ORDERED.test(line)) {
      i = list(src, i, frag);
      continue;
    }
    const para = [];
    while (i < src.length && src[i].trim() && !FENCE.test(src[i]) && !HEADING.test(src[i])
      && !(TABLE_ROW.test(src[i]) && TABLE_RULE.test(src[i + 1] || ''))
      && !BULLET.test(src[i]) && !ORDERED.test(src[i]) && !QUOTE.test(src[i])) {
      para.push(src[i++]);
    }
    if (!para.length) para.push(src[i++]);
    frag.append(wrap('p', lines(para)));
  }
  return frag;
}

/** A list starting at `src[i]` (nested by indentation); returns the next line index. */
function list(src, i, parent) {
  const first = BULLET.exec(src[i]) || ORDERED.exec(src[i]);
  const indent = first[1].length;
  const ordered = !BULLET.test(src[i]);
  const node = document.createElement(ordered ? 'ol' : 'ul');
  if (ordered && first[2] !== '1') node.start = Number(first[2]);
  let item = null;
  while (i < src.length) {
    const line = src[i];
    const m = BULLET.exec(line) || ORDERED.exec(line);
    if (m && m[1].length === indent && !BULLET.test(line) === ordered) {
      item = wrap('li', inline(m[3]));
      node.append(item);
      i++;
    } else if (m && m[1].length > indent && item) {
      i = list(src, i, item);
    } else if (line.trim() && /^\s+/.test(line) && item && !m) {
      item.append(document.createElement('br'), ...inline(line.trim()));
      i++;
    } else {
      break;
    }
  }
  parent.append(node);
  return i;
}
