#!/usr/bin/env python3
"""Opens a trace file in speedscope, in headless Chromium, offline, and says
what the viewer shows.

    dtrace_viewer.py --speedscope DIR [--chromium PATH] [--screenshot OUT.png]
                     [--view time-ordered|left-heavy|sandwich] [--timeout S]
                     [--size WxH] [--title T] [--lines] PROFILE_FILE

Serves speedscope's static site (DIR: scripts/viewers.sh's SPEEDSCOPE_DIR)
and PROFILE_FILE on 127.0.0.1 (an ephemeral port, a thread), starts headless
Chromium with a temporary profile and no name resolution but 127.0.0.1's,
and drives it over the DevTools protocol (python3-websocket): speedscope is
opened with #profileURL=... (and &title=... only with --title: speedscope
1.25 renames every profile to the title, so the threads' and processes'
names would be gone), and the page is polled until speedscope shows the
profile, an error, or the deadline passes.

speedscope draws its flame charts on a canvas; its Sandwich view has a DOM
table of every frame's name (a scrolled, virtual list: the table is
scrolled through to read every row). So, per profile speedscope lists (one
per thread for Chrome Trace Event JSON; the "n" key steps through them),
the Sandwich table's names are read. Prints, as JSON on stdout:

    {"title": document title,
     "format": the importer speedscope chose, as it logs it (e.g. "Trace
               Event Format profile", "collapsed stack format"),
     "profiles": [the profiles' names, as the profile selector lists them],
     "frames": [[profile 1's frame names, in table order, all], ...],
     "text": the page's innerText in the Sandwich view of each profile,
             then in the --view view (default time-ordered), joined by
             newlines: the toolbar, and the rows drawn at the top}

With --lines, the same as lines, for callers without a JSON parser (the
Erlang helper, test/support/dtrace_test_viewer.erl): "title T", "format F",
"profile I NAME", "frame I NAME" (I counts from 1), "text LINE"; newlines
in values become spaces. With --screenshot, a PNG of the --view view (the
first profile's), e.g. for a README picture. DTRACE_VIEWER_DEBUG=1 logs
each DevTools call on stderr.

Exits 2, the reason on stderr, when speedscope cannot import the file (its
alert, e.g. "Unrecognized format!", or its "Something went wrong" page,
with the page's console errors), when it imports it but no profile has a
frame (a Perfetto protobuf trace is taken for a pprof profile and shows
empty), or when nothing is shown before the deadline (--timeout, default
60 s, for the whole run); 1 on other errors.
"""

import argparse
import base64
import http.server
import json
import os
import re
import shutil
import signal
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

try:
    import websocket  # Debian's python3-websocket (websocket-client)
except ImportError:
    sys.exit("dtrace_viewer: no websocket module: run it with scripts/viewers.sh's "
             "VIEWER_PYTHON (Debian's python3 with python3-websocket)")

DEBUG = os.environ.get("DTRACE_VIEWER_DEBUG") == "1"
VIEWS = {"time-ordered": "1", "left-heavy": "2", "sandwich": "3"}


class Failure(Exception):
    """What speedscope showed instead of the profile: exit 2."""


def log(msg):
    print("dtrace_viewer: " + msg, file=sys.stderr)


# --- the HTTP server: speedscope's site at /, the profile at /profile/NAME.

def serve(site_dir, profile_path):
    # speedscope names the profile group (the page's title) after the URL's
    # last segment, undecoded: the file's name, with anything but
    # [A-Za-z0-9._-] made "_" (the extension, which some importers look
    # at, is kept).
    name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(profile_path))

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=site_dir, **kw)

        def translate_path(self, path):
            if path.split("?", 1)[0] == "/profile/" + name:
                return os.path.abspath(profile_path)
            return super().translate_path(path)

        def end_headers(self):
            self.send_header("Cache-Control", "no-store")
            super().end_headers()

        def log_message(self, *args):
            pass

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, "/profile/" + name


# --- Chromium, its DevTools endpoint and a minimal protocol client.

