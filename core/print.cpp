// tensor::str(): PyTorch's repr. One formatter per tensor picks the style from all printed
// values (as torch._tensor_str does): integer-valued floats print as "1.", others with four
// decimals, or in scientific notation when the magnitudes span more than 1e3 or reach beyond
// [1e-4, 1e8]. Tensors over 1000 elements show three items at each end of every dim.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "core/tensor.hpp"

namespace actorch {

namespace {

constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kLineWidth = 80;

class formatter {
public:
  formatter(dtype t, const std::vector<double>& values) : floating_(is_floating_point(t)),
                                                          boolean_(t == dtype::bool_) {
    if (!floating_)
      return;
    double max_abs = 0, min_abs = INFINITY;
    bool any_finite = false;
    for (double v : values) {
      if (!std::isfinite(v))
        continue;
      any_finite = true;
      if (v != std::nearbyint(v))
        int_mode_ = false;
      const double a = std::abs(v);
      max_abs = std::max(max_abs, a);
      if (a != 0)
        min_abs = std::min(min_abs, a);
    }
    if (!any_finite)
      return;
    if (int_mode_) {
      sci_mode_ = max_abs > 1e8;
    } else {
      sci_mode_ = max_abs > 1e8 || (min_abs != INFINITY && (min_abs < 1e-4 || max_abs / min_abs > 1e3));
    }
  }

  std::string format(double v) const {
    char buf[64];
    if (boolean_)
      return v != 0 ? "True" : "False";
    if (!floating_) {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
      return buf;
    }
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

private:
  bool floating_;
  bool boolean_;
  bool int_mode_ = true;
  bool sci_mode_ = false;
};

// Reads element values as doubles (int64 beyond 2^53 would round; printing accepts that).
double value_at(const tensor& t, int64_t offset) { return read_scalar(t, offset).to_double(); }

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

void collect(const tensor& t, int64_t d, int64_t offset, bool summarize, std::vector<double>& out) {
  if (d == t.dim()) {
    out.push_back(value_at(t, offset));
    return;
  }
  for (int64_t i : shown(t.sizes()[size_t(d)], summarize))
    if (i >= 0)
      collect(t, d + 1, offset + i * t.strides()[size_t(d)], summarize, out);
}

struct printer {
  const tensor& t;
  const formatter& fmt;
  size_t width;
  bool summarize;
  std::ostringstream os;

  void pad(const std::string& s) { os << std::string(width - std::min(width, s.size()), ' ') << s; }

  // Prints dim d at `offset`; `indent` is the column the opening bracket stands at.
  void print(int64_t d, int64_t offset, int64_t indent) {
    const int64_t nd = t.dim();
    const auto idx = shown(t.sizes()[size_t(d)], summarize);
    os << '[';
    if (d == nd - 1) {
      const int64_t per_line =
          std::max<int64_t>(1, (kLineWidth - indent - 1) / int64_t(width + 2));
      int64_t col = 0;
      for (size_t k = 0; k < idx.size(); ++k) {
        if (k > 0) {
          os << ',';
          if (++col == per_line) {
            os << '\n' << std::string(size_t(indent + 1), ' ');
            col = 0;
          } else {
            os << ' ';
          }
        }
        if (idx[k] < 0)
          pad("...");
        else
          pad(fmt.format(value_at(t, offset + idx[k] * t.strides()[size_t(d)])));
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
  if (!device().is_cpu())
    return to(kCPU).str() + " (on " + device().str() + ")";
  const bool summarize = numel() > kThreshold;
  std::vector<double> values;
  collect(*this, 0, storage_offset(), summarize, values);
  const formatter fmt(dtype(), values);
  size_t width = 0;
  for (double v : values)
    width = std::max(width, fmt.format(v).size());

  std::ostringstream os;
  os << "tensor(";
  const int64_t indent = 7; // strlen("tensor(")
  if (dim() == 0) {
    os << fmt.format(values.at(0));
  } else if (numel() == 0) {
    os << "[]";
    if (sizes() != shape_t{0}) {
      os << ", size=(";
      for (int64_t d = 0; d < dim(); ++d)
        os << (d ? ", " : "") << sizes()[size_t(d)];
      os << (dim() == 1 ? ",)" : ")");
    }
  } else {
    printer p{*this, fmt, width, summarize, {}};
    p.print(0, storage_offset(), indent);
    os << p.os.str();
  }
  // float32, int64 and bool are what torch infers from Python values: no suffix for them.
  if (dtype() != dtype::float32 && dtype() != dtype::int64 && dtype() != dtype::bool_)
    os << ", dtype=" << dtype_name(dtype());
  os << ')';
  return os.str();
}

} // namespace actorch
