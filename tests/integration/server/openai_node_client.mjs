// Calls `treespec serve` with the official OpenAI Node client (test_server_openai_node.cpp
// installs it with npm): chat (plain and streamed), completions, embeddings (the client
// asks for base64 and decodes it), models, logprobs, logit_bias and n. Prints one JSON
// object with what it got.
// usage: node openai_node_client.mjs BASE_URL MODEL API_KEY BAN_TOKEN_ID
import OpenAI from 'openai';

const [, , baseURL, model, apiKey, banArg] = process.argv;
const BAN = Number(banArg);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const messages = [{ role: 'user', content: 'Who was the first king of Israel?' }];
const out = {};
const chat = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
out.chat = chat.choices[0].message.content;
out.finish_reason = chat.choices[0].finish_reason;
out.usage = chat.usage;
const stream = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0, stream: true });
out.stream = '';
out.stream_chunks = 0;
for await (const chunk of stream) {
  out.stream += chunk.choices[0]?.delta?.content ?? '';
  out.stream_chunks += 1;
}
const comp = await client.completions.create({ model, prompt: 'And it came to pass', max_tokens: 12, temperature: 0 });
out.completion = comp.choices[0].text;
const emb = await client.embeddings.create({ model, input: ['And it came to pass', 'In the beginning'] });
out.embeddings = emb.data.map((d) => Array.from(d.embedding));
out.embedding_tokens = emb.usage.prompt_tokens;
out.models = (await client.models.list()).data.map((m) => m.id);
// The sampling fields of issue 23 as the client sends them: logprobs (completions and
// chat, plain and streamed), logit_bias, n > 1.
const lpComp = await client.completions.create({ model, prompt: 'And it came to pass', max_tokens: 8, temperature: 0, logprobs: 2 });
out.completion_logprobs = lpComp.choices[0].logprobs;
const lpChat = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2 });
out.chat_logprobs = lpChat.choices[0].logprobs.content;
const lpStream = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2, stream: true });
out.chat_stream_logprobs = [];
for await (const chunk of lpStream) out.chat_stream_logprobs.push(...(chunk.choices[0]?.logprobs?.content ?? []));
const biased = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0, logit_bias: { [BAN]: -100 } });
out.biased = biased.choices[0].message.content;
const many = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 1, seed: 3, n: 3 });
out.n_choices = many.choices.map((c) => [c.index, c.message.content]);
out.n_usage = many.usage;
// Structured output: response_format json_schema (properties in the order written).
const schema = { type: 'object', properties: { king: { type: 'string', maxLength: 12 }, years: { type: 'integer', minimum: 1, maximum: 99 } },
                 required: ['king', 'years'], additionalProperties: false };
const structured = await client.chat.completions.create({ model, messages, max_tokens: 64, temperature: 0,
  response_format: { type: 'json_schema', json_schema: { name: 'reign', strict: true, schema } } });
out.structured = structured.choices[0].message.content;
out.structured_finish = structured.choices[0].finish_reason;
try {
  await client.completions.create({ model, prompt: 'x', max_tokens: 4, temperature: 0, echo: true });
  out.refused = null;
} catch (e) {
  out.refused = { status: e.status, param: e.param ?? e.error?.param ?? null };
}
console.log(JSON.stringify(out));
