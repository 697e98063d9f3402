// A session's uncommitted changes (`changes`, `changes/diff` of its instance): the branch,
// ahead/behind its upstream and every changed file with +/− counts; a file's unified diff with
// old/new line numbers, word-level marks inside a changed line (a token LCS between a '-' line
// and the '+' line paired with it), syntax colouring, long unchanged runs folded, and
// placeholders for binary and very large files. A remark on a line or a hunk (long-press, or
// select the line and "Comment") goes to the agent as one prompt quoting `path:line` and the
// hunk, through the session view's own prompt path (`app.handOver`).
//
// Bench (scripts/bench-web, not a test): open a 2000-line diff over 20 files under a 4× CPU
// throttle, time from the tap to the diff painted, and scroll it end to end watching frames.

import { h, clear, baseName, plural, toast } from './dom.js';
import { getJson, query, canWrite, WATCH_ONLY } from './api.js';

/** Context lines asked around a change; runs longer than FOLD_AT are folded to EDGE each side. */
const CONTEXT = 10;
const EDGE = 3;
const FOLD_AT = 2 * EDGE + 2;
/** Lines rendered before the rest of a very large diff is left out. */
const MAX_LINES = 3000;
/** Tokens per line beyond which no word marks are computed (the LCS is quadratic). */
const MAX_TOKENS = 400;
/** How long a press is a long-press. */
const LONG_PRESS_MS = 500;
/** Lines of a hunk quoted in a remark, around the line remarked on. */
const QUOTE_AROUND = 12;

const STATUS = { modified: 'M', added: 'A', deleted: 'D', renamed: 'R', copied: 'C', untracked: 'U', conflicted: '!' };

