// A small self-hosted syntax highlighter for code blocks and terminal output, building DOM
// nodes only (every piece of the source is a text node; nothing is parsed as HTML).
//
// `highlight(code, lang)`: one tokenising regex per language (comments, strings, numbers,
// keywords, types, function names), for js/ts, rust, python, sh, json, go and c; an unknown
// language stays plain text. `ansi(text)`: a terminal's SGR colours (30–37, 90–97, bold, reset)
// as spans; every other escape sequence and control character is dropped.

const words = (s) => `\\b(?:${s.trim().split(/\s+/).join('|')})\\b`;

/** A language: its token kinds, in the order they are tried at one place. */
function lang(parts) {
  const kinds = Object.keys(parts);
  return { kinds, re: new RegExp(kinds.map((k) => `(${parts[k]})`).join('|'), 'gm') };
}

const NUM = '\\b(?:0[xX][0-9a-fA-F_]+|0[bB][01_]+|\\d[\\d_]*(?:\\.\\d[\\d_]*)?(?:[eE][+-]?\\d+)?)[a-zA-Z0-9]*\\b';
const DQ = '"(?:[^"\\\\\\n]|\\\\.)*"';
const SQ = "'(?:[^'\\\\\\n]|\\\\.)*'";
const CALL = '\\b[A-Za-z_][\\w]*(?=\\s*\\()';

const JS = lang({
  com: '\\/\\/[^\\n]*|\\/\\*[\\s\\S]*?(?:\\*\\/|$)',
  str: `${DQ}|${SQ}|\`(?:[^\`\\\\]|\\\\[\\s\\S])*\``,
  kw: words(`await async break case catch class const continue debugger default delete do else export
    extends finally for from function if import in instanceof interface let new of return static super
    switch this throw try type typeof var void while yield enum implements private public readonly as`),
  lit: words('true false null undefined NaN Infinity'),
  num: NUM,
  ty: '\\b[A-Z][\\w]*\\b',
  fn: CALL,
});

const LANGS = {
  js: JS,
  rust: lang({
    com: '\\/\\/[^\\n]*|\\/\\*[\\s\\S]*?(?:\\*\\/|$)',
    str: `b?r#*"[\\s\\S]*?"#*|b?${DQ}|b?'(?:[^'\\\\\\n]|\\\\.){1,10}'(?!\\w)`,
    kw: words(`as async await break const continue crate dyn else enum extern fn for if impl in let loop
      match mod move mut pub ref return self Self static struct super trait type unsafe use where while`),
    lit: words('true false None Some Ok Err'),
    num: NUM,
    ty: '\\b[A-Z][\\w]*\\b|\\b(?:u8|u16|u32|u64|u128|usize|i8|i16|i32|i64|i128|isize|f32|f64|bool|char|str)\\b',
    fn: '\\b[a-z_][\\w]*!|\\b[A-Za-z_][\\w]*(?=\\s*(?:::<[^>]*>)?\\()',
  }),
  python: lang({
    com: '#[^\\n]*',
    str: `[rbfuRBFU]{0,2}(?:"""[\\s\\S]*?(?:"""|$)|'''[\\s\\S]*?(?:'''|$)|${DQ}|${SQ})`,
    kw: words(`and as assert async await break class continue def del elif else except finally for from
      global if import in is lambda nonlocal not or pass raise return try while with yield match case`),
    lit: words('True False None self'),
    num: NUM,
    ty: '\\b[A-Z][\\w]*\\b',
    fn: CALL,
  }),
  sh: lang({
    com: '(?<![\\w$])#[^\\n]*',
    str: `${DQ}|'[^']*'`,
    kw: words(`if then else elif fi for while until do done case esac in function return export local
      readonly set unset shift exit cd echo source sudo`),
    lit: '\\$\\{[^}\\n]*\\}|\\$\\w+|\\$[@#?$!*0-9]',
    num: '(?<![\\w-])\\d+(?![\\w-])',
    ty: '(?<=\\s|^)--?[A-Za-z][\\w-]*',
    fn: '^\\s*[A-Za-z_][\\w.-]*(?=\\s|$)',
  }),
  json: lang({
    ty: `${DQ}(?=\\s*:)`,
    str: DQ,
    lit: words('true false null'),
    num: '-?\\b\\d+(?:\\.\\d+)?(?:[eE][+-]?\\d+)?\\b',
  }),
  go: lang({
    com: '\\/\\/[^\\n]*|\\/\\*[\\s\\S]*?(?:\\*\\/|$)',
    str: `${DQ}|\`[^\`]*\`|'(?:[^'\\\\\\n]|\\\\.)+'`,
    kw: words(`break case chan const continue default defer else fallthrough for func go goto if import
      interface map package range return select struct switch type var`),
    lit: words('true false nil iota'),
    num: NUM,
    ty: '\\b[A-Z][\\w]*\\b|\\b(?:string|int|int8|int16|int32|int64|uint|uint8|uint16|uint32|uint64|byte|rune|float32|float64|bool|error|any)\\b',
    fn: CALL,
  }),
  c: lang({
    com: '\\/\\/[^\\n]*|\\/\\*[\\s\\S]*?(?:\\*\\/|$)',
    str: `${DQ}|${SQ}|<[\\w./]+>(?=\\s*$)`,
    kw: words(`auto break case const continue default do else enum extern for goto if inline register
      restrict return sizeof static struct switch typedef union volatile while class namespace template
      typename public private protected virtual new delete using`) + '|^\\s*#\\s*\\w+',
    lit: words('true false NULL nullptr'),
    num: NUM,
    ty: words('void char short int long float double signed unsigned bool size_t') + '|\\b[A-Z][\\w]*_t\\b|\\b\\w+_t\\b',
    fn: CALL,
  }),
};

