"""Temp file names that say who is writing them, and whether that writer is gone.

A temp name carries its writer's host (and pid namespace), pid and process start time:
`<host>~<pid>~<start>~<random>` plus a suffix (`.part`, `.meta`, `.tmp`), after an optional stem
of the caller's (`.weight.bin~<owner>~...`). The start time is field 22 of /proc/<pid>/stat
(clock ticks after boot), so a pid the kernel has since given to another process does not keep
a dead writer's file alive. With the host in the name, a data volume shared by several hosts
stays safe: a host only judges its own writers; another host's pids mean nothing here.

`owner_gone` is the one rule every sweep asks: True when the writer was on this host and is no
longer running, False when it still runs, None when it cannot be told from here (another host,
or a name that is not one of these), where the caller falls back to the file's age.

Light to import (the standard library and app.core.ids): the stores, the upload spool, `atomic_file`
and the farm workers' scratch all name their temps here.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass

from app.core.ids import random_hex

SEPARATOR = "~"  # never in a host as spelled here, so a name splits from the right unambiguously


def _host_token(node: str) -> str:
    """The host name, plus the pid namespace where there is one to read: containers that share
    a host name (`network_mode: host`) each number their processes from 1, and one must not
    judge another's pids."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", node)[:64] or "host"
    try:
        namespace = re.sub(r"\D", "", os.readlink("/proc/self/ns/pid"))  # "pid:[4026531836]"
    except OSError:
        return host
    return f"{host}-{namespace}" if namespace else host


HOST = _host_token(platform.node())


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat, or None when the process does not exist or has ended (a
    zombie its parent has not reaped writes nothing more). 0 where there is no /proc (macOS):
    the pid alone then identifies the writer."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return None
        return 0 if _pid_exists(pid) else None
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from its closing one.
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):  # field 3, the state
        return None
    return int(fields[22 - 3])


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process, but a process
        return True
    return True


@dataclass(frozen=True)
class Owner:
    host: str
    pid: int
    start: int

    @property
    def token(self) -> str:
        return SEPARATOR.join((self.host, str(self.pid), str(self.start)))


_ME: tuple[int, Owner] | None = None


def me() -> Owner:
    """This process (recomputed after a fork: the pid changes)."""
    global _ME
    pid = os.getpid()
    if _ME is None or _ME[0] != pid:
        _ME = (pid, Owner(HOST, pid, start_time(pid) or 0))
    return _ME[1]


def temp_name(suffix: str, stem: str = "") -> str:
    """A fresh temp file name owned by this process: `<stem><host>~<pid>~<start>~<random><suffix>`
    (a stem is joined with the separator)."""
    name = f"{me().token}{SEPARATOR}{random_hex()[:16]}{suffix}"
    return f"{stem}{SEPARATOR}{name}" if stem else name


_OWNED = re.compile(r"(?:^|~)([A-Za-z0-9.-]+)~(\d{1,10})~(\d{1,20})~[0-9a-f]+(?:\.[A-Za-z]+)?$")


def owner_of(name: str) -> Owner | None:
    """Who wrote the temp file called `name`; None when the name is not one of `temp_name`'s."""
    m = _OWNED.search(name)
    return Owner(m[1], int(m[2]), int(m[3])) if m else None


def owner_gone(name: str) -> bool | None:
    """Whether the writer of temp file `name` has ended: True (it was on this host and is no
    longer running: its pid is gone or belongs to a process started at another time), False
    (it is running), None (cannot be told here: another host's file, or not an owned name)."""
    owner = owner_of(name)
    if owner is None or owner.host != HOST:
        return None
    started = start_time(owner.pid)
    if started is None:
        return True
    return owner.start != 0 and started != 0 and started != owner.start
