"""fp8run.plot: training logs drawn as an SVG page by `fp8run plot` (the same charts as the CLI)."""
import os

from . import _cli


class Plot:
    """The written SVG: .path, .svg (its text); Jupyter shows it inline."""

    def __init__(self, path):
        self.path = path

    @property
    def svg(self):
        with open(self.path, encoding="utf-8") as f:
            return f.read()

    def _repr_svg_(self):
        return self.svg

    def __repr__(self):
        return "Plot(%r)" % self.path


def plot(logs, out="run.svg", title=None):
    """Draw one or more JSONL training logs (fp8run train --log, or fp8run.train(log=...)) into
    out: losses, learning rate, tokens/s, gradient norm, skipped steps, FP8 amax and range use.
    Returns a Plot."""
    if isinstance(logs, (str, os.PathLike)):
        logs = [logs]
    args = ["plot"] + list(logs) + ["-o", out]
    if title:
        args += ["--title", title]
    _cli.run(args)
    return Plot(os.fspath(out))
