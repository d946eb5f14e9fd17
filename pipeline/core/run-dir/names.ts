/**
 * The files of a run directory, by name: what the run store writes and every dataset command
 * reads (see DESIGN.md, "The run directory").
 */
export const TRAJECTORIES = 'trajectories.jsonl';
export const FAILURES = 'failures.jsonl';
export const MANIFEST = 'manifest.json';

/** A synthesis run directory (`trajforge synthesize`): the kept questions, the rejected drafts, and the solvability rollouts' own run directory. */
export const SYNTH_QUESTIONS = 'questions.jsonl';
export const SYNTH_REJECTED = 'rejected.jsonl';
export const SYNTH_SOLVE_DIR = 'solve';
