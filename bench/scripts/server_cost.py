#!/usr/bin/env python3
"""Server instructions per call of redlease's uncontended scripts, and rslock's calls beside them.

Runs a redis-server (or valkey-server) under callgrind, pinned to one CPU, and sends it a fixed
number of calls per phase, one at a time (request, reply) as a lone client does. Around each phase
the counters are zeroed and dumped (callgrind_control -z / -d), so each dump holds exactly that
phase's calls, plus the server's cron ticks meanwhile (serverCron, shown). The calls are those a
redlease client sends (shapes as seen with MONITOR from `make bench`'s S1; the scripts are the
lua/ files concatenated as src/scripts.rs does) and rslock's (SET NX PX, its compare-and-delete).

Prints, per phase, instructions per call in total (the whole server: reading, parsing, the
command, the reply) and inclusive in the functions that say where they go; writes the dumps and
a summary (summary.md) to the output directory. Usage: see server_cost.sh.
"""

import argparse
import hashlib
import os
import re
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

OWNER_CLIENT = "290ebf16-7170-422a-85d1-dfcd184370e7"
FIELD = OWNER_CLIENT + ":task-7"
LEASE = "30000"
LATCH_MS = "10000"
RSLOCK_UNLOCK = (
    '\nif redis.call("GET", KEYS[1]) == ARGV[1] then\n  return redis.call("DEL", KEYS[1])\n'
    "else\n  return 0\nend\n"
)
FLOOR = "return 1"
# One redis.call and nothing else, for its price against FLOOR with the same arguments.
ONE_CALL = "redis.call('EXISTS', KEYS[1])\nreturn 1"
# Sketches, not redlease's protocol: what the server would spend on a lean common path (no
# functions made, the fewest arguments, the fewest redis.call's). LEAN_RELEASE assumes a waiter
# marks the lock hash (field 'q') when it queues, so one HMGET answers "my count" and "anybody
# queued"; LEAN_RELEASE_PUB also publishes the unlock message.
LEAN_ACQUIRE = """local hash = KEYS[1]
if redis.call('EXISTS', hash) == 0 then
    redis.call('HSET', hash, ARGV[1], '1')
    redis.call('PEXPIRE', hash, ARGV[2])
    return 1
end
return -1
"""
LEAN_RELEASE = """local hash, field = KEYS[1], ARGV[1]
local got = redis.call('HMGET', hash, field, 'q')
if got[1] == '1' and not got[2] then
    redis.call('HDEL', hash, field)
    return 0
end
return -1
"""
# The same lean acquire as a function (FUNCTION LOAD once, FCALL): a function's library runs its
# top level once at load, not on every call as a script's chunk does.
FUNCTIONS_LIB = """#!lua name=server_cost
redis.register_function('floor', function(keys, args) return 1 end)
redis.register_function('lean_acquire', function(keys, args)
    local hash = keys[1]
    if redis.call('EXISTS', hash) == 0 then
        redis.call('HSET', hash, args[1], '1')
        redis.call('PEXPIRE', hash, args[2])
        return 1
    end
    return -1
end)
"""
LEAN_RELEASE_PUB = LEAN_RELEASE.replace(
    "    return 0\n", "    redis.call('PUBLISH', hash .. ':unlock', ARGV[2])\n    return 0\n"
)

# Functions whose inclusive cost says where a call's instructions go. Redis 7.0 exports them
# (it is linked with -rdynamic for modules); Valkey's binary keeps its symbols. Valkey 9 runs a
# script's redis.call through the module API (VM_CallArgv); Redis 7.0 through scriptCall.
FUNCTIONS = [
    ("processCommand", "command lookup, checks, and the command (call)"),
    ("call", "the command itself, with its statistics"),
    ("lookupCommand", "command lookups (top-level and each redis.call)"),
    ("evalShaCommand", "EVALSHA: the script call"),
    ("fcallCommand", "FCALL: the function call"),
    ("luaCallFunction", "  the script run (KEYS/ARGV tables, Lua, reply conversion)"),
    ("lua_pcall", "    Lua code, with its redis.call's"),
    ("scriptCall", "      redis.call: Redis 7.0's path to the command"),
    ("VM_CallArgv", "      redis.call: Valkey 9's path to the command (module API)"),
    ("lua_gc", "    Lua GC step"),
    ("existsCommand", "        EXISTS"),
    ("hsetCommand", "        HSET"),
    ("pexpireCommand", "        PEXPIRE"),
    ("hgetCommand", "        HGET"),
    ("lindexCommand", "        LINDEX (queue head)"),
    ("hdelCommand", "        HDEL"),
    ("hmgetCommand", "        HMGET"),
    ("publishCommand", "        PUBLISH"),
    ("setCommand", "        SET"),
    ("getCommand", "        GET"),
    ("delCommand", "        DEL"),
    ("readQueryFromClient", "reading and parsing requests (incl. the command)"),
    ("writeToClient", "writing replies"),
    ("serverCron", "the server's cron (not the calls'; shown to be subtracted)"),
]


