// A TCP proxy the test controls, between the browser and the hub: it forwards bytes both ways
// until told to cut the line (every connection dropped, new ones refused) or to stall it (the
// open connections stay open and carry nothing; new ones pass), as a phone's line does. It can
// also lose one WebSocket message on its way to the browser (`loseOnce`), as a buggy hop might.

import net from 'node:net';

export class LineProxy {
  /** Listens on a port the OS picks, in front of 127.0.0.1:`port`. */
  static async start(port) {
    const p = new LineProxy();
    p.target = port;
    p.pairs = new Set();
    p.down = false;
    p.lose = null; // (text) => whether to lose this server→browser text message (once)
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
    const pair = { client, upstream, stalled: false, mode: 'head', pending: Buffer.alloc(0) };
    this.pairs.add(pair);
    const end = () => {
      this.pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    // A stalled pair swallows what either side sends: the line is open and nothing moves.
    client.on('data', (b) => { if (pair.stalled !== true) upstream.write(b); });
    upstream.on('data', (b) => { if (!pair.stalled) client.write(this.filter(pair, b)); });
    for (const s of [client, upstream]) {
      s.on('error', end);
      s.on('close', end);
    }
  }

  /** Loses the next server→browser WebSocket text message for which `pred(text)` holds. */
  loseOnce(pred) {
    this.lose = pred;
  }

  /**
   * What of `b` (server→browser bytes of `pair`) goes on: the HTTP answer as it is, then, on a
   * WebSocket, whole frames (a server's are unmasked) less the one to lose; a frame not whole
   * yet waits for its end.
   */
  filter(pair, b) {
    if (pair.mode === 'plain') return b;
    let buf = pair.pending.length ? Buffer.concat([pair.pending, b]) : b;
    pair.pending = Buffer.alloc(0);
    let head = Buffer.alloc(0);
    if (pair.mode === 'head') {
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) {
        pair.pending = Buffer.from(buf);
        return Buffer.alloc(0);
      }
      pair.mode = buf.subarray(0, 12).toString() === 'HTTP/1.1 101' ? 'ws' : 'plain';
      if (pair.mode === 'plain') return buf;
      head = buf.subarray(0, end + 4);
      buf = buf.subarray(end + 4);
    }
    const out = [head];
    for (;;) {
      if (buf.length < 2) break;
      let len = buf[1] & 0x7f;
      let at = 2;
      if (len === 126) {
        if (buf.length < 4) break;
        len = buf.readUInt16BE(2);
        at = 4;
      } else if (len === 127) {
        if (buf.length < 10) break;
        len = Number(buf.readBigUInt64BE(2));
        at = 10;
      }
      if (buf.length < at + len) break;
      const frame = buf.subarray(0, at + len);
      buf = buf.subarray(at + len);
      // A whole text message (FIN, opcode 1) the test wants lost is not passed on.
      if (this.lose && (frame[0] & 0x8f) === 0x81 && this.lose(frame.subarray(at).toString())) {
        this.lose = null;
        continue;
      }
      out.push(frame);
    }
    pair.pending = Buffer.from(buf);
    return Buffer.concat(out);
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

  /**
   * Freezes every open connection (they stay open; `down`: only the way to the browser, what
   * it sends still goes on); new ones are forwarded. Returns how many.
   */
  stall(down = false) {
    for (const pair of this.pairs) pair.stalled = down ? 'down' : true;
    return this.pairs.size;
  }

  close() {
    this.cut();
    return new Promise((resolve) => this.server.close(resolve));
  }
}
