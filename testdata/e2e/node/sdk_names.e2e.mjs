// End-to-end: the official Anthropic and OpenAI SDKs, unchanged, through
// gatectl with the model names their code already has (gpt-4o,
// claude-sonnet-4-5, claude-3-5-sonnet-latest): no pool and no alias is
// configured, the embedded default's patterns route them. Errors reach each
// SDK as its own typed errors.
//
//   cd testdata/e2e/node && npm ci && node --test sdk_names.e2e.mjs
//
// (Not named *.test.mjs: `node --test` alone runs e2e.test.mjs; the Go test
// TestProxyE2ESDKModelNames runs this file.)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { existsSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startGatectl, gatectlBinary } from './harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const haveSDKs = existsSync(join(here, 'node_modules', 'openai')) && existsSync(join(here, 'node_modules', '@anthropic-ai', 'sdk'));
const skip = !haveSDKs ? 'the SDKs are not installed: run `npm ci` in testdata/e2e/node' : false;

// A fake provider of both kinds: OpenAI's chat completions and Anthropic's
// messages and count_tokens. A model name holding "ratelimited" gets a 429
// with a plain-text body (as a proxy in front of a provider answers), one
// holding "overloaded" Anthropic's own 529.
class FakeProvider {
  constructor() {
    this.calls = [];
    this.server = createServer((req, res) => this.handle(req, res));
  }

  async start() {
    await new Promise((ok) => this.server.listen(0, '127.0.0.1', ok));
    this.url = `http://127.0.0.1:${this.server.address().port}`;
  }

  stop() {
    this.server.closeAllConnections?.();
    return new Promise((ok) => this.server.close(ok));
  }

  handle(req, res) {
    let raw = '';
    req.on('data', (c) => (raw += c));
    req.on('end', () => {
      const body = JSON.parse(raw || '{}');
      this.calls.push({ path: req.url, model: body.model, key: req.headers['x-api-key'] ?? req.headers.authorization });
      const json = (status, obj, headers = {}) => {
        res.writeHead(status, { 'content-type': 'application/json', ...headers });
        res.end(JSON.stringify(obj));
      };
      if (String(body.model).includes('ratelimited')) {
        res.writeHead(429, { 'content-type': 'text/plain', 'retry-after': '2' });
        res.end('Too Many Requests');
        return;
      }
      if (String(body.model).includes('overloaded')) {
        json(529, { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } });
        return;
      }
      if (req.url === '/v1/chat/completions') {
        json(200, {
          id: 'chatcmpl-e2e', object: 'chat.completion', created: 1, model: body.model,
          choices: [{ index: 0, message: { role: 'assistant', content: 'pong' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 },
        });
        return;
      }
      if (req.url === '/v1/messages/count_tokens') {
        json(200, { input_tokens: 17 });
        return;
      }
      if (req.url === '/v1/messages' && !body.stream) {
        json(200, {
          id: 'msg_e2e', type: 'message', role: 'assistant', model: body.model,
          content: [{ type: 'text', text: 'pong' }], stop_reason: 'end_turn', stop_sequence: null,
          usage: { input_tokens: 12, output_tokens: 3 },
        });
        return;
      }
      if (req.url === '/v1/messages') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const ev = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
        ev('message_start', { message: { id: 'msg_e2e', type: 'message', role: 'assistant', model: body.model, content: [],
          stop_reason: null, stop_sequence: null, usage: { input_tokens: 12, output_tokens: 1 } } });
        ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
        ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'po' } });
        ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'ng' } });
        ev('content_block_stop', { index: 0 });
        ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 3 } });
        ev('message_stop', {});
        res.end();
        return;
      }
      json(404, { error: { message: `no ${req.url}` } });
    });
  }
}

let upstream;
let gate;
let Anthropic;
let OpenAI;

before(async () => {
  if (skip) return;
  Anthropic = (await import('@anthropic-ai/sdk')).default;
  OpenAI = (await import('openai')).default;
  const bin = gatectlBinary();
  if (!bin) throw new Error('no gatectl binary: set GATECTL_BIN or install Go');
  upstream = new FakeProvider();
  await upstream.start();
  // Providers named as the embedded default names them, and no models:
  // section: the default's gpt-*, claude-* patterns apply. retry.rounds 0:
  // a failure comes straight back, so each SDK's error handling is what runs.
  gate = await startGatectl(bin, upstream.url, `
log: {level: error}
providers:
  openai:    {kind: openai, baseURL: ${upstream.url}/v1, apiKeyEnv: GATECTL_E2E_KEY}
  anthropic: {kind: anthropic, baseURL: ${upstream.url}, apiKeyEnv: GATECTL_E2E_KEY}
retry: {rounds: 0}
`);
});

after(async () => {
  await gate?.stop();
  await upstream?.stop();
});

// maxRetries 0: an error is what gatectl answered, not the SDK's own retry.
const anthropic = () => new Anthropic({ baseURL: gate.url, apiKey: 'sk-ant-client', maxRetries: 0, timeout: 30000 });
const openai = () => new OpenAI({ baseURL: `${gate.url}/v1`, apiKey: 'sk-client', maxRetries: 0, timeout: 30000 });
const hello = [{ role: 'user', content: 'ping' }];

