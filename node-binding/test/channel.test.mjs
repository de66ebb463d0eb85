// Decision channels: the Telegram adapter the host runs, against a fake Bot API on 127.0.0.1
// that records every call and holds each `getUpdates` long poll until the test releases an
// update. Nothing here leaves the loopback interface.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { fakeTelegram } from './fake-telegram.mjs';
import { hostBin, startHost, writeWorkflow } from './helpers.mjs';

const TOKEN = '7345012345:AAH-very-secret-test-token_0123456789';
const CHAT = '4242';
const OTHER_CHAT = '999';


async function until(what, check, ms = 60_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

let api;
let host;
let piw;
let tokenFile;

/** Runs `piw` (asynchronously: the fake API answers from this process). */
function cli(args, { input } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(hostBin, args, { env: { ...process.env, PIW_HOME: host.home, PIW_TELEGRAM_API: api.url } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input ?? '');
  });
}

function events(runId) {
  return JSON.parse(execFileSync(hostBin, ['logs', runId, '--json'], { env: { ...process.env, PIW_HOME: host.home }, encoding: 'utf8' })).events;
}

const sentTo = (chat) => api.calls.filter((c) => c.method === 'sendMessage' && String(c.body.chat_id) === chat);

/** The message the adapter sent for the decision of `runId`. */
function decisionMessage(runId) {
  return sentTo(CHAT).find((c) => c.body.reply_markup?.inline_keyboard && c.body.text.includes(runId));
}

function button(message, label) {
  const b = message.body.reply_markup.inline_keyboard.flat().find((x) => x.text === label);
  assert.ok(b, `a button ${label}`);
  return b.callback_data;
}

/** The adapter committed every update up to `id`: it polls again from after it. */
const polledPast = (id) => api.calls.some((c) => c.method === 'getUpdates' && c.body.offset > id);

function press(chat, message, data, id = `cb-${Math.random()}`) {
  return api.push({
    callback_query: {
      id,
      from: { id: Number(chat) },
      data,
      message: { message_id: message?.messageId ?? 1, chat: { id: Number(chat) } },
    },
  });
}

before(async () => {
  api = await fakeTelegram(TOKEN);
  host = await startHost({ PIW_TELEGRAM_API: api.url, PIW_CHANNEL_FAULT: 'exit_before_offset' });
  piw = host.client;
  tokenFile = join(host.dir, 'bot-token');
  writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
});

after(async () => {
  if (process.env.PIW_CHANNEL_TEST_LOGS) {
    for (const f of readdirSync(join(host.home, 'logs', 'channels'))) console.log(f, readFileSync(join(host.home, 'logs', 'channels', f), 'utf8'));
  }
  await host?.stop();
  api?.close();
});

const approval = () =>
  writeWorkflow(
    host.dir,
    `approval-${Math.random().toString(16).slice(2, 8)}`,
    `const choices = piw.defineHumanChoices({
       ship: piw.choice({ label: 'Ship it' }),
       hold: piw.choice({ label: 'Hold' }),
     });
     export default piw.defineWorkflow({
       name: 'release', startAt: 'ask',
       nodes: {
         ask: piw.humanDecision({ choices, request: () => ({ title: 'Release 1.2 to production?', presentation: { summary: 'All checks passed.' } }) }),
         shipped: piw.compute({ run: ({ outputs }) => 'shipped by ' + outputs.ask.choice }),
         held: piw.compute({ run: () => 'held' }),
       },
       edges: [piw.humanDecisionEdge({ from: 'ask', choices, cases: { ship: 'shipped', hold: 'held' } })],
     });`,
  );

