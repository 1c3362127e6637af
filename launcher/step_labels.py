"""The rank labels the training step puts before its ranks' output lines, and reading them back.

Every line a rank prints reaches the job's one output (and error) file with the rank that
printed it, so the file splits by rank (`gantry logs JOB --rank N`). The label depends on
the launch, named by a scheme recorded in the job directory (request.json ``rank_labels``):

- ``srun``: srun ``--label``, ``R: text``, R right-aligned to the width of the largest task
  number (`` 3: text`` among ten tasks or more). srun keeps each task's lines whole (a last
  line without a newline gets one when the task exits); its own messages (``srun: error:
  ...``) carry no label.
- ``mpirun``: mpirun ``--tag-output`` (Open MPI 4.x), ``[J,R]<stdout>:text`` (``<stderr>``,
  ``<stddiag>`` in the error file; J is mpirun's job number). Open MPI forwards what a rank
  writes as it comes: a line written in pieces gets a tag per piece, and another rank's tag
  may follow a piece on the same line of the file (``[1,0]<stdout>:par[1,1]<stdout>:x``):
  the reader joins each rank's pieces back into its lines.
- ``srun+torchrun`` / ``mpirun+torchrun``: a ``torchrun`` command job runs one agent per
  node; the agent tees its workers' output (``--tee=3``) with the prefix ``[torchrun:R] ``
  (:data:`TORCHRUN_PREFIX_TEMPLATE`), inside the srun / mpirun label of the agent's task:
  ``1: [torchrun:5] text``. Its tail threads forward pieces as Open MPI does (joined the
  same way). The agent's own lines carry only the node's label: they belong to no rank.

R is the rank the program sees. Gantry's trainer's MPI world rank and a ``per-rank``
command's RANK are the launcher's task number (the gate lists the launch nodes in
allocation order, srun numbers tasks node by node in that order, and mpirun's --host list
is that order, the way launcher/torch_env.py numbers ranks). Under torchrun R is the
global rank torchrun's rendezvous gave the worker (its RANK, which is node rank x
nproc-per-node + local rank in the rendezvous' node order, not necessarily the launch
nodes' order).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

Scheme = Literal["srun", "mpirun", "srun+torchrun", "mpirun+torchrun"]
SCHEMES: tuple[Scheme, ...] = ("srun", "mpirun", "srun+torchrun", "mpirun+torchrun")

TORCHRUN_PREFIX_ENV = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
"""Where torchrun reads the prefix of its workers' teed lines (torch/distributed/run.py)."""
TORCHRUN_PREFIX_TEMPLATE = "[torchrun:${rank}] "
"""The prefix gantry asks torchrun for: a word no program prints before its own text by
chance (``[rank3]:`` is PyTorch's own warnings' prefix, ``[3]:`` a list's), the global rank."""

_SRUN = re.compile(r"^ *([0-9]{1,7}): ")
_MPIRUN = re.compile(r"\[[0-9]{1,7},([0-9]{1,7})\]<std(?:out|err|diag)>:")
_TORCHRUN = re.compile(r"\[torchrun:([0-9]{1,7})\] ")


def scheme_for(launcher: str, torchrun: bool) -> Scheme:
    """The scheme of a step launched by ``launcher`` (srun or mpirun), under torchrun or not."""
    if launcher not in ("srun", "mpirun"):
        raise ValueError(f"launcher {launcher!r}: expected srun or mpirun")
    name = f"{launcher}+torchrun" if torchrun else launcher
    assert name in SCHEMES
    return name  # type: ignore[return-value]


@dataclass(frozen=True)
class RankLine:
    """One line of the step's output, its label removed."""

    rank: int | None
    """The rank that printed it; None for a line no rank label claims (the batch script's
    own, the launcher's, a torchrun agent's)."""
    text: str
    """The line without its label and newline."""


