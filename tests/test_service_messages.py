"""Pickled messages over a pipe, as the build pool and its workers exchange them."""

import os
import threading

import numpy as np
import pytest

from app.service import messages


@pytest.mark.parametrize("size", [0, 100, 16_500, 3 << 20])  # one read, and many
def test_a_message_arrives_whole(size):
    read, write = os.pipe()
    payload = {"weights": np.arange(size // 4, dtype=np.float32), "name": "w"}
    # A writer thread: a message larger than the pipe's buffer needs a reader meanwhile.
    writer = threading.Thread(target=messages.send, args=(write, payload))
    writer.start()
    got = messages.receive(read)
    writer.join()
    assert got["name"] == "w" and np.array_equal(got["weights"], payload["weights"])
    os.close(read)
    os.close(write)


def test_a_closed_pipe_is_eof():
    read, write = os.pipe()
    os.close(write)
    with pytest.raises(EOFError):
        messages.receive(read)
    os.close(read)


def test_a_large_message_arrives_whole_over_non_blocking_ends():
    """The server's event loop (uvloop) makes the pool's pipe ends non-blocking: a message over
    the pipe's capacity must still arrive whole, each side waiting for the other, not read as a
    dead worker (BlockingIOError) half-way."""
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    payload = {"zip": os.urandom(1 << 20)}  # a small artifact handed back with its build
    writer = threading.Thread(target=messages.send, args=(write, payload))
    writer.start()
    got = messages.receive(read)
    writer.join()
    assert got == payload
    os.close(read)
    os.close(write)
