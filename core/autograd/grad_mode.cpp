// Grad mode is per thread, as in PyTorch: a trainer actor's no_grad does not affect another's.
#include "core/autograd/grad_mode.hpp"

namespace actorch {

namespace {
thread_local bool t_grad_enabled = true;
}

bool grad_enabled() {
  return t_grad_enabled;
}

no_grad::no_grad() : prev_(t_grad_enabled) {
  t_grad_enabled = false;
}
no_grad::~no_grad() {
  t_grad_enabled = prev_;
}

enable_grad::enable_grad() : prev_(t_grad_enabled) {
  t_grad_enabled = true;
}
enable_grad::~enable_grad() {
  t_grad_enabled = prev_;
}

} // namespace actorch
