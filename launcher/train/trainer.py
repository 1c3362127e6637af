"""The per-rank training loop of `gantry train` (runs under mpirun / srun --mpi=pmix, or alone).

mpi4py init -> rank layout -> schedule table (world rank 0 reads it from the job dir's cache or
generates it, then broadcasts it; the executor only follows it)
-> FLOP-balanced layer split -> communicator bootstrap (world rank 0 makes the id — an
ncclUniqueId on the CUDA build — and mpi4py broadcasts it) -> native pipeline (communicator
handed over as a Fortran handle plus the id) -> weights (checkpoint, init file or seeded
init) -> steps: this replica's slice of the global batch, one native step, metrics (rank 0),
trace spans, checkpoints.
Resilience: USR1/TERM stop every rank at the same step boundary after a checkpoint (exit
TRAINER_STOPPED); so does a node asked to leave the job (rank 0 looks for eviction requests
in the attempt directory after every step, launcher/recovery/evictions.py; exit
TRAINER_EVICTED); a per-rank watchdog aborts a rank that stops making progress; checkpoints
are written in the background (launcher/train/checkpoint_writer.py); rank 0 logs start/stop
events with wall times to events.jsonl (recovery times are measured from them) and watches
the gathered per-rank compute times for stragglers (launcher/train/straggler_watch.py).
Errors found on any rank are agreed on collectively (launcher/train/agreement.py) so that
every rank stops together and only rank 0 reports.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.atomic_write import WriteError, as_run_failure, write_text
from launcher.errors import GantryError, UserInputError
from launcher.job_dir import (
    ATTEMPT_DIR_ENV,
    EVENTS_FILE,
    METRICS_FILE,
    STOP_FILE,
    TRACE_FILE,
    checkpoint_step_dir,
)
from launcher.job_exit_codes import TRAINER_EVICTED, TRAINER_STOPPED
from launcher.job_spec import JobSpec
from launcher.native import runtime_config as native_switches
from launcher.native.model_config import GPTConfig
from launcher.recovery.evictions import pending_evictions
from launcher.schedules import ScheduleError
from launcher.train import checkpoint, data, faults, metrics, rank_records, schedule_cache
from launcher.train.agreement import agree, agreed
from launcher.train.checkpoint import WriteTiming
from launcher.train.checkpoint_writer import CheckpointWriter
from launcher.train.init_weights import init_chunk
from launcher.train.layout import make_layout, node_name, read_rank_order
from launcher.train.native_pipeline import (
    Pipeline,
    StepArgs,
    device_memory_used,
    load_library,
    make_comm_id,
)
from launcher.train.split import ranges_from_counts, split_layers
from launcher.train.stop_signals import StopRequest, signal_name
from launcher.train.straggler_watch import StragglerWatch, watch_for
from launcher.train.watchdog import Watchdog


@dataclass(frozen=True)
class TrainOptions:
    """What the command line adds to the job spec."""

    run_dir: Path
    """Where metrics.jsonl and trace.json go."""
    base_dir: Path
    """Directory relative paths of the job file are resolved against."""
    library: Path | None = None
    """libgantry_native.so to use (None: GANTRY_NATIVE_LIB or the default build)."""
    resume: bool = False
    """Continue from the newest complete checkpoint (if any)."""
    resume_from: Path | None = None
    """Continue from exactly this checkpoint directory."""
    rank_order: Path | None = None
    """Placement's rank-order file."""
    max_steps: int | None = None
    """Stop after this many steps in this invocation (the schedule still spans train.steps)."""


def resolve_job_path(base: Path, value: str | None) -> Path | None:
    """A path field of the job (checkpoint.dir, train.data, ...) against the job file's dir."""
    if value is None:
        return None
    path = Path(value)
    return path if path.is_absolute() else base / path


