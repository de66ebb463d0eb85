// A decision channel's adapter for Telegram: the host runs one per configured channel
// (`piw channel add telegram`) as a supervised child, and restarts it when it dies. It is a
// client of the host like any other: it watches every run's events, sends each pending
// protected human decision for this channel once to the one configured chat (its text,
// bounded, and its choices as buttons; a decision with an `audience` only when the audience
// names this channel, see `audience.js`), takes answers from that chat only (a button, or a text reply), and answers
// through `decision.answer`, as a person (`answered_by: person`) with its channel
// (`telegram:<chat id>`). A decision closed another way (in Pi, by the CLI, at its deadline)
// gets its message marked closed.
//
//   node channel-telegram.js serve <name>   the adapter (the host starts it)
//   node channel-telegram.js test <name>    one test message; prints {"ok", "bot"|"error"}
//
// Files (`$PIW_HOME/channels/`, `piw_host::channels`): `<name>.json` (kind, chat), the token
// in `<name>.token` (0600; never logged: every error passes `redact`), and this adapter's state
// in `<name>.state.json`: the next Telegram update to read (`offset`, committed after each
// update is handled, so an update is handled once across restarts; one handled again after a
// crash before its commit answers with the same request id, which the host replays) and the
// messages it sent. `PIW_TELEGRAM_API` is the Bot API's base URL (default
// https://api.telegram.org).

