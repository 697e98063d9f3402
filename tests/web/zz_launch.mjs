import { createRequire } from 'node:module'; const { chromium } = createRequire('/work/main/tests/peers/package.json')('playwright-core');
const mode = process.argv[2], extra = (process.argv[3] || '').split(' ').filter(Boolean);
const b = await chromium.launch({ executablePath: process.env.CHR || '/usr/bin/chromium', args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync', ...extra] });
const t0 = Date.now();
const c0 = await b.newContext();
for (let j = 0; j < 20; j++) {
  const c = mode === 'ctx' ? await b.newContext() : c0;
  const p = await c.newPage(); await p.goto('data:text/html,<p>hi ' + j); await p.close(); if (mode === 'ctx') await c.close();
}
console.log(mode, extra.join(' '), Date.now() - t0, 'ms');
await b.close();