def run(spec: JobSpec, opts: TrainOptions) -> int:
    """One rank's whole run; its start, proof of life and exit are recorded in the attempt
    directory (launcher/train/rank_records.py) and the watchdog covers it from here on."""
    stop = StopRequest()
    stop.install()  # before MPI init: an early USR1 must not kill the rank
    records = rank_records.start_from_env()
    watchdog = Watchdog(spec.policy.hang_timeout_s,
                        records.rank if records else rank_records.rank_from_env() or 0,
                        records=records, startup_timeout_s=spec.policy.startup_timeout_s)
    watchdog.start()
    watchdog.beat("MPI init", starting=True)
    code, why = 1, ""
    try:
        code = _run(spec, opts, stop, watchdog)
        return code
    except GantryError as err:
        code, why = err.exit_status, str(err)
        raise
    except BaseException as err:
        code, why = 1, f"{type(err).__name__}: {err}"
        raise
    finally:
        watchdog.stop()
        stop.uninstall()
        rank_records.record_exit(code, why)


def _run(spec: JobSpec, opts: TrainOptions, stop: StopRequest, watchdog: Watchdog) -> int:
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    watchdog.beat("rank layout", starting=True)
    rank, size = world.Get_rank(), world.Get_size()
    par, model = spec.parallelism, spec.model
    names = world.allgather(node_name())
    with agreed(world):
        try:
            faults.check_environment()
            order = read_rank_order(opts.rank_order, size, names) if opts.rank_order else None
            layout = make_layout(rank, size, par.pp, par.dp, order)
            watchdog.beat("schedule", starting=True)
            blob = (schedule_cache.table_bytes(par.schedule, par.pp, par.micro_batches,
                                               par.virtual_stages,
                                               schedule_cache.job_dir_from_env())
                    if rank == 0 else None)
            ranges = (ranges_from_counts(par.stage_layers) if par.stage_layers is not None
                      else split_layers(model.n_layer, par.pp * par.virtual_stages,
                                        model.n_embd, model.seq_len, model.vocab_size))
            watch = (watch_for(spec, [make_layout(r, size, par.pp, par.dp, order).pipe_rank
                                      for r in range(size)], ranges, names, opts.run_dir)
                     if rank == 0 else None)
        except ScheduleError as err:
            raise UserInputError(f"parallelism: {err}") from None
    table = schedule_cache.load(world.bcast(blob, root=0), par.schedule)
    node_id = sorted(set(names), key=names.index).index(names[rank])
    config = GPTConfig(model.vocab_size, model.seq_len, model.n_layer, model.n_head,
                       model.n_embd)
    watchdog.beat("communicator bootstrap", starting=True)
    lib = load_library(opts.library)
    # NCCL bootstrap hook: world rank 0 makes the id, every rank gets the same bytes.
    comm_id: bytes | None = None
    with agreed(world):
        comm_id = make_comm_id(lib) if rank == 0 else None
    comm_id = world.bcast(comm_id, root=0)
    assert comm_id is not None
    pipe = Pipeline(lib, config, world.py2f(), pp=par.pp, dp=par.dp,
                    pipe_rank=layout.pipe_rank, replica=layout.replica, node_id=node_id,
                    v=par.virtual_stages, m=par.micro_batches, batch=par.micro_batch_size,
                    seq_len=model.seq_len, stage_layers=ranges,
                    slots_per_stage=table.slots_per_stage, comm_id=comm_id)
    if rank == 0:
        print(f"info: stage layers {ranges}", flush=True)
    try:
        return _train(world, spec, opts, layout, table, pipe, lib, stop, watchdog, watch)
    finally:
        pipe.close()


def _resume_candidates(world: Any, opts: TrainOptions, ckpt_root: Path | None) -> list[Path]:
    """Rank 0's list, newest first, broadcast: the --resume-from directory, or with --resume
    every complete checkpoint under checkpoint.dir. A failure to list them fails every rank."""
    candidates: list[Path] = []
    with agreed(world):
        if world.Get_rank() == 0:
            try:
                if opts.resume_from is not None:
                    candidates = [opts.resume_from]
                elif opts.resume and ckpt_root is not None:
                    candidates = [checkpoint_step_dir(ckpt_root, step) for step in
                                  sorted(checkpoint.complete_steps(ckpt_root), reverse=True)]
            except OSError as err:
                raise GantryError(f"{ckpt_root}: cannot list the checkpoints ({err})") from None
    return list(world.bcast(candidates, root=0))


