"""dtrace-doctor (priv/bin): why is my probe silent? From the host, about
one node.

    dtrace-doctor PID        (PID: the node's OS pid as this host sees it)

Prints one line per check, `ok', `info', `warn' or `FAIL', each failure with
its fix:

  - the process: there, a BEAM (beam.smp), its pid inside a container;
  - the privileges tracers need here (root, or CAP_BPF + CAP_PERFMON and
    CAP_SYS_PTRACE);
  - the library: mapped in the process (bpftrace -p, perf and DTrace find
    probes only in mapped files), and the same file as on disk (a rebuilt
    .so copied over a running node: tracers attaching by path see the new
    file, the node runs the old one);
  - its SDT notes and the semaphores of the probes a tracer listens to now;
  - the application: whether automatic mode answers (bpftrace, root), so
    that a library left mapped by a stopped or unloaded application is named;
  - perf's build-id cache: the library's build id cached without its SDT
    events for this path (another copy of the same build cached first),
    where `perf probe -x` fails;
  - the kernel: uprobes and tracefs, lockdown, perf_event_paranoid;
  - the tracers found, with their versions and argument limits (bpftrace
    before 0.24 reads arg0..arg5 only on x86_64);
  - DTrace's helper device and dtprobed (DOF registration);
  - LTTng: the session daemon, and whether the node loaded liblttng-ust.

The node's own view (`dtrace:doctor()', `DTrace.doctor()') adds what only
the node knows: sinks, automatic mode, DOF registration.

Exit status: 0 no FAIL line, 1 at least one, 2 bad arguments. Needs Python 3
and readelf (binutils) for the notes. Environment: BPFTRACE, DTRACE (the
tracers to ask for their versions, default: on PATH), PERF_BUILDID_DIR
(perf's cache, default ~/.debug).
"""

import os
import re
import shutil
import signal
import struct
import subprocess
import sys
from typing import Optional

LIB = "dtrace_nif.so"
# How long check_application waits for automatic mode's answer (seconds):
# bpftrace's start, then one poll.
APP_WAIT_S = 8
out_lines: list[str] = []
failed = False

# A mapping of the library: (start, end, offset, inode, path, deleted).
Mapping = tuple[int, int, int, int, str, bool]


def say(level: str, check: str, text: str, fix: Optional[str] = None) -> None:
    global failed
    if level == "FAIL":
        failed = True
    line = "%-4s %-11s %s" % (level, check, text)
    if fix:
        line += "\n     %-11s fix: %s" % ("", fix)
    out_lines.append(line)
    print(line, flush=True)


def read(path: str, default: Optional[str] = None) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return default


def run(cmd: list[str]) -> tuple[Optional[int], str]:
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=20)
        return p.returncode, p.stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)


def caps() -> int:
    status = read("/proc/self/status", "") or ""
    m = re.search(r"^CapEff:\s*([0-9a-f]+)", status, re.M)
    return int(m.group(1), 16) if m else 0


CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 19, 21, 38, 39


def check_privileges() -> bool:
    c = caps()

    def has(n: int) -> bool:
        return bool(c & (1 << n))
    if os.geteuid() == 0 and has(CAP_SYS_ADMIN):
        say("ok", "privileges", "root with CAP_SYS_ADMIN: every tracer may attach")
        return True
    if has(CAP_BPF) and has(CAP_PERFMON) and has(CAP_SYS_PTRACE):
        say("ok", "privileges", "CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE: bpftrace and perf may attach "
            "(DTrace and SystemTap need root)")
        return True
    say("FAIL", "privileges", "uid %d without CAP_BPF+CAP_PERFMON+CAP_SYS_PTRACE: no tracer can attach"
        % os.geteuid(), "run the tracer (and this) as root: sudo")
    return False


