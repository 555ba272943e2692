// actorch.save and actorch.load: PyTorch's checkpoint format (core/serialize/torch_format.hpp)
// from Python, values converted both ways: None, bool, int, float, str, tuples, lists, dicts
// (OrderedDicts stay ordered ones), and tensors (torch tensors, numpy arrays, actorch.Tensor in;
// torch tensors, or actorch.Tensor without torch, out).
#include <map>

#include <pybind11/stl.h>

#include "core/serialize/torch_format.hpp"
#include "python/src/bindings.hpp"
#include "python/src/convert.hpp"

namespace actorch::python {

namespace {

/// A loaded checkpoint's torch tensors, by the storage and dtype they view: each storage crosses
/// DLPack once, whole, and each tensor is torch's as_strided view of it, so that views share
/// their storage as torch.load's do (and, as DLPack gives a tensor's first element, hold their
/// own values).
using torch_bases = std::map<std::pair<const storage*, dtype>, py::object>;

py::object torch_view(const tensor& t, torch_bases& bases) {
  auto it = bases.find({t.storage().get(), t.dtype()});
  if (it == bases.end()) {
    const int64_t whole = int64_t(t.storage()->nbytes() / element_size(t.dtype()));
    const tensor all = t.as_strided({whole}, {1}, 0);
    it = bases
             .emplace(std::pair{t.storage().get(), t.dtype()},
                      to_python(data::sample(all), {.as_torch = true}))
             .first;
  }
  py::tuple size(t.dim()), stride(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) {
    size[size_t(d)] = py::int_(t.size(d));
    stride[size_t(d)] = py::int_(t.stride(d));
  }
  return it->second.attr("as_strided")(size, stride, t.storage_offset());
}

py::object to_py(const pickle_value& v, bool as_torch, torch_bases& bases, int depth = 0) {
  ACTORCH_CHECK(depth < 1000, "load: values nested over 1000 deep");
  return std::visit(
      [&](const auto& x) -> py::object {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, pickle_value::none>) {
          return py::none();
        } else if constexpr (std::is_same_v<T, bool>) {
          return py::bool_(x);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return py::int_(x);
        } else if constexpr (std::is_same_v<T, double>) {
          return py::float_(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return py::str(x);
        } else if constexpr (std::is_same_v<T, pickle_value::tuple>) {
          py::tuple out(x.items.size());
          for (size_t i = 0; i < x.items.size(); ++i)
            out[i] = to_py(x.items[i], as_torch, bases, depth + 1);
          return out;
        } else if constexpr (std::is_same_v<T, pickle_value::list>) {
          py::list out;
          for (const auto& i : x.items)
            out.append(to_py(i, as_torch, bases, depth + 1));
          return out;
        } else if constexpr (std::is_same_v<T, pickle_value::dict>) {
          py::object out = x.ordered ? py::module_::import("collections").attr("OrderedDict")()
                                     : py::object(py::dict());
          for (const auto& [k, val] : x.items)
            out[to_py(k, as_torch, bases, depth + 1)] = to_py(val, as_torch, bases, depth + 1);
          for (const auto& [name, val] : x.attributes) // a state dict's _metadata
            py::setattr(out, name.c_str(), to_py(val, as_torch, bases, depth + 1));
          return out;
        } else if (as_torch && x.device().is_cpu()) {
          py::object t = torch_view(x, bases);
          if (v.parameter) // as torch._utils._rebuild_parameter makes it
            return py::module_::import("torch").attr("nn").attr("Parameter")(t, v.requires_grad);
          return t;
        } else {
          return to_python(data::sample(x), {.as_torch = as_torch});
        }
      },
      v.v);
}

/// Python values to pickle values. Torch tensors that share a storage come out sharing one
/// (each storage crosses DLPack once, whole, and each tensor is a view of it), so views stay
/// views in the file, as torch.save keeps them.
class from_python_values {
public:
  from_python_values()
      : ordered_dict_(py::module_::import("collections").attr("OrderedDict")),
        torch_(torch_available() ? py::object(py::module_::import("torch")) : py::object()) {}

