// `/workflow channel` in Pi: a decision channel added (its token asked in a dialog, never typed
// into the command), listed, tested against a fake Telegram Bot API on 127.0.0.1 and removed,
// as `piw channel` does from a shell. The token reaches neither the session nor Pi's output.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, test } from 'node:test';

import { fakeTelegram } from '../fake-telegram.mjs';
import { piEnv, until } from './harness.mjs';

const TOKEN = '7345012345:AAH-pi-command-test-token_0123456789';

let env;
let api;
beforeEach(async () => {
  env = await piEnv();
  api = await fakeTelegram(TOKEN);
});
afterEach(async () => {
  await env?.close();
  api?.close();
});

/** Runs `/workflow <words>` and resolves with the notification it gave. */
async function command(pi, words) {
  const from = pi.mark();
  await pi.prompt(`/workflow ${words}`);
  const said = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'notify', `the answer to /workflow ${words}`, from);
  return said.message;
}

test('/workflow channel adds (the token in a dialog), lists, tests and removes a Telegram channel', async () => {
  const pi = await env.startPi({ sessionId: 'chan', extraEnv: { PIW_TELEGRAM_API: api.url } });
  assert.match(await command(pi, 'channel list'), /no channels/);

  // The token is asked for, not typed: a command line that carries one is refused.
  assert.match(await command(pi, `channel add telegram --chat 4242 --token ${TOKEN}`), /never typed into a command/);
  const from = pi.mark();
  const adding = pi.prompt('/workflow channel add telegram --chat 4242');
  const ask = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'input', 'the token dialog', from);
  pi.respondUi(ask.id, { value: TOKEN });
  await adding;
  const added = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'notify', 'the channel added', from);
  assert.match(added.message, /telegram/);

  const listed = await command(pi, 'channel list');
  assert.match(listed, /telegram\s+telegram\s+4242/);
  assert.match(await command(pi, 'channel test telegram'), /.+/);
  await until(() => api.calls.find((c) => c.method === 'sendMessage' && String(c.body.chat_id) === '4242'), 'the test message sent to the chat');

  assert.match(await command(pi, 'channel remove telegram'), /telegram/);
  assert.match(await command(pi, 'channel list'), /no channels/);
  assert.match(await command(pi, 'channel nope'), /list\|add\|test\|remove/);

  // The token went from the dialog to piw's standard input: nothing Pi printed holds it.
  assert.equal(JSON.stringify(pi.events.filter((e) => !(e.type === 'extension_ui_response'))).includes(TOKEN), false);
  await pi.quit();
});
