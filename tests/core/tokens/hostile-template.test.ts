/**
 * A chat template is code from outside (a tokenizer folder, `--chat-template`): one that loops
 * for ever, allocates without end or writes without end fails its row, with its file and
 * line, or is skipped under `--on-bad-row skip`; the command never hangs, never dies, and
 * leaves no worker behind. Each template is Qwen3's tokenizer folder copied to a temp dir with
 * its tokenizer_config.json's chat_template replaced, run through the real CLI.
 */
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FIXTURES, processesNaming, QWEN3, runCli, tempDir } from '../../helpers.js';
// @ts-expect-error: a plain ES module of the fixture's.
import { runsFile } from '../../fixtures/tokens/make-golden.mjs';

const ROW = join(FIXTURES, 'miroverse-chat-row.jsonl');
const runs = runsFile() as { file: string; dispose: () => void };
afterAll(() => runs.dispose());

/** Qwen3's tokenizer with `prefix` put before its own chat template. */
function hostileTokenizer(prefix: string): string {
  const dir = tempDir('tf-hostile-tpl-');
  copyFileSync(join(QWEN3, 'tokenizer.json'), join(dir, 'tokenizer.json'));
  const config = JSON.parse(readFileSync(join(QWEN3, 'tokenizer_config.json'), 'utf8'));
  config.chat_template = prefix + config.chat_template;
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(config));
  return dir;
}

const NESTED_LOOPS = '{%- for i in range(100000) %}{%- for j in range(100000) %}{%- endfor %}{%- endfor %}';

describe('a hostile chat template in export --format tokens', () => {
  it('nested 100k×100k loops: the row fails at --row-timeout-ms with its place, exit 2, no worker left', async () => {
    const tok = hostileTokenizer(NESTED_LOOPS);
    const r = await runCli(['export', ROW, '--format', 'tokens', '--tokenizer', tok, '--row-timeout-ms', '5000', '--out', '-'], { timeoutMs: 120_000 });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`${ROW}:1: cannot export as tokens: the chat template and tokenizer took longer than 5000 ms on this row (--row-timeout-ms 5000)`);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.stdout).toBe('');
    expect(processesNaming(tok)).toBe(0);
  }, 180_000);

  it('under --on-bad-row skip, the rows it hangs on are counted and every other row is written as the plain template writes it', async () => {
    // Hangs only on conversations longer than 9 messages.
    const tok = hostileTokenizer(`{%- if messages|length > 9 %}${NESTED_LOOPS}{%- endif %}`);
    const hostile = await runCli(['export', runs.file, '--format', 'tokens', '--tokenizer', tok, '--all', '--row-timeout-ms', '5000', '--on-bad-row', 'skip', '--out', '-'], { timeoutMs: 300_000 });
    const plain = await runCli(['export', runs.file, '--format', 'tokens', '--tokenizer', QWEN3, '--all', '--out', '-'], { timeoutMs: 300_000 });
    expect(hostile.code, hostile.stderr).toBe(0);
    expect(plain.code, plain.stderr).toBe(0);
    const skipped = Number(/(\d+) not exportable as tokens/.exec(hostile.stderr)?.[1]);
    expect(skipped).toBeGreaterThan(0);
    // The plain export's rows, trajectory by trajectory (ids repeat across the three runs: a trajectory starts at part 0).
    const trajectories: string[][] = [];
    for (const line of plain.stdout.split('\n').filter(Boolean)) {
      if (JSON.parse(line).part === 0) trajectories.push([]);
      trajectories.at(-1)!.push(line);
    }
    const hangs = (t: string[]): boolean => t.some((l) => JSON.parse(l).message_count > 9);
    expect(trajectories.filter(hangs).length).toBe(skipped);
    // Every row of a trajectory the template hangs on is left out; the others are byte for byte the plain export's.
    expect(hostile.stdout.split('\n').filter(Boolean)).toEqual(trajectories.filter((t) => !hangs(t)).flat());
    expect(processesNaming(tok)).toBe(0);
  }, 600_000);

  it('range(1000000000): the worker dies at --worker-heap-mb, not the command; the row fails with its place', async () => {
    const tok = hostileTokenizer('{%- for i in range(1000000000) %}{%- endfor %}');
    const r = await runCli(['export', ROW, '--format', 'tokens', '--tokenizer', tok, '--worker-heap-mb', '256', '--out', '-'], { timeoutMs: 120_000 });
    expect(r.signal).toBeNull();
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`${ROW}:1: cannot export as tokens: the chat template and tokenizer needed more than 256 MB on this row (--worker-heap-mb 256)`);
    expect(r.stderr).not.toContain('FATAL ERROR');
    expect(processesNaming(tok)).toBe(0);
  }, 180_000);

  it('a template that writes more than --render-max-chars fails its row, saying how much it wrote', async () => {
    // 10 characters doubled 19 times: 5,242,880.
    const tok = hostileTokenizer("{%- set ns = namespace(s='xxxxxxxxxx') %}{%- for i in range(19) %}{%- set ns.s = ns.s ~ ns.s %}{%- endfor %}{{ ns.s }}");
    const r = await runCli(['export', ROW, '--format', 'tokens', '--tokenizer', tok, '--render-max-chars', '1000000', '--out', '-'], { timeoutMs: 120_000 });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`${ROW.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:1: cannot export as tokens: the chat template wrote 5\\d{6} characters for this row, more than 1000000 \\(--render-max-chars\\)`));
  }, 180_000);

  it('the limits are checked as flags: a bad value, or a limit given to another format, is a usage error', async () => {
    const zero = await runCli(['export', ROW, '--format', 'tokens', '--tokenizer', QWEN3, '--row-timeout-ms', '0', '--out', '-']);
    expect(zero.code).toBe(2);
    expect(zero.stderr).toContain('--row-timeout-ms: expected a whole number of at least 1, got "0"');
    const other = await runCli(['export', ROW, '--format', 'messages', '--threads', '2', '--out', '-']);
    expect(other.code).toBe(2);
    expect(other.stderr).toContain('--threads is for --format tokens');
  }, 120_000);
});

describe('a hostile chat template in export --format messages --tokenizer (rows split so that every trained think survives)', () => {
  it('nested loops fail the row at --row-timeout-ms, and range(1000000000) at --worker-heap-mb: exit 2 with the place, the command alive, no worker left', async () => {
    const hangs = hostileTokenizer(NESTED_LOOPS);
    const slow = await runCli(['export', ROW, '--format', 'messages', '--tokenizer', hangs, '--row-timeout-ms', '5000', '--out', '-'], { timeoutMs: 120_000 });
    expect(slow.code, slow.stderr).toBe(2);
    expect(slow.stderr).toContain(`${ROW}:1: cannot export as messages: the chat template and tokenizer took longer than 5000 ms on this row (--row-timeout-ms 5000)`);
    expect(slow.stdout).toBe('');
    expect(processesNaming(hangs)).toBe(0);

    const grows = hostileTokenizer('{%- for i in range(1000000000) %}{%- endfor %}');
    const big = await runCli(['export', ROW, '--format', 'messages', '--tokenizer', grows, '--worker-heap-mb', '256', '--out', '-'], { timeoutMs: 120_000 });
    expect(big.signal).toBeNull();
    expect(big.code, big.stderr).toBe(2);
    expect(big.stderr).toContain(`${ROW}:1: cannot export as messages: the chat template and tokenizer needed more than 256 MB on this row (--worker-heap-mb 256)`);
    expect(processesNaming(grows)).toBe(0);
  }, 300_000);
});