const ALIASES = {
  javascript: 'js', mjs: 'js', cjs: 'js', jsx: 'js', ts: 'js', typescript: 'js', tsx: 'js',
  rs: 'rust', py: 'python', python3: 'python', bash: 'sh', shell: 'sh', zsh: 'sh', console: 'sh',
  shellsession: 'sh', jsonc: 'json', json5: 'json', golang: 'go', h: 'c', cpp: 'c', 'c++': 'c', cc: 'c', hpp: 'c',
};

/** The highlighter's name for a fence's language tag (null: not one it knows). */
export function languageOf(tag) {
  const t = String(tag || '').toLowerCase();
  const name = ALIASES[t] || t;
  return LANGS[name] ? name : null;
}

function span(cls, text) {
  const s = document.createElement('span');
  s.className = cls;
  s.textContent = text;
  return s;
}

/** `code` as nodes: spans (`tok-<kind>`) for the tokens of `tag`'s language, text between. */
export function highlight(code, tag) {
  const name = languageOf(tag);
  const text = String(code ?? '');
  if (!name) return [document.createTextNode(text)];
  const { kinds, re } = LANGS[name];
  const rx = new RegExp(re.source, re.flags); // its own lastIndex
  const out = [];
  let last = 0;
  for (let m = rx.exec(text); m; m = rx.exec(text)) {
    if (!m[0]) { rx.lastIndex++; continue; }
    if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
    const k = kinds[m.slice(1).findIndex((g) => g !== undefined)];
    out.push(span(`tok-${k}`, m[0]));
    last = rx.lastIndex;
  }
  if (last < text.length) out.push(document.createTextNode(text.slice(last)));
  return out;
}

// CSI sequences (ESC [ … final byte), OSC (ESC ] … BEL or ESC \), other two-byte escapes.
const ESCAPES = /\x1b\[([0-9;?]*)([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?/g;
// Control characters other than tab and newline (a carriage return included: no overprinting).
const CONTROLS = /[\x00-\x08\x0b-\x1f\x7f]/g;

/** Whether `text` holds a terminal escape sequence. */
export function hasAnsi(text) {
  return String(text ?? '').includes('\x1b');
}

/**
 * Terminal output as nodes: SGR 30–37 and 90–97 (foreground), 1 (bold), 0/39/22 (reset) as
 * spans with classes `ansi-N` / `ansi-bold`; everything else an escape says is dropped.
 */
export function ansi(text) {
  const src = String(text ?? '');
  const out = [];
  let fg = null;
  let bold = false;
  let last = 0;
  const emit = (s) => {
    const clean = s.replace(CONTROLS, '');
    if (!clean) return;
    if (fg === null && !bold) out.push(document.createTextNode(clean));
    else out.push(span([fg !== null ? `ansi-${fg}` : '', bold ? 'ansi-bold' : ''].filter(Boolean).join(' '), clean));
  };
  const re = new RegExp(ESCAPES.source, 'g');
  for (let m = re.exec(src); m; m = re.exec(src)) {
    emit(src.slice(last, m.index));
    last = re.lastIndex;
    if (m[2] !== 'm' || (m[1] || '').includes('?')) continue;
    const codes = (m[1] || '0').split(';').map((c) => (c === '' ? 0 : Number(c)));
    for (let i = 0; i < codes.length; i++) {
      const c = codes[i];
      if (c === 0) { fg = null; bold = false; }
      else if (c === 1) bold = true;
      else if (c === 22) bold = false;
      else if (c === 39) fg = null;
      else if ((c >= 30 && c <= 37) || (c >= 90 && c <= 97)) fg = c;
      else if (c === 38 || c === 48) i += codes[i + 1] === 5 ? 2 : codes[i + 1] === 2 ? 4 : 0; // 256/true colour: skipped
    }
  }
  emit(src.slice(last));
  return out;
}
