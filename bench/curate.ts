/**
 * `dedup` and `decontaminate` over 1,000,000 rows against a 10,000-item eval set: wall time and
 * peak RSS of the real CLI, each in its own process (peak RSS is its VmHWM, read from /proc).
 *
 * The data is synthetic and seeded, shaped like real question banks: questions from templates
 * whose slots are filled from real vocabularies (the MDN features of data/corpus.jsonl, drug
 * and outcome lists), so most rows have thousands of siblings that share all but their slots.
 * Planted among them: exact duplicates and near-duplicates (case, punctuation, a moved clause,
 * a function word reworded) of earlier rows, and eval questions inside questions and tool outputs. The bench
 * checks that what was planted is found, so a fast wrong answer cannot pass for a result.
 *
 *   TRAJFORGE_BENCH_CURATE_ROWS   rows (default 1,000,000)
 *   TRAJFORGE_BENCH_CURATE_EVAL   eval items (default 10,000)
 *   TRAJFORGE_BENCH_CURATE_DIR    keep the data in this directory (default: a temp dir, removed)
 */
import { spawn } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { CLI } from './harness.js';
import { normalise } from '../pipeline/dataset/shingles.js';

const ROWS = Number(process.env.TRAJFORGE_BENCH_CURATE_ROWS ?? '1000000');
const EVAL = Number(process.env.TRAJFORGE_BENCH_CURATE_EVAL ?? '10000');

