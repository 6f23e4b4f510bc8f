"""Whole pickled messages over a pipe, one system call each way in the usual case.

The build pool and its workers talk strictly in turns (one request, then its answer), so a pipe
never holds more than one message and a reader may ask for more bytes than the message has.
multiprocessing's Connection sends the length and a body over 16 KiB in two writes and reads them
in two reads; a 64×64 inline weight is just over that, and on the server's event loop every
system call counts.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
from typing import Any

_LENGTH = struct.Struct("!I")
MAX_MESSAGE_BYTES = 1 << 32  # a body's length must fit the 4-byte header: from 4 GiB on, refused
_READ = 1 << 16  # a pipe's usual capacity: most messages arrive in one read


def encode(message: Any) -> bytes:
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def send(fd: int, message: Any) -> None:
    body = encode(message)
    if len(body) >= MAX_MESSAGE_BYTES:
        raise ValueError(f"a message of {len(body)} bytes is too large for a pipe message")
    data = memoryview(_LENGTH.pack(len(body)) + body)
    while data:
        try:
            data = data[os.write(fd, data) :]
        except BlockingIOError:  # a non-blocking end (see _read_some) with a full pipe
            select.select([], [fd], [])


def receive(fd: int) -> Any:
    """The next message; EOFError when the other end has closed the pipe."""
    head = _read_some(fd, _READ)
    while len(head) < _LENGTH.size:
        head += _read_some(fd, _LENGTH.size - len(head))
    (length,) = _LENGTH.unpack_from(head)
    end = _LENGTH.size + length
    if len(head) >= end:
        return pickle.loads(memoryview(head)[_LENGTH.size : end])
    body = bytearray(head[_LENGTH.size :])
    while len(body) < length:
        body += _read_some(fd, min(length - len(body), 1 << 20))
    return pickle.loads(body)


def _read_some(fd: int, n: int) -> bytes:
    while True:
        try:
            chunk = os.read(fd, n)
            break
        except BlockingIOError:
            # The server's event loop (uvloop) puts the descriptors it watches in non-blocking
            # mode. A message larger than the pipe's capacity arrives in parts, the rest as fast
            # as the worker writes it: wait for it here (a dead worker makes the pipe readable,
            # at EOF), or the half-read message would pass for a dead worker.
            select.select([fd], [], [])
    if not chunk:
        raise EOFError("the other end closed the pipe")
    return chunk
