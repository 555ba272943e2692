// actorch.transforms: torchvision's transforms, in C++ (core/data/transforms.hpp on tensors,
// core/data/vision/transforms.hpp on images). Called from Python on a PIL image they take
// torchvision's PIL path and return a PIL image (or the tensor ToTensor makes); on an array or
// tensor, the tensor path. Given to TransformedDataset or ImageFolder they run in the loader's
// workers without the GIL; Lambda wraps Python code. `functional` holds F.* for images.
#include <pybind11/stl.h>

#include "core/data/vision/pixels.hpp"
#include "python/src/bindings.hpp"
#include "python/src/convert.hpp"
#include "python/src/transform.hpp"

namespace actorch::python {

namespace {

namespace tf = data::transforms;
namespace vs = data::vision;

/// PIL.Image.Image, or None without PIL; looked up once and never released (a static
/// py::object would be released after the interpreter is gone, at exit).
const py::object& pil_image_class() {
  static const py::object* cls = [] {
    try {
      return new py::object(py::module_::import("PIL.Image").attr("Image"));
    } catch (const py::error_already_set&) {
      return new py::object(py::none());
    }
  }();
  return *cls;
}

py_transform of_step(vs::step s, tf::transform fn = {}) {
  vs::check_step(s);
  if (!fn)
    fn = vs::tensor_transform({s});
  return py_transform{std::move(fn), std::vector<vs::step>{std::move(s)}};
}

tf::crop_size crop_of(const py::object& size, const char* who) {
  if (py::isinstance<py::int_>(size))
    return tf::crop_size(size.cast<int64_t>());
  const auto v = size.cast<std::vector<int64_t>>();
  ACTORCH_CHECK(v.size() == 1 || v.size() == 2, who,
                ": size is one number or (height, width), got ", v.size(), " numbers");
  return v.size() == 1 ? tf::crop_size(v[0]) : tf::crop_size(v[0], v[1]);
}

std::vector<int64_t> sizes_of(const py::object& size) {
  return py::isinstance<py::int_>(size) ? std::vector<int64_t>{size.cast<int64_t>()}
                                        : size.cast<std::vector<int64_t>>();
}

/// torchvision's InterpolationMode (an Enum whose value is the name), its name as a string, or
/// PIL's integer constants.
vs::interpolation interpolation_of(const py::handle& mode) {
  std::string name;
  if (py::isinstance<py::int_>(mode)) {
    switch (mode.cast<int>()) {
    case 0: return vs::interpolation::nearest;
    case 1: return vs::interpolation::lanczos;
    case 2: return vs::interpolation::bilinear;
    case 3: return vs::interpolation::bicubic;
    case 4: return vs::interpolation::box;
    case 5: return vs::interpolation::hamming;
    default: ACTORCH_FAIL("interpolation: unknown PIL filter ", mode.cast<int>());
    }
  }
  name = py::str(py::hasattr(mode, "value") ? mode.attr("value") : mode).cast<std::string>();
  for (auto [n, m] : {std::pair{"nearest", vs::interpolation::nearest},
                      {"bilinear", vs::interpolation::bilinear},
                      {"bicubic", vs::interpolation::bicubic},
                      {"box", vs::interpolation::box},
                      {"hamming", vs::interpolation::hamming},
                      {"lanczos", vs::interpolation::lanczos}})
    if (name == n)
      return m;
  ACTORCH_FAIL("interpolation: expected nearest, bilinear, bicubic, box, hamming or lanczos "
               "(torchvision's InterpolationMode) but got '",
               name, "'");
}

std::array<double, 2> pair_of(const py::handle& v) {
  const auto p = v.cast<std::vector<double>>();
  ACTORCH_CHECK(p.size() == 2, "expected a (min, max) pair but got ", p.size(), " values");
  return {p[0], p[1]};
}

/// ColorJitter's argument: a number or a (min, max) pair (vision::color_jitter_range).
std::optional<std::array<double, 2>> jitter_range(const py::handle& v, const char* name) {
  if (py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v))
    return vs::color_jitter_range(name, v.cast<double>());
  return vs::color_jitter_range(name, std::nullopt, pair_of(v));
}

/// A transform called from Python: a PIL image takes the steps, anything else the tensor path.
py::object call(const py_transform& t, const py::object& x) {
  if (is_pil_image(x)) {
    ACTORCH_CHECK(t.steps, "this transform takes tensors only (a Lambda over a tensor function "
                           "composed with it?): call it on an array or a tensor");
    vs::image_or_tensor r = vs::run_steps(*t.steps, image_from_pil(x));
    if (auto* img = std::get_if<vs::image>(&r))
      return image_to_pil(*img);
    return py::cast(std::get<tensor>(r));
  }
  return py::cast(t.fn(tensor_from_dlpack(x)));
}

} // namespace

bool is_pil_image(const py::handle& obj) {
  const py::object& cls = pil_image_class();
  return !cls.is_none() && py::isinstance(obj, cls);
}

