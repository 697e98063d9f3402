// Hook runs in the session view: the bridge journals each run of a hook as a `session/update`
// of kind `zcode_hook_run` (event, command, exit status, duration, capped output, and for the
// deciding events the decision). Shown as one small collapsible line; text nodes only.
import { h } from './dom.js';

/** The transcript item of one run (`ctx`: the transcript or a replay's scratch list). */
export function hookItem(u, ctx) {
  return { key: `hook:${ctx.items.length}:${u.event}:${u.durationMs}`, kind: 'hook', data: u, turn: ctx.turn };
}

/** The summary of a run: event, short command, how it ended, and what it decided. */
export function hookSummary(d) {
  const cmd = String(d.command ?? '');
  const short = cmd.length > 40 ? `${cmd.slice(0, 39)}…` : cmd;
  let how;
  if (d.error) how = 'could not start';
  else if (d.timedOut) how = 'timed out';
  else if (d.exitCode === null || d.exitCode === undefined) how = 'killed';
  else how = `exit ${d.exitCode}`;
  let decided = '';
  if (d.decision === 'block') decided = ` · blocked: ${String(d.reason ?? '')}`;
  else if (d.decision) decided = ` · ${d.decision}${d.answeredBy === 'hook' ? '' : ' (too late: a client answered)'}`;
  return `hook ${String(d.event ?? '')} · ${short} · ${how} · ${Number(d.durationMs) || 0} ms${decided}`;
}

/** The DOM of one run. */
export function hookNode(it) {
  const d = it.data || {};
  const failed = d.error || d.timedOut || (d.exitCode !== 0 && d.exitCode !== 2);
  const out = [d.stdout, d.stderr, d.error].filter((s) => typeof s === 'string' && s).join('\n');
  const trunc = d.truncated ? '\n[output truncated]' : '';
  return h('details', { class: `msg thought hook${failed ? ' bad' : ''}`, dataset: { key: it.key } },
    h('summary', { text: hookSummary(d) }),
    out || trunc ? h('pre', { class: 'tool-text', text: out + trunc }) : null);
}
