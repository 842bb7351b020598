#!/usr/bin/env python3
"""`plan --html` and `layout --svg` rendered in headless Chromium (issue 28 item 5).

    python3 picture_chromium_test.py path/to/meshlayout

Writes a small checkpoint (5 tensors) and rules on a data=2,model=4 mesh, runs
`meshlayout plan ... --optimizer adam --html page.html` and `meshlayout layout ... --svg
layout.svg`, then with Debian's `chromium` (two runs, about 3 s):
  1. the page: the browser logged no console message (no JS error, no failed load); its DOM
     (--dump-dom) shows the inline script ran (data-meshlayout-rendered="ok", "N pictures");
     its screenshot is not blank and shows every device's colour (the page lists them in
     <meta name="meshlayout-device-colours">);
  2. the SVG: no console message; its screenshot shows every device's colour.
Exit code 77 (ctest SKIP_RETURN_CODE) when chromium or Pillow (python3-pil, which reads the
screenshots) is not installed; scripts/install-deps.sh installs both.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    from PIL import Image
except ImportError:  # reported as a skip in main()
    Image = None

SKIP = 77


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def write_safetensors(path, tensors):
    """tensors: [(name, dtype, shape, element size)]; the data is zeros."""
    header, offset = {}, 0
    for name, dtype, shape, size in tensors:
        n = size
        for s in shape:
            n *= s
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(offset))


def colour_counts(png_path):
    """(pixels, {(r, g, b): count}) of a screenshot."""
    with Image.open(png_path) as image:
        rgb = image.convert("RGB")
        return rgb.width * rgb.height, {c: n for n, c in rgb.getcolors(maxcolors=1 << 24)}


def run_chromium(chromium, args, url):
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--enable-logging=stderr", "--v=0", "--user-data-dir=" + profile] + args + [url]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    console = [l for l in result.stderr.splitlines() if "CONSOLE" in l or "Uncaught" in l]
    if console:
        fail("the browser logged console messages:\n" + "\n".join(console))
    if result.returncode != 0:
        fail(f"chromium exited {result.returncode}:\n{result.stderr[-2000:]}")
    return result.stdout


def check_colours(png_path, colours, what):
    total, counts = colour_counts(png_path)
    white = counts.get((255, 255, 255), 0)
    if white > 0.98 * total or len(counts) < 10:
        fail(f"the screenshot of {what} is blank: {len(counts)} colours, {white} of {total} white")
    missing = []
    for colour in colours:
        rgb = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
        if counts.get(rgb, 0) < 30:  # a cell is thousands of pixels
            missing.append(f"{colour} ({counts.get(rgb, 0)} pixels)")
    if missing:
        fail(f"device colours missing from the screenshot of {what}: {', '.join(missing)}")
    print(f"{what}: {len(counts)} colours, all {len(colours)} device colours drawn")


def main():
    if len(sys.argv) != 2:
        fail("usage: picture_chromium_test.py path/to/meshlayout")
    meshlayout = sys.argv[1]
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if not chromium or Image is None:
        print("SKIP: {} not installed (scripts/install-deps.sh installs chromium and python3-pil)"
              .format("chromium is" if not chromium else "Pillow (python3-pil) is"))
        return SKIP
    global profile
    with tempfile.TemporaryDirectory(prefix="meshlayout_pictures_") as tmp:
        profile = os.path.join(tmp, "profile")
        model = os.path.join(tmp, "model.safetensors")
        write_safetensors(model, [("dense_0/kernel", "F32", [16, 8], 4),
                                  ("dense_1/kernel", "F32", [16, 8], 4),
                                  ("dense_0/bias", "F32", [8], 4),
                                  ("emb/embeddings", "BF16", [10, 6], 2),
                                  ("big/table", "F32", [64, 3, 5], 4)])
        rules = os.path.join(tmp, "rules.json")
        with open(rules, "w") as f:
            json.dump({"mesh": {"shape": [2, 4], "axis_names": ["data", "model"]},
                       "rules": [["dense.*kernel", [None, "model"]],
                                 ["emb", [["data", "model"], None]],
                                 ["big", ["data", None, None]]]}, f)
        page = os.path.join(tmp, "page.html")
        plan = subprocess.run([meshlayout, "plan", model, "--rules", rules, "--optimizer", "adam",
                               "--html", page], capture_output=True, text=True)
        if plan.returncode != 0 or not os.path.exists(page):
            fail(f"plan --html exited {plan.returncode}: {plan.stderr}")
        svg = os.path.join(tmp, "layout.svg")
        layout = subprocess.run([meshlayout, "layout", "--mesh", "data=2,model=4", "--layout",
                                 "data,None", "--shape", "8,6", "--svg", svg],
                                capture_output=True, text=True)
        if layout.returncode != 0 or not os.path.exists(svg):
            fail(f"layout --svg exited {layout.returncode}: {layout.stderr}")
        with open(page, encoding="utf-8") as f:
            html = f.read()
        match = re.search(r'<meta name="meshlayout-device-colours" content="([^"]*)">', html)
        if not match:
            fail("the page does not list its device colours")
        colours = match.group(1).split(",")
        if len(colours) != 8:
            fail(f"expected 8 device colours, the page lists {len(colours)}")

        shot = os.path.join(tmp, "page.png")  # the DOM after the script ran, and a screenshot
        dom = run_chromium(chromium, ["--dump-dom", "--screenshot=" + shot,
                                      "--window-size=1200,2400"], "file://" + page)
        if 'data-meshlayout-rendered="ok"' not in dom:
            fail("the page's script did not run (no data-meshlayout-rendered marker)")
        pictures = re.search(r'<span id="status">(\d+) pictures</span>', dom)
        if not pictures or int(pictures.group(1)) < 9:  # 4 layouts x 2 and the bar chart
            fail("the page's script did not count its pictures: " + str(pictures))
        print(f"page: the script ran, {pictures.group(1)} pictures, no console message")

        check_colours(shot, colours, "the page")

        shot = os.path.join(tmp, "layout.png")
        run_chromium(chromium, ["--screenshot=" + shot, "--window-size=1100,500"], "file://" + svg)
        check_colours(shot, colours, "the SVG")
    return 0


if __name__ == "__main__":
    sys.exit(main())
