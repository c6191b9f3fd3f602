#!/usr/bin/env python3
"""Drive `portcullis serve` with the official MCP Python SDK (mcp 2.3.0).

    python_client.py PORTCULLIS SCRATCH [--mode auto|legacy|2026-07-28] [--only NAME ...]

PORTCULLIS is the binary, SCRATCH an empty directory this script may fill (a
workspace, a policy, files outside the workspace to escape to). The server is
started by the SDK itself (`mcp.Client` over `mcp.client.stdio.stdio_client`),
once normally and once with `--readonly`.

`--mode` is the SDK's `Client(mode=...)`: `auto` (the default, what a user
gets) probes `server/discover` at 2026-07-28 and falls back to `initialize`
when the answer is not positive modern evidence (mcp/client/_probe.py) —
silently, so this script checks which era it actually got; `legacy` forces
the 2025-11-25 `initialize` handshake; `2026-07-28` adopts the modern era
with no probe at all.

Every check prints one line (`ok`/`FAIL`, its name, what was seen) and the
run ends with `N passed, M failed`; exit 0 only when all passed. Effects are
checked from outside the server: files on disk, processes in /proc. Between
the SDK's transport and its session sits a pass-through tap that records the
JSON-RPC messages (for the wire-level checks and the transcript printed on
failure); it changes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import traceback
import warnings
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp
from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

SDK_VERSION = "2.3.0"
MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"

ALL_TOOLS = [
    "read_file",
    "edit_file",
    "multi_edit",
    "write_file",
    "list_dir",
    "run_shell",
    "shell_output",
    "shell_kill",
    "run_tests",
    "grep",
    "glob",
    "todo_write",
    "todo_read",
]
READONLY_TOOLS = [t for t in ALL_TOOLS if t not in ("edit_file", "multi_edit", "write_file")]

POLICY = """\
# Written by tests/mcp/python_client.py.
deny_paths = ["*.pem"]
# Empty: a command that may write may write the whole workspace.
write = []
network = "none"

[shell]
interpreter = "sh"
allow = ["cat", "echo", "sleep", "sh", "ls", "true", "printf"]
deny = ["curl"]
timeout = "60s"

[shell.background]
max_jobs = 4
timeout = "10m"
"""

TEST_CMD = "echo tests:"


class Failed(Exception):
    """A check's assertion."""


def short(v: Any, n: int = 600) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str, sort_keys=True)
    return s if len(s) <= n else s[:n] + f"... ({len(s)} chars)"


