"""PyTorch side of benchmarks/compare_pytorch: the same workloads as benchmarks/bench_train.cpp
(same shapes, optimizers, steps, synthetic data, median ms per step over timed steps after warm-up).
Prints one JSON line per workload."""
import argparse
import json
import statistics
import time

import torch
from torch import nn


def workloads():
    return {
        "tiny": (2000, lambda: nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)),
                 lambda p: torch.optim.SGD(p, lr=0.01), (32, 64), 10),
        "mlp": (300, lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                                           nn.ReLU(), nn.Linear(128, 10)),
                lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9), (64, 1, 28, 28), 10),
        "recipe": (40, lambda: nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                                             nn.Linear(1024, 1024)),
                   lambda p: torch.optim.SGD(p, lr=1e-3), (256, 1024), 0),
        "cnn": (30, lambda: nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                          nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10)),
                lambda p: torch.optim.Adam(p, lr=1e-3), (128, 1, 28, 28), 10),
    }


def with_bf16(ws):
    """recipe_bf16 and cnn_bf16: the same workloads with forward and loss under torch.autocast("cpu", bfloat16)."""
    for name in ("recipe", "cnn"):
        ws[name + "_bf16"] = ws[name] + (True,)
    return ws


def run(name, spec, steps, threads):
    default_steps, make_model, make_opt, shape, classes = spec[:5]
    bf16 = len(spec) > 5 and spec[5]
    steps = steps or default_steps
    torch.manual_seed(0)
    model = make_model()
    opt = make_opt(model.parameters())
    x = torch.randn(*shape)
    if classes:
        target = torch.tensor([(i * 7) % classes for i in range(shape[0])])
        loss_fn = nn.functional.cross_entropy
    else:
        target = torch.randn(*shape)
        loss_fn = nn.functional.mse_loss

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(x), target)
        loss.backward()
        opt.step()

    for _ in range(max(3, steps // 10)):
        step()
    ms = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"framework": "pytorch " + torch.__version__, "workload": name, "threads": threads,
                      "steps": steps, "ms_per_step_median": round(statistics.median(ms), 4),
                      "ms_per_step_mean": round(statistics.fmean(ms), 4)}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="all")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    for name, spec in with_bf16(workloads()).items():
        if a.workload in ("all", name):
            run(name, spec, a.steps, a.threads)


if __name__ == "__main__":
    main()
