"""native: the native code a node's thread blocks in, read live from /proc
(root), for why_os's `blocked': while a scheduler thread sleeps in a
system call, /proc/PID/task/TID/syscall gives its user stack pointer and
program counter; its stack, read through /proc/PID/mem, holds the return
addresses of the functions on the way there. Without frame pointers
(glibc, Rust's release builds) the stack is scanned: a word that points
into an executable file mapping, just after a call instruction, is taken
as a return address, and named from that file's ELF symbols (.symtab, else
.dynsym). The frame reported (`nif_frame') is the innermost one outside
the C library, the loader and language runtimes (Rust's std, core):
for a NIF that blocks, a function of the NIF's library (its name is the
native one: `dtrace_nif::test_hooks::test_block'); for a BIF or the VM
itself, beam.smp's.

A heuristic, as any stack scan: a stale return address left on the stack
can be named. Reading is bounded (STACK_BYTES of stack, FRAMES frames).
x86_64 and aarch64, ELF64 little-endian only; elsewhere nothing is named.
"""

import os
import re
import struct
from typing import BinaryIO, Optional

STACK_BYTES = 16384
FRAMES = 24
ARM = os.uname().machine in ("aarch64", "arm64")
# x86_64's numbers of the system calls a thread commonly blocks in.
X86_64 = {"read": 0, "write": 1, "poll": 7, "ioctl": 16, "pread64": 17, "pwrite64": 18, "select": 23,
          "nanosleep": 35, "connect": 42, "accept": 43, "sendto": 44, "recvfrom": 45, "wait4": 61, "flock": 73,
          "fsync": 74, "fdatasync": 75, "futex": 202, "clock_nanosleep": 230, "epoll_wait": 232,
          "openat": 257, "ppoll": 271, "epoll_pwait": 281, "accept4": 288}

# Objects whose frames say nothing of the blocking code (the C library,
# the loader, the vDSO, runtimes).
PLUMBING = re.compile(r"^(?:libc[.-]|ld-linux|ld64|libpthread|libgcc|libstdc\+\+|libm[.-]|\[vdso\])")
RUNTIME = re.compile(r"^(?:std::|core::|alloc::|__rust|rust_|_ZN3std|_ZN4core|_ZN5alloc|rustler::|"
                     r"dtrace_nif::nif::|__GI_|__libc_|__nanosleep|__clock_nanosleep)")
VM = re.compile(r"^beam(?:\.smp|\.debug\.smp|\.emu\.smp)?$")

# A mapping: (start, end, file offset, path).
Mapping = tuple[int, int, int, str]
# A frame: (address, object path, symbol or None).
Frame = tuple[int, str, Optional[str]]


def demangle(name: str) -> str:
    """Rust's legacy mangling and C++'s plain nested names, made readable
    (`_ZN10dtrace_nif10test_hooks10test_block17h0123456789abcdefE' ->
    `dtrace_nif::test_hooks::test_block'); anything else as it is."""
    if not name.startswith("_Z"):
        return name
    body, nested = (name[3:], True) if name.startswith("_ZN") else (name[2:], False)
    parts, at = [], 0
    while at < len(body) and body[at].isdigit():
        m = re.match(r"\d+", body[at:])
        assert m is not None
        n = int(m.group(0))
        at += len(m.group(0))
        parts.append(body[at:at + n])
        at += n
        if not nested:
            break
    if not parts:
        return name
    if re.fullmatch(r"h[0-9a-f]{16}", parts[-1]):
        parts.pop()
    return "::".join((p[1:] if p.startswith("_$") else p).replace("$LT$", "<").replace("$GT$", ">")
                     .replace("$u20$", " ").replace("$RF$", "&").replace("..", "::") for p in parts)