def describe(e: BaseException) -> str:
    """An exception, task groups unwrapped to what was raised inside them."""
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(describe(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}"


def need(cond: Any, what: str, got: Any = None) -> None:
    if not cond:
        raise Failed(what if got is None else f"{what}; got: {short(got)}")


def eq(got: Any, want: Any, what: str) -> None:
    if got != want:
        raise Failed(f"{what}: want {short(want)}; got {short(got)}")


class Report:
    def __init__(self) -> None:
        self.passed = 0
        self.failed: list[str] = []

    def ok(self, name: str, detail: str = "") -> None:
        self.passed += 1
        print(f"ok   {name}{': ' + detail if detail else ''}", flush=True)

    def fail(self, name: str, why: str) -> None:
        self.failed.append(name)
        print(f"FAIL {name}: {why}", flush=True)


class Tap:
    """The JSON-RPC messages both ways, with a monotonic timestamp."""

    def __init__(self) -> None:
        self.log: list[tuple[float, str, Any]] = []

    def record(self, direction: str, item: Any) -> None:
        if isinstance(item, Exception):
            self.log.append((time.monotonic(), direction, f"<transport exception {item!r}>"))
            return
        msg = item.message
        self.log.append((time.monotonic(), direction, msg.model_dump(by_alias=True, exclude_unset=True, mode="json")))

    def sent(self) -> list[dict[str, Any]]:
        return [m for _, d, m in self.log if d == "->" and isinstance(m, dict)]

    def received(self) -> list[dict[str, Any]]:
        return [m for _, d, m in self.log if d == "<-" and isinstance(m, dict)]

    def request_id(self, method: str, needle: str) -> Any:
        for m in self.sent():
            if m.get("method") == method and "id" in m and needle in json.dumps(m.get("params")):
                return m["id"]
        return None

    def responses_to(self, rid: Any, after: float = 0.0) -> list[dict[str, Any]]:
        return [
            m
            for t, d, m in self.log
            if d == "<-" and isinstance(m, dict) and t >= after and "method" not in m and m.get("id") == rid
        ]

    def transcript(self, last: int = 60) -> str:
        lines = [f"{d} {short(m, 400)}" for _, d, m in self.log[-last:]]
        return "\n".join(lines)


@asynccontextmanager
async def tapped_stdio(params: StdioServerParameters, errlog: Any, tap: Tap):
    """The SDK's stdio transport, with every message recorded on its way."""
    async with stdio_client(params, errlog=errlog) as (read, write):
        in_send, in_recv = anyio.create_memory_object_stream(0)
        out_send, out_recv = anyio.create_memory_object_stream(0)

        async def inbound() -> None:
            async with in_send:
                async for item in read:
                    tap.record("<-", item)
                    await in_send.send(item)

        async def outbound() -> None:
            async with out_recv:
                async for item in out_recv:
                    tap.record("->", item)
                    await write.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(inbound)
            tg.start_soon(outbound)
            try:
                yield in_recv, out_send
            finally:
                tg.cancel_scope.cancel()


def procs_with(needle: str) -> list[str]:
    """Host processes whose command line contains `needle` (not this one)."""
    out = []
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == me:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                c = f.read()
        except OSError:
            continue
        if needle.encode() in c:
            line = c.replace(b"\0", b" ").decode(errors="replace").strip()
            out.append(f"{pid}: {line}")
    return out


async def wait_procs(needle: str, present: bool, within: float) -> list[str]:
    """Poll /proc until processes with `needle` are there (or gone)."""
    deadline = time.monotonic() + within
    while True:
        found = procs_with(needle)
        if bool(found) == present or time.monotonic() >= deadline:
            return found
        await anyio.sleep(0.05)


def marker(base: int) -> str:
    """A sleep duration no other process on the host has in its argv."""
    return f"{base}.{random.randint(100000, 999999)}"


class Run:
    """One server (one `Client`) and the checks run against it."""

    def __init__(self, args: argparse.Namespace, report: Report, scratch: Path, readonly: bool) -> None:
        self.args = args
        self.report = report
        self.scratch = scratch
        self.readonly = readonly
        self.ws = scratch / "ws"
        self.tap = Tap()
        self.client: Client | None = None
        self.schemas: dict[str, dict[str, Any]] = {}
        self.tag = f"[{args.mode}{' readonly' if readonly else ''}]"

    # ---- helpers ----

    def check(self, name: str, fn) -> Any:
        """Run one check (a coroutine function), recording its verdict."""
        return self._check(name, fn)

    async def _check(self, name: str, fn) -> Any:
        full = f"{self.tag} {name}"
        if self.args.only and name not in ("era", "tools/list") and not any(o in name for o in self.args.only):
            return None
        try:
            detail = await fn()
        except Failed as e:
            self.report.fail(full, str(e))
            return None
        except Exception as e:  # an SDK error is this check's failure, not the run's end
            self.report.fail(full, f"{describe(e)}\n{traceback.format_exc(limit=6)}")
            return None
        self.report.ok(full, detail if isinstance(detail, str) else "")
        return True

    async def call(self, tool: str, arguments: dict[str, Any], **kw: Any) -> Any:
        assert self.client is not None
        r = await self.client.call_tool(tool, arguments, **kw)
        self.shape(tool, r)
        return r

    def shape(self, tool: str, r: Any) -> None:
        """Every result: structuredContent an object, mirrored as text, valid against the outputSchema."""
        sc = r.structured_content
        need(isinstance(sc, dict), f"{tool}: structuredContent is an object", sc)
        need(r.content and r.content[0].type == "text", f"{tool}: content[0] is text", r.content)
        try:
            mirrored = json.loads(r.content[0].text)
        except ValueError as e:
            raise Failed(f"{tool}: content[0].text is not JSON ({e}): {short(r.content[0].text)}")
        eq(mirrored, sc, f"{tool}: content[0].text is structuredContent's JSON")
        schema = self.schemas.get(tool, {}).get("outputSchema")
        if schema is not None:
            errors = sorted(Draft202012Validator(schema).iter_errors(sc), key=lambda e: list(e.path))
            need(not errors, f"{tool}: result valid against its outputSchema", [e.message for e in errors[:3]])

    async def ok(self, tool: str, arguments: dict[str, Any], **kw: Any) -> dict[str, Any]:
        r = await self.call(tool, arguments, **kw)
        need(not r.is_error, f"{tool} {short(arguments, 200)} succeeds", r.structured_content)
        return r.structured_content

    async def err(self, tool: str, arguments: dict[str, Any], kind: str, **kw: Any) -> dict[str, Any]:
        r = await self.call(tool, arguments, **kw)
        sc = r.structured_content
        need(r.is_error, f"{tool} {short(arguments, 200)} is isError", sc)
        need(isinstance(sc.get("error"), dict), f"{tool}: structuredContent.error is an object", sc)
        eq(sc["error"].get("kind"), kind, f"{tool} {short(arguments, 200)}: error.kind")
        need(
            isinstance(sc["error"].get("message"), str) and sc["error"]["message"],
            f"{tool}: error.message present",
            sc,
        )
        return sc

    def write(self, rel: str, text: str) -> Path:
        p = self.ws / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return p

    # ---- the run ----

    async def run(self) -> None:
        argv = ["serve", "--workspace", str(self.ws), "--policy", str(self.scratch / "policy.toml")]
        argv += ["--audit", str(self.scratch / f"audit{'-ro' if self.readonly else ''}.jsonl"), "--tests", TEST_CMD]
        if self.readonly:
            argv.append("--readonly")
        # The SDK passes only HOME, LOGNAME, PATH, SHELL, TERM, USER by
        # default (mcp/client/stdio.py DEFAULT_INHERITED_ENV_VARS).
        env = {k: v for k, v in os.environ.items() if k.startswith("PORTCULLIS_") or k in ("LANG", "TMPDIR")}
        params = StdioServerParameters(command=self.args.portcullis, args=argv, env=env)
        errpath = self.scratch / f"server-stderr{'-ro' if self.readonly else ''}.log"
        with open(errpath, "w") as errlog:
            client = Client(
                tapped_stdio(params, errlog, self.tap),
                mode=self.args.mode,
                read_timeout_seconds=60,
                client_info=mcp.types.Implementation(name="portcullis-python-sdk-test", version=SDK_VERSION),
            )
            survivor = marker(302)
            t_exit = None
            try:
                async with client:
                    self.client = client
                    await self.check("era", self.era)
                    await self.check("tools/list", self.list_tools)
                    if self.readonly:
                        await self.readonly_checks()
                    else:
                        await self.main_checks()
                    # A background job left running: the server must end it on stdin EOF.
                    if "shell_output" in self.schemas:
                        await self.check("background job left running (before EOF)", lambda: self.leave_job(survivor))
                    t_exit = time.monotonic()
                t_exit = time.monotonic() - t_exit
            except Exception as e:
                self.report.fail(f"{self.tag} session", f"{describe(e)}\n{traceback.format_exc(limit=8)}")
            finally:
                self.client = None
        if t_exit is not None:
            await self.check("stdin EOF: exit", lambda: self.after_exit(t_exit, survivor))
        if self.readonly is False:
            await self.check("audit log", self.audit)
        if self.report.failed:
            print(f"---- {self.tag} server stderr (tail) ----")
            print("\n".join(errpath.read_text(errors="replace").splitlines()[-30:]))
            print(f"---- {self.tag} wire transcript (tail) ----")
            print(self.tap.transcript())

    # ---- checks ----

    async def era(self) -> str:
        c = self.client
        assert c is not None
        s = c.session
        for _ in range(40):  # the tap records a message once its pump has taken it
            sent = [m.get("method") for m in self.tap.sent()]
            if self.args.mode != "legacy" or "notifications/initialized" in sent:
                break
            await anyio.sleep(0.025)
        if self.args.mode == "legacy":
            eq(c.protocol_version, HANDSHAKE, "negotiated version")
            need(s.initialize_result is not None, "an initialize result", sent)
            need("server/discover" not in sent, "no server/discover sent in legacy mode", sent)
            eq(sent[:2], ["initialize", "notifications/initialized"], "the handshake")
            init = next(m for m in self.tap.received() if m.get("id") == self.tap.sent()[0]["id"])["result"]
            eq(init.get("protocolVersion"), HANDSHAKE, "initialize result protocolVersion")
            eq((init.get("serverInfo") or {}).get("name"), "portcullis", "serverInfo.name")
            need((init.get("serverInfo") or {}).get("version"), "serverInfo.version", init)
            eq((init.get("capabilities") or {}).get("tools"), {"listChanged": False}, "capabilities.tools")
            need(isinstance(init.get("instructions"), str) and init["instructions"], "instructions", init)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "ping is removed as of 2026-07-28": this is the handshake era
                await c.send_ping()
            return f"initialize → {c.protocol_version}, serverInfo {init['serverInfo']}, ping answered"
        eq(c.protocol_version, MODERN, "negotiated version (the SDK falls back to initialize silently)")
        if self.args.mode == "auto":
            need("initialize" not in sent, "no initialize sent: the discover probe was taken as modern", sent)
            d = s.discover_result
            need(d is not None, "a discover result", sent)
            raw = next(
                (m["result"] for m in self.tap.received() if m.get("id") == self.tap.sent()[0].get("id")), None
            )
            need(raw is not None, "the discover result on the wire", self.tap.transcript())
            eq(raw.get("resultType"), "complete", "discover resultType")
            sv = raw.get("supportedVersions") or []
            need(MODERN in sv and HANDSHAKE in sv, "supportedVersions has 2026-07-28 and 2025-11-25", sv)
            need(isinstance(raw.get("ttlMs"), int) and raw["ttlMs"] >= 0, "ttlMs ≥ 0", raw)
            eq(raw.get("cacheScope"), "private", "cacheScope")
            need((raw.get("capabilities") or {}).get("tools") is not None, "capabilities.tools", raw)
            need(isinstance(raw.get("instructions"), str) and raw["instructions"], "instructions", raw)
            info = c.server_info
            need(info is not None and info.name == "portcullis", "_meta serverInfo stamp names portcullis", raw)
            eq((raw.get("serverInfo") or {}).get("name"), "portcullis", "serverInfo in the result")
        # The modern envelope on every request the SDK sent after the probe.
        for m in self.tap.sent():
            if "id" in m and m.get("method") != "server/discover":
                meta = (m.get("params") or {}).get("_meta") or {}
                eq(meta.get("io.modelcontextprotocol/protocolVersion"), MODERN, f"{m['method']} _meta version")
        # A request at an unsupported version is -32022 naming what is
        # supported; one without the client capabilities is -32602. The
        # Client stamps its own version on every request, so these go through
        # its dispatcher (the SDK's JSON-RPC layer) as they are.
        caps = {"io.modelcontextprotocol/clientCapabilities": {}}
        try:
            raw = await s._dispatcher.send_raw_request(  # noqa: SLF001
                "tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01", **caps}}, {}
            )
            raise Failed(f"tools/list at 2099-01-01 answered {short(raw)}; want error -32022")
        except MCPError as e:
            eq(e.code, -32022, "tools/list at an unsupported version: error code")
            data = e.data or {}
            need(MODERN in (data.get("supported") or []), "error data.supported lists 2026-07-28", data)
            eq(data.get("requested"), "2099-01-01", "error data.requested")
        try:
            raw = await s._dispatcher.send_raw_request(  # noqa: SLF001
                "tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}, {}
            )
            raise Failed(f"tools/list without clientCapabilities answered {short(raw)}; want error -32602")
        except MCPError as e:
            eq(e.code, -32602, "tools/list without _meta clientCapabilities: error code")
        # server/discover itself at an unknown version: the SDK copes with
        # either an answer listing the versions or -32022 (session.discover).
        try:
            raw = await s.send_discover("2099-01-01")
            need(MODERN in (raw.get("supportedVersions") or []), "discover at 2099-01-01 lists 2026-07-28", raw)
            disc = "answered with its supportedVersions"
        except MCPError as e:
            eq(e.code, -32022, "server/discover at an unsupported version: error code")
            disc = "-32022"
        how = "server/discover" if self.args.mode == "auto" else "adopt"
        return f"{c.protocol_version} via {how}; tools/list at 2099-01-01 → -32022; discover at 2099-01-01 {disc}"

    async def list_tools(self) -> str:
        assert self.client is not None
        r = await self.client.list_tools()
        names = [t.name for t in r.tools]
        eq(names, READONLY_TOOLS if self.readonly else ALL_TOOLS, "tool names in order")
        for t in r.tools:
            for which, schema in (("inputSchema", t.input_schema), ("outputSchema", t.output_schema)):
                need(isinstance(schema, dict), f"{t.name}: {which} present", schema)
                Draft202012Validator.check_schema(schema)
                if "$schema" in schema:
                    eq(schema["$schema"], DRAFT_2020_12, f"{t.name}: {which} $schema")
                eq(validator_for(schema, default=Draft202012Validator), Draft202012Validator, f"{t.name} {which} draft")
                eq(schema.get("type"), "object", f"{t.name}: {which} root type")
            need(t.description, f"{t.name}: a description", t)
            self.schemas[t.name] = {"inputSchema": t.input_schema, "outputSchema": t.output_schema}
        # Bad inputs are rejected by the schema too (the schema says what the server accepts).
        Draft202012Validator(self.schemas["read_file"]["inputSchema"]).validate({"path": "x"})
        need(
            not Draft202012Validator(self.schemas["run_shell"]["inputSchema"]).is_valid(
                {"command": "true", "writable": True}
            ),
            "run_shell's inputSchema refuses a `writable` field",
        )
        if self.args.mode != "legacy":
            raw = [
                m["result"]
                for m in self.tap.received()
                if "result" in m and "tools" in m["result"]
            ]
            need(raw, "a tools/list result on the wire")
            res = raw[-1]
            need(isinstance(res.get("ttlMs"), int), "tools/list ttlMs", {k: v for k, v in res.items() if k != "tools"})
            need(res.get("cacheScope") in ("private", "public"), "tools/list cacheScope", res.get("cacheScope"))
            eq(res.get("resultType"), "complete", "tools/list resultType")
        return f"{len(names)} tools, every inputSchema/outputSchema valid 2020-12"

    async def main_checks(self) -> None:
        ws = self.ws
        secret = (self.scratch / "outside" / "secret.txt").read_text()
        sibling_secret = (self.scratch / "ws-evil" / "secret.txt").read_text()

        async def read_file() -> str:
            sc = await self.ok("read_file", {"path": "hello.txt"})
            need("hello world" in sc.get("content", ""), "content", sc)
            need("1" in sc["content"].split("hello world")[0], "content is numbered", sc["content"])
            need(isinstance(sc.get("hash"), str) and sc["hash"], "hash", sc)
            return f"hash {sc['hash'][:16]}"

        await self.check("read_file", read_file)

        async def edit_file() -> str:
            h = (await self.ok("read_file", {"path": "edit.txt"}))["hash"]
            sc = await self.ok(
                "edit_file", {"path": "edit.txt", "old_string": "alpha", "new_string": "ALPHA", "expect_hash": h}
            )
            eq(sc.get("replacements"), 1, "replacements")
            eq((ws / "edit.txt").read_text(), "ALPHA beta\n", "edit.txt from outside")
            return "alpha → ALPHA, seen on disk"

        await self.check("edit_file", edit_file)

        async def multi_edit() -> str:
            await self.ok(
                "multi_edit",
                {
                    "path": "edit.txt",
                    "edits": [{"old_string": "ALPHA", "new_string": "one"}, {"old_string": "beta", "new_string": "two"}],
                },
            )
            eq((ws / "edit.txt").read_text(), "one two\n", "edit.txt from outside")
            return "two edits, seen on disk"

        await self.check("multi_edit", multi_edit)

        async def write_file() -> str:
            sc = await self.ok("write_file", {"path": "new/written.txt", "content": "written by the model\n"})
            eq(sc.get("created"), True, "created")
            eq((ws / "new" / "written.txt").read_text(), "written by the model\n", "new/written.txt from outside")
            return "new/written.txt created, seen on disk"

        await self.check("write_file", write_file)

        async def list_dir() -> str:
            sc = await self.ok("list_dir", {})
            paths = [e.get("path") for e in sc.get("entries", [])]
            for p in ("hello.txt", "edit.txt", "src"):
                need(p in paths, f"{p} listed", paths)
            need("key.pem" not in paths, "a denied file is not listed", paths)
            return f"{len(paths)} entries"

        await self.check("list_dir", list_dir)

        async def run_shell() -> str:
            sc = await self.ok("run_shell", {"command": "echo hi-from-shell && cat hello.txt && ls src"})
            eq((sc.get("outcome"), sc.get("exit_code")), ("exited", 0), "outcome, exit_code")
            eq(sc.get("stdout"), "hi-from-shell\nhello world\nlib.rs\n", "stdout")
            need("writable" in sc and "refused_writes" in sc, "writable and refused_writes present", sc)
            sc = await self.ok("run_shell", {"command": "printf '%s-%s\\n' a b; true"})
            eq(sc.get("stdout"), "a-b\n", "printf stdout")
            sc = await self.ok("run_shell", {"command": "sh -c 'exit 3'"})
            eq((sc.get("outcome"), sc.get("exit_code")), ("exited", 3), "a non-zero exit is a result")
            return "echo/cat/ls/printf/sh ran; exit 3 is a result"

        await self.check("run_shell", run_shell)

        async def run_shell_writes() -> str:
            sc = await self.ok("run_shell", {"command": "sh -c 'echo x > rw-control'"})
            eq((sc.get("writable"), sc.get("exit_code")), (True, 0), "writable, exit_code")
            eq((ws / "rw-control").read_text(), "x\n", "rw-control from outside")
            return "the control for --readonly: the write happened, seen on disk"

        await self.check("run_shell may write (control)", run_shell_writes)

        async def progress() -> str:
            seen: list[tuple[float, float | None]] = []

            async def cb(p: float, total: float | None, message: str | None) -> None:
                seen.append((p, total))

            sc = await self.ok("run_shell", {"command": "sleep 2.5"}, progress_callback=cb)
            eq(sc.get("outcome"), "exited", "outcome")
            need(len(seen) >= 1, "at least one progress notification during a 2.5 s command", seen)
            rid = self.tap.request_id("tools/call", "sleep 2.5")
            toks = [
                m["params"].get("progressToken")
                for m in self.tap.received()
                if m.get("method") == "notifications/progress"
            ]
            need(rid in toks, f"progress notifications carry the request's token {rid}", toks)
            return f"{len(seen)} progress notifications: {seen}"

        await self.check("progress", progress)

        async def background() -> str:
            sc = await self.ok("run_shell", {"command": "sh -c 'echo bg-start; sleep 1; echo bg-end'", "background": True})
            eq(sc.get("outcome"), "started", "outcome")
            job = sc.get("job_id")
            need(isinstance(job, str) and job, "job_id", sc)
            out: dict[str, Any] = {}
            stdout = ""
            args: dict[str, Any] = {"id": job, "wait_ms": 2000}
            deadline = time.monotonic() + 15
            reads = 0
            while time.monotonic() < deadline:
                out = await self.ok("shell_output", args)
                reads += 1
                stdout += out.get("stdout", "")
                if out.get("status") != "running":
                    break
                need(isinstance(out.get("cursor"), int), "a cursor to read on from", out)
                args["since"] = out["cursor"]
            eq(out.get("status"), "exited", "the job's status")
            eq(out.get("exit_code"), 0, "the job's exit code")
            eq(stdout, "bg-start\nbg-end\n", "the job's stdout, read on from each cursor")
            await self.err("shell_output", {"id": "j999-deadbeef"}, "job-not-found")
            return f"job {job} exited, output read in {reads} calls"

        await self.check("run_shell background + shell_output", background)

        async def kill() -> str:
            m = marker(300)
            sc = await self.ok("run_shell", {"command": f"sh -c 'sleep {m}; true'", "background": True})
            job = sc.get("job_id")
            running = await wait_procs(m, True, 10)
            need(running, f"the job's sleep {m} runs (the control), seen in /proc")
            k = await self.ok("shell_kill", {"id": job})
            eq((k.get("status"), k.get("already_ended")), ("killed", False), "status, already_ended")
            left = await wait_procs(m, False, 10)
            need(not left, "no process of the killed job remains, seen in /proc", left)
            await self.err("shell_kill", {"id": "j999-deadbeef"}, "job-not-found")
            return f"job {job} killed; /proc had {len(running)} process(es) of it, now none"

        await self.check("shell_kill", kill)

        async def run_tests() -> str:
            sc = await self.ok("run_tests", {"filter": "unit_a"})
            eq((sc.get("outcome"), sc.get("exit_code")), ("exited", 0), "outcome, exit_code")
            eq(sc.get("stdout"), "tests: unit_a\n", "stdout (the filter appended as one word)")
            sc = await self.ok("run_tests", {"filter": "two words; echo injected"})
            eq(sc.get("stdout"), "tests: two words; echo injected\n", "stdout (one word, not a command)")
            await self.err("run_tests", {"filter": "it's"}, "bad-input")
            return f"`{TEST_CMD}` + filter as one word; a quote is bad-input"

        await self.check("run_tests", run_tests)

        async def grep() -> str:
            sc = await self.ok("grep", {"pattern": "needle", "glob": "*.rs"})
            ms = sc.get("matches", [])
            need(ms, "matches", sc)
            eq((ms[0].get("path"), ms[0].get("line")), ("src/lib.rs", 2), "first match")
            sc = await self.ok("grep", {"pattern": "PRIVATE KEY"})
            eq(sc.get("matches"), [], "a denied file is not searched")
            return f"{len(ms)} match(es)"

        await self.check("grep", grep)

        async def glob() -> str:
            sc = await self.ok("glob", {"pattern": "**/*.txt"})
            paths = sc.get("paths", [])
            for p in ("hello.txt", "edit.txt", "new/written.txt"):
                need(p in paths, f"{p} found", paths)
            return f"{paths}"

        await self.check("glob", glob)

        async def todos() -> str:
            sc = await self.ok(
                "todo_write",
                {"todos": [{"content": "read", "status": "completed"}, {"content": "edit", "status": "in_progress"}]},
            )
            eq(len(sc.get("todos", [])), 2, "todos written")
            sc = await self.ok("todo_read", {})
            eq([t.get("content") for t in sc.get("todos", [])], ["read", "edit"], "todos read back")
            eq([t.get("status") for t in sc.get("todos", [])], ["completed", "in_progress"], "statuses")
            need(isinstance(sc.get("counts"), dict), "counts", sc)
            await self.err("todo_write", {"todos": [{"content": "x", "status": "done"}]}, "bad-input")
            return f"counts {sc['counts']}"

        await self.check("todo_write + todo_read", todos)

        async def refused() -> str:
            sc = await self.err("run_shell", {"command": "curl x"}, "refused-by-policy")
            need(sc["error"].get("reason"), "error.reason", sc)
            eq(sc["error"].get("command"), "curl x", "error.command")
            if "outcome" in sc:
                eq(sc["outcome"], "refused", "outcome")
            why1 = sc["error"]["reason"]
            sc = await self.err("run_shell", {"command": "touch pwned"}, "refused-by-policy")
            need(sc["error"].get("reason"), "error.reason", sc)
            need(not (ws / "pwned").exists(), "nothing ran: no pwned file, seen from outside")
            sc = await self.err("run_shell", {"command": "echo ok; touch pwned2"}, "refused-by-policy")
            need(not (ws / "pwned2").exists(), "nothing of the line ran, seen from outside")
            return f"curl x: {why1}; touch pwned: {sc['error']['reason']}"

        await self.check("refused command", refused)

        async def bad_input() -> str:
            await self.err("read_file", {}, "bad-input")
            await self.err("run_shell", {"command": "sh -c 'echo x > bad'", "writable": True}, "bad-input")
            need(not (ws / "bad").exists(), "nothing ran, seen from outside")
            r = await self.client.call_tool("no_such_tool", {})  # type: ignore[union-attr]
            need(r.is_error, "unknown tool is isError", r.structured_content)
            eq((r.structured_content or {}).get("error", {}).get("kind"), "unknown-tool", "error.kind")
            return "missing path, a `writable` field, an unknown tool"

        await self.check("bad input", bad_input)

        async def stale() -> str:
            self.write("stale.txt", "one\n")
            h1 = (await self.ok("read_file", {"path": "stale.txt"}))["hash"]
            sc = await self.ok("edit_file", {"path": "stale.txt", "old_string": "one", "new_string": "two", "expect_hash": h1})
            h2 = sc.get("hash")
            need(h2 and h2 != h1, "a new hash after the edit (the control)", sc)
            (ws / "stale.txt").write_text("changed behind the model's back\n")
            sc = await self.err(
                "edit_file", {"path": "stale.txt", "old_string": "changed", "new_string": "X", "expect_hash": h2}, "stale-hash"
            )
            eq((ws / "stale.txt").read_text(), "changed behind the model's back\n", "stale.txt untouched, from outside")
            await self.err(
                "multi_edit",
                {"path": "stale.txt", "edits": [{"old_string": "changed", "new_string": "X"}], "expect_hash": h1},
                "stale-hash",
            )
            eq((ws / "stale.txt").read_text(), "changed behind the model's back\n", "stale.txt untouched, from outside")
            return sc["error"]["message"][:120]

        await self.check("stale edit", stale)

        async def escapes() -> str:
            out = self.scratch / "outside"
            evil = self.scratch / "ws-evil"
            reads = {
                "../outside/secret.txt": secret,
                str(out / "secret.txt"): secret,
                "link-file": secret,
                "link-dir/secret.txt": secret,
                "../ws-evil/secret.txt": sibling_secret,
                str(evil / "secret.txt"): sibling_secret,
                "key.pem": "PRIVATE KEY",
            }
            for path, text in reads.items():
                r = await self.call("read_file", {"path": path})
                need(r.is_error, f"read_file {path} is isError", r.structured_content)
                eq(r.structured_content.get("error", {}).get("kind"), "path-escape", f"read_file {path}: error.kind")
                need(text not in r.content[0].text, f"read_file {path}: the secret is not in the result", r.content[0].text)
            before = {p: p.read_text() for p in (out / "secret.txt", evil / "secret.txt")}
            writes = [
                ("../outside/w1.txt", out / "w1.txt"),
                (str(out / "w2.txt"), out / "w2.txt"),
                ("link-dir/w3.txt", out / "w3.txt"),
                ("../ws-evil/w4.txt", evil / "w4.txt"),
                (str(evil / "w5.txt"), evil / "w5.txt"),
                ("link-file", out / "secret.txt"),
            ]
            for path, where in writes:
                await self.err("write_file", {"path": path, "content": "escaped\n"}, "path-escape")
                if where.name.startswith("w"):
                    need(not where.exists(), f"write_file {path}: {where} not created, seen from outside")
            await self.err("edit_file", {"path": "link-file", "old_string": "TOP", "new_string": "X"}, "path-escape")
            await self.err("edit_file", {"path": str(evil / "secret.txt"), "old_string": "SIB", "new_string": "X"}, "path-escape")
            await self.err("list_dir", {"path": "../ws-evil"}, "path-escape")
            await self.err("list_dir", {"path": str(evil)}, "path-escape")
            after = {p: p.read_text() for p in before}
            eq(after, before, "the files outside are unchanged, seen from outside")
            # The shell cannot read them either (the sandbox hides them).
            sc = await self.call("run_shell", {"command": f"cat {out / 'secret.txt'} {evil / 'secret.txt'}"})
            need(secret not in json.dumps(sc.structured_content), "run_shell cat: the secret is not in the result", sc.structured_content)
            need(sibling_secret not in json.dumps(sc.structured_content), "run_shell cat: the sibling's secret is not in the result")
            return f"{len(reads)} reads and {len(writes)} writes refused (../, absolute, symlinks, prefix sibling {evil.name}, deny glob)"

        await self.check("path escapes", escapes)

        async def timeout() -> str:
            m = marker(30)
            t0 = time.monotonic()
            sc = await self.err("run_shell", {"command": f"sleep {m}", "timeout_ms": 1000}, "timed-out")
            took = time.monotonic() - t0
            eq(sc.get("outcome"), "timed-out", "outcome")
            need(took < 10, f"it ended soon after the 1 s timeout (took {took:.1f} s)")
            left = await wait_procs(m, False, 10)
            need(not left, "no sleep left, seen in /proc", left)
            return f"timed-out after {took:.1f} s"

        await self.check("timeout", timeout)

        async def cancel_by_read_timeout() -> str:
            m = marker(60)
            seen: list[list[str]] = []

            async def watch() -> None:
                seen.append(await wait_procs(m, True, 10))

            t0 = time.monotonic()
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                try:
                    await self.client.call_tool(  # type: ignore[union-attr]
                        "run_shell", {"command": f"sh -c 'sleep {m}; true'"}, read_timeout_seconds=6
                    )
                    raise Failed("call_tool returned; want the SDK's read timeout")
                except MCPError as e:
                    eq(e.code, -32001, "the SDK's REQUEST_TIMEOUT")
            t_cancel = time.monotonic()
            need(seen and seen[0], f"sleep {m} ran before the cancel (the control), seen in /proc", seen)
            left = await wait_procs(m, False, 10)
            need(not left, "after notifications/cancelled no process of the command remains, seen in /proc", left)
            rid = self.tap.request_id("tools/call", m)
            cancels = [
                x for x in self.tap.sent() if x.get("method") == "notifications/cancelled" and x["params"].get("requestId") == rid
            ]
            need(cancels, f"the SDK sent notifications/cancelled for request {rid}", self.tap.transcript(10))
            await anyio.sleep(1.0)
            late = self.tap.responses_to(rid, after=t_cancel)
            need(not late, f"no response to the cancelled request {rid}", late)
            return f"read timeout after {t_cancel - t0:.1f} s → notifications/cancelled {cancels[0]['params']}; tree gone"

        await self.check("cancellation (SDK read timeout)", cancel_by_read_timeout)

        async def cancel_by_scope() -> str:
            m = marker(61)
            scope = anyio.CancelScope()
            returned: list[Any] = []

            async def call() -> None:
                with scope:
                    returned.append(await self.client.call_tool("run_shell", {"command": f"sh -c 'sleep {m}; true'"}))  # type: ignore[union-attr]

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                running = await wait_procs(m, True, 10)
                scope.cancel()
            t_cancel = time.monotonic()
            need(running, f"sleep {m} ran before the cancel (the control), seen in /proc")
            need(not returned, "the call was cancelled, not answered", returned)
            left = await wait_procs(m, False, 10)
            need(not left, "after notifications/cancelled no process of the command remains, seen in /proc", left)
            rid = self.tap.request_id("tools/call", m)
            cancels = [
                x for x in self.tap.sent() if x.get("method") == "notifications/cancelled" and x["params"].get("requestId") == rid
            ]
            need(cancels, f"the SDK sent notifications/cancelled for request {rid}", self.tap.transcript(10))
            await anyio.sleep(1.0)
            late = self.tap.responses_to(rid, after=t_cancel)
            need(not late, f"no response to the cancelled request {rid}", late)
            # The server still serves.
            await self.ok("read_file", {"path": "hello.txt"})
            return f"anyio cancel scope → notifications/cancelled {cancels[0]['params']}; tree gone; still serving"

        await self.check("cancellation (anyio cancel scope)", cancel_by_scope)

        async def in_flight() -> str:
            m = marker(3)
            done: dict[str, float] = {}
            t0 = time.monotonic()
            results: dict[str, Any] = {}

            async def shell() -> None:
                results["shell"] = await self.ok("run_shell", {"command": f"sleep {m}"})
                done["shell"] = time.monotonic() - t0

            async with anyio.create_task_group() as tg:
                tg.start_soon(shell)
                running = await wait_procs(m, True, 10)
                t1 = time.monotonic()
                sc = await self.ok("read_file", {"path": "hello.txt"})
                done["read"] = time.monotonic() - t0
                read_took = time.monotonic() - t1
                still = "shell" not in done
            need(running, f"sleep {m} was running when read_file was sent", running)
            need("hello world" in sc.get("content", ""), "read_file content", sc)
            need(still, "run_shell had not finished when read_file did", done)
            need(read_took < 1.5, f"read_file answered while run_shell ran (took {read_took:.2f} s)")
            need(done["shell"] >= 2.9, f"run_shell took its 3 s ({done['shell']:.2f} s)")
            eq(results["shell"].get("outcome"), "exited", "run_shell outcome")
            return f"read_file in {read_took:.2f} s while `sleep 3` ran; run_shell done at {done['shell']:.1f} s"

        await self.check("two calls in flight", in_flight)

        if self.args.mode != "legacy":

            async def result_types() -> str:
                res = [m for m in self.tap.received() if "result" in m and "id" in m]
                bad = [m for m in res if m["result"].get("resultType") != "complete"]
                need(not bad, "every result has resultType complete", bad[:3])
                return f"{len(res)} results"

            await self.check("resultType on every result", result_types)

    async def readonly_checks(self) -> None:
        ws = self.ws

        async def refused_write() -> str:
            sc = await self.ok("run_shell", {"command": "sh -c 'echo x > f'"})
            eq(sc.get("writable"), False, "writable")
            need(sc.get("exit_code") not in (0, None), "the write failed: exit code not 0", sc)
            rw = sc.get("refused_writes") or {}
            erofs = "Read-only file system" in sc.get("stderr", "")
            need(erofs or (rw.get("count") or 0) >= 1, "the refusal is named (EROFS in stderr or refused_writes)", sc)
            need(not (ws / "f").exists(), "f not created, seen from outside")
            return f"exit {sc['exit_code']}, stderr {sc.get('stderr', '').strip()!r}, refused_writes {rw}"

        await self.check("--readonly: run_shell write refused", refused_write)

        async def no_write_tools() -> str:
            r = await self.call("write_file", {"path": "g", "content": "x"})
            need(r.is_error, "write_file is not offered", r.structured_content)
            eq(r.structured_content.get("error", {}).get("kind"), "unknown-tool", "error.kind")
            need(not (ws / "g").exists(), "g not created, seen from outside")
            r = await self.call("edit_file", {"path": "hello.txt", "old_string": "hello", "new_string": "bye"})
            need(r.is_error, "edit_file is not offered", r.structured_content)
            eq((ws / "hello.txt").read_text(), "hello world\n", "hello.txt unchanged, from outside")
            sc = await self.ok("read_file", {"path": "hello.txt"})
            need("hello world" in sc.get("content", ""), "read_file still works (the control)", sc)
            return "write_file/edit_file unknown-tool; read_file works"

        await self.check("--readonly: no write tools", no_write_tools)

        async def run_tests_ro() -> str:
            sc = await self.ok("run_tests", {"filter": "unit_b"})
            eq((sc.get("stdout"), sc.get("writable")), ("tests: unit_b\n", False), "stdout, writable")
            return "run_tests runs, without write access"

        await self.check("--readonly: run_tests", run_tests_ro)

    async def leave_job(self, m: str) -> str:
        sc = await self.ok("run_shell", {"command": f"sh -c 'sleep {m}; true'", "background": True})
        running = await wait_procs(m, True, 10)
        need(running, f"the job's sleep {m} runs, seen in /proc", sc)
        return f"job {sc.get('job_id')}"

    async def after_exit(self, took: float, m: str) -> str:
        # The SDK closes stdin, waits 2 s for the server to exit, then
        # SIGTERMs its process group (mcp/client/stdio.py _stop_server_process).
        need(took < 1.9, f"the server exited on stdin EOF before the SDK's 2 s escalation (took {took:.2f} s)")
        left = await wait_procs(m, False, 3)
        need(not left, "no process of the background job remains after EOF, seen in /proc", left)
        left = procs_with(str(self.ws))
        need(not left, "no process naming the workspace remains", left)
        return f"exited {took:.2f} s after EOF; its background job is gone"

    async def audit(self) -> str:
        p = self.scratch / "audit.jsonl"
        need(p.exists(), "the audit log exists")
        lines = p.read_text().splitlines()
        need(lines, "the audit log has records")
        for ln in lines:
            json.loads(ln)
        text = "\n".join(lines)
        need("curl x" in text, "the refused `curl x` is audited", lines[-3:])
        return f"{len(lines)} JSON records, the refusal among them"


