"""`fp8run plot` in a browser: a real fp8 training log (with --log-fp8 records) is plotted, the
SVG parses as XML (always), and headless Chromium renders it to a PNG whose pixels show the
charts: enough non-white ink, the run's line color, the saturation line's red. Without
chromium (Debian package `chromium`) the render part is skipped (exit 77, ctest's skip).

usage: plot_render.py FP8RUN_CLI FIXTURES_DIR [--keep OUT.png]"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zlib

SKIP = 77


def read_png(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB/RGBA PNG, as Chromium writes them."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), "PNG depth %d color type %d" % (depth, color)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, prev, rows = zlib.decompress(idat), w * bpp, bytearray(w * bpp), []
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):  # undo the PNG filters
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def near(px, rgb, tol=40):
    return all(abs(p - q) <= tol for p, q in zip(px, rgb))


def main():
    cli, fixtures = sys.argv[1], sys.argv[2]
    keep = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
    tmp = tempfile.mkdtemp(prefix="fp8run_plot_")
    try:
        tokens = os.path.join(fixtures, "train", "tokens.bin")
        subprocess.run([cli, "train", os.path.join(fixtures, "llama_tiny", "model.onnx"), "--data", tokens, "--val",
                        tokens, "--val-batches", "2", "--val-every", "4", "--precision", "fp8", "--device", "cpu",
                        "--steps", "12", "--batch", "2", "--seq", "16", "--lr", "2e-3", "--warmup", "3",
                        "--log", os.path.join(tmp, "run.jsonl"), "--log-fp8", "3"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        svg = os.path.join(tmp, "run.svg")
        subprocess.run([cli, "plot", os.path.join(tmp, "run.jsonl"), "-o", svg], check=True, stdout=subprocess.DEVNULL)
        root = ET.parse(svg).getroot()  # well-formed XML, an SVG root with its size
        assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
        width, height = int(root.get("width")), int(root.get("height"))
        titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
        assert "learning rate" in titles and "FP8 amax of dy, per Linear" in titles, titles[:12]
        print("SVG: well-formed, %dx%d, %d texts" % (width, height, len(titles)))

        chrome = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
        if not chrome:
            print("SKIP: no chromium on PATH (Debian: apt-get install chromium); the SVG was checked as XML only")
            return SKIP
        png = os.path.join(tmp, "run.png")
        r = subprocess.run([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            "--user-data-dir=" + os.path.join(tmp, "profile"), "--screenshot=" + png,
                            "--window-size=%d,%d" % (width, height), "file://" + svg],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        if not os.path.exists(png):
            print(r.stdout.decode(errors="replace")[-2000:])
            raise AssertionError("chromium wrote no screenshot")
        w, h, rows = read_png(png)
        pixels = [px for row in rows for px in row]
        ink = sum(1 for px in pixels if min(px) < 235) / len(pixels)
        blue = sum(1 for px in pixels if near(px, (0x1f, 0x77, 0xb4)))  # the first run / first Linear
        red = sum(1 for px in pixels if near(px, (0xcc, 0x00, 0x00)))   # the saturation reference lines
        print("PNG %dx%d: %.1f%% non-white, %d blue and %d red pixels" % (w, h, 100 * ink, blue, red))
        assert (w, h) == (width, height)
        assert 0.03 < ink < 0.5, "the render is blank or a blot"
        assert blue > 500 and red > 300, "the series or the reference lines are missing"
        if keep:
            shutil.copyfile(png, keep)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
