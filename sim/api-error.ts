/**
 * The errors the sim answers with, in OpenAI's body shape (`{error: {message, type, param,
 * code}}`), or as a proxy's HTML page: thrown anywhere in a request's handling, sent by the
 * server's one catch.
 */
import { WireError } from '../pipeline/errors.js';

/** An error that crosses the wire, in OpenAI's body shape. */
export class ApiError extends WireError {
  constructor(
    override readonly status: number,
    message: string,
    readonly type: string,
    readonly param: string | null,
    readonly code: string | number | null,
    readonly headers: Record<string, string> = {},
    /** A body that is not JSON (an HTML error page from a proxy), sent as is. */
    readonly raw?: { readonly contentType: string; readonly text: string },
  ) {
    super(message);
  }

  json(): unknown {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export function invalid(message: string, param: string | null, code: string | null = null): ApiError {
  return new ApiError(400, message, 'invalid_request_error', param, code);
}

/**
 * vLLM's answer to a model it does not serve (vllm/entrypoints/openai/engine/serving.py,
 * `OpenAIServing._check_model`): 404, type NotFoundError, param model, the status as the code.
 */
export function modelNotFound(model: string): ApiError {
  return new ApiError(404, `The model \`${model}\` does not exist.`, 'NotFoundError', 'model', 404);
}

/** A path vLLM has no route for: FastAPI's own 404 body, not an OpenAI error (what a base URL without /v1 meets). */
export function noRoute(): ApiError {
  return new ApiError(404, 'Not Found', 'not_found', null, null, {}, { contentType: 'application/json', text: '{"detail":"Not Found"}' });
}

const BAD_GATEWAY_HTML =
  '<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n';

/** The error a `server_error` answers with: OpenAI's bodies, and nginx's HTML page for a 502. */
export function serverError(status: number): ApiError {
  if (status === 502) return new ApiError(502, '502 Bad Gateway', 'server_error', null, null, {}, { contentType: 'text/html', text: BAD_GATEWAY_HTML });
  if (status === 503) return new ApiError(503, 'The server is overloaded or not ready yet.', 'server_error', null, 'service_unavailable');
  if (status === 500) return new ApiError(500, 'The server had an error while processing your request. Sorry about that!', 'server_error', null, null);
  return new ApiError(status, `The server answered ${status}.`, 'server_error', null, null);
}