test('piw channel add, list and test; a bad token is an error that does not name it', async () => {
  const added = await cli(['channel', 'add', 'telegram', '--chat', CHAT, '--token-file', tokenFile]);
  assert.equal(added.code, 0, added.stderr);
  assert.match(added.stdout, /the host runs its adapter now/);
  const list = JSON.parse((await cli(['channel', 'list', '--json'])).stdout);
  assert.deepEqual(list.channels.map((c) => [c.name, c.kind, c.chat]), [['telegram', 'telegram', CHAT]]);
  const mode = statSync(join(host.home, 'channels', 'telegram.token')).mode & 0o777;
  assert.equal(mode, 0o600);

  const tested = await cli(['channel', 'test', 'telegram', '--json']);
  assert.equal(tested.code, 0, tested.stdout + tested.stderr);
  assert.equal(JSON.parse(tested.stdout).bot, 'piw_test_bot');
  assert.ok(sentTo(CHAT).some((c) => /test message/.test(c.body.text)));

  // Another token (from stdin): the API refuses it, and the error names neither token.
  const bad = await cli(['channel', 'add', 'telegram', '--name', 'bad', '--chat', CHAT, '--token', '-'], { input: 'wrong:token-abc\n' });
  assert.equal(bad.code, 0, bad.stderr);
  const failed = await cli(['channel', 'test', 'bad', '--json']);
  assert.equal(failed.code, 1);
  const error = JSON.parse(failed.stdout).error;
  assert.match(error.message, /Unauthorized/);
  assert.doesNotMatch(failed.stdout + failed.stderr, /wrong:token-abc|wrong%3Atoken-abc/);
  assert.match(error.message, /<token>/, 'the URL in the error is redacted');
  assert.equal((await cli(['channel', 'remove', 'bad'])).code, 0);
});

test('a decision goes to the chat; another chat is ignored; a button answers it once, with the channel', async () => {
  const { run_id: runId } = await piw.startRun(approval());
  const message = await until('the decision in the chat', () => decisionMessage(runId));
  assert.match(message.body.text, /Release 1\.2 to production\?/);
  assert.match(message.body.text, /All checks passed\./);
  assert.deepEqual(message.body.reply_markup.inline_keyboard.flat().map((b) => b.text), ['Ship it', 'Hold']);
  const messageId = messageIdOf(message);

  // Another chat presses the same button and writes an answer: nothing happens.
  const foreign = press(OTHER_CHAT, { messageId }, button(message, 'Ship it'), 'cb-foreign');
  const foreignText = api.push({ message: { message_id: 5, chat: { id: Number(OTHER_CHAT) }, from: { id: 7 }, text: 'ship' } });
  await until('the adapter to pass both updates', () => polledPast(foreignText.update_id));
  assert.equal((await piw.runStatus(runId)).run.status, 'waiting');
  assert.ok(!api.calls.some((c) => c.method === 'answerCallbackQuery' && c.body.callback_query_id === 'cb-foreign'), 'not even acknowledged');
  assert.equal(sentTo(OTHER_CHAT).length, 0);
  assert.ok(foreign.update_id < foreignText.update_id);

  // The configured chat presses "Ship it". The adapter (PIW_CHANNEL_FAULT) dies once after
  // answering and before committing the update's offset: the host restarts it, it gets the
  // same update again and answers with the same request id, which the host replays.
  const pressed = press(CHAT, { messageId }, button(message, 'Ship it'), 'cb-ship');
  const done = await piw.waitForRun(runId, { timeoutMs: 60_000 });
  assert.equal(done.status, 'completed');
  assert.equal(done.result, 'shipped by ship');
  await until('the restarted adapter to commit the update', () => polledPast(pressed.update_id));
  const acks = api.calls.filter((c) => c.method === 'answerCallbackQuery' && c.body.callback_query_id === 'cb-ship');
  assert.equal(acks.length, 2, 'handled by the adapter that died, then once more by its successor');
  for (const ack of acks) assert.equal(ack.body.text, 'Answered: Ship it');
  const answered = events(runId).filter((e) => e.kind === 'decision_answered');
  assert.equal(answered.length, 1);
  assert.deepEqual({ by: answered[0].data.by, channel: answered[0].data.channel }, { by: 'person', channel: `telegram:${CHAT}` });
  assert.ok(api.calls.some((c) => c.method === 'editMessageText' && /Answered here: Ship it/.test(c.body.text)));
  const status = await piw.status();
  const channel = status.channels.find((c) => c.name === 'telegram');
  assert.ok(channel.launches >= 2, `restarted: ${JSON.stringify(channel)}`);
  // Sent once, whatever the restart.
  assert.equal(sentTo(CHAT).filter((c) => c.body.text.includes(runId)).length, 1);
});

