/**
 * The small computations the sim's main agent hands to a Python tool (tools/python's
 * `run_python_code`, MiroThinker's `tool-python`): how long ago the release its evidence names
 * came out, counted from the date its system prompt gives (MiroThinker's "Today is:"). The
 * arithmetic is left to Python, as a model would leave it, so the answer in the trajectory is
 * the interpreter's own; the sim only writes the code, from the facts in the text.
 */

/** "version 79, released 2020-01-15": what the bundled corpus says of each release. */
const RELEASE = /\bversion ([\w.]+),? released (\d{4})-(\d{2})-(\d{2})\b/;
/** MiroThinker's date line in the system prompt. */
const TODAY = /\bToday is:? (\d{4})-(\d{2})-(\d{2})\b/;

export interface PythonTask {
  /** What the agent says it is about to compute. */
  readonly why: string;
  readonly code: string;
}

/** The computation for `evidence` (a sentence) seen on the day `system` names; null when either fact is missing. */
export function releaseAgeTask(evidence: string, system: string): PythonTask | null {
  const release = RELEASE.exec(evidence);
  const today = TODAY.exec(system);
  if (release === null || today === null) return null;
  const [, version, y, m, d] = release;
  const [, ty, tm, td] = today;
  const day = (yy: string, mm: string, dd: string): string => `date(${Number(yy)}, ${Number(mm)}, ${Number(dd)})`;
  const code = [
    'from datetime import date',
    `released = ${day(y!, m!, d!)}`,
    `today = ${day(ty!, tm!, td!)}`,
    'days = (today - released).days',
    `print(f"version ${version} was released {released.isoformat()}, {days} days ({days / 365.25:.1f} years) before {today.isoformat()}")`,
    'days',
  ].join('\n');
  return { why: `The report dates version ${version} to ${y}-${m}-${d}; I will compute how long ago that was with Python.`, code };
}
