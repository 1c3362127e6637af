"""GPT-2 124M in gantry and in a PyTorch reference (transformers' GPT2LMHeadModel) on one GPU,
from the same Hugging Face-format weights and the same GPT-2-token shards, then gantry's
exported weights back in transformers.

1. Weights: GPT2LMHeadModel(GPT2Config(12 layers, 768, 12 heads, vocab 50257, 1024 positions,
   no dropout)) made with a fixed seed, `save_pretrained` (model.safetensors, fp32). Nothing is
   downloaded.
2. Data: `gantry data --tokenizer gpt2 --tokenizer-files VOCAB` over this checkout's text
   (docs, sources); optionally checked token for token against tiktoken built from the same
   files.
3. gantry: `gantry train` of examples/gpt2-124m-finetune.yaml with the run's paths and sizes
   (constant lr, no warm-up, clipping 1.0), checkpoint at the end.
4. PyTorch: the same file loaded with `from_pretrained` (SDPA attention), bf16 autocast, fp32
   master weights, torch.optim.AdamW (fused) with the same settings and decay groups (2-D
   tensors), clip_grad_norm_ 1.0, the same batches (launcher.train.data.global_batch).
5. Losses compared step by step; tokens/s over the steps after the warm-up (wall clock), MFU
   against a bf16 matrix-product peak measured in the same run.
6. `gantry checkpoints --export-weights` -> GPT2LMHeadModel.from_pretrained; on a held-out
   batch: its fp32 next-token logits against gantry's own forward (the CUDA stage's residual
   stream after the 12 blocks, then ln_f and the tied head in fp32), its loss against the CUDA
   stage's loss.

Prints one JSON line last (everything measured); the run's files stay under --work. The
sizes can be shrunk and --device cpu (with the CPU library) dry-runs the whole flow on a
machine without a GPU (no timing meaning there).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launcher.job_dir import METRICS_FILE  # noqa: E402
from launcher.train.data import global_batch, read_shards  # noqa: E402

V = 50257
TEXT_SUFFIXES = (".md", ".py", ".c", ".cu", ".h", ".cpp", ".sh", ".yaml")
TEXT_DIRS = ("docs", "launcher", "native/src", "native/include", "native/tools", "tests",
             "topology", "bench")


def flops_per_token(layers: int, d: int, vocab: int, seq: int) -> float:
    """The anchor's formula (bench/anchors/torch_pp_baseline.py, bench_gantry_gpu.py)."""
    return 6 * (layers * 12 * d * d + vocab * d) + 12 * layers * d * seq


def gantry(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", "launcher", *args], cwd=REPO, text=True,
                          capture_output=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"gantry {args[0]} failed ({done.returncode}): "
                         f"{(done.stderr or done.stdout)[-2000:]}")
    return done.stdout


def make_weights(a: argparse.Namespace, work: Path) -> Path:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=V, n_positions=a.seq, n_embd=a.d, n_layer=a.layers,
                        n_head=a.heads,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        activation_function="gelu_new", layer_norm_epsilon=1e-5)
    torch.manual_seed(a.seed)
    model = GPT2LMHeadModel(config)
    out = work / "hf-init"
    model.save_pretrained(out)
    return out


def make_data(work: Path, vocab_dir: Path) -> tuple[Path, list[Path]]:
    docs = [REPO / "README.md"]
    for top in TEXT_DIRS:
        docs += sorted(p for p in (REPO / top).rglob("*")
                       if p.suffix in TEXT_SUFFIXES and p.is_file() and "build" not in p.parts)
    out = work / "data" / "gpt2"
    gantry("data", *map(str, docs), "--out", str(out), "--tokenizer", "gpt2",
           "--tokenizer-files", str(vocab_dir), "--val-fraction", "0.02", "--json")
    return out, docs


def tiktoken_check(vocab_dir: Path, docs: list[Path], data: Path) -> dict[str, Any]:
    """Our shards against tiktoken's GPT-2 encoding built from the same two files."""
    try:
        import tiktoken
        from tiktoken.load import data_gym_to_mergeable_bpe_ranks

        ranks = data_gym_to_mergeable_bpe_ranks(str(vocab_dir / "merges.txt"),
                                                str(vocab_dir / "vocab.json"))
        enc = tiktoken.Encoding(
            "gpt2-local",
            pat_str=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
            mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256})
    except Exception as err:  # report, don't fail the run
        return {"tiktoken": f"not checked: {type(err).__name__}: {err}"[:300]}
    want: list[int] = []
    for doc in docs:
        want += [50256, *enc.encode_ordinary(doc.read_text(encoding="utf-8"))]
    got = np.concatenate([read_shards(str(data / "train_*.bin"), V),
                          read_shards(str(data / "val_*.bin"), V)])
    same = len(got) == len(want) and bool(np.array_equal(got, np.array(want, dtype=np.uint16)))
    return {"tiktoken_tokens": len(want), "tiktoken_identical": same}