test('a decision answered elsewhere gets its message marked closed', async () => {
  const { run_id: runId } = await piw.startRun(approval());
  const message = await until('the decision in the chat', () => decisionMessage(runId));
  const decided = await cli(['run', 'decide', runId, 'hold']);
  assert.equal(decided.code, 0, decided.stderr);
  assert.equal((await piw.waitForRun(runId, { timeoutMs: 60_000 })).result, 'held');
  const edit = await until('the message marked closed', () =>
    api.calls.find((c) => c.method === 'editMessageText' && /Closed: answered elsewhere by the person: Hold/.test(c.body.text)),
  );
  assert.ok(!edit.body.reply_markup, 'without its buttons');
  assert.match(edit.body.text, /Release 1\.2/);
  assert.ok(message);
});

test('a killed adapter is restarted and loses nothing; a text reply answers', async () => {
  const { run_id: runId } = await piw.startRun(approval());
  const message = await until('the decision in the chat', () => decisionMessage(runId));
  // Killed once it has recorded what it sent (a kill between Telegram's answer and that record
  // sends the decision again: sending is at least once, answering exactly once).
  const statePath = join(host.home, 'channels', 'telegram.state.json');
  await until('the message recorded in the adapter\'s state', () => {
    try {
      return Object.values(JSON.parse(readFileSync(statePath, 'utf8')).sent).some((e) => e.run_id === runId);
    } catch {
      return false;
    }
  });
  const before = (await piw.status()).channels[0].launches;
  const adapter = readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .find((p) => {
      try {
        const cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8');
        return cmd.includes('channel-telegram.js') && readFileSync(`/proc/${p}/environ`, 'latin1').includes(`PIW_HOME=${host.home}`);
      } catch {
        return false;
      }
    });
  assert.ok(adapter, 'the adapter runs');
  process.kill(Number(adapter), 'SIGKILL');
  await until('the host to start it again', async () => {
    const c = (await piw.status()).channels[0];
    return c.state === 'running' && c.launches > before;
  });
  // A reply in the chat (no button): its text names the choice.
  api.push({ message: { message_id: 77, chat: { id: Number(CHAT) }, from: { id: 7 }, text: 'Hold', reply_to_message: { message_id: messageIdOf(message) } } });
  assert.equal((await piw.waitForRun(runId, { timeoutMs: 60_000 })).result, 'held');
  assert.equal(sentTo(CHAT).filter((c) => c.body.text.includes(runId)).length, 1, 'not sent again after the restart');
  const answered = events(runId).find((e) => e.kind === 'decision_answered');
  assert.equal(answered.data.channel, `telegram:${CHAT}`);
  // The restarted adapter went on from its durable offset: no earlier update handled again.
  assert.equal(api.calls.filter((c) => c.method === 'answerCallbackQuery' && c.body.callback_query_id === 'cb-ship').length, 2);
});

test('the token is in its own file only: no log, status, list, event or database holds it', async () => {
  const statusOut = (await cli(['host', 'status', '--json'])).stdout;
  const listOut = (await cli(['channel', 'list', '--json'])).stdout;
  assert.match(listOut, /running/);
  const runs = await piw.listRuns();
  const eventsOut = runs.map((r) => JSON.stringify(events(r.run_id))).join('\n');
  const encoded = encodeURIComponent(TOKEN);
  const secret = TOKEN.split(':')[1];
  for (const [what, text] of [['host status', statusOut], ['channel list', listOut], ['events', eventsOut]]) {
    assert.ok(!text.includes(secret) && !text.includes(encoded), `${what} holds the token`);
  }
  const files = [];
  const walk = (dir) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) files.push(p);
    }
  };
  walk(host.home);
  const holders = files.filter((f) => {
    const bytes = readFileSync(f);
    return bytes.includes(secret) || bytes.includes(encoded);
  });
  assert.deepEqual(holders, [join(host.home, 'channels', 'telegram.token')]);
  assert.ok(files.some((f) => f.endsWith('channels/telegram.log')), 'the adapter has a log, checked above');
  assert.ok(files.some((f) => f.endsWith('state.sqlite')), 'the database was checked');
});

