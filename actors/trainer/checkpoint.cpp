#include "actors/trainer/checkpoint.hpp"

#include <sstream>

#include "base/parse.hpp"
#include "core/serialize/checkpoint.hpp"

namespace actorch::actors {

namespace {

// The loader position in checkpoint metadata: "epoch;b0,b1,...;seed:offset;seed:offset|-".
std::string encode_loader_state(const data::loader_state& s) {
  std::ostringstream os;
  os << s.epoch << ';';
  for (size_t i = 0; i < s.delivered.size(); ++i)
    os << (i ? "," : "") << s.delivered[i];
  os << ';' << s.loader_generator.seed << ':' << s.loader_generator.offset << ';';
  if (s.sampler_generator)
    os << s.sampler_generator->seed << ':' << s.sampler_generator->offset;
  else
    os << '-';
  return os.str();
}

data::loader_state decode_loader_state(const std::string& text, const std::string& path) {
  const std::string what = "train_data_parallel: " + path + ": the \"loader\" metadata \"" + text +
                           "\" (epoch;indices;seed:offset;seed:offset|-)";
  auto split = [](std::string_view s, char sep) {
    std::vector<std::string_view> out;
    for (size_t pos = 0;;) {
      const size_t at = s.find(sep, pos);
      out.push_back(s.substr(pos, at == std::string_view::npos ? s.npos : at - pos));
      if (at == std::string_view::npos)
        return out;
      pos = at + 1;
    }
  };
  const auto parts = split(text, ';');
  ACTORCH_CHECK(parts.size() == 4, what, " has ", parts.size(), " fields, not 4");
  auto gen_state = [&](std::string_view p, const char* field) {
    const auto seed_offset = split(p, ':');
    ACTORCH_CHECK(seed_offset.size() == 2, what, ": the ", field, " is not seed:offset");
    return generator::state{parse_uint(seed_offset[0], what + ", " + field + " seed"),
                            parse_uint(seed_offset[1], what + ", " + field + " offset")};
  };
  data::loader_state s;
  s.epoch = parse_int(parts[0], what + ", epoch", 0);
  if (!parts[1].empty())
    for (std::string_view item : split(parts[1], ','))
      s.delivered.push_back(parse_int(item, what + ", a delivered index", 0));
  s.loader_generator = gen_state(parts[2], "loader generator");
  if (parts[3] != "-")
    s.sampler_generator = gen_state(parts[3], "sampler generator");
  return s;
}

int64_t meta_int(const std::map<std::string, std::string>& meta, const char* key,
                 const std::string& path) {
  const auto it = meta.find(key);
  ACTORCH_CHECK(it != meta.end(), "train_data_parallel: ", path, " has no \"", key,
                "\" metadata (not a checkpoint written by train_data_parallel)");
  return parse_int(it->second,
                   "train_data_parallel: " + path + ": metadata \"" + std::string(key) + "\"", 0);
}

} // namespace

resume_point load_training_checkpoint(const std::string& path, nn::module& model,
                                      optim::optimizer& opt, bool with_loader) {
  const auto meta = load_checkpoint(path, model, opt);
  resume_point r;
  r.epoch = meta_int(meta, "epoch", path);
  r.step = meta_int(meta, "step", path);
  r.total_steps = meta_int(meta, "total_steps", path);
  if (with_loader) {
    ACTORCH_CHECK(meta.count("loader"), "train_data_parallel: ", path,
                  " has no \"loader\" metadata");
    r.loader = decode_loader_state(meta.at("loader"), path);
    if (meta.count("world_size")) {
      r.data.world_size = meta_int(meta, "world_size", path);
      r.data.position = meta_int(meta, "position", path);
      r.data.segment = meta_int(meta, "segment", path) != 0;
    }
  }
  return r;
}

void save_training_checkpoint(const std::string& path, const nn::module& model,
                              const optim::optimizer_state& opt, int64_t epoch, int64_t step,
                              int64_t total_steps, const data::data_loader* loader,
                              const data_position& data) {
  std::map<std::string, std::string> meta{{"epoch", std::to_string(epoch)},
                                          {"step", std::to_string(step)},
                                          {"total_steps", std::to_string(total_steps)}};
  if (loader) {
    data::loader_state ls = loader->state();
    if (step == 0) { // the next epoch from its start
      ls.epoch = epoch;
      ls.delivered.clear();
    }
    meta["loader"] = encode_loader_state(ls);
    meta["world_size"] = std::to_string(data.world_size);
    meta["position"] = std::to_string(step == 0 ? 0 : data.position);
    meta["segment"] = step != 0 && data.segment ? "1" : "0";
  }
  save_checkpoint(path, model, opt, meta);
}

} // namespace actorch::actors
