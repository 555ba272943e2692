// One sliding-window op (conv, pooling, unfold, fold) forward and backward on tensors torch
// wrote, its outputs and gradients written back for tests/python/test_window_ops.py to compare
// with torch's own.
//
//   window_check OP IN.pt OUT.pt [key=value ...]
//
// IN.pt holds "input" and, as OP needs, "weight" and "bias", and "grad_out" for the backward.
// OUT.pt gets "output", "grad_input", "grad_weight", "grad_bias" and, for max pooling,
// "indices". Keys: kernel, stride, padding (numbers, "same" or "valid"), dilation, groups, output,
// ceil_mode, count_include_pad, divisor_override; pairs are written "a,b". A failed check prints
// the error and exits 3, so the test can compare actorch's message with torch's.
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <string>

#include "base/error.hpp"
#include "base/parse.hpp"
#include "core/core.hpp"
#include "core/serialize/torch_format.hpp"

namespace {

using namespace actorch;

std::vector<int64_t> numbers(const std::string& s) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(parse_int(s.substr(at, comma - at), "window_check argument"));
    at = comma + 1;
  }
  return out;
}

struct args {
  std::map<std::string, std::string> kv;
  bool has(const std::string& k) const { return kv.count(k) != 0; }
  int2 pair(const std::string& k, int2 fallback) const {
    if (!has(k))
      return fallback;
    const auto v = numbers(kv.at(k));
    return v.size() == 1 ? int2(v[0]) : int2(v.at(0), v.at(1));
  }
  int64_t one(const std::string& k, int64_t fallback) const {
    return has(k) ? numbers(kv.at(k)).at(0) : fallback;
  }
  conv_padding padding() const {
    if (!has("padding"))
      return 0;
    const std::string& p = kv.at("padding");
    if (p == "same" || p == "valid")
      return p;
    const auto v = numbers(p);
    return v.size() == 1 ? conv_padding(v[0]) : conv_padding(v.at(0), v.at(1));
  }
};

int run(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: window_check OP IN.pt OUT.pt [key=value ...]\n";
    return 2;
  }
  const std::string op = argv[1];
  args a;
  for (int i = 4; i < argc; ++i) {
    const std::string s = argv[i];
    const size_t eq = s.find('=');
    ACTORCH_CHECK(eq != std::string::npos, "window_check: expected key=value but got ", s);
    a.kv[s.substr(0, eq)] = s.substr(eq + 1);
  }
  std::map<std::string, tensor> in;
  for (auto& [name, t] : load_state_dict_file(argv[2]))
    in[name] = t;
  auto leaf = [&](const char* name) {
    if (!in.count(name))
      return tensor();
    tensor t = in[name].clone();
    return t.is_floating_point() ? t.requires_grad_(true) : t; // the op's own check speaks
  };
  const tensor x = leaf("input"), w = leaf("weight"), b = leaf("bias");
  tensor y, indices;
  if (op == "conv2d") {
    y = conv2d(x, w, b, a.pair("stride", 1), a.padding(), a.pair("dilation", 1),
               a.one("groups", 1));
  } else if (op == "conv1d") {
    y = conv1d(x, w, b, a.one("stride", 1), a.padding(), a.one("dilation", 1), a.one("groups", 1));
  } else if (op == "unfold") {
    y = unfold(x, a.pair("kernel", 1), a.pair("dilation", 1), a.pair("padding", 0),
               a.pair("stride", 1));
  } else if (op == "fold") {
    y = fold(x, a.pair("output", 1), a.pair("kernel", 1), a.pair("dilation", 1),
             a.pair("padding", 0), a.pair("stride", 1));
  } else if (op == "max_pool2d") {
    std::optional<int2> stride;
    if (a.has("stride"))
      stride = a.pair("stride", 1);
    std::tie(y, indices) =
        max_pool2d_with_indices(x, a.pair("kernel", 1), stride, a.pair("padding", 0),
                                a.pair("dilation", 1), a.one("ceil_mode", 0) != 0);
  } else if (op == "avg_pool2d") {
    std::optional<int2> stride;
    if (a.has("stride"))
      stride = a.pair("stride", 1);
    std::optional<int64_t> divisor;
    if (a.has("divisor_override"))
      divisor = a.one("divisor_override", 0);
    y = avg_pool2d(x, a.pair("kernel", 1), stride, a.pair("padding", 0), a.one("ceil_mode", 0) != 0,
                   a.one("count_include_pad", 1) != 0, divisor);
  } else if (op == "adaptive_avg_pool2d") {
    y = adaptive_avg_pool2d(x, a.pair("output", 1));
  } else if (op == "adaptive_max_pool2d") {
    y = adaptive_max_pool2d(x, a.pair("output", 1));
  } else {
    std::cerr << "window_check: unknown op " << op << "\n";
    return 2;
  }
  named_tensor_list out{{"output", y.detach()}};
  if (indices.defined())
    out.emplace_back("indices", indices);
  if (in.count("grad_out")) {
    y.backward(in["grad_out"]);
    out.emplace_back("grad_input", x.grad());
    if (w.defined())
      out.emplace_back("grad_weight", w.grad());
    if (b.defined())
      out.emplace_back("grad_bias", b.grad());
  }
  save_state_dict_file(argv[3], out);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const actorch::error& e) {
    std::cerr << e.what() << "\n";
    return 3;
  }
}
