// The plan quota card of the home screen: GET /api/quota (the hub's machine-wide credentials,
// cached there ~30 s), fetched when the home screen opens and on "Refresh". One block per
// provider: a bar per window (5h / Week / MCP / Month…) with the share used and when it resets
// (local time), Ollama's spend, and for a failure the message its `kind` means. Providers that
// are not configured are left out; with none configured (or a hub without the route) the card
// stays hidden. Styles: /quota.css (the CSP allows no inline styles; widths are set through
// the CSSOM). `data-state` on the card: `loaded` or `failed` once an answer was handled.

import { h, clear } from './dom.js';
import { getJson } from './api.js';

const NAMES = { glm: 'GLM Coding Plan', opencode: 'OpenCode Go', ollama: 'Ollama Cloud' };
const ORDER = ['glm', 'opencode', 'ollama'];
const MESSAGES = {
  auth_error: 'The credentials were refused or have expired: check the credentials configured on the machine.',
  rate_limited: 'The vendor is rate limiting these requests: try again in a minute.',
  unavailable: 'Unavailable right now: the vendor gave no usable answer in time. Try again later.',
};

function ensureStyles() {
  if (document.querySelector('link[data-quota-css]')) return;
  document.head.append(h('link', { rel: 'stylesheet', href: new URL('../quota.css', import.meta.url).href, dataset: { quotaCss: '' } }));
}

/** `14:00` today, else `Fri 20 Dec, 13:30`, in the phone's own time zone. */
export function resetText(ms) {
  const at = new Date(ms);
  if (!Number.isFinite(at.getTime())) return '';
  const now = new Date();
  const time = at.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  if (at.toDateString() === now.toDateString()) return time;
  return `${at.toLocaleDateString([], { weekday: 'short', day: 'numeric', month: 'short' })}, ${time}`;
}

function percentText(p) {
  return Number.isInteger(p) ? `${p}%` : `${p.toFixed(1)}%`;
}

function windowRow(w) {
  const raw = typeof w.usedPercent === 'number' ? w.usedPercent : w.usagePercent;
  const pct = Math.min(100, Math.max(0, typeof raw === 'number' && Number.isFinite(raw) ? raw : 0));
  const fill = h('div', { class: `quota-fill ${pct >= 80 ? 'high' : pct >= 50 ? 'mid' : 'low'}` });
  fill.style.width = `${pct}%`;
  const reset = typeof w.nextResetTime === 'number' ? w.nextResetTime : w.resetsAt;
  const counts = typeof w.usedCount === 'number' && typeof w.totalCount === 'number' ? `${w.usedCount}/${w.totalCount}` : '';
  const when = typeof reset === 'number' ? resetText(reset) : '';
  return h('li', { class: 'quota-window', dataset: { key: String(w.key || '') } },
    h('span', { class: 'quota-label', text: String(w.label || w.key || '') }),
    h('div', { class: 'quota-bar', role: 'progressbar', 'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': String(pct) }, fill),
    h('span', { class: 'quota-pct', text: percentText(pct) }),
    counts || when ? h('span', { class: 'quota-reset muted', text: [counts, when ? `resets ${when}` : ''].filter(Boolean).join(' · ') }) : null);
}

function spendLine(u) {
  if (!u || typeof u.usageUsd !== 'number') return null;
  const of = typeof u.creditUsd === 'number' ? ` of $${u.creditUsd}` : '';
  const reqs = typeof u.requestCount === 'number' ? ` · ${u.requestCount} requests` : '';
  return h('p', { class: 'quota-spend muted', text: `Spent $${u.usageUsd.toFixed(2)}${of} in 30 days${reqs}` });
}

function providerBlock(name, s) {
  const plan = s.level || (s.usage && s.usage.plan);
  const head = h('div', { class: 'quota-head' }, h('strong', { text: NAMES[name] || name }),
    plan ? h('span', { class: 'badge', text: String(plan) }) : null);
  const block = h('div', { class: 'quota-provider', dataset: { provider: name, kind: String(s.kind) } }, head);
  if (s.kind !== 'success') {
    block.append(h('p', { class: 'error quota-problem', text: MESSAGES[s.kind] || MESSAGES.unavailable }));
    return block;
  }
  const rows = Array.isArray(s.items) ? s.items : Array.isArray(s.windows) ? s.windows : [];
  if (rows.length) block.append(h('ul', { class: 'quota-windows' }, rows.map(windowRow)));
  const spend = spendLine(s.usage);
  if (spend) block.append(spend);
  if (!rows.length && !spend) block.append(h('p', { class: 'muted', text: 'No usage windows reported.' }));
  return block;
}

/** The card (hidden until there is something to show); it loads itself. */
export function quotaCard() {
  ensureStyles();
  const card = h('section', { class: 'card quota', id: 'quota', 'aria-labelledby': 'quota-h', hidden: true });
  let busy = false;

  function head() {
    return h('div', { class: 'card-head' }, h('h2', { id: 'quota-h', text: 'Plan quota' }),
      h('button', { type: 'button', class: 'link', onclick: () => load() }, 'Refresh'));
  }

  async function load() {
    if (busy) return;
    busy = true;
    try {
      const payload = await getJson('/api/quota', 'Plan quota');
      const names = [...ORDER, ...Object.keys(payload || {}).filter((n) => !ORDER.includes(n)).sort()];
      const shown = names.filter((n) => payload && payload[n] && typeof payload[n] === 'object' && payload[n].kind !== 'not_configured');
      clear(card, head(), ...shown.map((n) => providerBlock(n, payload[n])));
      card.hidden = !shown.length;
      card.dataset.state = 'loaded';
    } catch (e) {
      // An older hub without the route, no token, or no hub at all: nothing to show here (the
      // rest of the home screen says what is wrong with the hub).
      card.dataset.state = 'failed';
      if (['missing', 'auth', 'network', 'limited'].includes(e.kind)) { card.hidden = true; return; }
      const text = e.status === 502
        ? 'The plan quota could not be read right now (the query to the vendors failed): try again later.'
        : e.message;
      clear(card, head(), h('p', { class: 'error', role: 'alert', text }));
      card.hidden = false;
    } finally {
      busy = false;
    }
  }

  load();
  return card;
}
