// The end-to-end harness of the Pi extension: real Pi (the pinned devDependency) in RPC mode
// under this Node (22), a mock OpenAI-compatible streaming model on 127.0.0.1 scripted per test,
// temp HOME / PI_CODING_AGENT_DIR / TMPDIR / PIW_HOME, and a real piw host started on demand by
// the extension. `env.close()` kills every process it started and removes the directory.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync, copyFileSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client, bridgeCommand, findHostBin } from '../../index.js';

export const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const fixturesDir = join(pkgDir, 'test', 'pi', 'fixtures');
export const piCli = join(pkgDir, 'node_modules', '@earendil-works', 'pi-coding-agent', 'dist', 'bundle', 'cli.js');
export const hostBin = process.env.PIW_HOST_BIN ?? findHostBin();
/** Waits for a condition: only a hang reaches this bound. */
export const WAIT_MS = 30_000;

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * The mock model. `script(request)` gets `{ messages, last, lastText, tools }` of each chat
 * completion request and returns `{ text }` or `{ tool: { name, arguments } }` (or a Promise of
 * one, to hold a turn open before it starts). With `hold` (a Promise) the reply's first chunk is
 * streamed and the rest waits until `hold` resolves: Pi is mid-turn, streaming, until the test
 * releases it. Every request is kept in `requests`.
 */
export async function mockModel(script) {
  const requests = [];
  let count = 0;
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', async () => {
      let parsed = {};
      try {
        parsed = JSON.parse(body);
      } catch {
        // not JSON: answered with text below
      }
      const messages = parsed.messages ?? [];
      const last = messages[messages.length - 1] ?? {};
      const lastText = typeof last.content === 'string' ? last.content : (last.content ?? []).map((b) => b.text ?? '').join('');
      const info = { messages, last, lastText, tools: parsed.tools ?? [], allText: messages.map((m) => (typeof m.content === 'string' ? m.content : (m.content ?? []).map((b) => b.text ?? '').join(''))).join('\n') };
      requests.push(info);
      let reply;
      try {
        reply = (await script(info)) ?? { text: 'ok' };
      } catch (e) {
        reply = { text: `script error: ${e.message}` };
      }
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      const id = `chatcmpl-${++count}`;
      const chunk = (delta, finish = null) =>
        res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1, model: 'mock-model', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`);
      if (reply.hold) {
        // The turn's first chunk reaches Pi; the rest waits for the test.
        chunk({ role: 'assistant', content: '' });
        await reply.hold;
        if (res.destroyed) return;
      }
      if (reply.tool) {
        const args = JSON.stringify(reply.tool.arguments ?? {});
        chunk({ role: 'assistant', tool_calls: [{ index: 0, id: `call_${count}`, type: 'function', function: { name: reply.tool.name, arguments: '' } }] });
        chunk({ tool_calls: [{ index: 0, function: { arguments: args } }] });
        chunk({}, 'tool_calls');
      } else {
        chunk({ role: 'assistant', content: reply.text });
        chunk({}, 'stop');
      }
      res.write('data: [DONE]\n\n');
      res.end();
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}/v1`,
    requests,
    set script(fn) {
      script = fn;
    },
    close: () => new Promise((r) => server.close(() => r())),
  };
}

/**
 * A test environment: temp dirs, the model, a project dir with `.pi/workflows/`, and the Pi
 * processes started with `env.startPi()`.
 */
