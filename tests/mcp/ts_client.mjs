// Drives `portcullis serve` with the official MCP TypeScript SDK 1.x client
// (`@modelcontextprotocol/sdk`, handshake era: `Client` + `StdioClientTransport`),
// then with raw lines for the traffic a client library never sends.
//
//   PORTCULLIS_MCP_CLIENTS=DIR node tests/mcp/ts_client.mjs PORTCULLIS-BINARY SCRATCH-DIR
//
// DIR holds `node_modules/@modelcontextprotocol/sdk` (scripts/mcp-clients installs
// it); SCRATCH-DIR is an empty directory of the caller's (the workspace, the
// policy and the files outside the workspace are made there). Plain ESM for
// Node 20, no build step, nothing installed: the JSON Schema 2020-12 checks use
// the ajv the SDK depends on. One line per check on stdout (`ok N - ...` or
// `not ok N - ...: why`); exit 0 only if every check passed. The server's
// stderr is shown on stderr when a check failed. Run by tests/suite/mcp_ts.rs.

import { createRequire } from 'node:module';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const TOOLS = [
    'read_file', 'edit_file', 'multi_edit', 'write_file', 'list_dir', 'run_shell', 'shell_output',
    'shell_kill', 'run_tests', 'grep', 'glob', 'todo_write', 'todo_read',
];
// The protocol revision SDK 1.x asks for (its LATEST_PROTOCOL_VERSION) and the
// older one the raw session asks for (the server echoes a version it accepts).
const SDK_VERSION_ASKED = '2025-11-25';
const RAW_VERSION_ASKED = '2025-06-18';
const CALL_TIMEOUT_MS = 30000;
const WATCHDOG_MS = 240000;

// ---------------------------------------------------------------- reporting

let checks = 0;
let failures = 0;
const serverStderr = [];

function report(ok, name, why) {
    checks += 1;
    const detail = ok || why === undefined ? '' : `: ${oneLine(why)}`;
    if (!ok) failures += 1;
    process.stdout.write(`${ok ? 'ok' : 'not ok'} ${checks} - ${name}${detail}\n`);
    return ok;
}

function oneLine(v) {
    const s = typeof v === 'string' ? v : v instanceof Error ? `${v.name}: ${v.message}` : JSON.stringify(v);
    const t = String(s).replace(/\s+/g, ' ');
    return t.length > 1500 ? `${t.slice(0, 1500)}…` : t;
}

function check(name, cond, why) {
    return report(Boolean(cond), name, why);
}

function eq(name, got, want) {
    const ok = JSON.stringify(got) === JSON.stringify(want);
    return report(ok, name, `got ${oneLine(got)}, want ${oneLine(want)}`);
}

// A group of checks that may throw (a rejected call, a schema error): a throw
// is one failed check and the next group still runs.
async function step(name, fn) {
    try {
        await fn();
    } catch (e) {
        report(false, `${name}: threw`, e instanceof Error ? `${e.name}: ${e.message} ${e.stack ?? ''}` : e);
    }
}

