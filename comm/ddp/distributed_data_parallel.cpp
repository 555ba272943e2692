// distributed_data_parallel: construction-time checks and broadcasts, the forward hook into
// the reducer, buffer broadcasts.
#include "comm/ddp/distributed_data_parallel.hpp"

#include <sstream>

#include "comm/ddp/join.hpp"

#include "base/error.hpp"
#include "comm/collective_tag.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/ops/factory.hpp"

namespace actorch::dist {

namespace {

// FNV-1a of a parameter name, kept to 62 bits so that it survives the int64 sums.
int64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s)
    h = (h ^ c) * 1099511628211ull;
  return int64_t(h >> 2);
}

// One parameter's description inside a signature row.
struct param_sig {
  int64_t name = 0;
  int64_t dtype = 0;
  shape_t shape;
};

// A row: count, then per parameter: name hash, dtype, ndim, sizes.
std::vector<param_sig> decode(const int64_t* row, int64_t width) {
  std::vector<param_sig> out;
  int64_t k = 0;
  auto next = [&] { return k < width ? row[k++] : int64_t(-1); };
  const int64_t n = next();
  for (int64_t i = 0; i < n && k < width; ++i) {
    param_sig s;
    s.name = next();
    s.dtype = next();
    const int64_t nd = next();
    for (int64_t d = 0; d < nd; ++d)
      s.shape.push_back(next());
    out.push_back(std::move(s));
  }
  return out;
}

} // namespace

std::optional<device> resolve_ddp_devices(const std::set<device>& module_devices,
                                          const std::vector<device>& device_ids,
                                          const std::optional<device>& output_device) {
  std::set<device_type> types;
  for (const device& d : module_devices)
    types.insert(d.type);
  ACTORCH_CHECK(types.size() <= 1,
                "DistributedDataParallel's input module must be on the same "
                "type of devices, but input module parameters locate in ",
                devices_str(module_devices), ".");
  ACTORCH_CHECK(device_ids.size() <= 1, "device_ids can only be None or contain a single element.");
  const bool cpu = !module_devices.empty() && module_devices.begin()->is_cpu();
  if (device_ids.empty() || cpu || module_devices.size() > 1) {
    std::string ids = "None";
    if (!device_ids.empty())
      ids = "[" + device_ids[0].str() + "]";
    ACTORCH_CHECK(device_ids.empty() && !output_device,
                  "DistributedDataParallel device_ids and output_device arguments only work with "
                  "single-device/multiple-device GPU modules or CPU modules, but got device_ids ",
                  ids, ", output_device ", output_device ? output_device->str() : "None",
                  ", and module parameters ", devices_str(module_devices), ".");
    return std::nullopt;
  }
  ACTORCH_CHECK(device_ids[0] == *module_devices.begin(), "DistributedDataParallel: device_ids [",
                device_ids[0].str(), "] is not the device of the module's parameters (",
                module_devices.begin()->str(),
                "); move the module there first, as torch's "
                "tutorials do with model.to(device_ids[0])");
  return output_device.value_or(device_ids[0]);
}

