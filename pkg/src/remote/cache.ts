// Where probe results persist between runs: a directory holding `capabilities.json` in Node,
// localStorage or IndexedDB in a browser. A cache never fails a call: read and write errors are
// swallowed (the probe simply runs again). Node modules are imported lazily so this file loads
// in a browser.

import type { Capabilities } from "./capabilities.js";

/** A persistent store of probe results, keyed by (provider, endpoint, model). */
export interface CapabilityCache {
  get(key: string): Promise<Capabilities | undefined>;
  set(key: string, capabilities: Capabilities): Promise<void>;
}

const FILE = "capabilities.json";
const VERSION = 1;

interface CacheFile {
  version: number;
  entries: Record<string, Capabilities>;
}

// A variable specifier keeps bundlers from trying to resolve Node built-ins for browser builds.
const nodeImport = (name: string): Promise<unknown> => import(/* @vite-ignore */ /* webpackIgnore: true */ name);

/** A cache in `dir/capabilities.json` (Node). Writes are atomic (temp file + rename). */
export function directoryCache(dir: string): CapabilityCache {
  // The few Node APIs used, typed here so the package builds without Node's types.
  interface Fs {
    readFile(path: string, encoding: "utf8"): Promise<string>;
    writeFile(path: string, data: string): Promise<void>;
    rename(from: string, to: string): Promise<void>;
    mkdir(path: string, options: { recursive: true }): Promise<unknown>;
  }
  interface Path {
    join(...parts: string[]): string;
  }
  let queue: Promise<unknown> = Promise.resolve();
  const modules = async () => ({
    fs: (await nodeImport("node:fs/promises")) as Fs,
    path: (await nodeImport("node:path")) as Path,
  });
  const read = async (): Promise<CacheFile> => {
    const { fs, path } = await modules();
    try {
      const parsed = JSON.parse(await fs.readFile(path.join(dir, FILE), "utf8")) as CacheFile;
      if (parsed && parsed.version === VERSION && typeof parsed.entries === "object" && parsed.entries !== null) return parsed;
    } catch {
      // missing or corrupt: start over
    }
    return { version: VERSION, entries: {} };
  };
  return {
    async get(key) {
      try {
        return (await read()).entries[key];
      } catch {
        return undefined;
      }
    },
    set(key, capabilities) {
      // Serialised so two probes finishing together do not lose each other's entry.
      const write = queue.then(async () => {
        try {
          const { fs, path } = await modules();
          const file = await read();
          file.entries[key] = capabilities;
          await fs.mkdir(dir, { recursive: true });
          const target = path.join(dir, FILE);
          const temp = `${target}.${Date.now()}.${Math.random().toString(36).slice(2)}.tmp`;
          await fs.writeFile(temp, JSON.stringify(file, null, 2) + "\n");
          await fs.rename(temp, target);
        } catch {
          // a cache never fails a call
        }
      });
      queue = write;
      return write;
    },
  };
}

/** A cache in `localStorage` (or any Storage), one item per key under `prefix`. */
export function localStorageCache(storage?: Storage, prefix = "poot:capabilities:"): CapabilityCache {
  const store = () => storage ?? (globalThis as { localStorage?: Storage }).localStorage;
  return {
    async get(key) {
      try {
        const text = store()?.getItem(prefix + key);
        return text ? (JSON.parse(text) as Capabilities) : undefined;
      } catch {
        return undefined;
      }
    },
    async set(key, capabilities) {
      try {
        store()?.setItem(prefix + key, JSON.stringify(capabilities));
      } catch {
        // quota or privacy mode: a cache never fails a call
      }
    },
  };
}

/** A cache in IndexedDB (database `dbName`, object store `capabilities`). */
export function indexedDBCache(dbName = "poot", factory?: IDBFactory): CapabilityCache {
  const STORE = "capabilities";
  let opening: Promise<IDBDatabase> | undefined;
  const open = (): Promise<IDBDatabase> => {
    opening ??= new Promise((resolve, reject) => {
      const idb = factory ?? (globalThis as { indexedDB?: IDBFactory }).indexedDB;
      if (!idb) {
        reject(new Error("IndexedDB is not available"));
        return;
      }
      const request = idb.open(dbName, 1);
      request.onupgradeneeded = () => request.result.createObjectStore(STORE);
      request.onsuccess = () => resolve(request.result);
      request.onerror = () => reject(request.error);
    });
    return opening;
  };
  const run = async <T>(mode: IDBTransactionMode, action: (store: IDBObjectStore) => IDBRequest<T>): Promise<T> => {
    const db = await open();
    return new Promise<T>((resolve, reject) => {
      const request = action(db.transaction(STORE, mode).objectStore(STORE));
      request.onsuccess = () => resolve(request.result);
      request.onerror = () => reject(request.error);
    });
  };
  return {
    async get(key) {
      try {
        return (await run<Capabilities | undefined>("readonly", (s) => s.get(key) as IDBRequest<Capabilities | undefined>)) ?? undefined;
      } catch {
        return undefined;
      }
    },
    async set(key, capabilities) {
      try {
        await run("readwrite", (s) => s.put(capabilities, key));
      } catch {
        // a cache never fails a call
      }
    },
  };
}
