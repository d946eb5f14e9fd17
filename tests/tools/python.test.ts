/**
 * The Python interpreter server (tools/python), run as a real process over stdio, fed the code
 * a hostile model would write. Every door is tried from inside a sandbox; after each attempt a
 * bystander sandbox must still hold its state and the attacking sandbox must still answer.
 * Needs a built dist/ (`npm run build`). The server runs with --network-namespace off, so what
 * holds is the process lockdown alone, not the kernel's namespace.
 */
import { createSocket } from 'node:dgram';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { pyRepr, RESULT_CUT_MARKER } from '../../tools/python/execution-text.js';

const SERVER = join(PACKAGE_ROOT, 'dist/tools/python/server.js');
/** Cold starts on a loaded two-core machine: the first sandbox also builds the snapshot. */
const START_MS = 400_000;
const CALL_MS = 240_000;

interface Answer {
  text: string;
  isError: boolean;
  structured: Record<string, any> | undefined;
}

interface Started {
  client: Client;
  pid: number;
  stderr: () => string;
}

const running: Started[] = [];
let scratch: string;

async function start(args: string[]): Promise<Started> {
  const transport = new StdioClientTransport({ command: process.execPath, args: [SERVER, ...args], env: { PATH: process.env.PATH ?? '' }, stderr: 'pipe' });
  let stderr = '';
  transport.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const client = new Client({ name: 'python-test', version: '0' });
  await client.connect(transport);
  const started = { client, pid: transport.pid!, stderr: () => stderr };
  running.push(started);
  return started;
}

async function call(s: Started, name: string, args: Record<string, unknown>): Promise<Answer> {
  const r = await s.client.callTool({ name, arguments: args }, undefined, { timeout: CALL_MS });
  const content = r.content as Array<{ type: string; text: string }>;
  return { text: content.map((c) => c.text).join('\n'), isError: r.isError === true, structured: r.structuredContent as Record<string, any> | undefined };
}

async function create(s: Started): Promise<string> {
  const a = await call(s, 'create_sandbox', {});
  expect(a.isError, a.text).toBe(false);
  const m = /^Sandbox created with sandbox_id: (\S+)$/.exec(a.text);
  expect(m, a.text).not.toBeNull();
  return m![1]!;
}

const run = (s: Started, code: string, sandbox_id?: string, timeout?: number): Promise<Answer> =>
  call(s, 'run_python_code', { code_block: code, ...(sandbox_id ? { sandbox_id } : {}), ...(timeout ? { timeout } : {}) });

/** The pids whose parent is `pid` (a sandbox is a child process of the server). */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const p of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      // The fields after the command name, which may itself hold spaces and parentheses: state, ppid, …
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid) out.push(Number(p));
    } catch {
      // gone
    }
  }
  return out;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

beforeAll(() => {
  if (!existsSync(SERVER)) throw new Error(`${SERVER} is missing: run \`npm run build\` before these tests`);
  scratch = mkdtempSync(join(tmpdir(), 'trajforge-python-test-'));
});

afterAll(async () => {
  await Promise.allSettled(running.map((s) => s.client.close()));
  rmSync(scratch, { recursive: true, force: true });
});