export async function piEnv(script = () => ({ text: 'ok' })) {
  const root = mkdtempSync(join(tmpdir(), 'piw-pi-'));
  const home = join(root, 'h');
  const agentDir = join(home, '.pi', 'agent');
  const tmp = join(root, 't');
  const piwHome = join(root, 'w');
  const project = join(root, 'p');
  const sessions = join(root, 's');
  for (const d of [agentDir, tmp, project, sessions, join(project, '.pi', 'workflows'), join(agentDir, 'workflows')]) mkdirSync(d, { recursive: true });
  const model = await mockModel(script);
  writeFileSync(
    join(agentDir, 'models.json'),
    JSON.stringify({
      providers: {
        mock: {
          baseUrl: model.url,
          api: 'openai-completions',
          apiKey: 'mock-key',
          compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
          models: [{ id: 'mock-model' }],
        },
      },
    }),
  );
  writeFileSync(join(agentDir, 'auth.json'), '{}');
  const env = {
    ...cleanEnv(),
    HOME: home,
    PI_CODING_AGENT_DIR: agentDir,
    TMPDIR: tmp,
    PIW_HOME: piwHome,
    PIW_HOST_BIN: hostBin,
    PIW_KILL_GRACE_MS: '300',
    PI_OFFLINE: '1',
    LANG: 'C.UTF-8',
    PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}`,
  };
  const pis = [];
  const self = {
    root,
    home,
    agentDir,
    piwHome,
    project,
    model,
    env,
    /** Copies a fixture to the project's (or the user's) workflow folder under `name`. */
    addWorkflow(fixture, name, where = 'project') {
      const dir = where === 'project' ? join(project, '.pi', 'workflows') : join(agentDir, 'workflows');
      const suffix = fixture.slice(fixture.indexOf('.workflow.'));
      const dest = join(dir, `${name}${suffix}`);
      // Fixtures import the package by its absolute path, so they run from anywhere.
      const text = readFileSync(join(fixturesDir, fixture), 'utf8').replaceAll('PIW_PACKAGE', join(pkgDir, 'index.js'));
      writeFileSync(dest, text);
      return dest;
    },
    copyFile: copyFileSync,
    /**
     * Starts Pi in RPC mode with the extension (unless `extension: false`) on session
     * `sessionId`; without skills unless `skills: true` (then those of installed packages load).
     */
    async startPi({ sessionId = 'session-a', extension = true, skills = false, extraEnv = {} } = {}) {
      const args = [
        piCli,
        '--mode', 'rpc',
        '--session-dir', sessions,
        '--session-id', sessionId,
        ...(skills ? [] : ['--no-skills']),
        '--no-themes', '--no-prompt-templates', '--no-context-files', '--offline',
        '--no-builtin-tools',
        '--provider', 'mock', '--model', 'mock-model',
      ];
      if (extension) args.push('-e', extension === true ? pkgDir : extension);
      const pi = new PiProcess(spawn(process.execPath, args, { cwd: project, env: { ...env, ...extraEnv }, stdio: ['pipe', 'pipe', 'pipe'] }));
      pis.push(pi);
      await pi.ready();
      return pi;
    },
    /**
     * Starts the bridge of detached run `runId` as the host's launcher will: Pi in RPC mode
     * with the bridge extension, the mock model, `PIW_BRIDGE_RUN` and this `PIW_HOME`. Not
     * waited for: a bridge may exit at once (`pi.exited`).
     */
    startBridge(runId, { extraEnv = {} } = {}) {
      const cmd = bridgeCommand({
        pi: piCli,
        runId,
        provider: 'mock',
        model: 'mock-model',
        piArgs: ['--offline', '--no-builtin-tools'],
        home: piwHome,
      });
      const pi = new PiProcess(spawn(cmd.command, cmd.args, { cwd: project, env: { ...env, ...cmd.env, ...extraEnv }, stdio: ['pipe', 'pipe', 'pipe'] }));
      pis.push(pi);
      return pi;
    },
    /** Runs `pi install <this package>` (as a user would); resolves with its exit code. */
    async piInstall() {
      const child = spawn(process.execPath, [piCli, 'install', pkgDir], { cwd: project, env, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (c) => (out += c));
      child.stderr.on('data', (c) => (out += c));
      const code = await new Promise((r) => child.on('exit', r));
      return { code, out };
    },
    /**
     * A client of this environment's host (started on demand with `hostEnv` added to its
     * environment), closed by `close()`.
     */
    async client({ hostEnv = {} } = {}) {
      const c = await Client.connect({ home: piwHome, hostBin, hostEnv: { HOME: home, PI_CODING_AGENT_DIR: agentDir, PIW_KILL_GRACE_MS: '300', ...hostEnv } });
      clients.push(c);
      return c;
    },
    async close() {
      for (const pi of pis) pi.kill();
      // A Pi that is still exiting may write into `root` (Node's compile cache) while it is removed.
      await Promise.all(pis.map((pi) => pi.exited));
      for (const c of clients) await c.close().catch(() => {});
      await stopHost(piwHome);
      await model.close();
      rmSync(root, { recursive: true, force: true });
    },
  };
  const clients = [];
  return self;
}

/** The environment without anything that would reach the real home or a real model. */
function cleanEnv() {
  const keep = ['PATH', 'LANG', 'TERM', 'USER', 'LOGNAME', 'SHELL', 'CARGO_TARGET_DIR'];
  const out = {};
  for (const k of keep) if (process.env[k] !== undefined) out[k] = process.env[k];
  return out;
}

/** Stops the host of `piwHome` if one runs: host.stop, then SIGKILL of its pid after 10 s. */
export async function stopHost(piwHome) {
  let client;
  try {
    client = await Client.connect({ home: piwHome, start: false });
  } catch {
    return;
  }
  let pid = null;
  try {
    pid = (await client.status()).pid;
    await client.request('host.stop');
  } catch {
    // already stopping
  }
  await client.close().catch(() => {});
  if (pid === null) return;
  const deadline = Date.now() + 10_000;
  while (alive(pid) && Date.now() < deadline) await sleep(20);
  if (alive(pid)) process.kill(pid, 'SIGKILL');
}

/** The host's settings under which it serves detached steps with the mock model. */
export const DETACHED = { PIW_DETACHED_PROVIDER: 'mock', PIW_DETACHED_MODEL: 'mock-model', PIW_DETACHED_PI_ARGS: '--offline --no-builtin-tools' };

export function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Waits until `check()` returns a truthy value (polled), or fails after WAIT_MS. */
export async function until(check, what = 'condition', ms = WAIT_MS) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

/** One Pi process in RPC mode: JSON lines in, events recorded, responses matched by id. */
export class PiProcess {
  constructor(child) {
    this.child = child;
    this.events = [];
    this.stderr = '';
    this.waiters = new Set();
    this.responses = new Map();
    this.nextId = 1;
    this.exited = new Promise((r) => child.on('exit', (code, signal) => r({ code, signal })));
    let buf = '';
    child.stdout.on('data', (chunk) => {
      buf += chunk.toString('utf8');
      let nl;
      // Split on LF only (JSON strings may hold U+2028).
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, '');
        buf = buf.slice(nl + 1);
        if (!line.trim()) continue;
        let rec;
        try {
          rec = JSON.parse(line);
        } catch {
          continue;
        }
        this.events.push(rec);
        if (rec.type === 'response' && rec.id && this.responses.has(rec.id)) {
          this.responses.get(rec.id)(rec);
          this.responses.delete(rec.id);
        }
        for (const w of this.waiters) w();
      }
    });
    child.stderr.on('data', (c) => {
      this.stderr += c.toString('utf8');
      if (this.stderr.length > 200_000) this.stderr = this.stderr.slice(-100_000);
    });
    child.stdin.on('error', () => {});
  }

  /** Resolves at the first answer to a command (Pi has loaded its extensions). */
  async ready() {
    await this.send({ type: 'get_state' });
  }

  send(cmd) {
    const id = `c${this.nextId++}`;
    const reply = new Promise((resolveReply, reject) => {
      this.responses.set(id, resolveReply);
      this.exited.then(({ code, signal }) => reject(new Error(`pi exited (${code ?? signal}) before answering ${cmd.type}\n${this.stderr.slice(-2000)}`)));
    });
    this.child.stdin.write(`${JSON.stringify({ id, ...cmd })}\n`);
    return withBound(reply, WAIT_MS, `pi's answer to ${cmd.type}`);
  }

  /** Sends a prompt; rejects when Pi refuses it (a plain prompt while the agent is busy is
   *  refused, not queued: wait with `waitIdle` first). */
  async prompt(message) {
    const reply = await this.send({ type: 'prompt', message });
    if (!reply.success) throw new Error(`pi refused the prompt ${JSON.stringify(message)}: ${reply.error}`);
    return reply;
  }

  /** Waits until the agent is not working and has nothing queued (up to WAIT_MS). */
  async waitIdle() {
    await until(async () => {
      const { data } = await this.send({ type: 'get_state' });
      return !data.isStreaming && !data.isCompacting && data.pendingMessageCount === 0;
    }, 'the agent to be idle');
  }

  respondUi(id, answer) {
    this.child.stdin.write(`${JSON.stringify({ type: 'extension_ui_response', id, ...answer })}\n`);
  }

  /** The first event after index `from` matching `pred` (waits up to WAIT_MS). */
  waitEvent(pred, what = 'an event', from = 0, ms = WAIT_MS) {
    return new Promise((resolveEvent, reject) => {
      const check = () => {
        for (let i = from; i < this.events.length; i++) {
          if (pred(this.events[i])) {
            cleanup();
            resolveEvent(this.events[i]);
            return;
          }
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        // What Pi did meanwhile: the kinds of its events since `from` (with the custom
        // messages' types and the extension's notifications), to tell a hang from a wrong turn.
        const seen = this.events.slice(from).map((e) =>
          e.type === 'message_end' && e.message?.role === 'custom'
            ? `message_end(${e.message.customType}${e.message.details?.kind ? `:${e.message.details.kind}` : ''})`
            : e.type === 'extension_ui_request'
              ? `ui(${e.method}${e.message ? `: ${String(e.message).slice(0, 120)}` : ''})`
              : e.type,
        );
        reject(new Error(`timed out waiting for ${what}; Pi's events since: ${seen.join(', ').slice(-4000)}; stderr:\n${this.stderr.slice(-3000)}`));
      }, ms);
      const cleanup = () => {
        clearTimeout(timer);
        this.waiters.delete(check);
      };
      this.waiters.add(check);
      check();
    });
  }

  mark() {
    return this.events.length;
  }

  /** `ctx.ui.notify` records (RPC extension_ui_request, method notify) since `from`. */
  notifications(from = 0) {
    return this.events.slice(from).filter((e) => e.type === 'extension_ui_request' && e.method === 'notify').map((e) => e.message);
  }

  waitNotify(re, from = 0, ms = WAIT_MS) {
    return this.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'notify' && re.test(e.message), `a notification ${re}`, from, ms);
  }

  /** Custom messages of `customType` that reached the session (message_end, role custom). */
  customMessages(customType, from = 0) {
    return this.events
      .slice(from)
      .filter((e) => e.type === 'message_end' && e.message?.role === 'custom' && e.message.customType === customType)
      .map((e) => e.message);
  }

  waitSettled(from = 0) {
    return this.waitEvent((e) => e.type === 'agent_settled', 'agent_settled', from);
  }

  /** Closes stdin (orderly exit) and waits; SIGKILL after 10 s. */
  async quit() {
    this.child.stdin.end();
    const t = setTimeout(() => this.kill(), 10_000);
    await this.exited;
    clearTimeout(t);
  }

  kill(signal = 'SIGKILL') {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
  }
}

function withBound(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
