/**
 * Writes `schemas/<Name>.schema.json` from the zod schemas (`npm run schemas`).
 * `jsonSchemas()` is what the drift test compares against the committed files.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { schemas } from './index.js';

export function jsonSchemas(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, schema] of Object.entries(schemas)) {
    // A config or a rules file is written by people, defaults omitted: its schema is the input side. Records are the output side.
    const io = name === 'RunConfig' || name === 'ValidationRules' ? 'input' : 'output';
    const json = z.toJSONSchema(schema, { io, unrepresentable: 'any' }) as Record<string, unknown>;
    out[`${name}.schema.json`] = `${JSON.stringify({ $id: `https://trajforge.dev/schemas/${name}.schema.json`, title: name, ...json }, null, 2)}\n`;
  }
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const [file, text] of Object.entries(jsonSchemas())) {
    writeFileSync(join(PACKAGE_ROOT, 'schemas', file), text);
    process.stdout.write(`wrote schemas/${file}\n`);
  }
}
