#!/usr/bin/env python3
"""PyTorch twin of benchmarks/amp_recipe.cpp, for same-machine ratios: the AMP recipe's MLP
((layers-1) x [Linear(w, w), ReLU] + Linear(w, w)), MSE loss, SGD lr 1e-3 on random data, timed in
F32, under autocast BF16 and under autocast F16 with a GradScaler.

  python3 benchmarks/torch/amp_recipe.py [--width 1024] [--batch 256] [--layers 3] [--batches 20]
                                         [--epochs 2] [--full] [--threads N] [--device cpu|cuda]

Prints the same "Total execution time" lines as amp_recipe, so the two outputs line up.
"""
import argparse
import contextlib
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--full", action="store_true", help="width 4096, batch 512, 3 layers, 50 batches, 3 epochs")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = p.parse_args()
    if a.full:
        a.width, a.batch, a.layers, a.batches, a.epochs = 4096, 512, 3, 50, 3
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    data = [torch.randn(a.batch, a.width, device=dev) for _ in range(a.batches)]
    targets = [torch.randn(a.batch, a.width, device=dev) for _ in range(a.batches)]
    print(f"torch {torch.__version__}, width {a.width}, batch {a.batch}, {a.layers} layers, "
          f"{a.batches} batches x {a.epochs} epochs, {torch.get_num_threads()} thread(s), {dev.type}")

    def model():
        mods = []
        for _ in range(a.layers - 1):
            mods += [torch.nn.Linear(a.width, a.width), torch.nn.ReLU()]
        mods.append(torch.nn.Linear(a.width, a.width))
        return torch.nn.Sequential(*mods).to(dev)

    times = {}
    for name, dtype in (("F32", None), ("BF16", torch.bfloat16), ("F16", torch.float16)):
        net = model()
        opt = torch.optim.SGD(net.parameters(), lr=1e-3)
        scaler = torch.cuda.amp.GradScaler(enabled=(dtype == torch.float16 and dev.type == "cuda"))
        if dtype == torch.float16 and dev.type == "cpu" and not hasattr(torch, "get_autocast_dtype"):
            # autocast on CPU accepts only BF16 in older releases (1.13)
            print(f"Mixed precision (autocast {name}): n/a (CPU autocast takes BF16 only in torch {torch.__version__})")
            continue

        def step(x, y):
            ac = torch.autocast(device_type=dev.type, dtype=dtype) if dtype else contextlib.nullcontext()
            with ac:
                loss = torch.nn.functional.mse_loss(net(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)

        step(data[0], targets[0])  # warm-up: kernels chosen, cuBLAS handles made
        sync()
        start = time.perf_counter()
        for _ in range(a.epochs):
            for x, y in zip(data, targets):
                step(x, y)
        sync()
        times[name] = time.perf_counter() - start
        label = "Default precision (F32)" if dtype is None else f"Mixed precision (autocast {name})"
        print(f"{label}:\nTotal execution time = {times[name]:.3f} sec")
    if "F32" in times:
        print("speed-up over F32: " + ", ".join(f"{k} {times['F32'] / v:.2f}x" for k, v in times.items() if k != "F32"))


if __name__ == "__main__":
    main()
