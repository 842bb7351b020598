#!/usr/bin/env python3
"""Hostile-input campaign against the meshlayout CLI, its MPI mode and its Python module.

Runs a few hundred attempts a careless or hostile user would make (bad numbers, malformed
meshes/layouts/shapes, corrupted config.json and safetensors files, NaN weights, odd paths,
conflicting saves, processes that disagree under mpirun, wrong Python types, threads), each in
its own process group under a timeout, and classifies each one:

  ok-refused   exit 1 (or 2 for `plan` errors, or a CLI11 usage code 100-120), with a message on
               stderr that names the offending value/file (a keyword we expect is present)
  UNCLEAR      refused properly (no crash), but the message does not name what was wrong
               (reported, does not fail the campaign)
  ok-ran       exit 0 on input that is legitimately valid, and the output passes sanity checks
  WRONG        exit 0 on invalid input, or absurd output (NaN/Inf, negative rates, token ids
               outside the vocabulary, wrong counts), or valid input refused
  CRASH        killed by a signal, abort, 'internal error', 'Fatal Python error', pybind11
               'Internal error', sanitizer report, std::bad_alloc/terminate, SystemError
  HANG         the timeout expired (the whole process group is killed), or an mpirun attempt
               that should fail at once took over 20 s (MPI_SLOW_S)
  CAMPAIGN-ERROR  a bug of this script (fails the campaign too)

Usage:  /usr/bin/python3 tools/hostile_campaign.py [--only SUBSTRING] [--list] [--jobs N]
                                                   [--scratch DIR] [--verbose] [--report FILE]
Each WRONG/CRASH/HANG attempt is printed with its command and output excerpts (UNCLEAR ones
with their message); --report writes every attempt as JSON.  About 2-3 minutes on 2 cores.
Exit status: 0 when there is no WRONG/CRASH/HANG, else 1.  Standard library only.  Needs the
optimised build in build/ (build/bin/meshlayout, build/python) and mpirun for the MPI part.
"""
import argparse
import concurrent.futures
import json
import math
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "bin", "meshlayout")
PYPATH = os.path.join(ROOT, "build", "python")
TINY = os.path.join(ROOT, "build", "src", "meshlayout", "cli", "tiny_llama")
TINY_WRITER = os.path.join(ROOT, "build", "src", "meshlayout", "cli", "tiny_llama_writer")
RULES_DIR = os.path.join(ROOT, "examples", "rules")
MEGATRON = os.path.join(RULES_DIR, "llama_megatron.json")
KERAS_HUB = os.path.join(RULES_DIR, "llama_keras_hub.json")
EX_RULES = os.path.join(ROOT, "examples", "rules.json")
PY = "/usr/bin/python3"
MPIRUN = shutil.which("mpirun") or "mpirun"
MPI = [MPIRUN, "--allow-run-as-root", "--oversubscribe"]

S = None  # scratch directory (set in main)
I64MAX = "9223372036854775807"
U64P1 = "18446744073709551616"
HUGE_VALUES = [I64MAX, U64P1, "1e309"]
BAD_INTS = ["0", "-1", I64MAX, U64P1, "1e309", "abc", "", "1.5", "0x10", "nan"]

CRASH_MARKERS = [
    "internal error", "fatal python error", "addresssanitizer", "undefinedbehaviorsanitizer",
    "threadsanitizer", "leaksanitizer", "runtime error:", "terminate called", "std::bad_alloc",
    "segmentation fault", "core dumped", "(core dumped)", "stack smashing", "double free",
    "malloc(): ", "free(): ", "systemerror", "exited on signal", "signal 11", "signal 6",
    "sigsegv", "sigabrt", "sigbus", "bus error", "uncaught exception", "what():",
    "error indicator not set", "unknown exception",
]
MPI_SLOW_S = 20
REFUSE_CODES = {1, 2} | set(range(100, 121))
NAN_RE = re.compile(r"(?<![\w.])[-+]?(nan|inf|infinity)(?![\w])", re.I)
NEG_RATE_RE = re.compile(r"-\d[\d.e+-]*\s*(tokens/s|[KMGT]?i?B/s)")


# ---------------------------------------------------------------- attempts
class Attempt:
    def __init__(self, name, cmd=None, expect="refuse", kw=(), timeout=30, env=None, cwd=None,
                 stdin=None, check=None, custom=None, mpi=False, py=None, setup=None):
        self.name, self.cmd, self.expect, self.kw = name, cmd, expect, list(kw)
        self.timeout, self.env, self.cwd, self.stdin = timeout, env, cwd, stdin
        self.check, self.custom, self.mpi, self.py, self.setup = check, custom, mpi, py, setup


class Result:
    def __init__(self, rc, out, err, timed_out, secs):
        self.rc, self.out, self.err, self.timed_out, self.secs = rc, out, err, timed_out, secs


def limit_memory():
    # A runaway read (/dev/zero, a 2^40-element shape) must not take this machine down: cap the
    # address space at 16 GiB (the MPI runs are not capped: Open MPI maps large regions).
    try:
        resource.setrlimit(resource.RLIMIT_AS, (16 << 30, 16 << 30))
    except (ValueError, OSError):
        pass


def base_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESHLAYOUT_")}
    env["PYTHONPATH"] = PYPATH
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
    env.setdefault("MESHLAYOUT_THREADS", "1")  # 2 attempts at once on 2 cores
    env.pop("PYTHONSTARTUP", None)
    if extra:
        for k, v in extra.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
    return env


def execute(cmd, timeout, env=None, cwd=None, stdin=None, cap=True):
    """Runs cmd in a new process group; on timeout kills the whole group. Output is captured in
    files (no pipe deadlock with big outputs) and trimmed to its first and last 64 KiB."""
    t0 = time.time()
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe,
                             stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                             env=base_env(env), cwd=cwd or ROOT, start_new_session=True,
                             preexec_fn=limit_memory if cap else None)
        timed_out = False
        try:
            if stdin is not None:
                try:  # the program may refuse before it reads its input
                    p.stdin.write(stdin)
                    p.stdin.close()
                except BrokenPipeError:
                    pass
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(p)
        # mpirun's children may outlive it: kill what is left of the group either way.
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        rc = p.returncode

        def grab(f):
            size = f.seek(0, 2)
            f.seek(0)
            if size <= 131072:
                return f.read().decode("utf-8", "replace")
            head = f.read(65536)
            f.seek(size - 65536)
            return (head + b"\n...[%d bytes cut]...\n" % (size - 131072) + f.read()).decode(
                "utf-8", "replace")
        return Result(rc, grab(fo), grab(fe), timed_out, time.time() - t0)


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def crash_marker(text):
    low = text.lower()
    for m in CRASH_MARKERS:
        if m in low:
            return m
    return None


def generic_output_problems(out):
    problems = []
    m = NAN_RE.search(out)
    if m:
        problems.append("NaN/Inf in output: %r" % out[max(0, m.start() - 60):m.end() + 20])
    m = NEG_RATE_RE.search(out)
    if m:
        problems.append("negative rate: %r" % m.group(0))
    return problems


def classify(a, r):
    """Returns (class, note)."""
    if r.timed_out:
        return "HANG", "no exit after %ss" % a.timeout
    if a.mpi and r.secs > MPI_SLOW_S:
        return "HANG", "ended only after %.0f s (a disagreement must end within seconds)" % r.secs
    if r.rc is None or r.rc < 0:
        return "CRASH", "killed by signal %s" % (-r.rc if r.rc is not None else "?")
    if r.rc >= 128 and r.rc not in REFUSE_CODES:
        return "CRASH", "exit %d (signal %d?)" % (r.rc, r.rc - 128)
    m = crash_marker(r.err) or crash_marker(r.out)
    if m:
        return "CRASH", "crash marker %r" % m
    if "AssertionError" in r.err or "MISMATCH" in r.out:
        return "WRONG", "the attempt's own correctness assertion failed"
    if r.rc == 0:
        problems = generic_output_problems(r.out)
        if a.check:
            problems += a.check(r)
        if problems:
            return "WRONG", "; ".join(problems)
        if a.expect == "refuse":
            return "WRONG", "exit 0 on input that must be refused"
        return "ok-ran", ""
    # Non-zero exit, no crash.
    if a.expect == "run":
        return "WRONG", "valid input refused (exit %d)" % r.rc
    if r.rc not in REFUSE_CODES:
        return "UNCLEAR", "unexpected exit code %d" % r.rc
    msg = r.err if a.py is None else r.err + r.out
    if not msg.strip():
        return "UNCLEAR", "refused without any message"
    if a.py is not None and "Unable to cast Python instance" in msg:
        return "UNCLEAR", "pybind11's 'Unable to cast Python instance to C++ type' names neither argument nor type"
    if a.py is not None and "incompatible" in msg and "Invoked with" in msg:
        return "ok-refused", "pybind11 signature mismatch (lists the signature and the arguments)"
    if a.kw and not any(k.lower() in msg.lower() for k in a.kw):
        return "UNCLEAR", "message names none of %r" % (a.kw,)
    return "ok-refused", ""


# ---------------------------------------------------------------- output checks
def check_generate(n, vocab=64, json_mode=False):
    def check(r):
        problems = []
        if json_mode:
            rows = []
            for line in r.out.splitlines():
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    problems.append("not JSON: %r" % line[:80])
            if n is not None and len(rows) != n:
                problems.append("%d tokens printed, %s asked" % (len(rows), n))
            for row in rows:
                t, lp = row.get("token"), row.get("logprob")
                if not isinstance(t, int) or not 0 <= t < vocab:
                    problems.append("token %r outside [0, %d)" % (t, vocab))
                if not isinstance(lp, (int, float)) or not math.isfinite(lp) or lp > 1e-9:
                    problems.append("logprob %r is not a finite log-probability" % (lp,))
        else:
            m = re.search(r"generated \((\d+) tokens?\): ([-\d, ]*)", r.out)
            if not m:
                problems.append("no 'generated' line")
            else:
                ids = [int(x) for x in m.group(2).replace(" ", "").split(",") if x]
                if n is not None and len(ids) != n:
                    problems.append("%d tokens printed, %s asked" % (len(ids), n))
                bad = [i for i in ids if not 0 <= i < vocab]
                if bad:
                    problems.append("token ids %r outside [0, %d)" % (bad[:5], vocab))
            for rate in re.findall(r"=\s*(\S+) tokens/s", r.out):
                try:
                    v = float(rate)
                    if not math.isfinite(v) or v <= 0:
                        problems.append("tokens/s %r" % rate)
                except ValueError:
                    problems.append("tokens/s %r" % rate)
        return problems
    return check


def check_train(steps, json_mode=True):
    def check(r):
        problems = []
        losses = []
        if json_mode:
            for line in r.out.splitlines():
                if line.strip():
                    try:
                        losses.append(json.loads(line)["loss"])
                    except (ValueError, KeyError, TypeError):
                        problems.append("not a step line: %r" % line[:80])
        else:
            losses = [float(x) for x in re.findall(r"step\s+\d+\s+loss (\S+)", r.out)]
            for rate in re.findall(r"=\s*(\S+) tokens/s", r.out):
                v = float(rate)
                if not math.isfinite(v) or v <= 0:
                    problems.append("tokens/s %r" % rate)
        if steps is not None and len(losses) != steps:
            problems.append("%d losses printed, %s steps asked" % (len(losses), steps))
        for v in losses:
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                problems.append("loss %r" % (v,))
        return problems
    return check


# ---------------------------------------------------------------- fixtures
def st_read(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def st_write(path, header, data, raw_header=None, length=None):
    hb = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    if raw_header is None:
        hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb) if length is None else length) + hb + data)


def tokens_file(path, rows, cols, value=lambda i: i % 64, dtype="I32", name="tokens", shape=None):
    fmt = {"I32": "<i", "I64": "<q", "F32": "<f", "I16": "<h", "U8": "<B"}[dtype]
    data = b"".join(struct.pack(fmt, value(i)) for i in range(rows * cols))
    st_write(path, {name: {"dtype": dtype, "shape": shape if shape is not None else [rows, cols],
                           "data_offsets": [0, len(data)]}}, data)