class Symbols:
    """An ELF file's function symbols, by address in the file's own
    virtual addresses, and its loadable segments (file offset to address)."""

    def __init__(self, path: str) -> None:
        self.funcs: list[tuple[int, int, str]] = []  # (value, size, name), by value
        self.loads: list[tuple[int, int, int]] = []  # (offset, vaddr, filesz)
        try:
            with open(path, "rb") as f:
                data = f.read(64 * 1024 * 1024)
        except OSError:
            return
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            return
        phoff, shoff = struct.unpack_from("<QQ", data, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 54)
        for k in range(phnum):
            p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", data,
                                                                                     phoff + k * phentsize)
            if p_type == 1:
                self.loads.append((p_offset, p_vaddr, p_filesz))
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * shentsize) for k in range(shnum)]
        for want in (2, 11):  # SHT_SYMTAB, else SHT_DYNSYM
            tables = [s for s in sections if s[1] == want]
            if not tables:
                continue
            sym = tables[0]
            strtab = sections[sym[6]]
            for k in range(sym[5] // 24):
                st_name, st_info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, sym[4] + k * 24)
                if st_info & 0xF != 2 or shndx == 0 or value == 0:
                    continue
                start = strtab[4] + st_name
                name = data[start:data.index(b"\0", start)].decode("utf-8", "replace")
                self.funcs.append((value, size, name))
            if self.funcs:
                break
        self.funcs.sort()

    def name(self, file_offset: int) -> Optional[str]:
        """The function at a file offset, demangled, with `+0xOFF' when it
        is not its start."""
        vaddr = next((file_offset - off + va for off, va, size in self.loads if off <= file_offset < off + size),
                     None)
        if vaddr is None or not self.funcs:
            return None
        lo, hi = 0, len(self.funcs)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.funcs[mid][0] <= vaddr:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return None
        value, size, name = self.funcs[lo - 1]
        if size and vaddr >= value + size:
            return None
        return demangle(name)


class Reader:
    """Native frames of a node's threads, read live (root), its objects'
    symbols remembered."""

    def __init__(self, root: str = "/") -> None:
        self.root = root
        self._symbols: dict[tuple[str, int], Symbols] = {}

    def frames(self, pid: int, tid: int, syscall: Optional[str] = None) -> Optional[list[Frame]]:
        """Thread tid's native frames (program counter first, then return
        addresses, innermost first) while it is in a system call (that one,
        when named and its number known); None when it is not, or cannot be
        read. The first frame's symbol is preceded by the system call's
        number, as `#230' in its path (same_call reads it)."""
        task = os.path.join(self.root, "proc", str(pid), "task", str(tid))
        try:
            with open(os.path.join(task, "syscall"), encoding="ascii") as f:
                fields = f.read().split()
            maps = _maps(os.path.join(self.root, "proc", str(pid), "maps"))
            if len(fields) < 9 or fields[0] in ("running", "-1"):
                return None
            if not ARM and syscall in X86_64 and int(fields[0]) != X86_64[syscall]:
                return None
            sp, pc = int(fields[-2], 16), int(fields[-1], 16)
            with open(os.path.join(self.root, "proc", str(pid), "mem"), "rb") as mem:
                stack = next(((s, e) for s, e, _o, p in maps if s <= sp < e), None)
                if stack is None:
                    return None
                mem.seek(sp)
                words = mem.read(min(STACK_BYTES, stack[1] - sp))
                found: list[Frame] = [(0, "#%s" % fields[0], None), self._frame(pc, maps)]
                for k in range(0, len(words) - 7, 8):
                    (addr,) = struct.unpack_from("<Q", words, k)
                    m = _mapping(addr, maps)
                    if m is None or not _after_call(mem, addr):
                        continue
                    found.append(self._frame(addr, maps))
                    if len(found) >= FRAMES:
                        break
                return found
        except (OSError, ValueError):
            return None

    def _frame(self, addr: int, maps: list[Mapping]) -> Frame:
        m = _mapping(addr, maps)
        if m is None:
            return addr, "?", None
        start, _end, offset, path = m
        try:
            st = os.stat(os.path.join(self.root, path.lstrip("/")))
            key = (path, st.st_ino)
        except OSError:
            return addr, path, None
        if key not in self._symbols:
            if len(self._symbols) > 256:
                self._symbols.clear()
            self._symbols[key] = Symbols(os.path.join(self.root, path.lstrip("/")))
        return addr, path, self._symbols[key].name(addr - start + offset)

    def blocked_in(self, pid: int, tid: int, syscall: Optional[str] = None) -> Optional[str]:
        """The native function thread tid blocks in (nif_frame), or None;
        None too when it is now in another system call than `syscall'
        (x86_64's numbers of the common blocking ones are known)."""
        found = self.frames(pid, tid, syscall)
        return nif_frame(found) if found else None


