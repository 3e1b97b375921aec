#!/usr/bin/env node
// A fast scripted OpenAI-compatible streaming server for client benchmarks (Node, built-in http only).
//
// It owns the script (TTFT, ITL, tokens per chunk, output length = max_tokens) and its own
// timestamps; it does no inference. Written in Node, not Python, so that it is not the bottleneck
// when a Python client is measured against it. Usage:
//
//   node bench/fast_server.js [--host 127.0.0.1] [--port 0] [--ttft-ms 200] [--itl-ms 20]
//        [--tokens-per-chunk 1] [--events-per-write 1] [--log PATH] [--model NAME] [--warmup-requests N]
//
// --warmup-requests N: before it says LISTENING, the server streams N requests (all at once, 4 tokens
// each, over loopback from this process) to itself and leaves them out of the log and the counters,
// so that the first requests a measured client sends do not pay for V8 compiling the hot paths.
//
// Prints "LISTENING http://HOST:PORT" on stdout once it listens. SIGTERM/SIGINT flush the log
// and exit 0.
//
// Endpoints: POST /v1/completions, POST /v1/chat/completions (streaming SSE or one JSON body),
// GET /v1/models, GET /health, GET /metrics (empty), GET /stats (counters as JSON).
// Each request produces exactly max_tokens (or max_completion_tokens; default 16) output tokens,
// `tokens-per-chunk` tokens per SSE event ("x" then " x" per token), the first event TTFT ms after
// the request body arrived, the next ones ITL ms apart on an absolute schedule (no drift);
// ITL 0 = as fast as the socket drains; then --events-per-write E hands E events to the socket in
// one write (what a client that lags behind a fast server reads anyway), so that the server's
// per-write cost does not cap an ingest benchmark. With stream_options.include_usage a final usage-only
// chunk follows (choices: []); continuous_usage_stats adds usage to every chunk. [DONE] ends it.
//
// Timestamp log (--log PATH, JSONL, one line per finished request), cheap on the hot path: numbers
// are pushed to an array and lines are appended to the file in batches, never per chunk.
//   {"id":n, "recv_ms":t, "body_ms":t, "send_ms":[t...], "tokens":[k...], "end_ms":t,
//    "max_tokens":N, "prompt_chars":P, "prompt_sha256":"hex", "complete":true|false}
// Times are milliseconds on CLOCK_MONOTONIC (process.hrtime's clock, read through performance.now()
// plus a constant offset: sub-microsecond resolution), the clock Python's time.perf_counter() and
// time.monotonic() read on Linux, so a client's own stamps can be paired with these;
// prompt_sha256 = sha256 of the prompt text (UTF-8), or of the JSON token-id list without spaces,
// or of the messages' JSON for chat (what kneecap records as prompt_hash); recv_ms = request headers parsed, body_ms = body fully read, send_ms[i] = right after
// the i-th token-bearing event was handed to the socket. Server-side TTFT = send_ms[0] - recv_ms
// and server-side ITL = the gaps of send_ms: a client's own numbers minus these are the error
// the client adds.
'use strict';

const http = require('http');
const crypto = require('crypto');
const fs = require('fs');
const { performance } = require('perf_hooks');

// CLOCK_MONOTONIC in ms = performance.now() + a constant (both come from libuv's uv_hrtime).
const MONO_OFFSET_MS = Number(process.hrtime.bigint()) / 1e6 - performance.now();
const now = () => MONO_OFFSET_MS + performance.now();

