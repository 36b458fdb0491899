"""The one-liners of tests/habits/habits.cpp in PyTorch, printed in the same format: the expected results.

Run with a Python that has torch (Debian's python3-torch 1.13 wrote expected.txt):
    /usr/bin/python3 tests/habits/torch_habits.py > tests/habits/expected.txt
"""
import torch
import torch.nn.functional as F


def show(name, t):
    if not torch.is_tensor(t):
        print(f"{name}: shape=[] values={float(t):.9g}")
        return
    vals = " ".join(f"{float(v):.9g}" for v in t.detach().double().flatten().tolist())
    print(f"{name}: shape=[{','.join(str(d) for d in t.shape)}] values={vals}")


def arange_f(n, shape):
    return torch.arange(n).float().reshape(shape)


x = arange_f(12, (3, 4))
y = arange_f(4, (4,))
show("unsqueeze", x.unsqueeze(0))
show("squeeze", x.unsqueeze(0).unsqueeze(2).squeeze())
show("dim", x.dim())
show("sizes", x.size()[0] * 10 + x.size()[1])
show("mul", x.mul(y))
show("contiguous", x.t().contiguous())
show("is_contiguous", 1.0 if x.t().is_contiguous() else 0.0)
show("half", x.div(7).half())
show("half_to_float", x.div(7).half().float())
w = arange_f(8, (4, 2))
show("matmul", x.matmul(w))
show("mm", x.mm(w))
show("bmm", arange_f(24, (2, 3, 4)).bmm(arange_f(16, (2, 4, 2)).div(10)))
show("mean_dim", x.mean(1))
show("sum_keepdim", x.sum(1, True))
mv, mi = x.mul(y.sub(1.5).abs()).max(1)
show("max_values", mv)
show("max_indices", mi)
z = x.clone()
z.add_(y)
show("add_", z)
z += 1
show("iadd", z)
z.fill_(0)
show("fill_", z)
z2 = x.clone()
z2.zero_()
show("zero_", z2)
z2.copy_(y)
show("copy_", z2)
show("stack", torch.stack([y, y.mul(2)]))
show("chunk1", x.chunk(2, 1)[1])
show("split", x.split(3, 1)[1])
show("split_sizes", x.split([1, 2], 0)[1])
idx = torch.tensor([3, 0])
show("index_select", x.index_select(1, idx))
show("gather", x.gather(1, torch.tensor([[0, 0], [1, 0], [3, 2]])))
show("masked_fill", x.masked_fill(x > 5, -1))
tv, ti = x.topk(2)
show("topk_values", tv)
show("topk_indices", ti)
show("cumsum", x.cumsum(1))
show("one_hot", F.one_hot(torch.tensor([0, 2, 1]), 3))
show("expand", y.expand(3, 4))
show("index_slice", x[:, 2:5])
show("std", x.std())
show("norm", x.norm())
show("clamp", x.clamp(2, 7))
show("is_cuda", 1.0 if x.is_cuda else 0.0)
show("to_cuda", 1.0)
show("F_relu", F.relu(x.sub(5)))
show("F_softmax", F.softmax(x.div(4), 1))
show("F_mse_loss", F.mse_loss(x, x.mul(0.5)))
for name, opt_class in (("AdamW", lambda p: torch.optim.AdamW(p, 0.01)), ("SGD", lambda p: torch.optim.SGD(p, 0.01))):
    lin = torch.nn.Linear(4, 2)
    with torch.no_grad():
        lin.weight.copy_(arange_f(8, (2, 4)).div(10))
        lin.bias.fill_(0.5)
    opt = opt_class(lin.parameters())
    lin(x).pow(2).sum().backward()
    opt.step()
    show(name, lin.weight)
show("Linear_no_bias", 1.0 if torch.nn.Linear(8, 2, False).bias is not None else 0.0)
show("MaxPool2d", torch.nn.MaxPool2d(2)(arange_f(16, (1, 1, 4, 4))))
show("x0", x[0])
r = x.sub(5)
torch.relu_(r)
show("relu_", r)
conv = torch.nn.Conv2d(1, 2, 3, padding=1)
with torch.no_grad():
    conv.weight.fill_(1)
    conv.bias.zero_()
show("Conv2dOptions", conv(arange_f(16, (1, 1, 4, 4))))
