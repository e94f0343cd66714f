"""The `fp8run` command-line program, for the Python functions that run it (plot): found
through $FP8RUN_CLI, inside this package (bin/fp8run, as pip installs it), next to the loaded
libfp8run.so (a build folder), or on PATH."""
import os
import shutil
import subprocess


def find():
    env = os.environ.get("FP8RUN_CLI")
    if env:
        return env
    from . import library_path
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "bin", "fp8run"), os.path.join(os.path.dirname(library_path()), "fp8run")):
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    found = shutil.which("fp8run")
    if not found:
        raise FileNotFoundError("fp8run: the fp8run program is not inside the package, next to the library or on "
                                "PATH; set FP8RUN_CLI to it")
    return found


def _env():
    """The environment for the program: FP8RUN_PYTHON (the interpreter `fp8run prepare` runs a
    tokenizer.json with) defaults to this interpreter, which has this package and, where the
    user installed it, `tokenizers` (a venv's python, not PATH's python3)."""
    import sys
    env = dict(os.environ)
    if not env.get("FP8RUN_PYTHON") and sys.executable:
        env["FP8RUN_PYTHON"] = sys.executable
    return env


def run(args):
    """Run `fp8run ARGS`; returns its stdout; a failure raises RuntimeError with its message."""
    r = subprocess.run([find()] + [os.fspath(a) for a in args], capture_output=True, text=True, env=_env())
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip() or "fp8run %s failed (exit %d)" % (args[0], r.returncode))
    return r.stdout


def main():
    """The `fp8run` console script of a pip install: the bundled program, with our arguments."""
    import sys
    path = find()
    if os.path.realpath(path) == os.path.realpath(sys.argv[0]):  # PATH found this script itself
        sys.exit("fp8run: the fp8run program is not inside the package; set FP8RUN_CLI to it")
    os.execve(path, [path] + sys.argv[1:], _env())