void verify_replica_parameters(replica_group& g, const nn::named_tensors& params) {
  std::vector<int64_t> row{int64_t(params.size())};
  for (const auto& [name, p] : params) {
    row.push_back(name_hash(name));
    row.push_back(int64_t(p.dtype()));
    row.push_back(p.dim());
    for (int64_t s : p.sizes())
      row.push_back(s);
  }
  tensor mine = empty({int64_t(row.size())}, {.dtype = dtype::int64});
  std::copy(row.begin(), row.end(), mine.data_ptr<int64_t>());
  const tensor rows = all_gather_rows(g, mine, -1).contiguous();
  const int64_t width = rows.size(1);
  const auto* data = rows.data_ptr<int64_t>();
  const std::vector<param_sig> ref = decode(data, width);
  std::ostringstream problems;
  int found = 0;
  for (int r = 1; r < g.size(); ++r) {
    const std::vector<param_sig> other = decode(data + r * width, width);
    if (other.size() != ref.size()) {
      problems << "\n  rank 0 has " << ref.size() << " parameters but rank " << r << " has "
               << other.size();
      ++found;
      continue;
    }
    for (size_t i = 0; i < ref.size() && found < 8; ++i) {
      const std::string& name = i < params.size() ? params[i].first : "?";
      if (other[i].name != ref[i].name) {
        problems << "\n  parameter " << i << " ('" << name << "' here) has another name on rank "
                 << (g.rank() == 0 ? r : 0) << " than on rank " << (g.rank() == 0 ? 0 : r);
        ++found;
      } else if (other[i].shape != ref[i].shape || other[i].dtype != ref[i].dtype) {
        problems << "\n  '" << name << "' has shape " << shape_str(ref[i].shape) << " ("
                 << dtype_name(dtype(ref[i].dtype)) << ") on rank 0 but "
                 << shape_str(other[i].shape) << " (" << dtype_name(dtype(other[i].dtype))
                 << ") on rank " << r;
        ++found;
      }
    }
  }
  ACTORCH_CHECK(found == 0,
                "DistributedDataParallel: the replicas' parameters differ in name, "
                "shape or dtype (every replica must build the same model):",
                problems.str());
}

distributed_data_parallel::distributed_data_parallel(std::shared_ptr<nn::module> module,
                                                     std::shared_ptr<replica_group> replicas,
                                                     ddp_options opts)
    : module_(std::move(module)), group_(std::move(replicas)), opts_(opts) {
  ACTORCH_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  ACTORCH_CHECK(group_ != nullptr, "DistributedDataParallel: the replica group is null");
  const nn::named_tensors named = module_->named_parameters();
  std::set<device> devices;
  for (const auto& [name, p] : named)
    devices.insert(p.device());
  opts_.output_device = resolve_ddp_devices(devices, opts_.device_ids, opts_.output_device);
  verify_replica_parameters(*group_, named);
  // Rank 0's parameters and buffers everywhere, so the replicas start identical.
  broadcast_from_rank0(*group_, module_->parameters());
  sync_buffers();
  std::vector<tensor> params;
  std::vector<std::string> names;
  for (const auto& [name, p] : named) {
    params.push_back(p);
    names.push_back(name);
  }
  reducer_ = std::make_unique<dist::reducer>(
      std::move(params), std::move(names), group_,
      reducer_options{.bucket_cap_mb = opts_.bucket_cap_mb,
                      .find_unused_parameters = opts_.find_unused_parameters,
                      .gradient_as_bucket_view = opts_.gradient_as_bucket_view,
                      .adaptive_buckets = opts_.adaptive_buckets});
}

nn::named_tensors distributed_data_parallel::state_dict() const {
  nn::named_tensors out = module_->state_dict();
  for (auto& [name, t] : out)
    name.insert(0, "module.");
  return out;
}

nn::incompatible_keys distributed_data_parallel::load_state_dict(nn::named_tensors state,
                                                                 bool strict) {
  nn::consume_ddp_prefix(state, *module_);
  return module_->load_state_dict(state, strict);
}

void distributed_data_parallel::sync_buffers() {
  collective_tag tag("DDP buffers");
  const std::vector<tensor> buffers = module_->buffers();
  if (!buffers.empty())
    broadcast_from_rank0(*group_, buffers);
}

tensor distributed_data_parallel::forward(const tensor& input) {
  if (join_ != nullptr && grad_enabled() && sync_)
    join_->notify_training();
  if (opts_.broadcast_buffers && module_->is_training() && group_->size() > 1)
    sync_buffers();
  // With device_ids, the input goes to the module's device first, as torch's to_kwargs.
  tensor out = module_->forward(opts_.device_ids.empty() ? input : input.to(opts_.device_ids[0]));
  if (grad_enabled() && sync_)
    reducer_->prepare_for_backward({out});
  return out;
}

} // namespace actorch::dist
