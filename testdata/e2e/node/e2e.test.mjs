// End-to-end: the official OpenAI Node SDK, unchanged, through gatectl to a fake
// upstream that answers 429 with Retry-After, streams, and reports usage.
//
//   cd testdata/e2e/node && npm ci && node --test
//
// gatectl comes from $GATECTL_BIN, or is built with `go build` from the repo.
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
  gate = await startGatectl(bin, upstream.url);
});

after(async () => {
  await gate?.stop();
  await upstream?.stop();
});

function client(opts = {}) {
  // maxRetries 0: any retry that happens is gatectl's, invisible to the SDK.
  return new OpenAI({ baseURL: `${gate.url}/v1`, apiKey: 'sk-client-unused', maxRetries: 0, timeout: 60000, ...opts });
}

test('a 429 with Retry-After is waited out inside gatectl; the SDK sees a success', { skip }, async () => {
  upstream.rateLimitNext = 1;
  const from = upstream.calls.length;
  const started = Date.now();
  const res = await client().chat.completions.create({ model: 'fake/gpt-e2e', messages: [{ role: 'user', content: 'ping' }] });
  assert.equal(res.choices[0].message.content, 'pong');
  assert.equal(res.usage.total_tokens, 15);
  const calls = upstream.calls.slice(from);
  assert.deepEqual(calls.map((c) => c.status), [429, 200], 'one 429, then one paced retry');
  assert.ok(calls[1].at - calls[0].at >= 900, `the retry came ${calls[1].at - calls[0].at}ms after the 429, before its Retry-After`);
  assert.ok(Date.now() - started >= 900);
  assert.equal(calls[1].auth, 'Bearer sk-e2e-upstream', "gatectl's configured key, not the client's");
});

test('a stream passes through; usage is asked for upstream and not shown to a client that did not ask', { skip }, async () => {
  const from = upstream.calls.length;
  const stream = await client().chat.completions.create({
    model: 'fake/gpt-e2e', stream: true, messages: [{ role: 'user', content: 'ping' }],
  });
  let text = '';
  let sawUsage = false;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    sawUsage ||= !!chunk.usage;
  }
  assert.equal(text, 'pong');
  assert.equal(sawUsage, false);
  assert.equal(upstream.calls[from].includeUsage, true);

  const withUsage = await client().chat.completions.create({
    model: 'fake/gpt-e2e', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'ping' }],
  });
  let usage;
  for await (const chunk of withUsage) usage = chunk.usage ?? usage;
  assert.equal(usage?.total_tokens, 15);
});

test('a burst meets the gate’s pacing, not a retry storm', { skip }, async () => {
  upstream.rateLimitNext = 1;
  const from = upstream.calls.length;
  const n = 12;
  const c = client();
  const results = await Promise.all(Array.from({ length: n }, (_, i) => c.chat.completions.create({
    model: 'fake/gpt-e2e', messages: [{ role: 'user', content: `ping ${i}` }],
  }, { headers: { 'X-Gate-Session': `burst-${i}` } })));
  assert.equal(results.filter((r) => r.choices[0].message.content === 'pong').length, n);
  const calls = upstream.calls.slice(from);
  const rejected = calls.filter((c) => c.status === 429);
  // Calls already on the wire when the first 429 came back may meet the cooldown;
  // nothing gatectl sends after it does, and no call is retried into it twice.
  assert.ok(rejected.length <= n, `${rejected.length} 429s for ${n} calls`);
  assert.equal(calls.filter((c) => c.status === 200).length, n);
  const firstReject = rejected[0].at;
  const late = calls.filter((c) => c.duringCooldown && c.at - firstReject > 200);
  assert.equal(late.length, 0, `${late.length} calls were sent into the cooldown after gatectl knew of it`);
});
