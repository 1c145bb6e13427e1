"""report_read: the snapshots dtrace-recorder-report reads, through
babeltrace2's Python bindings (Debian: python3-bt2; recorder_report's
docstring says why the bindings): each snapshot's events with their
payloads and times, its discarded events, and the dtrace-recorder.json
sidecar the recorder writes next to LTTng's files.

`import_bt2` finds the bindings in the tool's Python, else in Debian's
/usr/lib/python3/dist-packages (where python3-bt2 puts them, for Debian's
python3: a venv's Python of the same version loads them too); without
them the tool exits with status 3, as recorder_report's docstring says
(dtrace_recorder_report:report/2 reads that status).
"""

import json
import os
import sys
from types import ModuleType
from typing import Any, Optional, cast

from dtrace_tools.report_model import Fields

SIDECAR = "dtrace-recorder.json"
# Where Debian's python3-bt2 installs the bindings.
DEBIAN_DIST = "/usr/lib/python3/dist-packages"

# An event: (ns from the clock's origin, sequence number, name, fields).
Event = tuple[int, int, str, Fields]

bt2: Any = None


def import_bt2(dist: str = DEBIAN_DIST) -> Optional[ModuleType]:
    """babeltrace2's bindings (the module bt2), from this Python's path, else
    from dist (appended to the path only if they load from there); None
    where neither has them."""
    try:
        import bt2 as found
        return cast(ModuleType, found)
    except ImportError:
        pass
    if dist in sys.path or not os.path.isdir(os.path.join(dist, "bt2")):
        return None
    sys.path.append(dist)
    try:
        import bt2 as found
        return cast(ModuleType, found)
    except ImportError:
        sys.path.remove(dist)
        for name in [m for m in sys.modules if m == "bt2" or m.startswith("bt2.")]:
            del sys.modules[name]
        return None


def need_bt2() -> None:
    """Sets `bt2`, or exits with status 3 saying how to get it."""
    global bt2
    if bt2 is None:
        bt2 = import_bt2(DEBIAN_DIST)
    if bt2 is None:
        sys.stderr.write(
            "dtrace-recorder-report: babeltrace2's Python bindings (bt2) are missing for %s (Python %d.%d): "
            "apt-get install python3-bt2 (Debian, Ubuntu), then run it with the Python they are built "
            "for: DTRACE_PYTHON=/usr/bin/python3 priv/bin/dtrace-recorder-report ..., or with a venv made "
            "by /usr/bin/python3 -m venv --system-site-packages DIR (activated, or DTRACE_PYTHON=DIR/bin/python)\n"
            % (sys.executable, sys.version_info[0], sys.version_info[1]))
        sys.exit(3)


def field_value(f: Any) -> Any:
    if isinstance(f, bt2._IntegerFieldConst):
        return int(f)
    if isinstance(f, bt2._StringFieldConst):
        s = str(f)
        return None if s == "(null)" else s
    try:
        return float(f)
    except (TypeError, ValueError):
        return str(f)


class Snapshot:
    def __init__(self, path: str, index: int) -> None:
        self.path = path
        self.index = index
        self.meta: dict[str, Any] = {}
        self.events: list[Event] = []
        self.discarded = 0
        self.hostname = "?"
        self.vpid: Optional[int] = None
        meta_path = os.path.join(path, SIDECAR)
        if os.path.exists(meta_path):
            with open(meta_path, encoding="utf-8") as f:
                self.meta = json.load(f)

    def read(self) -> None:
        need_bt2()
        try:
            it = bt2.TraceCollectionMessageIterator(self.path)
        except Exception as e:  # babeltrace2 finds no trace there
            raise NoTrace("%s: %s" % (self.path, e))
        try:
            fast: Optional[FastPayload] = FastPayload()
        except AttributeError:
            fast = None
        seq = 0
        event_msg, discarded_msg = bt2._EventMessageConst, bt2._DiscardedEventsMessageConst
        # Per stream class: the thread contexts its events carry (vtid on
        # user-space events, tid on kernel ones: report_kernel), read only
        # where there are.
        threads: dict[int, list[str]] = {}
        for msg in it:
            t = type(msg)
            if t is event_msg:
                ev = msg.event
                if fast is not None:
                    name, fields = fast.read(ev)
                else:
                    name = ev.name
                    fields = {k: field_value(v) for k, v in ev.payload_field.items()}
                sc = ev.stream.cls
                ctx_names = threads.get(sc.addr)
                if ctx_names is None:
                    fc = sc.event_common_context_field_class
                    ctx_names = threads[sc.addr] = [n for n in ("vtid", "tid") if fc is not None and n in fc]
                if ctx_names:
                    ctx = ev.common_context_field
                    for n in ctx_names:
                        fields["_" + n] = int(ctx[n])
                if seq == 0:
                    env = ev.stream.trace.environment
                    self.hostname = str(env["hostname"]) if "hostname" in env else "?"
                    ctx = ev.common_context_field
                    if ctx is not None and "vpid" in ctx:
                        self.vpid = int(ctx["vpid"])
                self.events.append((msg.default_clock_snapshot.ns_from_origin, seq, name, fields))
                seq += 1
            elif t is discarded_msg:
                self.discarded += msg.count or 0

    @property
    def node(self) -> str:
        if "node" in self.meta:
            return str(self.meta["node"])
        return "%s/%s" % (self.hostname, self.vpid if self.vpid is not None else "?")


class FastPayload:
    """Reads an event's payload through babeltrace2's own SWIG layer
    (bt2.native_bt, shipped with python3-bt2): about 10 us an event here,
    against 150 us through the field objects of the public API, which
    build several Python objects per field. The field layout is looked up
    once per event class. Falls back to the public API (AttributeError)
    where this layer differs."""

    def __init__(self) -> None:
        native_bt = bt2.native_bt
        self.nb = native_bt
        self.member = native_bt.field_structure_borrow_member_field_by_index_const
        self.payload = native_bt.event_borrow_payload_field_const
        self.signed = native_bt.field_integer_signed_get_value
        self.unsigned = native_bt.field_integer_unsigned_get_value
        self.string = native_bt.field_string_get_value
        self.classes: dict[int, tuple[str, list[tuple[str, int]]]] = {}

    def read(self, ev: Any) -> tuple[str, Fields]:
        cls = ev.cls
        spec = self.classes.get(cls.addr)
        if spec is None:
            members = []
            for name, m in cls.payload_field_class.items():
                fc = m.field_class
                if isinstance(fc, bt2._StringFieldClassConst):
                    kind = 2
                elif isinstance(fc, bt2._SignedIntegerFieldClassConst):
                    kind = 0
                elif isinstance(fc, bt2._UnsignedIntegerFieldClassConst):
                    kind = 1
                else:
                    kind = 3
                members.append((name, kind))
            spec = (cls.name, members)
            self.classes[cls.addr] = spec
        name, members = spec
        sp = self.payload(ev._ptr)
        fields: Fields = {}
        for i, (fname, kind) in enumerate(members):
            fp = self.member(sp, i)
            v: Any
            if kind == 0:
                v = self.signed(fp)
            elif kind == 1:
                v = self.unsigned(fp)
            elif kind == 2:
                v = self.string(fp)
                if v == "(null)":
                    v = None
            else:
                v = field_value(ev.payload_field[fname])
            fields[fname] = v
        return name, fields


class NoTrace(Exception):
    pass