def start_chromium(chromium, user_data_dir, size, deadline):
    args = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
            # speedscope needs WebGL; without a GPU that is SwiftShader.
            "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
            "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
            "--user-data-dir=" + user_data_dir,
            # Offline: names resolve to nothing, and nothing runs in the
            # background that would try.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--no-first-run", "--no-default-browser-check", "--disable-sync",
            "--disable-background-networking", "--disable-component-update",
            "--disable-default-apps", "--disable-extensions", "--disable-breakpad",
            "--disable-domain-reliability", "--metrics-recording-only",
            "--mute-audio", "--hide-scrollbars", "--force-device-scale-factor=1",
            "--window-size=%d,%d" % size, "about:blank"]
    err = open(os.path.join(user_data_dir, "chromium.log"), "wb")
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                            start_new_session=True)
    port_file = os.path.join(user_data_dir, "DevToolsActivePort")
    while True:
        if proc.poll() is not None:
            raise RuntimeError("chromium exited (%s) before its DevTools port was open: %s"
                               % (proc.returncode, tail(err.name)))
        try:
            with open(port_file) as f:
                port = int(f.readline())
            break
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise Failure("chromium opened no DevTools port before the deadline: "
                          + tail(err.name))
        time.sleep(0.05)
    with urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=10) as r:
        targets = json.load(r)
    pages = [t for t in targets if t.get("type") == "page"]
    if not pages:
        raise RuntimeError("chromium has no page target: %r" % targets)
    return proc, pages[0]["webSocketDebuggerUrl"], err.name


def stop_chromium(proc):
    # Its own session: the group is chromium and its helpers, all ours.
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def tail(path, n=5):
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return "(no log)"
    lines = [line for line in lines if "dbus" not in line and "unexpected operator" not in line]
    return " | ".join(lines[-n:]) or "(nothing logged)"


class Page:
    """One page target over the DevTools protocol. Events are kept:
    alerts (speedscope's import errors) are answered and remembered,
    console errors and exceptions are remembered."""

    def __init__(self, ws_url, deadline):
        self.deadline = deadline
        # Chromium refuses DevTools websockets that carry an Origin header
        # unless told to allow it: send none.
        self.ws = websocket.create_connection(ws_url, timeout=10, suppress_origin=True)
        self.next_id = 0
        self.dialogs = []
        self.console = []
        self.formats = []
        self.waiting = "connecting to chromium"

    def call(self, method, **params):
        if DEBUG:
            log("-> %s %s" % (method, json.dumps(params)[:200]))
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise Failure("%s: not before the deadline (no answer to %s)%s"
                              % (self.waiting, method, self.console_note()))
            self.ws.settimeout(min(remaining, 10))
            try:
                msg = json.loads(self.ws.recv())
            except websocket.WebSocketTimeoutException:
                continue
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})
            self.event(msg)

    def event(self, msg):
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Page.javascriptDialogOpening":
            self.dialogs.append(params.get("message", ""))
            # Answered at once: the page is blocked until it is.
            self.ws.send(json.dumps({"id": 0, "method": "Page.handleJavaScriptDialog",
                                     "params": {"accept": True}}))
        elif method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", "")))
                            for a in params.get("args", []))
            if text.startswith("Importing as "):  # which of its importers speedscope chose
                self.formats.append(text[len("Importing as "):])
            elif params.get("type") in ("error", "warning"):
                self.console.append(text)
        elif method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            self.console.append(d.get("exception", {}).get("description") or d.get("text", ""))

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError("page script failed: %s" % r["exceptionDetails"])
        return r.get("result", {}).get("value")

    def wait(self, expr, what, interval=0.05):
        """Polls expr until it is truthy; returns its value."""
        self.waiting = what
        while True:
            v = self.eval(expr)
            if v:
                return v
            if self.dialogs:
                raise Failure("speedscope said: " + " / ".join(self.dialogs) + self.console_note())
            if time.monotonic() > self.deadline:
                raise Failure("%s: not before the deadline%s" % (what, self.console_note()))
            time.sleep(interval)

    def console_note(self):
        return ("; console: " + " / ".join(self.console[-5:])) if self.console else ""


# --- What is read off speedscope's page. Its class names are generated
# (aphrodite), so elements are found by their text and structure.