function finish() {
    process.stdout.write(`# ${checks - failures}/${checks} checks passed\n`);
    if (failures > 0 && serverStderr.length > 0) {
        const text = serverStderr.join('');
        process.stderr.write(`--- server stderr (last 8 KiB) ---\n${text.slice(-8192)}\n--- end ---\n`);
    }
    process.exit(failures === 0 && checks > 0 ? 0 : 1);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(pred, ms, every = 100) {
    const end = Date.now() + ms;
    for (;;) {
        const v = await pred();
        if (v) return v;
        if (Date.now() >= end) return v;
        await sleep(every);
    }
}

// Pids (other than ours) whose command line contains `marker`, read from
// /proc: the effect seen from outside the server.
function pidsWith(marker) {
    const out = [];
    for (const e of fs.readdirSync('/proc')) {
        if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
        let cmd;
        try {
            cmd = fs.readFileSync(`/proc/${e}/cmdline`, 'latin1');
        } catch {
            continue;
        }
        if (cmd.includes(marker)) out.push(`${e}:${cmd.replace(/\0/g, ' ').trim()}`);
    }
    return out;
}

// ---------------------------------------------------------------- arguments

const [bin, scratchArg] = process.argv.slice(2);
const clientsDir = process.env.PORTCULLIS_MCP_CLIENTS;
if (!bin || !scratchArg || !clientsDir) {
    process.stderr.write(
        'usage: PORTCULLIS_MCP_CLIENTS=DIR node ts_client.mjs PORTCULLIS-BINARY SCRATCH-DIR ' +
            '(DIR from scripts/mcp-clients)\n',
    );
    process.exit(2);
}
const watchdog = setTimeout(() => {
    report(false, 'watchdog', `the checks did not end within ${WATCHDOG_MS} ms`);
    finish();
}, WATCHDOG_MS);

// ---------------------------------------------------------------- the SDK

const sdkDir = path.join(clientsDir, 'node_modules', '@modelcontextprotocol', 'sdk');
let sdkPkg;
try {
    sdkPkg = JSON.parse(fs.readFileSync(path.join(sdkDir, 'package.json'), 'utf8'));
} catch (e) {
    process.stderr.write(`cannot read the SDK in ${sdkDir} (run scripts/mcp-clients): ${e.message}\n`);
    process.exit(2);
}
// ES modules ignore NODE_PATH: import the SDK's own ESM files by absolute path,
// and resolve ajv the way the SDK does (from the SDK's directory).
const esm = (rel) => import(pathToFileURL(path.join(sdkDir, 'dist', 'esm', rel)).href);
const { Client } = await esm('client/index.js');
const { StdioClientTransport } = await esm('client/stdio.js');
const sdkRequire = createRequire(path.join(sdkDir, 'package.json'));
const ajvPkg = JSON.parse(fs.readFileSync(sdkRequire.resolve('ajv/package.json'), 'utf8'));
const Ajv2020 = sdkRequire('ajv/dist/2020').default;
const addFormatsMod = sdkRequire('ajv-formats');
const addFormats = addFormatsMod.default ?? addFormatsMod;
check(`the SDK is @modelcontextprotocol/sdk 1.x (${sdkPkg.version}, ajv ${ajvPkg.version})`,
    sdkPkg.name === '@modelcontextprotocol/sdk' && /^1\./.test(sdkPkg.version), sdkPkg.version);

// Strict JSON Schema 2020-12: every schema must pass the 2020-12 meta-schema
// and compile with unknown keywords refused. The integer formats schemars
// writes (`uint`, `int32`, ...) are not in the standard's list; they are
// registered as the numeric annotations they are, so a format nobody defined
// still fails.
const ajv = new Ajv2020({ strict: true, allErrors: true, validateFormats: true });
addFormats(ajv);
for (const f of ['int8', 'int16', 'int32', 'int64', 'uint', 'uint8', 'uint16', 'uint32', 'uint64', 'float', 'double']) {
    ajv.addFormat(f, { type: 'number', validate: (n) => Number.isFinite(n) });
}

// ---------------------------------------------------------------- the scratch tree

const scratch = fs.realpathSync(scratchArg);
const ws = path.join(scratch, 'ws');
const outside = path.join(scratch, 'outside');
const sibling = path.join(scratch, 'ws-evil'); // a prefix sibling of the workspace
const policyFile = path.join(scratch, 'policy.toml');
const auditFile = path.join(scratch, 'audit.jsonl');
const tag = randomBytes(6).toString('hex');
const OUT_SECRET = `outside-secret-${tag}`;
const SIB_SECRET = `sibling-secret-${tag}`;
const DENIED_SECRET = `denied-secret-${tag}`;

function put(file, text) {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, text);
}
put(path.join(ws, 'src', 'a.txt'), 'alpha\nbeta\ngamma\n');
put(path.join(ws, 'src', 'b.txt'), 'one\ntwo\nthree\n');
put(path.join(ws, 'notes', 'plan.md'), '# plan\n- [ ] find the needle-in-notes\n');
put(path.join(ws, 'keep.txt'), 'keep me\n');
put(path.join(ws, 'token.secret'), `${DENIED_SECRET}\n`);
put(path.join(outside, 'secret.txt'), `${OUT_SECRET}\n`);
put(path.join(sibling, 'loot.txt'), `${SIB_SECRET}\n`);
fs.symlinkSync(outside, path.join(ws, 'link'));
put(policyFile, `# tests/mcp/ts_client.mjs
deny_paths = ["*.secret"]

[shell]
interpreter = "sh"
allow = ["cat", "echo", "sleep", "sh", "ls", "true", "printf"]
inherit_env = ["PATH"]
timeout = "60s"

[shell.background]
max_jobs = 4
timeout = "120s"
`);
const serveArgs = ['serve', '--workspace', ws, '--policy', policyFile, '--audit', auditFile, '--tests', 'echo tests-ran'];

// What must never change or appear: the trees outside the workspace.
function outsideState() {
    const walk = (d) =>
        fs.readdirSync(d).sort().map((n) => {
            const p = path.join(d, n);
            const st = fs.lstatSync(p);
            return st.isDirectory() ? { [n]: walk(p) } : { [n]: fs.readFileSync(p, 'utf8') };
        });
    return JSON.stringify({ outside: walk(outside), sibling: walk(sibling) });
}
const outsideBefore = outsideState();
const seenText = []; // every tool result's text, searched for the secrets

// ---------------------------------------------------------------- the SDK session

// The transport, tapped: every message in both directions, with its time.
const traffic = [];
class TappedTransport extends StdioClientTransport {
    set onmessage(h) {
        this._tapped = h;
    }
    get onmessage() {
        const h = this._tapped;
        if (!h) return undefined;
        return (m, extra) => {
            traffic.push({ dir: 'in', at: Date.now(), m });
            h(m, extra);
        };
    }
    send(m, opts) {
        traffic.push({ dir: 'out', at: Date.now(), m });
        return super.send(m, opts);
    }
}

// The SDK's own validator (ajv) reports what it ignores in a schema through
// console.warn: kept, and summed up as a note rather than shown line by line.
const sdkWarnings = [];
console.warn = (...a) => sdkWarnings.push(a.map(String).join(' '));

