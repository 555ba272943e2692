// Datasets of image files, as torchvision's: image_files (a list of files, with labels or not)
// and image_folder (ImageFolder: one folder per class). Each get() reads the file, decodes it
// and runs the transform in the calling loader worker, without the GIL when the transform is
// actorch's (core/data/vision/transforms.hpp).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/data/dataset.hpp"
#include "core/data/vision/transforms.hpp"

namespace actorch::data::vision {

struct image_dataset_options {
  /// torchvision's `transform`, as steps (Compose's list); empty: the sample's image is the
  /// decoded uint8 (H, W, 3) tensor.
  std::vector<step> transform = {};
  /// Instead of `transform`: user code taking the decoded image (Python's transforms on PIL
  /// images, for one) and returning the sample's image.
  std::function<sample(image)> image_transform = {};
  /// torchvision's `target_transform`, on the label as an int64 scalar tensor.
  transforms::transform target_transform = {};
  /// torchvision's `loader`: reads a file into an image, instead of actorch's decoder (which
  /// reads JPEG and PNG files by their content).
  std::function<image(const std::string&)> loader = {};
  /// A file that cannot be read or decoded is skipped: get() gives the next loadable file's
  /// sample (in the dataset's order, wrapping around) and the file is counted in bad_files().
  /// Without it such a file is an error naming it.
  bool skip_bad_files = false;
  /// Decode only what a leading RandomResizedCrop or Resize needs (Note [Fused image path]).
  bool fuse = true;
};

/// A list of image files: sample i is the transformed image of paths[i], or (image, label) as
/// int64 when labels are given (one per path).
class image_files : public dataset {
public:
  image_files(std::vector<std::string> paths, std::vector<int64_t> labels,
              image_dataset_options options);
  int64_t size() const override { return int64_t(paths_.size()); }
  sample get(int64_t index) const override;

  const std::vector<std::string>& paths() const { return paths_; }
  const std::vector<int64_t>& labels() const { return labels_; }
  const image_dataset_options& options() const { return options_; }
  /// With skip_bad_files: the files found unloadable so far, in the order found, each once,
  /// by any worker: threads or worker processes (Note [Bad files across processes]).
  std::vector<std::string> bad_files() const;

private:
  sample load(int64_t index) const;
  class bad_file_log;

  std::vector<std::string> paths_;
  std::vector<int64_t> labels_;
  image_dataset_options options_;
  std::shared_ptr<bad_file_log> bad_; // with skip_bad_files
};

/// torchvision's IMG_EXTENSIONS: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp (actorch's
/// decoder reads JPEG and PNG; a file of another format is a bad file).
const std::vector<std::string>& image_extensions();

/// What ImageFolder finds under a root (torchvision's find_classes and make_dataset).
struct folder_listing {
  std::vector<std::string> classes;
  std::map<std::string, int64_t> class_to_idx;
  std::vector<std::string> paths;
  std::vector<int64_t> labels;
};
folder_listing list_image_folder(const std::string& root,
                                 const std::vector<std::string>& extensions,
                                 const std::function<bool(const std::string&)>& is_valid_file);

/// ImageFolder: root/<class>/**/<file>, classes the sorted names of root's folders, samples
/// (path, class index) in torchvision's order (classes sorted; within one, folders walked in
/// sorted order following links, files sorted). A file is taken when `is_valid_file` says so,
/// or else when its name ends (case-insensitively) with one of `extensions`. Throws
/// actorch::error, as torchvision's FileNotFoundError, for a root without class folders or a
/// class without a file.
class image_folder : public image_files {
public:
  image_folder(const std::string& root, image_dataset_options options,
               std::vector<std::string> extensions = image_extensions(),
               std::function<bool(const std::string&)> is_valid_file = {});

  const std::string& root() const { return root_; }
  const std::vector<std::string>& classes() const { return classes_; }
  const std::map<std::string, int64_t>& class_to_idx() const { return class_to_idx_; }

private:
  image_folder(std::string root, folder_listing l, image_dataset_options options);

  std::string root_;
  std::vector<std::string> classes_;
  std::map<std::string, int64_t> class_to_idx_;
};

} // namespace actorch::data::vision
