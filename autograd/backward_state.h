#pragma once
// Whether this thread is inside backward(). Layers above autograd read it: autocast stays out of
// backward functions, so gradients run in the dtypes forward chose (torch.autocast's rule) and a
// gradient never changes dtype on its way back to its input.
namespace hg::autograd {

bool in_backward();

}  // namespace hg::autograd
