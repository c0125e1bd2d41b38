// Checks of `deltaflash serve` through the official openai npm client (and plain fetch where the
// client has no call for it). Run by tests/test_server_api.cpp:
//   node openai_checks.mjs CHECK BASE_URL API_KEY NODE_MODULES [EXTRA...]
// Prints "ok CHECK" and exits 0 when every assertion holds; any failure throws (exit 1).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [check, baseURL, apiKey, nodeModules, ...extra] = process.argv.slice(2);
const load = (rel) => import(pathToFileURL(path.join(nodeModules, rel)).href);
const { default: OpenAI } = await load('openai/index.mjs');
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });
const auth = { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` };

async function post(route, body) {
  const r = await fetch(baseURL + route, { method: 'POST', headers: auth, body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
}

async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

// Text of a streamed chat completion, field by field.
function joinDeltas(chunks, field) {
  return chunks.map((c) => c.choices[0]?.delta?.[field] ?? '').join('');
}

function assertErrorShape(body, status) {
  assert.equal(typeof body.error, 'object', JSON.stringify(body));
  assert.equal(typeof body.error.message, 'string');
  assert.ok(body.error.message.length > 0);
  assert.equal(typeof body.error.type, 'string');
  assert.ok('param' in body.error && 'code' in body.error);
  if (status >= 500) assert.equal(body.error.type, 'server_error');
}

async function expectApiError(promise, status, code) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    assert.equal(e.status, status, e.message);
    if (code !== undefined) assert.equal(e.code, code, e.message);
    return e;
  }
  assert.fail(`expected HTTP ${status}`);
}

const USER = [{ role: 'user', content: 'Tell me about the river and the morning.' }];
const NO_THINK = { enable_thinking: false };
// Wide sampling so the random-weight model says something other than its favourite token.
const WIDE = { temperature: 1.5, top_k: 0, top_p: 1, min_p: 0 };

const checks = {
  // Non-streaming and streaming chat agree for the same seed; shapes are OpenAI's.
  async chat() {
    const params = { model: 'my-model', messages: USER, max_tokens: 16, seed: 7, ...WIDE, chat_template_kwargs: NO_THINK };
    const r = await client.chat.completions.create(params);
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.model, 'my-model');
    assert.equal(typeof r.created, 'number');
    const c = r.choices[0];
    assert.equal(r.choices.length, 1);
    assert.equal(c.index, 0);
    assert.equal(c.message.role, 'assistant');
    assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
    assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 16);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    assert.ok(c.message.content.length > 0, 'the random model said nothing; pick another seed');

    const chunks = await collect(
      await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } }));
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    for (const ch of chunks) {
      assert.equal(ch.id, chunks[0].id);
      assert.equal(ch.object, 'chat.completion.chunk');
      assert.equal(ch.model, 'my-model');
    }
    const usage = chunks.at(-1);
    assert.deepEqual(usage.choices, []);
    assert.deepEqual(usage.usage, r.usage);
    const fin = chunks.at(-2);
    assert.equal(fin.choices[0].finish_reason, c.finish_reason);
    assert.ok(chunks.slice(0, -2).every((ch) => ch.choices[0].finish_reason === null));
    assert.equal(joinDeltas(chunks, 'content'), c.message.content);

    // The client's own accumulator rebuilds the same message.
    const final = await client.chat.completions.stream(params).finalChatCompletion();
    assert.equal(final.choices[0].message.content, c.message.content);
    assert.equal(final.choices[0].finish_reason, c.finish_reason);
  },

  async completions() {
    const params = { model: 'x', prompt: 'The weather was cold', max_tokens: 12, seed: 3, ...WIDE };
    const r = await client.completions.create(params);
    assert.match(r.id, /^cmpl-/);
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices[0].index, 0);
    assert.ok(r.choices[0].text.length > 0);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    const chunks = await collect(
      await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } }));
    assert.equal(chunks.map((c) => c.choices[0]?.text ?? '').join(''), r.choices[0].text);
    assert.equal(chunks.at(-2).choices[0].finish_reason, r.choices[0].finish_reason);
    assert.deepEqual(chunks.at(-1).usage, r.usage);
    // Token-id prompts are accepted too.
    const tok = await post('/tokenize', { content: 'The weather was cold' });
    const byIds = await client.completions.create({ ...params, prompt: tok.json.tokens });
    assert.equal(byIds.choices[0].text, r.choices[0].text);
  },

  // usage.prompt_tokens is the token count of the rendered prompt, and the prompt is what the
  // reference Jinja implementation renders; the history carries tool calls and tool results.
  async tools_round_trip() {
    const templateSource = fs.readFileSync(extra[0], 'utf8');
    const { Template } = await load('@huggingface/jinja/dist/index.js');
    // Keys in the order clients write them (not sorted): the template prints the tools and the
    // call's arguments with tojson, so the server must hand them over in the client's order.
    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
      parameters: { type: 'object', properties: { unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        city: { type: 'string' } }, required: ['city'] } } },
    { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } }];
    const messages = [
      { role: 'system', content: 'You are helpful.' },
      { role: 'user', content: 'Weather in Oslo?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_abc', type: 'function',
        function: { name: 'get_weather', arguments: '{"unit": "celsius", "city": "Oslo"}' } }] },
      { role: 'tool', tool_call_id: 'call_abc', content: '{"celsius": 21}' },
    ];
    const applied = await post('/apply-template', { messages, tools });
    assert.equal(applied.status, 200, JSON.stringify(applied.json));
    // What templates receive: null content as "", arguments as an object.
    const normalized = structuredClone(messages);
    normalized[2].content = '';
    normalized[2].tool_calls[0].function.arguments = JSON.parse(messages[2].tool_calls[0].function.arguments);
    const oracle = new Template(templateSource).render({ messages: normalized, tools, add_generation_prompt: true,
      bos_token: '', eos_token: '<|im_end|>' });
    assert.equal(applied.json.prompt, oracle);
    assert.ok(oracle.includes(
      '<tool_call>\n{"name": "get_weather", "arguments": {"unit": "celsius", "city": "Oslo"}}\n</tool_call>'));
    assert.ok(oracle.includes('{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", '
      + '"parameters": {"type": "object", "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, '
      + '"city": {"type": "string"}}, "required": ["city"]}}}'), oracle);
    assert.ok(oracle.includes('<tool_response>\n{"celsius": 21}\n</tool_response>'));
    assert.ok(oracle.includes('"name": "get_time"'));

    const tok = await post('/tokenize', { content: applied.json.prompt });
    const r = await client.chat.completions.create({ messages, tools, max_tokens: 4, temperature: 0 });
    assert.equal(r.usage.prompt_tokens, tok.json.tokens.length);

    // tool_choice "none": the template sees no tools. "required" and a named function make the
    // answer open a tool call: the random model's text after the forced opening does not parse,
    // so it comes back as content that starts with the opening (this template's JSON form).
    const none = await post('/apply-template', { messages: messages.slice(0, 2), tools, tool_choice: 'none' });
    assert.ok(!none.json.prompt.includes('get_weather'));
    const forced = [['required', '<tool_call>'],
      [{ type: 'function', function: { name: 'get_time' } }, '<tool_call>\n{"name": "get_time", "arguments": ']];
    for (const [tool_choice, opening] of forced) {
      const f = await client.chat.completions.create({ messages, tools, tool_choice, max_tokens: 64, temperature: 0,
        chat_template_kwargs: { enable_thinking: false } });
      const m = f.choices[0].message;
      const called = (m.tool_calls ?? []).length > 0;
      assert.ok(called ? tool_choice === 'required' || m.tool_calls[0].function.name === 'get_time'
                       : (m.content ?? '').startsWith(opening), JSON.stringify(m));
    }
    const e = await expectApiError(client.chat.completions.create({ messages, tool_choice: 'required', max_tokens: 2 }), 400);
    assert.equal(e.param, 'tool_choice');
  },

  // The client consumes what the server's completion pipeline wrote for a generated tool call
  // (extra[0]: the SSE stream, extra[1]: the JSON body; made by the C++ test from scripted tokens).
  async tool_stream() {
    const serve = (bytes, type) => new OpenAI({ apiKey: 'x', baseURL: 'http://127.0.0.1:9/v1', maxRetries: 0,
      fetch: async () => new Response(bytes, { status: 200, headers: { 'content-type': type } }) });
    const expectCalls = (msg) => {
      assert.equal(msg.content, 'Let me look.');
      assert.equal(msg.tool_calls.length, 2);
      assert.match(msg.tool_calls[0].id, /^call_[A-Za-z0-9]{24}$/);
      assert.notEqual(msg.tool_calls[0].id, msg.tool_calls[1].id);
      assert.equal(msg.tool_calls[0].type, 'function');
      assert.equal(msg.tool_calls[0].function.name, 'get_weather');
      assert.deepEqual(JSON.parse(msg.tool_calls[0].function.arguments), { city: 'Oslo', days: 3 });
      assert.equal(msg.tool_calls[1].function.name, 'get_time');
      assert.deepEqual(JSON.parse(msg.tool_calls[1].function.arguments), { zone: 'UTC' });
    };
    const sse = fs.readFileSync(extra[0]);
    const params = { model: 'm', messages: USER };
    const final = await serve(sse, 'text/event-stream').chat.completions.stream(params).finalChatCompletion();
    assert.equal(final.choices[0].finish_reason, 'tool_calls');
    expectCalls(final.choices[0].message);
    const chunks = await collect(await serve(sse, 'text/event-stream').chat.completions.create({ ...params, stream: true }));
    for (const ch of chunks) assert.ok(!(ch.choices[0]?.delta?.content ?? '').includes('<'), JSON.stringify(ch));
    const body = await serve(fs.readFileSync(extra[1]), 'application/json').chat.completions.create(params);
    assert.equal(body.choices[0].finish_reason, 'tool_calls');
    expectCalls(body.choices[0].message);
  },

  // The trained demo model calls tools when asked the way its training data did: the calls
  // come back parsed (streamed and not), and the result goes back through the template.
  async live_tools() {
    const tools = [{ type: 'function', function: { name: 'load_config', description: 'Read a JSON configuration file.',
      parameters: { type: 'object', properties: { path: { type: 'string', description: 'The `path` argument.' } },
        required: ['path'] } } }];
    const messages = [{ role: 'user', content: 'Please use the `load_config` tool with path=data.txt.' }];
    const params = { model: 'demo', messages, tools, max_tokens: 60, temperature: 0 };
    const expectCall = (c) => {
      assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
      assert.equal(c.message.content, null);
      assert.equal(c.message.tool_calls.length, 1);
      const call = c.message.tool_calls[0];
      assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
      assert.equal(call.type, 'function');
      assert.equal(call.function.name, 'load_config');
      assert.deepEqual(JSON.parse(call.function.arguments), { path: 'data.txt' });
      return call;
    };
    const r = await client.chat.completions.create(params);
    const call = expectCall(r.choices[0]);
    const chunks = await collect(await client.chat.completions.create({ ...params, stream: true }));
    for (const ch of chunks) assert.ok(!(ch.choices[0]?.delta?.content ?? '').includes('<tool'), JSON.stringify(ch));
    const streamedCalls = chunks.filter((ch) => ch.choices[0]?.delta?.tool_calls);
    assert.equal(streamedCalls.length, 1);
    assert.equal(streamedCalls[0].choices[0].delta.tool_calls[0].index, 0);
    const final = await client.chat.completions.stream(params).finalChatCompletion();
    expectCall(final.choices[0]);

    // Round trip: the assistant's call and the tool's answer go back through the template.
    const history = [...messages, r.choices[0].message, { role: 'tool', tool_call_id: call.id, content: '{"debug": true}' }];
    const applied = await post('/apply-template', { messages: history, tools });
    assert.equal(applied.status, 200, JSON.stringify(applied.json));
    assert.ok(applied.json.prompt.includes('<tool_call>\n<function=load_config>\n<parameter=path>\ndata.txt\n</parameter>'),
      applied.json.prompt);
    assert.ok(applied.json.prompt.includes('<tool_response>\n{"debug": true}\n</tool_response>'));
    const tok = await post('/tokenize', { content: applied.json.prompt });
    const next = await client.chat.completions.create({ ...params, messages: history });
    assert.equal(next.usage.prompt_tokens, tok.json.tokens.length);
    assert.ok(['stop', 'length', 'tool_calls'].includes(next.choices[0].finish_reason));
  },

  // A stop sequence that straddles a token boundary ends the text just before it, streamed or not.
  async stop() {
    const base = { messages: USER, max_tokens: 24, seed: 2, ...WIDE, chat_template_kwargs: NO_THINK,
      logprobs: true };
    const r0 = await client.chat.completions.create(base);
    const text = r0.choices[0].message.content;
    // Token boundaries inside the leading run of printable-ASCII tokens (the random model may
    // emit invalid UTF-8 later, which the content shows as U+FFFD).
    const tokens = r0.choices[0].logprobs.content.map((e) => Buffer.from(e.bytes).toString('latin1'));
    let prefix = '';
    const bounds = [];
    for (const t of tokens) {
      if (!/^[\x20-\x7e]*$/.test(t)) break;
      prefix += t;
      bounds.push(prefix.length);
    }
    assert.ok(text.startsWith(prefix));
    // The last boundary whose two neighbouring characters are printable and occur first there.
    let stop = null;
    let expected = null;
    for (const b of bounds) {
      const s = prefix.slice(b - 1, b + 1);
      if (/^[\x21-\x7e]{2}$/.test(s) && text.indexOf(s) === b - 1) {
        stop = s;
        expected = text.slice(0, b - 1);
      }
    }
    console.log(`stop ${JSON.stringify(stop)} after ${JSON.stringify(expected)}`);
    assert.ok(stop !== null && expected.length >= 2, `no usable token boundary in ${JSON.stringify(text)}`);
    const r1 = await client.chat.completions.create({ ...base, stop: [stop, 'never-there'] });
    assert.equal(r1.choices[0].message.content, expected);
    assert.equal(r1.choices[0].finish_reason, 'stop');
    const chunks = await collect(await client.chat.completions.create({ ...base, stop, stream: true }));
    assert.equal(joinDeltas(chunks, 'content'), expected);
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'stop');
    const c1 = await client.completions.create({ prompt: 'The weather was cold', max_tokens: 24, seed: 5, ...WIDE });
    const t = c1.choices[0].text;
    const s2 = t.slice(3, 5);
    const c2 = await client.completions.create({ prompt: 'The weather was cold', max_tokens: 24, seed: 5, ...WIDE, stop: s2 });
    assert.equal(c2.choices[0].text, t.slice(0, t.indexOf(s2)));
  },

  // Log-probabilities of the raw logits: sorted alternatives, <= 0, and at temperature 0 the
  // chosen token is the most likely one.
  async logprobs() {
    const params = { messages: USER, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 5,
      chat_template_kwargs: NO_THINK };
    const r = await client.chat.completions.create(params);
    const lp = r.choices[0].logprobs.content;
    assert.equal(lp.length, r.usage.completion_tokens - (r.choices[0].finish_reason === 'stop' ? 1 : 0));
    for (const e of lp) {
      assert.ok(e.logprob <= 0);
      assert.equal(e.top_logprobs.length, 5);
      for (let i = 1; i < 5; ++i) assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob);
      for (const t of e.top_logprobs) assert.ok(t.logprob <= 0 && Array.isArray(t.bytes));
      assert.equal(e.token, e.top_logprobs[0].token);
      assert.equal(e.logprob, e.top_logprobs[0].logprob);
      const sum = e.top_logprobs.reduce((s, t) => s + Math.exp(t.logprob), 0);
      assert.ok(sum <= 1 + 1e-5);
    }
    assert.equal(Buffer.concat(lp.map((e) => Buffer.from(e.bytes))).toString('utf8'), r.choices[0].message.content);
    const chunks = await collect(await client.chat.completions.create({ ...params, stream: true }));
    const streamed = chunks.flatMap((c) => c.choices[0]?.logprobs?.content ?? []);
    assert.deepEqual(streamed, lp);
    // Legacy completions shape.
    const c = await client.completions.create({ prompt: 'The weather', max_tokens: 6, temperature: 0, logprobs: 3 });
    const l = c.choices[0].logprobs;
    assert.equal(l.tokens.length, l.token_logprobs.length);
    assert.equal(l.tokens.join(''), c.choices[0].text);
    for (let i = 0; i < l.tokens.length; ++i) {
      assert.ok(l.token_logprobs[i] <= 0);
      const alts = Object.entries(l.top_logprobs[i]);
      assert.ok(alts.length >= 1 && alts.length <= 3);
      assert.equal(Math.max(...alts.map(([, v]) => v)), l.token_logprobs[i]);
    }
  },

  async seed() {
    const p = { prompt: 'The weather was cold', max_tokens: 24, ...WIDE, temperature: 2 };
    const texts = [];
    for (const seed of [1, 2, 3, 4]) {
      const a = await client.completions.create({ ...p, seed });
      const b = await client.completions.create({ ...p, seed });
      assert.equal(a.choices[0].text, b.choices[0].text, `seed ${seed} not reproducible`);
      texts.push(a.choices[0].text);
    }
    assert.ok(new Set(texts).size > 1, 'different seeds never changed the sample');
  },

  async errors() {
    const ok = { messages: USER, max_tokens: 2 };
    // 401: missing or wrong key; health and metrics stay open.
    const wrong = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'wrong-key', maxRetries: 0 });
    const e401 = await expectApiError(wrong.chat.completions.create(ok), 401, 'invalid_api_key');
    assert.equal(e401.type, 'authentication_error');
    const noKey = await fetch(`${baseURL}/v1/models`);
    assert.equal(noKey.status, 401);
    assertErrorShape(await noKey.json(), 401);
    assert.equal((await fetch(`${baseURL}/health`)).status, 200);
    assert.equal((await fetch(`${baseURL}/metrics`)).status, 200);
    // 400s, each naming the field.
    const cases = [
      [{ ...ok, n: 2 }, 'n'],
      [{ ...ok, messages: [] }, 'messages'],
      [{ max_tokens: 2 }, 'messages'],
      [{ ...ok, response_format: { type: 'json_object' } }, 'response_format'],
      [{ ...ok, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 'messages[0].content'],
      [{ ...ok, temperature: 'hot' }, 'temperature'],
      [{ ...ok, max_tokens: 100000 }, 'max_tokens'],
      [{ ...ok, logprobs: true, top_logprobs: 30 }, 'top_logprobs'],
      [{ ...ok, stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
    ];
    for (const [body, param] of cases) {
      const e = await expectApiError(client.chat.completions.create(body), 400);
      assert.equal(e.param, param, e.message);
      assert.equal(e.type, 'invalid_request_error');
    }
    const long = await expectApiError(client.chat.completions.create({ ...ok, max_tokens: 100000 }), 400);
    assert.equal(long.code, 'context_length_exceeded');
    // Malformed JSON, wrong JSON type.
    for (const body of ['{"messages": [', '[1, 2]', '']) {
      const r = await fetch(`${baseURL}/v1/chat/completions`, { method: 'POST', headers: auth, body });
      assert.equal(r.status, 400, body);
      assertErrorShape(await r.json(), 400);
    }
    // 404 unknown route, 405 wrong method.
    const r404 = await fetch(`${baseURL}/v1/nothing-here`, { headers: auth });
    assert.equal(r404.status, 404);
    assertErrorShape(await r404.json(), 404);
    const r405 = await fetch(`${baseURL}/v1/chat/completions`, { headers: auth });
    assert.equal(r405.status, 405);
    assert.equal(r405.headers.get('allow'), 'POST');
    assertErrorShape(await r405.json(), 405);
    // 413 over the body cap (the test server runs with --max-body-bytes 262144).
    const huge = 'x'.repeat(300_000);
    await expectApiError(client.chat.completions.create({ ...ok, messages: [{ role: 'user', content: huge }] }), 413,
      'request_too_large');
    // Nesting deeper than any API body needs is refused before anything else looks at it.
    const deep = await fetch(`${baseURL}/v1/chat/completions`, { method: 'POST', headers: auth,
      body: `{"messages": [{"role": "user", "content": "x", "extra": ${'['.repeat(50_000)}${']'.repeat(50_000)}}]}` });
    assert.equal(deep.status, 400);
    assertErrorShape(await deep.json(), 400);
    // 400 with a tokenize body of the wrong shape; the server still answers afterwards.
    assert.equal((await post('/tokenize', { text: 'x' })).status, 400);
    assert.equal((await post('/detokenize', { tokens: [-1] })).status, 400);
    const after = await client.chat.completions.create(ok);
    assert.equal(after.choices.length, 1);
  },
};

if (!(check in checks)) throw new Error(`unknown check ${check}`);
await checks[check]();
console.log(`ok ${check}`);
