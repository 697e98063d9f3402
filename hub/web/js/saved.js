// The last conversations opened, kept in the browser (IndexedDB) so a session opened while
// the line is down still shows what was last seen of it, read-only and marked as such. A
// record is the session's last tail replay plus what streamed live after it (the same
// updates a re-attach would bring, merged by the same rules): the 20 most recently saved are
// kept, each at most 1 MiB (a bigger one is not saved). Nothing secret beyond the
// conversation itself: no token.

const DB = 'zcode-acp';
const STORE = 'conversations';
const KEEP = 20;
const MAX_BYTES = 1 << 20;

let db = null;

/** The database, with its store (made again when something else created the database without it). */
function open(version) {
  if (!db || version) {
    db = new Promise((resolve, reject) => {
      const r = indexedDB.open(DB, version);
      r.onupgradeneeded = () => {
        if (!r.result.objectStoreNames.contains(STORE)) r.result.createObjectStore(STORE, { keyPath: 'key' }).createIndex('at', 'at');
      };
      r.onsuccess = () => {
        const d = r.result;
        if (d.objectStoreNames.contains(STORE)) return resolve(d);
        d.close();
        open(d.version + 1).then(resolve, reject);
      };
      r.onerror = () => reject(r.error);
    });
    db.catch(() => { db = null; });
  }
  return db;
}

function done(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

/** The saved copy of `key` (`{updates, meta, at}`), or null. Never throws. */
export async function savedCopy(key) {
  try {
    const d = await open();
    return (await done(d.transaction(STORE).objectStore(STORE).get(key))) || null;
  } catch {
    return null;
  }
}

/** Saves `updates` and `meta` as `key`'s copy; forgets the oldest beyond KEEP. Never throws. */
export async function saveCopy(key, updates, meta) {
  try {
    const record = { key, at: Date.now(), updates, meta };
    if (JSON.stringify(record).length > MAX_BYTES) return;
    const d = await open();
    const store = d.transaction(STORE, 'readwrite').objectStore(STORE);
    await done(store.put(record));
    // Oldest first: all but the last KEEP go.
    const keys = await done(d.transaction(STORE).objectStore(STORE).index('at').getAllKeys());
    const old = d.transaction(STORE, 'readwrite').objectStore(STORE);
    for (const k of keys.slice(0, Math.max(0, keys.length - KEEP))) old.delete(k);
  } catch {
    // No storage (private mode, quota): nothing is kept, and nothing else changes.
  }
}

/** Forgets `key`'s copy (its session was deleted). Never throws. */
export async function forgetCopy(key) {
  try {
    const d = await open();
    await done(d.transaction(STORE, 'readwrite').objectStore(STORE).delete(key));
  } catch {
    // Nothing kept, or no storage.
  }
}