test('Anthropic SDK: claude-sonnet-4-5 and claude-3-5-sonnet-latest, as written', { skip }, async () => {
  for (const model of ['claude-sonnet-4-5', 'claude-3-5-sonnet-latest']) {
    const from = upstream.calls.length;
    const msg = await anthropic().messages.create({ model, max_tokens: 64, messages: hello });
    assert.equal(msg.content[0].text, 'pong');
    assert.equal(upstream.calls[from].model, model, 'the name goes upstream as sent');
    assert.equal(upstream.calls[from].key, 'sk-e2e-upstream', "gatectl's key, not the client's");
  }
});

test('Anthropic SDK: a stream passes through event by event', { skip }, async () => {
  const stream = anthropic().messages.stream({ model: 'claude-sonnet-4-5', max_tokens: 64, messages: hello });
  let text = '';
  stream.on('text', (t) => (text += t));
  const final = await stream.finalMessage();
  assert.equal(text, 'pong');
  assert.equal(final.usage.output_tokens, 3);
});

test('Anthropic SDK: count_tokens is proxied', { skip }, async () => {
  const from = upstream.calls.length;
  const n = await anthropic().messages.countTokens({ model: 'claude-sonnet-4-5', messages: hello });
  assert.equal(n.input_tokens, 17);
  assert.equal(upstream.calls[from].path, '/v1/messages/count_tokens');
  assert.equal(upstream.calls[from].key, 'sk-e2e-upstream');
});

test('Anthropic SDK: a 429 is a RateLimitError', { skip }, async () => {
  await assert.rejects(
    anthropic().messages.create({ model: 'claude-ratelimited-1', max_tokens: 64, messages: hello }),
    (err) => {
      assert.ok(err instanceof Anthropic.RateLimitError, `${err?.constructor?.name}: ${err}`);
      assert.equal(err.status, 429);
      assert.equal(err.type, 'rate_limit_error');
      assert.match(err.apiMessage, /answered 429: Too Many Requests/);
      assert.equal(err.headers.get('retry-after'), '2');
      return true;
    },
  );
});

test('Anthropic SDK: a 529 is an OverloadedError', { skip }, async () => {
  await assert.rejects(
    anthropic().messages.create({ model: 'claude-overloaded-1', max_tokens: 64, messages: hello }),
    (err) => {
      assert.ok(err instanceof Anthropic.OverloadedError || err instanceof Anthropic.InternalServerError, `${err?.constructor?.name}: ${err}`);
      assert.equal(err.type, 'overloaded_error');
      return true;
    },
  );
});

test("Anthropic SDK: gatectl's own 400 is a BadRequestError with gatectl's message", { skip }, async () => {
  await assert.rejects(
    anthropic().messages.create({ model: 'llama-3-70b', max_tokens: 64, messages: hello }),
    (err) => {
      assert.ok(err instanceof Anthropic.BadRequestError, `${err?.constructor?.name}: ${err}`);
      assert.equal(err.type, 'invalid_request_error');
      assert.match(err.apiMessage, /unknown model "llama-3-70b"; use a pool/);
      return true;
    },
  );
  await assert.rejects(
    anthropic().messages.countTokens({ model: 'gpt-4o', messages: hello }),
    (err) => err instanceof Anthropic.BadRequestError && /openai-kind: send its requests to/.test(err.apiMessage),
  );
});

test('Anthropic SDK: models.list and models.retrieve show the names /v1/messages takes', { skip }, async () => {
  const ids = [];
  for await (const m of anthropic().models.list()) ids.push(m.id);
  assert.ok(ids.includes('claude-*'), ids.join(', '));
  assert.ok(!ids.includes('gpt-*'), 'an OpenAI-kind name is not offered to the Anthropic SDK');
  const m = await anthropic().models.retrieve('claude-sonnet-4-5');
  assert.equal(m.id, 'claude-sonnet-4-5');
  await assert.rejects(anthropic().models.retrieve('gpt-4o'), (err) => err instanceof Anthropic.NotFoundError && err.type === 'not_found_error');
});

test('OpenAI SDK: gpt-4o, as written', { skip }, async () => {
  const from = upstream.calls.length;
  const res = await openai().chat.completions.create({ model: 'gpt-4o', messages: hello });
  assert.equal(res.choices[0].message.content, 'pong');
  assert.equal(upstream.calls[from].model, 'gpt-4o');
  const ids = [];
  for await (const m of openai().models.list()) ids.push(m.id);
  assert.ok(ids.includes('gpt-*') && ids.includes('claude-*') && ids.includes('openai/*'), ids.join(', '));
  const m = await openai().models.retrieve('gpt-4o');
  assert.equal(m.owned_by, 'openai');
});

test('OpenAI SDK: a 429 is a RateLimitError, a 400 a BadRequestError', { skip }, async () => {
  await assert.rejects(openai().chat.completions.create({ model: 'gpt-ratelimited', messages: hello }),
    (err) => err instanceof OpenAI.RateLimitError && err.status === 429);
  await assert.rejects(openai().chat.completions.create({ model: 'llama-3-70b', messages: hello }),
    (err) => err instanceof OpenAI.BadRequestError && /unknown model "llama-3-70b"/.test(err.message));
});
