// End-to-end: the official OpenAI Node SDK streaming through a 30 s hold in
// gatectl. The upstream answers the first call 429 with Retry-After: 30; gatectl
// records the cooldown and holds the retry in its gate for 30 s. Without a byte
// in that time the SDK's own timeout (10 s here) would fire; with the visible
// waits the SDK gets its headers after proxy.holdNotice and an SSE comment
// every proxy.holdNoticeEvery, and the stream completes.
//
//   cd testdata/e2e/node && npm ci && node --test
//
// This is the one long test of the suite (about 30 s of real time).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { FakeUpstream, startGatectl, gatectlBinary, haveSDK } from './harness.mjs';

const skip = !haveSDK ? 'the openai package is not installed: run `npm ci` in testdata/e2e/node' : false;

let upstream;
let gate;
let OpenAI;

before(async () => {
  if (skip) return;
  OpenAI = (await import('openai')).default;
  const bin = gatectlBinary();
  if (!bin) throw new Error('no gatectl binary: set GATECTL_BIN or install Go');
  upstream = new FakeUpstream();
  await upstream.start();
  gate = await startGatectl(bin, upstream.url, `
log: {level: info}
providers:
  fake: {kind: openai, baseURL: ${upstream.url}/v1, apiKeyEnv: GATECTL_E2E_KEY}
proxy:
  holdNotice: 2s
  holdNoticeEvery: 5s
`);
});

after(async () => {
  await gate?.stop();
  await upstream?.stop();
});

// recordingFetch passes every response on unchanged and keeps a copy of its
// raw bytes, with the time each chunk arrived: the SDK skips SSE comments, the
// copy shows them.
function recordingFetch(chunks) {
  return async (url, init) => {
    const res = await fetch(url, init);
    if (!res.body) return res;
    const [forSDK, forTest] = res.body.tee();
    (async () => {
      const dec = new TextDecoder();
      for await (const c of forTest) chunks.push({ at: Date.now(), text: dec.decode(c, { stream: true }) });
    })();
    return new Response(forSDK, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

test('an SDK stream held 30 s by the gate gets keepalive comments and completes', { skip, timeout: 90000 }, async () => {
  upstream.rateLimitNext = 1;
  upstream.retryAfterSec = 30;
  const chunks = [];
  // timeout 10 s: shorter than the hold, so only bytes arriving in time keep it alive.
  const client = new OpenAI({ baseURL: `${gate.url}/v1`, apiKey: 'sk-client-unused', maxRetries: 0, timeout: 10000, fetch: recordingFetch(chunks) });
  const started = Date.now();
  const stream = await client.chat.completions.create({ model: 'fake/gpt-e2e', messages: [{ role: 'user', content: 'ping' }], stream: true });
  const headersAfter = Date.now() - started;
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  const took = Date.now() - started;

  assert.equal(text, 'pong');
  assert.ok(headersAfter < 5000, `headers after ${headersAfter}ms, want them at proxy.holdNotice (2 s)`);
  assert.ok(took >= 29000, `completed after ${took}ms: the gate should have held it ~30 s`);
  assert.deepEqual(upstream.calls.slice(-2).map((c) => c.status), [429, 200], 'one 429, one retry after the cooldown');

  const raw = chunks.map((c) => c.text).join('');
  const comments = raw.split('\n').filter((l) => l.startsWith(': gatectl waiting '));
  assert.ok(comments.length >= 5, `${comments.length} keepalive comments in a 30 s hold, want one every 5 s:\n${raw}`);
  assert.match(comments[0], /^: gatectl waiting \d+s \(rate limit on fake\/gpt-e2e, about \d+s left\)$/);
  // No silence as long as the SDK's timeout before the first data event.
  const firstData = chunks.findIndex((c) => c.text.includes('data: '));
  let last = started;
  for (const c of chunks.slice(0, firstData + 1)) {
    assert.ok(c.at - last < 9000, `${c.at - last}ms without a byte while held`);
    last = c.at;
  }
});
