"""benchlib: the clients scripts/bench-spawn and scripts/bench-serve share.

  Child      a long-lived child process spoken to in lines over pipes:
             single-threaded (no reader thread, so no thread hand-off in any
             sample), every read with a deadline, and on any failure a report
             with the request, the answer and the child's stderr.
  Server     `portcullis serve` as an MCP client drives it: JSON-RPC, one
             JSON line per message, answers matched by id; the modern era
             (every request's `_meta` carries the protocol version) or the
             classic handshake (`initialize`, then `notifications/initialized`).
  Driver     examples/bench_driver.rs, the library variant: `ID LINE` in,
             `ID ok EXIT_CODE` out when the command has ended.
  check_result, shell_check   what a run_shell answer must say.

Not a script: the two scripts put this directory on sys.path and import it.
"""

import json
import os
import select
import subprocess
import sys
import tempfile
import time

MODERN = "2026-07-28"
CLASSIC = "2025-11-25"
META = {"io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {}}


def indented(text, limit=None):
    lines = (text or "").splitlines() or ["(empty)"]
    if limit and len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more lines)"]
    return "".join(f"    | {l}\n" for l in lines)


def shorten(s, keep=600):
    """A long answer with its long strings cut (a 4 KiB file is in it twice)."""
    return s if len(s) <= 4 * keep else s[:2 * keep] + f" ... ({len(s) - 3 * keep} chars) ... " + s[-keep:]


class Child:
    """A child process read and written in lines, with a deadline on reads."""

    what = "child"

    def __init__(self, prog, name, argv, timeout):
        self.prog = prog
        self.name = name
        self.argv = argv
        self.timeout = timeout
        self.err = tempfile.TemporaryFile(prefix=f"{prog}.{name}.stderr.")
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, bufsize=0)
        self.wfd = self.p.stdin.fileno()
        self.rfd = self.p.stdout.fileno()
        self.buf = bytearray()
        self.next_id = 1
        self.pending = {}          # id -> request (for the failure report)
        self.calls = 0

    def write_line(self, line, req=None):
        view = memoryview(line)
        while view:
            try:
                n = os.write(self.wfd, view)
            except BrokenPipeError:
                self.fail(f"the {self.what} closed its stdin (it died?)", req)
            view = view[n:]

    def read_line(self):
        """The next line the child wrote (bytes, without the newline)."""
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[:nl + 1]
                return line
            ready, _, _ = select.select([self.rfd], [], [], self.timeout)
            if not ready:
                self.fail(f"no answer within {self.timeout} s (BENCH_TIMEOUT); waiting for ids "
                          f"{sorted(self.pending)}",
                          next(iter(self.pending.values()), None))
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                rc = self.p.wait(timeout=5)
                self.fail(f"the {self.what} closed its stdout (exit status {rc}) while ids "
                          f"{sorted(self.pending)} were unanswered",
                          next(iter(self.pending.values()), None))
            self.buf += chunk

    def stderr_text(self):
        self.err.seek(0)
        return self.err.read().decode(errors="replace")

    def show(self, obj):
        return obj if isinstance(obj, str) else json.dumps(obj)

    def fail(self, what, req=None, msg=None):
        text = f"\n{self.prog}: FAIL: {self.what} {self.name}: {what}\n"
        text += f"  {self.what}: {' '.join(self.argv)}\n"
        if req is not None:
            text += "  request:\n" + indented(self.show(req))
        if msg is not None:
            text += "  answer:\n" + indented(shorten(self.show(msg)), 80)
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        text += f"  the {self.what}'s stderr (exit status {self.p.returncode}):\n"
        text += indented(self.stderr_text(), 60)
        print(text, file=sys.stderr, flush=True)
        sys.exit(1)

    def close(self):
        """Close stdin; the child must exit 0. Returns its stderr."""
        self.p.stdin.close()
        try:
            rc = self.p.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.fail(f"still running {self.timeout} s after its stdin was closed")
        if rc != 0:
            self.fail(f"exited {rc} when its stdin was closed")
        return self.stderr_text()

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


