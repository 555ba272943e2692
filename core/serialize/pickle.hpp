// Python's pickle, the subset PyTorch's checkpoints (torch.save of state dicts) are made of:
// values (None, bool, int, float, str, tuple, list, dict and OrderedDict, tensors) and a
// restricted unpickler that builds them and refuses everything else, as
// torch.load(weights_only=True) does: it never imports nor calls anything, it only recognises
// the few globals a state dict names. Tensors travel outside the pickle (persistent ids); the
// caller resolves them (torch_format.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/tensor.hpp"

namespace actorch {

struct pickle_value;
using pickle_items = std::vector<std::pair<pickle_value, pickle_value>>;

/// A pickled value. Containers keep their order; a dict's keys may be any hashable value
/// (strings for a model's state dict, integers in an optimizer's).
struct pickle_value {
  struct none {};
  struct tuple {
    std::vector<pickle_value> items;
  };
  struct list {
    std::vector<pickle_value> items;
  };
  struct dict {
    pickle_items items;
    bool ordered = false; // collections.OrderedDict
    /// An OrderedDict's instance attributes, as pickle's BUILD sets them: a state dict's
    /// `_metadata` (each module's version, which load_state_dict hands to the module's
    /// _load_from_state_dict). Empty: none.
    std::vector<std::pair<std::string, pickle_value>> attributes;
  };
  std::variant<none, bool, int64_t, double, std::string, tuple, list, dict, tensor> v;
  /// With a tensor: it was, and is saved as, a torch.nn.Parameter (torch._utils.
  /// _rebuild_parameter) with this requires_grad.
  bool parameter = false;
  bool requires_grad = false;

  pickle_value() = default;
  template <class T> pickle_value(T x) : v(std::move(x)) {} // NOLINT: values convert as Python's do
};

/// A tensor's storage as torch's persistent id names it: (key, dtype, element count).
struct pickle_storage {
  std::string key;
  dtype type;
  int64_t numel;
  std::string location; // where torch.save found it: "cpu", "cuda:0"
};

/// Reads a pickle (protocols 2-5 as far as the subset goes). `storage` returns the tensor
/// (1-D, numel elements) behind a persistent id; views of one storage share it.
/// @throws actorch::error naming `name` for anything outside the subset: a global other than
/// the few a state dict needs names the module and attribute and says nothing was run.
pickle_value unpickle(std::string_view bytes, const std::string& name,
                      const std::function<tensor(const pickle_storage&)>& storage);

/// Writes `v` as pickle protocol 2, as torch.save writes it: each tensor as torch's
/// _rebuild_tensor_v2 over a persistent storage id; `storage` returns the key under which the
/// caller saves the tensor's storage (the same key for views of one storage).
std::string pickle(const pickle_value& v, const std::function<std::string(const tensor&)>& storage);

} // namespace actorch