def setup(scratch: Path) -> None:
    ws = scratch / "ws"
    ws.mkdir(parents=True)
    (ws / "hello.txt").write_text("hello world\n")
    (ws / "edit.txt").write_text("alpha beta\n")
    (ws / "src").mkdir()
    (ws / "src" / "lib.rs").write_text("pub fn f() {}\n// a needle here\n")
    (ws / "key.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    out = scratch / "outside"
    out.mkdir()
    (out / "secret.txt").write_text(f"TOP-SECRET-{random.randint(10**8, 10**9)}\n")
    # The prefix sibling: its path starts with the workspace's.
    evil = scratch / "ws-evil"
    evil.mkdir()
    (evil / "secret.txt").write_text(f"SIBLING-SECRET-{random.randint(10**8, 10**9)}\n")
    os.symlink(out / "secret.txt", ws / "link-file")
    os.symlink(out, ws / "link-dir")
    (scratch / "policy.toml").write_text(POLICY)
    # Controls: everything to escape to is there and readable from outside.
    assert (ws / "link-file").read_text().startswith("TOP-SECRET-")
    assert (ws / "link-dir" / "secret.txt").exists()
    assert (ws / ".." / "ws-evil" / "secret.txt").read_text().startswith("SIBLING-SECRET-")


async def amain(args: argparse.Namespace) -> int:
    report = Report()
    scratch = Path(args.scratch).resolve()
    need_empty = not any(scratch.iterdir())
    if not need_empty:
        print(f"{scratch} is not empty", file=sys.stderr)
        return 2
    setup(scratch)
    print(f"mcp {SDK_VERSION} client, mode {args.mode}, server {args.portcullis}, scratch {scratch}", flush=True)
    with anyio.fail_after(args.deadline):
        await Run(args, report, scratch, readonly=False).run()
        await Run(args, report, scratch, readonly=True).run()
    print(f"python_client: {report.passed} passed, {len(report.failed)} failed", flush=True)
    if report.failed:
        print("failed: " + "; ".join(report.failed), flush=True)
    return 0 if not report.failed else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("portcullis")
    p.add_argument("scratch")
    p.add_argument("--mode", default="auto", choices=["auto", "legacy", MODERN])
    p.add_argument("--only", nargs="*", default=[], help="run only the checks whose name contains one of these")
    p.add_argument("--deadline", type=float, default=240.0, help="seconds for the whole run")
    args = p.parse_args()
    installed = getattr(mcp, "__version__", None)
    if installed is None:
        from importlib.metadata import version

        installed = version("mcp")
    if installed != SDK_VERSION:
        print(f"this script is written against mcp {SDK_VERSION}; installed: {installed}", file=sys.stderr)
        return 2
    return anyio.run(amain, args)


if __name__ == "__main__":
    sys.exit(main())
