"""report_triggers: the event that fired each snapshot's trigger, for
dtrace-recorder-report: the recorder's marker event for a snapshot
asked for, the first event matching a trigger's LTTng filter expression
(evaluated here over the event's fields) after it was armed for a
trigger's snapshot.
"""

import json
import re
from typing import TYPE_CHECKING, Any, Callable, Optional

from dtrace_tools.report_model import MARK_LABEL, Fields, short

if TYPE_CHECKING:
    from dtrace_tools.report_read import Snapshot

# A snapshot's triggering event: (snapshot, ts, fields, description), the
# last three None when it cannot be told.
Trigger = tuple["Snapshot", Optional[int], Optional[Fields], Optional[str]]


# -- LTTng filter expressions, to find the event that fired a trigger ------

class Unsupported(Exception):
    pass


TOKEN = re.compile(r"""\s*(?:
    (?P<num>0[xX][0-9a-fA-F]+|\d+\.\d*|\d+)
  | (?P<str>"(?:\\.|[^"\\])*")
  | (?P<ctx>\$[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_:.]*)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>&&|\|\||==|!=|<=|>=|<<|>>|[-+*/%<>!~&|^()])
)""", re.VERBOSE)


def tokenize(text: str) -> list[tuple[str, str]]:
    pos: int = 0
    out: list[tuple[str, str]] = []
    text = text.strip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise Unsupported(text[pos:])
        kind = str(m.lastgroup)
        out.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


class Filter:
    """An LTTng filter expression (C-like; string literals may hold `*'
    wildcards), evaluated over one event's fields."""

    BINARY = [["||"], ["&&"], ["|"], ["^"], ["&"], ["==", "!="], ["<", "<=", ">", ">="],
              ["<<", ">>"], ["+", "-"], ["*", "/", "%"]]

    def __init__(self, text: str, vpid: Optional[int]) -> None:
        self.tokens = tokenize(text) if text else []
        self.vpid = vpid
        self.pos = 0
        self.fields: Fields = {}

    def matches(self, fields: Fields) -> bool:
        if not self.tokens:
            return True
        self.pos, self.fields = 0, fields
        v = self.expr(0)
        if self.pos != len(self.tokens):
            raise Unsupported("trailing tokens")
        return bool(v)

    def peek(self) -> tuple[Optional[str], Optional[str]]:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else (None, None)

    def expr(self, level: int) -> Any:
        if level == len(self.BINARY):
            return self.unary()
        left = self.expr(level + 1)
        while True:
            kind, tok = self.peek()
            if kind == "op" and tok in self.BINARY[level]:
                self.pos += 1
                right = self.expr(level + 1)
                left = self.apply(tok, left, right)
            else:
                return left

    def apply(self, op: str, a: Any, b: Any) -> Any:
        if op in ("==", "!="):
            eq = self.equal(a, b)
            return eq if op == "==" else not eq
        if a is None or b is None:
            return False
        if isinstance(a, str) or isinstance(b, str):
            if op in ("<", "<=", ">", ">="):
                return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
            raise Unsupported(op)
        ops: dict[str, Callable[[], Any]] = {
            "||": lambda: bool(a) or bool(b), "&&": lambda: bool(a) and bool(b),
            "|": lambda: int(a) | int(b), "^": lambda: int(a) ^ int(b), "&": lambda: int(a) & int(b),
            "<": lambda: a < b, "<=": lambda: a <= b, ">": lambda: a > b, ">=": lambda: a >= b,
            "<<": lambda: int(a) << int(b), ">>": lambda: int(a) >> int(b),
            "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
            "/": lambda: a / b if b else 0, "%": lambda: a % b if b else 0}
        return ops[op]()

    @staticmethod
    def equal(a: Any, b: Any) -> bool:
        if isinstance(a, Literal) or isinstance(b, Literal):
            lit, other = (a, b) if isinstance(a, Literal) else (b, a)
            if other is None:
                return False
            return bool(lit.regex.fullmatch(str(other)))
        return bool(a == b)

    def unary(self) -> Any:
        kind, tok = self.peek()
        if kind == "op" and tok in ("!", "-", "~", "+"):
            self.pos += 1
            v = self.unary()
            ops: dict[str, Callable[[], Any]] = {"!": lambda: not v, "-": lambda: -v, "~": lambda: ~int(v),
                                                 "+": lambda: v}
            return ops[str(tok)]()
        return self.primary()

    def primary(self) -> Any:
        kind, tok = self.peek()
        self.pos += 1
        if tok is None:
            raise Unsupported("None")
        if kind == "num":
            return int(tok, 16) if tok.lower().startswith("0x") else (float(tok) if "." in tok else int(tok))
        if kind == "str":
            return Literal(tok[1:-1])
        if kind == "id":
            if tok not in self.fields:
                raise Unsupported(tok)
            return self.fields[tok]
        if kind == "ctx":
            if tok == "$ctx.vpid" and self.vpid is not None:
                return self.vpid
            raise Unsupported(tok)
        if kind == "op" and tok == "(":
            v = self.expr(0)
            if self.peek() != ("op", ")"):
                raise Unsupported("(")
            self.pos += 1
            return v
        raise Unsupported(str(tok))


class Literal(str):
    """A string literal of a filter: `*' matches any run of characters,
    `\\*' a star."""

    regex: "re.Pattern[str]"

    def __new__(cls, text: str) -> "Literal":
        s = str.__new__(cls, text)
        parts: list[str] = []
        i = 0
        while i < len(text):
            c = text[i]
            if c == "\\" and i + 1 < len(text):
                parts.append(re.escape(text[i + 1]))
                i += 2
                continue
            parts.append(".*" if c == "*" else re.escape(c))
            i += 1
        s.regex = re.compile("".join(parts), re.S)
        return s


# -- Triggers --------------------------------------------------------------

def trigger_events(snapshots: list["Snapshot"]) -> list[Trigger]:
    """The event that triggered each snapshot (a Trigger)."""
    out: list[Trigger] = []
    for s in snapshots:
        m = s.meta
        found: Optional[tuple[int, Fields, str]] = None
        if m.get("mark_id") is not None:
            for ts, _seq, name, f in s.events:
                if (short(name) == "user_trace_n" and f.get("label") == MARK_LABEL
                        and f.get("s1") == "dtrace_recorder" and f.get("i1") == m["mark_id"]):
                    found = (ts, f, "recorder marker: %s" % json.dumps(f.get("s2") or ""))
                    break
        elif m.get("source") == "trigger":
            vpid = int(m["os_pid"]) if str(m.get("os_pid", "")).isdigit() else None
            best: Optional[tuple[int, Fields, str]] = None
            fallback: Optional[tuple[int, Fields, str]] = None
            for t in m.get("triggers", []):
                flt: Optional[Filter]
                try:
                    flt = Filter(t.get("filter", ""), vpid)
                except Unsupported:
                    flt = None
                for ts, _seq, name, f in s.events:
                    if name != t["event"]:
                        continue
                    try:
                        ok = flt.matches(f) if flt else True
                    except Unsupported:
                        ok = True
                    if not ok:
                        continue
                    fallback = (ts, f, name)
                    if ts >= t.get("armed_at_ns", 0):
                        if best is None or ts < best[0]:
                            best = (ts, f, "%s when %s" % (short(name), t.get("filter") or "any"))
                        break
            if best is None and fallback is not None:
                best = (fallback[0], fallback[1], "%s (the last matching event)" % short(fallback[2]))
            found = best
        if found:
            ts, f, text = found
            out.append((s, ts, f, text))
        else:
            out.append((s, None, None, None))
    return out