def run_gantry_train(a: argparse.Namespace, work: Path, init: Path, data: Path) -> Path:
    spec = yaml.safe_load((REPO / "examples" / "gpt2-124m-finetune.yaml").read_text())
    spec["model"].update(n_layer=a.layers, n_embd=a.d, n_head=a.heads, seq_len=a.seq)
    spec["parallelism"].update(micro_batches=a.nmb, micro_batch_size=a.mbs)
    spec["train"].update(steps=a.steps, lr=a.lr, lr_schedule="constant", warmup_steps=0,
                         min_lr=0.0, seed=0, init_weights=str(init / "model.safetensors"),
                         data=str(data / "train_*.bin"))
    spec["checkpoint"] = {"dir": str(work / "ckpt"), "interval": 0, "keep": 1}
    job = work / "job.yaml"
    job.write_text(yaml.safe_dump(spec))
    env = dict(os.environ, GANTRY_ATTENTION=os.environ.get("GANTRY_ATTENTION", "cudnn"))
    log = gantry("train", str(job), "--lib", a.lib, "--run-dir", str(work / "run"), env=env)
    (work / "train.log").write_text(log)
    return work / "run" / METRICS_FILE


def peak_tflops(device: str) -> float:
    """bf16 matrix-product rate on random data: median of 10 after 3 warm-ups."""
    import torch

    n = 8192 if device == "cuda" else 512
    x = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    y = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        _ = x @ y
    times = []
    for _ in range(10):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        _ = x @ y
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / float(np.median(times)) / 1e12


def run_torch(a: argparse.Namespace, init: Path, tokens: np.ndarray) -> list[dict[str, float]]:
    import torch
    import torch.nn.functional as F
    from transformers import GPT2LMHeadModel

    dev = a.device
    model = GPT2LMHeadModel.from_pretrained(init, attn_implementation="sdpa",
                                            dtype=torch.float32).to(dev)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=dev == "cuda")
    history = []
    t0 = time.perf_counter()
    for step in range(a.steps):
        inputs, targets = global_batch(step, a.nmb, a.mbs, a.seq, V, 0, tokens)
        x_all = torch.from_numpy(inputs.astype(np.int64)).to(dev, non_blocking=True)
        y_all = torch.from_numpy(targets.astype(np.int64)).to(dev, non_blocking=True)
        total = torch.zeros((), device=dev)
        for k in range(a.nmb):
            with torch.autocast(dev, dtype=torch.bfloat16):
                logits = model(input_ids=x_all[k]).logits
            loss = F.cross_entropy(logits.float().reshape(-1, V), y_all[k].reshape(-1))
            (loss / a.nmb).backward()
            total += loss.detach() / a.nmb
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        history.append({"loss": float(total.item()), "grad_norm": float(norm.item()),
                        "wall_s": time.perf_counter() - t0})
    del model, opt
    if dev == "cuda":
        torch.cuda.empty_cache()
    return history


def throughput(history: list[dict[str, Any]], a: argparse.Namespace,
               peak: float) -> dict[str, float]:
    timed = history[a.warmup - 1:]
    step_s = (timed[-1]["wall_s"] - timed[0]["wall_s"]) / (len(timed) - 1)
    tok = a.mbs * a.nmb * a.seq / step_s
    return {"step_ms": round(step_s * 1e3, 2), "tokens_per_s": round(tok),
            "mfu": round(tok * flops_per_token(a.layers, a.d, V, a.seq) / 1e12 / peak, 4)}


