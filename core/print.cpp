// tensor::str(): PyTorch's repr, following torch/_tensor_str.py. One formatter per tensor picks
// the style from the printed nonzero finite values: integer-valued floats print as "1.", others
// with four decimals, or in scientific notation when the magnitudes span more than 1e3 or reach
// beyond 1e8 (or below 1e-4 for non-integers). Tensors over 1000 elements show three items at
// each end of every dim; rows wrap at 80 columns; suffixes (device, size, dtype, grad_fn or
// requires_grad) follow.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "core/autograd/node.hpp"
#include "core/tensor.hpp"

namespace actorch {

namespace {

constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kLineWidth = 80;

// torch._tensor_str._Formatter: the style and the width come from the nonzero finite values
// only (nan and inf do not widen the columns), and every value is right-aligned to the width.
class formatter {
public:
  formatter(dtype t, const std::vector<scalar>& values)
      : floating_(is_floating_point(t)), boolean_(t == dtype::bool_) {
    if (!floating_) {
      for (const scalar& v : values)
        width_ = std::max(width_, raw(v).size());
      return;
    }
    double max_abs = 0, min_abs = INFINITY;
    std::vector<double> finite; // nonzero and finite
    for (const scalar& value : values) {
      const double v = value.to_double();
      if (!std::isfinite(v) || v == 0)
        continue;
      finite.push_back(v);
      if (v != std::ceil(v))
        int_mode_ = false;
      max_abs = std::max(max_abs, std::abs(v));
      min_abs = std::min(min_abs, std::abs(v));
    }
    if (finite.empty())
      return;
    sci_mode_ = max_abs / min_abs > 1e3 || max_abs > 1e8 || (!int_mode_ && min_abs < 1e-4);
    for (double v : finite)
      width_ = std::max(width_, raw(v).size());
  }

  size_t width() const { return width_; }

  std::string format(const scalar& v) const {
    std::string s = raw(v);
    return std::string(width_ - std::min(width_, s.size()), ' ') + s;
  }

private:
  // The value without padding.
  std::string raw(const scalar& value) const {
    if (boolean_)
      return value.to<bool>() ? "True" : "False";
    if (!floating_)
      return std::to_string(value.to_int()); // exact, also beyond 2^53
    const double v = value.to_double();
    char buf[64];
    if (std::isnan(v))
      return "nan";
    if (std::isinf(v))
      return v > 0 ? "inf" : "-inf";
    if (sci_mode_)
      std::snprintf(buf, sizeof buf, "%.4e", v);
    else if (int_mode_)
      std::snprintf(buf, sizeof buf, "%.0f.", v);
    else
      std::snprintf(buf, sizeof buf, "%.4f", v);
    return buf;
  }

  bool floating_;
  bool boolean_;
  bool int_mode_ = true;
  bool sci_mode_ = false;
  size_t width_ = 1;
};

// The indices printed along a dim of size n: all, or the edge items around a "...".
std::vector<int64_t> shown(int64_t n, bool summarize) {
  std::vector<int64_t> idx;
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i)
      idx.push_back(i);
    idx.push_back(-1); // the ellipsis
    for (int64_t i = n - kEdgeItems; i < n; ++i)
      idx.push_back(i);
  } else {
    for (int64_t i = 0; i < n; ++i)
      idx.push_back(i);
  }
  return idx;
}

void collect(const tensor& t, int64_t d, int64_t offset, bool summarize, std::vector<scalar>& out) {
  if (d == t.dim()) {
    out.push_back(read_scalar(t, offset));
    return;
  }
  for (int64_t i : shown(t.sizes()[size_t(d)], summarize))
    if (i >= 0)
      collect(t, d + 1, offset + i * t.strides()[size_t(d)], summarize, out);
}

struct printer {
  const tensor& t;
  const formatter& fmt;
  bool summarize;
  std::ostringstream os;

