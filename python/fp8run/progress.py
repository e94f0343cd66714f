"""A progress line for training loops (no dependency): redrawn in place on a terminal and in
Jupyter (one output area updated), one line every few seconds elsewhere (logs, CI)."""
import sys
import time


def _in_notebook():
    shell = sys.modules.get("IPython")
    try:
        ip = shell.get_ipython() if shell else None
    except Exception:
        return False
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def _hms(s):
    if s != s or s == float("inf"):
        return "--:--"
    s = int(s)
    return "%d:%02d:%02d" % (s // 3600, s // 60 % 60, s % 60) if s >= 3600 else "%02d:%02d" % (s // 60, s % 60)


class Progress:
    """Progress(total, desc="train"): .update(n=1, **fields) after each step (fields such as
    loss=2.31 are shown after the count), .close() at the end (or use it as a context manager).
    mode: "auto" (in place on a tty or in Jupyter, else lines), "tty", "notebook", "lines" or
    "off"."""

    def __init__(self, total, desc="train", file=None, mode="auto", every_s=5.0):
        self.total, self.desc, self.n = total, desc, 0
        self.file = file or sys.stderr
        if mode == "auto":
            isatty = getattr(self.file, "isatty", lambda: False)
            mode = "notebook" if _in_notebook() else "tty" if isatty() else "lines"
        self.mode, self.every_s = mode, every_s
        self.t0 = self.last = time.monotonic()
        self.fields, self._handle = {}, None

    def text(self):
        el = time.monotonic() - self.t0
        rate = self.n / el if el > 0 else 0.0
        eta = (self.total - self.n) / rate if rate > 0 and self.total else float("nan")
        frac = self.n / self.total if self.total else 0.0
        bar = "#" * int(20 * frac) + "-" * (20 - int(20 * frac))
        parts = ["%s %3d%% |%s| %d/%d" % (self.desc, 100 * frac, bar, self.n, self.total or 0)]
        parts += ["%s %s" % (k, ("%.4g" % v) if isinstance(v, float) else v) for k, v in self.fields.items()]
        parts.append("%s<%s, %.2f it/s" % (_hms(el), _hms(eta), rate))
        return " | ".join(parts)

    def update(self, n=1, **fields):
        self.n += n
        self.fields.update(fields)
        now = time.monotonic()
        done = self.total and self.n >= self.total
        if self.mode == "tty":
            self.file.write("\r" + self.text() + "  ")
            self.file.flush()
        elif self.mode == "notebook":
            self._show()
        elif self.mode == "lines" and (now - self.last >= self.every_s or done or self.n == n):
            self.file.write(self.text() + "\n")
            self.file.flush()
            self.last = now

    def write(self, line):
        """A message above the progress line (validation results...)."""
        if self.mode == "tty":
            self.file.write("\r" + line + " " * 20 + "\n" + self.text() + "  ")
        elif self.mode != "off":
            self.file.write(line + "\n")
        self.file.flush()

    def _show(self):
        from IPython.display import display, HTML  # only in a notebook
        html = HTML("<pre>%s</pre>" % self.text().replace("&", "&amp;").replace("<", "&lt;"))
        if self._handle is None:
            self._handle = display(html, display_id=True)
        else:
            self._handle.update(html)

    def close(self):
        if self.mode == "tty":
            self.file.write("\n")
            self.file.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