/** Mounts the changes view; returns its cleanup. */
export function changesView(root, app, { instance, sid, cwd, file }) {
  const base = `/api/instances/${encodeURIComponent(instance)}/changes`;
  const here = (params) => `/c/${encodeURIComponent(instance)}/${encodeURIComponent(sid)}${query({ cwd, ...params })}`;
  const sessionUrl = `/s/${encodeURIComponent(instance)}/${encodeURIComponent(sid)}${query({ cwd })}`;
  const body = h('div', { class: 'changes-body' });
  const back = file
    ? h('a', { class: 'button', id: 'changes-back', href: here({}), 'data-nav': '', 'aria-label': 'Back to the changed files' }, '← Changes')
    : h('a', { class: 'button', id: 'changes-back', href: sessionUrl, 'data-nav': '' }, '← Session');
  clear(root, h('div', { class: 'changes card' }, h('div', { class: 'card-head' }, back, h('h2', { text: file ? baseName(file) : 'Changes' })), body));
  app.setTitle(file ? baseName(file) : 'Changes');
  app.setConn('connecting', 'Reaching the hub');
  let alive = true;
  if (file) showDiff(file); else showList();
  return () => { alive = false; };

  function reached(e) {
    if (!e) return app.setConn('open', 'Hub reachable');
    if (e.status && e.kind !== 'network' && e.kind !== 'down' && e.kind !== 'gateway') return app.setConn('open', 'Hub reachable');
    return app.setConn('waiting', e.message, e.kind === 'network' ? 'down' : e.kind);
  }

  function showError(e, retry) {
    reached(e);
    const msg = e.status === 403 ? 'Outside the session\'s directory, or the session is not on this instance.'
      : e.status === 404 && e.kind !== 'missing' ? 'This file has no uncommitted change any more.' : e.message;
    clear(body, h('p', { class: 'error', role: 'alert', text: msg }), h('button', { type: 'button', onclick: retry }, 'Retry'));
  }

  function notGit() {
    clear(body, h('p', { class: 'muted', id: 'not-git', text: 'This session\'s folder is not in a git repository: there are no changes to review.' }));
  }

  async function showList() {
    body.replaceChildren(h('p', { class: 'muted', text: 'Reading the changes…' }));
    try {
      const r = await getJson(`${base}${query({ sessionId: sid })}`, 'Changes');
      if (!alive) return;
      reached();
      if (!r.git) return notGit();
      const files = Array.isArray(r.files) ? r.files : [];
      const adds = files.reduce((n, f) => n + (Number(f.additions) || 0), 0);
      const dels = files.reduce((n, f) => n + (Number(f.deletions) || 0), 0);
      clear(body,
        branchLine(r),
        h('p', { class: 'muted changes-total', text: files.length ? `${plural(files.length, 'file')} changed · +${adds} −${dels}` : 'No uncommitted changes.' }),
        h('ul', { class: 'rows changes-files', id: 'changes-files' }, files.map((f) => fileRow(f))),
        r.truncated ? h('p', { class: 'muted', text: 'Very many changes: only the first are listed or counted.' }) : null,
        h('button', { type: 'button', id: 'changes-refresh', onclick: () => showList() }, 'Refresh'));
    } catch (e) {
      if (alive) showError(e, () => showList());
    }
  }

  function branchLine(r) {
    const parts = [];
    const name = r.branch ? String(r.branch) : 'detached HEAD';
    const head = r.head ? String(r.head).slice(0, 7) : 'no commit yet';
    let track = 'no upstream';
    if (r.upstream) {
      const a = Number(r.ahead) || 0;
      const b = Number(r.behind) || 0;
      track = a || b ? `${a ? `${a} ahead` : ''}${a && b ? ', ' : ''}${b ? `${b} behind` : ''} ${String(r.upstream)}` : `up to date with ${String(r.upstream)}`;
    }
    parts.push(h('code', { class: 'branch', id: 'changes-branch', text: name }), h('span', { class: 'muted', text: `at ${head}` }),
      h('span', { class: 'ahead-behind', id: 'changes-track', text: track }));
    return h('div', { class: 'changes-branch' }, parts);
  }

  function fileRow(f) {
    const path = String(f.path ?? '');
    const dir = path.includes('/') ? path.slice(0, path.lastIndexOf('/') + 1) : '';
    const status = String(f.status || 'modified');
    const counts = f.binary ? h('span', { class: 'muted', text: 'binary' })
      : h('span', { class: 'counts' }, h('span', { class: 'plus', text: `+${Number(f.additions) || 0}` }), ' ', h('span', { class: 'minus', text: `−${Number(f.deletions) || 0}` }));
    return h('li', { dataset: { path, status } },
      h('a', { 'data-nav': '', href: here({ file: path }), 'aria-label': `${path}, ${status}` },
        h('span', { class: `st st-${status}`, title: status, text: STATUS[status] || '?' }),
        h('span', { class: 'fname' }, dir ? h('span', { class: 'muted', text: dir }) : null, baseName(path) === '/' ? path : path.slice(dir.length),
          f.oldPath ? h('span', { class: 'muted', text: ` ← ${String(f.oldPath)}` }) : null),
        counts));
  }

  async function showDiff(path) {
    body.replaceChildren(h('p', { class: 'muted', text: 'Reading the diff…' }));
    try {
      const d = await getJson(`${base}/diff${query({ sessionId: sid, path, context: CONTEXT })}`, 'Diff');
      if (!alive) return;
      reached();
      if (d.git === false) return notGit();
      const head = h('p', { class: 'muted diff-head' }, h('span', { class: `st st-${d.status}`, text: STATUS[d.status] || '?' }), ` ${d.status || 'changed'}`,
        d.oldPath ? ` from ${String(d.oldPath)}` : '');
      const hunks = Array.isArray(d.hunks) ? d.hunks : [];
      if (d.binary) return clear(body, head, h('p', { class: 'placeholder', id: 'diff-binary', text: 'A binary file: its changes cannot be shown as text.' }));
      if (!hunks.length) return clear(body, head, h('p', { class: 'placeholder', text: 'No line changed (only the mode, or an empty file).' }));
      const view = h('div', { class: 'diff-view', id: 'diff-view', role: 'table', 'aria-label': `Changes to ${path}` });
      const total = hunks.reduce((n, hk) => n + (hk.lines || []).length, 0);
      let budget = MAX_LINES;
      for (const hk of hunks) {
        if (budget <= 0) break;
        budget -= renderHunk(view, hk, path, budget);
      }
      clear(body, head, view,
        total > MAX_LINES ? h('p', { class: 'placeholder', id: 'diff-large', text: `A very large diff: ${total - MAX_LINES} more lines are not shown here.` }) : null,
        d.truncated ? h('p', { class: 'placeholder', id: 'diff-cut', text: 'The diff was cut at 1 MB: the rest is not shown.' }) : null);
    } catch (e) {
      if (alive) showError(e, () => showDiff(path));
    }
  }

  /** Renders one hunk into `view`; returns the number of lines rendered (at most `budget`). */
  function renderHunk(view, hk, path, budget) {
    const lines = (Array.isArray(hk.lines) ? hk.lines : []).slice(0, budget);
    const marks = wordMarks(lines);
    const lang = langOf(path);
    const header = `@@ −${hk.oldStart},${hk.oldLines} +${hk.newStart},${hk.newLines} @@`;
    view.append(h('div', { class: 'hunk-head', role: 'row' },
      h('span', { text: header }),
      h('button', { type: 'button', class: 'hunk-comment', onclick: () => remark(path, hk, null) , 'aria-label': `Comment on the hunk ${header}` }, 'Comment')));
    const rows = lines.map((l, i) => lineRow(l, marks.get(i), lang, hk, path));
    // Unchanged runs longer than FOLD_AT keep EDGE lines each side (at a hunk's edge, the
    // side next to the change); the middle is one tap away.
    let i = 0;
    while (i < rows.length) {
      if (lines[i].kind !== ' ') { view.append(rows[i]); i++; continue; }
      let j = i;
      while (j < rows.length && lines[j].kind === ' ') j++;
      const keepTop = i === 0 ? 0 : EDGE;
      const keepEnd = j === rows.length ? 0 : EDGE;
      if (j - i > FOLD_AT || (j - i > EDGE && (i === 0 || j === rows.length))) {
        const hidden = rows.slice(i + keepTop, j - keepEnd);
        if (hidden.length > 1) {
          view.append(...rows.slice(i, i + keepTop));
          const fold = h('button', { type: 'button', class: 'fold', 'aria-label': `Show ${hidden.length} unchanged lines` }, `⋯ ${plural(hidden.length, 'unchanged line')}`);
          fold.addEventListener('click', () => fold.replaceWith(...hidden));
          view.append(fold, ...rows.slice(j - keepEnd, j));
          i = j;
          continue;
        }
      }
      view.append(...rows.slice(i, j));
      i = j;
    }
    return lines.length;
  }

  function lineRow(l, mark, lang, hk, path) {
    const kind = l.kind === '+' || l.kind === '-' ? l.kind : ' ';
    const cls = kind === '+' ? 'add' : kind === '-' ? 'del' : 'ctx';
    const text = String(l.text ?? '');
    const row = h('div', { class: `dl ${cls}`, role: 'row', tabindex: '0', dataset: { old: l.oldNo ?? '', new: l.newNo ?? '' } },
      h('span', { class: 'no', 'aria-hidden': 'true', text: l.oldNo != null ? String(l.oldNo) : '' }),
      h('span', { class: 'no', 'aria-hidden': 'true', text: l.newNo != null ? String(l.newNo) : '' }),
      h('span', { class: 'sign', 'aria-hidden': 'true', text: kind }),
      h('span', { class: 'code' }, paint(text, lang, mark)));
    pressable(row, () => remark(path, hk, l), () => select(row, path, hk, l));
    return row;
  }

  /** Tap selects a line (a Comment button appears on it); a long press opens the remark at once. */
  function pressable(row, onLong, onTap) {
    let timer = null;
    let long = false;
    const stop = () => { clearTimeout(timer); timer = null; };
    row.addEventListener('pointerdown', (e) => {
      if (e.target.closest('button')) return;
      long = false;
      timer = setTimeout(() => { long = true; timer = null; onLong(); }, LONG_PRESS_MS);
    });
    for (const ev of ['pointerup', 'pointercancel', 'pointerleave']) row.addEventListener(ev, stop);
    // A scroll is not a press.
    row.addEventListener('pointermove', (e) => { if (Math.abs(e.movementY) > 4 || Math.abs(e.movementX) > 4) stop(); });
    row.addEventListener('contextmenu', (e) => e.preventDefault());
    row.addEventListener('click', (e) => { if (!long && !e.target.closest('button')) onTap(); long = false; });
    row.addEventListener('keydown', (e) => { if (e.key === 'Enter' && e.target === row) onTap(); });
  }

  function select(row, path, hk, l) {
    for (const old of body.querySelectorAll('.dl.selected')) {
      old.classList.remove('selected');
      old.querySelector('.line-comment')?.remove();
    }
    row.classList.add('selected');
    row.append(h('button', { type: 'button', class: 'line-comment', onclick: () => remark(path, hk, l), 'aria-label': `Comment on ${where(path, l)}` }, 'Comment'));
  }

  function remark(path, hk, line) {
    if (!canWrite()) return toast(WATCH_ONLY, 'error');
    const spot = line ? where(path, line) : span(path, hk);
    const input = h('textarea', { id: 'remark-input', rows: 4, 'aria-label': 'Your remark', placeholder: 'What should the agent do here?' });
    const quoted = quote(hk, line);
    const preview = h('pre', { class: 'remark-quote', text: quoted });
    modalRemark(spot, input, preview, async () => {
      const text = input.value.trim();
      if (!text) return 'Write a remark first.';
      const prompt = `About \`${spot}\`: ${text}\n\n\`\`\`diff\n${quoted}\n\`\`\``;
      app.handOver(instance, sid, prompt);
      app.navigate(sessionUrl);
      return '';
    });
  }
}