  pickle_value operator()(const py::handle& o, int depth = 0) {
    ACTORCH_CHECK(depth < 1000, "save: values nested over 1000 deep (or a cycle)");
    if (o.is_none())
      return pickle_value::none{};
    if (py::isinstance<py::bool_>(o))
      return o.cast<bool>();
    if (py::isinstance<py::int_>(o))
      return o.cast<int64_t>();
    if (py::isinstance<py::float_>(o))
      return o.cast<double>();
    if (py::isinstance<py::str>(o))
      return o.cast<std::string>();
    if (py::isinstance<py::tuple>(o)) {
      pickle_value::tuple t;
      for (const py::handle i : o)
        t.items.push_back((*this)(i, depth + 1));
      return t;
    }
    if (py::isinstance<py::list>(o)) {
      pickle_value::list l;
      for (const py::handle i : o)
        l.items.push_back((*this)(i, depth + 1));
      return l;
    }
    if (py::isinstance<py::dict>(o)) {
      pickle_value::dict d;
      d.ordered = py::isinstance(o, ordered_dict_);
      for (const auto& [k, val] : py::reinterpret_borrow<py::dict>(o))
        d.items.emplace_back((*this)(k, depth + 1), (*this)(val, depth + 1));
      if (d.ordered && py::hasattr(o, "__dict__")) // a state dict's _metadata, as pickle keeps it
        for (const auto& [name, val] : py::reinterpret_borrow<py::dict>(o.attr("__dict__")))
          d.attributes.emplace_back(py::str(name).cast<std::string>(), (*this)(val, depth + 1));
      return d;
    }
    if (py::isinstance<tensor>(o))
      return o.cast<tensor>();
    if (torch_ && py::isinstance(o, torch_.attr("nn").attr("Parameter"))) {
      pickle_value p = torch_tensor(py::reinterpret_borrow<py::object>(o).attr("detach")());
      p.parameter = true;
      p.requires_grad = o.attr("requires_grad").cast<bool>();
      return p;
    }
    if (torch_ && py::isinstance(o, torch_.attr("Tensor")))
      return torch_tensor(py::reinterpret_borrow<py::object>(o).attr("detach")());
    if (py::hasattr(o, "__dlpack__"))
      return tensor_from_dlpack(py::reinterpret_borrow<py::object>(o));
    ACTORCH_FAIL("save: cannot save a ", std::string(py::str(py::type::of(o).attr("__name__"))),
                 ": actorch saves what torch.load(weights_only=True) reads back (None, bool, "
                 "int, float, str, tuples, lists, dicts and tensors)");
  }

private:
  tensor torch_tensor(const py::object& x) {
    const py::object& torch = torch_;
    ACTORCH_CHECK(x.attr("device").attr("type").cast<std::string>() == "cpu", "save: a tensor on ",
                  std::string(py::str(x.attr("device"))), " (move it to the CPU first)");
    const py::object storage = x.attr("storage")();
    const auto key = std::make_pair(storage.attr("data_ptr")().cast<uintptr_t>(),
                                    std::string(py::str(x.attr("dtype"))));
    auto it = bases_.find(key);
    if (it == bases_.end()) {
      py::object base =
          torch.attr("empty")(0, py::arg("dtype") = x.attr("dtype")).attr("set_")(storage);
      const bool is_bool = x.attr("dtype").is(torch.attr("bool"));
      if (is_bool) // DLPack 0.6 has no bool: across as bytes (a copy back to bool below)
        base = base.attr("view")(torch.attr("uint8"));
      it = bases_.emplace(key, tensor_from_dlpack(base)).first;
    }
    const auto size = x.attr("size")().cast<std::vector<int64_t>>();
    const auto stride = x.attr("stride")().cast<std::vector<int64_t>>();
    tensor t = it->second.as_strided(size, stride, x.attr("storage_offset")().cast<int64_t>());
    return t.dtype() == dtype::uint8 && x.attr("dtype").is(torch.attr("bool")) ? t.to(dtype::bool_)
                                                                               : t;
  }

  py::object ordered_dict_, torch_; // collections.OrderedDict; torch, or null without it
  std::map<std::pair<uintptr_t, std::string>, tensor> bases_;
};

} // namespace

void bind_serialize(py::module_& m) {
  m.def(
      "_torch_load",
      [](const py::object& f, bool as_torch, bool with_locations) {
        pickle_value v;
        storage_locations where_saved;
        storage_locations* locations = with_locations ? &where_saved : nullptr;
        if (py::isinstance<py::str>(f) || py::hasattr(f, "__fspath__")) {
          const std::string path = py::str(py::module_::import("os").attr("fspath")(f));
          py::gil_scoped_release nogil;
          v = torch_load(path, locations);
        } else {
          const std::string bytes = f.attr("read")().cast<std::string>();
          v = torch_load_bytes(bytes, "<file object>", locations);
        }
        torch_bases bases;
        py::object value = to_py(v, as_torch, bases);
        // With locations (for map_location, python/actorch/serialization.py): each storage's
        // saved location by the address of its first element, which its base tensor starts at.
        py::dict where;
        for (const auto& [key, base] : bases)
          if (const auto it = where_saved.find(key.first); it != where_saved.end())
            where[base.attr("data_ptr")()] = py::str(it->second);
        return py::make_tuple(value, where);
      },
      py::arg("f"), py::arg("as_torch"), py::arg("with_locations"));
  m.def(
      "_torch_save",
      [](const py::object& obj, const py::object& f) {
        const pickle_value v = from_python_values()(obj);
        if (py::isinstance<py::str>(f) || py::hasattr(f, "__fspath__")) {
          const std::string path = py::str(py::module_::import("os").attr("fspath")(f));
          py::gil_scoped_release nogil;
          torch_save(path, v);
        } else {
          f.attr("write")(py::bytes(torch_save_bytes(v)));
        }
      },
      py::arg("obj"), py::arg("f"));
}

} // namespace actorch::python