def check_process(pid: int) -> bool:
    comm = read("/proc/%d/comm" % pid)
    if comm is None:
        say("FAIL", "process", "no process %d on this host" % pid,
            "give the node's OS pid as this host sees it: pgrep -x beam.smp, or os:getpid() in the "
            "node (in a container: see the container line)")
        return False
    comm = comm.strip()
    if not comm.startswith("beam"):
        say("FAIL", "process", "process %d is %s, not a BEAM (beam.smp)" % (pid, comm),
            "ps -ww -o pid,args -C beam.smp lists the nodes")
        return False
    args = (read("/proc/%d/cmdline" % pid, "") or "").split("\0")
    name = ""
    for flag in ("-sname", "-name"):
        if flag in args and args.index(flag) + 1 < len(args):
            name = " node %s" % args[args.index(flag) + 1]
    say("ok", "process", "%d is %s%s" % (pid, comm, name))
    status = read("/proc/%d/status" % pid, "") or ""
    m = re.search(r"^NSpid:\s*(.*)$", status, re.M)
    if m and len(m.group(1).split()) > 1:
        inner = m.group(1).split()[-1]
        say("info", "container", "pid %d here is pid %s inside its pid namespace (a container): "
            "os:getpid() in the node says %s; tracers on this host take %d" % (pid, inner, inner, pid))
    return True


def mapped_library(pid: int) -> Optional[list[Mapping]]:
    """[(start, end, offset, inode, path, deleted)] of dtrace_nif.so in pid."""
    maps = read("/proc/%d/maps" % pid)
    if maps is None:
        return None
    found = []
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or LIB not in parts[5]:
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        path = parts[5]
        deleted = path.endswith(" (deleted)")
        if deleted:
            path = path[: -len(" (deleted)")]
        found.append((start, end, int(parts[2], 16), int(parts[4]), path, deleted))
    return found


def check_library(pid: int) -> Optional[list[Mapping]]:
    maps = mapped_library(pid)
    if maps is None:
        say("FAIL", "library", "cannot read /proc/%d/maps" % pid, "run this as root")
        return None
    if not maps:
        say("FAIL", "library", "the node has not loaded %s: tracers find probes only in the files a "
            "process has mapped (bpftrace -p: \"no probes\")" % LIB,
            "start the dtrace application (application:ensure_all_started(dtrace)), or call any "
            "dtrace function once, then attach")
        return None
    path, inode, deleted = maps[0][4], maps[0][3], maps[0][5]
    try:
        st = os.stat("/proc/%d/root%s" % (pid, path))
        disk_inode = st.st_ino
    except OSError:
        disk_inode = None
    if deleted or disk_inode is None or disk_inode != inode:
        say("FAIL", "library", "%s: the node runs a file that is no longer on disk under that path "
            "(replaced%s): a tracer given the path attaches to the new file, and the node never hits "
            "its probes" % (path, " or deleted" if disk_inode is None else ": inode %d mapped, %d on disk"
                            % (inode, disk_inode)),
            "restart the node (or reload the library) so that it maps the file on disk; "
            "bpftrace -p PID with usdt::erlang:... probes (no path) follows the mapped file")
    else:
        say("ok", "library", "%s mapped, the file on disk (inode %d)" % (path, inode))
    return maps


def note_text(pid: int, maps: list[Mapping]) -> Optional[str]:
    """readelf's text of the mapped file's notes (through map_files, else
    the node's root), or None."""
    if shutil.which("readelf") is None:
        return None
    for path in ["/proc/%d/map_files/%x-%x" % (pid, maps[0][0], maps[0][1]), "/proc/%d/root%s" % (pid, maps[0][4])]:
        rc, text = run(["readelf", "-n", "--wide", path])
        if rc == 0:
            return text
    return None


def notes(pid: int, maps: list[Mapping]) -> Optional[list[tuple[str, str, int, int]]]:
    """[(provider, name, pc, semaphore)] of the mapped file's SDT notes."""
    text = note_text(pid, maps)
    if text is None:
        return None
    out: list[tuple[str, str, int, int]] = []
    cur: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        m = re.search(r"Provider:\s*(\S+)", line)
        if m:
            cur = {"provider": m.group(1)}
        elif line.startswith("Name:") and cur:
            cur["name"] = line.split(":", 1)[1].strip()
        elif line.startswith("Location:") and cur:
            m = re.search(r"Location:\s*(0x[0-9a-f]+).*Semaphore:\s*(0x[0-9a-f]+)", line)
            if m:
                out.append((cur["provider"], cur.get("name", "?"), int(m.group(1), 16), int(m.group(2), 16)))
            cur = {}
    return out


