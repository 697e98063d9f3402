// A session's files, read-only: browse a directory (`fs/list`), view a text file by line
// windows (`line` + `limit`, so a long log pages instead of loading whole), show images inline
// (fetched with the token, shown from a blob: URL), and download any file (`dl=1`).

import { h, clear, size, toast, baseName } from './dom.js';
import { api, getJson, query } from './api.js';

const WINDOW = 200;
const IMAGE = /^image\/(png|jpeg|gif|webp|bmp|svg\+xml|x-icon|avif)/;
const TEXTUAL = /^(text\/|application\/(json|javascript|xml|x-sh|toml|yaml|x-yaml|sql))/;

/** Mounts the files view; returns its cleanup. */
export function filesView(root, app, { instance, sid, cwd, dir, file }) {
  const urls = [];
  const base = `/api/instances/${encodeURIComponent(instance)}/fs`;
  const here = (params) => `/f/${encodeURIComponent(instance)}/${encodeURIComponent(sid)}${query({ cwd, ...params })}`;
  const body = h('div', { class: 'files-body' });
  // From a file, back is its folder (where it was opened from); from a folder, the session.
  const folder = file ? file.split('/').slice(0, -1).join('/') : null;
  const back = file
    ? h('a', { class: 'button', id: 'files-back', href: here({ dir: folder || undefined }), 'data-nav': '', 'aria-label': 'Back to the folder' }, `← ${folder ? baseName(folder) : 'Files'}`)
    : h('a', { class: 'button', id: 'files-back', href: `/s/${encodeURIComponent(instance)}/${encodeURIComponent(sid)}${query({ cwd })}`, 'data-nav': '' }, '← Session');
  clear(root, h('div', { class: 'files card' }, h('div', { class: 'card-head' }, back, h('h2', { text: file ? baseName(file) : 'Files' })), body));
  app.setTitle(file ? baseName(file) : 'Files');

  app.setConn('connecting', 'Reaching the hub');
  if (file) showFile(file); else list(dir || '');

  /** The pill says what the last request to the hub found. */
  function reached(e) {
    if (!e) return app.setConn('open', 'Hub reachable');
    // An answer with an HTTP status came from the hub, even when it is an error.
    if (e.status && e.kind !== 'network' && e.kind !== 'down' && e.kind !== 'gateway') return app.setConn('open', 'Hub reachable');
    return app.setConn('waiting', e.message, e.kind === 'network' ? 'down' : e.kind);
  }

  async function list(path) {
    body.replaceChildren(h('p', { class: 'muted', text: 'Listing…' }));
    try {
      const r = await getJson(`${base}/list${query({ sessionId: sid, path })}`, 'Files');
      reached();
      const rootPath = String(r.root || '');
      const shown = path || '.';
      const parent = path && path !== '.' ? path.split('/').slice(0, -1).join('/') : null;
      const entries = Array.isArray(r.entries) ? r.entries : [];
      clear(body,
        h('div', { class: 'browse-head' },
          h('a', { class: 'button', 'data-nav': '', href: here({ dir: parent || undefined }), hidden: parent === null, 'aria-label': 'Parent directory' }, '↑'),
          h('code', { class: 'path', text: `${rootPath}${shown === '.' ? '' : `/${shown}`}` })),
        h('ul', { class: 'rows file-list' }, entries.map((e) => {
          const rel = path ? `${path}/${e.name}` : String(e.name);
          const isDir = e.kind === 'dir';
          return h('li', { dataset: { name: String(e.name) } },
            h('a', { 'data-nav': '', class: isDir ? 'dir' : 'file', href: isDir ? here({ dir: rel }) : here({ file: rel }) }, `${String(e.name)}${isDir ? '/' : ''}`),
            h('span', { class: 'muted', text: isDir ? '' : size(Number(e.size)) }));
        })),
        r.truncated ? h('p', { class: 'muted', text: 'More than 2000 entries: only the first are listed.' }) : null,
        entries.length ? null : h('p', { class: 'muted', text: 'This directory is empty.' }));
    } catch (e) {
      showError(e, () => list(path));
    }
  }

  function showError(e, retry) {
    reached(e);
    const msg = e.status === 403 ? 'Outside the session\'s directory, or the session is not on this instance.'
      : e.status === 404 && e.kind !== 'missing' ? 'Not found.' : e.message;
    clear(body, h('p', { class: 'error', role: 'alert', text: msg }), h('button', { type: 'button', onclick: retry }, 'Retry'));
  }

  function fileUrl(path, extra) {
    return `${base}/file${query({ sessionId: sid, path, ...extra })}`;
  }

  async function showFile(path) {
    body.replaceChildren(h('p', { class: 'muted', text: 'Opening…' }));
    try {
      const head = await api(fileUrl(path), { method: 'HEAD', raw: true, what: 'File' });
      reached();
      const type = (head.headers.get('content-type') || '').toLowerCase();
      const len = Number(head.headers.get('content-length'));
      const actions = h('div', { class: 'actions' },
        h('button', { type: 'button', id: 'download', onclick: () => download(path) }, 'Download'),
        h('span', { class: 'muted', text: `${size(len)} · ${type || 'unknown type'}` }));
      if (IMAGE.test(type)) {
        const blob = await (await api(fileUrl(path), { raw: true, what: 'Image' })).blob();
        const url = URL.createObjectURL(blob);
        urls.push(url);
        clear(body, actions, h('img', { class: 'preview', src: url, alt: path }));
        return;
      }
      if (TEXTUAL.test(type) || (len < 4 * 1024 * 1024 && await looksTextual(path))) {
        clear(body, actions);
        const view = h('div', { class: 'text-view' });
        body.append(view);
        textWindow(path, 1, view);
        return;
      }
      clear(body, actions, h('p', { class: 'muted', text: 'A binary file: download it to open it.' }));
    } catch (e) {
      showError(e, () => showFile(path));
    }
  }

  async function looksTextual(path) {
    try {
      const r = await api(fileUrl(path, { offset: 0, length: 4096 }), { raw: true, what: 'File' });
      const bytes = new Uint8Array(await r.arrayBuffer());
      if (bytes.includes(0)) return false;
      new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(0, Math.max(0, bytes.length - 4)));
      return true;
    } catch {
      return false;
    }
  }

  async function textWindow(path, line, view) {
    view.replaceChildren(h('p', { class: 'muted', text: 'Reading…' }));
    try {
      const r = await api(fileUrl(path, { line, limit: WINDOW }), { raw: true, what: 'File' });
      const first = Number(r.headers.get('x-zcode-first-line')) || line;
      const text = await r.text();
      const lines = text.split('\n');
      if (lines.length && lines[lines.length - 1] === '') lines.pop();
      const last = first + lines.length - 1;
      // A short read is the end of the file; a full window may be followed by more.
      const more = lines.length >= WINDOW;
      const prev = Math.max(1, first - WINDOW);
      const nav = () => h('div', { class: 'actions pager' },
        first > 1 ? h('button', { type: 'button', class: 'prev-lines', onclick: () => textWindow(path, prev, view) }, `← Lines ${prev}–${first - 1}`) : null,
        h('span', { class: 'muted', text: lines.length ? `Lines ${first}–${last}` : 'No more lines' }),
        more ? h('button', { type: 'button', class: 'next-lines', onclick: () => textWindow(path, last + 1, view) }, `Lines ${last + 1}… →`) : null);
      clear(view, nav(),
        h('pre', { class: 'lines' }, lines.map((l, i) => h('div', { class: 'line' },
          h('span', { class: 'ln', 'aria-hidden': 'true', text: String(first + i) }), h('span', { text: l })))),
        lines.length > 30 ? nav() : null);
    } catch (e) {
      clear(view, h('p', { class: 'error', role: 'alert', text: e.message }), h('button', { type: 'button', onclick: () => textWindow(path, line, view) }, 'Retry'));
    }
  }

  async function download(path) {
    try {
      const r = await api(fileUrl(path, { dl: 1 }), { raw: true, what: 'Download' });
      const url = URL.createObjectURL(await r.blob());
      const a = h('a', { href: url, download: baseName(path), hidden: true });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
    } catch (e) {
      toast(e.message, 'error');
    }
  }

  return () => { for (const u of urls) URL.revokeObjectURL(u); };
}
