#!/usr/bin/env python3
"""Checks a `ctxlab report` page in a real headless Chromium (Debian's chromium).

    report_checks.py REPORT.html WORKDIR [--expect-charts N] [--expect-diff KEY ...]

* the page is self-contained: no <script src>, no <link>, no http(s) URL loaded;
* it loads with no console message at all (chromium --enable-logging=stderr prints every console
  message as a CONSOLE line) and no error caught by the page's own window.onerror /
  console.error hook (#status data-errors, #errors);
* every chart was drawn (#status data-rendered == data-charts == N) and holds data: each chart's
  data-points attribute, written by the page from dygraphs' own rows after drawing, is > 0;
* the config-difference table lists the keys given with --expect-diff;
* a screenshot is taken, decodes as a PNG, and is not blank (many non-white pixels, many colours).
Then the same checks run on a copy of the page with a broken script injected, and must fail there
(the checker itself is tested). Chromium is required (scripts/setup.sh installs it): missing, the
test FAILS unless CTXLAB_ALLOW_MISSING lists "chromium" (tests/python/deps.py).
"""

import argparse
import os
import re
import struct
import subprocess
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deps  # noqa: E402


def chromium_run(chromium, html, workdir, extra):
    args = [chromium, "--headless", "--disable-gpu", "--no-first-run", "--disable-extensions",
            "--user-data-dir=" + os.path.join(workdir, "chromium-profile"), "--virtual-time-budget=10000",
            "--enable-logging=stderr", "--v=0"]
    if os.geteuid() == 0:
        args.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
    p = subprocess.run(args + extra + ["file://" + os.path.abspath(html)], capture_output=True, text=True,
                       timeout=180)
    return p


def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB/RGBA non-interlaced PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                raise ValueError(f"unsupported PNG (depth {depth}, colour type {ctype}, interlace {interlace})")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, rows, bpp


def check_page(chromium, html, workdir, expect_charts, expect_diff, shot):
    """A list of failures (empty: the page passes)."""
    bad = []
    page = open(html, encoding="utf-8").read()
    if re.search(r"<script[^>]*\ssrc=", page) or "<link" in page or re.search(r"""(src|href)=["']?https?:""", page):
        bad.append("the page loads external resources (expected everything inlined)")
    p = chromium_run(chromium, html, workdir, ["--dump-dom"])
    dom = p.stdout
    if p.returncode != 0 or "<html" not in dom:
        return bad + [f"chromium --dump-dom failed (exit {p.returncode}): {p.stderr[-500:]}"]
    console = [l for l in p.stderr.splitlines() if ":CONSOLE" in l]
    if console:
        bad.append("console messages: " + " | ".join(console[:3]))
    st = re.search(r'<div id="status"([^>]*)>', dom)
    if not st:
        return bad + ["no #status element in the DOM"]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', st.group(1)))
    if attrs.get("data-errors") != "0":
        errs = re.search(r'<ul id="errors">(.*?)</ul>', dom, re.S)
        bad.append(f"page errors: {attrs.get('data-errors')}: {errs.group(1)[:300] if errs else ''}")
    if attrs.get("data-charts") != str(expect_charts):
        bad.append(f"{attrs.get('data-charts')} charts, expected {expect_charts}")
    if attrs.get("data-rendered") != attrs.get("data-charts"):
        bad.append(f"{attrs.get('data-rendered')} of {attrs.get('data-charts')} charts drawn")
    points = re.findall(r'<div class="chart" id="chart-([\w-]+)" data-points="(-?\d+)"', dom)
    if len(points) != expect_charts:
        bad.append(f"{len(points)} chart elements, expected {expect_charts}")
    for cid, n in points:
        if int(n) <= 0:
            bad.append(f"chart {cid} has {n} data points")
    for key in expect_diff:
        if f"<code>{key}</code>" not in dom:
            bad.append(f"config-difference table lacks {key}")
    if shot:
        if os.path.exists(shot):
            os.remove(shot)
        q = chromium_run(chromium, html, workdir, ["--screenshot=" + shot, "--window-size=1200,2400",
                                                   "--hide-scrollbars"])
        if q.returncode != 0 or not os.path.exists(shot) or os.path.getsize(shot) == 0:
            return bad + [f"no screenshot (exit {q.returncode}): {q.stderr[-300:]}"]
        w, h, rows, bpp = png_pixels(shot)
        colours, ink = set(), 0
        for y in range(0, h, 2):
            r = rows[y]
            for x in range(0, w * bpp, 2 * bpp):
                px = bytes(r[x:x + 3])
                colours.add(px)
                if px != b"\xff\xff\xff":
                    ink += 1
        frac = ink / ((h // 2) * (w // 2))
        print(f"screenshot {shot}: {w}x{h}, {frac:.1%} non-white pixels, {len(colours)} colours")
        if frac < 0.01 or len(colours) < 16:
            bad.append(f"screenshot looks blank: {frac:.2%} non-white pixels, {len(colours)} colours")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("html")
    ap.add_argument("workdir")
    ap.add_argument("--expect-charts", type=int, required=True)
    ap.add_argument("--expect-diff", nargs="*", default=[])
    a = ap.parse_args()
    chromium = deps.require_program("chromium", "chromium")
    os.makedirs(a.workdir, exist_ok=True)
    bad = check_page(chromium, a.html, a.workdir, a.expect_charts, a.expect_diff,
                     os.path.join(a.workdir, "report.png"))
    for b in bad:
        print("FAIL:", b)
    # The checker must see a broken page: a script error and one chart emptied.
    broken = os.path.join(a.workdir, "broken.html")
    page = open(a.html, encoding="utf-8").read()
    page = page.replace("</body>", "<script>undefinedFunction();</script></body>", 1)
    page = re.sub(r'("rows":)\[\[.*?\]\](,|\})', r"\1[]\2", page, count=1)
    open(broken, "w", encoding="utf-8").write(page)
    caught = check_page(chromium, broken, a.workdir, a.expect_charts, a.expect_diff, None)
    print("broken copy:", "; ".join(caught) if caught else "NOT caught")
    if not any("page errors" in c or "console" in c for c in caught):
        bad.append("the checker did not see the script error injected into broken.html")
    if not any("data points" in c or "charts drawn" in c for c in caught):
        bad.append("the checker did not see the chart emptied in broken.html")
    if bad:
        sys.exit(1)
    print(f"report OK: {a.expect_charts} charts with data, no console errors, screenshot not blank")


if __name__ == "__main__":
    main()
