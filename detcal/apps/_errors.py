"""The one line a user sees for an error they can fix (a config mistake, a malformed input file, a disk
that is full), for every command; anything else is a bug and keeps its traceback."""

from __future__ import annotations

import dataclasses
import errno

from hydra.errors import HydraException, MissingConfigException
from omegaconf.errors import OmegaConfBaseException

from detcal.core.errors import detcal_error_message, error_chain
from detcal.data.specs import DATA_SPECS, DataSpec, foreign_field_message

__all__ = ["first_line", "os_error_message", "user_error_message"]


def first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _did_you_mean(chain: list[BaseException]) -> str:
    """``; did you mean 'data.detector'?`` for an unknown key close to a field of its config group."""
    import difflib  # lazy: read only when a config error is reported, kept out of every command's start-up

    for e in chain:
        key, typ, full = getattr(e, "key", None), getattr(e, "object_type", None), getattr(e, "full_key", None)
        if key is None or typ is None or not dataclasses.is_dataclass(typ):
            continue
        names = [f.name for f in dataclasses.fields(typ)]
        close = difflib.get_close_matches(str(key), names, n=1)
        if isinstance(typ, type) and issubclass(typ, DataSpec):
            elsewhere = any(str(key) in spec.__dataclass_fields__ for spec in DATA_SPECS.values())
            if elsewhere or not close:  # a field of another data source: name the sources that read it
                return f"; {foreign_field_message(str(key), typ)}"
        if close:
            parent = str(full or key).rsplit(".", 1)[0] + "." if "." in str(full or key) else ""
            return f"; did you mean '{parent}{close[0]}'?"
    return ""


def user_error_message(exc: BaseException) -> str | None:
    """One line for an error the user can fix (config or input), ``None`` for anything else (a bug)."""

    chain = error_chain(exc)
    detcal = detcal_error_message(exc)
    if detcal is not None:
        return detcal
    if isinstance(exc, MissingConfigException):
        opts = getattr(exc, "options", None)
        msg = first_line(exc)
        return f"{msg} (available: {', '.join(opts)})" if opts else msg
    if isinstance(exc, (HydraException, OmegaConfBaseException)):
        parts = [first_line(exc)]
        for e in chain[1:]:
            line = first_line(e)
            if "$VALUE" in line or "$KEY" in line:
                continue
            key = getattr(e, "full_key", None)
            if key:
                line += f" (config key '{key}')"
            if not any(line in q for q in parts):
                parts.append(line)
        return ": ".join(p.rstrip(".") for p in parts) + _did_you_mean(chain)
    if isinstance(exc, FileNotFoundError) and "detcal configs not found" in str(exc):
        return str(exc)
    for e in chain:
        if isinstance(e, OSError) and e.errno in _OS_USER_ERRNOS:
            return os_error_message(e)
    return None


_OS_USER_ERRNOS = {
    getattr(errno, n)
    for n in ("EACCES", "EPERM", "ENOSPC", "EDQUOT", "EROFS", "ENOTDIR", "EEXIST", "EISDIR", "ENAMETOOLONG", "EFBIG")
    if hasattr(errno, n)
}


def os_error_message(e: OSError) -> str:
    """One line for an operating-system error the user can fix (no permission, disk full, a file where a
    directory should be, ...), naming the path."""
    what = {errno.ENOSPC: "no space left on the device", errno.EROFS: "read-only file system"}.get(
        e.errno or 0, e.strerror or type(e).__name__
    )
    where = f" {e.filename}" if e.filename else ""
    return f"cannot write{where}: {what}"
