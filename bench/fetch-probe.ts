/** Ad-hoc: CPU per chat request of the OpenAI SDK with Node's fetch vs a node:http fetch. */
import OpenAI from 'openai';
import { startSimProcess } from './harness.js';
import { httpFetch } from '../pipeline/http-fetch.js';

const sim = await startSimProcess(20);
const N = Number(process.argv[2] ?? 3000);
const messages = [
  { role: 'system' as const, content: 'x'.repeat(4000) },
  { role: 'user' as const, content: 'In which version of Chrome was the CSS property grid first supported? (1)' },
];
async function run(label: string, client: OpenAI, stream: boolean): Promise<void> {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (next < N) {
        next++;
        if (stream) {
          const s = await client.chat.completions.create({ model: 'trajforge-sim', messages, stream: true, stream_options: { include_usage: true }, stop: ['</call_tool>', '</answer>'] });
          let text = '';
          for await (const ch of s) text += ch.choices[0]?.delta?.content ?? '';
        } else {
          await client.chat.completions.create({ model: 'trajforge-sim', messages, stop: ['</call_tool>', '</answer>'] });
        }
      }
    }),
  );
  const c = process.cpuUsage(c0);
  console.log(label.padEnd(22), 'cpu ms/request', ((c.user + c.system) / 1000 / N).toFixed(3), 'wall s', ((performance.now() - t0) / 1000).toFixed(1));
}
const base = { baseURL: sim.url, apiKey: 'none', maxRetries: 0, logLevel: 'off' as const };
const sdk = new OpenAI(base);
const mine = new OpenAI({ ...base, fetch: httpFetch as unknown as typeof fetch });
try {
  for (let k = 0; k < 2; k++) {
    await run('fetch, stream', sdk, true);
    await run('http, stream', mine, true);
    await run('fetch, whole', sdk, false);
    await run('http, whole', mine, false);
  }
} finally {
  await sim.close();
}
