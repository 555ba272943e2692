// Whether ops record the graph on this thread: torch.no_grad and torch.enable_grad.
#pragma once

namespace actorch {

/// True unless a no_grad guard is active on the calling thread.
bool grad_enabled();

/// RAII: ops inside the scope record no graph (torch.no_grad).
class no_grad {
public:
  no_grad();
  ~no_grad();
  no_grad(const no_grad&) = delete;
  no_grad& operator=(const no_grad&) = delete;

private:
  bool prev_;
};

/// RAII: re-enables recording inside a no_grad scope (torch.enable_grad).
class enable_grad {
public:
  enable_grad();
  ~enable_grad();
  enable_grad(const enable_grad&) = delete;
  enable_grad& operator=(const enable_grad&) = delete;

private:
  bool prev_;
};

} // namespace actorch
