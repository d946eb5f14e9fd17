/**
 * Ad-hoc: `node dist/bench/fetch-probe.js [N]` — CPU per chat request of the OpenAI SDK (with
 * Node's fetch) against trajforge's own wire (pipeline/core/llm/chat-http.ts), streamed and whole, 64 in
 * flight against one sim process.
 */
import OpenAI from 'openai';
import { chatWire, postJson, postStream } from '../pipeline/core/llm/chat-http.js';
import { startSimProcess } from './harness.js';

const sim = await startSimProcess(20);
const N = Number(process.argv[2] ?? 3000);
const messages = [
  { role: 'system' as const, content: 'x'.repeat(4000) },
  { role: 'user' as const, content: 'In which version of Chrome was the CSS property grid first supported? (1)' },
];
const stop = ['</call_tool>', '</answer>'];
type Content = { choices?: { delta?: { content?: string } }[] };

async function run(label: string, one: () => Promise<void>): Promise<void> {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (next < N) {
        next++;
        await one();
      }
    }),
  );
  const c = process.cpuUsage(c0);
  console.log(label.padEnd(22), 'cpu ms/request', ((c.user + c.system) / 1000 / N).toFixed(3), 'wall s', ((performance.now() - t0) / 1000).toFixed(1));
}

const sdk = new OpenAI({ baseURL: sim.url, apiKey: 'none', maxRetries: 0, logLevel: 'off' });
const wire = chatWire(sim.url, 'none');

try {
  for (let k = 0; k < 2; k++) {
    await run('SDK, stream', async () => {
      const s = await sdk.chat.completions.create({ model: 'trajforge-sim', messages, stream: true, stream_options: { include_usage: true }, stop });
      let text = '';
      for await (const ch of s) text += ch.choices[0]?.delta?.content ?? '';
    });
    await run('chat-http, stream', async () => {
      let text = '';
      const body = JSON.stringify({ model: 'trajforge-sim', messages, stream: true, stream_options: { include_usage: true }, stop });
      await postStream(wire, body, new AbortController().signal, (d) => {
        text += (d as Content).choices?.[0]?.delta?.content ?? '';
      });
    });
    await run('SDK, whole', async () => {
      await sdk.chat.completions.create({ model: 'trajforge-sim', messages, stop });
    });
    await run('chat-http, whole', async () => {
      await postJson(wire, JSON.stringify({ model: 'trajforge-sim', messages, stop }), new AbortController().signal);
    });
  }
} finally {
  await sim.close();
}