import { closeSync, existsSync, fsyncSync, openSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';

import { channelsFor } from './audience.js';
import { Client, isFinal } from './client.js';
import { choiceInputs, humanAnswer, textRule } from './decision-answer.js';
import { decisionText } from './decision-text.js';

const API = (process.env.PIW_TELEGRAM_API || 'https://api.telegram.org').replace(/\/+$/, '');
/** Telegram's limit is 4096 characters a message; the rest says where the whole request is. */
const TEXT_LIMIT = 3500;
/** Seconds a `getUpdates` long poll is held by Telegram. */
const POLL_SECONDS = 25;
/** Closed decisions remembered (a button pressed on an old message is told it is closed). */
const KEEP_CLOSED = 200;
/** How often every waiting run is read again, whatever the events said. */
const RESCAN_MS = 60_000;

const [mode, name] = process.argv.slice(2);
const home = process.env.PIW_HOME;

function log(text) {
  process.stderr.write(`piw channel ${name}: ${redact(String(text))}\n`);
}

let TOKEN = null;

/** `text` without the bot token (Telegram puts it in every URL's path). */
function redact(text) {
  if (!TOKEN) return text;
  let out = text.split(TOKEN).join('<token>');
  const encoded = encodeURIComponent(TOKEN);
  if (encoded !== TOKEN) out = out.split(encoded).join('<token>');
  return out;
}

class ApiError extends Error {
  constructor(method, status, description, retryAfter) {
    super(`Telegram ${method}: ${description}`);
    this.status = status;
    this.retryAfter = retryAfter;
  }
}

const CHANNEL_NAME = /^[a-z0-9][a-z0-9_-]{0,31}$/;

/** The names of the channels configured now (`<name>.json` in the channels folder). */
function configuredChannels() {
  try {
    return readdirSync(join(home, 'channels'))
      .filter((f) => f.endsWith('.json'))
      .map((f) => f.slice(0, -'.json'.length))
      .filter((n) => CHANNEL_NAME.test(n));
  } catch {
    return [name];
  }
}

function loadChannel() {
  if (!home) throw new Error('PIW_HOME is not set');
  if (!CHANNEL_NAME.test(name ?? '')) throw new Error(`invalid channel name ${JSON.stringify(name)}`);
  const dir = join(home, 'channels');
  const configPath = join(dir, `${name}.json`);
  if (!existsSync(configPath)) throw new Error(`no channel named ${name} (${configPath})`);
  const config = JSON.parse(readFileSync(configPath, 'utf8'));
  if (config.kind !== 'telegram') throw new Error(`channel ${name} is not a telegram channel`);
  if (!/^-?[0-9]{1,20}$/.test(String(config.chat))) throw new Error(`channel ${name} has no valid chat id`);
  const tokenPath = join(dir, `${name}.token`);
  const mode = statSync(tokenPath).mode & 0o077;
  if (mode !== 0) throw new Error(`${tokenPath} may be read by others (mode ${(statSync(tokenPath).mode & 0o777).toString(8)}): chmod 600 it`);
  const token = readFileSync(tokenPath, 'utf8').trim();
  if (!token) throw new Error(`${tokenPath} is empty`);
  TOKEN = token;
  return { chat: String(config.chat), statePath: join(dir, `${name}.state.json`) };
}

async function call(method, body, signal) {
  let res;
  try {
    res = await fetch(`${API}/bot${TOKEN}/${method}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal,
    });
  } catch (e) {
    const why = e?.cause?.message ?? e?.message ?? String(e);
    throw new ApiError(method, 0, `no answer from ${redact(API)}: ${redact(why)}`);
  }
  let data = null;
  try {
    data = await res.json();
  } catch {
    data = null;
  }
  if (!data || data.ok !== true) {
    const why = typeof data?.description === 'string' ? data.description : `HTTP ${res.status}`;
    throw new ApiError(method, res.status, redact(why), data?.parameters?.retry_after);
  }
  return data.result;
}

// --- durable state ---------------------------------------------------------------------------

function readState(path) {
  try {
    const s = JSON.parse(readFileSync(path, 'utf8'));
    return { offset: Number(s.offset) || 0, seq: Number(s.seq) || 0, sent: s.sent ?? {}, prompts: s.prompts ?? {} };
  } catch {
    return { offset: 0, seq: 0, sent: {}, prompts: {} };
  }
}

function writeState(path, state) {
  const closed = Object.entries(state.sent).filter(([, e]) => e.closed);
  if (closed.length > KEEP_CLOSED) {
    closed.sort((a, b) => a[1].seq - b[1].seq);
    for (const [id] of closed.slice(0, closed.length - KEEP_CLOSED)) delete state.sent[id];
  }
  const tmp = `${path}.tmp-${process.pid}`;
  const fd = openSync(tmp, 'w', 0o600);
  try {
    writeSync(fd, `${JSON.stringify(state)}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
}

// --- what is sent ----------------------------------------------------------------------------

function choicesOf(request) {
  const raw = Array.isArray(request?.choices) ? request.choices : [];
  return raw
    .filter((c) => c && typeof c.id === 'string')
    .map((c) => ({ id: c.id, label: typeof c.label === 'string' && c.label.trim() ? c.label : c.id }));
}

function bounded(text, runId) {
  if (text.length <= TEXT_LIMIT) return text;
  return `${text.slice(0, TEXT_LIMIT)}\n… (shortened: the whole request is in Pi, or \`piw run status ${runId}\`)`;
}

function decisionMessage(run, decision) {
  const text = decisionText(decision.request, run.workflow_name ?? null);
  return `${bounded(text, run.run_id)}\n\nRun ${run.run_id}. Press a choice, or reply to this message with one (its text after it).`;
}

function keyboard(seq, choices) {
  return { inline_keyboard: choices.map((c, i) => [{ text: c.label.slice(0, 64), callback_data: `d${seq}:${i}` }]) };
}

function title(entry) {
  return entry.title ?? 'A decision';
}

// --- the adapter -----------------------------------------------------------------------------

async function serve() {
  const { chat, statePath } = loadChannel();
  const state = readState(statePath);
  const save = () => writeState(statePath, state);
  const channel = `telegram:${chat}`;
  let client;
  try {
    client = await Client.connect({ start: false });
  } catch (e) {
    log(`the host does not answer: ${e.message}`);
    process.exit(5);
  }
  const stop = new AbortController();
  const quit = (code) => {
    stop.abort();
    try {
      client.close();
    } catch {}
    process.exit(code);
  };
  process.on('SIGTERM', () => quit(0));
  process.on('SIGINT', () => quit(0));

  // The fault point of the tests: exit once after an update answered a decision and before its
  // offset is committed (one shot: a marker file says it fired).
  const fault = process.env.PIW_CHANNEL_FAULT === 'exit_before_offset' ? join(home, 'channels', `${name}.fault-fired`) : null;

  /** Edits a sent message to say the decision is closed, without its buttons. */
  async function markClosed(entry, why) {
    entry.closed = true;
    entry.why = why;
    save();
    try {
      await call('editMessageText', { chat_id: chat, message_id: entry.message_id, text: `${title(entry)}\n\nClosed: ${why}.` });
    } catch (e) {
      log(`cannot mark decision ${entry.decision_id} closed: ${e.message}`);
    }
  }

  /** Decisions whose audience names no configured channel, already logged. */
  const unroutedLogged = new Set();
  /** Whether this channel sends `decision` (its audience), logging once one that no channel gets. */
  function forThisChannel(decision, run) {
    const audience = decision.request?.audience ?? null;
    const { channels, unrouted } = channelsFor(audience, configuredChannels());
    if (unrouted && !unroutedLogged.has(decision.decision_id)) {
      unroutedLogged.add(decision.decision_id);
      log(
        `decision ${decision.decision_id} of run ${run.run_id} is for audience ${JSON.stringify(audience)}, which names no configured channel: ` +
          `it is sent to none; it shows in the run's Pi session and in \`piw run status\`, and \`piw run decide\` answers it`,
      );
    }
    return channels.includes(name);
  }

  /** Reads every waiting run's pending protected decisions; sends new ones, closes gone ones. */
  async function scan() {
    const pending = new Map();
    const runs = new Map();
    for await (const run of client.allRuns({ statuses: ['waiting'] })) {
      let status;
      try {
        status = await client.runStatus(run.run_id);
      } catch (e) {
        log(`cannot read run ${run.run_id}: ${e.message}`);
        continue;
      }
      runs.set(run.run_id, status);
      for (const d of status.decisions ?? []) {
        if (d.kind === 'human_decision' && d.status === 'pending') pending.set(d.decision_id, { run: status.run, decision: d });
      }
    }
    for (const [id, { run, decision }] of pending) {
      if (state.sent[id] || !forThisChannel(decision, run)) continue;
      const choices = choicesOf(decision.request);
      const seq = ++state.seq;
      let message;
      try {
        message = await call('sendMessage', {
          chat_id: chat,
          text: decisionMessage(run, decision),
          reply_markup: keyboard(seq, choices),
        });
      } catch (e) {
        log(`cannot send decision ${id}: ${e.message}`);
        continue;
      }
      const first = decisionText(decision.request, run.workflow_name ?? null).split('\n')[0];
      state.sent[id] = { decision_id: id, run_id: run.run_id, message_id: message.message_id, seq, choices, title: first };
      save();
      log(`sent decision ${id} of run ${run.run_id}`);
    }
    for (const entry of Object.values(state.sent)) {
      if (entry.closed || pending.has(entry.decision_id)) continue;
      let status = runs.get(entry.run_id);
      if (!status) {
        try {
          status = await client.runStatus(entry.run_id);
        } catch (e) {
          if (e.code === 'not_found') await markClosed(entry, 'its run is gone');
          continue;
        }
      }
      const d = (status.decisions ?? []).find((x) => x.decision_id === entry.decision_id);
      if (d?.status === 'pending') continue;
      let why;
      if (d?.status === 'answered') {
        const choice = entry.choices.find((c) => c.id === d.answer?.choice)?.label ?? d.answer?.choice;
        why = d.answered_by
          ? `answered elsewhere by the ${d.answered_by}${choice ? `: ${choice}` : ''}`
          : `nobody answered in time; the workflow went on with ${choice ?? 'its timeout response'}`;
      } else if (isFinal(status.run.status)) why = `the run ended (${status.run.status})`;
      else why = 'it was cancelled or its deadline passed';
      await markClosed(entry, why);
    }
  }

  let scanning = null;
  let again = false;
  function scheduleScan() {
    if (scanning) {
      again = true;
      return;
    }
    scanning = (async () => {
      do {
        again = false;
        try {
          await scan();
        } catch (e) {
          log(`cannot read the runs: ${e.message}`);
          if (!client.isOpen) quit(5);
        }
      } while (again);
      scanning = null;
    })();
  }

  let answeredNow = false;
  /** Answers `entry`'s decision as the person in the chat; the request id is the update's. */
  async function answer(entry, value, updateId) {
    answeredNow = true;
    try {
      await client.request(
        'decision.answer',
        { runId: entry.run_id, requestId: `telegram-${name}-${updateId}` },
        { decision_id: entry.decision_id, answer: value, channel },
      );
    } catch (e) {
      return { error: e.message.replace(/^\[[a-z_]+\]\s*/, '') };
    }
    const label = entry.choices.find((c) => c.id === value.choice)?.label ?? value.choice;
    entry.closed = true;
    entry.why = 'answered here';
    save();
    try {
      await call('editMessageText', {
        chat_id: chat,
        message_id: entry.message_id,
        text: `${title(entry)}\n\nAnswered here: ${label}${value.text ? ` (${value.text})` : ''}.`,
      });
    } catch (e) {
      log(`cannot mark decision ${entry.decision_id} answered: ${e.message}`);
    }
    return { label };
  }

  async function requestOf(entry) {
    const status = await client.runStatus(entry.run_id);
    return (status.decisions ?? []).find((d) => d.decision_id === entry.decision_id)?.request ?? null;
  }

  async function reply(text, to) {
    try {
      await call('sendMessage', { chat_id: chat, text, ...(to ? { reply_to_message_id: to } : {}) });
    } catch (e) {
      log(`cannot reply: ${e.message}`);
    }
  }

  async function onCallback(cq, updateId) {
    const from = String(cq.message?.chat?.id ?? '');
    if (from !== chat) {
      log(`ignored a button from another chat (update ${updateId})`);
      return;
    }
    const m = /^d(\d+):(\d+)$/.exec(String(cq.data ?? ''));
    const entry = m ? Object.values(state.sent).find((e) => e.seq === Number(m[1])) : null;
    const choice = entry?.choices[Number(m?.[2])];
    const ack = (text) => call('answerCallbackQuery', { callback_query_id: cq.id, text }).catch((e) => log(`cannot acknowledge a button: ${e.message}`));
    if (!entry || !choice) return ack('This decision is not known here.');
    let request = null;
    try {
      request = await requestOf(entry);
    } catch {}
    const input = request ? choiceInputs(request).get(choice.id) : null;
    if (input && input.perChoice && !entry.closed) {
      // A choice that collects text: asked for as a reply to a prompt.
      const rule = textRule(input);
      try {
        const prompt = await call('sendMessage', {
          chat_id: chat,
          text: `${choice.label}: reply to this message with ${input.label}${rule ? ` (${rule})` : ''}.`,
          reply_markup: { force_reply: true },
        });
        state.prompts[prompt.message_id] = { decision_id: entry.decision_id, choice: choice.id };
        save();
      } catch (e) {
        log(`cannot ask for the text: ${e.message}`);
      }
      return ack(`Reply with ${input.label}.`);
    }
    const result = await answer(entry, { choice: choice.id, text: null }, updateId);
    if (result.error) {
      await ack(`Not taken: ${result.error}`.slice(0, 190));
      scheduleScan();
    } else await ack(`Answered: ${result.label}`);
  }

  async function onMessage(msg, updateId) {
    if (String(msg.chat?.id ?? '') !== chat) {
      log(`ignored a message from another chat (update ${updateId})`);
      return;
    }
    const text = typeof msg.text === 'string' ? msg.text.trim() : '';
    if (!text) return;
    const to = msg.reply_to_message?.message_id;
    const prompt = to !== undefined ? state.prompts[to] : undefined;
    let entry;
    let raw = text;
    if (prompt) {
      entry = state.sent[prompt.decision_id];
      raw = JSON.stringify({ choice: prompt.choice, text });
    } else if (to !== undefined) {
      entry = Object.values(state.sent).find((e) => e.message_id === to);
    } else {
      const open = Object.values(state.sent).filter((e) => !e.closed);
      if (open.length === 1) entry = open[0];
      else if (open.length > 1) return reply('Several decisions are open: reply to the message of the one you answer.', msg.message_id);
    }
    if (!entry) return reply('No open decision here to answer.', msg.message_id);
    let request;
    try {
      request = await requestOf(entry);
    } catch (e) {
      return reply(`Cannot read the decision: ${e.message}`, msg.message_id);
    }
    const { answer: value, problem } = humanAnswer(request, raw);
    if (problem) return reply(`Not taken: ${problem}`, msg.message_id);
    const result = await answer(entry, value, updateId);
    if (result.error) {
      scheduleScan();
      return reply(`Not taken: ${result.error}`, msg.message_id);
    }
    if (prompt) {
      delete state.prompts[to];
      save();
    }
  }

  async function poll() {
    let pause = 1000;
    while (!stop.signal.aborted) {
      let updates;
      try {
        updates = await call('getUpdates', { offset: state.offset, timeout: POLL_SECONDS, allowed_updates: ['message', 'callback_query'] }, stop.signal);
        pause = 1000;
      } catch (e) {
        if (stop.signal.aborted) return;
        log(`${e.message}; polling again in ${Math.round((e.retryAfter ? e.retryAfter * 1000 : pause) / 1000)} s`);
        await new Promise((r) => setTimeout(r, e.retryAfter ? e.retryAfter * 1000 : pause));
        pause = Math.min(pause * 2, 30_000);
        continue;
      }
      for (const u of Array.isArray(updates) ? updates : []) {
        if (!Number.isSafeInteger(u?.update_id) || u.update_id < state.offset) continue;
        answeredNow = false;
        try {
          if (u.callback_query) await onCallback(u.callback_query, u.update_id);
          else if (u.message) await onMessage(u.message, u.update_id);
        } catch (e) {
          log(`update ${u.update_id}: ${e.message}`);
        }
        if (fault && answeredNow && !existsSync(fault)) {
          writeFileSync(fault, `${u.update_id}\n`, { mode: 0o600 });
          log('fault point exit_before_offset: exiting before the offset is committed');
          quit(9);
        }
        state.offset = u.update_id + 1;
        save();
      }
    }
  }

  const sub = await client.subscribe({ all: true });
  scheduleScan();
  setInterval(scheduleScan, RESCAN_MS).unref();
  (async () => {
    for await (const _event of sub) scheduleScan();
    log('the host went away');
    quit(5);
  })();
  log(`serving chat ${chat}`);
  await poll();
}

async function test() {
  const { chat } = loadChannel();
  const me = await call('getMe', {});
  const sent = await call('sendMessage', {
    chat_id: chat,
    text: `piw: a test message of channel ${name}. Protected decisions of your workflows will come here.`,
  });
  process.stdout.write(`${JSON.stringify({ ok: true, bot: me?.username ?? null, chat, message_id: sent?.message_id ?? null })}\n`);
}

try {
  if (mode === 'serve') await serve();
  else if (mode === 'test') await test();
  else {
    process.stderr.write('usage: channel-telegram.js serve|test <name>\n');
    process.exit(2);
  }
} catch (e) {
  const why = redact(e?.message ?? String(e));
  if (mode === 'test') process.stdout.write(`${JSON.stringify({ ok: false, error: why })}\n`);
  log(why);
  process.exit(mode === 'test' ? 1 : 4);
}