def load_base(maps: list[Mapping]) -> int:
    """The address the library's file offset 0 is mapped at."""
    return min(s - off for s, _e, off, _i, _p, _d in maps)


def check_notes(pid: int, maps: list[Mapping]) -> None:
    ns = notes(pid, maps)
    if ns is None:
        say("warn", "notes", "readelf could not read the library's notes",
            "apt-get install binutils")
        return
    if not ns:
        say("FAIL", "notes", "no SDT note in the mapped library: it was built without probes",
            "build the library with its probes (make build; DTRACE_NIF_BUILD=1)")
        return
    say("ok", "notes", "%d SDT probes (provider %s)" % (len(ns), ns[0][0]))
    # Semaphores: in .probes, which is mapped read-write; their link-time
    # address is the file's address plus the segment's difference, which
    # for this library is the load base (its segments keep offset = vaddr
    # modulo the page, as rustc links them).
    base = load_base(maps)
    up = []
    try:
        with open("/proc/%d/mem" % pid, "rb") as mem:
            for prov, name, _pc, sem in ns:
                if not sem:
                    continue
                mem.seek(base + sem)
                (count,) = struct.unpack("<H", mem.read(2))
                if count:
                    up.append("%s (%d)" % (name, count))
    except OSError as e:
        say("warn", "semaphores", "cannot read the node's memory (%s)" % e, "run this as root")
        return
    if up:
        say("info", "semaphores", "%d probe(s) have a tracer now: %s%s"
            % (len(up), ", ".join(up[:12]), ", ..." if len(up) > 12 else ""))
    else:
        say("info", "semaphores", "no probe has a tracer now (every semaphore is 0): a call returns "
            "false until one attaches")


def build_id(pid: int, maps: list[Mapping]) -> Optional[str]:
    """The mapped library's GNU build id (hex), or None."""
    m = re.search(r"Build ID:\s*([0-9a-f]+)", note_text(pid, maps) or "")
    return m.group(1) if m else None


def check_perf_cache(pid: int, maps: list[Mapping]) -> None:
    """perf's build-id cache (PERF_BUILDID_DIR, or ~/.debug) holding the
    library's build id without its SDT events for the path the node
    mapped: `perf probe -x PATH sdt_erlang:...` then fails ("Failed to add
    events"). It happens with a second copy of one build (two releases, an
    upgrade into a new directory): the build id's entry names the first
    copy's path, and `perf buildid-cache --add` of the second leaves it
    without a list of SDT events."""
    bid = build_id(pid, maps)
    if bid is None:
        return
    cache = os.environ.get("PERF_BUILDID_DIR") or os.path.join(os.path.expanduser("~"), ".debug")
    link = os.path.join(cache, ".build-id", bid[:2], bid[2:])
    if not os.path.lexists(link):
        say("ok", "perf-cache", "%s has no entry for the library's build id %s: perf's recipe adds it "
            "(README)" % (cache, bid[:12]))
        return
    path = maps[0][4]
    probes = os.path.join(cache + path, bid, "probes")
    if os.path.isfile(probes) and os.path.getsize(probes) > 0:
        say("ok", "perf-cache", "%s lists the SDT events of %s (build id %s)" % (cache, path, bid[:12]))
        return
    target = os.readlink(link) if os.path.islink(link) else link
    say("warn", "perf-cache", "%s has the library's build id %s (-> %s) but no SDT events for %s: "
        "`perf probe -x %s sdt_erlang:...` fails with \"Failed to add events\" (another copy of the "
        "same build was cached first)" % (cache, bid[:12], target, path, path),
        "give perf a cache of its own (README: perf --buildid-dir \"$(mktemp -d)\"), or remove the "
        "entry: perf buildid-cache --purge %s, then add it again" % path)


