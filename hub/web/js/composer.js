// The composer: a textarea with send and cancel, and slash-command completion from the
// session's `available_commands_update` (type `/`, pick with the arrows, Tab or Enter).
// Keys: with a keyboard and a fine pointer (desktop), Enter sends and Shift+Enter starts a new
// line; on a touch screen (coarse pointer: a phone's keyboard has no Shift+Enter), Enter starts
// a new line and the Send button sends. Ctrl/Cmd+Enter sends everywhere.
//
// Photos: when the agent takes images (`setImages(true)`: its `promptCapabilities.image`), an
// Attach button (camera or library) and pasting add up to `MAX_IMAGES` images, each made to fit
// `MAX_PIXELS` and `MAX_BYTES` in the browser (canvas), previewed and removable before sending;
// they go with the text as ACP `image` blocks. Dictation: where the browser has speech
// recognition (Web Speech API), a microphone button types what it hears into the box, to be
// edited before sending; where it has none, there is no button.

import { h, clear } from './dom.js';
import { canWrite, WATCH_ONLY } from './api.js';

/** At most this many images go with one prompt. */
export const MAX_IMAGES = 4;
/** An image is scaled down to at most this many pixels… */
export const MAX_PIXELS = 2_000_000;
/** …and encoded in at most this many bytes. */
export const MAX_BYTES = 1_000_000;
const KEEP_AS_IS = /^image\/(png|jpeg|webp|gif)$/;

/** Whether this is a touch screen, where Enter must type a newline. */
function touch() {
  return typeof matchMedia === 'function' && matchMedia('(pointer: coarse)').matches;
}

/** The data of a Blob as base64 (no `data:` prefix). */
function base64(blob) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result).replace(/^data:[^,]*,/, ''));
    r.onerror = () => reject(r.error);
    r.readAsDataURL(blob);
  });
}

function encode(canvas, type, quality) {
  return new Promise((resolve) => canvas.toBlob(resolve, type, quality));
}

/**
 * `file` as an ACP image block `{type, mimeType, data}` of at most `MAX_PIXELS` and `MAX_BYTES`:
 * kept as it is when it fits, else drawn smaller and encoded as JPEG (lower quality, then
 * smaller, until it fits). Throws a message a person understands when it cannot be read.
 */
export async function fitImage(file) {
  let bitmap;
  try {
    bitmap = await createImageBitmap(file);
  } catch {
    throw new Error(`${file.name || 'That file'} is not an image this browser can read.`);
  }
  const { width, height } = bitmap;
  if (file.size <= MAX_BYTES && width * height <= MAX_PIXELS && KEEP_AS_IS.test(file.type)) {
    bitmap.close();
    return { type: 'image', mimeType: file.type, data: await base64(file), width, height };
  }
  let scale = Math.min(1, Math.sqrt(MAX_PIXELS / (width * height)));
  for (let tries = 0; tries < 8; tries++) {
    const canvas = document.createElement('canvas');
    canvas.width = Math.max(1, Math.floor(width * scale));
    canvas.height = Math.max(1, Math.floor(height * scale));
    const g = canvas.getContext('2d');
    g.fillStyle = '#ffffff'; // JPEG has no transparency: a transparent screenshot goes on white
    g.fillRect(0, 0, canvas.width, canvas.height);
    g.drawImage(bitmap, 0, 0, canvas.width, canvas.height);
    for (const q of [0.85, 0.7, 0.55]) {
      const blob = await encode(canvas, 'image/jpeg', q);
      if (blob && blob.size <= MAX_BYTES) {
        bitmap.close();
        return { type: 'image', mimeType: 'image/jpeg', data: await base64(blob), width: canvas.width, height: canvas.height };
      }
    }
    scale *= 0.7;
  }
  bitmap.close();
  throw new Error(`${file.name || 'That image'} could not be made small enough to send.`);
}

const SVG = 'http://www.w3.org/2000/svg';
/** A 24 px line icon of `paths` (SVG path data), hidden from screen readers (the button is named). */
function icon(...paths) {
  const svg = document.createElementNS(SVG, 'svg');
  for (const [k, v] of Object.entries({ viewBox: '0 0 24 24', width: '22', height: '22', fill: 'none', stroke: 'currentColor',
    'stroke-width': '2', 'stroke-linecap': 'round', 'stroke-linejoin': 'round', 'aria-hidden': 'true' })) svg.setAttribute(k, v);
  for (const d of paths) {
    const p = document.createElementNS(SVG, 'path');
    p.setAttribute('d', d);
    svg.append(p);
  }
  return svg;
}
const CLIP = 'M21 11.5l-8.6 8.6a5.5 5.5 0 0 1-7.8-7.8l8.6-8.6a3.7 3.7 0 0 1 5.2 5.2l-8.6 8.6a1.8 1.8 0 0 1-2.6-2.6l7.9-7.9';
const MIC = ['M12 3a3 3 0 0 0-3 3v6a3 3 0 0 0 6 0V6a3 3 0 0 0-3-3z', 'M19 11a7 7 0 0 1-14 0', 'M12 18v3'];