class _Pieces:
    """Joins a tagged stream's pieces back into lines: each piece starts with a tag; a piece
    that another tag follows on the same line is unfinished (its rank's next piece goes on)."""

    def __init__(self, tag: re.Pattern[str]) -> None:
        self.tag = tag
        self.pending: dict[int, str] = {}

    def feed(self, line: str) -> list[tuple[int | None, str]]:
        tags = list(self.tag.finditer(line))
        if not tags:
            return [(None, line)]
        found: list[tuple[int | None, str]] = []
        if tags[0].start():
            found.append((None, line[:tags[0].start()]))
        for index, tag in enumerate(tags):
            rank = int(tag.group(1))
            last = index + 1 == len(tags)
            text = line[tag.end():len(line) if last else tags[index + 1].start()]
            if last:
                found.append((rank, self.pending.pop(rank, "") + text))
            else:
                self.pending[rank] = self.pending.get(rank, "") + text
        return found

    def flush(self) -> list[tuple[int | None, str]]:
        """Pieces still waiting for the rest of their line (the output ended)."""
        found: list[tuple[int | None, str]] = list(self.pending.items())
        self.pending.clear()
        return found


class RankSplitter:
    """Splits a labelled output into RankLines, in order: :meth:`feed` it the file's lines
    as they come (without newlines), :meth:`flush` once the output ended."""

    def __init__(self, scheme: Scheme) -> None:
        if scheme not in SCHEMES:
            raise ValueError(f"rank label scheme {scheme!r}: expected one of {SCHEMES}")
        self.outer = None if scheme.startswith("srun") else _Pieces(_MPIRUN)
        self.inner = _Pieces(_TORCHRUN) if scheme.endswith("+torchrun") else None

    def feed(self, line: str) -> list[RankLine]:
        tasks: list[tuple[int | None, str]]
        if self.outer is None:
            match = _SRUN.match(line)
            tasks = [(None, line)] if match is None else [(int(match.group(1)),
                                                           line[match.end():])]
        else:
            tasks = self.outer.feed(line)
        return self._ranks(tasks)

    def flush(self) -> list[RankLine]:
        found = self._ranks(self.outer.flush()) if self.outer is not None else []
        if self.inner is not None:
            found += [RankLine(rank, text) for rank, text in self.inner.flush()]
        return found

    def _ranks(self, tasks: list[tuple[int | None, str]]) -> list[RankLine]:
        if self.inner is None:
            return [RankLine(task, text) for task, text in tasks]
        found: list[RankLine] = []
        for task, text in tasks:
            if task is None:  # not the agent's: the batch script's or the launcher's own
                found.append(RankLine(None, text))
            else:
                found += [RankLine(rank, piece) for rank, piece in self.inner.feed(text)]
        return found


def split_ranks(lines: Iterable[str], scheme: Scheme) -> Iterator[RankLine]:
    """Every line of a whole labelled output (lines without newlines), split by rank."""
    splitter = RankSplitter(scheme)
    for line in lines:
        yield from splitter.feed(line)
    yield from splitter.flush()


class RankFilter:
    """One rank's lines of a labelled output as text, fed the output as it comes (any
    chunks; a line counts once its newline came)."""

    def __init__(self, scheme: Scheme, rank: int) -> None:
        self.splitter = RankSplitter(scheme)
        self.rank = rank
        self.rest = ""

    def feed(self, text: str) -> str:
        """The rank's lines (each with a newline) completed by ``text``."""
        lines = (self.rest + text).split("\n")
        self.rest = lines.pop()
        return "".join(f"{line.text}\n" for whole in lines for line in self.splitter.feed(whole)
                       if line.rank == self.rank)

    def finish(self) -> str:
        """The rank's lines still open when the output ended."""
        found = self.splitter.feed(self.rest) if self.rest else []
        self.rest = ""
        return "".join(f"{line.text}\n" for line in found + self.splitter.flush()
                       if line.rank == self.rank)


def strip_label(line: str) -> str:
    """``line`` without a leading srun label or Open MPI tag (whatever the scheme)."""
    match = _SRUN.match(line) or _MPIRUN.match(line)
    return line[match.end():] if match else line
