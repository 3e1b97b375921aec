#!/usr/bin/env node
// A fast scripted OpenAI-compatible streaming server for client benchmarks (Node, built-in net only:
// HTTP/1.1 is parsed and written here, see "HTTP/1.1 over net" below for why).
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
// or of the messages' JSON for chat (what kneecap records as prompt_hash); recv_ms = the socket's
// 'data' event that brought the request's first byte, stamped before anything is parsed; body_ms =
// the 'data' event that completed the body; send_ms[i] = right after the i-th token-bearing event was
// handed to the socket (libuv writes it to the kernel at once unless earlier bytes are still queued). Server-side TTFT = send_ms[0] - recv_ms
// and server-side ITL = the gaps of send_ms: a client's own numbers minus these are the error
// the client adds.
'use strict';

const http = require('http');  // only to warm up (a client)
const net = require('net');
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

// ---- HTTP/1.1 over net: just what OpenAI-compatible clients send -------------------------------
// Why not the http module: its per-request machinery (llhttp callbacks, IncomingMessage,
// ServerResponse, chunked encoding with cork/nextTick) runs before a request's arrival can be
// stamped and again on every event written; with 256 streams in lockstep that work delays the
// arrival stamps of new requests by milliseconds, and the comparison would count it against the
// client. Here each socket's 'data' event stamps first and parses after; responses are strings
// written straight to the socket. Requests need Content-Length (every aiohttp, httpx, urllib and
// Node client sends it for a JSON body); keep-alive is the HTTP/1.1 default; no pipelining is
// needed, but pipelined requests are answered in order.

const MAX_HEAD_BYTES = 64 * 1024;
const MAX_BODY_BYTES = 64 * 1024 * 1024;
const REASONS = { 200: 'OK', 400: 'Bad Request', 404: 'Not Found', 411: 'Length Required',
                  413: 'Content Too Large', 431: 'Request Header Fields Too Large' };
const CRLF2 = Buffer.from('\r\n\r\n');

function chunkFrame(data) {
  // one chunk of a Transfer-Encoding: chunked body
  return Buffer.byteLength(data).toString(16) + '\r\n' + data + '\r\n';
}

function onConnection(sock) {
  sock.setNoDelay(true);
  const conn = { sock, buf: null, firstByteAt: 0, head: null, queue: [], busy: false, closed: false, onClose: null };
  sock.on('data', (chunk) => {
    const t = now();  // first, before any parsing: this is the arrival stamp
    if (conn.buf === null || conn.buf.length === 0) {
      conn.buf = chunk;
      conn.firstByteAt = t;
    } else {
      conn.buf = Buffer.concat([conn.buf, chunk]);
    }
    parseRequests(conn, t);
  });
  sock.on('error', () => {});  // a reset: 'close' follows
  sock.on('close', () => {
    conn.closed = true;
    if (conn.onClose !== null) conn.onClose();
  });
}

