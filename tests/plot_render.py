"""`fp8run plot` in a browser: a real fp8 training log (with --log-fp8 records) is plotted, the
SVG parses as XML (always), and headless Chromium renders it to a PNG whose pixels show the
charts: enough non-white ink, the run's line color, the saturation line's red. Without
chromium (Debian package `chromium`; .ci/run installs it) or numpy the render part is skipped
(exit 77, ctest's skip), saying so. --keep writes the screenshot to OUT.png.

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
    """An 8-bit RGB/RGBA PNG, as Chromium writes them, as a numpy array [height, width, 3].
    Rows filtered None/Sub/Up are undone with numpy; Average and Paeth, whose every byte depends
    on the one before, byte by byte (a pure-Python decoder of the whole image took over a minute
    on a busy CI core)."""
    import numpy as np
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body[:13])
            assert depth == 8 and color in (2, 6) and interlace == 0, "PNG depth %d color type %d" % (depth, color)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    stride = w * bpp
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, stride + 1)
    out = np.zeros((h, stride), np.uint8)
    prev = np.zeros(stride, np.uint8)
    for y in range(h):
        f, cur = raw[y, 0], raw[y, 1:]
        if f == 0:
            line = cur.copy()
        elif f == 1:  # Sub: a running sum per channel, mod 256
            line = (np.cumsum(cur.reshape(w, bpp), axis=0, dtype=np.uint64) % 256).astype(np.uint8).ravel()
        elif f == 2:  # Up
            line = cur + prev
        elif f in (3, 4):
            line, up = bytearray(cur.tobytes()), prev.tobytes()
            for i in range(bpp):  # no left neighbour: Average takes b // 2, Paeth takes b
                line[i] = (line[i] + (up[i] // 2 if f == 3 else up[i])) & 255
            if f == 3:
                for i in range(bpp, stride):
                    line[i] = (line[i] + ((line[i - bpp] + up[i]) >> 1)) & 255
            else:
                for i in range(bpp, stride):
                    a, b, c = line[i - bpp], up[i], up[i - bpp]
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            line = np.frombuffer(bytes(line), np.uint8)
        else:
            raise AssertionError("PNG filter %d" % f)
        out[y] = line
        prev = line
    return out.reshape(h, w, bpp)[:, :, :3]


def near(img, rgb, tol=40):
    """How many pixels of img are within tol of rgb in every channel."""
    import numpy as np
    return int(np.all(np.abs(img.astype(np.int16) - np.array(rgb, np.int16)) <= tol, axis=2).sum())


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
        try:
            import numpy  # noqa: F401  (the screenshot's pixels)
        except ImportError:
            print("SKIP: no numpy (Debian: python3-numpy) to read the screenshot; the SVG was checked as XML only")
            return SKIP
        png = os.path.join(tmp, "run.png")
        r = subprocess.run([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            "--user-data-dir=" + os.path.join(tmp, "profile"), "--screenshot=" + png,
                            "--window-size=%d,%d" % (width, height), "file://" + svg],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        if not os.path.exists(png):
            print(r.stdout.decode(errors="replace")[-2000:])
            raise AssertionError("chromium wrote no screenshot")
        img = read_png(png)
        h, w = img.shape[:2]
        ink = float((img.min(axis=2) < 235).mean())
        blue = near(img, (0x1f, 0x77, 0xb4))  # the first run / first Linear
        red = near(img, (0xcc, 0x00, 0x00))   # the saturation reference lines
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
