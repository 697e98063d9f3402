// A TCP proxy the test controls, between the browser and the hub: it forwards bytes both ways
// until told to cut the line (every connection dropped, new ones refused) or to stall it (the
// open connections stay open and carry nothing; new ones pass), as a phone's line does.

import net from 'node:net';

export class LineProxy {
  /** Listens on a port the OS picks, in front of 127.0.0.1:`port`. */
  static async start(port) {
    const p = new LineProxy();
    p.target = port;
    p.pairs = new Set();
    p.down = false;
    p.server = net.createServer((c) => p.accept(c));
    await new Promise((resolve) => p.server.listen(0, '127.0.0.1', resolve));
    p.port = p.server.address().port;
    return p;
  }

  get base() {
    return `http://127.0.0.1:${this.port}`;
  }

  accept(client) {
    if (this.down) {
      client.destroy();
      return;
    }
    const upstream = net.connect(this.target, '127.0.0.1');
    const pair = { client, upstream, stalled: false };
    this.pairs.add(pair);
    const end = () => {
      this.pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    // A stalled pair swallows what either side sends: the line is open and nothing moves.
    client.on('data', (b) => { if (!pair.stalled) upstream.write(b); });
    upstream.on('data', (b) => { if (!pair.stalled) client.write(b); });
    for (const s of [client, upstream]) {
      s.on('error', end);
      s.on('close', end);
    }
  }

  /** Drops every connection and refuses new ones until `restore`. */
  cut() {
    this.down = true;
    for (const { client, upstream } of this.pairs) {
      client.destroy();
      upstream.destroy();
    }
    this.pairs.clear();
  }

  restore() {
    this.down = false;
  }

  /** Freezes every open connection (they stay open); new ones are forwarded. Returns how many. */
  stall() {
    for (const pair of this.pairs) pair.stalled = true;
    return this.pairs.size;
  }

  close() {
    this.cut();
    return new Promise((resolve) => this.server.close(resolve));
  }
}
