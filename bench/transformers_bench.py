"""Hugging Face transformers (eager attention) on a model folder, the
reference the libtorch engine's goal is stated against: output tokens/s
at batch 1, 8 and 32 (prompt 128, 64 new tokens, greedy, f32), and the
share of the wall time spent inside ATen operators.

Prompts: each row holds 128 ids of the tokenizer's ordinary vocabulary
(its special tokens left out), taken in id order and continuing from row
to row, so every row differs and the run is the same every time. No
special token is added: builtin:tiny's tokenizer adds none, as in the
engines' runs. All rows have the same length, so no padding is needed.

Each batch: one warm-up (its prompts, 4 new tokens), then the best of
`rounds` timed `generate` calls (64 new tokens, min_new_tokens=64 so end
tokens do not stop a row early; rounds outer, batches inner), then one
call under torch.profiler. Operator share = time inside the outermost
`aten::` operators / that call's wall time; wall / operator time is the
most a caller that runs the same kernels without Python could gain
(approximate: the profiler adds its own cost to each operator and to the
call).

Run by bench/transformers:
  python bench/transformers_bench.py MODEL_DIR [rounds=2] [batches=1,8,32] [threads=N] [profile=1]
The last line printed is one JSON object with the figures.
"""

import json
import os
import sys
import time

# The profiler's library logs its start and stop, and that it found no GPU.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

PROMPT = 128
OUTPUT = 64


def arguments():
    if len(sys.argv) < 2 or "=" in sys.argv[1]:
        sys.exit(__doc__.split("Run by bench/transformers:\n")[1])
    options = {
        "rounds": "2",
        "batches": "1,8,32",
        "threads": str(len(os.sched_getaffinity(0))),
        "profile": "1",
    }
    for arg in sys.argv[2:]:
        key, sep, value = arg.partition("=")
        if not sep or key not in options:
            expected = ", ".join(options)
            sys.exit(f"bench/transformers_bench.py: unknown argument `{arg}` (expected {expected})")
        options[key] = value
    batches = [int(b) for b in options["batches"].split(",")]
    return (
        sys.argv[1],
        int(options["rounds"]),
        batches,
        int(options["threads"]),
        options["profile"] != "0",
    )


def prompts(tokenizer, batch):
    special = set(tokenizer.all_special_ids)
    ordinary = [i for i in range(len(tokenizer)) if i not in special]
    ids = [
        [ordinary[(row * PROMPT + j) % len(ordinary)] for j in range(PROMPT)]
        for row in range(batch)
    ]
    input_ids = torch.tensor(ids, dtype=torch.long)
    return input_ids, torch.ones_like(input_ids)


def generate(model, inputs, new_tokens, pad):
    """Seconds of one greedy `generate` call; checks every row got all its
    new tokens."""
    input_ids, attention_mask = inputs
    start = time.perf_counter()
    out = model.generate(
        input_ids,
        attention_mask=attention_mask,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        use_cache=True,
        pad_token_id=pad,
    )
    seconds = time.perf_counter() - start
    assert out.shape == (input_ids.shape[0], PROMPT + new_tokens), out.shape
    return seconds


def operator_seconds(profile):
    """Seconds inside the outermost `aten::` operators (their total time,
    which holds the operators nested in them)."""
    total = 0
    for event in profile.events():
        if not event.name.startswith("aten::"):
            continue
        parent = event.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        if parent is None:
            total += event.cpu_time_total
    return total / 1e6


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return os.uname().machine


def main():
    model_dir, rounds, batches, threads, with_profile = arguments()
    torch.set_num_threads(threads)
    transformers.utils.logging.disable_progress_bar()
    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    print(
        f"transformers bench: {model_dir}, prompt {PROMPT}, output {OUTPUT}, greedy, f32, "
        f"eager attention, threads {threads}, transformers {transformers.__version__}, "
        f"torch {torch.__version__}, loaded in {time.perf_counter() - t0:.2f} s"
    )
    wait_policy = os.environ.get("OMP_WAIT_POLICY", "(unset: libgomp spins)")
    print(
        f"cpu: {cpu_name()} ({len(os.sched_getaffinity(0))} cores visible); load average "
        f"(1 min) at start: {os.getloadavg()[0]:.2f}; OMP_WAIT_POLICY={wait_policy}"
    )
    pad = tokenizer.pad_token_id
    inputs = {b: prompts(tokenizer, b) for b in batches}
    best = {b: float("inf") for b in batches}
    profiled = {}
    with torch.inference_mode():
        for b in batches:
            generate(model, inputs[b], 4, pad)
        started = time.perf_counter()
        for _ in range(rounds):
            for b in batches:
                best[b] = min(best[b], generate(model, inputs[b], OUTPUT, pad))
        timing = time.perf_counter() - started
        for b in batches if with_profile else []:
            cpu = [torch.profiler.ProfilerActivity.CPU]
            with torch.profiler.profile(activities=cpu) as profile:
                wall = generate(model, inputs[b], OUTPUT, pad)
            profiled[b] = (wall, operator_seconds(profile))

    print(
        f"\noutput tokens/s (best of {rounds} rounds, {timing:.0f} s; load average now "
        f"{os.getloadavg()[0]:.2f}); then one profiled call per batch: its wall time, the "
        f"time inside ATen operators, their share, wall / operator time"
    )
    header = ("batch", "tok/s", "seconds", "profiled", "in ops", "share", "wall/ops")
    print("  ".join(f"{h:>{w}}" for h, w in zip(header, (5, 8, 7, 8, 7, 6, 8))))
    tps, share = {}, {}
    for b in batches:
        tps[str(b)] = round(b * OUTPUT / best[b], 1)
        if b not in profiled:
            print(f"{b:>5}  {tps[str(b)]:>8.1f}  {best[b]:>7.3f}  (not profiled)")
            continue
        wall, ops = profiled[b]
        share[str(b)] = round(ops / wall, 3)
        print(
            f"{b:>5}  {tps[str(b)]:>8.1f}  {best[b]:>7.3f}  {wall:>8.3f}  {ops:>7.3f}  "
            f"{ops / wall:>6.1%}  {wall / ops:>7.2f}x"
        )
    print(
        json.dumps(
            {
                "transformers": transformers.__version__,
                "torch": torch.__version__,
                "threads": threads,
                "rounds": rounds,
                "tps": tps,
                "op_share": share,
            }
        )
    )


if __name__ == "__main__":
    main()
