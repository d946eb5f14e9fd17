/**
 * Pieces of the report's viewer that read one record's facts: the error box, a call's details,
 * a repair or rollback at its turn, the judge's verdict and a question's rollouts with pass@k.
 * Plain functions (scripts.ts puts this file between dom.ts and report.ts, inside one function),
 * so report.ts keeps the list and the order of the viewer, and these the look of each fact.
 * Every text reaches the DOM through textContent (el), never innerHTML.
 */

/** What each failure reason means, in a line a reader acts on (schemas/index.ts FailureReason). */
const REASONS: Record<string, string> = {
  max_turns: 'the turn or tool-call budget ran out before an answer',
  no_answer: 'the model stopped without writing an answer',
  truncated: 'the completion was cut by the token limit (finish_reason length) and nothing usable was left',
  context_overflow: 'the next request would not fit the context window',
  llm_error: 'the endpoint kept failing after its retries',
  tool_error: 'a tool server failed and the rollout could not go on',
  invalid: 'the trajectory failed validation',
  wrong_answer: 'the judge found the answer wrong',
  aborted: 'the run stopped (Ctrl-C, a budget, fail-fast) while this sample ran',
  endpoint_rejected: 'the endpoint refused this prompt (a 4xx for it alone)',
  response_too_large: "the endpoint's answer passed endpoint.max_response_bytes",
  unjudged: 'the judge could not be reached or gave no readable verdict (rerun --reason unjudged)',
  parent_failed: 'a session above this one in its family failed',
  lease_lost: "queue mode: the sample's lease ran out too many times",
};

/** A failed row always gets a box: its reason, what the reason means, and the record's message when it has one. */
function errorBox(status: string, reason: string, message: string | undefined): HTMLElement | null {
  if (status !== 'failed' && !message) return null;
  const box = el('div', 'errbox');
  box.setAttribute('data-reason', reason);
  box.appendChild(el('b', null, status === 'failed' ? 'failed: ' + (reason || 'no reason recorded') : 'error'));
  const meaning = REASONS[reason];
  if (status === 'failed') box.appendChild(el('div', 'why', meaning || (reason ? 'a reason this report does not know' : 'the record names no reason')));
  box.appendChild(el('pre', null, message || '(the record has no error message)'));
  return box;
}

/** Under a call: the tool, its latency, whether the cache served it, its error, and its arguments. */
function callFacts(c: [string, string, number | null, boolean, string, boolean, boolean] | undefined): HTMLElement | null {
  if (!c) return null;
  const box = el('div', 'callx');
  const line = el('div', 'facts');
  line.appendChild(el('span', null, 'tool: ' + (c[0] || '-')));
  line.appendChild(el('span', 'lat', 'latency: ' + (c[2] === null ? '-' : num(Math.round(c[2])) + ' ms')));
  line.appendChild(el('span', c[3] ? 'cached yes' : 'cached', c[3] ? 'cached: yes' : 'cached: no'));
  if (c[5]) line.appendChild(el('span', 'skip', 'skipped: never reached a server'));
  if (c[6]) line.appendChild(el('span', null, 'result truncated'));
  box.appendChild(line);
  if (c[4]) box.appendChild(el('div', 'cerr', 'error: ' + c[4]));
  const args = el('details');
  args.appendChild(el('summary', null, 'arguments'));
  args.appendChild(el('pre', 'args', c[1]));
  box.appendChild(args);
  return box;
}

/**
 * A repair or rollback where it happened. A rollback holds the completion it threw away (the
 * text before) and the kept turn follows it (the text after); a repair sits after its turn's
 * blocks, which are the text as repaired (the record keeps no text before a repair).
 */
function fixBox(kind: 'repair' | 'rollback', x: [number | null, string, string, string?], kept: boolean): HTMLElement {
  const box = el('div', 'fix ' + kind);
  box.setAttribute('data-turn', x[0] === null ? '' : String(x[0]));
  box.appendChild(el('div', 'lab', (kind === 'repair' ? 'repair' : 'rollback') + ' · turn ' + (x[0] === null ? '-' : x[0]) + ' · ' + x[1]));
  box.appendChild(el('div', null, x[2]));
  if (kind === 'rollback') {
    box.appendChild(el('div', 'bef', 'before (discarded):'));
    box.appendChild(el('pre', 'before', x[3] || '(empty)'));
  }
  const turn = 'turn ' + (x[0] === null ? '-' : x[0]);
  box.appendChild(el('div', 'aft', !kept ? 'after: ' + turn + ' left no text in the trajectory' : kind === 'rollback' ? 'after: ' + turn + ' as kept, below' : 'after: ' + turn + ' as repaired, above'));
  return box;
}

/** The judge's verdict, score and rationale, and each rubric criterion's score. */
function judgeBox(j: RowDetail['j']): HTMLElement | null {
  if (!j) return null;
  const box = el('div', 'judge');
  box.appendChild(el('span', 'badge v-' + j.v, j.v || '-'));
  box.appendChild(el('span', null, ' by ' + (j.st || '-') + (j.sc === null ? '' : ' · rubric score ' + j.sc.toFixed(2)) + (j.f1 === null ? '' : ' · F1 ' + j.f1.toFixed(2))));
  if (j.e) box.appendChild(el('div', 'cerr', j.e));
  if (j.r) box.appendChild(el('pre', 'box', j.r));
  if (j.cr.length) {
    const t = el('table', 't');
    for (let i = 0; i < j.cr.length; i++) {
      const c = j.cr[i]!;
      const tr = el('tr');
      tr.appendChild(el('td', null, c[0]));
      tr.appendChild(el('td', null, 'weight ' + (c[1] === null ? '-' : c[1])));
      tr.appendChild(el('td', null, c[2] === null ? '-' : c[2].toFixed(2)));
      t.appendChild(tr);
    }
    box.appendChild(t);
  }
  return box;
}

/** pass@k of one question: 1 − C(n−c, k)/C(n, k) (pass-at-k.ts); null when fewer than k samples. */
function passAt(n: number, c: number, k: number): number | null {
  if (n < k || n === 0) return null;
  if (n - c < k) return 1;
  let miss = 1;
  for (let i = n - c + 1; i <= n; i++) miss *= 1 - k / i;
  return 1 - miss;
}

/** A sample is correct when accepted and judged correct, as pass-at-k.ts counts it. */
function correct(s: RowSummary): boolean {
  return s[1] === 'ok' && s[14] === 'correct';
}