/** The browser's speech recognition constructor, or null where it has none. */
function speechRecognition() {
  return window.SpeechRecognition || window.webkitSpeechRecognition || null;
}

/**
 * `onSend(text, images)` (images: ACP image blocks, maybe none), `onCancel()`. Returns `{node,
 * input, setBusy, setEnabled, setCommands, setImages, focus, setText}`.
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
  let images = []; // ACP image blocks waiting to go with the next prompt
  const previews = h('ul', { class: 'attachments', id: 'attachments', 'aria-label': 'Images to send', hidden: true });
  const note = h('p', { class: 'attach-note', id: 'attach-note', role: 'status', hidden: true });
  // `capture` lets a phone offer its camera beside the library.
  const picker = h('input', { type: 'file', accept: 'image/*', capture: 'environment', multiple: true, id: 'attach-input', hidden: true,
    onchange: () => { addFiles([...picker.files]); picker.value = ''; } });
  const attach = h('button', { type: 'button', class: 'icon', id: 'attach', 'aria-label': 'Attach images', title: 'Attach images', hidden: true,
    onclick: () => picker.click() }, icon(CLIP));
  const SR = speechRecognition();
  let hearing = null;
  const mic = SR ? h('button', { type: 'button', class: 'icon', id: 'dictate', 'aria-label': 'Dictate', 'aria-pressed': 'false', title: 'Dictate',
    onclick: () => dictate() }, icon(...MIC)) : null;
  const form = h('form', { class: 'composer', onsubmit: (e) => { e.preventDefault(); submit(); } },
    watchNote, list, previews, note, h('div', { class: 'composer-row' }, attach, picker, mic, input,
      h('div', { class: 'composer-buttons' }, cancel, send)));

  function submit() {
    const text = input.value;
    if ((!text.trim() && !images.length) || !canWrite()) return;
    const sent = images.map(({ type, mimeType, data }) => ({ type, mimeType, data }));
    input.value = '';
    images = [];
    showImages();
    grow();
    close();
    onSend(text, sent);
  }

  function say(text) {
    note.textContent = text;
    note.hidden = !text;
  }

  /** Adds images (files picked or pasted), made to fit, up to `MAX_IMAGES`. */
  async function addFiles(files) {
    const pics = files.filter((f) => f && /^image\//.test(f.type));
    if (!pics.length) return;
    say('');
    const room = MAX_IMAGES - images.length;
    if (pics.length > room) say(`At most ${MAX_IMAGES} images go with one prompt: ${pics.length - Math.max(room, 0)} left out.`);
    for (const f of pics.slice(0, Math.max(room, 0))) {
      try {
        images.push(await fitImage(f));
      } catch (e) {
        say(e.message);
      }
      showImages();
    }
  }

  function showImages() {
    clear(previews, images.map((img, i) => h('li', { class: 'attachment' },
      h('img', { src: `data:${img.mimeType};base64,${img.data}`, alt: `image ${i + 1}`, class: 'thumb' }),
      h('button', { type: 'button', class: 'remove', 'aria-label': `Remove image ${i + 1}`, onclick: () => { images.splice(i, 1); showImages(); } }, '×'))));
    previews.hidden = !images.length;
  }

  input.addEventListener('paste', (e) => {
    if (attach.hidden || !e.clipboardData) return;
    const files = [...e.clipboardData.files].filter((f) => /^image\//.test(f.type));
    if (!files.length) return;
    e.preventDefault(); // the image, not its file name, goes with the prompt
    addFiles(files);
  });

  /** Starts (or stops) listening; what is heard is added to the box, to be edited. */
  function dictate() {
    if (hearing) { hearing.stop(); return; }
    const r = new SR();
    hearing = r;
    r.lang = navigator.language || 'en-US';
    r.interimResults = false;
    r.continuous = false;
    mic.setAttribute('aria-pressed', 'true');
    mic.classList.add('on');
    r.onresult = (e) => {
      let heard = '';
      for (let i = e.resultIndex || 0; i < e.results.length; i++) if (e.results[i].isFinal !== false) heard += e.results[i][0].transcript;
      heard = heard.trim();
      if (!heard) return;
      const before = input.value;
      input.value = before && !/\s$/.test(before) ? `${before} ${heard}` : before + heard;
      input.dispatchEvent(new Event('input')); // the draft is kept, the box grows
    };
    r.onerror = (e) => say(e.error === 'not-allowed' ? 'The microphone is not allowed for this page.' : `Dictation stopped: ${e.error || 'no speech'}.`);
    r.onend = () => {
      if (hearing === r) hearing = null;
      mic.setAttribute('aria-pressed', 'false');
      mic.classList.remove('on');
      input.focus();
    };
    say('');
    try {
      r.start();
    } catch (e) {
      r.onend();
      say(`Dictation could not start: ${e.message}`);
    }
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
    /** Whether the agent takes images: the Attach button is offered only then. */
    setImages(on) {
      attach.hidden = !on;
      if (!on && images.length) { images = []; showImages(); }
    },
    focus() { input.focus(); },
    setText(t) { input.value = t; grow(); },
  };
}