JS_HELPERS = r"""
window.__dv = {
  tab(label) {
    return [...document.querySelectorAll('div')].find(
      d => d.childNodes.length === 2 && d.lastChild.nodeType === 3 &&
           d.lastChild.textContent === label) || null;
  },
  state() {
    const body = document.body ? document.body.innerText : '';
    if (body.includes('Something went wrong')) return {error: body};
    if (this.tab('Time Order')) return {loaded: true};
    return null;
  },
  activeView() {
    for (const [label, view] of [['Time Order', 'time-ordered'],
                                 ['Left Heavy', 'left-heavy'], ['Sandwich', 'sandwich']]) {
      const t = this.tab(label);
      if (t && getComputedStyle(t).backgroundColor !== getComputedStyle(this.tab('Import')).backgroundColor)
        return view;
    }
    return null;
  },
  key(k) { window.dispatchEvent(new KeyboardEvent('keypress', {key: k, bubbles: true})); },
  // The toolbar's centre: the active profile's name and, with several
  // profiles, "(I/N)" and the profile selector (hidden until hovered, but
  // in the DOM), whose rows carry each profile's name as their title and
  // start with its number.
  profiles() {
    const filter = document.querySelector('input[placeholder="Filter..."]');
    if (filter) {
      const box = filter.parentElement.parentElement;
      const rows = [...box.querySelectorAll('[title]')].map(
        r => ({index: parseInt(r.textContent), name: r.title}));
      rows.sort((a, b) => a.index - b.index);
      const centre = filter.closest('div[style]').previousElementSibling.textContent;
      const m = /\((\d+)\/(\d+)\)\s*$/.exec(centre);
      return {names: rows.map(r => r.name), active: m ? parseInt(m[1]) : null};
    }
    // One profile: its name is a text node of the toolbar's own.
    const toolbar = this.tab('Import').parentElement.parentElement;
    const text = [...toolbar.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent);
    return {names: [text.join('')], active: 1};
  },
  // The Sandwich table's rows, scrolled through (it renders only the rows
  // near its viewport): {names: [in table order], total, missing}. A row's
  // index is its offset in the list over its height.
  async frames() {
    const raf = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
    const header = [...document.querySelectorAll('th')].find(th => th.textContent.includes('Symbol Name'));
    if (!header) return null;
    const scroller = header.closest('table').nextElementSibling;
    const content = scroller.firstElementChild;
    const seen = new Map();
    let rowH = 0;
    const read = () => {
      const top = content.getBoundingClientRect().top;
      for (const tr of scroller.querySelectorAll('tr')) {
        const tds = tr.querySelectorAll('td');
        if (tds.length !== 3) continue;
        const r = tr.getBoundingClientRect();
        rowH = r.height;
        seen.set(Math.round((r.top - top) / r.height), tds[2].textContent);
      }
    };
    const total = () => rowH ? Math.round(content.getBoundingClientRect().height / rowH) : 0;
    const covered = () => {
      if (!rowH) return scroller.querySelector('td') !== null;  // "No symbols found."
      const last = Math.min(total(), Math.ceil((scroller.scrollTop + scroller.clientHeight) / rowH));
      for (let i = Math.floor(scroller.scrollTop / rowH); i < last; i++) if (!seen.has(i)) return false;
      return true;
    };
    for (let y = 0; ; y = scroller.scrollTop + scroller.clientHeight) {
      scroller.scrollTop = y;
      for (let k = 0; k < 30; k++) { await raf(); read(); if (covered()) break; }
      if (scroller.scrollTop + scroller.clientHeight >= scroller.scrollHeight - 1) break;
    }
    scroller.scrollTop = 0; await raf();
    const n = total(), names = [], missing = [];
    for (let i = 0; i < n; i++) seen.has(i) ? names.push(seen.get(i)) : missing.push(i);
    return {names, total: n, missing: missing.length};
  },
};
true
"""


def view_key(page, view):
    page.eval("__dv.key(%s)" % json.dumps(VIEWS[view]))
    page.wait("__dv.activeView() === %s" % json.dumps(view), "switching to the %s view" % view)
    # Two animation frames: the view has drawn.
    page.eval("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))")


