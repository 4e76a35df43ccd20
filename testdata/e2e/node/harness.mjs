// Test harness: a fake OpenAI-compatible upstream on loopback, and gatectl
// started in front of it. Used by e2e.test.mjs.
import { spawn, execFileSync } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdtempSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, '..', '..', '..');

// gatectlBinary returns the gatectl binary: $GATECTL_BIN, or one built now with
// the Go toolchain; null when neither is possible.
export function gatectlBinary() {
  if (process.env.GATECTL_BIN) return process.env.GATECTL_BIN;
  const out = join(mkdtempSync(join(tmpdir(), 'gatectl-bin-')), 'gatectl');
  try {
    execFileSync('go', ['build', '-o', out, './cmd/gatectl'], { cwd: repoRoot, stdio: 'inherit' });
    return out;
  } catch {
    return null;
  }
}

// FakeUpstream answers /v1/chat/completions. It keeps a cooldown like a real
// provider: while it runs, every call gets a 429 with Retry-After (counted as a
// call that ignored the pacing); `rateLimitNext` makes the next call start one.
export class FakeUpstream {
  constructor() {
    this.calls = []; // {at, stream, includeUsage, status, auth}
    this.cooldownUntil = 0;
    this.rateLimitNext = 0;
    this.retryAfterSec = 1;
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
      const now = Date.now();
      const call = {
        at: now, path: req.url, model: body.model, stream: !!body.stream,
        includeUsage: !!body.stream_options?.include_usage, auth: req.headers.authorization,
      };
      this.calls.push(call);
      if (now < this.cooldownUntil || this.rateLimitNext > 0) {
        if (now >= this.cooldownUntil) {
          this.rateLimitNext--;
          this.cooldownUntil = now + this.retryAfterSec * 1000;
        } else {
          call.duringCooldown = true;
        }
        call.status = 429;
        res.writeHead(429, { 'content-type': 'application/json', 'retry-after': String(this.retryAfterSec) });
        res.end(JSON.stringify({ error: { message: 'Rate limit reached for requests', type: 'requests', code: 'rate_limit_exceeded' } }));
        return;
      }
      call.status = 200;
      const usage = { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 };
      if (!body.stream) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({
          id: 'chatcmpl-e2e', object: 'chat.completion', created: 1, model: body.model,
          choices: [{ index: 0, message: { role: 'assistant', content: 'pong' }, finish_reason: 'stop' }],
          usage,
        }));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const chunk = (delta, finish = null) => `data: ${JSON.stringify({
        id: 'chatcmpl-e2e', object: 'chat.completion.chunk', created: 1, model: body.model,
        choices: [{ index: 0, delta, finish_reason: finish }],
      })}\n\n`;
      res.write(chunk({ role: 'assistant', content: 'po' }));
      res.write(chunk({ content: 'ng' }));
      res.write(chunk({}, 'stop'));
      if (body.stream_options?.include_usage) {
        res.write(`data: ${JSON.stringify({ id: 'chatcmpl-e2e', object: 'chat.completion.chunk', created: 1, model: body.model, choices: [], usage })}\n\n`);
      }
      res.end('data: [DONE]\n\n');
    });
  }
}

// startGatectl runs gatectl serve on a free loopback port in front of
// upstreamURL, on yaml when given (else a config with one openai-kind provider
// "fake"). GATECTL_E2E_KEY holds the upstream key.
export async function startGatectl(bin, upstreamURL, yaml) {
  const dir = mkdtempSync(join(tmpdir(), 'gatectl-e2e-'));
  const cfg = join(dir, 'gatectl.yaml');
  writeFileSync(cfg, yaml ?? `
log: {level: error}
providers:
  fake: {kind: openai, baseURL: ${upstreamURL}/v1, apiKeyEnv: GATECTL_E2E_KEY}
retry:
  rounds: 8
  hintClamp: {min: 100ms, max: 10s}
`);
  const proc = spawn(bin, ['serve', '--config', cfg, '--listen', '127.0.0.1:0', '--state-dir', join(dir, 'state'), '--grace', '1s'], {
    env: { ...process.env, GATECTL_E2E_KEY: 'sk-e2e-upstream' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  proc.stderr.on('data', (d) => (stderr += d));
  const url = await new Promise((ok, fail) => {
    let out = '';
    const timer = setTimeout(() => fail(new Error(`gatectl did not start: ${stderr}`)), 30000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/\S+)/);
      if (m) { clearTimeout(timer); ok(m[1]); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); fail(new Error(`gatectl exited ${code}: ${stderr}`)); });
  });
  return {
    url,
    stop: () => new Promise((ok) => { proc.once('exit', ok); proc.kill('SIGTERM'); }),
    logs: () => stderr,
  };
}

export const haveSDK = existsSync(join(here, 'node_modules', 'openai'));