/** mulberry32: the data is the same on every run. */
function rng(seed: number): () => number {
  let a = seed | 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const BROWSERS = ['Chrome', 'Chrome Android', 'Firefox', 'Firefox for Android', 'Safari', 'Safari on iOS', 'Edge', 'Opera'];
const DRUGS = ['semaglutide', 'dulaglutide', 'liraglutide', 'tirzepatide', 'empagliflozin', 'dapagliflozin', 'canagliflozin', 'sitagliptin', 'metformin', 'pioglitazone', 'insulin glargine', 'insulin degludec', 'apixaban', 'rivaroxaban', 'dabigatran', 'edoxaban', 'warfarin', 'atorvastatin', 'rosuvastatin', 'ezetimibe', 'evolocumab', 'alirocumab', 'inclisiran', 'bempedoic acid', 'sacubitril valsartan', 'enalapril', 'finerenone', 'spironolactone', 'amlodipine', 'chlorthalidone', 'pembrolizumab', 'nivolumab', 'atezolizumab', 'durvalumab', 'osimertinib', 'erlotinib', 'trastuzumab', 'pertuzumab', 'adalimumab', 'ustekinumab'];
const POPULATIONS = ['adults with type 2 diabetes', 'patients with heart failure with reduced ejection fraction', 'older adults with atrial fibrillation', 'patients with chronic kidney disease', 'adults with obesity', 'patients with hypercholesterolemia', 'patients with non-small cell lung cancer', 'adults with moderate to severe psoriasis', 'patients after acute coronary syndrome', 'adults with resistant hypertension', 'patients with metastatic melanoma', 'adults with rheumatoid arthritis'];
const OUTCOMES = ['HbA1c', 'body weight', 'major bleeding', 'stroke or systemic embolism', 'LDL cholesterol', 'hospitalization for heart failure', 'progression-free survival', 'overall survival', 'systolic blood pressure', 'cardiovascular death', 'kidney function decline', 'PASI 75 response'];
const WEEKS = [12, 24, 26, 52, 104];
const GENES = ['BRCA1', 'BRCA2', 'APOE', 'TCF7L2', 'FTO', 'PCSK9', 'LDLR', 'CFTR', 'HLA-B27', 'MTHFR', 'TP53', 'KRAS', 'EGFR', 'ALK', 'JAK2', 'HFE', 'LRRK2', 'SNCA', 'APP', 'PSEN1'];
const DISEASES = ['breast cancer', 'Alzheimer disease', 'type 2 diabetes', 'obesity', 'coronary artery disease', 'familial hypercholesterolemia', 'cystic fibrosis', 'ankylosing spondylitis', 'venous thrombosis', 'colorectal cancer', 'lung adenocarcinoma', 'myeloproliferative neoplasms', 'hemochromatosis', 'Parkinson disease'];
const COHORTS = ['European', 'East Asian', 'African American', 'Hispanic', 'South Asian', 'Finnish', 'Japanese', 'UK Biobank', 'Icelandic', 'Ashkenazi Jewish'];

function pick<T>(r: () => number, xs: readonly T[]): T {
  return xs[Math.floor(r() * xs.length)]!;
}

function features(): string[] {
  return readFileSync(join(PACKAGE_ROOT, 'data/corpus.jsonl'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => (JSON.parse(l) as { title: string }).title.replace(':', ''));
}

/** A distinct question of one of six templates; `i` picks the slots so the first 1M are distinct. */
function question(r: () => number, feats: readonly string[]): string {
  switch (Math.floor(r() * 6)) {
    case 0:
      return `In which version of ${pick(r, BROWSERS)} was the ${pick(r, feats)} first supported?`;
    case 1:
      return `What is the earliest version of ${pick(r, BROWSERS)} that supports the ${pick(r, feats)}?`;
    case 2:
      return `Since which version has ${pick(r, BROWSERS)} supported the ${pick(r, feats)}?`;
    case 3: {
      const a = pick(r, DRUGS);
      let b = pick(r, DRUGS);
      if (b === a) b = DRUGS[(DRUGS.indexOf(a) + 1) % DRUGS.length]!;
      return `In phase III trials in ${pick(r, POPULATIONS)}, how does ${a} compare with ${b} in reducing ${pick(r, OUTCOMES)} over at least ${pick(r, WEEKS)} weeks?`;
    }
    case 4:
      return `Among ${pick(r, POPULATIONS)}, what is the effect of ${pick(r, DRUGS)} on ${pick(r, OUTCOMES)} compared with placebo after ${pick(r, WEEKS)} weeks?`;
    default:
      return `Which ${pick(r, BROWSERS)} release first shipped the ${pick(r, feats)} without a flag, and in which year?`;
  }
}

/** An eval question of a family the rows never use (genetic association). */
function evalQuestion(i: number, r: () => number): string {
  const g = GENES[i % GENES.length]!;
  const d = DISEASES[Math.floor(i / GENES.length) % DISEASES.length]!;
  const c = COHORTS[Math.floor(i / (GENES.length * DISEASES.length)) % COHORTS.length]!;
  const k = Math.floor(i / (GENES.length * DISEASES.length * COHORTS.length));
  return `Which ${g} variant shows the strongest association with ${d} risk in ${c} cohorts according to genome-wide association study ${k + 1} of ${1 + Math.floor(r() * 9)} replication panels?`;
}

function variant(q: string, r: () => number): string {
  switch (Math.floor(r() * 4)) {
    case 0:
      return q.toUpperCase();
    case 1:
      return `"${q.replace(/\?$/, '')}"`.replace(/ /g, '  ');
    case 2: {
      const m = /^([^,]+),\s*(.+?)([?.!]?)$/u.exec(q);
      return m ? `${m[2]![0]!.toUpperCase()}${m[2]!.slice(1)}, ${m[1]![0]!.toLowerCase()}${m[1]!.slice(1)}${m[3]}` : q.toLowerCase();
    }
    default:
      // A function word reworded, where docs/curate.md says that is found: 25 words or more.
      if (q.split(' ').length >= 25) {
        for (const [from, to] of [[/\bhow does\b/, 'how do'], [/\bwhat is\b/i, "what's"], [/\bthe\b/, 'a']] as const) if (from.test(q)) return q.replace(from, to);
      }
      return q.replace(/\b\p{L}/gu, (c) => c.toUpperCase());
  }
}

function row(id: string, q: string, output: string, answer: string): string {
  return JSON.stringify({
    schema_version: 1,
    id,
    question_id: id,
    question: q,
    dialect: 'tulu',
    model: 'bench',
    status: 'ok',
    final_answer: answer,
    interleaved_text: `<call_tool name="pubmed_search">q</call_tool>\n${output}\n<answer>${answer}</answer>`,
    messages: [],
    tool_calls: [{ call_id: `${id}-0`, tool_name: 'pubmed_search', output_text: output }],
    total_tool_calls: 1,
    tools_used: ['pubmed_search'],
    cited_ids: [],
    unresolved_cited_ids: [],
    turns: 2,
    repairs: [],
    rollbacks: [],
    validation: { passed: true, issues: [] },
    usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, llm_calls: 2 },
    attempt: 0,
    run_id: 'bench',
  });
}

export interface CurateData {
  readonly rows: string;
  readonly eval: string;
  readonly bytes: number;
  readonly nearDuplicates: number;
  readonly exactDuplicates: number;
  /** Row index of each planted copy → row index of the row it copies. */
  readonly copies: Map<number, number>;
  /** Rows holding an eval question (in the question or the tool output). */
  readonly contaminated: Set<number>;
}

/**
 * How dedup's clusters compare with what was planted: copies found with their source, and
 * distinct generated questions merged — those whose words differ, and those that differ only in
 * punctuation (`:host` and `:host()`), which the normalisation makes one text.
 */
export function checkClusters(clustersFile: string, copies: ReadonlyMap<number, number>): { found: number; merged: number; mergedSameWords: number } {
  const clusterOf = new Map<number, number>();
  let merged = 0;
  let mergedSameWords = 0;
  for (const line of readFileSync(clustersFile, 'utf8').split('\n')) {
    if (!line) continue;
    const c = JSON.parse(line) as { cluster: number; members: { id: string; text: string }[] };
    const originals = new Map<number, string>();
    for (const m of c.members) {
      const i = Number(m.id.slice(1));
      clusterOf.set(i, c.cluster);
      const o = copies.get(i) ?? i;
      if (o === i || !originals.has(o)) originals.set(o, o === i ? m.text : (originals.get(o) ?? ''));
    }
    if (originals.size > 1) {
      const texts = new Set([...originals.values()].filter(Boolean).map(normalise));
      merged += texts.size - 1;
      mergedSameWords += originals.size - texts.size;
    }
  }
  let found = 0;
  for (const [copy, src] of copies) if (clusterOf.get(copy) !== undefined && clusterOf.get(copy) === clusterOf.get(src)) found++;
  return { found, merged, mergedSameWords };
}

/** Which flagged rows were planted. */
export function checkFlags(flaggedFile: string, planted: ReadonlySet<number>): { found: number; other: number } {
  let found = 0;
  let other = 0;
  for (const line of readFileSync(flaggedFile, 'utf8').split('\n')) {
    if (!line) continue;
    const i = Number((JSON.parse(line) as { id: string }).id.slice(1));
    if (planted.has(i)) found++;
    else other++;
  }
  return { found, other };
}

/** Writes the rows and the eval set to `dir`; returns what was planted. */
export async function writeCurateData(dir: string, rows = ROWS, evalItems = EVAL): Promise<CurateData> {
  const feats = features();
  const r = rng(17);
  const evalFile = join(dir, 'eval.jsonl');
  const ev = createWriteStream(evalFile);
  const evalQs: string[] = [];
  for (let i = 0; i < evalItems; i++) {
    const q = evalQuestion(i, r);
    evalQs.push(q);
    ev.write(`${JSON.stringify({ id: `ev-${i}`, question: q })}\n`);
  }
  await new Promise<void>((res, rej) => ev.end((e?: Error | null) => (e ? rej(e) : res())));

  const file = join(dir, 'rows.jsonl');
  const out = createWriteStream(file);
  // Recent questions, to copy from: a near-duplicate is of a row seen shortly or long before.
  const recent: { q: string; i: number }[] = [];
  const copies = new Map<number, number>();
  const contaminated = new Set<number>();
  let near = 0;
  let exact = 0;
  let bytes = 0;
  const seen = new Set<string>();
  for (let i = 0; i < rows; i++) {
    const roll = r();
    // A row that gets an eval question is no source for copies: its question is not the one copied.
    const contaminate = roll > 0.9995;
    let q: string;
    let output = `<tool_output>\n<snippet id="${i}-0">Title: ${pick(r, feats)}\nAbstract: ${pick(r, DRUGS)} was compared with ${pick(r, DRUGS)} in ${pick(r, POPULATIONS)}; the primary outcome was ${pick(r, OUTCOMES)} at ${pick(r, WEEKS)} weeks.</snippet>\n</tool_output>`;
    if (roll < 0.05 && recent.length > 0) {
      const src = pick(r, recent);
      copies.set(i, src.i);
      if (roll < 0.01) {
        q = src.q;
        exact++;
      } else {
        q = variant(src.q, r);
        near++;
      }
    } else {
      do q = question(r, feats);
      while (seen.has(q));
      seen.add(q);
      if (contaminate) {
        // not a source
      } else if (recent.length < 50_000) recent.push({ q, i });
      else recent[Math.floor(r() * recent.length)] = { q, i };
    }
    if (contaminate) {
      const e = pick(r, evalQs);
      contaminated.add(i);
      if (r() < 0.5) q = `${q} Related: ${e.toLowerCase()}`;
      else output = output.replace('Abstract: ', `Abstract: ${e} `);
    }
    const line = `${row(`r${i}`, q, output, 'See the cited trials.')}\n`;
    bytes += Buffer.byteLength(line);
    if (!out.write(line)) await new Promise<void>((res) => out.once('drain', () => res()));
  }
  await new Promise<void>((res, rej) => out.end((e?: Error | null) => (e ? rej(e) : res())));
  return { rows: file, eval: evalFile, bytes, nearDuplicates: near, exactDuplicates: exact, copies, contaminated };
}

export interface Measured {
  seconds: number;
  peakRssMb: number;
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the CLI with `args` (or, with `script`, node on that script) and reads its peak RSS. */
export function measure(args: string[], script = CLI): Promise<Measured> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString('utf8')).slice(-8000)));
    let peakKb = 0;
    const poll = setInterval(() => {
      try {
        const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
        if (m) peakKb = Math.max(peakKb, Number(m[1]));
      } catch {
        // the process just ended
      }
    }, 50);
    child.on('error', reject);
    child.on('close', (code) => {
      clearInterval(poll);
      resolve({ seconds: (performance.now() - started) / 1000, peakRssMb: peakKb / 1024, code, stdout, stderr });
    });
  });
}