def _pick_checkpoint(world: Any, opts: TrainOptions, n_stages: int, stages: list[int],
                     candidates: list[Path]) -> tuple[Path, int] | None:
    """Collective: the newest candidate whose manifest is valid and whose every shard matches
    it, each rank hashing only its own ``stages``' shards (replica 0; the others pass an
    empty list), so a resume reads each shard once, on the rank that loads it. A bad
    checkpoint: with --resume-from an error naming the file (exit 2); with --resume rank 0
    warns and the next older one is tried. Any other failure of a rank (out of memory, no
    thread) fails every rank (exit 1, so the job may be retried) rather than skip a good
    checkpoint."""
    for candidate in candidates:
        step: int | None = None
        failure: tuple[bool, str] | None = None
        try:
            step = checkpoint.verify(candidate, n_stages, stages)
        except UserInputError as err:
            failure = (True, str(err))
        except Exception as err:  # must reach the allgather, not hang the other ranks
            failure = (False, f"{candidate}: cannot verify ({type(err).__name__}: {err})")
        failures = [f for f in world.allgather(failure) if f is not None]
        if not failures:
            assert step is not None
            return candidate, step
        unexpected = [message for is_input, message in failures if not is_input]
        if unexpected:
            agree(world, GantryError(unexpected[0]))
        if opts.resume_from is not None:
            agree(world, UserInputError(failures[0][1]))
        if world.Get_rank() == 0:
            sys.stderr.write(f"warning: skipping checkpoint: {failures[0][1]}\n")
    return None


def _load_start(world: Any, spec: JobSpec, opts: TrainOptions, layout: Any,
                pipe: Pipeline) -> int:
    """Fills weights (and moments); returns the first step to run."""
    ckpt_root = resolve_job_path(opts.base_dir, spec.checkpoint.dir)
    n_stages = spec.parallelism.pp * spec.parallelism.virtual_stages
    mine = [chunk.stage for chunk in pipe.chunks] if layout.replica == 0 else []
    chosen = _pick_checkpoint(world, opts, n_stages, mine,
                              _resume_candidates(world, opts, ckpt_root))
    start = 0
    with agreed(world):
        if chosen is not None:
            directory, start = chosen
            for chunk in pipe.chunks:
                checkpoint.load_chunk(directory, chunk)
        else:
            init = resolve_job_path(opts.base_dir, spec.train.init_weights)
            for chunk in pipe.chunks:
                if init is not None:
                    chunk.load(init)
                else:
                    init_chunk(chunk, spec.model.n_layer, spec.train.seed)
    return int(world.bcast(start, root=0))