describe('run_python_code in MiroThinker’s shape', () => {
  let s: Started;
  let bystander: string;

  beforeAll(async () => {
    s = await start(['--network-namespace', 'off', '--memory-mb', '384', '--max-sandboxes', '8', '--max-output-bytes', '65536', '--max-result-chars', '20000']);
    bystander = await create(s);
    const a = await run(s, 'kept = "bystander state"', bystander);
    expect(a.text).toContain('Error: None');
  }, START_MS);

  let attackerId: string | undefined;
  /** The sandbox the hostile code runs in: one for all attempts, restarted by the server when an attempt kills it. */
  async function attacker(): Promise<string> {
    attackerId ??= await create(s);
    return attackerId;
  }

  /** The server still serves: the bystander kept its state, and `sandbox` (when given) answers. */
  async function stillServing(sandbox?: string): Promise<void> {
    expect(pidAlive(s.pid)).toBe(true);
    expect((await run(s, 'kept', bystander)).text).toContain("Results: [Result('bystander state')]");
    if (sandbox) expect((await run(s, '6 * 7', sandbox)).text).toContain('Results: [Result(42)]');
  }

  it('answers stdout, stderr and the last expression as E2B’s Execution text', async () => {
    const a = await run(s, 'import sys\nprint("hi")\nprint("careful", file=sys.stderr)\n6 * 7');
    expect(a.isError).toBe(false);
    expect(a.text).toBe("Execution(Results: [Result(42)], Logs: Logs(stdout: ['hi\\n'], stderr: ['careful\\n']), Error: None)");
    expect(a.structured).toMatchObject({ stdout: 'hi\n', stderr: 'careful\n', result: '42', error: null, output_truncated: false });
  }, CALL_MS);

  it('gives an exception as the error, with the traceback of the cell alone, and the sandbox goes on', async () => {
    const id = await create(s);
    const a = await run(s, 'x = 1\ndef f():\n    return 1 / 0\nf()', id);
    expect(a.isError).toBe(false);
    expect(a.text).toContain("Results: [], Logs: Logs(stdout: [], stderr: []), Error: ExecutionError(name='ZeroDivisionError', value='division by zero', traceback=");
    expect(a.structured!.error.traceback).toMatch(/^Traceback \(most recent call last\):\n {2}File "<cell>", line 4, in <module>\n[\s\S]*File "<cell>", line 3, in f\n/);
    expect(a.structured!.error.traceback).not.toMatch(/_pyodide|pyodide\/|webloop/);
    expect((await run(s, 'x + 1', id)).text).toContain('Results: [Result(2)]');
    const syntax = await run(s, 'def (:', id);
    expect(syntax.structured!.error.name).toBe('SyntaxError');
    expect(syntax.structured!.error.traceback).toContain('File "<cell>", line 1');
  }, CALL_MS);

  it('keeps variables, imports and files across calls with the same sandbox_id, and no other sandbox sees them', async () => {
    const a = await create(s);
    const b = await create(s);
    await run(s, 'import math\nsecret = math.factorial(5)\nopen("notes.txt", "w").write("kept")', a);
    expect((await run(s, 'secret, open("notes.txt").read()', a)).text).toContain("Results: [Result((120, 'kept'))]");
    const other = await run(s, 'import os\n("secret" in globals(), os.path.exists("notes.txt"))', b);
    expect(other.text).toContain('Results: [Result((False, False))]');
    // Without a sandbox_id every call starts afresh.
    await run(s, 'loose = 1');
    expect((await run(s, 'loose')).structured!.error.name).toBe('NameError');
  }, CALL_MS);

  it('writes strings as Python’s own repr does', async () => {
    const samples = ['plain', "it's", 'say "hi"', `both ' and "`, 'tab\there\r\n', 'back\\slash', '\u0000\u001f\u007f', 'é ü 漢字 🙂', '\u00a0\u200b\u2028\ud7ff'];
    const a = await run(s, `import json\nprint(json.dumps([repr(x) for x in json.loads(${pyRepr(JSON.stringify(samples))})]))`);
    expect(JSON.parse(a.structured!.stdout)).toEqual(samples.map(pyRepr));
  }, CALL_MS);

  describe('no network of any kind', () => {
    let tcp: Server;
    let tcpPort = 0;
    let connections = 0;
    const udp = createSocket('udp4');
    let datagrams = 0;

    beforeAll(async () => {
      tcp = createServer((sock) => {
        connections++;
        sock.end('HTTP/1.0 200 OK\r\n\r\nreached');
      });
      await new Promise<void>((res) => tcp.listen(0, '127.0.0.1', res));
      tcpPort = (tcp.address() as { port: number }).port;
      udp.on('message', () => datagrams++);
      await new Promise<void>((res) => udp.bind(0, '127.0.0.1', res));
    });
    afterAll(async () => {
      udp.close();
      await new Promise((res) => tcp.close(res));
    });

    const attempts: Array<[string, (port: number, udpPort: number) => string]> = [
      ['a TCP socket', (p) => `import socket\nsocket.create_connection(("127.0.0.1", ${p}), timeout=5).recv(100)`],
      ['a UDP datagram', (_, u) => `import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b"x", ("127.0.0.1", ${u}))`],
      ['urllib', (p) => `import urllib.request\nurllib.request.urlopen("http://127.0.0.1:${p}/", timeout=5).read()`],
      ['http.client', (p) => `import http.client\nc = http.client.HTTPConnection("127.0.0.1", ${p}, timeout=5)\nc.request("GET", "/")\nc.getresponse().read()`],
      ['pyodide.http.pyfetch', (p) => `from pyodide.http import pyfetch\n(await pyfetch("http://127.0.0.1:${p}/")).status`],
      ['pyodide.http.open_url', (p) => `from pyodide.http import open_url\nopen_url("http://127.0.0.1:${p}/").read()`],
      ['JavaScript fetch', (p) => `from js import fetch\nawait fetch("http://127.0.0.1:${p}/")`],
      ['Pyodide’s Node socket layer', (p) => `import pyodide_js\nawait pyodide_js._api.initializeNodeSockFS()\nimport socket\nsocket.create_connection(("127.0.0.1", ${p}), timeout=5).recv(100)`],
      ['installing a package', () => `import pyodide_js\nawait pyodide_js.loadPackage("micropip")\nimport micropip\nawait micropip.install("requests")`],
    ];

    it.each(attempts)('refuses %s, and no connection or datagram reaches the host', async (_name, code) => {
      const id = await attacker();
      const a = await run(s, code(tcpPort, (udp.address() as { port: number }).port), id, 20);
      expect(a.structured!.error, a.text).not.toBeNull();
      expect(a.text).not.toContain('reached');
      expect(connections).toBe(0);
      expect(datagrams).toBe(0);
      await stillServing(id);
    }, CALL_MS);

    it('answers name lookups inside the sandbox with addresses that lead nowhere', async () => {
      const a = await run(s, `import socket\nip = socket.gethostbyname("example.com")\ntry:\n    socket.create_connection((ip, 80), timeout=5)\n    reached = True\nexcept OSError:\n    reached = False\n(ip, reached)`);
      // Emscripten's resolver makes up an address in 172.29/16 for any name: no query leaves.
      expect(a.text).toMatch(/Results: \[Result\(\('172\.29\.\d+\.\d+', False\)\)\]/);
      expect(connections).toBe(0);
    }, CALL_MS);
  });

  describe('no host file system', () => {
    const hostFile = () => join(scratch, 'host-secret.txt');
    beforeAll(() => writeFileSync(hostFile(), 'host secret'));

    const attempts: Array<[string, () => string]> = [
      ['/etc/passwd', () => 'open("/etc/passwd").read()'],
      ['a file of the host by its path', () => `open(${pyRepr(hostFile())}).read()`],
      ['the repository', () => `open(${pyRepr(join(PACKAGE_ROOT, 'package.json'))}).read()`],
      ['the host’s /proc', () => 'open("/proc/1/cmdline").read()'],
      ['a host directory mounted through Pyodide', () => 'import pyodide_js, os\npyodide_js.mountNodeFS("/mnt", "/etc")\nos.listdir("/mnt")'],
      ['the repository mounted through Pyodide', () => `import pyodide_js, os\npyodide_js.mountNodeFS("/repo", ${pyRepr(PACKAGE_ROOT)})\nos.listdir("/repo")`],
      ['a host file through Emscripten’s NODEFS', () => `import pyodide_js\nfrom pyodide.ffi import to_js\nFS = pyodide_js.FS\nFS.mkdirTree("/h")\nopts = FS.lookupPath("/").constructor.fromEntries(to_js([["root", ${pyRepr(scratch)}]]))\nFS.mount(FS.filesystems.NODEFS, opts, "/h")\nopen("/h/host-secret.txt").read()`],
      ['writing to the host', () => `import pyodide_js, os\npyodide_js.mountNodeFS("/out", ${pyRepr(scratch)})\nopen("/out/written-by-python.txt", "w").write("escaped")`],
    ];

    it.each(attempts)('cannot read or write %s', async (_name, code) => {
      const id = await attacker();
      const a = await run(s, code(), id);
      expect(a.structured!.error, a.text).not.toBeNull();
      expect(a.text).not.toContain('host secret');
      expect(a.text).not.toMatch(/root:x:0:0|"name": "trajforge"/);
      expect(existsSync(join(scratch, 'written-by-python.txt'))).toBe(false);
      await stillServing(id);
    }, CALL_MS);

    it('sees only its own files', async () => {
      const a = await run(s, 'import os\nsorted(os.listdir("/"))');
      expect(a.structured!.error).toBeNull();
      const top: string[] = JSON.parse(a.structured!.result.replace(/'/g, '"'));
      for (const host of ['etc', 'usr', 'root', 'work', 'bin', 'var']) expect(top).not.toContain(host);
    }, CALL_MS);
  });

  describe('no route to the host process', () => {
    const attempts: Array<[string, string]> = [
      ['from js import process', 'from js import process\nprocess.kill(process.ppid, 9)'],
      ['import js; js.process', 'import js\njs.process.exit(3)'],
      ["__import__('js')", "__import__('js').globalThis.process.exit(3)"],
      ['pyodide.ffi to the Function constructor', 'from pyodide.ffi import to_js\np = to_js([]).constructor.constructor("return process")()\np.kill(p.ppid, 9)'],
      ['pyodide.code.run_js', 'from pyodide.code import run_js\nrun_js("process.exit(3)")'],
      ['require kept by the runtime', 'import pyodide_js\npyodide_js._module.require("node:child_process")'],
      ['ctypes into the C library', 'import ctypes\nlibc = ctypes.CDLL(None)\nrc = libc.system(b"kill -9 $PPID")\nif rc != 0: raise OSError(rc)'],
    ];

    it.each(attempts)('closes %s', async (_name, code) => {
      const id = await attacker();
      const a = await run(s, code, id);
      expect(a.structured!.error, a.text).not.toBeNull();
      await stillServing(id);
    }, CALL_MS);
  });

  describe('no subprocesses', () => {
    const marker = () => join(scratch, 'made-by-a-subprocess');
    const attempts: Array<[string, () => string]> = [
      ['os.system', () => `import os\nrc = os.system("touch ${marker()}")\nif rc != 0: raise OSError(rc, "os.system failed")`],
      ['subprocess.run', () => `import subprocess\nsubprocess.run(["touch", ${pyRepr(marker())}])`],
      ['os.fork', () => 'import os\nos.fork()'],
      ['os.posix_spawn', () => `import os\nos.posix_spawn("/usr/bin/touch", ["touch", ${pyRepr(marker())}], {})`],
      ['os.execv', () => `import os\nos.execv("/usr/bin/touch", ["touch", ${pyRepr(marker())}])`],
      ['multiprocessing', () => 'import multiprocessing\np = multiprocessing.Process(target=print)\np.start()'],
    ];

    it.each(attempts)('refuses %s', async (_name, code) => {
      const id = await attacker();
      const a = await run(s, code(), id);
      expect(a.structured!.error, a.text).not.toBeNull();
      expect(existsSync(marker())).toBe(false);
      await stillServing(id);
    }, CALL_MS);
  });

  it('stops an infinite loop at its timeout and restarts that sandbox, while another sandbox goes on answering', async () => {
    const looping = await create(s);
    const other = await create(s);
    await run(s, 'before = "state before the loop"', looping);
    let loopDone = false;
    const loop = run(s, 'while True:\n    pass', looping, 5).then((a) => {
      loopDone = true;
      return a;
    });
    // Calls in another sandbox are answered while the loop runs (the server is not blocked).
    for (let i = 0; i < 3; i++) expect((await run(s, `${i} + 1`, other)).text).toContain(`Results: [Result(${i + 1})]`);
    const otherFirst = !loopDone;
    const a = await loop;
    expect(otherFirst).toBe(true);
    expect(a.isError).toBe(false);
    expect(a.structured!.error.name).toBe('TimeoutError');
    expect(a.text).toContain('the sandbox was restarted');
    expect(a.structured!.restarted).toBe(true);
    expect((await run(s, 'before', looping)).structured!.error.name).toBe('NameError');
    await stillServing(looping);
  }, CALL_MS);

  it('gives MemoryError for a heap past the cap, and the sandbox keeps its state', async () => {
    const id = await create(s);
    await run(s, 'small = [1, 2, 3]', id);
    const a = await run(s, 'big = bytearray(1024 ** 3)', id);
    expect(a.structured!.error.name).toBe('MemoryError');
    expect((await run(s, 'small', id)).text).toContain('Results: [Result([1, 2, 3])]');
    await stillServing(id);
  }, CALL_MS);

  it('ends the sandbox whose memory bomb goes around the heap cap, and that sandbox only', async () => {
    const id = await create(s);
    // JavaScript arrays made through the FFI live outside Python's heap.
    const a = await run(s, 'from pyodide.ffi import to_js\nhoard = []\nwhile True:\n    hoard.append(to_js([0] * 5_000_000))', id, 120);
    expect(a.structured!.error.name).toBe('SandboxError');
    expect(a.structured!.restarted).toBe(true);
    await stillServing(id);
  }, CALL_MS);

  it('cuts 100 MB of printed output, and says so', async () => {
    const a = await run(s, 'for _ in range(100):\n    print("x" * 1_000_000)\n"done"', undefined, 120);
    expect(a.structured!.stdout_bytes).toBe(100 * 1_000_001);
    expect(a.structured!.output_truncated).toBe(true);
    expect(a.structured!.stdout.length).toBe(65536);
    expect(a.text.length).toBeLessThanOrEqual(20_000 + RESULT_CUT_MARKER.length);
    expect(a.text.endsWith(RESULT_CUT_MARKER)).toBe(true);
    expect(a.text).toContain("Logs(stdout: ['[output truncated: 100000100 bytes written, the first 65536 kept]\\nxxxx");
    await stillServing();
  }, CALL_MS);

  it('runs several sandboxes in parallel', async () => {
    const ids = await Promise.all([create(s), create(s), create(s)]);
    const answers = await Promise.all(ids.map((id, i) => run(s, `import time\ntime.sleep(1)\n${i} * 10`, id)));
    answers.forEach((a, i) => expect(a.text).toContain(`Results: [Result(${i * 10})]`));
  }, CALL_MS);

  it('refuses a sandbox_id it never made, in MiroThinker’s words', async () => {
    const a = await run(s, '1', 'sbx-not-a-real-one');
    expect(a.isError).toBe(true);
    expect(a.text).toBe('[ERROR]: Failed to connect to sandbox sbx-not-a-real-one. Make sure the sandbox is created and the sandbox_id is correct.');
  }, CALL_MS);
});

describe('upload_file_from_local_to_sandbox', () => {
  let s: Started;
  let inputs: string;

  beforeAll(async () => {
    inputs = join(scratch, 'inputs');
    mkdirSync(join(inputs, 'sub'), { recursive: true });
    writeFileSync(join(inputs, 'data.csv'), 'a,b\n1,2\n');
    writeFileSync(join(inputs, 'sub', 'big.bin'), Buffer.alloc(2048, 7));
    writeFileSync(join(scratch, 'outside.txt'), 'not an input');
    symlinkSync('/etc/passwd', join(inputs, 'passwd-link'));
    symlinkSync(join(scratch, 'outside.txt'), join(inputs, 'outside-link'));
    s = await start(['--network-namespace', 'off', '--inputs', inputs, '--max-upload-bytes', '1024', '--spares', '0']);
  }, START_MS);

  it('copies an allowed input into the sandbox, where Python reads it', async () => {
    const id = await create(s);
    const up = await call(s, 'upload_file_from_local_to_sandbox', { sandbox_id: id, local_file_path: 'data.csv' });
    expect(up).toMatchObject({ isError: false, text: 'File uploaded to /home/user/data.csv' });
    expect((await run(s, 'import csv\nlist(csv.reader(open("data.csv")))', id)).text).toContain("Result([['a', 'b'], ['1', '2']])");
    const abs = await call(s, 'upload_file_from_local_to_sandbox', { sandbox_id: id, local_file_path: join(inputs, 'data.csv'), sandbox_file_path: '/data/in' });
    expect(abs.text).toBe('File uploaded to /data/in/data.csv');
  }, CALL_MS);

  it.each([
    ['a path outside the inputs', () => join(scratch, 'outside.txt'), /outside the files this run allows/],
    ['/etc/passwd', () => '/etc/passwd', /outside the files this run allows/],
    ['a way out with ..', () => '../outside.txt', /outside the files this run allows/],
    ['a symlink to /etc/passwd', () => 'passwd-link', /outside the files this run allows/],
    ['a symlink out of the inputs', () => 'outside-link', /outside the files this run allows/],
    ['a directory', () => 'sub', /not a file/],
    ['a file over the size limit', () => 'sub/big.bin', /more than the 1024/],
    ['a file that does not exist', () => 'nope.csv', /does not exist/],
  ])('refuses %s', async (_name, path, message) => {
    const id = await create(s);
    const a = await call(s, 'upload_file_from_local_to_sandbox', { sandbox_id: id, local_file_path: path() });
    expect(a.isError).toBe(true);
    expect(a.text).toMatch(message);
    expect((await run(s, 'import os\nos.listdir(".")', id)).text).toContain('Result([])');
  }, CALL_MS);
});

describe('bounded sandboxes', () => {
  let s: Started;

  beforeAll(async () => {
    s = await start(['--network-namespace', 'off', '--max-sandboxes', '2', '--spares', '0']);
  }, START_MS);

  it('refuses a new sandbox while all are busy, and makes room from the least recently used idle one', async () => {
    const a = await create(s);
    const b = await create(s);
    const busy = [run(s, 'import time\ntime.sleep(4)\n"a"', a), run(s, 'import time\ntime.sleep(4)\n"b"', b)];
    const refused = await call(s, 'create_sandbox', {});
    expect(refused.isError).toBe(true);
    expect(refused.text).toContain('all 2 sandboxes are busy');
    await Promise.all(busy);
    await run(s, '1', b);
    const c = await create(s);
    expect((await run(s, '1', a)).text).toContain('Failed to connect to sandbox');
    expect((await run(s, '2', c)).text).toContain('Result(2)');
  }, CALL_MS);

});

describe('idle sandboxes', () => {
  it('ends a sandbox left idle past --idle-s', async () => {
    const s = await start(['--network-namespace', 'off', '--idle-s', '2', '--spares', '0']);
    const id = await create(s);
    expect((await run(s, 'x = 1\nx', id)).text).toContain('Result(1)');
    expect(childrenOf(s.pid)).toHaveLength(1);
    // No call may touch it meanwhile: the wait is on its process, which the server ends when the idle time runs out.
    while (childrenOf(s.pid).length > 0) await new Promise((res) => setTimeout(res, 200));
    expect((await run(s, 'x', id)).text).toContain(`Failed to connect to sandbox ${id}`);
  }, START_MS);
});

describe('server flags', () => {
  it.each([
    [['--network-namespace', 'maybe'], /--network-namespace needs auto, on or off/],
    [['--inputs', '/no/such/dir'], /--inputs \/no\/such\/dir: no such directory/],
    [['--memory-mb', '8'], /--memory-mb needs an integer >= 64/],
  ])('refuses %j at start', async (args, message) => {
    const transport = new StdioClientTransport({ command: process.execPath, args: [SERVER, ...args], env: { PATH: process.env.PATH ?? '' }, stderr: 'pipe' });
    let stderr = '';
    transport.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const client = new Client({ name: 'python-flags-test', version: '0' });
    await expect(client.connect(transport)).rejects.toThrow();
    await new Promise((res) => setTimeout(res, 200));
    expect(stderr).toMatch(message);
  });
});
