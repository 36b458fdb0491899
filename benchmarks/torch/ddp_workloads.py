"""PyTorch side of benchmarks/compare_ddp: torch.nn.parallel.DistributedDataParallel over the gloo backend on the
mlp and cnn workloads of benchmarks/torch/train_workloads.py, timed as benchmarks/bench_ddp.cpp times halfgrad's
(each rank the workload's batch of synthetic data, one thread per rank; `repeats` times `steps` steps, the median):
rank 0 alone without DDP while the others wait, then every rank with DDP (the slowest rank's time).
    python3 benchmarks/torch/ddp_workloads.py --ranks 2 [--workload mlp|cnn|all] [--steps N] [--repeats N]
Prints one JSON line per workload with the samples per second alone and with DDP."""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from train_workloads import workloads


def timed(body, steps, repeats, rank, everyone):
    per_step = []
    for _ in range(repeats):
        dist.barrier()
        t = 0.0
        if everyone or rank == 0:
            t0 = time.perf_counter()
            for _ in range(steps):
                body()
            t = (time.perf_counter() - t0) / steps
        dist.barrier()
        v = torch.tensor([t], dtype=torch.float64)
        dist.all_reduce(v, op=dist.ReduceOp.MAX)
        per_step.append(v.item())
    return statistics.median(per_step)


def worker(rank, world, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for name in ("mlp", "cnn"):
        if args.workload not in ("all", name):
            continue
        _, make_model, make_opt, shape, classes = workloads()[name][:5]
        steps = args.steps or (100 if name == "mlp" else 8)
        torch.manual_seed(0)
        plain = make_model()
        torch.manual_seed(0)
        ddp = nn.parallel.DistributedDataParallel(make_model())
        opt_plain, opt_ddp = make_opt(plain.parameters()), make_opt(ddp.parameters())
        g = torch.Generator().manual_seed(100 + rank)
        x = torch.randn(*shape, generator=g)
        y = torch.tensor([(i * 7 + rank) % classes for i in range(shape[0])])

        def step(model, opt):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

        for _ in range(3):
            step(plain, opt_plain)
            step(ddp, opt_ddp)
        alone = timed(lambda: step(plain, opt_plain), steps, args.repeats, rank, False)
        together = timed(lambda: step(ddp, opt_ddp), steps, args.repeats, rank, True)
        if rank == 0:
            b = shape[0]
            print(json.dumps({"framework": "pytorch", "version": torch.__version__, "bench": "ddp", "workload": name,
                              "backend": "gloo", "ranks": world, "threads": args.threads, "batch_per_rank": b,
                              "steps": steps, "repeats": args.repeats, "alone_samples_per_s": b / alone,
                              "ddp_samples_per_s": world * b / together,
                              "speedup": world * b / together / (b / alone)}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--workload", default="all", choices=["mlp", "cnn", "all"])
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--port", type=int, default=29517)
    args = p.parse_args()
    mp.spawn(worker, args=(args.ranks, args, args.port), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