function parseArgs(argv) {
  const opts = { host: '127.0.0.1', port: 0, ttftMs: 200, itlMs: 20, tokensPerChunk: 1, eventsPerWrite: 1,
                 log: null, model: 'fast-scripted', warmup: 0 };
  const names = { '--host': 'host', '--port': 'port', '--ttft-ms': 'ttftMs', '--itl-ms': 'itlMs',
                  '--tokens-per-chunk': 'tokensPerChunk', '--events-per-write': 'eventsPerWrite',
                  '--log': 'log', '--model': 'model', '--warmup-requests': 'warmup' };
  for (let i = 2; i < argv.length; i += 2) {
    const key = names[argv[i]];
    if (!key || i + 1 >= argv.length) {
      process.stderr.write(`error: unknown or incomplete flag ${argv[i]} — see the header of fast_server.js\n`);
      process.exit(2);
    }
    opts[key] = ['host', 'log', 'model'].includes(key) ? argv[i + 1] : Number(argv[i + 1]);
    if (typeof opts[key] === 'number' && !(opts[key] >= 0)) {
      process.stderr.write(`error: ${argv[i]} needs a number >= 0, got ${argv[i + 1]}\n`);
      process.exit(2);
    }
  }
  for (const [flag, key] of [['--tokens-per-chunk', 'tokensPerChunk'], ['--events-per-write', 'eventsPerWrite']]) {
    if (!(opts[key] >= 1) || !Number.isInteger(opts[key])) {
      process.stderr.write(`error: ${flag} must be an integer >= 1\n`);
      process.exit(2);
    }
  }
  return opts;
}

const opts = parseArgs(process.argv);
const stats = { requests: 0, completed: 0, aborted: 0, bad_requests: 0, events: 0, tokens: 0 };

// ---- timestamp log: buffered, appended in batches --------------------------------------------
let logFd = opts.log ? fs.openSync(opts.log, 'a') : null;
let pending = [];
function flushLog(sync) {
  if (logFd === null || pending.length === 0) return;
  const text = pending.join('');
  pending = [];
  if (sync) fs.writeSync(logFd, text);
  else fs.write(logFd, text, () => {});
}
if (logFd !== null) setInterval(() => flushLog(false), 250).unref();

function finish(rec) {
  if (logFd === null || rec.warmup) return;
  pending.push(`{"id":${rec.id},"recv_ms":${rec.recv},"body_ms":${rec.body},"send_ms":[${rec.sends.join(',')}],` +
    `"tokens":[${rec.tokens.join(',')}],"end_ms":${rec.end},"max_tokens":${rec.maxTokens},` +
    `"prompt_chars":${rec.promptChars},"prompt_sha256":"${rec.promptSha}","complete":${rec.complete}}\n`);
}

// ---- responses ------------------------------------------------------------------------------
function chunkText(first, k) {
  return (first ? 'x' : ' x') + ' x'.repeat(k - 1);
}

function usageJson(prompt, completion) {
  return `{"prompt_tokens":${prompt},"completion_tokens":${completion},"total_tokens":${prompt + completion}}`;
}

function promptTokens(body, chat) {
  // A cheap stand-in for a tokenizer: whitespace-separated words, or the length of a token-id list.
  let p = chat ? (body.messages || []).map((m) => (typeof m.content === 'string' ? m.content : '')).join(' ') : body.prompt;
  if (Array.isArray(p)) return p.length > 0 && typeof p[0] === 'number' ? p.length : p.join(' ').split(/\s+/).length;
  if (typeof p !== 'string') return 0;
  const trimmed = p.trim();
  return trimmed ? trimmed.split(/\s+/).length : 0;
}

function promptSha256(body, chat) {
  // As kneecap hashes prompts (kneecap.client.prompts.prompt_sha256): text as UTF-8, token ids as compact JSON.
  const p = chat ? body.messages : body.prompt;
  const data = typeof p === 'string' ? p : JSON.stringify(p === undefined ? null : p);
  return crypto.createHash('sha256').update(data, 'utf8').digest('hex');
}

function promptChars(body, chat) {
  const p = chat ? JSON.stringify(body.messages || []) : body.prompt;
  return typeof p === 'string' ? p.length : Array.isArray(p) ? p.length : 0;
}

let nextId = 0;

