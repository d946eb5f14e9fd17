/** The model the sim serves unless told others (`--served-model-name`); with `--lenient` any name a request asks for is answered. */

export const SIM_MODEL = 'trajforge-sim';

/** A model as OpenAI's model list shows it. */
export function modelCard(id: string): unknown {
  return { id, object: 'model', created: 0, owned_by: 'trajforge' };
}