def _train(world: Any, spec: JobSpec, opts: TrainOptions, layout: Any, table: Any,
           pipe: Pipeline, lib: Any, stop: StopRequest, watchdog: Watchdog,
           watch: StragglerWatch | None) -> int:
    par, model, train = spec.parallelism, spec.model, spec.train
    rank = world.Get_rank()
    watchdog.beat("checkpoint load", starting=True)
    start = _load_start(world, spec, opts, layout, pipe)
    shards = None
    switches: dict[str, str] = {}
    with agreed(world):
        data_glob = resolve_job_path(opts.base_dir, train.data)
        shards = (data.read_shards(str(data_glob), model.vocab_size)
                  if data_glob is not None else None)
        switches = native_switches.recorded(lib)  # the GANTRY_* switches the library runs with
    actions = table.rank_array(layout.pipe_rank)
    if rank == 0:
        print(f"native backend {lib.lib.gt_backend_name().decode()}, comm "
              f"{lib.lib.gt_comm_backend().decode()}: {pipe.chunks[0].info()}", flush=True)
    n_micro = par.dp * par.micro_batches
    rows = slice(layout.replica * par.micro_batches, (layout.replica + 1) * par.micro_batches)
    ckpt_root = resolve_job_path(opts.base_dir, spec.checkpoint.dir)
    writer = None
    if ckpt_root is not None:
        writer = CheckpointWriter(world, agree, ckpt_root, keep=spec.checkpoint.keep,
                                  seed=train.seed, writes=layout.replica == 0,
                                  background=spec.checkpoint.async_write,
                                  max_lag=spec.checkpoint.max_lag_steps,
                                  on_complete=_checkpoint_event(opts.run_dir),
                                  pinned_staging=spec.checkpoint.pinned_staging)
    resuming = opts.resume or opts.resume_from is not None
    nodes = sorted(set(world.allgather(node_name())))
    if rank == 0:
        opts.run_dir.mkdir(parents=True, exist_ok=True)
        if resuming:
            metrics.set_aside_after(opts.run_dir, start)
        metrics.append_jsonl(opts.run_dir / EVENTS_FILE, {
            "event": "start", "time": time.time(), "step": start, "resumed": start > 0,
            "attempt": os.environ.get("SLURM_RESTART_COUNT", "0"),
            "nodes": nodes, "native_switches": switches})
    end = train.steps if opts.max_steps is None else min(train.steps, start + opts.max_steps)
    events: list[dict[str, Any]] = []
    # Trace times count from rank 0's wall clock: ranks (and hosts with synchronised clocks)
    # share one time axis in trace.json, so the report can line their timelines up.
    t_begin = float(world.bcast(time.time(), root=0))
    warned_unpinned = False
    slow_node_s = faults.slow_node_delay(node_name())  # test hook: a straggler
    attempt = os.environ.get(ATTEMPT_DIR_ENV)
    evictions_at = Path(attempt) if attempt and rank == 0 else None
    checkpoint_s = 0.0  # the loop's time in checkpoint calls since the last step record
    try:
        for step in range(start, end):
            faults.maybe_hang(step + 1, rank, world.Get_size())
            faults.maybe_kill(step + 1, rank, world.Get_size())
            watchdog.beat(f"step {step + 1}")
            inputs, targets = data.global_batch(step, n_micro, par.micro_batch_size,
                                                model.seq_len, model.vocab_size, train.seed,
                                                shards)
            args = StepArgs(step, train.steps, 1 if train.lr_schedule == "cosine" else 0,
                            train.warmup_steps, train.lr, train.min_lr, train.beta1,
                            train.beta2, train.eps, train.weight_decay, train.grad_clip)
            if slow_node_s:
                time.sleep(slow_node_s)
            t_step = time.time() - t_begin
            result = pipe.step(actions, inputs[rows].copy(), targets[rows].copy(), args)
            if slow_node_s:  # the hook's delay counts as this step's compute (faults.py)
                result.compute_s += slow_node_s
                result.total_s += slow_node_s
            events.extend(metrics.trace_events(rank, step, t_step, pipe.trace()))
            timings: dict[str, float] = {k: getattr(result, k) for k in
                                         ("compute_s", "send_s", "recv_s", "bubble_s",
                                          "sync_s", "total_s", "dp_wait_s", "tied_s",
                                          "norm_s")}
            timings["dp_buckets"] = result.dp_buckets
            timings["opt_ranges"] = result.opt_ranges
            timings["mem_used_bytes"] = device_memory_used(lib)
            per_rank = world.gather(timings, root=0)
            if rank == 0:
                slowest = max(t["total_s"] for t in per_rank)
                record = {
                    "step": step + 1, "loss": result.loss, "lr": result.lr,
                    "grad_norm": result.grad_norm, "time": time.time(),
                    "wall_s": time.time() - t_begin, "checkpoint_s": checkpoint_s,
                    "tokens_per_s": n_micro * par.micro_batch_size * model.seq_len / slowest,
                    "ranks": per_rank,
                }
                metrics.append_jsonl(opts.run_dir / METRICS_FILE, record)
                print(f"step {step + 1}/{train.steps} loss {result.loss:.6f} "
                      f"norm {result.grad_norm:.4f} lr {result.lr:.3e}", flush=True)
                if watch is not None:
                    watch.after_step(step + 1, [t["compute_s"] for t in per_rank])
            faults.after_step()
            watchdog.beat(f"after step {step + 1}")
            evict = evictions_at is not None and bool(pending_evictions(evictions_at))
            if evictions_at is not None:
                stop.note_requested(evictions_at)
            decision = stop.agreed(world, evict)
            interval = spec.checkpoint.interval
            t_checkpoint = time.time()
            if writer is not None and ((interval and (step + 1) % interval == 0)
                                       or step + 1 == train.steps or decision):
                watchdog.beat(f"checkpoint {step + 1}")
                writer.save(step + 1, pipe.chunks)
                if writer.unpinned is not None and not warned_unpinned:
                    warned_unpinned = True
                    sys.stderr.write(f"gantry train: rank {rank}: checkpoint copies run "
                                     f"unpinned (slower): {writer.unpinned}\n")
            elif writer is not None:
                writer.poll(step + 1)
            checkpoint_s = time.time() - t_checkpoint
            if decision and step + 1 < end:
                watchdog.beat(f"checkpoint {step + 1} (stopping)")
                if writer is not None:
                    writer.wait()
                if decision.signum:
                    return _stopped(world, opts, decision.signum, step + 1, writer,
                                    time.time() - t_checkpoint)
                return _evicted(world, opts, step + 1, writer, evictions_at)
        watchdog.beat("final checkpoint")
        t_checkpoint = time.time()
        if writer is not None:
            writer.wait()
        if rank == 0:
            metrics.append_jsonl(opts.run_dir / EVENTS_FILE, {
                "event": "end", "time": time.time(), "step": end,
                "checkpoint_s": checkpoint_s + time.time() - t_checkpoint})
    finally:
        if writer is not None and (why := writer.close()) is not None:
            sys.stderr.write(f"gantry train: rank {rank}: unpinning checkpoint staging: {why}\n")
    all_events = world.gather(events, root=0)
    if rank == 0:
        flat = [e for part in all_events for e in part]
        metrics.write_trace(opts.run_dir / TRACE_FILE, flat, world.Get_size())
    return 0


