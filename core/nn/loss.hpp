// Loss modules: MSELoss, CrossEntropyLoss, NLLLoss, with PyTorch's reduction names.
#pragma once

#include <string>

#include "core/nn/functional.hpp"

namespace actorch::nn {

class mse_loss {
public:
  explicit mse_loss(const std::string& reduction = "mean")
      : r_(functional::parse_reduction(reduction)) {}
  tensor operator()(const tensor& input, const tensor& target) const {
    return functional::mse_loss(input, target, r_);
  }

private:
  functional::reduction r_;
};

class nll_loss {
public:
  explicit nll_loss(tensor weight = {}, int64_t ignore_index = -100,
                    const std::string& reduction = "mean")
      : weight_(std::move(weight)), ignore_index_(ignore_index),
        r_(functional::parse_reduction(reduction)) {}
  tensor operator()(const tensor& input, const tensor& target) const {
    return functional::nll_loss(input, target, weight_, ignore_index_, r_);
  }

private:
  tensor weight_;
  int64_t ignore_index_;
  functional::reduction r_;
};

class cross_entropy_loss {
public:
  explicit cross_entropy_loss(tensor weight = {}, int64_t ignore_index = -100,
                              const std::string& reduction = "mean")
      : weight_(std::move(weight)), ignore_index_(ignore_index),
        r_(functional::parse_reduction(reduction)) {}
  tensor operator()(const tensor& input, const tensor& target) const {
    return functional::cross_entropy(input, target, weight_, ignore_index_, r_);
  }

private:
  tensor weight_;
  int64_t ignore_index_;
  functional::reduction r_;
};

} // namespace actorch::nn