def model_dir(name, config=None, raw_config=None, weights=None):
    d = os.path.join(S, "models", name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "wb") as f:
        if raw_config is not None:
            f.write(raw_config)
        else:
            f.write(json.dumps(config if config is not None else BASE_CONFIG, indent=1).encode())
    w = os.path.join(d, "model.safetensors")
    if weights is None:
        shutil.copyfile(os.path.join(S, "base", "model.safetensors"), w)
    else:
        weights(w)
    return d


def patched_weights(fn):
    """Writes a copy of the base weights after fn(header, bytearray data) edits them."""
    def write(path):
        h, d = st_read(os.path.join(S, "base", "model.safetensors"))
        d = bytearray(d)
        out = fn(h, d)
        if out is not None:
            h, d = out
        st_write(path, h, bytes(d))
    return write


def fill(names, value_bytes, count=None):
    def fn(h, d):
        for n in names:
            s, e = h[n]["data_offsets"]
            k = 0
            for off in range(s, e, 4):
                if count is not None and k >= count:
                    break
                d[off:off + 4] = value_bytes
                k += 1
    return fn


BASE_CONFIG = None
NAN32 = struct.pack("<f", float("nan"))
INF32 = struct.pack("<f", float("inf"))


def make_fixtures():
    global BASE_CONFIG
    base = os.path.join(S, "base")
    os.makedirs(base, exist_ok=True)
    src = TINY
    if not os.path.exists(os.path.join(src, "model.safetensors")):
        src = os.path.join(S, "tl")
        subprocess.run([TINY_WRITER, src], env=base_env({"MESHLAYOUT_CPU_DEVICES": "1"}),
                       check=True)
    for f in ("config.json", "model.safetensors", "tokens.safetensors"):
        shutil.copyfile(os.path.join(src, f), os.path.join(base, f))
    with open(os.path.join(base, "config.json")) as f:
        BASE_CONFIG = json.load(f)
    os.makedirs(os.path.join(S, "models"), exist_ok=True)
    os.makedirs(os.path.join(S, "files"), exist_ok=True)
    os.makedirs(os.path.join(S, "saves"), exist_ok=True)
    # Odd paths.
    f = os.path.join(S, "files")
    os.makedirs(os.path.join(f, "a_directory"), exist_ok=True)
    if not os.path.exists(os.path.join(f, "fifo")):
        os.mkfifo(os.path.join(f, "fifo"))
    for link, target in [("dangling", "/nonexistent/target"), ("loop", "loop")]:
        p = os.path.join(f, link)
        if not os.path.lexists(p):
            os.symlink(target, p)
    unreadable = os.path.join(f, "unreadable.json")
    shutil.copyfile(EX_RULES, unreadable)
    os.chmod(unreadable, 0)
    with open(os.path.join(f, "empty"), "wb"):
        pass
    with open(os.path.join(f, "plain_file"), "w") as fh:
        fh.write("x")


def P(*parts):
    return os.path.join(S, *parts)


# ---------------------------------------------------------------- attack generators
def int_kw(opt, v):
    # A huge value must be named as given: a message quoting another number (CLI11 saturates
    # 18446744073709551616 to 9223372036854775807) is unclear.
    if v in HUGE_VALUES:
        return [v]
    return [opt, opt.strip("-").replace("-", "_"), v or "''"]


def gen_cli_numbers():
    A = []
    m = P("base")
    tok = P("base", "tokens.safetensors")
    gen = [BIN, "generate", "--model", m, "--prompt-ids", "1,2,3"]
    # CLI11 reads 0x10 as 16 (hex); "+2" and " 3" as numbers: legitimate.
    for v in ["0", "-1", I64MAX, U64P1, "1e309", "abc", "", "0x10"]:
        A.append(Attempt("generate --max-new-tokens %r" % v, gen + ["--max-new-tokens", v],
                         expect="any" if v in ("+2", "0x10") else "refuse",
                         kw=int_kw("--max-new-tokens", v), check=check_generate(None)))
    for v in ["", "-1", "64", "63", U64P1, "1,,2", "1,2,", ",".join(["1"] * 70), "2147483648"]:
        A.append(Attempt("generate --prompt-ids %r" % v[:40],
                         [BIN, "generate", "--model", m, "--max-new-tokens", "2", "--prompt-ids", v],
                         expect="run" if v == "63" else "refuse", kw=["prompt", v[:20] or "empty"],
                         check=check_generate(2)))
    # The position table exactly full (62 + 2 = 64 = max_position_embeddings): valid.
    A.append(Attempt("generate prompt + new tokens == max_position_embeddings",
                     [BIN, "generate", "--model", m, "--max-new-tokens", "2", "--prompt-ids",
                      ",".join(["5"] * 62), "--json"], expect="run",
                     check=check_generate(2, json_mode=True)))
    tr = [BIN, "train", "--model", m, "--data", tok, "--json"]
    for opt, other in [("--batch-size", ["--steps", "2"]), ("--steps", ["--batch-size", "2"])]:
        for v in ["0", "-1", I64MAX, U64P1, "abc", ""]:
            A.append(Attempt("train %s %r" % (opt, v), tr + other + [opt, v],
                             expect="any" if v == "0x10" else "refuse", kw=int_kw(opt, v),
                             check=check_train(None)))
    for opt in ["--learning-rate", "--weight-decay"]:
        for v in ["-1", "1e309", "nan", ""]:
            finite_ok = v in ("0", "-1", "1e38")
            A.append(Attempt("train %s %r" % (opt, v),
                             tr + ["--batch-size", "2", "--steps", "2", opt, v],
                             expect="any" if finite_ok else "refuse",
                             kw=[opt, opt.strip("-").replace("-", "_"), v or "''"],
                             check=check_train(None)))
    rs = [BIN, "reshard", "--shape", "16,16", "--mesh", "data=2,model=4", "--from", "data,None",
          "--to", "None,model"]
    for v in [I64MAX, U64P1, "abc", ""]:
        A.append(Attempt("reshard --seed %r" % v, rs + ["--seed", v],
                         expect="run" if v in ("0", I64MAX) else "refuse", kw=["--seed", v or "''"]))
    for v in ["0", I64MAX, U64P1, "abc", ""]:
        A.append(Attempt("reshard --repeat %r" % v, rs + ["--repeat", v],
                         kw=int_kw("--repeat", v), timeout=30))
    lay = [BIN, "layout", "--mesh", "data=2,model=4", "--layout", "data,None", "--shape", "8,6"]
    for v in ["-1", I64MAX, U64P1, ""]:
        A.append(Attempt("layout --max-devices %r" % v, lay + ["--max-devices", v],
                         expect="run" if v in ("0", I64MAX) else "refuse",
                         kw=int_kw("--max-devices", v)))
    pl = [BIN, "plan", P("base", "model.safetensors"), "--rules", MEGATRON, "--mesh",
          "batch=2,model=4"]
    for v in ["0", "-1", U64P1, "abc", "", "16MiB", "-1KiB", "1.5GiB"]:
        A.append(Attempt("plan --replicated-warn-bytes %r" % v, pl + ["--replicated-warn-bytes", v],
                         expect="run" if v in ("0", "16MiB") else "refuse",
                         kw=["replicated-warn-bytes", v or "''"]))
    return A


MESHES_BAD = ["", "data", "=2", "data=0", "data=2,data=4", "data=2,,model=4", "data=" + I64MAX,
              "data=" + U64P1, "mesh[data=2", "da ta=2", "data=3"]
LAYOUTS_BAD = ["", "(data,model", "bogus,None", "((data)),None", "(),None", "data,,"]
SHAPES_BAD = ["", "8,6,", "-1,6", "0,6", I64MAX + "," + I64MAX, U64P1 + ",1"]


def gen_cli_strings():
    A = []
    for v in MESHES_BAD:
        ok = v in ("data=3",)  # 3 devices of 8: a sub-mesh
        A.append(Attempt("layout --mesh %r" % v[:40],
                         [BIN, "layout", "--mesh", v, "--layout", "data", "--shape", "8"],
                         expect="any" if ok else "refuse", kw=["mesh", v[:20] or "''"]))
    for v in LAYOUTS_BAD:
        A.append(Attempt("layout --layout %r" % v,
                         [BIN, "layout", "--mesh", "data=2,model=4", "--layout", v, "--shape", "8,6"],
                         kw=["layout", v or "''"]))
    for v in SHAPES_BAD:
        # "8,6," is Python's tuple (8, 6,): parse_shape accepts one trailing comma on purpose.
        ok = v in ("0,6", "8, 6", "8,6,")
        A.append(Attempt("layout --shape %r" % v[:40],
                         [BIN, "layout", "--mesh", "data=2,model=4", "--layout", "data,None",
                          "--shape", v], expect="any" if ok else "refuse", kw=["shape", v[:15] or "''"]))
    for v in ["4096,4096,4096", I64MAX + ",1", "2147483648,2", "1,0"]:
        A.append(Attempt("reshard --shape %r" % v,
                         [BIN, "reshard", "--shape", v, "--mesh", "data=2,model=4", "--from",
                          "data,None", "--to", "None,model"],
                         expect="any" if v == "1,0" else "refuse",
                         kw=["shape", "memory", "bytes", v[:12]], timeout=60))
    for v in ["bf16", "complex64", "", "bool", "F64 ", "f8_e4m3"]:
        ok = v in ("F32", "bf16", "bool", "u8", "i64")
        A.append(Attempt("reshard --dtype %r" % v,
                         [BIN, "reshard", "--shape", "8,8", "--mesh", "data=2,model=4", "--from",
                          "data,None", "--to", "None,model", "--dtype", v],
                         expect="run" if ok else "refuse", kw=["dtype", v.strip() or "''"]))
    for v in ["regex", "", "SEARCH", "first"]:
        A.append(Attempt("match --mode %r" % v, [BIN, "match", "--rules", EX_RULES, "--mode", v],
                         stdin=b"dense/kernel\n", expect="run" if v == "first" else "refuse",
                         kw=["mode", v or "''"]))
    m = P("base")
    tok = P("base", "tokens.safetensors")
    for v in ["sgd", "Adam", "lion", "nadam", ""]:
        A.append(Attempt("train --optimizer %r" % v,
                         [BIN, "train", "--model", m, "--data", tok, "--batch-size", "2", "--steps",
                          "2", "--json", "--optimizer", v],
                         expect="run" if v in ("sgd", "lion") else "any" if v == "Adam" else "refuse",
                         kw=["optimizer", v.strip() or "''"], check=check_train(2)))
    for v in ["nadam", ""]:
        A.append(Attempt("plan --optimizer %r" % v,
                         [BIN, "plan", P("base", "model.safetensors"), "--rules", MEGATRON, "--mesh",
                          "batch=2,model=4", "--optimizer", v], kw=["optimizer", v or "''"]))
    for v in ["bogus", "", "model"]:
        A.append(Attempt("plan --shard-slots-over %r" % v,
                         [BIN, "plan", P("base", "model.safetensors"), "--rules", MEGATRON, "--mesh",
                          "batch=2,model=4", "--optimizer", "adam", "--shard-slots-over", v],
                         expect="run" if v == "model" else "refuse",
                         kw=["shard-slots-over", "axis", v or "''"]))
    A.append(Attempt("plan --shard-slots-over without --optimizer",
                     [BIN, "plan", P("base", "model.safetensors"), "--rules", MEGATRON, "--mesh",
                      "batch=2,model=4", "--shard-slots-over", "batch"],
                     expect="any", kw=["optimizer"]))
    A.append(Attempt("plan --zero1 and --shard-slots-over together",
                     [BIN, "plan", P("base", "model.safetensors"), "--rules", MEGATRON, "--mesh",
                      "batch=2,model=4", "--optimizer", "adam", "--zero1", "--shard-slots-over",
                      "model"], expect="any", kw=["zero1", "shard-slots-over"]))
    for v in ["batch=2,model=4", "model=4", "batch=3,model=1", "x=8", "batch=1,model=9"]:
        A.append(Attempt("generate --mesh %r with megatron rules" % v,
                         [BIN, "generate", "--model", m, "--prompt-ids", "1,2", "--max-new-tokens", "2",
                          "--rules", MEGATRON, "--mesh", v, "--json"],
                         expect="run" if v in ("batch=2,model=4", "batch=3,model=1") else "any",
                         kw=["mesh", "axis", "model", v], check=check_generate(2, json_mode=True)))
    # Unknown and repeated options, per command.
    cmds = {
        "demo": [BIN, "demo", "--no-progress"],
        "match": [BIN, "match", "--rules", EX_RULES],
        "layout": [BIN, "layout", "--mesh", "data=2,model=4", "--layout", "data,None", "--shape", "8,6"],
        "reshard": [BIN, "reshard", "--shape", "8,8", "--mesh", "data=2,model=4", "--from",
                    "data,None", "--to", "None,model"],
        "inspect": [BIN, "inspect", P("base", "model.safetensors")],
        "plan": [BIN, "plan", P("base", "model.safetensors"), "--rules", MEGATRON, "--mesh",
                 "batch=2,model=4"],
        "generate": [BIN, "generate", "--model", m, "--prompt-ids", "1", "--max-new-tokens", "1"],
        "train": [BIN, "train", "--model", m, "--data", tok, "--batch-size", "2", "--steps", "1"],
    }
    repeats = {"match": ["--rules", EX_RULES], "layout": ["--mesh", "data=8"],
               "reshard": ["--to", "model,None"], "inspect": ["--json", "--json"],
               "plan": ["--mesh", "batch=1,model=8"], "generate": ["--prompt-ids", "2"],
               "train": ["--steps", "2"], "demo": ["--keep", P("files", "a"), "--keep", P("files", "b")]}
    for c, base in cmds.items():
        A.append(Attempt("%s unknown option --bogus" % c, base + ["--bogus"], stdin=b"",
                         kw=["bogus"]))
        if c in ("inspect", "plan"):
            A.append(Attempt("%s extra positional" % c, base + ["extra_positional"], stdin=b"",
                             kw=["extra_positional"]))
        if c in ("demo", "inspect", "generate", "train", "reshard"):
          A.append(Attempt("%s repeated option %s" % (c, repeats[c][0]), base + repeats[c], stdin=b"",
                         expect="any" if c == "inspect" else "refuse",  # a repeated flag is harmless
                         kw=[repeats[c][0]]))
    A.append(Attempt("no subcommand", [BIN], kw=["subcommand", "usage", "help"]))
    A.append(Attempt("unknown subcommand", [BIN, "frobnicate"], kw=["frobnicate"]))
    A.append(Attempt("typo option generate --max-new-token", [BIN, "generate", "--model", m,
                     "--prompt-ids", "1", "--max-new-token", "1"], kw=["max-new-token"]))
    return A