/** `path:N` for a line: its new number, or its old one (said so) for a deleted line. */
function where(path, l) {
  return l.newNo != null ? `${path}:${l.newNo}` : `${path}:${l.oldNo} (before the change)`;
}

/** `path:A-B` for a hunk: its new lines, or its old ones (said so) when none are left. */
function span(path, hk) {
  const [start, count, note] = Number(hk.newLines) > 0 ? [hk.newStart, hk.newLines, ''] : [hk.oldStart, hk.oldLines, ' (before the change)'];
  const end = Number(start) + Math.max(0, Number(count) - 1);
  return `${path}:${start}${end > start ? `-${end}` : ''}${note}`;
}

/** The hunk as diff text for the prompt: its header and, around `line`, QUOTE_AROUND lines each side. */
function quote(hk, line) {
  const lines = Array.isArray(hk.lines) ? hk.lines : [];
  let from = 0;
  let to = lines.length;
  if (line) {
    const at = Math.max(0, lines.indexOf(line));
    from = Math.max(0, at - QUOTE_AROUND);
    to = Math.min(lines.length, at + QUOTE_AROUND + 1);
  } else if (to > 4 * QUOTE_AROUND) {
    to = 4 * QUOTE_AROUND;
  }
  const body = lines.slice(from, to).map((l) => `${l.kind === '+' || l.kind === '-' ? l.kind : ' '}${String(l.text ?? '')}`);
  if (from > 0) body.unshift(' …');
  if (to < lines.length) body.push(' …');
  return [`@@ -${hk.oldStart},${hk.oldLines} +${hk.newStart},${hk.newLines} @@`, ...body].join('\n');
}

