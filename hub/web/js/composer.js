// The composer: a textarea with send and cancel, and slash-command completion from the
// session's `available_commands_update` (type `/`, pick with the arrows, Tab or Enter).
// Keys: with a keyboard and a fine pointer (desktop), Enter sends and Shift+Enter starts a new
// line; on a touch screen (coarse pointer: a phone's keyboard has no Shift+Enter), Enter starts
// a new line and the Send button sends. Ctrl/Cmd+Enter sends everywhere.

import { h, clear } from './dom.js';
import { canWrite, WATCH_ONLY } from './api.js';

/** Whether this is a touch screen, where Enter must type a newline. */
function touch() {
  return typeof matchMedia === 'function' && matchMedia('(pointer: coarse)').matches;
}

/**
 * `onSend(text)`, `onCancel()`. Returns `{node, input, setBusy, setEnabled, setCommands,
 * focus, setText}`.
 */
export function composer({ onSend, onCancel }) {
  let commands = [];
  let matches = [];
  let active = 0;
  const list = h('ul', { class: 'completions', role: 'listbox', id: 'slash-list', hidden: true, 'aria-label': 'Commands' });
  const input = h('textarea', {
    id: 'prompt', rows: 1, placeholder: 'Message or /command', 'aria-label': 'Prompt',
    'aria-autocomplete': 'list', 'aria-controls': 'slash-list', autocomplete: 'off',
    enterkeyhint: touch() ? 'enter' : 'send',
  });
  const send = h('button', { type: 'submit', class: 'primary', id: 'send', 'aria-label': 'Send' }, 'Send');
  const cancel = h('button', { type: 'button', class: 'danger', id: 'cancel', hidden: true, onclick: () => onCancel() }, 'Stop');
  // A watch-only device is not offered Send or Stop (the styles hide them under
  // `html[data-scope=watch]`); it is told why instead.
  const watchNote = h('p', { class: 'watch-only', id: 'watch-only-note', role: 'note', text: WATCH_ONLY });
  const form = h('form', { class: 'composer', onsubmit: (e) => { e.preventDefault(); submit(); } },
    watchNote, list, input, h('div', { class: 'composer-buttons' }, cancel, send));

  function submit() {
    const text = input.value;
    if (!text.trim() || !canWrite()) return;
    input.value = '';
    grow();
    close();
    onSend(text);
  }

  /** Fits the box to its text, or when empty to its placeholder (never cut in half). */
  function grow() {
    input.style.height = 'auto';
    let need = input.scrollHeight;
    if (!input.value && input.placeholder) {
      input.value = input.placeholder;
      need = input.scrollHeight;
      input.value = '';
    }
    // border-box: the height includes the borders, scrollHeight does not.
    input.style.height = `${Math.min(need + input.offsetHeight - input.clientHeight, 200)}px`;
  }

  function close() {
    list.hidden = true;
    matches = [];
    input.removeAttribute('aria-activedescendant');
  }

  function pick(i) {
    const c = matches[i];
    if (!c) return;
    input.value = `/${c.name} `;
    close();
    input.focus();
    grow();
  }

  function refresh() {
    const m = /^\/(\S*)$/.exec(input.value);
    if (!m || !commands.length) return close();
    const prefix = m[1].toLowerCase();
    matches = commands.filter((c) => c.name.toLowerCase().startsWith(prefix)).slice(0, 12);
    if (!matches.length) return close();
    active = Math.min(active, matches.length - 1);
    clear(list);
    matches.forEach((c, i) => list.append(h('li', {
      id: `slash-${i}`, role: 'option', class: i === active ? 'active' : '', 'aria-selected': i === active ? 'true' : 'false',
      onmousedown: (e) => { e.preventDefault(); pick(i); },
    }, h('span', { class: 'cmd', text: `/${c.name}` }), c.description ? h('span', { class: 'desc', text: c.description }) : null)));
    list.hidden = false;
    input.setAttribute('aria-activedescendant', `slash-${active}`);
  }

  input.addEventListener('input', () => { active = 0; refresh(); grow(); });
  input.addEventListener('keydown', (e) => {
    if (!list.hidden && matches.length) {
      if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
        e.preventDefault();
        active = (active + (e.key === 'ArrowDown' ? 1 : matches.length - 1)) % matches.length;
        refresh();
        return;
      }
      if (e.key === 'Tab' || (e.key === 'Enter' && !e.shiftKey)) {
        e.preventDefault();
        pick(active);
        return;
      }
      if (e.key === 'Escape') { e.preventDefault(); close(); return; }
    }
    if (e.key === 'Enter' && !e.isComposing && (e.ctrlKey || e.metaKey || (!e.shiftKey && !touch()))) {
      e.preventDefault();
      submit();
    }
  });
  input.addEventListener('blur', () => setTimeout(close, 100));
  // Sized once it is in the page (a detached textarea has no scrollHeight), and on rotation.
  requestAnimationFrame(grow);
  const onResize = () => (input.isConnected ? grow() : window.removeEventListener('resize', onResize));
  window.addEventListener('resize', onResize);

  return {
    node: form,
    input,
    /** `stopping`: a cancel was sent and the turn has not ended yet. */
    setBusy(busy, stopping = false) {
      cancel.hidden = !busy;
      cancel.disabled = !!stopping;
      cancel.textContent = stopping ? 'Stopping…' : 'Stop';
      grow(); // the box is narrower while Stop shows
    },
    setEnabled(on) { send.disabled = !on || !canWrite(); },
    setCommands(list2) {
      commands = (Array.isArray(list2) ? list2 : []).filter((c) => c && typeof c.name === 'string')
        .map((c) => ({ name: c.name.replace(/^\//, ''), description: typeof c.description === 'string' ? c.description : '' }));
      if (document.activeElement === input) refresh();
    },
    focus() { input.focus(); },
    setText(t) { input.value = t; grow(); },
  };
}