def gen_env():
    A = []
    rs = [BIN, "reshard", "--shape", "8,8", "--mesh", "data=2,model=2", "--from", "data,None",
          "--to", "None,model"]
    gen = [BIN, "generate", "--model", P("base"), "--prompt-ids", "1,2", "--max-new-tokens", "2",
           "--json"]
    for var, vals, ok in [
            ("MESHLAYOUT_CPU_DEVICES", ["0", "abc", "", U64P1], []),
            ("MESHLAYOUT_THREADS", ["0", I64MAX], []),
            ("MESHLAYOUT_DEVICE_MEMORY", ["abc", "-1", "0", "16B", "2GiB"], ["2GiB"]),
            ("MESHLAYOUT_COLLECTIVE_TIMEOUT", ["abc", "-1"], [])]:
        for v in vals:
            expect = "run" if v in ok else "refuse"
            if v == "" or var == "MESHLAYOUT_COLLECTIVE_TIMEOUT":
                expect = "any"  # empty = unset; the timeout is only read under mpirun
            A.append(Attempt("env %s=%r reshard" % (var, v), rs, env={var: v}, expect=expect,
                             kw=[var, "memory"] if "MEMORY" in var else [var]))
    # The largest mesh the README allows (2^20 devices) with a tiny tensor: an 8x8 reshard took
    # 1.5 s on 2^16 devices, 18 s on 2^18, over 200 s on 2^20 (quadratic in the device count).
    A.append(Attempt("env MESHLAYOUT_CPU_DEVICES=1048576 reshard 8x8 on data=1024,model=1024",
                     [BIN, "reshard", "--shape", "8,8", "--mesh", "data=1024,model=1024", "--from",
                      "data,None", "--to", "None,model", "--repeat", "1"],
                     env={"MESHLAYOUT_CPU_DEVICES": "1048576"}, expect="any", timeout=45))
    A.append(Attempt("env MESHLAYOUT_DEVICE_MEMORY=1KiB generate", gen,
                     env={"MESHLAYOUT_DEVICE_MEMORY": "1KiB"}, kw=["MESHLAYOUT_DEVICE_MEMORY", "memory", "budget"]))
    return A