  // Prints dim d at `offset`; `indent` is the column the opening bracket stands at.
  void print(int64_t d, int64_t offset, int64_t indent) {
    const int64_t nd = t.dim();
    const auto idx = shown(t.sizes()[size_t(d)], summarize);
    os << '[';
    if (d == nd - 1) {
      // As torch's _vector_str: whole elements ("value, ") per line, the ellipsis counted as one.
      const int64_t per_line =
          std::max<int64_t>(1, (kLineWidth - indent) / int64_t(fmt.width() + 2));
      for (size_t k = 0; k < idx.size(); ++k) {
        if (k > 0)
          os << (int64_t(k) % per_line == 0 ? ",\n" + std::string(size_t(indent + 1), ' ')
                                            : std::string(", "));
        if (idx[k] < 0)
          os << " ..."; // torch's literal, not padded to the width
        else
          os << fmt.format(read_scalar(t, offset + idx[k] * t.strides()[size_t(d)]));
      }
    } else {
      std::string sep(1, ',');
      sep.append(size_t(nd - d - 1), '\n').append(size_t(indent + 1), ' ');
      for (size_t k = 0; k < idx.size(); ++k) {
        if (k > 0)
          os << sep;
        if (idx[k] < 0)
          os << "...";
        else
          print(d + 1, offset + idx[k] * t.strides()[size_t(d)], indent + 1);
      }
    }
    os << ']';
  }
};

} // namespace

std::string tensor::str() const {
  if (!defined())
    return "tensor(undefined)";
  // The suffixes, in torch's order: device, then size (of an empty tensor), then dtype.
  std::vector<std::string> suffixes;
  if (!device().is_cpu())
    suffixes.push_back("device='" + device().str() + "'");
  const tensor cpu = to(kCPU);
  std::string body;
  // float32, int64 and bool are what torch infers from Python values: no dtype for them,
  // except on an empty tensor, which has no values to infer int64 or bool from.
  bool show_dtype = dtype() != dtype::float32 && dtype() != dtype::int64 && dtype() != dtype::bool_;
  if (numel() == 0) {
    body = "[]";
    if (dim() != 1) {
      std::ostringstream size;
      size << "size=(";
      for (int64_t d = 0; d < dim(); ++d)
        size << (d ? ", " : "") << sizes()[size_t(d)];
      size << ")";
      suffixes.push_back(size.str());
    }
    show_dtype = dtype() != dtype::float32;
  } else {
    const bool summarize = numel() > kThreshold;
    std::vector<scalar> values;
    collect(cpu, 0, cpu.storage_offset(), summarize, values);
    const formatter fmt(dtype(), values);
    if (dim() == 0) {
      body = fmt.format(values.at(0));
    } else {
      printer p{cpu, fmt, summarize, {}};
      p.print(0, cpu.storage_offset(), 7); // 7: strlen("tensor(")
      body = p.os.str();
    }
  }
  if (show_dtype)
    suffixes.push_back("dtype=torch." + std::string(dtype_name(dtype())));
  // Last, as torch's: the node that made it, or that it is a leaf requiring grad.
  if (const auto& fn = grad_fn())
    suffixes.push_back("grad_fn=<" + fn->name() + ">");
  else if (requires_grad())
    suffixes.push_back("requires_grad=True");
  // As torch's _add_suffixes: a suffix that would pass column 80 starts a line of its own.
  // (torch counts the last line two characters longer than it is; so do we, to match it.)
  std::string out = "tensor(" + body;
  const size_t nl = out.rfind('\n');
  int64_t last_line = int64_t(out.size()) - (nl == std::string::npos ? -1 : int64_t(nl)) + 1;
  for (const std::string& s : suffixes) {
    const auto len = int64_t(s.size());
    if (last_line + len + 2 > kLineWidth) {
      out += ",\n       " + s; // indented by strlen("tensor(")
      last_line = 7 + len;
    } else {
      out += ", " + s;
      last_line += len + 2;
    }
  }
  return out + ")";
}

} // namespace actorch
