"""report_svg: the SVG timeline dtrace-recorder-report writes (lanes per
node and process, spans and file operations as bars, the trigger marked),
which a browser opens.
"""

import html
from typing import Optional

from dtrace_tools.report_model import Item, describe, ms
from dtrace_tools.report_triggers import Trigger


PALETTE = ["#4e79a7", "#59a14f", "#9c755f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#bab0ac",
           "#86bcb6", "#8cd17d", "#499894", "#d37295"]


def svg(path: str, items: list[Item], shown: list[Optional[str]], ref: int, trig: list[Trigger],
        trigger_tags: list[str]) -> None:
    """Two panels: around the trigger (every span and file operation of
    that moment, the shown tags in colour, the others grey), then the whole
    history of the shown tags."""
    marks = [(ts, s.node) for s, ts, _f, _t in trig if ts is not None]
    color = {t: PALETTE[k % len(PALETTE)] for k, t in enumerate(shown)}
    ops = [i for i in items if i.what in ("span", "file")]
    # The zoom: the triggering tag's work that ends near the trigger.
    if marks:
        t_ref = min(t for t, _ in marks)
        mine = [i for i in ops if i.tag in trigger_tags and i.start <= t_ref + 1_000_000
                and (i.end or t_ref) >= t_ref - 1_000_000_000]
        near = [i for i in mine if (i.end or t_ref) >= t_ref - 50_000_000] or mine
        z0 = min([i.start for i in near] + [t_ref - 100_000_000 if not near else t_ref])
        z1 = t_ref
        pad = max((z1 - z0) // 8, 200_000)
        z0, z1 = z0 - pad, z1 + pad
    else:
        t_last = max((i.end or i.start for i in ops), default=ref)
        z0, z1 = t_last - 100_000_000, t_last
    zoom = [i for i in items if i.what in ("span", "file", "mark") and i.start <= z1 and (i.end or i.start) >= z0]
    zoom = zoom[:3000]
    whole = [i for i in items if i.tag in shown and i.what in ("span", "file", "mark", "probe")]
    if whole:
        w0 = min([i.start for i in whole] + [t for t, _ in marks])
        w1 = max([(i.end or i.start) for i in whole] + [t for t, _ in marks])
    else:
        w0, w1 = z0, z1
    left, width, lane_h = 300, 1200, 20
    o: list[str] = []
    y = 24
    y = panel(o, y, "Around the trigger: every span and file operation, the report's tags in colour",
              zoom, z0, z1, ref, marks, color, left, width, lane_h)
    y = panel(o, y + 30, "The whole snapshot(s): the report's tags", whole, w0, w1, ref, marks, color,
              left, width, lane_h)
    # Legend: the colour of each tag.
    lx = 10
    for tag in shown:
        label = "untagged" if tag is None else tag
        o.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/>' % (lx, y + 6, color.get(tag, "#999")))
        o.append('<text x="%d" y="%d">%s</text>' % (lx + 14, y + 15, html.escape(label[:40])))
        lx += 24 + 7 * min(len(label), 40)
        if lx > left + width - 100:
            break
    o.append('<rect x="%d" y="%d" width="10" height="10" fill="#ccc"/><text x="%d" y="%d">other tags</text>'
             % (lx, y + 6, lx + 14, y + 15))
    head = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="monospace" font-size="11">'
            % (left + width + 40, y + 30),
            '<rect width="100%" height="100%" fill="white"/>',
            '<text x="10" y="16" font-size="13">dtrace flight recorder: lanes are (node, process); '
            'spans solid (under a span: its process scheduled out in grey, in GC in orange), '
            'file operations outlined; red: the trigger; hover a bar for its details</text>']
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(head + o + ["</svg>"]) + "\n")