/**
 * decontaminate's memory against two baselines measured in the same run: the same command over
 * the first tenth of the rows (same eval set: a ratio near 1 says the input does not count), and
 * a process holding only a plain set of the eval items' 13-grams (bench/plain-ngrams.ts).
 */
async function decontaminateMemory(dir: string, evalFile: string, full: Measured): Promise<string> {
  const tenth = join(dir, 'tenth');
  mkdirSync(tenth, { recursive: true });
  const small = await writeCurateData(tenth, Math.max(1, Math.floor(ROWS / 10)));
  const smallArgs = ['decontaminate', small.rows, '--against', evalFile, '--drop', '--out', join(tenth, 'clean.jsonl'), '--report', join(tenth, 'flagged.jsonl')];
  const s = await measure(smallArgs);
  const plainScript = join(PACKAGE_ROOT, 'dist/bench/plain-ngrams.js');
  const p = await measure([evalFile], plainScript);
  const mb = (m: Measured): string => `${m.peakRssMb.toFixed(0)} MB`;
  const rows = (n: number): string => n.toLocaleString('en-US');
  return [
    `decontaminate's peak RSS against its baselines, measured in this run (\`node dist/bench/plain-ngrams.js $DIR/eval.jsonl\` is the plain set):`,
    '',
    '| process | peak RSS | ratio |',
    '|---|---|---|',
    `| decontaminate, ${rows(ROWS)} rows | ${mb(full)} | 1 |`,
    `| decontaminate, the first ${rows(Math.floor(ROWS / 10))} rows, same eval set | ${mb(s)} | ${(full.peakRssMb / s.peakRssMb).toFixed(2)} (${rows(ROWS)} rows ÷ a tenth of them) |`,
    `| a plain set of the eval items' 13-grams (${p.stdout.trim()} strings), nothing else | ${mb(p)} | ${(full.peakRssMb / p.peakRssMb).toFixed(2)} (decontaminate ÷ plain set) |`,
  ].join('\n');
}