class Server(Child):
    """One `portcullis serve` process. era "modern": every request carries
    the protocol version in `_meta`; era "classic": `initialize` (the
    handshake today's SDK clients do) and `notifications/initialized` first,
    then plain requests."""

    what = "server"

    def __init__(self, prog, name, argv, timeout, era="modern"):
        super().__init__(prog, name, argv, timeout)
        self.era = era
        self.info = None
        if era == "classic":
            self.info = self.request("initialize", {
                "protocolVersion": CLASSIC, "capabilities": {},
                "clientInfo": {"name": prog, "version": "0"}})
            self.notify("notifications/initialized", {})
        elif era != "modern":
            raise ValueError(f"era {era!r}")

    def encode(self, method, params, rid=None):
        if self.era == "modern":
            params = dict(params, _meta=META)
        msg = {"jsonrpc": "2.0", "method": method, "params": params}
        if rid is not None:
            msg["id"] = rid
        return msg

    def send(self, method, params):
        rid = self.next_id
        self.next_id += 1
        req = self.encode(method, params, rid)
        self.pending[rid] = req
        self.write_line(json.dumps(req, separators=(",", ":")).encode() + b"\n", req)
        return rid

    def notify(self, method, params):
        msg = self.encode(method, params)
        self.write_line(json.dumps(msg, separators=(",", ":")).encode() + b"\n", msg)

    def recv(self):
        """The next message from the server (a dict)."""
        line = self.read_line()
        try:
            return json.loads(line)
        except ValueError as e:
            self.fail(f"the server wrote a line that is not JSON ({e}): {line[:2000]!r}")

    def answer(self):
        """The next answer (a response to one of our ids): returns (id, msg).
        A notification is skipped (none is expected: no progress is asked)."""
        while True:
            msg = self.recv()
            if "id" not in msg:
                continue
            rid = msg["id"]
            if rid not in self.pending:
                self.fail(f"an answer to id {rid!r}, which is not in flight", None, msg)
            return rid, msg

    def wait_for(self, rid):
        while True:
            got, msg = self.answer()
            if got == rid:
                return msg
            self.fail(f"an answer to id {got} while only {rid} was in flight",
                      self.pending.get(got), msg)

    def request(self, method, params):
        rid = self.send(method, params)
        msg = self.wait_for(rid)
        req = self.pending.pop(rid)
        if "error" in msg:
            self.fail("a JSON-RPC error", req, msg)
        return msg["result"]

    def timed_call(self, tool, args):
        """One tools/call round trip: returns (ns, request, answer)."""
        t0 = time.perf_counter_ns()
        rid = self.send("tools/call", {"name": tool, "arguments": args})
        msg = self.wait_for(rid)
        ns = time.perf_counter_ns() - t0
        self.calls += 1
        return ns, self.pending.pop(rid), msg


def check_result(server, req, msg, check, refused=False):
    """An answer must be a result with isError false (true when `refused`),
    then pass `check` (which returns None or what is wrong)."""
    if "error" in msg:
        server.fail("a JSON-RPC error", req, msg)
    res = msg.get("result") or {}
    if res.get("isError") is not refused:
        err = (res.get("structuredContent") or {}).get("error") or {}
        server.fail(f"isError is {res.get('isError')!r}"
                    + (f" ({err.get('kind')}: {err.get('message')})" if err else ""), req, msg)
    sc = res.get("structuredContent")
    if not isinstance(sc, dict):
        server.fail("no structuredContent object", req, msg)
    wrong = check(sc)
    if wrong:
        server.fail(wrong, req, msg)
    return sc


def shell_check(writable):
    """run_shell ran it, it exited 0, with the write access the server gives."""
    def check(sc):
        if sc.get("outcome") != "exited" or sc.get("exit_code") != 0:
            return f"outcome {sc.get('outcome')!r}, exit_code {sc.get('exit_code')!r} (want exited, 0)"
        if sc.get("writable") is not writable:
            return f"writable is {sc.get('writable')!r}, but this server was started for {writable}"
        return None
    return check


class Driver(Child):
    """examples/bench_driver.rs: one Workspace; `ID LINE` in, `ID ok 0` out
    once the command has ended (answers in the order commands end)."""

    what = "driver"

    def __init__(self, prog, name, argv, timeout):
        super().__init__(prog, name, argv, timeout)
        line = self.read_line()
        if line != b"ready":
            self.fail(f"its first line is {line[:200]!r}, not `ready`")

    def send(self, line):
        rid = self.next_id
        self.next_id += 1
        req = f"{rid} {line}"
        self.pending[rid] = req
        self.write_line(req.encode() + b"\n", req)
        return rid

    def answer(self):
        """The next answer: (id, the rest of its line)."""
        line = self.read_line().decode(errors="replace")
        head, _, rest = line.partition(" ")
        try:
            rid = int(head)
        except ValueError:
            self.fail("an answer that does not start with an id", None, line)
        if rid not in self.pending:
            self.fail(f"an answer to id {rid}, which is not in flight", None, line)
        return rid, rest

    def check(self, rid, rest):
        req = self.pending.pop(rid)
        self.calls += 1
        if rest != "ok 0":
            self.fail(f"the command did not exit 0: {rest}", req, rest)

    def timed(self, line):
        """One round trip: returns ns (checked after the clock stops)."""
        t0 = time.perf_counter_ns()
        rid = self.send(line)
        got, rest = self.answer()
        ns = time.perf_counter_ns() - t0
        if got != rid:
            self.fail(f"an answer to id {got} while only {rid} was in flight", None, rest)
        self.check(got, rest)
        return ns