def _checkpoint_event(run_dir: Path) -> Callable[[int, int, list[WriteTiming]], None]:
    """Rank 0's record of each completed checkpoint in events.jsonl: its step, the step after
    which its manifest was written (later than its step when written in the background), its
    bytes (all shards) and, per phase, the most seconds any writing rank spent copying to host
    memory (on the loop), streaming into the files and the checksum, and syncing them."""
    def record(step: int, completed_after: int, timings: list[WriteTiming]) -> None:
        metrics.append_jsonl(run_dir / EVENTS_FILE, {
            "event": "checkpoint", "time": time.time(), "step": step,
            "completed_after_step": completed_after,
            "bytes": sum(t.bytes for t in timings),
            "copy_s": max((t.copy_s for t in timings), default=0.0),
            "write_s": max((t.write_s for t in timings), default=0.0),
            "sync_s": max((t.sync_s for t in timings), default=0.0)})
    return record


def _stopped(world: Any, opts: TrainOptions, signum: int, step: int,
             writer: CheckpointWriter | None, checkpoint_s: float = 0.0) -> int:
    """After a stop signal: record it (rank 0; ``checkpoint_s``: the loop's time in the
    checkpoint calls since the last step record) and return TRAINER_STOPPED on every rank."""
    name = signal_name(signum)
    saved = writer is not None and step in writer.completed
    if world.Get_rank() == 0:
        where = f"checkpoint step {step}" if saved else "no checkpoint (checkpoint.dir unset)"
        sys.stderr.write(f"gantry train: SIG{name}: stopped after step {step}, {where}\n")
        metrics.append_jsonl(opts.run_dir / EVENTS_FILE, {
            "event": "stop", "time": time.time(), "signal": name, "step": step,
            "checkpointed": saved, "checkpoint_s": checkpoint_s})
        attempt = os.environ.get(ATTEMPT_DIR_ENV)
        if attempt:  # the batch script reads it when only the step got the signal
            try:
                write_text(Path(attempt, STOP_FILE), f"{name} {step}\n")
            except WriteError as err:
                raise as_run_failure(err) from None
    world.barrier()
    return TRAINER_STOPPED


def _evicted(world: Any, opts: TrainOptions, step: int, writer: CheckpointWriter | None,
             attempt_dir: Path | None) -> int:
    """After an agreed eviction: record it (rank 0) and return TRAINER_EVICTED on every rank."""
    saved = writer is not None and step in writer.completed
    if world.Get_rank() == 0:
        asked = pending_evictions(attempt_dir) if attempt_dir is not None else []
        named = ", ".join(f"{e.node} ({e.source}: {e.reason})" for e in asked[:4]) or "?"
        where = f"checkpoint step {step}" if saved else "no checkpoint (checkpoint.dir unset)"
        sys.stderr.write(f"gantry train: eviction of {named}: stopped after step {step}, "
                         f"{where}\n")
        metrics.append_jsonl(opts.run_dir / EVENTS_FILE, {
            "event": "evict", "time": time.time(), "step": step, "checkpointed": saved,
            "nodes": {e.node: e.what for e in asked}})
    world.barrier()
    return TRAINER_EVICTED