function handleGenerate(req, res, chat, recv) {
  const parts = [];
  req.on('data', (c) => parts.push(c));
  // Stamp the body's arrival in the poll phase, then leave the rest (JSON, hashing, headers, timers) to
  // the check phase (setImmediate): when hundreds of requests arrive in one burst, each one's arrival
  // stamp then waits only for the others' HTTP parsing, not for their whole handling.
  req.on('end', () => {
    const bodyAt = now();
    setImmediate(respond, bodyAt);
  });
  function respond(bodyAt) {
    let body;
    try {
      body = JSON.parse(Buffer.concat(parts).toString('utf8'));
      if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new Error('not an object');
    } catch (e) {
      stats.bad_requests++;
      res.writeHead(400, { 'Content-Type': 'application/json' });
      res.end('{"error":{"message":"request body is not a JSON object","type":"invalid_request_error"}}');
      return;
    }
    const id = nextId++;
    stats.requests++;
    const maxTokens = Number(body.max_completion_tokens ?? body.max_tokens ?? 16);
    if (!(maxTokens >= 1)) {
      stats.bad_requests++;
      res.writeHead(400, { 'Content-Type': 'application/json' });
      res.end('{"error":{"message":"max_tokens must be >= 1","type":"invalid_request_error"}}');
      return;
    }
    const nPrompt = promptTokens(body, chat);
    const rec = { id, recv, body: bodyAt, sends: [], tokens: [], end: 0, maxTokens, warmup: !!req.headers['x-fast-server-warmup'],
                  promptChars: promptChars(body, chat), promptSha: logFd === null ? '' : promptSha256(body, chat),
                  complete: false };
    const created = Math.floor(Date.now() / 1000);
    const rid = (chat ? 'chatcmpl-' : 'cmpl-') + id;
    const model = body.model || opts.model;
    if (!body.stream) {
      setTimeout(() => {
        const text = chunkText(true, 1) + ' x'.repeat(maxTokens - 1);
        const choice = chat
          ? `{"index":0,"message":{"role":"assistant","content":"${text}"},"finish_reason":"length"}`
          : `{"index":0,"text":"${text}","logprobs":null,"finish_reason":"length"}`;
        const payload = `{"id":"${rid}","object":"${chat ? 'chat.completion' : 'text_completion'}","created":${created},` +
          `"model":${JSON.stringify(model)},"choices":[${choice}],"usage":${usageJson(nPrompt, maxTokens)}}`;
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(payload);
        rec.sends.push(now());
        rec.tokens.push(maxTokens);
        rec.end = rec.sends[0];
        rec.complete = true;
        stats.completed++;
        stats.tokens += maxTokens;
        finish(rec);
      }, opts.ttftMs + opts.itlMs * (maxTokens - 1));
      return;
    }

    const so = body.stream_options || {};
    const includeUsage = !!so.include_usage;
    const continuous = !!so.continuous_usage_stats;
    const head = `data: {"id":"${rid}","object":"${chat ? 'chat.completion.chunk' : 'text_completion'}",` +
      `"created":${created},"model":${JSON.stringify(model)},"choices":[{"index":0,`;
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
    res.flushHeaders();

    let sent = 0;
    let timer = null;
    let closed = false;
    res.on('close', () => {
      if (timer !== null) clearTimeout(timer);
      if (!rec.complete) {
        closed = true;
        stats.aborted++;
        rec.end = now();
        finish(rec);
      }
    });
    const start = bodyAt + opts.ttftMs;
    let due = start;  // when the next event may go out (ms, CLOCK_MONOTONIC)

    function event() {
      const k = Math.min(opts.tokensPerChunk, maxTokens - sent);
      const text = chunkText(sent === 0, k);
      sent += k;
      const last = sent >= maxTokens;
      const finishReason = last ? '"length"' : 'null';
      const content = chat
        ? `"delta":{${sent === k ? '"role":"assistant",' : ''}"content":"${text}"},"logprobs":null,"finish_reason":${finishReason}}]`
        : `"text":"${text}","logprobs":null,"finish_reason":${finishReason}}]`;
      const usage = continuous ? `,"usage":${usageJson(nPrompt, sent)}` : '';
      rec.tokens.push(k);
      stats.events++;
      stats.tokens += k;
      return head + content + usage + '}\n\n';
    }

    function sendNext() {
      timer = null;
      if (closed) return;
      // libuv timers count from the loop's cached time and may fire early: never send before due
      const early = due - now();
      if (early > 0) {
        timer = setTimeout(sendNext, early);
        return;
      }
      let data = event();
      const burst = opts.itlMs === 0 ? opts.eventsPerWrite : 1;
      let inWrite = 1;
      while (inWrite < burst && sent < maxTokens) {
        data += event();
        inWrite++;
      }
      const last = sent >= maxTokens;
      if (last && includeUsage) {
        data += `data: {"id":"${rid}","object":"${chat ? 'chat.completion.chunk' : 'text_completion'}",` +
          `"created":${created},"model":${JSON.stringify(model)},"choices":[],"usage":${usageJson(nPrompt, maxTokens)}}\n\n`;
      }
      if (last) {
        res.end(data + 'data: [DONE]\n\n');
      }
      const ok = last ? true : res.write(data);
      const sentAt = now();
      for (let i = 0; i < inWrite; i++) rec.sends.push(sentAt);
      if (last) {
        rec.end = sentAt;
        rec.complete = true;
        stats.completed++;
        finish(rec);
        return;
      }
      schedule(ok);
    }

    function schedule(drained) {
      if (opts.itlMs === 0) {
        if (drained) setImmediate(sendNext);
        else res.once('drain', sendNext);
        return;
      }
      due = start + Math.ceil(sent / opts.tokensPerChunk) * opts.itlMs;
      timer = setTimeout(sendNext, Math.max(0, due - now()));
    }

    timer = setTimeout(sendNext, Math.max(0, start - now()));
  }
}

