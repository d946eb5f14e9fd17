/**
 * A row that cannot be exported in the asked form. A file of its own so that the token export's
 * worker processes, which throw it, need not load the training view and all it reads (the
 * dialects, the schemas) to start.
 */
import { UserError } from '../errors.js';

/** A row that cannot be exported in the asked form; skipped and counted, like a bad row. */
export class UnexportableRow extends UserError {}
