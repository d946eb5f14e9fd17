/**
 * Pieces of the report's viewer that read one record's facts: the error box, a call's details,
 * a repair (with the text before and after it) or rollback at its turn, the judge's verdict and
 * a question's rollouts with pass@k.
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
 * blocks, which are the text as repaired, and when its record kept the completion before it,
 * shows that beside the turn's kept text (`after`: the turn's blocks, or null for none).
 */
function fixBox(kind: 'repair' | 'rollback', x: RowRepair | [number | null, string, string, string], kept: boolean, after?: string, shownAbove = false): HTMLElement {
  const box = el('div', 'fix ' + kind);
  box.setAttribute('data-turn', x[0] === null ? '' : String(x[0]));
  box.appendChild(el('div', 'lab', (kind === 'repair' ? 'repair' : 'rollback') + ' · turn ' + (x[0] === null ? '-' : x[0]) + ' · ' + x[1]));
  box.appendChild(el('div', null, x[2]));
  const turn = 'turn ' + (x[0] === null ? '-' : x[0]);
  if (kind === 'repair' && x[3] !== undefined) {
    // A turn's repairs share its completion: its before and after are shown once, with the first.
    box.appendChild(shownAbove ? el('div', 'aft', 'text before and after: as in the repair of ' + turn + ' above') : beforeAfter(x[3], x[4] === true, kept ? (after ?? '') : null, turn));
    return box;
  }
  if (kind === 'rollback') {
    box.appendChild(el('div', 'bef', 'before (discarded):'));
    box.appendChild(el('pre', 'before', x[3] || '(empty)'));
  }
  box.appendChild(el('div', 'aft', !kept ? 'after: ' + turn + ' left no text in the trajectory' : kind === 'rollback' ? 'after: ' + turn + ' as kept, below' : 'after: ' + turn + ' as repaired, above'));
  return box;
}

/**
 * A repair's text before (the completion as the endpoint sent it) and after (the turn as the
 * trajectory kept it), collapsed, side by side. Between the head and the tail the two share,
 * what the repair dropped is struck through in the before and what it wrote underlined in the
 * after; a turn that left no text dropped all of it.
 */
function beforeAfter(before: string, cut: boolean, after: string | null, turn: string): HTMLElement {
  const [head, tail] = common(before, after ?? '');
  const dropped = before.length - head - tail;
  const added = after === null ? 0 : after.length - head - tail;
  const box = el('details', 'ba');
  const change = dropped === 0 && added === 0 ? 'the same text' : num(dropped) + ' characters dropped · ' + num(added) + ' written';
  box.appendChild(el('summary', null, 'text before and after · ' + change));
  const grid = el('div', 'ba2');
  const side = el('div', 'side');
  side.appendChild(el('div', 'bef', 'before: as the endpoint sent it' + (cut ? ' (long: cut where marked)' : '')));
  side.appendChild(marked('before', before, head, tail, 'del'));
  grid.appendChild(side);
  const other = el('div', 'side');
  other.appendChild(el('div', 'aft', after === null ? 'after: ' + turn + ' left no text in the trajectory' : 'after: ' + turn + ' as kept in the trajectory'));
  if (after !== null) other.appendChild(marked('after', after, head, tail, 'ins'));
  grid.appendChild(other);
  box.appendChild(grid);
  return box;
}

/** `text` in a pre, its middle (between `head` and the last `tail` characters) in a `tag`. */
function marked(cls: string, text: string, head: number, tail: number, tag: 'del' | 'ins'): HTMLElement {
  const pre = el('pre', cls);
  pre.appendChild(document.createTextNode(text.slice(0, head)));
  const mid = text.slice(head, text.length - tail);
  if (mid) pre.appendChild(el(tag, null, mid));
  pre.appendChild(document.createTextNode(text.slice(text.length - tail)));
  return pre;
}

/**
 * The lengths of the head and the tail `a` and `b` share (not overlapping). A tail shorter than
 * MIN_TAIL is taken as chance (the `>` that ends both a dropped tag and a closing one), not
 * as text the repair kept.
 */
function common(a: string, b: string): [number, number] {
  const n = Math.min(a.length, b.length);
  let head = 0;
  while (head < n && a.charCodeAt(head) === b.charCodeAt(head)) head++;
  let tail = 0;
  while (tail < n - head && a.charCodeAt(a.length - 1 - tail) === b.charCodeAt(b.length - 1 - tail)) tail++;
  return [head, tail < MIN_TAIL ? 0 : tail];
}
const MIN_TAIL = 4;

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
