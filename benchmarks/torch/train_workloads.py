"""PyTorch side of benchmarks/compare_pytorch: the same workloads as benchmarks/bench_train.cpp
(same shapes, optimizers, steps, synthetic data, median ms per step over timed steps after warm-up).
Prints one JSON line per workload. --device cuda runs them on the GPU, the device synchronized before and
after each timed step as bench_train does, and adds mlp_fp16 (F16 autocast with a GradScaler)."""
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
        # the CNN people write; its loss smooths labels and OneCycleLR steps after every optimizer step (EXTRAS)
        "bn_cnn": (30, lambda: nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                                             nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                                             nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(),
                                             nn.Linear(64 * 14 * 14, 10)),
                   lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=1e-2), (128, 1, 28, 28), 10),
    }


# Per workload (and its _bf16 twin): cross_entropy's label_smoothing, and OneCycleLR with max_lr = the
# optimizer's lr over all the run's steps. halfgrad's OneCycleLR does not cycle momentum, so neither does this.
EXTRAS = {"bn_cnn": {"label_smoothing": 0.1, "one_cycle": True}}


def with_amp(ws, device):
    """recipe_bf16, cnn_bf16 and bn_cnn_bf16: the same workloads with forward and loss under
    torch.autocast(device, bfloat16); on CUDA also mlp_fp16: float16 autocast and a GradScaler."""
    for name in ("recipe", "cnn", "bn_cnn"):
        ws[name + "_bf16"] = ws[name] + (torch.bfloat16,)
    if device == "cuda":
        ws["mlp_fp16"] = ws["mlp"] + (torch.float16,)
    return ws


def grad_scaler():
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


def run(name, spec, steps, threads, device):
    default_steps, make_model, make_opt, shape, classes = spec[:5]
    amp_dtype = spec[5] if len(spec) > 5 else None
    steps = steps or default_steps
    extras = EXTRAS.get(name.removesuffix("_bf16").removesuffix("_fp16"), {})
    warmup = max(3, steps // 10)
    torch.manual_seed(0)
    model = make_model().to(device)
    opt = make_opt(model.parameters())
    scaler = grad_scaler() if amp_dtype == torch.float16 else None
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sched = None
    if extras.get("one_cycle"):
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=opt.param_groups[0]["lr"],
                                                    total_steps=warmup + steps, cycle_momentum=False)
    x = torch.randn(*shape).to(device)
    if classes:
        target = torch.tensor([(i * 7) % classes for i in range(shape[0])]).to(device)
        smoothing = extras.get("label_smoothing", 0.0)
        loss_fn = lambda y, t: nn.functional.cross_entropy(y, t, label_smoothing=smoothing)  # noqa: E731
    else:
        target = torch.randn(*shape).to(device)
        loss_fn = nn.functional.mse_loss

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
            loss = loss_fn(model(x), target)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        if sched is not None:
            sched.step()

    for _ in range(warmup):
        step()
    ms = []
    for _ in range(steps):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        ms.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"framework": "pytorch " + torch.__version__, "workload": name, "device": device,
                      "threads": threads,
                      "steps": steps, "ms_per_step_median": round(statistics.median(ms), 4),
                      "ms_per_step_mean": round(statistics.fmean(ms), 4)}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="all")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("train_workloads.py: --device cuda, but this PyTorch sees no CUDA device")
    for name, spec in with_amp(workloads(), a.device).items():
        if a.workload in ("all", name):
            run(name, spec, a.steps, a.threads, a.device)


if __name__ == "__main__":
    main()
