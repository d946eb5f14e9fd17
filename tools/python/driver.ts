/**
 * The Python side of one call, run inside each sandbox once it has started: a namespace that
 * lives as long as the sandbox (so variables carry over between calls, as in a notebook), and
 * `_tf_run(code)`, which runs a cell the way E2B's code interpreter does for MiroThinker: the
 * last expression's value is the result, an exception is the error with its traceback, and the
 * sandbox goes on either way. It answers one JSON string, which child.ts hands to the server.
 *
 * Frames of the runner itself are left out of tracebacks: the model sees its own cell only.
 */

/** The file name tracebacks give the model's code. */
export const CELL_FILENAME = '<cell>';

/** The sandbox's home and working directory, where uploads go by default (E2B's `/home/user`). */
export const SANDBOX_HOME = '/home/user';

export const DRIVER_PY = `
import builtins, json, os, sys, traceback
from pyodide.code import eval_code_async

os.makedirs(${JSON.stringify(SANDBOX_HOME)}, exist_ok=True)
os.chdir(${JSON.stringify(SANDBOX_HOME)})
os.environ["HOME"] = ${JSON.stringify(SANDBOX_HOME)}

_tf_ns = {"__name__": "__main__", "__builtins__": builtins}

def _tf_traceback(e):
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != ${JSON.stringify(CELL_FILENAME)}:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb))

async def _tf_run(code, max_chars):
    out = {"value": None, "error": None}
    try:
        value = await eval_code_async(code, _tf_ns, filename=${JSON.stringify(CELL_FILENAME)}, return_mode="last_expr")
        if value is not None:
            out["value"] = repr(value)[:max_chars]
    # SystemExit and KeyboardInterrupt too: the cell failed, the sandbox goes on.
    except BaseException as e:
        try:
            message = str(e)
            trace = _tf_traceback(e)
        except BaseException:
            message = trace = "<the exception could not be shown>"
        out["error"] = {"name": type(e).__name__, "value": message[:max_chars], "traceback": trace[:max_chars]}
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
    return json.dumps(out)
`;
