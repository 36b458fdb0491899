// Fashion-MNIST with an MLP: 784-256-128-10, ReLU, SGD with momentum 0.9, lr 0.01, batch 64.
//   ./build/fashion_mnist_mlp --epochs 3
// Prints a progress bar per epoch, the test accuracy and a one-line JSON summary; --amp fp16|bf16 and
// --opt-level O1-O3 pick the precision, --compare trains every mode and prints one table, --save/--resume
// checkpoint the run (examples/train_common.h).
#include "train_common.h"
#include "optim/sgd.h"

int main(int argc, char** argv) {
  return example::run_example(
      argc, argv, {.name = "fashion_mnist_mlp", .epochs = 3, .batch = 64, .lr = 0.01},
      [](const example::Args& a, const example::Data& d) {
        const auto model = example::fashion_mnist_mlp();
        model->to(example::device_of(a));
        std::cout << *model << "\n";
        hg::optim::SGD opt(model->parameters(), {.lr = a.lr, .momentum = 0.9});
        return example::train(a, *model, opt, d);
      });
}
