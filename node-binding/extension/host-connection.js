// A session's connection to the piw host: connected on demand (starting a host unless the
// session says not to), subscribed to the session's events, every call bounded so that a dead
// or hung host never blocks Pi; a connection whose call failed that way is dropped and the next
// call connects again. The subscription is followed by ./run-following.js (`connected`).
import { Client } from '../index.js';

/** How long a call to the host may take before a tool call fails (a hung host). */
export const CALL_TIMEOUT_MS = Number(process.env.PIW_PI_CALL_TIMEOUT_MS) || 10_000;

/** How long closing the session may wait for the host: a host that does not answer must not keep Pi from quitting. */
export const CLOSE_TIMEOUT_MS = Number(process.env.PIW_PI_CLOSE_TIMEOUT_MS) || 2_000;

export class HostCallError extends Error {
  constructor(message, code) {
    super(message);
    this.name = 'HostCallError';
    this.code = code;
  }
}

function bounded(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(
      () => reject(new HostCallError(`the piw host did not answer ${what} within ${Math.round(ms / 1000)} s`, 'timeout')),
      ms,
    );
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** The session's part that holds its connection: `connection`, `call` (bounded), `dropClient`, `closeConnection`. */
export const HostConnection = (Base) =>
  class HostConnection extends Base {
    constructor(...args) {
      super(...args);
      this.client = null;
      this.connecting = null;
      this.subscription = null;
      /** Connections given up, with why (for the calls still waiting on them). */
      this.dropped = new WeakMap();
      /** Whether a call may start a host when none answers (a bridge never does: see ./bridge.js). */
      this.startsHost = true;
    }

    /**
     * The connected client, subscribed to this session's events. `start: false` (the reconnect
     * attempts) only connects to a host that runs; otherwise a host is started on demand. A
     * connection made after an earlier one ended schedules a refresh: what happened meanwhile
     * (results, steps) is delivered.
     */
    async connection({ start = this.startsHost } = {}) {
      if (this.closed) throw new HostCallError('the workflow session is closed', 'client_closed');
      if (this.client?.isOpen) return this.client;
      if (!this.connecting) {
        this.connecting = (async () => {
          const client = await Client.connect({ start });
          const closedMeanwhile = () => {
            if (!this.closed) return false;
            client.close().catch(() => {});
            return true;
          };
          if (closedMeanwhile()) throw new HostCallError('the workflow session is closed', 'client_closed');
          let sub;
          try {
            sub = await client.subscribe(this.subscriptionFilter());
          } catch (e) {
            client.close().catch(() => {});
            throw e;
          }
          // Closed during the subscribe round trip: close() saw no client to close.
          if (closedMeanwhile()) throw new HostCallError('the workflow session is closed', 'client_closed');
          this.client = client;
          this.subscription = sub;
          this.connected(sub, client);
          return client;
        })().finally(() => {
          this.connecting = null;
        });
      }
      return bounded(this.connecting, CALL_TIMEOUT_MS, 'the connection');
    }

    /** Runs `fn(client)` against the host, bounded; a broken connection is dropped (the next call reconnects). */
    async call(what, fn, ms = CALL_TIMEOUT_MS) {
      const client = await this.connection();
      try {
        return await bounded(fn(client), ms, what);
      } catch (e) {
        if (e?.code === 'client_closed' && !this.closed && this.dropped.get(client)) {
          // Another call dropped this connection: say why, not just that it closed.
          throw new HostCallError(`${what} failed: ${this.dropped.get(client)}`, 'disconnected');
        }
        if (['timeout', 'disconnected', 'io', 'host_shutting_down'].includes(e?.code) && this.client === client) {
          this.dropClient(e.message);
        }
        throw e;
      }
    }

    dropClient(reason = 'the connection to the piw host ended') {
      const client = this.client;
      if (client) this.dropped.set(client, reason);
      this.client = null;
      this.subscription?.close().catch(() => {});
      this.subscription = null;
      client?.close().catch(() => {});
    }

    /**
     * Closes the connection (which ends the subscription), bounded by CLOSE_TIMEOUT_MS: Pi's quit
     * never waits longer on a host that does not answer.
     */
    async closeConnection() {
      const client = this.client;
      const subscription = this.subscription;
      this.client = null;
      this.subscription = null;
      const closing = (async () => {
        await subscription?.close().catch(() => {});
        await client?.close().catch(() => {});
      })();
      await bounded(closing, CLOSE_TIMEOUT_MS, 'the unsubscribe').catch(() => {
        // Not answering: the connection is dropped without waiting (the host ends the subscription with it).
        client?.close().catch(() => {});
      });
    }
  };
