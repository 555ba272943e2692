// image_files and image_folder: listing a folder tree in torchvision's order, and loading one
// sample (read, decode, transform) with bad files skipped and counted when asked.
#include "core/data/vision/image_folder.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

#include "core/data/vision/decode.hpp"
#include "core/ops/factory.hpp"

namespace actorch::data::vision {

namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool ends_with_any(const std::string& path, const std::vector<std::string>& extensions) {
  const std::string l = lower(path);
  return std::any_of(extensions.begin(), extensions.end(), [&](const std::string& e) {
    const std::string le = lower(e);
    return l.size() >= le.size() && l.compare(l.size() - le.size(), le.size(), le) == 0;
  });
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec); // follows links, as os.scandir's is_dir() and os.walk's
}

// os.walk(dir, followlinks=True) sorted by folder, each folder's files sorted: the paths, as
// os.path.join spells them.
void walk(const fs::path& dir, std::vector<std::pair<std::string, std::vector<std::string>>>& out,
          std::set<fs::path>& seen) {
  std::error_code ec;
  const fs::path real = fs::canonical(dir, ec);
  if (!ec && !seen.insert(real).second)
    return; // a link back up the tree: os.walk would loop; walk each folder once
  std::vector<std::string> files;
  std::vector<fs::path> subdirs;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (is_dir(it->path()))
      subdirs.push_back(it->path());
    else
      files.push_back(it->path().filename().string());
  }
  std::sort(files.begin(), files.end());
  out.emplace_back(dir.string(), std::move(files));
  for (const fs::path& d : subdirs)
    walk(d, out, seen);
}

} // namespace

const std::vector<std::string>& image_extensions() {
  static const std::vector<std::string> e{".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                          ".pgm", ".tif",  ".tiff", ".webp"};
  return e;
}

folder_listing list_image_folder(const std::string& root,
                                 const std::vector<std::string>& extensions,
                                 const std::function<bool(const std::string&)>& is_valid_file) {
  ACTORCH_CHECK(is_dir(root), "ImageFolder: ", root, " is not a folder");
  folder_listing l;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
    if (is_dir(it->path()))
      l.classes.push_back(it->path().filename().string());
  ACTORCH_CHECK(!ec, "ImageFolder: cannot list ", root, ": ", ec.message());
  std::sort(l.classes.begin(), l.classes.end());
  ACTORCH_CHECK(!l.classes.empty(), "ImageFolder: Couldn't find any class folder in ", root, ".");
  std::vector<std::string> empty;
  for (size_t c = 0; c < l.classes.size(); ++c) {
    l.class_to_idx[l.classes[c]] = int64_t(c);
    std::vector<std::pair<std::string, std::vector<std::string>>> folders;
    std::set<fs::path> seen;
    walk(fs::path(root) / l.classes[c], folders, seen);
    std::sort(folders.begin(), folders.end());
    const size_t before = l.paths.size();
    for (const auto& [folder, files] : folders)
      for (const std::string& f : files) {
        const std::string path = (fs::path(folder) / f).string();
        if (is_valid_file ? is_valid_file(path) : ends_with_any(path, extensions)) {
          l.paths.push_back(path);
          l.labels.push_back(int64_t(c));
        }
      }
    if (l.paths.size() == before)
      empty.push_back(l.classes[c]);
  }
  if (!empty.empty()) {
    std::string names, exts;
    for (const auto& n : empty)
      names += (names.empty() ? "" : ", ") + n;
    for (const auto& e : extensions)
      exts += (exts.empty() ? "" : ", ") + e;
    ACTORCH_FAIL("ImageFolder: Found no valid file for the classes ", names, ". ",
                 is_valid_file ? std::string() : "Supported extensions are: " + exts);
  }
  return l;
}

image_files::image_files(std::vector<std::string> paths, std::vector<int64_t> labels,
                         image_dataset_options options)
    : paths_(std::move(paths)), labels_(std::move(labels)), options_(std::move(options)),
      is_bad_(paths_.size(), false) {
  ACTORCH_CHECK(labels_.empty() || labels_.size() == paths_.size(), "image_files: ", labels_.size(),
                " labels for ", paths_.size(), " files (one per file, or none)");
  ACTORCH_CHECK(options_.transform.empty() || !options_.image_transform,
                "image_files: give either transform steps or an image_transform, not both");
  for (const step& s : options_.transform)
    check_step(s);
}

sample image_files::load(int64_t index) const {
  const std::string& path = paths_[size_t(index)];
  sample s;
  if (!options_.loader && !options_.image_transform) {
    const std::vector<uint8_t> bytes = read_file(path);
    s = vision::load(options_.transform, bytes.data(), bytes.size(), path, options_.fuse);
  } else {
    image decoded;
    if (options_.loader) {
      decoded = options_.loader(path);
    } else {
      const std::vector<uint8_t> bytes = read_file(path);
      decoded = decode_image(bytes.data(), bytes.size(), path);
    }
    s = options_.image_transform ? options_.image_transform(std::move(decoded))
                                 : result_tensor(run_steps(options_.transform, std::move(decoded)));
  }
  if (labels_.empty())
    return s;
  tensor label = scalar_tensor(labels_[size_t(index)]);
  if (options_.target_transform)
    label = options_.target_transform(label);
  return sample::make_tuple({std::move(s), std::move(label)});
}

sample image_files::get(int64_t index) const {
  check_index(index, size(), "image_files");
  if (!options_.skip_bad_files) {
    try {
      return load(index);
    } catch (const std::exception& e) {
      throw error(actorch::detail::concat("image_files: sample ", index, " (",
                                          paths_[size_t(index)], "): ", e.what()));
    }
  }
  const int64_t n = size();
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = (index + k) % n;
    {
      std::lock_guard lock(bad_mutex_);
      if (is_bad_[size_t(i)])
        continue;
    }
    try {
      return load(i);
    } catch (const std::exception&) {
      std::lock_guard lock(bad_mutex_);
      if (!is_bad_[size_t(i)]) {
        is_bad_[size_t(i)] = true;
        bad_.push_back(paths_[size_t(i)]);
      }
    }
  }
  ACTORCH_FAIL("image_files: none of the ", n,
               " files could be loaded (skip_bad_files), the first "
               "being ",
               paths_.empty() ? std::string("none") : paths_[0]);
}

std::vector<std::string> image_files::bad_files() const {
  std::lock_guard lock(bad_mutex_);
  return bad_;
}

image_folder::image_folder(const std::string& root, image_dataset_options options,
                           std::vector<std::string> extensions,
                           std::function<bool(const std::string&)> is_valid_file)
    : image_folder(root, list_image_folder(root, extensions, is_valid_file), std::move(options)) {}

image_folder::image_folder(std::string root, folder_listing l, image_dataset_options options)
    : image_files(std::move(l.paths), std::move(l.labels), std::move(options)),
      root_(std::move(root)), classes_(std::move(l.classes)),
      class_to_idx_(std::move(l.class_to_idx)) {}

} // namespace actorch::data::vision
