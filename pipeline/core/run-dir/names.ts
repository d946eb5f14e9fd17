/**
 * The files of a run directory, by name: what the run store writes and every dataset command
 * reads (see DESIGN.md, "The run directory").
 */
export const TRAJECTORIES = 'trajectories.jsonl';
export const FAILURES = 'failures.jsonl';
export const MANIFEST = 'manifest.json';