const server = http.createServer((req, res) => {
  const recv = now();
  const path = req.url.split('?')[0];
  if (req.method === 'POST' && (path === '/v1/completions' || path === '/completions')) return handleGenerate(req, res, false, recv);
  if (req.method === 'POST' && (path === '/v1/chat/completions' || path === '/chat/completions')) return handleGenerate(req, res, true, recv);
  req.resume();
  if (req.method === 'GET' && (path === '/health' || path === '/v1/health')) {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    return res.end('{"status":"ok"}');
  }
  if (req.method === 'GET' && (path === '/v1/models' || path === '/models')) {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    return res.end(`{"object":"list","data":[{"id":${JSON.stringify(opts.model)},"object":"model","owned_by":"kneecap-bench"}]}`);
  }
  if (req.method === 'GET' && path === '/metrics') {
    res.writeHead(200, { 'Content-Type': 'text/plain; version=0.0.4' });
    return res.end('');
  }
  if (req.method === 'GET' && path === '/stats') {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    return res.end(JSON.stringify(stats));
  }
  res.writeHead(404, { 'Content-Type': 'application/json' });
  res.end(`{"error":{"message":"no route ${req.method} ${path}","type":"not_found"}}`);
});
server.keepAliveTimeout = 120000;
server.headersTimeout = 125000;
server.requestTimeout = 0;
server.maxRequestsPerSocket = 0;

function shutdown() {
  flushLog(true);
  if (logFd !== null) fs.closeSync(logFd);
  logFd = null;
  process.exit(0);
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);

function warmUp(port, n, done) {
  if (n <= 0) return done();
  const agent = new http.Agent({ keepAlive: true, maxSockets: n });
  let left = n;
  const body = JSON.stringify({ model: opts.model, prompt: 'warm up', max_tokens: 4, stream: true });
  const oneDone = () => { if (--left === 0) { agent.destroy(); done(); } };
  for (let i = 0; i < n; i++) {
    const req = http.request({ host: opts.host, port, path: '/v1/completions', method: 'POST', agent,
      headers: { 'Content-Type': 'application/json', 'x-fast-server-warmup': '1' } }, (res) => {
      res.on('data', () => {});
      res.on('end', oneDone);
      res.on('error', oneDone);
    });
    req.on('error', oneDone);
    req.end(body);
  }
}

server.listen({ host: opts.host, port: opts.port, backlog: 4096 }, () => {
  const a = server.address();
  warmUp(a.port, opts.warmup, () => {
    for (const k of Object.keys(stats)) stats[k] = 0;
    process.stdout.write(`LISTENING http://${a.address}:${a.port}\n`);
  });
});
