#!/usr/bin/env python3
"""Drives `treespec serve`'s chat page in headless Chromium (ChatPage.* in
test_server_chat_page.cpp). Talks the DevTools protocol over --remote-debugging-pipe
(fds 3 and 4, NUL-separated JSON), so it needs nothing but python3 and chromium.

usage: chat_page_browser.py CHROMIUM URL SCENARIO.json
SCENARIO: {"turns": [{"message", "method", "temperature", "max_tokens", "stop": bool}]}
Types each message with the keyboard (Enter sends), waits for the streamed answer (or
presses Stop once the first text has arrived), and prints one JSON object:
{"turns": [{"answer", "stats", "content_events", "streaming_seen", "error"}], "methods",
"console_errors"} (TREESPEC_CHAT_SCREENSHOT=FILE.png also saves the page). Exit 77 with "SKIP: why" when Chromium cannot start; 1 on a failure.
"""
import json
import os
import select
import subprocess
import sys
import tempfile
import time


class Browser:
    def __init__(self, chromium, profile):
        # The pipe ends go to fds 3 (commands) and 4 (replies) in the child; they are
        # first moved above 10 so that dup2 cannot overwrite one with the other.
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        hi_cmd_r, hi_res_w = os.dup2(cmd_r, 20), os.dup2(res_w, 21)

        def child_fds():
            os.dup2(hi_cmd_r, 3)
            os.dup2(hi_res_w, 4)

        args = [chromium, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-sync", "--mute-audio",
                "--user-data-dir=" + profile, "about:blank"]
        self.proc = subprocess.Popen(args, pass_fds=(3, 4), preexec_fn=child_fds, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for fd in (cmd_r, res_w, hi_cmd_r, hi_res_w):
            os.close(fd)
        self.w, self.r = cmd_w, res_r
        self.buf = b""
        self.next_id = 0
        self.events = []

    def _read_message(self, timeout):
        while b"\0" not in self.buf:
            ready, _, _ = select.select([self.r], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self.r, 1 << 16)
            if not chunk:
                raise EOFError("chromium closed the DevTools pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, session=None, timeout=30.0):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = self._read_message(max(0.0, deadline - time.time()))
            if m is None:
                break
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            self.events.append(m)
        raise TimeoutError("no reply to " + method)

    def close(self):
        try:
            self.call("Browser.close", timeout=5.0)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Page:
    def __init__(self, browser, url):
        self.b = browser
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.s = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        browser.call("Runtime.enable", session=self.s)
        browser.call("Page.enable", session=self.s)
        browser.call("Page.navigate", {"url": url}, session=self.s)

    def js(self, expr):
        r = self.b.call("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True},
                        session=self.s)
        if "exceptionDetails" in r:
            raise RuntimeError("page script failed: %s" % json.dumps(r["exceptionDetails"])[:500])
        return r["result"].get("value")

    def wait(self, expr, timeout, what):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if self.js(expr):
                    return
            except RuntimeError:
                pass  # the page is still loading
            time.sleep(0.01)
        raise TimeoutError("timed out after %.0f s waiting for %s" % (timeout, what))

    def type_and_send(self, text):
        self.js("document.getElementById('input').focus()")
        self.b.call("Input.insertText", {"text": text}, session=self.s)
        for kind in ("keyDown", "keyUp"):
            self.b.call("Input.dispatchKeyEvent", {"type": kind, "key": "Enter", "code": "Enter",
                                                   "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13},
                        session=self.s)

    def console_errors(self):
        out = []
        for e in self.b.events:
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(json.dumps(e["params"]["exceptionDetails"])[:300])
            elif e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") == "error":
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in e["params"]["args"]))
        return out


def run_turn(page, turn, index):
    settings = {"temperature": turn.get("temperature", 0), "max-tokens": turn.get("max_tokens", 64),
                "method": turn.get("method", "")}
    for k, v in settings.items():
        if v != "":
            page.js("(() => { const e = document.getElementById(%s); e.value = %s; "
                    "e.dispatchEvent(new Event('change')); return e.value; })()" % (json.dumps(k), json.dumps(str(v))))
    page.type_and_send(turn["message"])
    page.wait("document.querySelectorAll('.msg.assistant').length > %d" % index, 10, "the answer bubble")
    last = "[...document.querySelectorAll('.msg.assistant')].at(-1)"
    streaming_seen = False
    if turn.get("stop"):
        page.wait("%s.querySelector('.text').textContent.length > 0" % last, 30, "the first streamed text")
        streaming_seen = page.js("document.body.dataset.state") == "streaming"
        page.js("document.getElementById('stop').click()")
    deadline = time.time() + 120
    while time.time() < deadline:
        st = page.js("[document.body.dataset.state, %s.querySelector('.text').textContent.length]" % last)
        if st[0] == "streaming" and st[1] > 0:
            streaming_seen = True
        if st[0] == "idle":
            break
        time.sleep(0.005)
    else:
        raise TimeoutError("the answer did not finish within 120 s")
    r = page.js("(() => { const d = %s; const s = d.querySelector('.stats'); return {answer: "
                "d.querySelector('.text').textContent, stats: s ? s.textContent : null, content_events: "
                "Number(d.dataset.contentEvents || 0), error: d.classList.contains('error')}; })()" % last)
    r["streaming_seen"] = streaming_seen
    return r


def main():
    chromium, url, scenario = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
    with tempfile.TemporaryDirectory(prefix="treespec-chromium-") as profile:
        try:
            b = Browser(chromium, profile)
            b.call("Browser.getVersion", timeout=60.0)
        except Exception as e:  # chromium missing, or it cannot start here (no namespaces, ...)
            err = ""
            try:
                b.proc.kill()
                err = b.proc.stderr.read().decode(errors="replace")[-600:]
            except Exception:
                pass
            print("SKIP: headless chromium (%s) did not start: %s %s" % (chromium, e, err.strip()))
            return 77
        try:
            page = Page(b, url)
            page.wait("document.body && document.body.dataset.state === 'idle'", 30, "the page to load /props")
            out = {"methods": page.js("[...document.getElementById('method').options].map((o) => o.value)"),
                   "turns": []}
            for i, turn in enumerate(scenario["turns"]):
                out["turns"].append(run_turn(page, turn, i))
            out["console_errors"] = page.console_errors()
            if os.environ.get("TREESPEC_CHAT_SCREENSHOT"):  # for a person debugging the page
                import base64
                png = b.call("Page.captureScreenshot", {"format": "png"}, session=page.s)["data"]
                open(os.environ["TREESPEC_CHAT_SCREENSHOT"], "wb").write(base64.b64decode(png))
            print(json.dumps(out))
            return 0
        finally:
            b.close()


if __name__ == "__main__":
    sys.exit(main())
