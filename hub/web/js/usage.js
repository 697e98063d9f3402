// Token usage (route /usage?range=7d|30d|all): what this machine's bridges recorded from
// their agents' ACP usage reports, read from `GET /api/settings/usage`: the totals, each model
// with its share, and each day with a bar split by model. A machine that never recorded any
// usage gets an empty state, not an error. Days are UTC days, as the hub counts them.
//
// Styles live in /usage.css, loaded with the view. Bar lengths are set through the CSS object
// model (`el.style.width`), which the page's style policy allows (style attributes it does not).

import { h, clear } from './dom.js';
import { getJson, query } from './api.js';

const RANGES = [['7d', '7 days'], ['30d', '30 days'], ['all', 'All time']];
/** Model colours, by rank in the range (usage.css defines .m0 … .m5; the rest share .m5). */
const COLOURS = 6;

/** Loads usage.css once. */
function styles() {
  if (document.querySelector('link[data-usage-css]')) return;
  document.head.append(h('link', { rel: 'stylesheet', href: new URL('../usage.css', import.meta.url).href, dataset: { usageCss: '' } }));
}

/** 1234 → "1,234"; 12 345 → "12.3K"; 1.5e9 → "1.5B". */
export function tokens(n) {
  const v = Number(n) || 0;
  if (Math.abs(v) < 10000) return v.toLocaleString('en-US');
  return new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 1 }).format(v);
}

/** A share (0..1) as a percentage. */
function percent(share) {
  const p = (Number(share) || 0) * 100;
  return `${p >= 10 || p === 0 ? Math.round(p) : p.toFixed(1)}%`;
}

/** "2026-09-22" → "Tue, Sep 22" (a UTC day). */
function day(date) {
  const t = Date.parse(`${date}T00:00:00Z`);
  if (!Number.isFinite(t)) return String(date || '');
  return new Date(t).toLocaleDateString('en-US', { weekday: 'short', month: 'short', day: 'numeric', timeZone: 'UTC' });
}

/** "1 turn", "2 turns". */
function count(n, what) {
  return `${tokens(n)} ${what}${Number(n) === 1 ? '' : 's'}`;
}

/** Costs as "USD 0.05 · EUR 1.20", or '' when none was reported. */
function costs(list) {
  if (!Array.isArray(list) || !list.length) return '';
  return list.map((c) => `${String(c.currency || '?')} ${(Number(c.amount) || 0).toFixed(2)}`).join(' · ');
}

/** The home screen's way in: a small card with a link (and, when known, this week's total). */
export function usageLink() {
  styles();
  const note = h('span', { class: 'muted', id: 'usage-note' });
  const card = h('section', { class: 'card usage-link', id: 'usage-card', 'aria-label': 'Token usage' },
    h('a', { href: '/usage', 'data-nav': '', id: 'usage-link' }, 'Token usage →'), note);
  getJson('/api/settings/usage?range=7d', 'Token usage').then((u) => {
    if (u && u.available) note.textContent = `${tokens(u.summary && u.summary.totalTokens)} tokens in 7 days`;
  }).catch(() => { /* the view itself explains a failure */ });
  return card;
}