def panel(o: list[str], y0: int, title: str, rows: list[Item], t0: int, t1: int, ref: int,
          marks: list[tuple[int, str]], color: dict[Optional[str], str], left: int, width: int,
          lane_h: int) -> int:
    if t1 <= t0:
        t1 = t0 + 1_000_000
    lanes = sorted({(i.node, i.proc or "?") for i in rows})[:60]
    lane_of = {key: k for k, key in enumerate(lanes)}
    top = y0 + 40
    bottom = top + lane_h * max(1, len(lanes))

    def x(t: int) -> float:
        return left + (min(max(t, t0), t1) - t0) * width / (t1 - t0)
    o.append('<text x="10" y="%d" font-size="12" font-weight="bold">%s (%.3f ms)</text>'
             % (y0 + 14, html.escape(title), ms(t1 - t0)))
    # Time axis, in ms from the trigger.
    span_ms = ms(t1 - t0)
    step = 10 ** int(f"{span_ms / 8:e}".split("e")[1])
    for mult in (1, 2, 5, 10):
        if span_ms / (step * mult) <= 10:
            step *= mult
            break
    tick = (int(ms(t0 - ref) / step) - 1) * step
    while tick <= ms(t1 - ref):
        tx = left + (ref + tick * 1e6 - t0) * width / (t1 - t0)
        if left <= tx <= left + width:
            o.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (tx, top - 6, tx, bottom))
            o.append('<text x="%.1f" y="%d" text-anchor="middle">%g ms</text>' % (tx, bottom + 14, round(tick, 6)))
        tick += step
    for n, (node, proc) in enumerate(lanes):
        y = top + n * lane_h
        o.append('<text x="%d" y="%d">%s</text>' % (5, y + 14, html.escape("%s %s" % (node, proc))))
        o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#eee"/>' % (left, y + lane_h, left + width, y + lane_h))
    for i in rows:
        k = lane_of.get((i.node, i.proc or "?"))
        if k is None:
            continue
        y = top + k * lane_h
        c = color.get(i.tag, "#ccc")
        title = html.escape("%s | tag %s | %s %s | at %+.3f ms%s" % (
            describe(i).replace("  ", ""), i.tag, i.node, i.proc, ms(i.start - ref),
            " | %.3f ms" % ms(i.duration) if i.duration is not None and i.what in ("span", "file") else ""))
        if i.what in ("span", "file"):
            x0, x1 = x(i.start), x(i.end if i.end is not None else t1)
            wdt = max(1.0, x1 - x0)
            inset = min(2 + (i.depth if i.what == "span" else 1), 7)
            if i.what == "span":
                o.append('<rect x="%.2f" y="%.1f" width="%.2f" height="%.1f" fill="%s" opacity="0.85">'
                         '<title>%s</title></rect>' % (x0, y + inset, wdt, lane_h - 2 * inset, c, title))
                # Its process scheduled out (grey) and collecting (orange).
                b = i.why
                for s0, s1, what, mfa in (b.intervals if b is not None and i.depth == 0 else [])[:200]:
                    if s1 < t0 or s0 > t1:
                        continue
                    ix0, ix1 = x(s0), x(s1)
                    if ix1 - ix0 < 0.5:
                        continue
                    tip = html.escape("%s %.3f ms%s" % ("scheduled out" if what == "out" else "GC",
                                                        ms(s1 - s0), " in %s" % mfa if mfa else ""))
                    o.append('<rect x="%.2f" y="%.1f" width="%.2f" height="%.1f" fill="%s" opacity="0.9">'
                             '<title>%s</title></rect>'
                             % (ix0, y + lane_h - inset - 4, ix1 - ix0, 4, "#777" if what == "out" else "#f28e2b",
                                tip))
            else:
                o.append('<rect x="%.2f" y="%.1f" width="%.2f" height="%.1f" fill="white" fill-opacity="0.6" '
                         'stroke="%s" stroke-width="2"><title>%s</title></rect>'
                         % (x0, y + inset, wdt, lane_h - 2 * inset, c, title))
            if wdt > 50:
                label = i.kind if i.what == "span" else i.command
                o.append('<text x="%.1f" y="%d" font-size="10">%s</text>'
                         % (x0 + 3, y + 14, html.escape(str(label))[: int(wdt / 6)]))
        else:
            xx = x(i.start)
            o.append('<line x1="%.2f" y1="%d" x2="%.2f" y2="%d" stroke="%s" stroke-width="1.5"><title>%s</title></line>'
                     % (xx, y + 2, xx, y + lane_h - 2, c, title))
    last_x = None
    for ts, node in sorted(marks):
        if not t0 <= ts <= t1:
            continue
        tx = x(ts)
        o.append('<line x1="%.2f" y1="%d" x2="%.2f" y2="%d" stroke="red" stroke-width="2"/>'
                 % (tx, top - 12, tx, bottom))
        if last_x is None or abs(tx - last_x) > 150:
            right = tx > left + width * 0.7
            o.append('<text x="%.2f" y="%d" fill="red" text-anchor="%s">trigger (%s)</text>'
                     % (tx - 3 if right else tx + 3, top - 14, "end" if right else "start", html.escape(node)))
            last_x = tx
    return bottom + 20