def check_kernel() -> None:
    if os.path.exists("/sys/kernel/tracing/uprobe_events") or os.path.exists("/sys/kernel/debug/tracing/uprobe_events"):
        say("ok", "uprobes", "uprobe_events in tracefs")
    elif read("/proc/config.gz") is None and not os.path.isdir("/sys/kernel/tracing"):
        say("FAIL", "uprobes", "tracefs is not mounted (no /sys/kernel/tracing): bpftrace and perf "
            "cannot place uprobes", "mount -t tracefs nodev /sys/kernel/tracing")
    else:
        say("FAIL", "uprobes", "no uprobe_events: the kernel has no uprobes (CONFIG_UPROBE_EVENTS)",
            "a kernel with uprobes (every distribution kernel has them)")
    lock = read("/sys/kernel/security/lockdown")
    if lock is None:
        say("info", "lockdown", "not known (securityfs is not mounted at /sys/kernel/security)",
            "mount -t securityfs securityfs /sys/kernel/security, then run this again")
    else:
        m = re.search(r"\[(\w+)\]", lock)
        mode = m.group(1) if m else "?"
        if mode == "none":
            say("ok", "lockdown", "none")
        else:
            say("warn", "lockdown", "%s: bpf_probe_write_user is refused, so DTrace's is-enabled probes "
                "cannot work and the library registers no DOF; bpftrace, perf, gdb, SystemTap and "
                "DTrace's stapsdt provider are not affected" % mode,
                "DTrace with -p PID through priv/bin/dtrace-d")
    par = read("/proc/sys/kernel/perf_event_paranoid")
    if par is not None:
        v = par.strip()
        if os.geteuid() != 0 and v.lstrip("-").isdigit() and int(v) > 1:
            say("warn", "perf", "perf_event_paranoid %s: perf without root sees only its own processes" % v,
                "sysctl kernel.perf_event_paranoid=1, or perf as root")
        else:
            say("ok", "perf", "perf_event_paranoid %s" % v)


def version(cmd: list[str], pattern: str) -> Optional[str]:
    rc, text = run(cmd)
    if rc is None:
        return None
    m = re.search(pattern, text)
    return m.group(1) if m else text.strip().splitlines()[0] if text.strip() else "?"


def check_tracers() -> None:
    found = []
    bpftrace = os.environ.get("BPFTRACE", "bpftrace")
    if shutil.which(bpftrace):
        v = version([bpftrace, "--version"], r"v?(\d+\.\d+(?:\.\d+)?)")
        found.append("bpftrace %s" % v)
        try:
            major, minor = (int(x) for x in (v or "").split(".")[:2])
        except ValueError:
            major, minor = 0, 0
        if os.uname().machine == "x86_64" and (major, minor) < (0, 24):
            say("warn", "bpftrace", "%s reads USDT arguments arg0..arg5 only on x86_64 (\"doesn't support "
                "arg6\"): probes with more (user_trace__i4s4, efile_drv__entry, ...) need the wrapper" % v,
                "priv/bin/dtrace-bpftrace (same arguments as bpftrace) for arg6 and above")
        else:
            say("ok", "bpftrace", "%s" % v)
    dtrace = os.environ.get("DTRACE", "dtrace")
    if shutil.which(dtrace):
        # SystemTap's sys/sdt.h tool is also called dtrace; DTrace says "Sun D".
        rc, text = run([dtrace, "-V"])
        if rc == 0 and "Sun D" in text:
            found.append("DTrace (%s)" % text.strip().splitlines()[0])
    for name, cmd, pat in [("perf", ["perf", "version"], r"(\d+\.\d+(?:\.\d+)?)"),
                           ("gdb", ["gdb", "--version"], r"(\d+\.\d+(?:\.\d+)?)"),
                           ("stap", ["stap", "-V"], r"version (\d+\.\d+)"),
                           ("lttng", ["lttng", "--version"], r"(\d+\.\d+(?:\.\d+)?)")]:
        if shutil.which(cmd[0]):
            found.append("%s %s" % (name, version(cmd, pat)))
    if found:
        say("info", "tracers", ", ".join(found))
    else:
        say("FAIL", "tracers", "no tracer found (bpftrace, perf, gdb, dtrace, stap, lttng)",
            "apt-get install bpftrace")


