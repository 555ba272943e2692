// convert_sync_batchnorm (sync_batch_norm.hpp).
#include "comm/ddp/sync_batch_norm.hpp"

#include "core/nn/layers.hpp"

namespace actorch::dist {

int convert_sync_batchnorm(nn::module& root, std::shared_ptr<replica_group> group) {
  ACTORCH_CHECK(group != nullptr, "convert_sync_batchnorm: the replica group is null");
  int converted = 0;
  if (auto* bn = dynamic_cast<nn::batch_norm1d*>(&root)) {
    bn->sync_statistics([group](const tensor& t) {
      work w = group->all_reduce(t, reduce_op::sum);
      w.wait();
      return w.result().at(0).clone(); // the result may be shared by local replicas
    });
    ++converted;
  }
  for (const auto& child : root.children())
    converted += convert_sync_batchnorm(*child, group);
  return converted;
}

} // namespace actorch::dist
