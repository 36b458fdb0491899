// Fashion-MNIST with a small CNN: conv 1->32 3x3 pad 1, ReLU, maxpool 2, conv 32->64 3x3 pad 1, ReLU,
// maxpool 2, linear 3136->128, ReLU, linear 128->10; Adam lr 1e-3, batch 128.
//   ./build/fashion_mnist_cnn --epochs 2
// Prints a progress bar per epoch, the test accuracy and a one-line JSON summary; --amp fp16|bf16 and
// --opt-level O1-O3 pick the precision, --compare trains every mode and prints one table, --save/--resume
// checkpoint the run (examples/train_common.h).
#include "train_common.h"
#include "optim/adam.h"

int main(int argc, char** argv) {
  return example::run_example(
      argc, argv, {.name = "fashion_mnist_cnn", .epochs = 2, .batch = 128, .lr = 1e-3},
      [](const example::Args& a, const example::Data& d) {
        namespace nn = hg::nn;
        nn::Sequential model(nn::Conv2d(1, 32, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d({.kernel_size = 2}),
                             nn::Conv2d(32, 64, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d({.kernel_size = 2}),
                             nn::Flatten(), nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
        model.to(example::device_of(a));
        std::cout << model << "\n";
        hg::optim::Adam opt(model.parameters(), {.lr = a.lr});
        return example::train(a, model, opt, d);
      });
}