def check_dtrace() -> None:
    if os.path.exists("/dev/dtrace/helper"):
        rc, _ = run(["pgrep", "-x", "dtprobed"])
        if rc == 0:
            say("ok", "dof", "/dev/dtrace/helper and dtprobed: the node registers its probes with DTrace "
                "(dtrace:sinks() says dof => true)")
        else:
            say("warn", "dof", "/dev/dtrace/helper but no dtprobed running: DOF is not recorded",
                "systemctl start dtprobed")
    else:
        cuse = os.path.exists("/dev/cuse")
        say("info", "dof", "no DTrace helper device (/dev/dtrace/helper)%s: DTrace sees the probes only "
            "through its stapsdt provider, per process" % ("" if cuse else "; no CUSE (/dev/cuse), so no dtprobed"),
            "DTrace with -p PID through priv/bin/dtrace-d; for OTP's erlang*:::, dtprobed (package dtrace)")


def check_application(pid: int, maps: Optional[list[Mapping]]) -> None:
    """Is the dtrace application running in the node? Asked with bpftrace:
    its automatic mode fires dtrace_vm__mode at each poll (every 100 ms)
    while a tracer listens. A library left mapped by an application that
    was stopped or unloaded by hand answers nothing: then no VM probe,
    function span or process name fires."""
    bpftrace = os.environ.get("BPFTRACE", "bpftrace")
    if not maps or not shutil.which(bpftrace) or os.geteuid() != 0:
        return
    lib = "/proc/%d/root%s" % (pid, maps[0][4])
    prog = 'usdt:%s:erlang:dtrace_vm__mode { printf("MODE %%s\\n", str(arg0)); exit(); }' % lib
    try:
        p = subprocess.run([bpftrace, "-p", str(pid), "-e", prog], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=APP_WAIT_S)
        text = p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode("utf-8", "replace")
    except OSError:
        return
    m = re.search(r"^MODE (\w+)", text, re.M)
    if m and m.group(1) == "auto":
        say("ok", "application", "the dtrace application runs; automatic mode sets the VM probes' flags")
    elif m:
        say("warn", "application", "the VM probes are in manual mode: they fire only for processes traced "
            "with {tracer, dtrace_tracer, []}", "dtrace:vm_probes(auto) in the node")
    elif "Attach" in text:  # "Attaching N probes..." before bpftrace 0.24, "Attached N probes" after
        say("warn", "application", "the library is mapped but the dtrace application does not run (stopped, "
            "or unloaded by hand): nothing answered dtrace_vm__mode in %d s, so VM probes, function spans "
            "and process names do not fire, and user probes only while the dtrace module is loaded"
            % APP_WAIT_S, "application:ensure_all_started(dtrace) in the node, or priv/bin/dtrace-attach NODE")


def check_lttng(pid: int, maps: Optional[list[Mapping]]) -> None:
    ust = any("liblttng-ust" in line for line in (read("/proc/%d/maps" % pid, "") or "").splitlines())
    rc, _ = run(["pgrep", "-x", "lttng-sessiond"])
    if rc == 0:
        say("ok", "lttng", "lttng-sessiond runs; the node %s liblttng-ust" % ("loaded" if ust else "has not loaded"))
    elif shutil.which("lttng"):
        say("info", "lttng", "no lttng-sessiond: LTTng sessions and the flight recorder need one",
            "lttng-sessiond --daemonize (as root, or as the node's user)")


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if len(argv) != 1 or not argv[0].isdigit():
        sys.stderr.write("usage: dtrace-doctor PID\n")
        return 2
    pid = int(argv[0])
    check_privileges()
    if check_process(pid):
        maps = check_library(pid)
        if maps:
            check_notes(pid, maps)
            check_application(pid, maps)
            check_perf_cache(pid, maps)
        check_lttng(pid, maps)
    check_kernel()
    check_tracers()
    check_dtrace()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
