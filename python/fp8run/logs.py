"""The library's log messages into Python's `logging` (logger "fp8run" by default)."""
import logging

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


def log_to_python(logger="fp8run", level="info"):
    """Route libfp8run's log callback to logging.getLogger(logger) (a name or a Logger), from
    `level` up ("debug", "info", "warn", "error"); returns the logger. None turns it off."""
    from . import set_log_callback
    if logger is None:
        set_log_callback(None)
        return None
    log = logging.getLogger(logger) if isinstance(logger, str) else logger

    def emit(lvl, message):
        log.log(_LEVELS.get(lvl, logging.INFO), "%s", message)

    set_log_callback(emit, level)
    return log
