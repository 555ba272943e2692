// image_files and image_folder: listing a folder tree in torchvision's order, and loading one
// sample (read, decode, transform) with bad files skipped and counted when asked.
#include "core/data/vision/image_folder.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
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

// Note [Bad files across processes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With skip_bad_files a worker that finds a file unloadable marks it, so that every worker skips
// it from then on, and logs it for bad_files(). Worker processes are forks with copies of the
// dataset: a log in their private memory stayed empty in the parent. So the log lives in
// anonymous shared memory mapped when the dataset is made, which forks inherit: a byte per file
// (claimed by an atomic exchange, so a file is logged once whoever finds it) and the files'
// indices in the order found (a slot claimed by an atomic count; -1 until its index is stored,
// which bad_files() passes over for that instant). Lock-free atomics of these sizes work across
// processes on one mapping. Pages are touched only where files turn out bad.
class image_files::bad_file_log {
public:
  explicit bad_file_log(size_t n) : n_(n) {
    bytes_ = sizeof(std::atomic<int64_t>) * (1 + n) + n;
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ACTORCH_CHECK(p != MAP_FAILED, "image_files: cannot map the shared log of bad files (", bytes_,
                  " bytes): ", std::strerror(errno));
    base_ = static_cast<char*>(p);
    static_assert(std::atomic<int64_t>::is_always_lock_free &&
                  std::atomic<char>::is_always_lock_free);
    new (base_) std::atomic<int64_t>(0);
    for (size_t i = 0; i < n; ++i)
      new (order(i)) std::atomic<int64_t>(-1);
    // (the flags are the mapping's zeros: not bad)
  }
  ~bad_file_log() { ::munmap(base_, bytes_); }
  bad_file_log(const bad_file_log&) = delete;
  bad_file_log& operator=(const bad_file_log&) = delete;

  bool is_bad(size_t i) const { return flag(i)->load(std::memory_order_acquire) != 0; }
  void mark(size_t i) {
    if (flag(i)->exchange(1, std::memory_order_acq_rel) != 0)
      return; // another worker logged it
    const int64_t slot = count()->fetch_add(1, std::memory_order_acq_rel);
    order(size_t(slot))->store(int64_t(i), std::memory_order_release);
  }
  std::vector<int64_t> found() const {
    std::vector<int64_t> out;
    const int64_t k = count()->load(std::memory_order_acquire);
    for (int64_t s = 0; s < k && s < int64_t(n_); ++s)
      if (const int64_t i = order(size_t(s))->load(std::memory_order_acquire); i >= 0)
        out.push_back(i);
    return out;
  }

private:
  std::atomic<int64_t>* count() const { return reinterpret_cast<std::atomic<int64_t>*>(base_); }
  std::atomic<int64_t>* order(size_t s) const { return count() + 1 + s; }
  std::atomic<char>* flag(size_t i) const {
    return reinterpret_cast<std::atomic<char>*>(base_ + sizeof(std::atomic<int64_t>) * (1 + n_) +
                                                i);
  }

  size_t n_;
  size_t bytes_;
  char* base_;
};

image_files::image_files(std::vector<std::string> paths, std::vector<int64_t> labels,
                         image_dataset_options options)
    : paths_(std::move(paths)), labels_(std::move(labels)), options_(std::move(options)),
      bad_(options_.skip_bad_files ? std::make_shared<bad_file_log>(paths_.size()) : nullptr) {
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
    if (bad_->is_bad(size_t(i)))
      continue;
    try {
      return load(i);
    } catch (const std::exception&) {
      bad_->mark(size_t(i));
    }
  }
  ACTORCH_FAIL("image_files: none of the ", n,
               " files could be loaded (skip_bad_files), the first "
               "being ",
               paths_.empty() ? std::string("none") : paths_[0]);
}

std::vector<std::string> image_files::bad_files() const {
  std::vector<std::string> out;
  if (bad_)
    for (const int64_t i : bad_->found())
      out.push_back(paths_[size_t(i)]);
  return out;
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