def inspect(page, url, view, screenshot, size):
    page.call("Page.enable")
    page.call("Runtime.enable")
    page.call("Emulation.setDeviceMetricsOverride", width=size[0], height=size[1],
              deviceScaleFactor=1, mobile=False)
    page.call("Page.navigate", url=url)
    page.wait("document.readyState === 'complete' && !!document.querySelector('script')",
              "loading speedscope's page")
    page.eval(JS_HELPERS)
    state = page.wait("__dv.state()", "speedscope showing the profile")
    if "error" in state:
        raise Failure("speedscope could not import the file: %s%s"
                      % (" ".join(state["error"].split()), page.console_note()))
    title = page.eval("document.title")
    profiles = page.eval("__dv.profiles()")
    names = profiles["names"]
    texts, frames = [], []
    view_key(page, "sandwich")
    for i in range(len(names)):
        if i > 0:
            page.eval("__dv.key('n')")
            page.wait("__dv.profiles().active === %d" % (i + 1), "switching to profile %d" % (i + 1))
            page.eval("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))")
        table = page.eval("__dv.frames()")
        if table is None:
            raise Failure("profile %d: the Sandwich view shows no table" % (i + 1))
        if table["missing"]:
            raise Failure("profile %d: %d of the Sandwich table's %d rows were never drawn"
                          % (i + 1, table["missing"], table["total"]))
        frames.append(table["names"])
        texts.append(page.eval("document.body.innerText"))
    fmt = " / ".join(page.formats)
    if not any(frames):
        raise Failure("speedscope imported the file (as %s) but shows no frame in any profile"
                      % (fmt or "an unknown format"))
    for i in range(len(names) - 1, 0, -1):  # back to the first ("n" does not wrap)
        page.eval("__dv.key('p')")
        page.wait("__dv.profiles().active === %d" % i, "switching back to profile %d" % i)
    if view != "sandwich":
        view_key(page, view)
        texts.append(page.eval("document.body.innerText"))
    if screenshot:
        shot = page.call("Page.captureScreenshot", format="png")
        with open(screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
    return {"title": title, "format": fmt, "profiles": names, "frames": frames,
            "text": "\n".join(texts)}


def print_lines(result):
    def one(s):
        return " ".join(str(s).splitlines())
    out = ["title " + one(result["title"]), "format " + one(result["format"])]
    out += ["profile %d %s" % (i + 1, one(n)) for i, n in enumerate(result["profiles"])]
    out += ["frame %d %s" % (i + 1, one(f))
            for i, fs in enumerate(result["frames"]) for f in fs]
    out += ["text " + line for line in result["text"].splitlines()]
    sys.stdout.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--speedscope", required=True, help="speedscope's static site (SPEEDSCOPE_DIR)")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--screenshot", metavar="OUT.png")
    ap.add_argument("--view", choices=sorted(VIEWS), default="time-ordered",
                    help="the view left on screen (and in --screenshot); default time-ordered")
    ap.add_argument("--size", default="1600x900", metavar="WxH",
                    help="the page's size in CSS pixels (and the screenshot's); default 1600x900")
    ap.add_argument("--title", help="speedscope's title=: names the page AND every profile "
                    "(the threads' names are lost); default: none, the file's name is the title")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds for the whole run")
    ap.add_argument("--lines", action="store_true", help="line-based output instead of JSON")
    ap.add_argument("profile")
    a = ap.parse_args()
    deadline = time.monotonic() + a.timeout
    m = re.fullmatch(r"(\d+)x(\d+)", a.size)
    if not m:
        log("--size: WIDTHxHEIGHT, e.g. 1200x600")
        return 1
    size = (int(m.group(1)), int(m.group(2)))
    if not os.path.isfile(os.path.join(a.speedscope, "index.html")):
        log("%s has no index.html: run scripts/viewers.sh" % a.speedscope)
        return 1
    if not os.path.isfile(a.profile):
        log("no such file: %s" % a.profile)
        return 1
    server, path = serve(a.speedscope, a.profile)
    base = "http://127.0.0.1:%d" % server.server_address[1]
    url = "%s/#profileURL=%s" % (base, urllib.parse.quote(base + path, safe=""))
    if a.title:
        url += "&title=" + urllib.parse.quote(a.title, safe="")
    tmp = tempfile.mkdtemp(prefix="dtrace-viewer.")
    proc = None
    try:
        proc, ws_url, chromium_log = start_chromium(a.chromium, tmp, size, deadline)
        page = Page(ws_url, deadline)
        try:
            result = inspect(page, url, a.view, a.screenshot, size)
        finally:
            page.ws.close()
    except Failure as e:
        log("%s: %s" % (a.profile, e))
        return 2
    except Exception as e:  # noqa: BLE001 - said plainly, with chromium's log
        log("%s: %s: %s (chromium: %s)" % (a.profile, type(e).__name__, e,
                                           tail(os.path.join(tmp, "chromium.log"))))
        return 1
    finally:
        if proc is not None:
            stop_chromium(proc)
        server.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    if a.lines:
        print_lines(result)
    else:
        json.dump(result, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