LEANS = (LEAN_ACQUIRE, LEAN_RELEASE, LEAN_RELEASE_PUB)


# As src/scripts.rs concatenates them: the scripts' hashes and the functions each call makes
# must be the client's.
ACQUIRE_PARTS = ("acquire_plain.lua", "queue.lua", "acquire_wait.lua", "fence.lua",
                 "queue_lock.lua", "acquire.lua")
RELEASE_PARTS = ("release_plain.lua", "queue.lua", "fence.lua", "queue_lock.lua", "release.lua")


def ACQUIRE_SOURCE():
    return lua(*ACQUIRE_PARTS)


def RELEASE_SOURCE():
    return lua(*RELEASE_PARTS)


def lua(*names):
    parts = []
    for n in names:
        with open(os.path.join(ROOT, "lua", n), encoding="utf-8") as f:
            parts.append(f.read())
    return "".join(parts)


class Conn:
    """A bare RESP2 connection: one request, one reply."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.buf = b""

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self.reply()

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RuntimeError("unexpected reply %r" % line)


def phases(n, batch):
    """(name, calls per phase, function making call i, expected reply check)."""
    acquire = hashlib.sha1(ACQUIRE_SOURCE().encode()).hexdigest()
    release = hashlib.sha1(RELEASE_SOURCE().encode()).hexdigest()
    unlock = hashlib.sha1(RSLOCK_UNLOCK.encode()).hexdigest()
    floor = hashlib.sha1(FLOOR.encode()).hexdigest()
    one_call = hashlib.sha1(ONE_CALL.encode()).hexdigest()
    bare_acquire = hashlib.sha1(lua("acquire_plain.lua").encode()).hexdigest()
    lean = {src: hashlib.sha1(src.encode()).hexdigest() for src in LEANS}
    key = lambda i: "redlease:{bench:cg:%d}" % i
    rkey = lambda i: "bench:cg:rs:%d" % i
    token = lambda i: hashlib.sha1(b"%d" % i).digest()

    def acquire_batch(i):
        keys, args = [], []
        for j in range(i * batch, (i + 1) * batch):
            keys.append(key(100000 + j))
            args += [FIELD, LEASE, "1"]
        return ["EVALSHA", acquire, len(keys)] + keys + args

    def release_batch(i):
        # The lean batch, as the client sends last holds: KEYS[i], owner and holds per entry.
        keys, args = [], []
        for j in range(i * batch, (i + 1) * batch):
            keys.append(key(100000 + j))
            args += [FIELD, "1"]
        return ["EVALSHA", release, len(keys)] + keys + args

    return [
        ("floor: EVALSHA of `return 1`", n, lambda i: ["EVALSHA", floor, 0], 1),
        (
            "`return 1` with the acquire's 1 key and 3 arguments",
            n,
            lambda i: ["EVALSHA", floor, 1, key(i), FIELD, LEASE, "1"],
            1,
        ),
        (
            "one redis.call (EXISTS of a missing key), same arguments",
            n,
            lambda i: ["EVALSHA", one_call, 1, key(i), FIELD, LEASE, "1"],
            1,
        ),
        (
            "acquire.lua's prelude alone (no keys: every function of the chunk made, an empty reply)",
            n,
            lambda i: ["EVALSHA", acquire, 0],
            [],
        ),
        (
            "acquire.lua short form, free lock",
            n,
            lambda i: ["EVALSHA", acquire, 1, key(i), FIELD, LEASE, "1"],
            1,
        ),
        (
            "release.lua, last hold, nobody queued",
            n,
            lambda i: [
                "EVALSHA", release, 2, key(i), "%s:latch:%s:%d" % (key(i), OWNER_CLIENT, i),
                FIELD, LEASE, LATCH_MS, "1", "-",
            ],
            0,
        ),
        (
            "acquire_plain.lua alone (the short form first, nothing after it), free lock",
            n,
            lambda i: ["EVALSHA", bare_acquire, 1, key(2 * 10**5 + i), FIELD, LEASE, "1"],
            1,
        ),
        (
            "sketch: lean acquire (inline, 1 key + 2 args, EXISTS HSET PEXPIRE)",
            n,
            lambda i: ["EVALSHA", lean[LEAN_ACQUIRE], 1, key(3 * 10**5 + i), FIELD, LEASE],
            1,
        ),
        (
            "sketch: lean release (1 key + 1 arg, HMGET HDEL, no PUBLISH)",
            n,
            lambda i: ["EVALSHA", lean[LEAN_RELEASE], 1, key(3 * 10**5 + i), FIELD],
            0,
        ),
        (
            "release.lua's lean form (1 key + 2 args, as the client sends a last hold), nobody queued",
            n,
            lambda i: ["EVALSHA", release, 1, key(2 * 10**5 + i), FIELD, "1"],
            0,
        ),
        ("sketch: FCALL of a function returning 1", n, lambda i: ["FCALL", "floor", 0], 1),
        (
            "sketch: lean acquire as a function (FCALL, 1 key + 2 args)",
            n,
            lambda i: ["FCALL", "lean_acquire", 1, key(4 * 10**5 + i), FIELD, LEASE],
            1,
        ),
        ("rslock: SET NX PX", n, lambda i: ["SET", rkey(i), token(i), "NX", "PX", "10000"], "OK"),
        (
            "rslock: compare-and-delete script",
            n,
            lambda i: ["EVALSHA", unlock, 1, rkey(i), token(i)],
            1,
        ),
        (
            "acquire.lua, a batch of %d free locks per call" % batch,
            n // batch,
            acquire_batch,
            [1] * batch,
        ),
        (
            "release.lua, a lean batch of %d last holds per call" % batch,
            n // batch,
            release_batch,
            [0] * batch,
        ),
    ]


def control(*args):
    subprocess.run(["callgrind_control", *args], check=True, stdout=subprocess.DEVNULL)


INCLUSIVE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S+?)\s")


def costs(dump):
    """Total Ir of a dump and the inclusive Ir of every function callgrind_annotate names."""
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", dump],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    total, inclusive = None, {}
    for line in out.splitlines():
        if "PROGRAM TOTALS" in line:
            total = int(line.split()[0].replace(",", ""))
            continue
        m = INCLUSIVE.match(line)
        if m:
            name = m.group(2).rsplit(":", 1)[-1]
            inclusive.setdefault(name, int(m.group(1).replace(",", "")))
    return total, inclusive


def newest_dump(outdir, before):
    files = [os.path.join(outdir, f) for f in os.listdir(outdir) if f.startswith("callgrind.out")]
    fresh = [f for f in files if f not in before]
    if not fresh:
        raise RuntimeError("callgrind wrote no dump")
    return max(fresh, key=os.path.getmtime)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", default="")
    a = ap.parse_args()

    deadline = time.time() + 120
    while True:
        try:
            c = Conn(a.port)
            if c.call("PING") == "PONG":
                break
        except OSError:
            pass
        if time.time() > deadline:
            sys.exit("server_cost: the server under callgrind never answered PING")
        time.sleep(0.5)
    for src in (
        ACQUIRE_SOURCE(),
        RELEASE_SOURCE(),
        RSLOCK_UNLOCK,
        FLOOR,
        ONE_CALL,
        lua("acquire_plain.lua"),
        *LEANS,
    ):
        c.call("SCRIPT", "LOAD", src)
    c.call("FUNCTION", "LOAD", "REPLACE", FUNCTIONS_LIB)

    rows = []
    for name, count, make, expect in phases(a.calls, a.batch):
        # A few unmeasured calls of the phase's kind first (caches, lazily made structures),
        # on keys of their own.
        for i in range(count, count + 8):
            c.call(*make(i + 10**6))
        before = set(os.listdir(a.out))
        control("-z", str(a.pid))
        started = time.time()
        for i in range(count):
            got = c.call(*make(i))
            if got != expect:
                sys.exit("server_cost: %s call %d answered %r, not %r" % (name, i, got, expect))
        secs = time.time() - started
        control("-d", str(a.pid))
        dump = newest_dump(a.out, {os.path.join(a.out, f) for f in before})
        total, inclusive = costs(dump)
        rows.append((name, count, total, inclusive, dump, secs))
        print("%-50s %6d calls  %9.0f Ir/call" % (name, count, total / count), flush=True)

    lines = ["# Server instructions per call (callgrind) %s" % a.label, ""]
    lines.append("Calls one at a time on one connection; Ir = instructions, inclusive.")
    lines.append("")
    for name, count, total, inclusive, dump, secs in rows:
        lines.append("## %s (%d calls, dump %s)" % (name, count, os.path.basename(dump)))
        lines.append("")
        lines.append("| where | Ir per call |")
        lines.append("|---|---:|")
        lines.append("| everything the server ran | %.0f |" % (total / count))
        for fn, what in FUNCTIONS:
            if fn in inclusive:
                lines.append("| `%s`: %s | %.0f |" % (fn, what.strip(), inclusive[fn] / count))
        lines.append("")
    with open(os.path.join(a.out, "summary.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