export async function benchCurate(): Promise<string> {
  const keep = process.env.TRAJFORGE_BENCH_CURATE_DIR;
  const dir = keep ?? mkdtempSync(join(tmpdir(), 'tf-bench-curate-'));
  if (keep && !existsSync(keep)) mkdirSync(keep, { recursive: true });
  try {
    process.stderr.write(`  curate: writing ${ROWS.toLocaleString('en-US')} rows and ${EVAL.toLocaleString('en-US')} eval items…\n`);
    const data = await writeCurateData(dir);
    const size = statSync(data.rows).size;
    const dedupArgs = ['dedup', data.rows, '--out', join(dir, 'kept.jsonl'), '--clusters', join(dir, 'clusters.jsonl'), '--json'];
    process.stderr.write('  curate: dedup…\n');
    const d = await measure(dedupArgs);
    const deconArgs = ['decontaminate', data.rows, '--against', data.eval, '--drop', '--out', join(dir, 'clean.jsonl'), '--report', join(dir, 'flagged.jsonl'), '--json'];
    process.stderr.write('  curate: decontaminate…\n');
    const c = await measure(deconArgs);
    const memory = await decontaminateMemory(dir, data.eval, c);
    if (d.code !== 0) process.stderr.write(`dedup exited ${d.code}: ${d.stderr}\n`);
    if (c.code !== 0) process.stderr.write(`decontaminate exited ${c.code}: ${c.stderr}\n`);
    const ds = d.code === 0 ? (JSON.parse(d.stdout) as Record<string, number>) : undefined;
    const cs = c.code === 0 ? (JSON.parse(c.stdout) as { flagged: number; eval: { checked: number; ngrams: number } }) : undefined;
    const dq = ds ? checkClusters(join(dir, 'clusters.jsonl'), data.copies) : undefined;
    const cq = cs ? checkFlags(join(dir, 'flagged.jsonl'), data.contaminated) : undefined;
    const n = (x: number): string => x.toLocaleString('en-US');
    const shown = (args: string[]): string =>
      `trajforge ${args.map((a) => a.replace(dir, '$DIR')).join(' ')}`;
    const mbps = (s: number): string => `${(size / 1024 ** 2 / s).toFixed(0)} MB/s`;
    return [
      '## Curation: `dedup` and `decontaminate` at 1,000,000 rows',
      '',
      `Input: ${ROWS.toLocaleString('en-US')} trajforge rows (${(size / 1024 ** 2).toFixed(0)} MB of JSONL; a question, one tool output, an answer), written by bench/curate.ts from a seed: questions from six templates whose slots hold real vocabularies (the 5,272 MDN features of data/corpus.jsonl × 8 browsers, 40 drugs × 12 populations × 12 outcomes × 5 durations), so nearly every row has thousands of siblings that differ only in a slot. Planted: ${n(data.exactDuplicates)} exact and ${n(data.nearDuplicates)} near-duplicates (upper case, quotes and spacing, a moved clause, a function word reworded) of earlier rows, and ${data.contaminated.size} rows holding one of the ${EVAL.toLocaleString('en-US')} eval questions (a template family of its own, 25 words each) in the question or the tool output. Each command runs as its own process; peak RSS is its VmHWM, read every 50 ms. Reproduce with \`npm run bench -- curate\` (\`node dist/bench/run.js curate\` after a build); \`TRAJFORGE_BENCH_CURATE_ROWS\` and \`TRAJFORGE_BENCH_CURATE_EVAL\` change the sizes, \`TRAJFORGE_BENCH_CURATE_DIR\` keeps the data.`,
      '',
      '| command | wall time | throughput | peak RSS | result | exit |',
      '|---|---|---|---|---|---|',
      `| \`${shown(dedupArgs)}\` | ${d.seconds.toFixed(1)} s | ${mbps(d.seconds)} | ${d.peakRssMb.toFixed(0)} MB | ${ds && dq ? `${n(ds.dropped!)} dropped in ${n(ds.clusters!)} clusters; ${n(dq.found)} of ${n(data.copies.size)} planted copies clustered with their source; distinct questions merged: ${n(dq.mergedSameWords)} whose features differ only in punctuation (\`:host\` / \`:host()\`), ${n(dq.merged)} with the same content words otherwise (\`while\` / \`do...while\`); ${n(ds.pairs_compared!)} pairs compared, ${n(ds.window_overflows!)} window overflows; ${ds.bands} bands × ${ds.rows_per_band} rows` : '-'} | ${d.code} |`,
      `| \`${shown(deconArgs)}\` | ${c.seconds.toFixed(1)} s | ${mbps(c.seconds)} | ${c.peakRssMb.toFixed(0)} MB | ${cs && cq ? `${n(cs.flagged)} flagged: ${n(cq.found)} of ${n(data.contaminated.size)} planted, ${n(cq.other)} others; ${n(cs.eval.ngrams)} eval n-grams` : '-'} | ${c.code} |`,
      '',
      memory,
      '',
      "Where dedup's memory goes: its first pass keeps each row's shingle sets (4 bytes a shingle; here ~26 in the word view and, for the rows of two clauses, ~29 in the clause view) and ~50 bytes of bookkeeping in typed arrays; RSS grows with them while the input is read, stays flat while the bands are sorted and compared, and grows again in the second pass by the ids and texts of the clustered rows the report needs. decontaminate holds one row and the eval index (12 bytes per n-gram entry) and streams.",
      '',
    ].join('\n');
  } finally {
    if (!keep) rmSync(dir, { recursive: true, force: true });
  }
}
