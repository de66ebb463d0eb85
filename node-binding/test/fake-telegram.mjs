// A fake Telegram Bot API on 127.0.0.1 for the decision channel tests: it records every call
// and holds each `getUpdates` long poll until the test releases an update. A request whose
// token is not `token` is refused (401) with the URL in its description, as a proxy might say
// it: the adapter must take the token out of what it writes.
import { createServer } from 'node:http';

/** The fake Bot API for bot `token`: `{ url, calls, push(update), close() }`. */
export async function fakeTelegram(token) {
  const calls = [];
  const updates = [];
  const polls = new Set();
  let messageId = 100;
  const answerPolls = () => {
    for (const poll of [...polls]) {
      const ready = updates.filter((u) => u.update_id >= poll.offset);
      if (ready.length > 0) {
        polls.delete(poll);
        poll.res.end(JSON.stringify({ ok: true, result: ready }));
      }
    }
  };
  const server = createServer((req, res) => {
    let text = '';
    req.on('data', (c) => (text += c));
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      const m = /^\/bot([^/]+)\/(\w+)$/.exec(req.url ?? '');
      const body = text ? JSON.parse(text) : {};
      if (!m || decodeURIComponent(m[1]) !== token) {
        calls.push({ method: m?.[2] ?? req.url, body, refused: true });
        // Like a proxy that names the URL: the adapter must take the token out of it.
        res.statusCode = 401;
        return res.end(JSON.stringify({ ok: false, error_code: 401, description: `Unauthorized: ${req.url}` }));
      }
      const method = m[2];
      calls.push({ method, body });
      switch (method) {
        case 'getMe':
          return res.end(JSON.stringify({ ok: true, result: { id: 1, is_bot: true, username: 'piw_test_bot' } }));
        case 'sendMessage':
          return res.end(JSON.stringify({ ok: true, result: { message_id: ++messageId, chat: { id: Number(body.chat_id) }, text: body.text } }));
        case 'getUpdates': {
          polls.add({ offset: body.offset ?? 0, res });
          res.on('close', () => polls.forEach((p) => p.res === res && polls.delete(p)));
          return answerPolls();
        }
        default:
          return res.end(JSON.stringify({ ok: true, result: true }));
      }
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${server.address().port}`;
  let nextUpdate = 1;
  return {
    url,
    calls,
    push(update) {
      const u = { update_id: nextUpdate++, ...update };
      updates.push(u);
      answerPolls();
      return u;
    },
    close() {
      server.closeAllConnections();
      server.close();
    },
  };
}