/** The remark dialog: the place, the quoted hunk, the text; "Send to agent" runs `send`. */
function modalRemark(spot, input, preview, send) {
  const err = h('p', { class: 'error', role: 'alert', hidden: true });
  const dlg = h('dialog', { class: 'modal remark', id: 'remark' });
  const go = h('button', { type: 'button', class: 'primary', id: 'remark-send' }, 'Send to agent');
  const cancel = h('button', { type: 'button', id: 'remark-cancel', onclick: () => dlg.close() }, 'Cancel');
  go.addEventListener('click', async () => {
    go.disabled = true;
    const problem = await send();
    go.disabled = false;
    if (problem) { err.textContent = problem; err.hidden = false; return; }
    dlg.close();
  });
  dlg.append(h('h2', { text: 'Remark for the agent' }), h('p', {}, h('code', { class: 'path', id: 'remark-spot', text: spot })),
    preview, input, err, h('div', { class: 'actions' }, cancel, go));
  dlg.addEventListener('close', () => dlg.remove());
  document.body.append(dlg);
  dlg.showModal();
  input.focus();
}

// ---- word marks ----

/** Tokens for a word diff: words, runs of spaces, single other characters. */
function tokens(s) {
  return s.match(/[\p{L}\p{N}_]+|\s+|[^\p{L}\p{N}_\s]/gu) || [];
}

/**
 * For each '-' line paired with a '+' line (the i-th of a run of deletions with the i-th of the
 * additions right after it): the character ranges that differ, by line index. Lines with
 * little in common get none (the whole line is the change).
 */
export function wordMarks(lines) {
  const out = new Map();
  let i = 0;
  while (i < lines.length) {
    if (lines[i].kind !== '-') { i++; continue; }
    let j = i;
    while (j < lines.length && lines[j].kind === '-') j++;
    let k = j;
    while (k < lines.length && lines[k].kind === '+') k++;
    for (let n = 0; n < Math.min(j - i, k - j); n++) {
      const pair = diffWords(String(lines[i + n].text ?? ''), String(lines[j + n].text ?? ''));
      if (pair) { out.set(i + n, pair[0]); out.set(j + n, pair[1]); }
    }
    i = k;
  }
  return out;
}