function reject(conn, status, message) {
  // a request this server cannot read: answer and close (the byte stream can no longer be framed)
  conn.buf = null;
  conn.head = null;
  stats.bad_requests++;
  const body = `{"error":{"message":${JSON.stringify(message)},"type":"invalid_request_error"}}`;
  conn.sock.end(`HTTP/1.1 ${status} ${REASONS[status]}\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}

function parseRequests(conn, t) {
  while (conn.buf !== null && conn.buf.length > 0) {
    if (conn.head === null) {
      const end = conn.buf.indexOf(CRLF2);
      if (end < 0) {
        if (conn.buf.length > MAX_HEAD_BYTES) reject(conn, 431, 'request head larger than 64 KiB');
        return;
      }
      const lines = conn.buf.toString('latin1', 0, end).split('\r\n');
      const m = /^([A-Z]+) (\S+) HTTP\/1\.([01])$/.exec(lines[0]);
      if (m === null) return reject(conn, 400, 'not an HTTP/1.x request line');
      const headers = {};
      for (let i = 1; i < lines.length; i++) {
        const colon = lines[i].indexOf(':');
        if (colon <= 0) return reject(conn, 400, 'malformed header line');
        headers[lines[i].slice(0, colon).trim().toLowerCase()] = lines[i].slice(colon + 1).trim();
      }
      if (headers['transfer-encoding'] !== undefined) {
        return reject(conn, 411, 'chunked request bodies are not accepted: send Content-Length');
      }
      const length = headers['content-length'] === undefined ? 0 : Number(headers['content-length']);
      if (!Number.isInteger(length) || length < 0) return reject(conn, 400, 'bad Content-Length');
      if (length > MAX_BODY_BYTES) return reject(conn, 413, 'request body larger than 64 MiB');
      const connection = (headers.connection || '').toLowerCase();
      conn.head = { method: m[1], path: m[2].split('?')[0], headers, length, recv: conn.firstByteAt,
                    keepAlive: m[3] === '1' ? connection !== 'close' : connection === 'keep-alive' };
      if ((headers.expect || '').toLowerCase() === '100-continue') conn.sock.write('HTTP/1.1 100 Continue\r\n\r\n');
      conn.buf = conn.buf.subarray(end + 4);
    }
    if (conn.buf.length < conn.head.length) return;
    const head = conn.head;
    const body = Buffer.from(conn.buf.subarray(0, head.length));  // a copy: the socket's chunk is not kept
    conn.buf = conn.buf.subarray(head.length);
    conn.firstByteAt = t;
    conn.head = null;
    conn.queue.push({ head, body, bodyAt: t });
    // Handling (JSON, hashing, headers, timers) waits for the check phase: when hundreds of requests
    // arrive in one burst, each one's arrival stamp waits only for the others' stamping, not their handling.
    if (!conn.busy) {
      conn.busy = true;
      setImmediate(dispatch, conn);
    }
  }
}

function dispatch(conn) {
  const req = conn.queue.shift();
  if (req === undefined || conn.closed) {
    conn.busy = false;
    return;
  }
  const { head } = req;
  const done = () => {  // the response is complete: the next request on this connection may go
    conn.onClose = null;
    if (!head.keepAlive) {
      conn.sock.end();
      conn.busy = false;
      return;
    }
    if (conn.queue.length > 0) dispatch(conn);
    else conn.busy = false;
  };
  route(conn, req, done);
}

function respond(conn, head, status, contentType, body, done) {
  conn.sock.write(`HTTP/1.1 ${status} ${REASONS[status]}\r\nContent-Type: ${contentType}\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n` +
    (head.keepAlive ? 'Connection: keep-alive\r\n\r\n' : 'Connection: close\r\n\r\n') + body);
  done();
}

function route(conn, req, done) {
  const { head } = req;
  const path = head.path;
  if (head.method === 'POST' && (path === '/v1/completions' || path === '/completions')) return handleGenerate(conn, req, false, done);
  if (head.method === 'POST' && (path === '/v1/chat/completions' || path === '/chat/completions')) return handleGenerate(conn, req, true, done);
  if (head.method === 'GET' && (path === '/health' || path === '/v1/health')) {
    return respond(conn, head, 200, 'application/json', '{"status":"ok"}', done);
  }
  if (head.method === 'GET' && (path === '/v1/models' || path === '/models')) {
    return respond(conn, head, 200, 'application/json',
      `{"object":"list","data":[{"id":${JSON.stringify(opts.model)},"object":"model","owned_by":"kneecap-bench"}]}`, done);
  }
  if (head.method === 'GET' && path === '/metrics') return respond(conn, head, 200, 'text/plain; version=0.0.4', '', done);
  if (head.method === 'GET' && path === '/stats') return respond(conn, head, 200, 'application/json', JSON.stringify(stats), done);
  respond(conn, head, 404, 'application/json',
    `{"error":{"message":${JSON.stringify(`no route ${head.method} ${path}`)},"type":"not_found"}}`, done);
}

function handleGenerate(conn, req, chat, done) {
  const { head, bodyAt } = req;
  const sock = conn.sock;
  let body;
  try {
    body = JSON.parse(req.body.toString('utf8'));
    if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new Error('not an object');
  } catch (e) {
    stats.bad_requests++;
    return respond(conn, head, 400, 'application/json',
      '{"error":{"message":"request body is not a JSON object","type":"invalid_request_error"}}', done);
  }
  const id = nextId++;
  stats.requests++;
  const maxTokens = Number(body.max_completion_tokens ?? body.max_tokens ?? 16);
  if (!(maxTokens >= 1)) {
    stats.bad_requests++;
    return respond(conn, head, 400, 'application/json',
      '{"error":{"message":"max_tokens must be >= 1","type":"invalid_request_error"}}', done);
  }
  const nPrompt = promptTokens(body, chat);
  const rec = { id, recv: head.recv, body: bodyAt, sends: [], tokens: [], end: 0, maxTokens,
                warmup: head.headers['x-fast-server-warmup'] !== undefined,
                promptChars: promptChars(body, chat), promptSha: logFd === null ? '' : promptSha256(body, chat),
                complete: false };
  const created = Math.floor(Date.now() / 1000);
  const rid = (chat ? 'chatcmpl-' : 'cmpl-') + id;
  const model = body.model || opts.model;
  let timer = null;
  conn.onClose = () => {  // the client went away mid-response
    if (timer !== null) clearTimeout(timer);
    timer = null;
    if (!rec.complete) {
      stats.aborted++;
      rec.end = now();
      finish(rec);
    }
  };
  if (!body.stream) {
    timer = setTimeout(() => {
      timer = null;
      const text = chunkText(true, 1) + ' x'.repeat(maxTokens - 1);
      const choice = chat
        ? `{"index":0,"message":{"role":"assistant","content":"${text}"},"finish_reason":"length"}`
        : `{"index":0,"text":"${text}","logprobs":null,"finish_reason":"length"}`;
      const payload = `{"id":"${rid}","object":"${chat ? 'chat.completion' : 'text_completion'}","created":${created},` +
        `"model":${JSON.stringify(model)},"choices":[${choice}],"usage":${usageJson(nPrompt, maxTokens)}}`;
      rec.complete = true;
      respond(conn, head, 200, 'application/json', payload, done);
      rec.sends.push(now());
      rec.tokens.push(maxTokens);
      rec.end = rec.sends[0];
      stats.completed++;
      stats.tokens += maxTokens;
      finish(rec);
    }, opts.ttftMs + opts.itlMs * (maxTokens - 1));
    return;
  }

  const so = body.stream_options || {};
  const includeUsage = !!so.include_usage;
  const continuous = !!so.continuous_usage_stats;
  const eventHead = `data: {"id":"${rid}","object":"${chat ? 'chat.completion.chunk' : 'text_completion'}",` +
    `"created":${created},"model":${JSON.stringify(model)},"choices":[{"index":0,`;
  // the response head goes out at once (as a real server's does when it accepts the request)
  sock.write('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n' +
    'Transfer-Encoding: chunked\r\n' + (head.keepAlive ? 'Connection: keep-alive\r\n\r\n' : 'Connection: close\r\n\r\n'));

  let sent = 0;
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
    return eventHead + content + usage + '}\n\n';
  }

  function sendNext() {
    timer = null;
    if (conn.closed) return;
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
    if (last) {
      if (includeUsage) {
        data += `data: {"id":"${rid}","object":"${chat ? 'chat.completion.chunk' : 'text_completion'}",` +
          `"created":${created},"model":${JSON.stringify(model)},"choices":[],"usage":${usageJson(nPrompt, maxTokens)}}\n\n`;
      }
      data += 'data: [DONE]\n\n';
    }
    const drained = sock.write(last ? chunkFrame(data) + '0\r\n\r\n' : chunkFrame(data));
    const sentAt = now();
    for (let i = 0; i < inWrite; i++) rec.sends.push(sentAt);
    if (last) {
      rec.end = sentAt;
      rec.complete = true;
      stats.completed++;
      finish(rec);
      done();
      return;
    }
    if (opts.itlMs === 0) {
      if (drained) setImmediate(sendNext);
      else sock.once('drain', sendNext);
      return;
    }
    due = start + Math.ceil(sent / opts.tokensPerChunk) * opts.itlMs;
    timer = setTimeout(sendNext, Math.max(0, due - now()));
  }

  timer = setTimeout(sendNext, Math.max(0, start - now()));
}

const server = net.createServer(onConnection);

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
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body),
                 'x-fast-server-warmup': '1' } }, (res) => {
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