const sdkErrors = [];
const transport = new TappedTransport({ command: bin, args: serveArgs, stderr: 'pipe', env: { PATH: process.env.PATH ?? '/usr/bin:/bin' } });
transport.stderr?.on('data', (c) => serverStderr.push(c.toString()));
const client = new Client({ name: 'portcullis-ts-sdk-test', version: '1.0.0' }, { capabilities: {} });
client.onerror = (e) => sdkErrors.push(e instanceof Error ? e.message : String(e));

let tools = [];
const schemaOf = new Map();

async function call(name, args, opts = {}) {
    const vIn = schemaOf.get(name)?.input;
    if (vIn && !vIn(args) && !opts.invalidInput) {
        throw new Error(`the test's own arguments for ${name} do not match its inputSchema: ${ajv.errorsText(vIn.errors)}`);
    }
    const r = await client.callTool({ name, arguments: args }, undefined, { timeout: CALL_TIMEOUT_MS, ...opts.sdk });
    const text = (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('');
    seenText.push(text);
    return r;
}

// A result's shape, beyond the SDK's own outputSchema check: structuredContent
// an object, mirrored as JSON text, and valid against the strict 2020-12
// compile of the outputSchema.
function shapeProblems(name, r) {
    const p = [];
    const s = r.structuredContent;
    if (!s || typeof s !== 'object' || Array.isArray(s)) p.push('structuredContent is not an object');
    const texts = (r.content ?? []).filter((c) => c.type === 'text');
    if (texts.length !== 1) p.push(`${texts.length} text blocks`);
    else {
        try {
            if (JSON.stringify(JSON.parse(texts[0].text)) !== JSON.stringify(s)) p.push('text is not structuredContent');
        } catch {
            p.push('text is not JSON');
        }
    }
    const vOut = schemaOf.get(name)?.output;
    if (vOut && !vOut(s)) p.push(`outputSchema (2020-12): ${ajv.errorsText(vOut.errors)}`);
    if (typeof r.isError !== 'boolean') p.push(`isError is ${JSON.stringify(r.isError)}`);
    return p;
}

// A call that must succeed: isError false and a well-formed result.
async function okCall(label, name, args) {
    const r = await call(name, args);
    const p = shapeProblems(name, r);
    if (r.isError) p.unshift(`isError: ${oneLine(r.structuredContent)}`);
    check(`${label}: ${name} succeeds`, p.length === 0, p.join('; '));
    return r.structuredContent ?? {};
}

// A call that must fail as data: isError true with error.kind `kind`.
async function errCall(label, name, args, kind, opts) {
    const r = await call(name, args, opts);
    const s = r.structuredContent ?? {};
    const p = shapeProblems(name, r);
    if (r.isError !== true) p.unshift('isError is not true');
    if (s.error?.kind !== kind) p.unshift(`error.kind ${JSON.stringify(s.error?.kind)}, want ${kind}`);
    if (typeof s.error?.message !== 'string' || s.error.message.length === 0) p.push('no error.message');
    check(`${label}: ${name} is isError ${kind}`, p.length === 0, `${p.join('; ')} in ${oneLine(s)}`);
    return s;
}

await step('handshake', async () => {
    await client.connect(transport, { timeout: CALL_TIMEOUT_MS });
    const init = traffic.find((t) => t.dir === 'out' && t.m.method === 'initialize');
    const initId = init?.m.id;
    const answer = traffic.find((t) => t.dir === 'in' && t.m.id === initId && 'result' in t.m);
    eq('handshake: the SDK asked for', init?.m.params?.protocolVersion, SDK_VERSION_ASKED);
    eq('handshake: negotiated protocol version', answer?.m.result?.protocolVersion, SDK_VERSION_ASKED);
    const info = client.getServerVersion();
    check('handshake: serverInfo is portcullis with a version', info?.name === 'portcullis' && typeof info.version === 'string' && info.version.length > 0, info);
    eq('handshake: capabilities.tools', client.getServerCapabilities()?.tools, { listChanged: false });
    const instr = client.getInstructions();
    check('handshake: instructions', typeof instr === 'string' && instr.length > 0, instr);
    check('handshake: notifications/initialized sent', traffic.some((t) => t.dir === 'out' && t.m.method === 'notifications/initialized'));
    eq('ping answers {}', await client.ping({ timeout: CALL_TIMEOUT_MS }), {});
});

await step('tools/list', async () => {
    const res = await client.listTools(undefined, { timeout: CALL_TIMEOUT_MS });
    tools = res.tools;
    eq('tools/list: the names in order', tools.map((t) => t.name), TOOLS);
    const again = await client.listTools(undefined, { timeout: CALL_TIMEOUT_MS });
    eq('tools/list: deterministic (the same twice)', again.tools, tools);
    check('tools/list: no nextCursor (one page)', res.nextCursor === undefined, res.nextCursor);
    for (const t of tools) {
        for (const which of ['inputSchema', 'outputSchema']) {
            const s = t[which];
            let why = '';
            if (!s || s.type !== 'object') why = `${which} is not an object schema`;
            else if (s.$schema !== undefined && s.$schema !== 'https://json-schema.org/draft/2020-12/schema') why = `$schema ${s.$schema}`;
            else if (!ajv.validateSchema(s)) why = `meta-schema: ${ajv.errorsText(ajv.errors)}`;
            else {
                try {
                    const v = ajv.compile(s);
                    const e = schemaOf.get(t.name) ?? {};
                    e[which === 'inputSchema' ? 'input' : 'output'] = v;
                    schemaOf.set(t.name, e);
                } catch (err) {
                    why = `strict compile: ${err.message}`;
                }
            }
            check(`schema: ${t.name} ${which} is valid JSON Schema 2020-12`, why === '', why);
        }
        check(`schema: ${t.name} has a description`, typeof t.description === 'string' && t.description.length > 20, t.description);
    }
    if (sdkWarnings.length > 0) {
        const kinds = [...new Set(sdkWarnings.map((w) => w.replace(/ at path .*/, '')))];
        process.stdout.write(`# note: the SDK's validator warned ${sdkWarnings.length} times compiling the outputSchemas: ${oneLine(kinds)}\n`);
    }
});

let hashA;
await step('file tools', async () => {
    const r = await okCall('read', 'read_file', { path: 'src/a.txt' });
    check('read: numbered content', /1\D+alpha/.test(r.content ?? '') && /3\D+gamma/.test(r.content ?? ''), r.content);
    check('read: total_lines 3 and a hash', r.total_lines === 3 && typeof r.hash === 'string' && r.hash.length >= 32, r);
    hashA = r.hash;
    const w = await okCall('read window', 'read_file', { path: 'src/a.txt', offset: 2, limit: 1 });
    check('read window: only line 2', /beta/.test(w.content ?? '') && !/alpha|gamma/.test(w.content ?? ''), w.content);

    const e = await okCall('edit', 'edit_file', { path: 'src/a.txt', old_string: 'beta', new_string: 'BETA', expect_hash: hashA });
    check('edit: one replacement, a new hash', e.replacements === 1 && typeof e.hash === 'string' && e.hash !== hashA, e);
    eq('edit: the file on disk (seen from outside)', fs.readFileSync(path.join(ws, 'src/a.txt'), 'utf8'), 'alpha\nBETA\ngamma\n');

    // Stale: the file changes behind the model's back after it read the hash.
    const changed = 'alpha\nBETA\ngamma\nchanged from outside\n';
    fs.writeFileSync(path.join(ws, 'src/a.txt'), changed);
    await errCall('stale edit', 'edit_file', { path: 'src/a.txt', old_string: 'gamma', new_string: 'GAMMA', expect_hash: e.hash }, 'stale-hash');
    eq('stale edit: the file is untouched (seen from outside)', fs.readFileSync(path.join(ws, 'src/a.txt'), 'utf8'), changed);

    const m = await okCall('multi edit', 'multi_edit', {
        path: 'src/b.txt',
        edits: [{ old_string: 'one', new_string: 'ONE' }, { old_string: 'three', new_string: 'THREE' }],
    });
    check('multi edit: two replacements', m.replacements === 2, m);
    eq('multi edit: the file on disk', fs.readFileSync(path.join(ws, 'src/b.txt'), 'utf8'), 'ONE\ntwo\nTHREE\n');
    await errCall('multi edit, all or none', 'multi_edit', {
        path: 'src/b.txt',
        edits: [{ old_string: 'two', new_string: '2' }, { old_string: 'absent', new_string: 'x' }],
    }, 'not-found');
    eq('multi edit, all or none: unchanged', fs.readFileSync(path.join(ws, 'src/b.txt'), 'utf8'), 'ONE\ntwo\nTHREE\n');

    const wr = await okCall('write', 'write_file', { path: 'src/new.txt', content: 'fresh\n' });
    check('write: created', wr.created === true && typeof wr.hash === 'string', wr);
    eq('write: the file on disk', fs.readFileSync(path.join(ws, 'src/new.txt'), 'utf8'), 'fresh\n');

    const l = await okCall('list', 'list_dir', {});
    const paths = (l.entries ?? []).map((x) => x.path);
    check('list: the tree', ['src', 'src/a.txt', 'src/b.txt', 'src/new.txt', 'keep.txt', 'notes/plan.md'].every((p) => paths.includes(p)), paths);
    check('list: the denied file is not listed', !paths.includes('token.secret'), paths);
    const ls = await okCall('list src', 'list_dir', { path: 'src', depth: 1 });
    check('list src: only src', (ls.entries ?? []).every((x) => x.path.startsWith('src/')) && (ls.entries ?? []).length === 3, ls.entries);

    const g = await okCall('grep', 'grep', { pattern: 'needle-in-\\w+' });
    const gm = (g.matches ?? []).map((x) => `${x.path}:${x.line}`);
    eq('grep: the match', gm, ['notes/plan.md:2']);
    const gl = await okCall('glob', 'glob', { pattern: 'src/*.txt' });
    eq('glob: the paths', [...(gl.paths ?? [])].sort(), ['src/a.txt', 'src/b.txt', 'src/new.txt']);

    const todos = [
        { id: 't1', content: 'write the client test', status: 'in_progress' },
        { id: 't2', content: 'run it as uid 65534', status: 'pending' },
    ];
    const tw = await okCall('todos', 'todo_write', { todos });
    check('todos: counts', tw.counts?.in_progress === 1, tw.counts);
    const tr = await okCall('todos', 'todo_read', {});
    eq('todos: read back', (tr.todos ?? []).map((t) => [t.id, t.content, t.status]), todos.map((t) => [t.id, t.content, t.status]));
});

await step('errors are data', async () => {
    await errCall('bad input', 'read_file', { path: 42 }, 'bad-input', { invalidInput: true });
    await errCall('bad input', 'run_shell', { command: 'echo hi', writable: true }, 'bad-input', { invalidInput: true });
    await errCall('missing file', 'read_file', { path: 'nope.txt' }, 'no-such-file');
    // An unknown tool: the contract says a result with kind unknown-tool.
    let u;
    try {
        u = await client.callTool({ name: 'rm_rf', arguments: {} }, undefined, { timeout: CALL_TIMEOUT_MS });
    } catch (e) {
        u = { thrown: e };
    }
    check('unknown tool: isError unknown-tool', u.isError === true && u.structuredContent?.error?.kind === 'unknown-tool',
        u.thrown ? `a protocol error instead: ${u.thrown.code} ${u.thrown.message}` : u.structuredContent);
});

await step('path escapes', async () => {
    const escapes = [
        ['../x', 'read_file', { path: '../outside/secret.txt' }],
        ['absolute outside', 'read_file', { path: path.join(outside, 'secret.txt') }],
        ['symlink to outside', 'read_file', { path: 'link/secret.txt' }],
        ['prefix sibling (absolute)', 'read_file', { path: path.join(sibling, 'loot.txt') }],
        ['prefix sibling (relative)', 'read_file', { path: '../ws-evil/loot.txt' }],
        ['denied path', 'read_file', { path: 'token.secret' }],
        ['../x', 'write_file', { path: '../outside/w1.txt', content: 'pwned' }],
        ['absolute outside', 'write_file', { path: path.join(outside, 'w2.txt'), content: 'pwned' }],
        ['symlink to outside', 'write_file', { path: 'link/w3.txt', content: 'pwned' }],
        ['prefix sibling', 'write_file', { path: path.join(sibling, 'w4.txt'), content: 'pwned' }],
        ['symlink to outside', 'edit_file', { path: 'link/secret.txt', old_string: OUT_SECRET, new_string: 'pwned' }],
        ['prefix sibling', 'edit_file', { path: path.join(sibling, 'loot.txt'), old_string: SIB_SECRET, new_string: 'pwned' }],
        ['../x', 'list_dir', { path: '../outside' }],
        ['prefix sibling', 'list_dir', { path: path.join(sibling) }],
    ];
    for (const [label, tool, args] of escapes) {
        await errCall(`escape ${label} ${JSON.stringify(args.path)}`, tool, args, 'path-escape');
    }
    // The search tools take only workspace-relative paths: `..` and absolute
    // ones are refused before the jail is asked (kind bad-path, or path-escape).
    for (const [label, args] of [['../x', { pattern: 'secret', path: '..' }], ['prefix sibling', { pattern: 'secret', path: sibling }]]) {
        const r = await call('grep', args);
        const kind = r.structuredContent?.error?.kind;
        check(`escape ${label} ${JSON.stringify(args.path)}: grep is isError path-escape or bad-path`,
            r.isError === true && ['path-escape', 'bad-path'].includes(kind), r.structuredContent);
    }
    // Links are never followed by the listing tools: refused (any kind) or
    // listed as the link itself, never the target's entries.
    const ll = await call('list_dir', { path: 'link' });
    check('escape symlink to outside "link": list_dir refuses it', ll.isError === true, ll.structuredContent);
    const lg = await call('glob', { pattern: 'link/*' });
    check('escape symlink to outside "link/*": glob finds nothing behind it',
        lg.isError === true || !(lg.structuredContent?.paths ?? []).some((p) => p.includes('secret')), lg.structuredContent);
    const lr = await call('grep', { pattern: 'outside-secret' });
    check('escape symlink to outside: grep of the workspace does not search behind the link',
        lr.isError === false && (lr.structuredContent?.matches ?? []).length === 0, lr.structuredContent);
    eq('escapes: nothing outside the workspace changed (seen from outside)', outsideState(), outsideBefore);
    check('escapes: no secret in any result', !seenText.some((t) => t.includes(OUT_SECRET) || t.includes(SIB_SECRET) || t.includes(DENIED_SECRET)));
    // Control: the same tools work inside the workspace (the refusals are the jail, not a broken tool).
    const c = await okCall('escape control', 'read_file', { path: 'keep.txt' });
    check('escape control: read inside works', /keep me/.test(c.content ?? ''), c);
});

await step('shell', async () => {
    const r = await okCall('shell', 'run_shell', { command: 'echo hello-mcp' });
    check('shell: exited 0 with its stdout', r.outcome === 'exited' && r.exit_code === 0 && r.stdout === 'hello-mcp\n', r);
    check('shell: writable and refused_writes reported', typeof r.writable === 'boolean' && typeof r.refused_writes === 'object', r);
    const p = await okCall('shell pipe', 'run_shell', { command: "printf '%s-%s\\n' a b | cat && ls src" });
    check('shell pipe: output', p.stdout === 'a-b\na.txt\nb.txt\nnew.txt\n', p.stdout);
    const nz = await okCall('shell non-zero', 'run_shell', { command: "sh -c 'exit 3'" });
    check('shell non-zero: a result, not an error', nz.outcome === 'exited' && nz.exit_code === 3, nz);

    const ref = await errCall('refused', 'run_shell', { command: 'rm keep.txt' }, 'refused-by-policy');
    check('refused: outcome refused', ref.outcome === 'refused', ref);
    check('refused: with a reason', typeof ref.error?.reason === 'string' && ref.error.reason.length > 0, ref.error);
    check('refused: names the command', typeof ref.error?.command === 'string' && ref.error.command.includes('rm'), ref.error);
    check('refused: nothing ran (keep.txt still there, seen from outside)', fs.existsSync(path.join(ws, 'keep.txt')));

    const t0 = Date.now();
    const to = await errCall('timeout', 'run_shell', { command: 'sleep 30', timeout_ms: 1000 }, 'timed-out');
    const took = Date.now() - t0;
    check('timeout: outcome timed-out', to.outcome === 'timed-out', to);
    check(`timeout: ended after about 1 s (${took} ms)`, took >= 900 && took < 10000, took);

    const rt = await okCall('tests', 'run_tests', { filter: 'parser two' });
    check('tests: the filter is one word', rt.outcome === 'exited' && rt.stdout === 'tests-ran parser two\n', rt);
    await errCall('tests bad filter', 'run_tests', { filter: "it's" }, 'bad-input');
});

await step('background jobs', async () => {
    const r = await okCall('background', 'run_shell', { command: 'echo bg-begin; sleep 1; echo bg-end', background: true });
    check('background: started with a job id', r.outcome === 'started' && typeof r.job_id === 'string', r);
    let out = '';
    let last = {};
    let since;
    for (let i = 0; i < 20; i++) {
        last = await okCall(`background poll ${i}`, 'shell_output', since === undefined ? { id: r.job_id, wait_ms: 2000 } : { id: r.job_id, since, wait_ms: 2000 });
        out += last.stdout ?? '';
        since = last.cursor;
        if (last.status !== 'running') break;
    }
    check('background: exited 0', last.status === 'exited' && last.exit_code === 0, last);
    eq('background: its output', out, 'bg-begin\nbg-end\n');

    const marker = `61.${tag.slice(0, 6).replace(/[a-f]/g, '7')}`;
    const k = await okCall('kill', 'run_shell', { command: `sleep ${marker}`, background: true });
    const seen = await waitFor(() => pidsWith(marker).length > 0, 10000);
    check('kill: the job runs (control, /proc)', seen);
    const kr = await okCall('kill', 'shell_kill', { id: k.job_id });
    check('kill: killed, not already ended', kr.status === 'killed' && kr.already_ended === false, kr);
    const gone = await waitFor(() => pidsWith(marker).length === 0, 5000);
    check('kill: no process left (/proc)', gone, pidsWith(marker));
    const after = await okCall('kill', 'shell_output', { id: k.job_id });
    check('kill: shell_output says killed', after.status === 'killed', after);
    await errCall('unknown job', 'shell_output', { id: 'j99-deadbeef' }, 'job-not-found');
});

await step('two calls in flight', async () => {
    const order = [];
    const t0 = Date.now();
    const slow = call('run_shell', { command: 'sleep 2; echo slow-done' }).then((r) => {
        order.push(['run_shell', Date.now() - t0]);
        return r;
    });
    await sleep(300);
    const fast = call('read_file', { path: 'src/b.txt' }).then((r) => {
        order.push(['read_file', Date.now() - t0]);
        return r;
    });
    const [s, f] = await Promise.all([slow, fast]);
    check('in flight: read_file answered first', order[0]?.[0] === 'read_file', order);
    check('in flight: both results', !s.isError && s.structuredContent?.stdout === 'slow-done\n' && !f.isError && /two/.test(f.structuredContent?.content ?? ''),
        [s.structuredContent, f.structuredContent]);
});

await step('progress', async () => {
    const seen = [];
    const r = await call('run_shell', { command: 'sleep 3' }, { sdk: { onprogress: (p) => seen.push(p) } });
    const reqOut = traffic.filter((t) => t.dir === 'out' && t.m.method === 'tools/call' && t.m.params?._meta?.progressToken !== undefined).at(-1);
    check('progress: the SDK sent a progressToken', reqOut !== undefined);
    check('progress: the call succeeded', r.isError === false && r.structuredContent?.outcome === 'exited', r.structuredContent);
    check(`progress: at least one notification (${seen.length})`, seen.length >= 1, seen);
    check('progress: increasing', seen.every((p, i) => typeof p.progress === 'number' && (i === 0 || p.progress > seen[i - 1].progress)), seen);
    check('progress: total, when given, not below progress', seen.every((p) => p.total === undefined || p.total >= p.progress), seen);
    await sleep(1500);
    const token = reqOut?.m.params._meta.progressToken;
    const answeredAt = traffic.find((t) => t.dir === 'in' && t.m.id === reqOut?.m.id && 'result' in t.m)?.at;
    const late = traffic.filter((t) => t.dir === 'in' && t.m.method === 'notifications/progress' && t.m.params?.progressToken === token && t.at > answeredAt);
    check('progress: none after the response', late.length === 0, late.map((t) => t.m));
});

await step('cancellation', async () => {
    const marker = `60.${tag.slice(6, 12).replace(/[a-f]/g, '3')}`;
    const ac = new AbortController();
    const p = call('run_shell', { command: `sleep ${marker}` }, { sdk: { signal: ac.signal, timeout: 90000 } });
    const req = await waitFor(() => traffic.find((t) => t.dir === 'out' && t.m.method === 'tools/call' && t.m.params?.arguments?.command === `sleep ${marker}`), 2000);
    const running = await waitFor(() => pidsWith(marker).length > 0, 10000);
    check('cancel: the command runs (control, /proc)', running);
    const t0 = Date.now();
    ac.abort('the test cancels');
    let rejected = false;
    try {
        await p;
    } catch {
        rejected = true;
    }
    check('cancel: the SDK call rejected', rejected);
    const note = traffic.find((t) => t.dir === 'out' && t.m.method === 'notifications/cancelled');
    check('cancel: the SDK sent notifications/cancelled for the request', note && req && note.m.params?.requestId === req.m.id, note?.m);
    const gone = await waitFor(() => pidsWith(marker).length === 0, 5000);
    check(`cancel: no process with the marker left (/proc, ${Date.now() - t0} ms)`, gone, pidsWith(marker));
    await sleep(1500);
    const answered = traffic.filter((t) => t.dir === 'in' && req && t.m.id === req.m.id);
    check('cancel: no response for the cancelled request', answered.length === 0, answered.map((t) => t.m));
    // The server still serves.
    const c = await okCall('after cancel', 'run_shell', { command: 'true' });
    check('after cancel: a command runs', c.outcome === 'exited' && c.exit_code === 0, c);
});

await step('oversized request', async () => {
    // A request over the server's line limit (4 MiB): the answer must carry the
    // request's id, or the SDK cannot match it (it drops an error response
    // with `id: null`, types.js JSONRPCErrorResponseSchema) and the caller
    // waits for its own timeout.
    const t0 = Date.now();
    let got;
    try {
        got = { result: await client.callTool({ name: 'write_file', arguments: { path: 'big.txt', content: 'x'.repeat(5 * 1024 * 1024) } }, undefined, { timeout: 10000 }) };
    } catch (e) {
        got = { error: e };
    }
    const took = Date.now() - t0;
    check(`oversized request: the SDK call fails with -32600 (${took} ms)`, got.error?.code === -32600, got.error ? `${got.error.code} ${got.error.message}` : got.result?.structuredContent);
    check('oversized request: nothing written', !fs.existsSync(path.join(ws, 'big.txt')));
    const c = await okCall('after the oversized request', 'read_file', { path: 'keep.txt' });
    check('after the oversized request: the server still serves', /keep me/.test(c.content ?? ''), c);
});

await step('SDK session end', async () => {
    check('no protocol errors seen by the SDK', sdkErrors.length === 0, sdkErrors.map((e) => oneLine(e).slice(0, 400)));
    const pid = transport.pid;
    const t0 = Date.now();
    await client.close();
    const gone = await waitFor(() => !fs.existsSync(`/proc/${pid}`) || /\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8')), 5000);
    check(`SDK close: the server exited (${Date.now() - t0} ms)`, gone);
});

await step('audit', async () => {
    const lines = fs.readFileSync(auditFile, 'utf8').split('\n');
    check('audit: ends with a newline', lines.at(-1) === '', lines.at(-1));
    const recs = lines.slice(0, -1).map((l) => JSON.parse(l));
    let prev;
    let broken = '';
    recs.forEach((r, i) => {
        const want = i === 0 ? createHash('sha256').update(r.genesis ?? '').digest('hex') : prev;
        if (r.prev !== want || r.seq !== i) broken ||= `record ${i}`;
        prev = createHash('sha256').update(lines[i]).digest('hex');
    });
    check(`audit: the hash chain holds (${recs.length} records)`, recs.length > 0 && broken === '', broken);
    check('audit: the refused command is a denied record', recs.some((r) => r.event === 'denied' && JSON.stringify(r).includes('rm keep.txt')));
    check('audit: the escaped write is a denied record', recs.some((r) => r.event === 'denied' && JSON.stringify(r).includes('w1.txt')));
    check('audit: the echo ran as allowed + outcome', recs.some((r) => r.event === 'allowed' && JSON.stringify(r).includes('echo hello-mcp')));
});

// ---------------------------------------------------------------- raw traffic

await step('raw traffic', async () => {
    const srv = spawn(bin, serveArgs, { stdio: ['pipe', 'pipe', 'pipe'], env: { PATH: process.env.PATH ?? '/usr/bin:/bin' } });
    srv.stderr.on('data', (c) => serverStderr.push(c.toString()));
    let exited = null;
    srv.on('exit', (code, signal) => {
        exited = { code, signal, at: Date.now() };
    });
    const inbox = [];
    const junk = [];
    let buf = '';
    srv.stdout.on('data', (c) => {
        buf += c.toString('utf8');
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, i);
            buf = buf.slice(i + 1);
            try {
                const m = JSON.parse(line);
                if (m?.jsonrpc !== '2.0') junk.push(line);
                inbox.push(m);
            } catch {
                junk.push(line);
            }
        }
    });
    const write = (text) => new Promise((resolve, reject) => {
        srv.stdin.write(text, (e) => (e ? reject(e) : resolve()));
    });
    const take = async (pred, what) => {
        const got = await waitFor(() => {
            const i = inbox.findIndex(pred);
            return i >= 0 ? inbox.splice(i, 1)[0] : undefined;
        }, 15000, 20);
        if (!got) throw new Error(`no answer for ${what}; pending: ${oneLine(inbox)}`);
        return got;
    };
    const isErr = (m) => m && typeof m === 'object' && 'error' in m;

    await write('{"jsonrpc":"2.0","id":1,"method":"ping"\n');
    const a = await take(isErr, 'the malformed line');
    check('raw malformed JSON: -32700 with id null', a.error?.code === -32700 && a.id === null, a);

    const big = `{"jsonrpc":"2.0","id":2,"method":"ping","params":{"pad":"${'x'.repeat(5 * 1024 * 1024)}"}}\n`;
    await write(big);
    const b = await take(isErr, 'the 5 MiB line');
    check('raw 5 MiB line: -32600', b.error?.code === -32600 && (b.id === null || b.id === 2), { ...b, error: b.error });
    check('raw 5 MiB line: the message names the limit', /4\s*MiB|4194304|4 ?M/.test(b.error?.message ?? ''), b.error?.message);

    await write('{"jsonrpc":"2.0","id":3,"method":42}\n');
    const c = await take(isErr, 'the invalid request');
    check('raw invalid request (method not a string): -32600', c.error?.code === -32600 && (c.id === 3 || c.id === null), c);

    await write('{"jsonrpc":"2.0","id":4,"method":"no/such/method","params":{}}\n');
    const d = await take((m) => m?.id === 4, 'the unknown method');
    check('raw unknown method: -32601 with its id', d.error?.code === -32601, d);

    await write(`${JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'initialize', params: { protocolVersion: RAW_VERSION_ASKED, capabilities: {}, clientInfo: { name: 'raw', version: '0' } } })}\n`);
    const e = await take((m) => m?.id === 5, 'initialize');
    check(`raw initialize: ${RAW_VERSION_ASKED} echoed, serverInfo portcullis`,
        e.result?.protocolVersion === RAW_VERSION_ASKED && e.result?.serverInfo?.name === 'portcullis', e);
    await write('{"jsonrpc":"2.0","method":"notifications/initialized"}\n');
    await write('{"jsonrpc":"2.0","id":40,"method":"no/such/method"}\n');
    const d2 = await take((m) => m?.id === 40, 'the unknown method after initialize');
    check('raw unknown method after initialize: -32601 with its id', d2.error?.code === -32601, d2);
    await write('{"jsonrpc":"2.0","id":6,"method":"tools/list"}\n');
    const f = await take((m) => m?.id === 6, 'tools/list');
    eq('raw tools/list: the tools', (f.result?.tools ?? []).map((t) => t.name), TOOLS);

    // A background job left running when stdin closes: the server ends it.
    const marker = `62.${tag.slice(3, 9).replace(/[a-f]/g, '5')}`;
    await write(`${JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'run_shell', arguments: { command: `sleep ${marker}`, background: true } } })}\n`);
    const g = await take((m) => m?.id === 7, 'the background run_shell');
    check('raw background job started', g.result?.structuredContent?.outcome === 'started', g.result?.structuredContent ?? g);
    check('raw background job runs (control, /proc)', await waitFor(() => pidsWith(marker).length > 0, 10000));
    check('raw stdout carries only JSON-RPC messages', junk.length === 0, junk.map((j) => j.slice(0, 200)));

    const t0 = Date.now();
    srv.stdin.end();
    const ended = await waitFor(() => exited !== null, 5000);
    check(`raw stdin EOF: the server exits promptly (${ended ? exited.at - t0 : '>5000'} ms)`, ended, exited);
    check('raw stdin EOF: exit status 0', ended && exited.code === 0, exited);
    const gone = await waitFor(() => pidsWith(marker).length === 0, 5000);
    check('raw stdin EOF: its background job is gone (/proc)', gone, pidsWith(marker));
    if (!ended) srv.kill('SIGKILL');
});

clearTimeout(watchdog);
finish();