def same_call(frames: list[Frame], syscall: str) -> bool:
    """Whether frames were read in `syscall' (x86_64's common ones are
    known by number; any other is taken to be)."""
    nr = frames[0][1][1:] if frames and frames[0][1].startswith("#") else None
    return ARM or syscall not in X86_64 or nr is None or nr == str(X86_64[syscall])


def nif_frame(frames: list[Frame]) -> Optional[str]:
    """`dtrace_nif::test_hooks::test_block (dtrace_nif.so)': the innermost
    frame outside the C library, the loader, runtimes and the VM; else the
    innermost of beam.smp's (the VM's own code blocks). The VM calls a NIF,
    so beam.smp's real frames are outer to the NIF's: one read inner to a
    NIF's is a stale word of the scan or the
    NIF inside an enif_ call, where the NIF is the answer too."""
    vm: Optional[str] = None
    for _addr, path, sym in frames:
        obj = os.path.basename(path)
        if path == "?" or path.startswith("#") or PLUMBING.match(obj):
            continue
        if sym is not None and (RUNTIME.match(sym) or _v0_runtime(sym)):
            continue
        if VM.match(obj):
            vm = vm or "the VM's %s" % (sym or obj)
            continue
        return "%s (%s)" % (sym or "?", obj)
    return vm


def _v0_runtime(sym: str) -> bool:
    """A Rust v0 symbol (`_RNv...Cs..._3std6thread...') of std, core or alloc."""
    m = re.match(r"_R[A-Za-z0-9]*?C(?:s[0-9a-zA-Z]*_)?(\d+)", sym)
    if not m:
        return False
    n, at = int(m.group(1)), m.end()
    return sym[at:at + n] in ("std", "core", "alloc")


def _maps(path: str) -> list[Mapping]:
    """The executable file mappings and the stacks of /proc/PID/maps."""
    out: list[Mapping] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.split(None, 5)
            if len(fields) < 5:
                continue
            name = fields[5].strip() if len(fields) > 5 else ""
            if "x" not in fields[1] and not name.startswith("[stack") and name:
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            out.append((start, end, int(fields[2], 16), name))
    return out


def _mapping(addr: int, maps: list[Mapping]) -> Optional[Mapping]:
    for m in maps:
        if m[0] <= addr < m[1] and m[3].startswith("/"):
            return m
    return None


def _after_call(mem: BinaryIO, addr: int) -> bool:
    """Whether the code before addr ends with a call (x86_64: e8 rel32,
    ff /2; aarch64: bl, blr)."""
    try:
        mem.seek(addr - 7)
        b = mem.read(7)
    except (OSError, ValueError, OverflowError):
        return False
    if len(b) != 7:
        return False
    if ARM:
        insn = int.from_bytes(b[3:7], "little")
        return (insn & 0xFC000000) == 0x94000000 or (insn & 0xFFFFFC1F) == 0xD63F0000
    if b[2] == 0xE8:
        return True
    if b[5] == 0xFF and (b[6] & 0x38) == 0x10:
        return True
    if b[4] == 0xFF and (b[5] & 0x38) == 0x10:
        return True
    return b[1] == 0xFF and (b[2] & 0x38) == 0x10
