import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { jsonSchemas } from '../../schemas/emit.js';
import { RunConfig, Trajectory } from '../../schemas/index.js';

describe('JSON Schema files', () => {
  const generated = jsonSchemas();

  it('cover every record that crosses a file boundary', () => {
    expect(Object.keys(generated).sort()).toEqual(
      ['ContaminationFlag', 'DedupCluster', 'FailureRecord', 'Question', 'RejectedDraft', 'RunConfig', 'RunManifest', 'SynthesizedQuestion', 'ToolCallRecord', 'Trajectory', 'ValidationRules'].map((n) => `${n}.schema.json`),
    );
  });

  for (const [file, text] of Object.entries(generated)) {
    it(`${file} matches the zod schema (run \`npm run schemas\` after changing schemas/index.ts)`, () => {
      expect(readFileSync(join(PACKAGE_ROOT, 'schemas', file), 'utf8')).toBe(text);
    });
  }

  it('describe the records: a Trajectory requires its contract fields', () => {
    const schema = JSON.parse(generated['Trajectory.schema.json']!);
    for (const field of ['id', 'question', 'interleaved_text', 'tool_calls', 'status', 'validation', 'usage', 'attempt', 'run_id']) {
      expect(schema.required).toContain(field);
    }
    expect(Trajectory.shape.status.options).toEqual(['ok', 'failed']);
  });

  it('describe the config as written by people: only the model is required', () => {
    const schema = JSON.parse(generated['RunConfig.schema.json']!);
    expect(schema.required).toEqual(['endpoint']);
    expect(schema.properties.endpoint.required).toEqual(['model']);
    expect(RunConfig.safeParse({ endpoint: {} }).success).toBe(false);
  });

  it('describe the validate --rules file as written by people: nothing required, no field but its own', () => {
    const schema = JSON.parse(generated['ValidationRules.schema.json']!);
    expect(schema.required ?? []).toEqual([]);
    expect(Object.keys(schema.properties).sort()).toEqual(['gold', 'judge', 'limits', 'severities']);
    expect(schema.additionalProperties).toBe(false);
  });
});
