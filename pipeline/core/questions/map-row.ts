/**
 * One row → a Question: the configured field aliases for question, id and answer, an id made
 * from the text when the row has none, every other field kept in `meta`. A row that cannot be a
 * question says which field and why.
 */
import { SCHEMA_VERSION, type Question, type QuestionsConfig } from '../../../schemas/index.js';
import { findLoneSurrogate } from '../../text.js';
import { questionIdFor } from '../ids.js';
import { readRubrics } from '../judge/rubrics.js';
import { bad, typeName, type Bad } from './rows.js';

/** Plain assignment of `__proto__` would replace the object's prototype instead of storing data. */
function setOwn(obj: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
  else obj[key] = value;
}

/** A value counts as present when it is neither null nor missing; CSV has no null, so a blank id cell is absent too. */
function firstPresent(row: Record<string, unknown>, aliases: readonly string[], blankIsAbsent: boolean): string | undefined {
  return aliases.find((a) => {
    if (!Object.hasOwn(row, a)) return false;
    const v = row[a];
    if (v === null || v === undefined) return false;
    return !(blankIsAbsent && typeof v === 'string' && v.trim() === '');
  });
}

export function mapRow(value: unknown, fields: QuestionsConfig['fields']): { question: Question } | Bad {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return bad(undefined, `expected an object, got ${typeName(value)}`);
  }
  const row = value as Record<string, unknown>;

  const qKey = firstPresent(row, fields.question, false);
  if (qKey === undefined) return bad('question', `missing (looked for ${fields.question.join(', ')})`);
  const rawQuestion = row[qKey];
  if (typeof rawQuestion !== 'string') return bad(qKey, `expected a string, got ${typeName(rawQuestion)}`);
  const question = rawQuestion.trim();
  if (question === '') return bad(qKey, 'empty');

  const idKey = firstPresent(row, fields.id, true);
  let id: string;
  if (idKey === undefined) {
    id = questionIdFor(question);
  } else {
    const rawId = row[idKey];
    if (typeof rawId === 'string') {
      id = rawId;
    } else if (typeof rawId === 'number' && Number.isFinite(rawId)) {
      // JSON.parse has already rounded such an id; two different ids could turn into one and
      // the second would be dropped as a duplicate.
      if (Number.isInteger(rawId) && !Number.isSafeInteger(rawId)) {
        return bad(idKey, `integer ${rawId} is too large to read exactly; write it as a string`);
      }
      id = String(rawId);
    } else {
      return bad(idKey, `expected a string or number, got ${typeName(rawId)}`);
    }
  }

  const ansKey = firstPresent(row, fields.answer, true);
  let answer: string | undefined;
  let answers: string[] | undefined;
  if (ansKey !== undefined) {
    const rawAnswer = row[ansKey];
    const list = Array.isArray(rawAnswer) ? rawAnswer : [rawAnswer];
    const texts: string[] = [];
    for (const item of list) {
      if (typeof item === 'string') {
        if (item.trim() !== '') texts.push(item);
      } else if ((typeof item === 'number' && Number.isFinite(item)) || typeof item === 'boolean') {
        texts.push(String(item));
      } else {
        const got = Array.isArray(rawAnswer) ? `a list holding ${typeName(item)}` : typeName(item);
        return bad(ansKey, `expected a string, a number or a list of strings, got ${got}`);
      }
    }
    // An empty gold answer would "match" every final answer under `contains`: treat it as absent.
    answer = texts[0];
    if (Array.isArray(rawAnswer) && texts.length > 0) answers = texts;
  }

  // A field that gave no answer (`[]`, `[""]`) was not used, so it stays in meta like any other.
  const usedAnsKey = answer === undefined ? undefined : ansKey;
  const meta: Record<string, unknown> = {};
  let metaKeys = 0;
  for (const k of Object.keys(row)) {
    if (k === qKey || k === idKey || k === usedAnsKey) continue;
    setOwn(meta, k, row[k]);
    metaKeys++;
  }
  if (answers !== undefined && !Object.hasOwn(meta, 'answers')) {
    meta.answers = answers;
    metaKeys++;
  }

  // JSON can spell half of a surrogate pair (`\ud800`); no UTF-8 writer can then write the row
  // into a record or an export, so it is refused like invalid UTF-8 in the file.
  const lone = findLoneSurrogate(row);
  if (lone !== undefined) {
    const hex = lone.code.toString(16).toUpperCase();
    return bad(lone.path || undefined, `a lone surrogate (U+${hex}) at character ${lone.index + 1}: not text that UTF-8 can hold`);
  }

  // Rubrics are read by the judge; a list that is not one is a bad row now, not an unjudged sample later.
  const rubric = readRubrics(meta);
  if (rubric !== undefined && !Array.isArray(rubric)) return bad(rubric.field, rubric.message);

  const q: Question = { schema_version: SCHEMA_VERSION, id, question };
  if (answer !== undefined) q.answer = answer;
  if (metaKeys > 0) q.meta = meta;
  return { question: q };
}
