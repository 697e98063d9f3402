// Preloaded into the ACP SDK's example agent (`node --import`, see SDK_AGENT_QUICK in
// harness.mjs): the agent waits a second between its updates (`setTimeout(…, 1000)`, its
// simulated model), and this makes that wait QUICK_MS. What it sends and in what order is the
// agent's own; only the pauses are shorter, for tests that wait on the turn and not on a pause.

const QUICK_MS = 200;
const realSetTimeout = globalThis.setTimeout;
globalThis.setTimeout = (fn, ms, ...args) => realSetTimeout(fn, ms === 1000 ? QUICK_MS : ms, ...args);
