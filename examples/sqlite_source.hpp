// An example of a user's data source actor: samples stored in an SQLite table, served to the
// data loader through actors/interfaces.hpp's source_actor instead of the dataset workers.
// Table layout: samples(id INTEGER PRIMARY KEY, label INTEGER, features BLOB of float32).
// Row id i is sample index i.
#pragma once

#include <string>
#include <vector>

#include "actors/interfaces.hpp"

namespace actorch::examples {

/// Creates (or replaces) `path` with one row per sample: features[i] (float32) and labels[i].
void write_sqlite_samples(const std::string& path, const std::vector<std::vector<float>>& features,
                          const std::vector<int64_t>& labels);

/// Rows in the samples table of `path`.
int64_t sqlite_sample_count(const std::string& path);

/// A detached actor (SQLite calls block) that answers each index batch with the rows' samples,
/// (features float32 [D], label int), uncollated: the loader collates them. A missing row or
/// an SQLite failure comes back as the batch's error, naming the index.
actors::source_actor spawn_sqlite_source(caf::actor_system& sys, const std::string& path);

} // namespace actorch::examples