/** [ranges in a, ranges in b] of the tokens outside their LCS, or null when too unlike or too long. */
export function diffWords(a, b) {
  const ta = tokens(a);
  const tb = tokens(b);
  if (ta.length > MAX_TOKENS || tb.length > MAX_TOKENS) return null;
  const m = ta.length;
  const n = tb.length;
  const dp = Array.from({ length: m + 1 }, () => new Uint16Array(n + 1));
  for (let x = m - 1; x >= 0; x--) {
    for (let y = n - 1; y >= 0; y--) dp[x][y] = ta[x] === tb[y] ? dp[x + 1][y + 1] + 1 : Math.max(dp[x + 1][y], dp[x][y + 1]);
  }
  const keepA = new Array(m).fill(false);
  const keepB = new Array(n).fill(false);
  let common = 0;
  for (let x = 0, y = 0; x < m && y < n;) {
    if (ta[x] === tb[y]) { keepA[x] = keepB[y] = true; common += ta[x].length; x++; y++; } else if (dp[x + 1][y] >= dp[x][y + 1]) x++; else y++;
  }
  // Too little in common: marking nearly everything says less than marking nothing.
  if (common * 3 < Math.max(a.length, b.length)) return null;
  const ranges = (ts, keep) => {
    const r = [];
    let at = 0;
    ts.forEach((t, idx) => {
      if (!keep[idx]) {
        const last = r[r.length - 1];
        if (last && last[1] === at) last[1] += t.length; else r.push([at, at + t.length]);
      }
      at += t.length;
    });
    return r;
  };
  return [ranges(ta, keepA), ranges(tb, keepB)];
}

// ---- colouring ----

const EXT = {
  js: 'js', mjs: 'js', cjs: 'js', jsx: 'js', ts: 'js', tsx: 'js', rs: 'rust', py: 'python', sh: 'sh', bash: 'sh',
  json: 'json', go: 'go', c: 'c', h: 'c', cc: 'c', cpp: 'c', hpp: 'c', java: 'c', css: 'css', toml: 'sh', yml: 'sh', yaml: 'sh',
};

function langOf(path) {
  const m = /\.([A-Za-z0-9]+)$/.exec(path);
  return m ? EXT[m[1].toLowerCase()] || null : null;
}

const KEYWORDS = new Set(`as async await break case catch class const continue def default defer delete do elif else enum
  export extends false fn for from func function go if impl import in interface let loop match mod mut new nil none null
  package pub return self static struct super switch this throw trait true try type typeof use var void where while with yield`
  .split(/\s+/));
const HASH_COMMENT = new Set(['python', 'sh']);

/**
 * A small colourer (comments, strings, numbers, keywords) as `tok-<kind>` spans, the class names
 * of the client's highlighter (hub/web/js/highlight.js, where present): one line at a time.
 */
const PATTERNS = new Map();

function pattern(lang) {
  if (!PATTERNS.has(lang)) {
    const com = HASH_COMMENT.has(lang) ? '#.*' : '\\/\\/.*|\\/\\*.*?(?:\\*\\/|$)';
    PATTERNS.set(lang, new RegExp(`(${com})|("(?:[^"\\\\]|\\\\.)*"?|'(?:[^'\\\\]|\\\\.)*'?|\`[^\`]*\`?)|(\\b\\d[\\w.]*)|([A-Za-z_][\\w]*)`, 'g'));
  }
  const re = PATTERNS.get(lang);
  re.lastIndex = 0;
  return re;
}

function colour(text, lang) {
  if (!lang) return [{ text, cls: '' }];
  const re = pattern(lang);
  const out = [];
  let last = 0;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    const cls = m[1] ? 'tok-com' : m[2] ? 'tok-str' : m[3] ? 'tok-num' : KEYWORDS.has(m[4]) ? 'tok-kw' : '';
    if (!cls) continue;
    if (m.index > last) out.push({ text: text.slice(last, m.index), cls: '' });
    out.push({ text: m[0], cls });
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push({ text: text.slice(last), cls: '' });
  return out;
}

/** A line's nodes: coloured pieces, cut where a word mark starts or ends (`<mark>` around those). */
function paint(text, lang, marks) {
  const pieces = colour(text, lang);
  const cuts = new Set([0, text.length]);
  for (const [a, b] of marks || []) { cuts.add(a); cuts.add(b); }
  let at = 0;
  for (const p of pieces) { cuts.add(at); at += p.text.length; }
  const points = [...cuts].sort((x, y) => x - y);
  const inMark = (x) => (marks || []).some(([a, b]) => x >= a && x < b);
  const clsAt = (x) => {
    let s = 0;
    for (const p of pieces) { if (x < s + p.text.length) return p.cls; s += p.text.length; }
    return '';
  };
  const out = [];
  for (let k = 0; k + 1 < points.length; k++) {
    const [a, b] = [points[k], points[k + 1]];
    if (a === b) continue;
    const cls = clsAt(a);
    let node = cls ? h('span', { class: cls, text: text.slice(a, b) }) : document.createTextNode(text.slice(a, b));
    if (inMark(a)) node = h('mark', { class: 'wd' }, node);
    out.push(node);
  }
  return out;
}