def export_check(a: argparse.Namespace, work: Path, init: Path,
                 val: np.ndarray) -> dict[str, Any]:
    """gantry's exported weights in transformers vs gantry's own forward on a held-out batch."""
    import torch
    from safetensors.numpy import load_file
    from transformers import GPT2LMHeadModel

    from launcher.native.binding import NativeLibrary, NativeStage
    from launcher.native.cuda_stage import CudaStage, load_cuda_library
    from launcher.native.model_config import GPTConfig

    dev = a.device
    L, D, T = a.layers, a.d, a.seq

    exported = work / "exported.safetensors"
    gantry("checkpoints", str(work / "ckpt"), "--export-weights", str(exported), "--json")
    hf_dir = work / "hf-exported"
    hf_dir.mkdir()
    shutil.copy(init / "config.json", hf_dir / "config.json")
    shutil.copy(exported, hf_dir / "model.safetensors")
    model, info = GPT2LMHeadModel.from_pretrained(hf_dir, dtype=torch.float32,
                                                  attn_implementation="eager",
                                                  output_loading_info=True)
    model = model.to(dev).eval()
    batch = 4
    inputs, targets = global_batch(0, 1, batch, T, V, 0, val)
    x, y = inputs[0], targets[0]
    with torch.no_grad():
        hf_logits = model(input_ids=torch.from_numpy(x.astype(np.int64)).to(dev)).logits.float()
        hf_loss = float(torch.nn.functional.cross_entropy(
            hf_logits.reshape(-1, V), torch.from_numpy(y.astype(np.int64)).to(dev).reshape(-1)))

    lib = load_cuda_library(Path(a.lib)) if dev == "cuda" else NativeLibrary(Path(a.lib))
    config = GPTConfig(vocab_size=V, max_seq_len=T, n_layer=L, n_head=a.heads, n_embd=D)

    def stage(is_last: bool) -> Any:
        kind = CudaStage if dev == "cuda" else NativeStage
        made = kind(lib, config, 0, L, is_first=True, is_last=is_last, batch=batch, seq_len=T)
        made.load(exported)
        return made

    full = stage(True)
    gantry_loss = full.forward(0, tokens=x, targets=y)
    full.close()
    body = stage(False)
    hidden = body.forward(0, tokens=x)  # (B, T, C) residual stream after the blocks
    resid = hidden.float() if dev == "cuda" else torch.from_numpy(np.array(hidden))
    weights = load_file(str(exported))
    w = {k: torch.from_numpy(weights[f"transformer.{k}"]).to(dev)
         for k in ("ln_f.weight", "ln_f.bias", "wte.weight")}
    with torch.no_grad():
        normed = torch.nn.functional.layer_norm(resid, (D,), w["ln_f.weight"], w["ln_f.bias"],
                                                1e-5)
        g_logits = normed @ w["wte.weight"].t()
    body.close()
    diff = (g_logits - hf_logits).double()
    rel = float(diff.norm() / hf_logits.double().norm())
    top1 = float((g_logits.argmax(-1) == hf_logits.argmax(-1)).float().mean())
    return {"export_tensors": len(weights), "export_wte_shape": list(weights[
                "transformer.wte.weight"].shape),
            "hf_missing_keys": sorted(info["missing_keys"]),
            "hf_unexpected_keys": sorted(info["unexpected_keys"]),
            "heldout_hf_loss": round(hf_loss, 5), "heldout_gantry_loss": round(gantry_loss, 5),
            "heldout_loss_rel_diff": round(abs(gantry_loss - hf_loss) / hf_loss, 6),
            "heldout_logits_rel_err": round(rel, 6), "heldout_top1_agreement": round(top1, 5)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lib", required=True, help="CUDA libgantry_native.so")
    p.add_argument("--vocab-dir", type=Path, required=True,
                   help="GPT-2's vocab.json + merges.txt")
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10, help="steps left out of the timing")
    p.add_argument("--mbs", type=int, default=16)
    p.add_argument("--nmb", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dmodel", dest="d", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    a = p.parse_args()
    a.work.mkdir(parents=True, exist_ok=False)
    result: dict[str, Any] = {"model": f"gpt2 L{a.layers} d{a.d} h{a.heads}", "steps": a.steps,
                              "mbs": a.mbs, "nmb": a.nmb, "seq": a.seq, "vocab": V, "lr": a.lr,
                              "timed_steps": a.steps - a.warmup}
    init = make_weights(a, a.work)
    data, docs = make_data(a.work, a.vocab_dir)
    train = read_shards(str(data / "train_*.bin"), V)
    val = read_shards(str(data / "val_*.bin"), V)
    result.update(train_tokens=int(train.size), val_tokens=int(val.size), documents=len(docs),
                  **tiktoken_check(a.vocab_dir, docs, data))
    metrics = run_gantry_train(a, a.work, init, data)
    ours = [json.loads(line) for line in metrics.read_text().splitlines()]
    theirs = run_torch(a, init, train)
    peak = peak_tflops(a.device)
    rel = [abs(g["loss"] - t["loss"]) / t["loss"] for g, t in zip(ours, theirs, strict=True)]
    result.update(
        peak_bf16_tflops=round(peak, 1),
        gantry=throughput(ours, a, peak), torch=throughput(theirs, a, peak),
        gantry_loss=[round(r["loss"], 4) for r in ours],
        torch_loss=[round(r["loss"], 4) for r in theirs],
        gantry_norm=[round(r["grad_norm"], 4) for r in ours],
        torch_norm=[round(r["grad_norm"], 4) for r in theirs],
        loss_rel_diff_max=round(max(rel), 5), loss_rel_diff_max_step=int(np.argmax(rel)) + 1,
        loss_rel_diff_first=round(rel[0], 6), loss_rel_diff_last=round(rel[-1], 5))
    result["speedup"] = round(result["gantry"]["tokens_per_s"]
                              / result["torch"]["tokens_per_s"], 3)
    info = next((x for x in (a.work / "train.log").read_text().splitlines()
                 if x.startswith("native backend")), "")
    result["gantry_info"] = info
    result.update(export_check(a, a.work, init, val))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