def gen_configs():
    A = []
    base = BASE_CONFIG
    tok = P("base", "tokens.safetensors")

    def gen_cmd(d):
        return [BIN, "generate", "--model", d, "--prompt-ids", "1,2,3", "--max-new-tokens", "3",
                "--json"]

    def train_cmd(d):
        return [BIN, "train", "--model", d, "--data", tok, "--batch-size", "2", "--steps", "2",
                "--json"]
    fields = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
              "rms_norm_eps", "rope_theta"]
    for fld in ["vocab_size", "num_key_value_heads", "head_dim"]:
        c = dict(base)
        del c[fld]
        d = model_dir("missing_" + fld, c)
        # HF has defaults for some fields (head_dim = hidden/heads, num_key_value_heads = heads,
        # rms_norm_eps, rope_theta, max_position_embeddings): missing those may run, but only
        # if the weights still fit.
        A.append(Attempt("config missing %s: generate" % fld, gen_cmd(d), expect="any",
                         kw=[fld, "config.json"], check=check_generate(3, json_mode=True)))
    values = {f: [-1] for f in fields}
    for f in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers"):
        values[f] += [1000000000, 2 ** 40]
    for f in ("num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps"):
        values[f] += [0]
    for f in ("num_hidden_layers", "rope_theta", "head_dim"):
        values[f] += ["16"]
    values["max_position_embeddings"] += [1.5, True]
    values["rope_theta"] += [None]
    values["max_position_embeddings"] += [2 ** 40]
    for fld in fields:
        for v in values[fld]:
            c = dict(base)
            c[fld] = v
            d = model_dir("bad_%s_%s" % (fld, json.dumps(v).replace('"', "q")), c)
            # null reads as "not given" (Hugging Face's default), a larger position table is fine
            ok = v is None or (fld == "max_position_embeddings" and v == 2 ** 40)
            A.append(Attempt("config %s=%s: generate" % (fld, json.dumps(v)), gen_cmd(d),
                             expect="any" if ok else "refuse",
                             kw=[fld], check=check_generate(3, json_mode=True)))
    specials = [
        ("hidden 18 not divisible by 4 heads (no head_dim)",
         dict({k: v for k, v in base.items() if k != "head_dim"}, hidden_size=18), ["hidden_size", "head"]),
        ("kv heads 3 do not divide 4 heads", dict(base, num_key_value_heads=3), ["num_key_value_heads", "3"]),
        ("hidden_act gelu", dict(base, hidden_act="gelu"), ["hidden_act", "gelu"]),
        ("model_type gpt2", dict(base, model_type="gpt2"), ["model_type", "gpt2"]),
        ("rope_scaling linear", dict(base, rope_scaling={"type": "linear", "factor": 2.0}), ["rope_scaling"]),
        ("attention_bias true", dict(base, attention_bias=True), ["attention_bias", "bias"]),
        ("mlp_bias true", dict(base, mlp_bias=True), ["mlp_bias", "bias"]),
        ("tie_word_embeddings 'yes'", dict(base, tie_word_embeddings="yes"), ["tie_word_embeddings"]),
        ("torch_dtype float8", dict(base, torch_dtype="float8_e4m3fn"), ["torch_dtype", "float8"]),
        ("rms_norm_eps -1e-5", dict(base, rms_norm_eps=-1e-5), ["rms_norm_eps"]),
        ("max_position_embeddings 2 (< prompt)", dict(base, max_position_embeddings=2), ["max_position_embeddings"]),
    ]
    for name, c, kw in specials:
        d = model_dir("sp_" + re.sub(r"\W+", "_", name), c)
        A.append(Attempt("config %s: generate" % name, gen_cmd(d),
                         expect="any" if name.startswith(("rope_scaling", "torch_dtype")) else "refuse",
                         kw=kw, check=check_generate(3, json_mode=True)))
    for name, c, kw in specials[:1] + specials[9:10]:
        d = model_dir("sp_" + re.sub(r"\W+", "_", name), c)
        A.append(Attempt("config %s: train" % name, train_cmd(d), kw=kw, check=check_train(2)))
    raws = [
        ("empty file", b"", ["config.json"]),
        ("not JSON", b"{vocab_size: 64", ["config.json"]),
        ("top-level array", b"[1,2,3]", ["config.json", "object"]),
        ("NaN literal", json.dumps(base).replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": NaN').encode(), ["config.json", "NaN", "rms_norm_eps"]),
        ("Infinity literal", json.dumps(base).replace('"rope_theta": 10000.0', '"rope_theta": Infinity').encode(), ["config.json", "Infinity", "rope_theta"]),
        ("1e400 literal", json.dumps(base).replace('"rope_theta": 10000.0', '"rope_theta": 1e400').encode(), ["config.json", "rope_theta", "1e400"]),
        ("invalid UTF-8", json.dumps(base).replace('"llama"', '"ll\udcffama"', 1).encode("utf-8", "surrogateescape"), ["config.json", "UTF-8", "utf"]),
        ("invalid UTF-8 in key", b'{"\xff\xfe": 1, ' + json.dumps(base)[1:].encode(), ["config.json", "UTF-8", "utf"]),
        ("deep nesting 100000", b'{"x": ' + b"[" * 100000 + b"]" * 100000 + b", " + json.dumps(base)[1:].encode(), ["config.json", "depth", "nest"]),
        ("10 MB whitespace", b" " * 10_000_000 + json.dumps(base).encode(), ["config.json"]),
        ("vocab_size 2^64 literal", json.dumps(base).replace('"vocab_size": 64', '"vocab_size": 18446744073709551616').encode(), ["vocab_size", "18446744073709551616"]),
        ("duplicate key vocab_size", json.dumps(base).replace('"vocab_size": 64', '"vocab_size": 64, "vocab_size": 32').encode(), ["vocab_size", "duplicate", "config.json"]),
        ("trailing garbage", json.dumps(base).encode() + b" }}garbage", ["config.json"]),
        ("NUL inside", json.dumps(base).encode()[:20] + b"\x00" + json.dumps(base).encode()[20:], ["config.json"]),
    ]
    for name, raw, kw in raws:
        d = model_dir("raw_" + re.sub(r"\W+", "_", name), raw_config=raw)
        valid = name in ("10 MB whitespace",)
        A.append(Attempt("config.json %s: generate" % name, gen_cmd(d),
                         expect="any" if valid else "refuse", kw=kw,
                         check=check_generate(3, json_mode=True)))
        if name in ("NaN literal", "duplicate key vocab_size"):
            A.append(Attempt("config.json %s: train" % name, train_cmd(d),
                             expect="any" if valid else "refuse", kw=kw, check=check_train(2)))
    # Tied embeddings vs weights.
    d = model_dir("tie_true_untied_weights", dict(base, tie_word_embeddings=True))
    A.append(Attempt("tie_word_embeddings true but lm_head.weight present: generate", gen_cmd(d),
                     expect="any", kw=["lm_head", "tie_word_embeddings", "unexpected"],
                     check=check_generate(3, json_mode=True)))

    def drop_lm_head(h, d):
        s, e = h["lm_head.weight"]["data_offsets"]
        del h["lm_head.weight"]
        for k, v in h.items():
            if k != "__metadata__":
                a, b = v["data_offsets"]
                if a >= e:
                    v["data_offsets"] = [a - (e - s), b - (e - s)]
        return h, bytes(d[:s] + d[e:])
    d = model_dir("tie_false_no_lm_head", weights=patched_weights(drop_lm_head))
    A.append(Attempt("tie_word_embeddings false and no lm_head.weight: generate", gen_cmd(d),
                     kw=["lm_head", "missing"]))
    A.append(Attempt("tie_word_embeddings false and no lm_head.weight: train", train_cmd(d),
                     kw=["lm_head", "missing"]))
    d = model_dir("tie_true_no_lm_head", dict(base, tie_word_embeddings=True),
                  weights=patched_weights(drop_lm_head))
    A.append(Attempt("tie_word_embeddings true and no lm_head.weight (valid): generate",
                     gen_cmd(d), expect="run", check=check_generate(3, json_mode=True)))
    return A


def gen_weights():
    A = []
    base_h, base_d = st_read(P("base", "model.safetensors"))
    names = [k for k in base_h if k != "__metadata__"]

    def gen_cmd(d, extra=()):
        return [BIN, "generate", "--model", d, "--prompt-ids", "1,2,3", "--max-new-tokens", "3",
                "--json"] + list(extra)
    tok = P("base", "tokens.safetensors")
    nanfix = [
        ("all weights NaN", fill(names, NAN32)),
        ("embed_tokens NaN", fill(["model.embed_tokens.weight"], NAN32)),
        ("one NaN in layers.1 q_proj", fill(["model.layers.1.self_attn.q_proj.weight"], NAN32, 1)),
        ("lm_head +Inf", fill(["lm_head.weight"], INF32)),
        ("final norm NaN", fill(["model.norm.weight"], NAN32)),
        ("one Inf in layers.0 down_proj", fill(["model.layers.0.mlp.down_proj.weight"], INF32, 1)),
        # Finite weights whose activations overflow: train refuses the non-finite logits;
        # generate must not print tokens from them with exit 0.
        ("huge weights 3e38", fill(["model.layers.0.mlp.up_proj.weight"], struct.pack("<f", 3e38))),
        ("huge input_layernorm 3e38", fill(["model.layers.0.input_layernorm.weight"], struct.pack("<f", 3e38))),
    ]
    for name, fn in nanfix:
        d = model_dir("w_" + re.sub(r"\W+", "_", name), weights=patched_weights(fn))
        for extra in ([], ["--rules", MEGATRON, "--mesh", "batch=2,model=4"]):
            if extra and name not in ("all weights NaN", "huge input_layernorm 3e38"):
                continue
            A.append(Attempt("weights %s: generate%s" % (name, " (megatron)" if extra else ""),
                             gen_cmd(d, extra), kw=["nan", "inf", "finite", "logits"],
                             check=check_generate(3, json_mode=True)))
        if name in ("all weights NaN", "huge input_layernorm 3e38"):
            A.append(Attempt("weights %s: generate text output" % name,
                             gen_cmd(d)[:-1], kw=["nan", "inf", "finite", "logits"],
                             check=check_generate(3)))
        A.append(Attempt("weights %s: train" % name,
                         [BIN, "train", "--model", d, "--data", tok, "--batch-size", "2",
                          "--steps", "2", "--json"], kw=["nan", "inf", "finite", "logits"],
                         check=check_train(2)))
    # Corrupted safetensors files: generate, inspect and plan read them.
    raw_all = open(P("base", "model.safetensors"), "rb").read()
    hlen = struct.unpack("<Q", raw_all[:8])[0]
    hjson = raw_all[8:8 + hlen]

    def raw(data):
        def w(path):
            with open(path, "wb") as f:
                f.write(data)
        return w

    def edit(fn):
        def w(path):
            h = json.loads(hjson)
            out = fn(h)
            st_write(path, h if out is None else out, base_d)
        return w
    first = names[0]
    corrupt = [
        ("empty file", raw(b"")),
        ("truncated mid-header", raw(raw_all[:8 + hlen // 2])),
        ("truncated mid-data", raw(raw_all[:len(raw_all) - 100])),
        ("truncated by 1 byte", raw(raw_all[:-1])),
        ("1 trailing byte", raw(raw_all + b"\0")),
        ("header length 2^63-1", raw(struct.pack("<Q", 2 ** 63 - 1) + raw_all[8:])),
        ("header length 2^64-1", raw(b"\xff" * 8 + raw_all[8:])),
        ("header length > file", raw(struct.pack("<Q", len(raw_all)) + raw_all[8:])),
        ("header length 100MB+1", raw(struct.pack("<Q", 100_000_001) + raw_all[8:])),
        ("header not JSON", raw(struct.pack("<Q", 16) + b"{not json}      " + base_d)),
        ("header invalid UTF-8", raw(struct.pack("<Q", hlen) + hjson.replace(b'"format"', b'"f\xffrmat"') + base_d)),
        ("header is a JSON array", raw(struct.pack("<Q", 8) + b"[1,2,3] " + base_d)),
        ("offsets past the end", edit(lambda h: h[first].update(data_offsets=[0, 10 ** 9]))),
        ("negative offsets", edit(lambda h: h[first].update(data_offsets=[-4096, 0]))),
        ("offsets 2^64", edit(lambda h: h[first].update(data_offsets=[0, 2 ** 64]))),
        ("shape does not match bytes", edit(lambda h: h[first].update(shape=[64, 17]))),
        ("negative shape", edit(lambda h: h[first].update(shape=[-64, -16]))),
        ("huge shape overflowing int64", edit(lambda h: h[first].update(shape=[2 ** 62, 2 ** 62, 0, 8]))),
        ("unknown dtype", edit(lambda h: h[first].update(dtype="F31"))),
        ("dtype F64 (byte size mismatch)", edit(lambda h: h[first].update(dtype="F64"))),
        ("overlapping tensors", edit(lambda h: h[names[1]].update(data_offsets=[0, 4096]))),
        ("NUL in tensor name", edit(lambda h: h.update({"lm_head\u0000.weight": h.pop(first)}))),
    ]
    for name, w in corrupt:
        d = model_dir("st_" + re.sub(r"\W+", "_", name), weights=w)
        f = os.path.join(d, "model.safetensors")
        if name in ("empty file", "header length 2^64-1", "offsets past the end",
                    "huge shape overflowing int64", "1 trailing byte"):
            A.append(Attempt("safetensors %s: inspect" % name, [BIN, "inspect", f],
                             kw=["model.safetensors", "header", "offset", "tensor"]))
        A.append(Attempt("safetensors %s: generate" % name, gen_cmd(d),
                         kw=["model.safetensors", "header", "offset", "tensor"],
                         check=check_generate(3, json_mode=True)))
        if name in ("offsets past the end", "huge shape overflowing int64", "overlapping tensors"):
            A.append(Attempt("safetensors %s: plan" % name,
                             [BIN, "plan", f, "--rules", MEGATRON, "--mesh", "batch=2,model=4"],
                             kw=["model.safetensors", "header", "offset", "tensor"]))
    # Duplicate tensor names need a hand-written header (json.dumps cannot repeat a key).
    dup = hjson.decode().rstrip()
    dup = dup[:-1] + ',"%s":%s}' % (first, json.dumps(json.loads(hjson)[first]))
    dup_b = dup.encode()
    dup_b += b" " * (-len(dup_b) % 8)
    d = model_dir("st_duplicate_names", weights=raw(struct.pack("<Q", len(dup_b)) + dup_b + base_d))
    A.append(Attempt("safetensors duplicate tensor name: inspect",
                     [BIN, "inspect", os.path.join(d, "model.safetensors")], kw=["duplicate", first]))
    A.append(Attempt("safetensors duplicate tensor name: generate", gen_cmd(d), kw=["duplicate", first]))
    # Data (token) files.
    tf = P("files")
    toks = [
        ("id 64 = vocab", dict(value=lambda i: 64 if i == 5 else 3), ["64", "vocab"]),
        ("id -1", dict(value=lambda i: -1 if i == 5 else 3), ["-1", "vocab"]),
        ("dtype I64", dict(dtype="I64"), ["I64", "I32", "dtype"]),
        ("dtype F32", dict(dtype="F32", value=lambda i: 1.0), ["F32", "I32", "dtype"]),
        ("rank 1", dict(shape=[576]), ["rank", "shape", "2"]),
        ("one column (seq 0)", dict(shape=[576, 1]), ["seq", "column", "shape", "1"]),
        ("name tok not tokens", dict(name="tok"), ["tokens"]),
        ("seq 80 > max_position_embeddings 64", dict(shape=[16, 81]), ["max_position_embeddings", "64", "81", "80"]),
    ]
    for name, kws, kw in toks:
        p = os.path.join(tf, "tok_" + re.sub(r"\W+", "_", name) + ".safetensors")
        shape = kws.pop("shape", None)
        rows, cols = (64, 9) if shape is None else (math.prod(shape), 1)
        tokens_file(p, rows, cols, shape=shape, **kws)
        A.append(Attempt("train data %s" % name,
                         [BIN, "train", "--model", P("base"), "--data", p, "--batch-size", "8",
                          "--steps", "2", "--json"], kw=kw + [os.path.basename(p)],
                         check=check_train(2)))
    p2 = os.path.join(tf, "tok_two_tensors.safetensors")
    data = b"".join(struct.pack("<i", i % 64) for i in range(64 * 9))
    st_write(p2, {"tokens": {"dtype": "I32", "shape": [64, 9], "data_offsets": [0, len(data)]},
                  "extra": {"dtype": "I32", "shape": [64, 9], "data_offsets": [len(data), 2 * len(data)]}},
             data + data)
    A.append(Attempt("train data with a second tensor", [BIN, "train", "--model", P("base"),
                     "--data", p2, "--batch-size", "8", "--steps", "2", "--json"],
                     expect="any", kw=["extra", "tokens"], check=check_train(2)))
    p3 = os.path.join(tf, "tok_zero_rows.safetensors")
    st_write(p3, {"tokens": {"dtype": "I32", "shape": [0, 9], "data_offsets": [0, 0]}}, b"")
    A.append(Attempt("train data with 0 rows", [BIN, "train", "--model", P("base"), "--data", p3,
                     "--batch-size", "1", "--steps", "1"], kw=["rows", "0"]))
    return A


def gen_index():
    """Sharded checkpoints: model.safetensors.index.json pointing at odd places."""
    A = []
    base_h, base_d = st_read(P("base", "model.safetensors"))
    names = [k for k in base_h if k != "__metadata__"]
    cases = [("path traversal", {"lm_head.weight": "../../../etc/passwd"}, ["../../../etc/passwd"]),
             ("absolute /dev/zero", {"lm_head.weight": "/dev/zero"}, ["/dev/zero"]),
             ("points at itself", {"lm_head.weight": "model.safetensors.index.json"}, ["index.json"]),
             ("missing shard file", {"lm_head.weight": "nope.safetensors"}, ["nope.safetensors"]),
             ("shard is a directory", {"lm_head.weight": "sub"}, ["sub"]),
             ("shard lacks the tensor", {n: "a.safetensors" for n in names}, ["lm_head.weight", "a.safetensors"]),
             ("file name a number", {"lm_head.weight": 5}, ["lm_head.weight"]),
             ("empty weight_map", {}, ["0", "tensors", "layer"])]
    for name, wm, kw in cases:
        d = os.path.join(S, "models", "idx_" + re.sub(r"\W+", "_", name))
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(os.path.join(d, "sub"))
        shutil.copyfile(P("base", "config.json"), os.path.join(d, "config.json"))
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": wm}, f)
        if name == "shard lacks the tensor":
            patched_weights(lambda h, dd: _drop_tensor(h, dd, "lm_head.weight"))(os.path.join(d, "a.safetensors"))
        A.append(Attempt("index.json %s: generate" % name,
                         [BIN, "generate", "--model", d, "--prompt-ids", "1", "--max-new-tokens", "1"],
                         kw=kw, timeout=15))
        if name in ("path traversal", "shard lacks the tensor"):
            A.append(Attempt("index.json %s: inspect" % name, [BIN, "inspect", d], kw=kw, timeout=15))
    return A


def _drop_tensor(h, d, name):
    s, e = h[name]["data_offsets"]
    del h[name]
    for k, v in h.items():
        if k != "__metadata__" and v["data_offsets"][0] >= e:
            v["data_offsets"] = [v["data_offsets"][0] - (e - s), v["data_offsets"][1] - (e - s)]
    return h, bytes(d[:s] + d[e:])


def gen_rules():
    A = []
    rd = os.path.join(S, "rules")
    os.makedirs(rd, exist_ok=True)
    cases = [
        ("bad regex", {"rules": [["dense(", [None, "model"]]]}, ["dense("]),
        ("backreference", {"rules": [["(a)\\1", [None]]]}, ["\\1", "back"]),
        ("rules not a list", {"rules": {"dense": [None]}}, ["rules"]),
        ("rule not a pair", {"rules": [["dense"]]}, ["rule", "dense"]),
        ("pattern a number", {"rules": [[1, [None]]]}, ["rule", "pattern", "string"]),
        ("layout a number", {"rules": [["dense", 3]]}, ["dense", "layout"]),
        ("layout nested 3 deep", {"rules": [["dense", [[["model"]]]]]}, ["dense", "layout"]),
        ("axis not in mesh", {"mesh": {"shape": [2, 4], "axis_names": ["data", "model"]}, "rules": [["dense", ["bogus"]]]}, ["bogus"]),
        ("axis used twice", {"mesh": {"shape": [2, 4], "axis_names": ["data", "model"]}, "rules": [["dense", ["data", "data"]]]}, ["data", "twice"]),
        ("mesh 2^40 devices", {"mesh": {"shape": [2 ** 20, 2 ** 20], "axis_names": ["data", "model"]}, "rules": []}, ["mesh", "1048576", "devices"]),
        ("mesh duplicate axis names", {"mesh": {"shape": [2, 4], "axis_names": ["data", "data"]}, "rules": []}, ["data", "axis"]),
        ("mode bogus", {"mode": "regex", "rules": []}, ["mode", "regex"]),
        ("duplicate patterns", {"rules": [["dense", [None]], ["dense", ["model"]]]}, ["dense", "duplicate", "already"]),
        ("top-level array", [["dense", [None]]], ["rules", "object"]),
        ("huge repetition", {"rules": [["a{100000}", [None]]]}, ["a{100000}", "repetition", "large"]),
    ]
    for name, obj, kw in cases:
        p = os.path.join(rd, re.sub(r"\W+", "_", name) + ".json")
        with open(p, "w") as f:
            json.dump(obj, f)
        valid = name in ("empty pattern", "unknown top-level key", "pattern with NUL")
        A.append(Attempt("rules %s: match" % name, [BIN, "match", "--rules", p],
                         stdin=b"my/dense/kernel\naaa\n", expect="any" if valid else "refuse",
                         kw=kw + [os.path.basename(p)]))
    raws = [("not JSON", b"{rules: ["), ("empty", b""), ("invalid UTF-8", b'{"rules": [["d\xffense", [null]]]}'),
            ("deep nesting", b'{"rules": ' + b"[" * 200000 + b"]" * 200000 + b"}"),
            ("NaN in mesh shape", b'{"mesh": {"shape": [NaN, 4], "axis_names": ["data", "model"]}, "rules": []}')]
    for name, b in raws:
        p = os.path.join(rd, re.sub(r"\W+", "_", name) + ".json")
        with open(p, "wb") as f:
            f.write(b)
        A.append(Attempt("rules file %s: match" % name, [BIN, "match", "--rules", p], stdin=b"x\n",
                         kw=[os.path.basename(p)]))
    # Rules valid as JSON but wrong for a Llama: rank mismatch, axis not in the mesh given.
    p = os.path.join(rd, "rank_mismatch.json")
    with open(p, "w") as f:
        json.dump({"rules": [["query.kernel", [None, "model"]]]}, f)
    for cmd in ("generate", "train"):
        base = [BIN, cmd, "--model", P("base"), "--rules", p, "--mesh", "batch=2,model=4"]
        rest = (["--prompt-ids", "1", "--max-new-tokens", "1"] if cmd == "generate" else
                ["--data", P("base", "tokens.safetensors"), "--batch-size", "2", "--steps", "1"])
        A.append(Attempt("rules rank mismatch: %s" % cmd, base + rest, kw=["query", "rank", "dimension"]))
        A.append(Attempt("rules axis not in --mesh: %s" % cmd,
                         [BIN, cmd, "--model", P("base"), "--rules", MEGATRON, "--mesh",
                          "batch=2,tensor=4"] + rest, kw=["model", "axis"]))
    # Ambiguous rules: two patterns match one Llama variable.
    p = os.path.join(rd, "ambiguous.json")
    with open(p, "w") as f:
        json.dump({"rules": [["kernel", [None, None]], ["query", [None, None, None]]]}, f)
    A.append(Attempt("rules ambiguous: generate",
                     [BIN, "generate", "--model", P("base"), "--rules", p, "--prompt-ids", "1",
                      "--max-new-tokens", "1"], kw=["multiple", "ambiguous", "query"]))
    return A


def gen_paths():
    A = []
    f = P("files")
    odd = [("directory", os.path.join(f, "a_directory"), ["a_directory", "directory"]),
           ("FIFO", os.path.join(f, "fifo"), ["fifo"]),
           ("/dev/zero", "/dev/zero", ["/dev/zero"]),
           ("/dev/null", "/dev/null", ["/dev/null"]),
           ("dangling symlink", os.path.join(f, "dangling"), ["dangling"]),
           ("symlink loop", os.path.join(f, "loop"), ["loop"]),
           ("nonexistent", os.path.join(f, "does_not_exist"), ["does_not_exist"]),
           ("empty path", "", ["''", "empty", "path", "required"]),
           ("empty file", os.path.join(f, "empty"), ["empty"])]
    for name, path, kw in odd:
        A.append(Attempt("match --rules %s" % name, [BIN, "match", "--rules", path], stdin=b"x\n",
                         kw=kw, timeout=15))
        A.append(Attempt("inspect %s" % name, [BIN, "inspect", path], kw=kw, timeout=15))
        if name in ("/dev/null", "symlink loop", "empty path", "empty file"):
            continue
        # --data names a token file: a message about model.safetensors would mislead.
        dkw = ["training data", "--data"] if name == "directory" else kw
        A.append(Attempt("train --data %s" % name,
                         [BIN, "train", "--model", P("base"), "--data", path, "--batch-size", "2",
                          "--steps", "1"], kw=dkw, timeout=15))
        A.append(Attempt("generate --model %s" % name,
                         [BIN, "generate", "--model", path, "--prompt-ids", "1", "--max-new-tokens", "1"],
                         kw=kw, timeout=15))
    # A model directory whose config.json / model.safetensors is odd.
    for name, target in [("config.json is a FIFO", "fifo"), ("config.json is a directory", "dir"),
                         ("config.json -> /dev/zero", "/dev/zero"),
                         ("config.json dangling symlink", "dangling")]:
        d = os.path.join(S, "models", "odd_" + re.sub(r"\W+", "_", name))
        os.makedirs(d, exist_ok=True)
        shutil.copyfile(P("base", "model.safetensors"), os.path.join(d, "model.safetensors"))
        c = os.path.join(d, "config.json")
        if os.path.lexists(c):
            if os.path.isdir(c) and not os.path.islink(c):
                os.rmdir(c)
            else:
                os.remove(c)
        if target == "fifo":
            os.mkfifo(c)
        elif target == "dir":
            os.mkdir(c)
        elif target == "dangling":
            os.symlink("/nonexistent/config.json", c)
        else:
            os.symlink(target, c)
        A.append(Attempt("generate: %s" % name,
                         [BIN, "generate", "--model", d, "--prompt-ids", "1", "--max-new-tokens", "1"],
                         kw=["config.json"], timeout=15))
    for name, target in [("model.safetensors is a FIFO", "fifo"),
                         ("model.safetensors -> /dev/zero", "/dev/zero")]:
        d = os.path.join(S, "models", "odd_" + re.sub(r"\W+", "_", name))
        os.makedirs(d, exist_ok=True)
        shutil.copyfile(P("base", "config.json"), os.path.join(d, "config.json"))
        w = os.path.join(d, "model.safetensors")
        if os.path.lexists(w):
            os.remove(w)
        if target == "fifo":
            os.mkfifo(w)
        else:
            os.symlink(target, w)
        A.append(Attempt("generate: %s" % name,
                         [BIN, "generate", "--model", d, "--prompt-ids", "1", "--max-new-tokens", "1"],
                         kw=["model.safetensors"], timeout=15))
    A.append(Attempt("match --rules unreadable (mode 000; root reads it anyway)",
                     [BIN, "match", "--rules", os.path.join(f, "unreadable.json")], stdin=b"x\n",
                     expect="any", kw=["unreadable"]))
    A.append(Attempt("match with a 20 MB single-line path on stdin",
                     [BIN, "match", "--rules", EX_RULES], stdin=b"dense" * 4_000_000 + b"\n",
                     expect="any", kw=["path", "line"], timeout=30))
    A.append(Attempt("match with invalid UTF-8 and NUL paths on stdin",
                     [BIN, "match", "--rules", EX_RULES], stdin=b"dense\xff/kernel\nemb\x00x\n\n",
                     expect="any", kw=["UTF-8", "path"]))
    return A


def gen_saves():
    A = []
    sv = P("saves")
    tok = P("base", "tokens.safetensors")

    def train(save, model=None, steps="2", extra=()):
        return [BIN, "train", "--model", model or P("base"), "--data", tok, "--batch-size", "2",
                "--steps", steps, "--json", "--save", save] + list(extra)
    pf = os.path.join(sv, "parent_is_file")
    with open(pf, "w") as fh:
        fh.write("x")
    A.append(Attempt("train --save under a regular file", train(os.path.join(pf, "out")),
                     kw=["parent_is_file", "out"]))
    dl = os.path.join(sv, "dangling_link")
    if not os.path.lexists(dl):
        os.symlink(os.path.join(sv, "nowhere", "deeper"), dl)
    A.append(Attempt("train --save to a dangling symlink", train(dl), kw=["dangling_link", "nowhere"]))
    ne = os.path.join(sv, "non_empty")
    os.makedirs(ne, exist_ok=True)
    with open(os.path.join(ne, "keep.txt"), "w") as fh:
        fh.write("precious")
    A.append(Attempt("train --save to an existing non-empty directory", train(ne),
                     kw=["non_empty", "empty"]))
    mcopy = os.path.join(sv, "model_copy")
    if os.path.exists(mcopy):
        shutil.rmtree(mcopy)
    shutil.copytree(P("base"), mcopy)
    A.append(Attempt("train --save into the --model directory itself", train(mcopy, model=mcopy),
                     kw=["model_copy", "empty", "model"]))
    A.append(Attempt("train --save to /dev/null", train("/dev/null"), kw=["/dev/null"]))
    A.append(Attempt("train --save to the FIFO", train(P("files", "fifo")), kw=["fifo"], timeout=15))
    A.append(Attempt("train --save ''", train(""), kw=["save", "''", "empty"]))
    em = os.path.join(sv, "empty_dir")
    if os.path.exists(em):
        shutil.rmtree(em)
    os.makedirs(em)
    A.append(Attempt("train --save into an existing empty directory (valid)", train(em),
                     expect="run", check=check_train(2)))
    A.append(Attempt("two trains saving to one new directory at once",
                     custom=concurrent_saves, timeout=60))
    A.append(Attempt("resume after meshlayout_save.json was deleted", custom=resume_no_marker,
                     timeout=60))
    A.append(Attempt("resume with --steps 9223372036854775807", custom=resume_huge_steps,
                     timeout=60))
    A.append(Attempt("resume (valid) from a fresh save", custom=resume_valid, timeout=60))
    A.append(Attempt("resume an adamw save with --optimizer sgd", custom=resume_other_optimizer,
                     timeout=60))
    A.append(Attempt("demo --keep into a non-empty directory",
                     [BIN, "demo", "--no-progress", "--keep", ne], kw=["non_empty", "empty"],
                     timeout=60))
    return A


def _fresh_save(tag, steps="2"):
    d = P("saves", tag)
    if os.path.exists(d):
        shutil.rmtree(d)
    r = execute([BIN, "train", "--model", P("base"), "--data", P("base", "tokens.safetensors"),
                 "--batch-size", "2", "--steps", steps, "--json", "--save", d], 60)
    if r.rc != 0:
        return None, r
    return d, r


def concurrent_saves(a):
    d = P("saves", "concurrent")
    if os.path.exists(d):
        shutil.rmtree(d)
    cmd = [BIN, "train", "--model", P("base"), "--data", P("base", "tokens.safetensors"),
           "--batch-size", "2", "--steps", "4", "--json", "--save", d]
    procs = []
    files = []
    for _ in range(2):
        fo, fe = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        files.append((fo, fe))
        procs.append(subprocess.Popen(cmd, stdout=fo, stderr=fe, env=base_env(),
                                      start_new_session=True, preexec_fn=limit_memory))
    t0 = time.time()
    timed_out = False
    for p in procs:
        try:
            p.wait(timeout=max(1, a.timeout - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(p)
    outs = []
    for (fo, fe), p in zip(files, procs):
        fo.seek(0)
        fe.seek(0)
        outs.append((p.returncode, fo.read().decode(errors="replace"), fe.read().decode(errors="replace")))
        fo.close()
        fe.close()
    text = " | ".join("rc=%s err=%s" % (rc, e.strip()[-300:]) for rc, _, e in outs)
    res = Result(0, "", text, timed_out, time.time() - t0)
    if timed_out:
        return "HANG", "a saving process did not end", res
    for rc, o, e in outs:
        if rc is None or rc < 0 or crash_marker(e):
            return "CRASH", "rc=%s" % rc, res
    rcs = sorted(rc for rc, _, _ in outs)
    ok_files = all(os.path.exists(os.path.join(d, f)) for f in
                   ("config.json", "model.safetensors", "optimizer.safetensors"))
    if rcs == [0, 1]:
        loser = [e for rc, _, e in outs if rc == 1][0]
        if not ok_files:
            return "WRONG", "one succeeded but the save directory is incomplete: %s" % os.listdir(d), res
        if "concurrent" not in loser and "save" not in loser.lower():
            return "UNCLEAR", "the refused run does not name the directory", res
        return "ok-refused", "exactly one succeeded; the other was refused", res
    if rcs == [0, 0]:
        return "WRONG", "both runs exited 0 saving to the same directory", res
    return "WRONG", "neither succeeded (exit codes %s)" % rcs, res


def resume_no_marker(a):
    d, r = _fresh_save("no_marker")
    if d is None:
        return "WRONG", "the preparatory save failed: " + r.err[-300:], r
    marker = os.path.join(d, "meshlayout_save.json")
    if not os.path.exists(marker):
        return "WRONG", "a fresh save has no meshlayout_save.json: %s" % os.listdir(d), r
    os.remove(marker)
    a.kw = ["meshlayout_save.json"]
    a.expect = "refuse"
    a.cmd = [BIN, "train", "--model", d, "--data", P("base", "tokens.safetensors"),
             "--batch-size", "2", "--steps", "2", "--json"]
    r = execute(a.cmd, a.timeout)
    c, n = classify(a, r)
    return c, n, r


def resume_huge_steps(a):
    d, r = _fresh_save("huge_steps")
    if d is None:
        return "WRONG", "the preparatory save failed: " + r.err[-300:], r
    a.kw = ["steps", I64MAX]
    a.expect = "refuse"
    a.cmd = [BIN, "train", "--model", d, "--data", P("base", "tokens.safetensors"),
             "--batch-size", "2", "--steps", I64MAX, "--json"]
    r = execute(a.cmd, a.timeout)
    c, n = classify(a, r)
    return c, n, r


def resume_other_optimizer(a):
    d, r = _fresh_save("other_optimizer")
    if d is None:
        return "WRONG", "the preparatory save failed: " + r.err[-300:], r
    a.kw = ["optimizer"]
    a.expect = "refuse"
    a.cmd = [BIN, "train", "--model", d, "--data", P("base", "tokens.safetensors"),
             "--batch-size", "2", "--steps", "2", "--json", "--optimizer", "sgd"]
    r = execute(a.cmd, a.timeout)
    c, n = classify(a, r)
    return c, n, r


def resume_valid(a):
    d, r = _fresh_save("valid_resume")
    if d is None:
        return "WRONG", "the preparatory save failed: " + r.err[-300:], r
    a.expect = "run"
    a.check = check_train(2)
    a.cmd = [BIN, "train", "--model", d, "--data", P("base", "tokens.safetensors"),
             "--batch-size", "2", "--steps", "2", "--json"]
    r = execute(a.cmd, a.timeout)
    c, n = classify(a, r)
    if c == "ok-ran":
        steps = [json.loads(l)["step"] for l in r.out.splitlines() if l.strip()]
        if steps != [2, 3]:
            return "WRONG", "resumed steps are %s, expected [2, 3]" % steps, r
    return c, n, r


# ---------------------------------------------------------------- MPI
def gen_mpi():
    A = []
    tok = P("base", "tokens.safetensors")
    m = P("base")
    T = [BIN, "train", "--model", m, "--data", tok, "--batch-size", "8", "--steps", "2", "--json"]
    G = [BIN, "generate", "--model", m, "--prompt-ids", "1,2,3", "--max-new-tokens", "3", "--json"]
    DIS = ["disagree", "process 1", "process 0"]

    def mpmd(a, b, pre_a=(), pre_b=()):
        return MPI + ["-np", "1"] + list(pre_a) + a + [":", "-np", "1"] + list(pre_b) + b
    A.append(Attempt("mpi control: train -np 2 (valid)", MPI + ["-np", "2"] + T, expect="run",
                     mpi=True, check=check_train(2)))
    A.append(Attempt("mpi control: generate -np 2 (valid)", MPI + ["-np", "2"] + G, expect="run",
                     mpi=True, check=check_generate(3, json_mode=True)))
    for opt, va, vb in [("--weight-decay", "0.1", "0.2"), ("--learning-rate", "0.001", "0.002"),
                        ("--steps", "2", "3"), ("--optimizer", "adam", "adamw"),
                        ("--batch-size", "8", "16")]:
        Ta = [x for x in T]
        i = Ta.index(opt) if opt in Ta else None
        if i is not None:
            Ta_a = Ta[:i] + [opt, va] + Ta[i + 2:]
            Ta_b = Ta[:i] + [opt, vb] + Ta[i + 2:]
        else:
            Ta_a, Ta_b = Ta + [opt, va], Ta + [opt, vb]
        A.append(Attempt("mpi train %s %s vs %s" % (opt, va, vb), mpmd(Ta_a, Ta_b), kw=DIS, mpi=True))
    A.append(Attempt("mpi train --zero1 on rank 1 only", mpmd(T, T + ["--zero1"]), kw=DIS, mpi=True))
    A.append(Attempt("mpi train --rules on rank 1 only", mpmd(T, T + ["--rules", MEGATRON, "--mesh", "batch=2,model=4"]),
                     kw=DIS, mpi=True))
    A.append(Attempt("mpi train --save on rank 1 only", mpmd(T, T + ["--save", P("saves", "mpi_one_rank")]),
                     kw=DIS, mpi=True))
    A.append(Attempt("mpi generate --prompt differs", mpmd(G, G[:5] + ["1,2,4"] + G[6:]), kw=DIS, mpi=True))
    R = [BIN, "reshard", "--shape", "64,64", "--mesh", "data=2,model=4", "--from", "data,None",
         "--to", "None,model"]
    A.append(Attempt("mpi reshard --to differs", mpmd(R, R[:-1] + ["model,None"]), kw=DIS, mpi=True))
    A.append(Attempt("mpi reshard --dtype differs", mpmd(R + ["--dtype", "f32"], R + ["--dtype", "bf16"]),
                     kw=DIS, mpi=True))
    A.append(Attempt("mpi different commands (reshard vs generate)", mpmd(R, G), kw=DIS, mpi=True))
    # Same relative paths, different contents, through --wdir.
    w = P("mpi_wdir")
    if os.path.exists(w):
        shutil.rmtree(w)
    for r in ("r0", "r1"):
        os.makedirs(os.path.join(w, r))
        shutil.copytree(P("base"), os.path.join(w, r, "model"))
        shutil.copyfile(MEGATRON, os.path.join(w, r, "rules.json"))
    with open(os.path.join(w, "r1", "rules.json"), "w") as fh:
        json.dump({"rules": [["token_embedding/embeddings", [None, "model"]]]}, fh)
    Tr = [BIN, "train", "--model", "model", "--data", "model/tokens.safetensors", "--batch-size",
          "8", "--steps", "2", "--json"]
    Gr = [BIN, "generate", "--model", "model", "--prompt-ids", "1,2,3", "--max-new-tokens", "3", "--json"]
    wd0, wd1 = ["--wdir", os.path.join(w, "r0")], ["--wdir", os.path.join(w, "r1")]
    A.append(Attempt("mpi --wdir rules.json content differs: generate",
                     mpmd(Gr + ["--rules", "rules.json", "--mesh", "batch=2,model=4"],
                          Gr + ["--rules", "rules.json", "--mesh", "batch=2,model=4"], wd0, wd1),
                     kw=DIS, mpi=True))
    A.append(Attempt("mpi --wdir rules.json content differs: train",
                     mpmd(Tr + ["--rules", "rules.json", "--mesh", "batch=2,model=4"],
                          Tr + ["--rules", "rules.json", "--mesh", "batch=2,model=4"], wd0, wd1),
                     kw=DIS, mpi=True))
    variants = [("rms_norm_eps", 1e-6), ("tie_word_embeddings", True), ("num_hidden_layers", 1)]
    for fld, val in variants:
        tag = "cfg_" + fld
        for r in ("r0", "r1"):
            dst = os.path.join(w, tag, r)
            shutil.copytree(P("base"), os.path.join(dst, "model"))
        c = dict(BASE_CONFIG)
        c[fld] = val
        with open(os.path.join(w, tag, "r1", "model", "config.json"), "w") as fh:
            json.dump(c, fh)
        wa, wb = ["--wdir", os.path.join(w, tag, "r0")], ["--wdir", os.path.join(w, tag, "r1")]
        A.append(Attempt("mpi --wdir config.json %s differs: generate" % fld, mpmd(Gr, Gr, wa, wb),
                         kw=DIS, mpi=True))
        if fld in ("rms_norm_eps", "num_hidden_layers"):
            A.append(Attempt("mpi --wdir config.json %s differs: train" % fld, mpmd(Tr, Tr, wa, wb),
                             kw=DIS, mpi=True))
    # Different weights / token data content on one rank (same header).
    tag = "weights_differ"
    for r in ("r0", "r1"):
        shutil.copytree(P("base"), os.path.join(w, tag, r, "model"))
    patched_weights(fill(["model.layers.0.mlp.up_proj.weight"], struct.pack("<f", 0.5)))(
        os.path.join(w, tag, "r1", "model", "model.safetensors"))
    # Same header, different bytes: each process loads its shards from its own file, so the
    # model is a mixture of two checkpoints (the tokens match neither file run alone).
    Gm = Gr + ["--rules", MEGATRON, "--mesh", "batch=1,model=8"]
    A.append(Attempt("mpi --wdir model.safetensors values differ (same header): generate megatron",
                     mpmd(Gm, Gm, ["--wdir", os.path.join(w, tag, "r0")], ["--wdir", os.path.join(w, tag, "r1")]),
                     kw=DIS, mpi=True, check=check_generate(3, json_mode=True)))
    tag = "tokens_rows_differ"
    for r in ("r0", "r1"):
        shutil.copytree(P("base"), os.path.join(w, tag, r, "model"))
    tokens_file(os.path.join(w, tag, "r1", "model", "tokens.safetensors"), 32, 9)
    A.append(Attempt("mpi --wdir tokens.safetensors row count differs: train",
                     mpmd(Tr, Tr, ["--wdir", os.path.join(w, tag, "r0")], ["--wdir", os.path.join(w, tag, "r1")]),
                     kw=DIS, mpi=True))
    # Missing files on one rank only.
    tag = "missing"
    for r in ("r0", "r1"):
        shutil.copytree(P("base"), os.path.join(w, tag, r, "model"))
        shutil.copyfile(MEGATRON, os.path.join(w, tag, r, "rules.json"))
    os.remove(os.path.join(w, tag, "r1", "rules.json"))
    os.remove(os.path.join(w, tag, "r1", "model", "tokens.safetensors"))
    wa, wb = ["--wdir", os.path.join(w, tag, "r0")], ["--wdir", os.path.join(w, tag, "r1")]
    A.append(Attempt("mpi rules.json missing on rank 1: generate",
                     mpmd(Gr + ["--rules", "rules.json", "--mesh", "batch=2,model=4"],
                          Gr + ["--rules", "rules.json", "--mesh", "batch=2,model=4"], wa, wb),
                     kw=["process 1", "rules.json"], mpi=True))
    A.append(Attempt("mpi tokens.safetensors missing on rank 1: train", mpmd(Tr, Tr, wa, wb),
                     kw=["process 1", "tokens.safetensors"], mpi=True))
    tag = "missing_cfg"
    for r in ("r0", "r1"):
        shutil.copytree(P("base"), os.path.join(w, tag, r, "model"))
    os.remove(os.path.join(w, tag, "r0", "model", "model.safetensors"))
    A.append(Attempt("mpi model.safetensors missing on rank 0: generate",
                     mpmd(Gr, Gr, ["--wdir", os.path.join(w, tag, "r0")], ["--wdir", os.path.join(w, tag, "r1")]),
                     kw=["process 0", "model.safetensors"], mpi=True))
    # Device counts that differ per process.
    A.append(Attempt("mpi MESHLAYOUT_LOCAL_DEVICES 4 vs 2 (-x)",
                     mpmd(G, G, ["-x", "MESHLAYOUT_LOCAL_DEVICES=4"], ["-x", "MESHLAYOUT_LOCAL_DEVICES=2"]),
                     kw=DIS + ["MESHLAYOUT_LOCAL_DEVICES"], mpi=True))
    A.append(Attempt("mpi MESHLAYOUT_COLLECTIVE_TIMEOUT=abc both",
                     MPI + ["-np", "2", "-x", "MESHLAYOUT_COLLECTIVE_TIMEOUT=abc"] + G,
                     kw=["MESHLAYOUT_COLLECTIVE_TIMEOUT", "abc"], mpi=True))
    A.append(Attempt("mpi MESHLAYOUT_LOCAL_DEVICES=0 both", MPI + ["-np", "2", "-x", "MESHLAYOUT_LOCAL_DEVICES=0"] + G,
                     kw=["MESHLAYOUT_LOCAL_DEVICES"], mpi=True))
    A.append(Attempt("mpi MESHLAYOUT_DEVICE_MEMORY differs (1KiB on rank 1)",
                     mpmd(G, ["env", "MESHLAYOUT_DEVICE_MEMORY=1KiB"] + G),
                     kw=["process 1", "memory"], mpi=True))
    A.append(Attempt("mpi train batch 2 on 8 batch devices over 2 processes",
                     MPI + ["-np", "2"] + [x if x != "8" else "2" for x in T], expect="any",
                     kw=["--batch-size", "multiple", "divisible"], mpi=True, check=check_train(2)))
    for a in A:
        a.timeout = 60
    return A


# ---------------------------------------------------------------- Python
PY_PRELUDE = r'''
import sys, json, math, threading
import numpy as np
import meshlayout as ml
mesh = ml.DeviceMesh((2, 4), ["data", "model"])
OK_ERRORS = (ValueError, TypeError, KeyError, OverflowError, MemoryError, OSError, IndexError,
             RuntimeError, NotImplementedError, AttributeError)
def attempt(fn):
    try:
        r = fn()
    except OK_ERRORS as e:
        print("REFUSED %s: %s" % (type(e).__name__, str(e)[:3000]), file=sys.stderr)
        sys.exit(1)
    print("RAN %s" % (repr(r)[:300],))
    sys.exit(0)
'''


def py(name, body, expect="refuse", kw=(), timeout=60):
    code = PY_PRELUDE + "\n" + body
    return Attempt("python: " + name, [PY, "-c", code], expect=expect, kw=kw, timeout=timeout,
                   py=body)


def gen_python():
    A = []
    L = "ml.TensorLayout((None,), mesh)"
    for name, expr, kw in [
            ("None", "None", ["NoneType"]), ("str", "'text'", ["str"]), ("dict", "{'a': 1}", ["dict"]),
            ("object array", "np.array([object(), object()], dtype=object)", ["object"]),
            ("complex64 array", "np.zeros(4, np.complex64)", ["complex64"]),
            ("ragged list", "[[1, 2], [3]]", ["inhomogeneous", "list"]),
            ("__array__ raises ValueError", "type('R', (), {'__array__': lambda self, dtype=None, copy=None: (_ for _ in ()).throw(ValueError('nope'))})()", ["nope", "R"]),
            ("__array__ returns a list", "type('R', (), {'__array__': lambda self, dtype=None, copy=None: [1, 2, 3, 4]})()", ["R", "__array__", "array"]),
            ("__len__ lies", "type('S', (), {'__len__': lambda self: 4, '__getitem__': lambda self, i: 1.0 if i < 2 else (_ for _ in ()).throw(IndexError(i))})()", ["S", "sequence", "len", "index"]),
            ("0-strided huge broadcast", "np.broadcast_to(np.float32(0), (2**31, 2**31))", ["2147483648", "bytes", "memory", "shape", "too big"]),
            ("huge int64 element count", "np.lib.stride_tricks.as_strided(np.zeros(1), shape=(2**62, 4), strides=(0, 0))", ["bytes", "shape", "4611686018427387904", "int64", "too big"])]:
        lay = "ml.TensorLayout((None, None), mesh)" if ("huge" in name or "ragged" in name) else L
        if name in ("None", "str", "dict", "set", "bytes", "generator", "__array__ returns self"):
            lay = "ml.TensorLayout((), mesh)"
        A.append(py("distribute_tensor(%s)" % name,
                    "attempt(lambda: ml.distribute_tensor(%s, %s))" % (expr, lay), kw=kw,
                    expect="any" if name == "__len__ lies" else "refuse"))  # numpy's own reading
    # Valid inputs that must round-trip exactly.
    for name, expr, axes in [
            ("0-d array", "np.array(3.5, np.float32)", "()"),
            ("non-contiguous slice", "np.arange(64, dtype=np.float32).reshape(8, 8)[::2, ::-3]", "('data', None)"),
            ("big-endian float32", "np.arange(48, dtype='>f4').reshape(8, 6)", "('data', None)"),
            ("big-endian int64", "np.arange(48, dtype='>i8').reshape(8, 6) - 20", "(None, 'model')"),
            ("uint64 > 2^63", "np.arange(48, dtype=np.uint64).reshape(8, 6) + np.uint64(2**63)", "('data', None)"),
            ("NaN and Inf values", "np.array([[np.nan, np.inf, -np.inf, 0.0]] * 8, np.float32)", "('data', None)"),
            ("32 dims of size 1", "np.ones((1,) * 32, np.float32)", "(None,) * 32"),
            ("negative-stride view", "np.arange(48, dtype=np.float64).reshape(8, 6)[::-1, ::-1]", "(('data', 'model'), None)"),
            ("memoryview", "memoryview(np.arange(8, dtype=np.int32))", "('model',)"),
    ]:
        body = ("x = %s\n"
                "def f():\n"
                "    a = ml.distribute_tensor(x, ml.TensorLayout(%s, mesh))\n"
                "    ref = np.asarray(x)\n"
                "    got = np.asarray(a)\n"
                "    if got.shape != ref.shape or not np.array_equal(got, ref, equal_nan=(ref.dtype.kind == 'f')):\n"
                "        print('MISMATCH', got.dtype, ref.dtype, got.ravel()[:6], ref.ravel()[:6])\n"
                "    b = ml.distribute_tensor(a, ml.TensorLayout(tuple(reversed(%s)) if len(%s) == 2 else %s, mesh))\n"
                "    if not np.array_equal(np.asarray(b), ref, equal_nan=(ref.dtype.kind == 'f')):\n"
                "        print('MISMATCH after reshard')\n"
                "    return got.dtype\n"
                "attempt(f)\n") % (expr, axes, axes, axes, axes)
        # meshlayout has no uint16/uint64 and refuses big-endian data with a clear message.
        valid_dtypes = not any(s in name for s in ("uint64", "memoryview", "big-endian"))
        A.append(py("distribute_tensor(%s) round trip" % name, body,
                    expect="run" if valid_dtypes else "any", kw=["uint16", "uint64", "dtype"]))
    # DeviceMesh / TensorLayout / LayoutMap misuse.
    for name, expr, kw in [
            ("DeviceMesh shape 2^63", "ml.DeviceMesh((2**63,), ['d'])", ["9223372036854775808", "shape", "int"]),
            ("DeviceMesh shape 2^20 x 2^20", "ml.DeviceMesh((2**20, 2**20), ['a', 'b'])", ["1048576", "devices"]),
            ("DeviceMesh shape numpy 0-d", "ml.DeviceMesh(np.array(8), ['d'])", ["shape", "0-d", "iter", "ndarray"]),
            ("DeviceMesh axis names ints", "ml.DeviceMesh((2, 4), [1, 2])", ["axis", "str", "1"]),
            ("DeviceMesh devices gpu", "ml.DeviceMesh((2,), ['d'], devices=['gpu:0', 'gpu:1'])", ["gpu"]),
            ("DeviceMesh devices duplicated", "ml.DeviceMesh((2,), ['d'], devices=['cpu:0', 'cpu:0'])", ["cpu:0", "duplicate", "twice"]),
            ("DeviceMesh devices out of range", "ml.DeviceMesh((2,), ['d'], devices=['cpu:0', 'cpu:100'])", ["cpu:100"]),
            ("DeviceMesh 1000 axes", "ml.DeviceMesh((1,) * 1000, ['a%d' % i for i in range(1000)])", ["axes", "1000", "rank", "number of devices"]),
            ("TensorLayout axes str", "ml.TensorLayout('data', mesh)", ["'data'", "str", "axes"]),
            ("TensorLayout axes dict", "ml.TensorLayout({'data': 1}, mesh)", ["dict", "axes"]),
            ("TensorLayout axis twice in a tuple", "ml.TensorLayout((('data', 'data'),), mesh)", ["data", "twice"]),
            ("TensorLayout empty tuple entry", "ml.TensorLayout(((), None), mesh)", ["()", "empty", "axis"]),
            ("TensorLayout nested 3 deep", "ml.TensorLayout(((('data',),),), mesh)", ["axis", "('data',)"]),
            ("LayoutMap mesh a str", "ml.LayoutMap('mesh')", ["mesh", "str"]),
            ("LayoutMap value int", "ml.LayoutMap(mesh).__setitem__('x', 3)", ["3", "TensorLayout"]),
            ("LayoutMap value layout of another mesh", "ml.LayoutMap(mesh).__setitem__('x', ml.TensorLayout(('b',), ml.DeviceMesh((8,), ['b'])))", ["mesh", "b"]),
            ("LayoutMap lookup bytes", "ml.LayoutMap(mesh)[b'dense']", ["bytes", "str"]),
            ("LayoutMap lookback key", "ml.LayoutMap(mesh).__setitem__('(?<=a)b', (None,))", ["(?<=a)b"]),
            ("LayoutMap key with NUL", "(lambda lm: (lm.__setitem__('a\\x00b', (None,)), lm['a\\x00b']))(ml.LayoutMap(mesh))", ["NUL", "\\x00", "a"]),
            ("LayoutMap 10 MB key", "ml.LayoutMap(mesh).__setitem__('a' * 10_000_000, (None,))", ["pattern", "long", "large", "memory", "size"]),
            ("save value not an Array", "ml.save('/tmp/campaign/x.safetensors', {'a': np.zeros(3)})", ["Array", "ndarray", "'a'"]),
            ("save empty name", "ml.save('/tmp/campaign/x.safetensors', {'': ml.distribute_tensor(np.zeros(4, np.float32), ml.TensorLayout((None,), mesh))})", ["name", "empty", "''"]),
            ("save to a directory", "ml.save('/tmp/campaign/files/a_directory', {'a': ml.distribute_tensor(np.zeros(4, np.float32), ml.TensorLayout((None,), mesh))})", ["a_directory", "directory"]),
            ("open_checkpoint /dev/zero", "ml.open_checkpoint('/dev/zero')", ["/dev/zero"]),
            ("load layouts not a dict", "ml.load(ml.open_checkpoint('/tmp/campaign/base/model.safetensors'), 'lm_head.weight')", ["str", "dict", "LayoutMap"]),
            ("load layout a str", "ml.load(ml.open_checkpoint('/tmp/campaign/base/model.safetensors'), {'lm_head.weight': 'x'})", ["str", "TensorLayout", "'x'"]),
            ("load dtype bogus", "ml.load(ml.open_checkpoint('/tmp/campaign/base/model.safetensors'), {'lm_head.weight': ml.TensorLayout((None, None), mesh)}, dtype='float7')", ["float7"]),
            ("asarray(dtype=object)", "np.asarray(ml.distribute_tensor(np.zeros(4, np.float32), ml.TensorLayout((None,), mesh)), dtype=object)", ["object"]),
    ]:
        expect = "refuse"
        if name in ("asarray(dtype=object)", "DeviceMesh 1000 axes", "LayoutMap 10 MB key",
                    "save to /dev/null", "LayoutMap key with NUL",
                    # Keras' own semantics: tuple(axes) of a dict, () = no axes, no mesh check
                    # on insertion, lookups of any key type
                    "TensorLayout axes dict", "TensorLayout empty tuple entry",
                    "LayoutMap value layout of another mesh", "LayoutMap lookup bytes"):
            expect = "any"
        A.append(py(name, "attempt(lambda: %s)" % expr, expect=expect, kw=kw))
    # Environment variables read at import / first use.
    for v in ["0", "abc", "1048577"]:
        A.append(Attempt("python: MESHLAYOUT_CPU_DEVICES=%r list_devices" % v,
                         [PY, "-c", PY_PRELUDE.replace('mesh = ml.DeviceMesh((2, 4), ["data", "model"])', "") +
                          "\nattempt(lambda: len(ml.list_devices()))"],
                         env={"MESHLAYOUT_CPU_DEVICES": v}, expect="refuse", kw=["MESHLAYOUT_CPU_DEVICES"],
                         py="env"))
    # Threads.
    A.append(py("8 threads resharding the same Array concurrently", r'''
x = np.arange(64 * 48, dtype=np.float32).reshape(64, 48)
a = ml.distribute_tensor(x, ml.TensorLayout(("data", "model"), mesh))
layouts = [ml.TensorLayout(t, mesh) for t in [("data", None), (None, "model"), ("model", "data"), (None, None), (("data", "model"), None)]]
errors = []
def work(t):
    try:
        for r in range(150):
            b = ml.distribute_tensor(a, layouts[(t + r) % len(layouts)])
            if not np.array_equal(np.asarray(b), x):
                errors.append((t, r))
    except BaseException as e:
        errors.append(repr(e))
sys.setswitchinterval(1e-6)
ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
if errors: print("MISMATCH", errors[:3])
attempt(lambda: "ok")
''', expect="run", timeout=120))
    A.append(py("8 threads: distribute from numpy, reshard, gather, different dtypes", r'''
errors = []
def work(t):
    try:
        dt = ["float32", "float64", "int8", "int64", "float16", "uint8", "bool", "int32"][t]
        rng = np.random.default_rng(t)
        for r in range(60):
            x = (rng.standard_normal((9 + t, 7 + r % 3)) * 50).astype(dt)
            a = ml.distribute_tensor(x, ml.TensorLayout(("model", None), mesh))
            b = ml.distribute_tensor(a, ml.TensorLayout((None, ("data", "model")), mesh))
            if np.asarray(b).tobytes() != x.tobytes():
                errors.append((t, r))
    except BaseException as e:
        errors.append(repr(e))
ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
if errors: print("MISMATCH", errors[:3])
attempt(lambda: "ok")
''', expect="run", timeout=120))
    A.append(py("8 threads: one inserting rules while others look up (documented as unsupported)", r'''
lm = ml.LayoutMap(mesh)
stop = False
def look():
    while not stop:
        try:
            lm["block_3/dense/kernel"]
        except ValueError:
            pass
ts = [threading.Thread(target=look) for _ in range(7)]
[t.start() for t in ts]
for i in range(400):
    lm["block_%d/.*kernel" % i] = (None, "model")
    if i % 3 == 0: del lm["block_%d/.*kernel" % i]
stop = True
[t.join() for t in ts]
attempt(lambda: len(lm))
''', expect="any", timeout=120))
    A.append(py("8 threads each entering scopes, leaving some open", r'''
maps = [ml.LayoutMap(mesh) for _ in range(8)]
def work(t):
    for r in range(200):
        with maps[t].scope():
            assert ml.current_layout_map() is maps[t]
    maps[t].scope().__enter__()
ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
attempt(lambda: ml.current_layout_map())
''', expect="run"))
    for name, how in [
            ("scope left open at exit", "lm.scope().__enter__()"),
            ("scope left open, then os._exit", "lm.scope().__enter__(); import os; os._exit(0)"),
            ("scope open in a daemon thread at exit", "threading.Thread(target=lambda: (lm.scope().__enter__(), __import__('time').sleep(30)), daemon=True).start(); __import__('time').sleep(0.2)"),
            ("scope open and an Array alive at exit", "lm.scope().__enter__(); keep = ml.distribute_tensor(np.zeros((8, 8), np.float32), ml.TensorLayout(('data', 'model'), mesh))"),
            ("scope open then sys.exit(0)", "lm.scope().__enter__(); sys.exit(0)")]:
        A.append(py(name, "lm = ml.LayoutMap(mesh)\nlm['dense.*kernel'] = (None, 'model')\n" + how +
                    "\nattempt(lambda: 'done')", expect="run"))
    A.append(py("Array view kept after the Array is gone, then interpreter exit", r'''
a = ml.distribute_tensor(np.arange(64, dtype=np.float32).reshape(8, 8), ml.TensorLayout(("data", "model"), mesh))
v = a.addressable_shards[3].data
del a
import gc; gc.collect()
if not np.array_equal(v, np.arange(64, dtype=np.float32).reshape(8, 8)[0:4, 6:8]): print("MISMATCH", v)
attempt(lambda: v.sum())
''', expect="run"))
    A.append(py("write into a shard view", r'''
a = ml.distribute_tensor(np.zeros((8, 8), np.float32), ml.TensorLayout(("data", "model"), mesh))
def f():
    a.addressable_shards[0].data[0, 0] = 5
attempt(f)
''', kw=["read-only", "writeable", "read"]))
    return A


# ---------------------------------------------------------------- driver
def run_attempt(a):
    t0 = time.time()
    try:
        if a.custom is not None:
            out = a.custom(a)
            c, note, r = out
        else:
            r = execute(a.cmd, a.timeout, env=a.env, cwd=a.cwd, stdin=a.stdin, cap=not a.mpi)
            c, note = classify(a, r)
    except Exception as e:  # a bug of this script, not of meshlayout: report it loudly
        r = Result(None, "", repr(e), False, time.time() - t0)
        c, note = "CAMPAIGN-ERROR", repr(e)
    return a, c, note, r


def excerpt(text, n=400):
    text = text.strip()
    if len(text) <= n:
        return text
    return text[:n // 2] + " ... " + text[-n // 2:]


def shell_quote(cmd):
    if cmd is None:
        return "(custom attempt)"
    import shlex
    out = []
    for x in cmd:
        if len(x) > 300:
            x = x[:300] + "...[%d chars]" % len(x)
        out.append(shlex.quote(x))
    return " ".join(out)


def main():
    global S
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="run only attempts whose name contains this")
    ap.add_argument("--list", action="store_true", help="list the attempts and exit")
    ap.add_argument("--jobs", type=int, default=2, help="attempts at once (not MPI ones)")
    ap.add_argument("--scratch", default="/tmp/campaign")
    ap.add_argument("--verbose", action="store_true", help="print output excerpts of every attempt")
    ap.add_argument("--report", help="write a JSON report of every attempt here")
    args = ap.parse_args()
    S = os.path.abspath(args.scratch)
    os.makedirs(S, exist_ok=True)
    if not os.access(BIN, os.X_OK):
        sys.exit("no binary at %s: build first" % BIN)
    make_fixtures()
    attempts = []
    for g in (gen_cli_numbers, gen_cli_strings, gen_env, gen_configs, gen_weights, gen_index, gen_rules,
              gen_paths, gen_saves, gen_mpi, gen_python):
        attempts += g()
    if args.only:
        attempts = [a for a in attempts if args.only in a.name]
    if args.list:
        for a in attempts:
            print(a.name)
        print("%d attempts" % len(attempts))
        return 0
    t0 = time.time()
    serial = [a for a in attempts if a.mpi or a.custom is not None]
    parallel = [a for a in attempts if not (a.mpi or a.custom is not None)]
    results = []
    counts = {}
    idx = [0]

    def report(a, c, note, r):
        idx[0] += 1
        counts[c] = counts.get(c, 0) + 1
        results.append((a, c, note, r))
        rc = "timeout" if r.timed_out else r.rc
        line = "[%3d] %-12s %-70s rc=%s %.1fs%s" % (idx[0], c, a.name[:70], rc, r.secs,
                                                     ("  -- " + note) if note else "")
        print(line, flush=True)
        if args.verbose or c in ("WRONG", "CRASH", "HANG", "CAMPAIGN-ERROR"):
            print("      cmd: " + shell_quote(a.cmd)[:1500])
            if r.out.strip():
                print("      stdout: " + excerpt(r.out).replace("\n", "\n              "))
            if r.err.strip():
                print("      stderr: " + excerpt(r.err).replace("\n", "\n              "))
        elif c == "UNCLEAR":
            print("      stderr: " + excerpt(r.err + r.out, 300).replace("\n", "\n              "))
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for a, c, note, r in pool.map(run_attempt, parallel):
            report(a, c, note, r)
    for a in serial:
        report(*run_attempt(a))
    print()
    print("summary (%d attempts, %.0f s):" % (len(results), time.time() - t0))
    for c in ["ok-refused", "ok-ran", "UNCLEAR", "WRONG", "CRASH", "HANG", "CAMPAIGN-ERROR"]:
        print("  %-14s %d" % (c, counts.get(c, 0)))
    if args.report:
        with open(args.report, "w") as f:
            json.dump([{"name": a.name, "class": c, "note": note, "cmd": a.cmd if a.py is None else ["python3", "-c", a.py],
                        "rc": r.rc, "timed_out": r.timed_out, "stdout": excerpt(r.out, 2000),
                        "stderr": excerpt(r.err, 2000)} for a, c, note, r in results], f, indent=1)
    bad = sum(counts.get(c, 0) for c in ("WRONG", "CRASH", "HANG", "CAMPAIGN-ERROR"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