/** The message id the fake gave a sendMessage call (they are numbered from 101 in order). */
function messageIdOf(call) {
  return 101 + api.calls.filter((c) => c.method === 'sendMessage' && !c.refused).indexOf(call);
}

test("a decision's audience picks the channels: named ones only, none for an audience that names none (said in the log; still answered by the CLI), every one without", async () => {
  const OPS_CHAT = '5151';
  const added = await cli(['channel', 'add', 'telegram', '--name', 'ops', '--chat', OPS_CHAT, '--token-file', tokenFile]);
  assert.equal(added.code, 0, added.stderr);
  try {
    await until('the ops adapter', async () => (await piw.status()).channels.find((c) => c.name === 'ops')?.state === 'running');
    const asked = (audience) =>
      writeWorkflow(
        host.dir,
        `audience-${Math.random().toString(16).slice(2, 8)}`,
        `const choices = piw.defineHumanChoices({ yes: piw.choice({ label: 'Yes' }), no: piw.choice({ label: 'No' }) });
         export default piw.defineWorkflow({
           name: 'asked', startAt: 'ask',
           nodes: {
             ask: piw.humanDecision({ choices, ${audience === undefined ? '' : `audience: ${JSON.stringify(audience)},`} request: () => ({ title: 'Proceed?' }) }),
             done: piw.compute({ run: ({ outputs }) => outputs.ask.choice }),
           },
           edges: [piw.humanDecisionEdge({ from: 'ask', choices, cases: { yes: 'done', no: 'done' } })],
         });`,
      );
    const start = async (audience) => {
      const { run_id: runId } = await piw.startRun(asked(audience));
      assert.equal((await piw.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 })).status, 'waiting');
      return runId;
    };
    const opsOnly = await start('ops');
    const nobody = await start('reviewers');
    const both = await start('telegram, ops');
    const operator = await start('operator');
    // Started last: once each chat has it, each adapter has scanned the decisions before it.
    const everyone = await start(undefined);
    const has = (chat, runId) => sentTo(chat).some((c) => c.body.reply_markup?.inline_keyboard && c.body.text.includes(runId));
    await until('the decision without audience in both chats', () => has(CHAT, everyone) && has(OPS_CHAT, everyone));
    assert.deepEqual(
      [opsOnly, nobody, both, operator].map((runId) => [has(CHAT, runId), has(OPS_CHAT, runId)]),
      [
        [false, true],
        [false, false],
        [true, true],
        [true, true],
      ],
    );
    // The one no channel got is said so in each adapter's log, and answered from the CLI.
    const logOf = (channel) => {
      try {
        return readFileSync(join(host.home, 'logs', 'channels', `${channel}.log`), 'utf8');
      } catch {
        return '';
      }
    };
    for (const channel of ['telegram', 'ops']) {
      await until(`${channel}'s log`, () => logOf(channel).includes(`of run ${nobody} is for audience "reviewers", which names no configured channel`));
    }
    assert.equal((await cli(['run', 'decide', nobody, 'yes'])).code, 0);
    assert.equal((await piw.waitForRun(nobody, { timeoutMs: 60_000 })).result, 'yes');
    for (const runId of [opsOnly, both, operator, everyone]) await piw.cancelRun(runId);
  } finally {
    assert.equal((await cli(['channel', 'remove', 'ops'])).code, 0);
  }
});
