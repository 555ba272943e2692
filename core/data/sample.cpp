// sample: access checks, printing and deep equality.
#include "core/data/sample.hpp"

#include <map>
#include <mutex>
#include <sstream>

#include "core/ops/reduce.hpp"

namespace actorch::data {

const char* kind_name(sample::kind k) {
  switch (k) {
  case sample::kind::none: return "none";
  case sample::kind::tensor: return "tensor";
  case sample::kind::integer: return "int";
  case sample::kind::floating: return "float";
  case sample::kind::boolean: return "bool";
  case sample::kind::string: return "str";
  case sample::kind::tuple: return "tuple";
  case sample::kind::dict: return "dict";
  case sample::kind::custom: return "custom";
  }
  return "?";
}

namespace {
template <class T, class V> auto& get_checked(V& v, sample::kind k, const char* want) {
  auto* p = std::get_if<T>(&v);
  ACTORCH_CHECK(p != nullptr, "sample: expected a ", want, " but the sample holds a ",
                kind_name(k));
  return *p;
}
} // namespace

const actorch::tensor& sample::as_tensor() const {
  return get_checked<actorch::tensor>(v_, type(), "tensor");
}
int64_t sample::as_int() const {
  return get_checked<int64_t>(v_, type(), "int");
}
double sample::as_double() const {
  if (auto* i = std::get_if<int64_t>(&v_))
    return double(*i);
  return get_checked<double>(v_, type(), "float");
}
bool sample::as_bool() const {
  return get_checked<bool>(v_, type(), "bool");
}
const std::string& sample::as_string() const {
  return get_checked<std::string>(v_, type(), "str");
}
const sample::tuple& sample::as_tuple() const {
  return get_checked<tuple>(v_, type(), "tuple");
}
const sample::dict& sample::as_dict() const {
  return get_checked<dict>(v_, type(), "dict");
}
sample::tuple& sample::as_tuple() {
  return get_checked<tuple>(v_, type(), "tuple");
}
sample::dict& sample::as_dict() {
  return get_checked<dict>(v_, type(), "dict");
}
const std::shared_ptr<custom_value>& sample::as_custom() const {
  return get_checked<std::shared_ptr<custom_value>>(v_, type(), "custom value");
}

void custom_value::pin_memory(const pin_fn& pin) {
  for_each_tensor([&pin](tensor& t) { t = pin(t); });
}

namespace {
struct codec_registry {
  std::mutex mutex;
  std::map<std::string, custom_codec, std::less<>> codecs;
};
codec_registry& codecs() {
  static auto* r = new codec_registry; // used by worker threads to the process's end
  return *r;
}
} // namespace

void register_custom_codec(const std::string& codec, custom_codec fn) {
  ACTORCH_CHECK(fn != nullptr, "register_custom_codec: no function for codec '", codec, "'");
  codec_registry& r = codecs();
  const std::lock_guard lock(r.mutex);
  r.codecs[codec] = std::move(fn);
}

std::shared_ptr<custom_value> custom_from_wire(custom_wire w) {
  custom_codec fn;
  {
    codec_registry& r = codecs();
    const std::lock_guard lock(r.mutex);
    const auto it = r.codecs.find(w.codec);
    ACTORCH_CHECK(it != r.codecs.end(), "a batch holds a value sent as '", w.codec,
                  "', and this process has no codec of that name (register_custom_codec)");
    fn = it->second;
  }
  const std::string codec = w.codec;
  std::shared_ptr<custom_value> v = fn(std::move(w));
  ACTORCH_CHECK(v != nullptr, "the codec '", codec, "' rebuilt no value");
  return v;
}

namespace {
std::vector<tensor> tensors_of(custom_value& c) {
  std::vector<tensor> out;
  c.for_each_tensor([&out](tensor& t) { out.push_back(t); });
  return out;
}
} // namespace

const sample& sample::operator[](size_t i) const {
  const auto& t = as_tuple();
  ACTORCH_CHECK(i < t.size(), "sample: tuple index ", i, " out of range for a tuple of ", t.size());
  return t[i];
}

const sample& sample::operator[](std::string_view key) const {
  for (const auto& kv : as_dict())
    if (kv.first == key)
      return kv.second;
  ACTORCH_FAIL("sample: key '", key, "' not in the dict");
}

size_t sample::size() const {
  if (is_tuple())
    return as_tuple().size();
  return as_dict().size();
}

std::string sample::str() const {
  std::ostringstream os;
  switch (type()) {
  case kind::none: os << "None"; break;
  case kind::tensor: os << as_tensor().str(); break;
  case kind::integer: os << as_int(); break;
  case kind::floating: os << as_double(); break;
  case kind::boolean: os << (as_bool() ? "True" : "False"); break;
  case kind::string: os << '\'' << as_string() << '\''; break;
  case kind::tuple: {
    os << '(';
    const auto& t = as_tuple();
    for (size_t i = 0; i < t.size(); ++i)
      os << (i ? ", " : "") << t[i].str();
    os << (t.size() == 1 ? ",)" : ")");
    break;
  }
  case kind::dict: {
    os << '{';
    const auto& d = as_dict();
    for (size_t i = 0; i < d.size(); ++i)
      os << (i ? ", " : "") << '\'' << d[i].first << "': " << d[i].second.str();
    os << '}';
    break;
  }
  case kind::custom: {
    const auto ts = tensors_of(*as_custom());
    os << as_custom()->type_name() << '(';
    for (size_t i = 0; i < ts.size(); ++i)
      os << (i ? ", " : "") << ts[i].str();
    os << ')';
    break;
  }
  }
  return os.str();
}

bool equal(const sample& a, const sample& b) {
  if (a.type() != b.type())
    return false;
  switch (a.type()) {
  case sample::kind::none: return true;
  case sample::kind::tensor: {
    const auto &x = a.as_tensor(), &y = b.as_tensor();
    if (x.sizes() != y.sizes() || x.dtype() != y.dtype())
      return false;
    return x.numel() == 0 || x.ne(y).sum().item<int64_t>() == 0;
  }
  case sample::kind::integer: return a.as_int() == b.as_int();
  case sample::kind::floating: return a.as_double() == b.as_double();
  case sample::kind::boolean: return a.as_bool() == b.as_bool();
  case sample::kind::string: return a.as_string() == b.as_string();
  case sample::kind::tuple: {
    const auto &x = a.as_tuple(), &y = b.as_tuple();
    if (x.size() != y.size())
      return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!equal(x[i], y[i]))
        return false;
    return true;
  }
  case sample::kind::dict: {
    const auto &x = a.as_dict(), &y = b.as_dict();
    if (x.size() != y.size())
      return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].first != y[i].first || !equal(x[i].second, y[i].second))
        return false;
    return true;
  }
  case sample::kind::custom: {
    if (a.as_custom()->type_name() != b.as_custom()->type_name())
      return false;
    const auto x = tensors_of(*a.as_custom()), y = tensors_of(*b.as_custom());
    if (x.size() != y.size())
      return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!equal(sample(x[i]), sample(y[i])))
        return false;
    return true;
  }
  }
  return false;
}

} // namespace actorch::data