vs::image image_from_pil(const py::handle& pil) {
  py::object img = py::reinterpret_borrow<py::object>(pil);
  const std::string mode = img.attr("mode").cast<std::string>();
  if (mode != "RGB" && mode != "L")
    img = img.attr("convert")("RGB");
  // A copy: numpy's view of a PIL image is read-only, which DLPack cannot export.
  const py::object array = py::module_::import("numpy").attr("array")(img);
  return vs::image_from_tensor(tensor_from_dlpack(array), "image_from_pil");
}

py::object image_to_pil(const vs::image& img) {
  const py::object np = py::module_::import("numpy");
  py::object array = np.attr("from_dlpack")(py::cast(vs::image_to_tensor(img)));
  if (img.channels == 1)
    array = array.attr("reshape")(py::make_tuple(img.height, img.width));
  return py::module_::import("PIL.Image").attr("fromarray")(array, img.channels == 1 ? "L" : "RGB");
}

void bind_transforms(py::module_& tf_m) {
  py::class_<py_transform>(tf_m, "Transform")
      .def("__call__", &call, py::arg("img"))
      .def_property_readonly("steps", [](const py_transform& t) {
        py::list names;
        if (t.steps)
          for (const auto& s : *t.steps)
            names.append(vs::step_name(s));
        return names;
      });
  tf_m.def(
      "Compose",
      [](const std::vector<py_transform>& ts) {
        std::vector<tf::transform> fns;
        std::optional<std::vector<vs::step>> steps = std::vector<vs::step>{};
        for (const auto& t : ts) {
          fns.push_back(t.fn);
          if (steps && t.steps)
            steps->insert(steps->end(), t.steps->begin(), t.steps->end());
          else
            steps.reset();
        }
        return py_transform{tf::compose(std::move(fns)), std::move(steps)};
      },
      py::arg("transforms"));
  tf_m.def("ToTensor", [] { return of_step(vs::to_tensor{}); });
  tf_m.def(
      "Normalize",
      [](std::vector<double> mean, std::vector<double> std) {
        return of_step(vs::normalize{std::move(mean), std::move(std)});
      },
      py::arg("mean"), py::arg("std"));
  tf_m.def(
      "RandomCrop",
      [](const py::object& size, std::vector<int64_t> padding, bool pad_if_needed, double fill) {
        return of_step(vs::random_crop{
            crop_of(size, "RandomCrop"),
            {.padding = std::move(padding), .pad_if_needed = pad_if_needed, .fill = fill}});
      },
      py::arg("size"), py::arg("padding") = std::vector<int64_t>{},
      py::arg("pad_if_needed") = false, py::arg("fill") = 0.0);
  tf_m.def(
      "CenterCrop",
      [](const py::object& size) { return of_step(vs::center_crop{crop_of(size, "CenterCrop")}); },
      py::arg("size"));
  tf_m.def(
      "Resize",
      [](const py::object& size, const py::object& interpolation, std::optional<int64_t> max_size,
         bool antialias) {
        vs::resize r{sizes_of(size), interpolation_of(interpolation), max_size};
        // On tensors, antialias picks F.interpolate's plain bilinear sampling when false; PIL
        // always filters.
        tf::transform fn;
        if (r.mode == vs::interpolation::bilinear)
          fn = tf::resize(r.size, {.max_size = max_size, .antialias = antialias});
        return of_step(std::move(r), std::move(fn));
      },
      py::arg("size"), py::arg("interpolation") = "bilinear", py::arg("max_size") = py::none(),
      py::arg("antialias") = true);
  tf_m.def(
      "RandomResizedCrop",
      [](const py::object& size, const py::object& scale, const py::object& ratio,
         const py::object& interpolation) {
        return of_step(vs::random_resized_crop{crop_of(size, "RandomResizedCrop"), pair_of(scale),
                                               pair_of(ratio), interpolation_of(interpolation)});
      },
      py::arg("size"), py::arg("scale") = py::make_tuple(0.08, 1.0),
      py::arg("ratio") = py::make_tuple(3.0 / 4.0, 4.0 / 3.0),
      py::arg("interpolation") = "bilinear");
  tf_m.def(
      "RandomHorizontalFlip", [](double p) { return of_step(vs::random_horizontal_flip{p}); },
      py::arg("p") = 0.5);
  tf_m.def(
      "RandomVerticalFlip", [](double p) { return of_step(vs::random_vertical_flip{p}); },
      py::arg("p") = 0.5);
  tf_m.def(
      "ColorJitter",
      [](const py::object& brightness, const py::object& contrast, const py::object& saturation,
         const py::object& hue) {
        return of_step(vs::color_jitter{
            jitter_range(brightness, "brightness"), jitter_range(contrast, "contrast"),
            jitter_range(saturation, "saturation"), jitter_range(hue, "hue")});
      },
      py::arg("brightness") = 0, py::arg("contrast") = 0, py::arg("saturation") = 0,
      py::arg("hue") = 0);
  tf_m.def(
      "Grayscale",
      [](int64_t num_output_channels) { return of_step(vs::grayscale{num_output_channels}); },
      py::arg("num_output_channels") = 1);
  tf_m.def(
      "Lambda",
      [](py::object fn) {
        // The slow path (Note [Python module]): Python code under the GIL, on a worker's thread.
        auto held = std::make_shared<gil_object>(std::move(fn));
        tf::transform f = tf::lambda_([held](const tensor& t) {
          gil_lock gil;
          return tensor_from_dlpack(held->obj(py::cast(t)));
        });
        return of_step(vs::tensor_step{f, "Lambda"}, f);
      },
      py::arg("fn"));

  // torchvision.transforms.functional on PIL images, for checks with the random draws fixed.
  py::module_ f = tf_m.def_submodule("functional");
  using pil = const py::object&;
  f.def(
      "crop",
      [](pil img, int64_t top, int64_t left, int64_t h, int64_t w) {
        return image_to_pil(vs::crop(image_from_pil(img), vs::crop_box{top, left, h, w}));
      },
      py::arg("img"), py::arg("top"), py::arg("left"), py::arg("height"), py::arg("width"));
  f.def(
      "center_crop",
      [](pil img, const py::object& size) {
        return image_to_pil(
            vs::center_crop_image(image_from_pil(img), crop_of(size, "center_crop")));
      },
      py::arg("img"), py::arg("output_size"));
  f.def(
      "resize",
      [](pil img, const py::object& size, const py::object& mode, std::optional<int64_t> max_size) {
        return image_to_pil(vs::resize_image(image_from_pil(img), sizes_of(size),
                                             interpolation_of(mode), max_size));
      },
      py::arg("img"), py::arg("size"), py::arg("interpolation") = "bilinear",
      py::arg("max_size") = py::none());
  f.def(
      "resized_crop",
      [](pil img, int64_t top, int64_t left, int64_t h, int64_t w, const py::object& size,
         const py::object& mode) {
        return image_to_pil(vs::resized_crop(image_from_pil(img), {top, left, h, w},
                                             crop_of(size, "resized_crop"),
                                             interpolation_of(mode)));
      },
      py::arg("img"), py::arg("top"), py::arg("left"), py::arg("height"), py::arg("width"),
      py::arg("size"), py::arg("interpolation") = "bilinear");
  f.def(
      "hflip", [](pil img) { return image_to_pil(vs::hflip(image_from_pil(img))); },
      py::arg("img"));
  f.def(
      "vflip", [](pil img) { return image_to_pil(vs::vflip(image_from_pil(img))); },
      py::arg("img"));
  f.def(
      "adjust_brightness",
      [](pil img, double v) { return image_to_pil(vs::adjust_brightness(image_from_pil(img), v)); },
      py::arg("img"), py::arg("brightness_factor"));
  f.def(
      "adjust_contrast",
      [](pil img, double v) { return image_to_pil(vs::adjust_contrast(image_from_pil(img), v)); },
      py::arg("img"), py::arg("contrast_factor"));
  f.def(
      "adjust_saturation",
      [](pil img, double v) { return image_to_pil(vs::adjust_saturation(image_from_pil(img), v)); },
      py::arg("img"), py::arg("saturation_factor"));
  f.def(
      "adjust_hue",
      [](pil img, double v) {
        ACTORCH_CHECK(v >= -0.5 && v <= 0.5, "adjust_hue: hue_factor (", v,
                      ") is not in [-0.5, 0.5].");
        return image_to_pil(vs::adjust_hue(image_from_pil(img), v));
      },
      py::arg("img"), py::arg("hue_factor"));
  f.def(
      "rgb_to_grayscale",
      [](pil img, int64_t n) { return image_to_pil(vs::rgb_to_grayscale(image_from_pil(img), n)); },
      py::arg("img"), py::arg("num_output_channels") = 1);
  f.def(
      "pad",
      [](pil img, const std::vector<int64_t>& p, int fill) {
        ACTORCH_CHECK(!p.empty(), "pad: padding must be 1, 2 or 4 values but got none");
        return image_to_pil(
            vs::pad(image_from_pil(img), tf::padding_ltrb(p, "pad"), uint8_t(fill)));
      },
      py::arg("img"), py::arg("padding"), py::arg("fill") = 0);
  f.def(
      "to_tensor",
      [](const py::object& img) { return py::cast(vs::image_to_float(image_from_pil(img))); },
      py::arg("pic"));
  f.def(
      "random_resized_crop_params",
      [](int64_t height, int64_t width, const py::object& scale, const py::object& ratio) {
        const vs::crop_box b =
            vs::random_resized_crop_params(height, width, pair_of(scale), pair_of(ratio));
        return py::make_tuple(b.top, b.left, b.height, b.width);
      },
      py::arg("height"), py::arg("width"), py::arg("scale"), py::arg("ratio"),
      "RandomResizedCrop.get_params for an image of height x width: (top, left, h, w), drawn "
      "from the default generator (in a loader worker, the batch's)");
}

} // namespace actorch::python
