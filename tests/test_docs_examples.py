"""Every shell and Python example in README.md and docs/*.md, run as written (tests/docs_examples.py
says which blocks run and how one opts out).

A page's examples run in order, in a fresh folder, as a reader would type them there: a block
may use a file an earlier block of the same page made, and each Python block is a separate
`python` process (paste it alone and it runs). The folder has `.venv` linked to the project's
virtualenv, so `.venv/bin/ane-kernels` works as written, and that virtualenv's `bin` leads PATH.
`localhost:8000` (what `make run` serves) is a live server started here as `make run` starts it:
`make run` in a copy of the checkout, every ANE_* setting unset (so its data dir is the relative
`data`), on a free loopback port, the text rewritten to its port. So the README's and the docs'
HTTP flows (a kernel, a graph, an upload in parts, Client.compile_model with save_to=, the curl
kit script, jobs) run against the defaults a user meets. The blocks run without ANE_* settings
too, unless they set them themselves. Pages about
checkpoints find a small random model under the folder name they use (SETUPS); nothing is
downloaded.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import checkout_copy, make_run_server
from docs_examples import (
    NEEDS_MARKER,
    PAGES,
    REPO,
    RUNNABLE,
    Block,
    all_blocks,
    anchors,
    blocks,
    links,
)

VENV = Path(sys.prefix)
BLOCK_TIMEOUT_S = 600
# Blocks that do not run here, at most: each is listed by test_the_opt_outs_are_listed. Raising
# this is a decision a reviewer sees.
MAX_OPT_OUTS = 6
SERVED_AT = re.compile(r"\b(?:localhost|127\.0\.0\.1):8000\b")


def _small_checkpoint(name: str, **config) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        from kit_support import KIT_QWEN3, write_model

        write_model(folder / name, KIT_QWEN3 | config, seed=3)

    return setup


def _sharded_llama(name: str) -> Callable[[Path], None]:
    """A Llama 3.2-style save_pretrained folder: config.json, bf16 weights in two shards with
    model.safetensors.index.json, four small random layers."""

    def setup(folder: Path) -> None:
        from checkpoint_support import LLAMA, write_checkpoint

        write_checkpoint(
            folder / name, LLAMA | {"num_hidden_layers": 4}, dtype="bfloat16", seed=3, shards=2
        )

    return setup


def _from_checkout(*paths: str) -> Callable[[Path], None]:
    """Files of the checkout a page's examples use where a reader in the checkout has them."""

    def setup(folder: Path) -> None:
        for path in paths:
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).symlink_to(REPO / path)

    return setup


# What a page's examples expect to find in their folder, beyond what they make themselves.
SETUPS: dict[str, Callable[[Path], None]] = {
    "README.md": _small_checkpoint("Qwen3-0.6B", max_position_embeddings=40960),
    "docs/kits.md": _small_checkpoint("Qwen3-0.6B", max_position_embeddings=40960),
    "docs/transformer-blocks.md": _sharded_llama("Llama-3.2-1B"),
    "docs/mlmodelc-and-coreai.md": _from_checkout("tests/fake_xcrun"),  # the labelled stand-in
    "docs/architecture.md": _from_checkout("pyproject.toml"),  # the import contracts
    "docs/onnx.md": _from_checkout(
        *(f"tests/fixtures/onnx/{m}.onnx" for m in ("vit", "whisper_encoder", "bert"))
    ),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[str]:
    """host:port of the service as `make run` starts it (tests/conftest.py: make_run_server)."""
    clone = checkout_copy(tmp_path_factory.mktemp("docs-clone") / "ane-kernel-service")
    with make_run_server(clone) as run:
        yield run.url.removeprefix("http://")


def _run(block: Block, folder: Path, served: str, env: dict[str, str]) -> None:
    code = SERVED_AT.sub(served, block.code)
    command = (
        [str(VENV / "bin" / "python"), "-"]
        if RUNNABLE[block.language] == "python"
        else ["bash", "-e", "-o", "pipefail", "-s"]
    )
    done = subprocess.run(
        command,
        input=code,
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )
    if done.returncode != 0:
        pytest.fail(
            f"{block.where} ({block.language}) exited {done.returncode}\n--- block\n"
            f"{code}--- stdout\n{done.stdout[-4000:]}\n--- stderr\n"
            f"{done.stderr[-4000:]}",
            pytrace=False,
        )


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_example_of_the_page_runs(page: Path, tmp_path: Path, served: str) -> None:
    runnable = [b for b in blocks(page) if b.runs]
    if not runnable:
        pytest.skip(f"{page.name} has no runnable example")
    folder = tmp_path / "reader"
    folder.mkdir()
    (folder / ".venv").symlink_to(VENV)
    setup = SETUPS.get(str(page.relative_to(REPO)))
    if setup is not None:
        setup(folder)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ANE_")},
        "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for block in runnable:
        _run(block, folder, served, env)


def test_every_fence_names_its_language() -> None:
    unnamed = [b.where for b in all_blocks() if not b.language]
    assert not unnamed, f"fences without a language (say sh, python, json, text...): {unnamed}"


def test_blocks_that_cannot_run_here_say_so() -> None:
    silent = [b.where for b in all_blocks() if b.language in NEEDS_MARKER and not b.opt_out]
    assert not silent, f"these need a 'not run by the docs tests: <reason>' first line: {silent}"


def test_the_opt_outs_are_listed() -> None:
    """The examples the docs tests do not run, each with its reason (printed with -rA)."""
    opted = [
        b
        for b in all_blocks()
        if b.opt_out and (b.language in RUNNABLE or b.language in NEEDS_MARKER)
    ]
    print(f"\n{len(opted)} examples not run by the docs tests:")
    for b in opted:
        print(f"  {b.where} [{b.language}] {b.opt_out}")
    assert len(opted) <= MAX_OPT_OUTS, [b.where for b in opted]
    ran = [b for b in all_blocks() if b.runs]
    assert len(ran) > 3 * len(opted), "most examples must run"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_reach_a_file_and_heading(page: Path) -> None:
    """A link into the repository names a file that exists and, after `#`, one of its headings."""
    broken = []
    for line, href in links(page):
        path, _, fragment = href.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{page.name}:{line} {href}: no such file")
        elif fragment and target.suffix == ".md" and fragment not in anchors(target):
            broken.append(f"{page.name}:{line} {href}: no heading #{fragment}")
    assert not broken, broken