/** Mounts the usage view; returns its cleanup. */
export function usageView(root, app, { range }) {
  styles();
  let current = RANGES.some(([r]) => r === range) ? range : '7d';
  let seq = 0;
  const body = h('div', { id: 'usage-body' }, h('p', { class: 'muted', text: 'Loading usage…' }));
  const picker = h('div', { class: 'segmented', role: 'group', 'aria-label': 'Range' },
    RANGES.map(([r, label]) => h('button', {
      type: 'button', dataset: { range: r }, 'aria-pressed': String(r === current), onclick: () => pick(r),
    }, label)));
  clear(root, h('div', { class: 'usage-view' },
    h('div', { class: 'card-head' }, h('h2', { text: 'Token usage' }), picker), body));
  app.setTitle('Usage');

  function pick(r) {
    if (r === current) return;
    current = r;
    app.replace(`/usage${query({ range: r })}`);
    for (const b of picker.querySelectorAll('button')) b.setAttribute('aria-pressed', String(b.dataset.range === r));
    load();
  }

  async function load() {
    const mine = ++seq;
    try {
      const u = await getJson(`/api/settings/usage${query({ range: current })}`, 'Token usage');
      if (mine !== seq) return;
      app.setConn('open', 'Hub reachable');
      render(u || {});
    } catch (e) {
      if (mine !== seq) return;
      if (e.kind === 'auth') return app.pair(e.message);
      app.setConn('waiting', e.message, e.kind === 'network' ? 'down' : e.kind);
      clear(body, h('p', { class: 'error', role: 'alert', text: e.message }),
        h('button', { type: 'button', onclick: () => load() }, 'Retry'));
    }
  }

  function render(u) {
    if (!u.available) {
      clear(body, h('div', { class: 'card', id: 'usage-empty' },
        h('p', { text: 'No token usage recorded yet.' }),
        h('p', { class: 'muted', text: 'Every bridge records what its agent reports (ACP usage updates and each turn\'s token counts) as sessions run. Agents that report nothing leave this empty.' })));
      return;
    }
    const s = u.summary || {};
    const models = Array.isArray(u.models) ? u.models : [];
    const colour = new Map(models.map((m, i) => [String(m.modelId), `m${Math.min(i, COLOURS - 1)}`]));
    const stat = (label, value, id) => h('div', { class: 'stat', dataset: { stat: id } },
      h('span', { class: 'stat-value', text: value }), h('span', { class: 'muted', text: label }));
    const spent = costs(s.cost);
    const summary = h('section', { class: 'card', id: 'usage-summary', 'aria-label': 'Summary' },
      h('div', { class: 'total' }, h('span', { class: 'total-value', id: 'usage-total', text: tokens(s.totalTokens) }),
        h('span', { class: 'muted', text: ' tokens' })),
      h('div', { class: 'stats' },
        stat('input', tokens(s.inputTokens), 'input'), stat('output', tokens(s.outputTokens), 'output'),
        stat('reasoning', tokens(s.reasoningTokens), 'reasoning'), stat('cache read', tokens(s.cacheReadTokens), 'cache'),
        stat('turns', tokens(s.turnCount), 'turns'), stat('sessions', tokens(s.sessionCount), 'sessions'),
        stat('tool calls', tokens(s.toolCallCount), 'tools'), stat('active days', tokens(s.activeDays), 'days')),
      spent ? h('p', { class: 'muted small', id: 'usage-cost', text: `Cost reported by agents: ${spent}` }) : null);
    if (!models.length) {
      clear(body, summary, h('p', { class: 'muted', id: 'usage-none', text: 'Nothing in this range.' }));
      return;
    }
    const perModel = h('section', { class: 'card', id: 'usage-models', 'aria-labelledby': 'usage-models-h' },
      h('h2', { id: 'usage-models-h', text: 'By model' }),
      h('ul', { class: 'rows models' }, models.map((m) => {
        const bar = h('span', { class: `fill ${colour.get(String(m.modelId))}` });
        bar.style.width = `${Math.max(0, Math.min(100, (Number(m.share) || 0) * 100))}%`;
        return h('li', { dataset: { model: String(m.modelId) } },
          h('div', { class: 'model-head' },
            h('span', { class: `dot ${colour.get(String(m.modelId))}` }),
            h('strong', { class: 'model-id', text: String(m.modelId) }),
            h('span', { class: 'share', text: percent(m.share) })),
          h('div', { class: 'bar', role: 'img', 'aria-label': `${percent(m.share)} of the tokens` }, bar),
          h('div', { class: 'muted model-meta', text: `${count(m.totalTokens, 'token')} · ${count(m.requestCount, 'turn')} · in ${tokens(m.inputTokens)} · out ${tokens(m.outputTokens)}` }));
      })));
    const days = Array.isArray(u.daily) ? u.daily.slice().reverse() : [];
    const dayTotal = (d) => (Array.isArray(d.models) ? d.models : []).reduce((a, m) => a + (Number(m.totalTokens) || 0), 0);
    const peak = Math.max(1, ...days.map(dayTotal));
    const perDay = h('section', { class: 'card', id: 'usage-daily', 'aria-labelledby': 'usage-daily-h' },
      h('h2', { id: 'usage-daily-h', text: 'By day' }),
      days.length ? h('ul', { class: 'rows days' }, days.map((d) => {
        const total = dayTotal(d);
        const bar = h('div', { class: 'bar stacked', role: 'img', 'aria-label': `${tokens(total)} tokens` },
          (Array.isArray(d.models) ? d.models : []).map((m) => {
            const seg = h('span', { class: `fill ${colour.get(String(m.modelId)) || `m${COLOURS - 1}`}`, title: `${m.modelId}: ${tokens(m.totalTokens)}` });
            seg.style.width = `${((Number(m.totalTokens) || 0) / peak) * 100}%`;
            return seg;
          }));
        return h('li', { dataset: { date: String(d.date) } },
          h('div', { class: 'day-head' }, h('span', { text: day(d.date) }), h('span', { class: 'muted', text: tokens(total) })), bar);
      })) : h('p', { class: 'muted', text: 'No day in this range has token counts.' }),
      h('p', { class: 'muted small', text: 'Days are UTC days.' }));
    clear(body, summary, perModel, perDay);
  }

  load();
  return () => { seq++; };
}
